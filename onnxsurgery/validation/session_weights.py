"""How a session gets a model's weights without copying them: the weights ``create_session``
hands ONNX Runtime, and what a later session over a rewritten copy can share of them.

:func:`split_weights` takes a model apart into what ORT parses (a weightless copy) and its
weights: large float weights as OrtValues over the model's own bytes
(``SessionOptions.add_external_initializers``), weights the loader left on disk named where they
lie in their data file (ORT maps them from there), and the placeholders of a weightless copy
filled with what an earlier session was given (:func:`session_weights`). Models too big for
that go by path (:func:`goes_by_path`) or through a file ORT maps
(``validation/mapped_weights.py``).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx

from onnxsurgery.lazy import lazy_module
from onnxsurgery.model.dtypes import np_dtype
from onnxsurgery.model.io import (
    PLACEHOLDER,
    is_large,
    is_placeholder,
    tensor_nbytes,
    weight_stub,
    weightless,
)
from onnxsurgery.model.tensors import on_disk
from onnxsurgery.validation.mapped_weights import (
    DiskWeight,
    FileWeight,
    disk_weight,
    point_at_disk,
)

__all__ = ["SharedWeight", "goes_by_path", "session_weights", "split_weights"]

#: ONNX Runtime, imported on first use, like ``validation.runtime.ort`` (the same module).
ort = lazy_module("onnxruntime")


#: A weight handed to ORT: its array and the OrtValue over it (None: its bytes, for a type
#: that goes to ORT inside the model), or where it lies in a file ORT maps. The OrtValue is
#: named as text: reading ``ort.OrtValue`` here would import onnxruntime with onnxsurgery (see
#: ``ort`` below).
SharedWeight = tuple[np.ndarray, "ort.OrtValue | None"] | FileWeight | DiskWeight


def session_weights(session: ort.InferenceSession | None) -> Mapping[str, SharedWeight]:
    """The weights ``create_session`` handed to ORT for ``session`` (empty for any other), for
    ``create_session(share_with=...)`` once ``session`` itself is gone."""
    return getattr(session, "_onnxsurgery_arrays", None) or {}


#: Weight types handed to ORT as OrtValues over numpy arrays (others stay in the model bytes).
_NUMPY_WEIGHTS = frozenset(
    (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16)
)


def goes_by_path(model: onnx.ModelProto) -> bool:
    """Whether ``create_session`` hands ORT this model by path, weights and all: still over
    2 GB once the weights it passes as OrtValues (float, double, float16) are taken out.

    True or false alike for a model and its weightless copy: a placeholder of another type
    (bfloat16) counts, since its bytes go back into the model ORT parses."""
    return is_large(model, left_out=_passed_as_ortvalue)


def _passed_as_ortvalue(tensor: onnx.TensorProto) -> bool:
    """Handed to ORT as an OrtValue, or mapped from the file the model was loaded from."""
    return on_disk(tensor) or (
        tensor.data_type in _NUMPY_WEIGHTS
        and (is_placeholder(tensor) or weight_stub(tensor) is not None)
    )


def external(tensor: onnx.TensorProto) -> bool:
    return tensor.data_location == onnx.TensorProto.EXTERNAL


def split_weights(
    model: onnx.ModelProto,
    shared: Mapping[str, SharedWeight],
    made: onnx.ModelProto | None = None,
) -> tuple[onnx.ModelProto, dict[str, ort.OrtValue], dict[str, SharedWeight], str | None]:
    """The model without its large weights' data, those weights as OrtValues by name,
    (array, OrtValue) by name for a later session to share, and the folder ORT maps weights
    from (None when none of the weights lies on disk).

    A weight the loader left on disk (or a placeholder ``shared`` fills with a
    :class:`DiskWeight`) is named, in the copy ORT parses, where it lies in its data file:
    ORT maps it from there (:func:`point_at_disk`).

    ORT then parses a small model and takes each weight from a numpy view of the model's own
    bytes (``SessionOptions.add_external_initializers``), instead of a serialized copy of the
    whole model that it parses into another. A weight equal, byte for byte, to one in ``shared``
    (same name, type and shape) is that entry's OrtValue. ``made``: ``weightless(model)``
    already made (copied here, since the copy is filled in).
    """
    if made is None:
        bare = weightless(model)
    else:
        bare = onnx.ModelProto()
        bare.CopyFrom(made)
    originals = {t.name: t for t in model.graph.initializer}
    weights: dict[str, ort.OrtValue] = {}
    arrays: dict[str, SharedWeight] = {}
    from_disk: list[tuple[onnx.TensorProto, DiskWeight]] = []
    for k, stub in enumerate(bare.graph.initializer):
        original = originals[stub.name]
        if stub.data_location != onnx.TensorProto.EXTERNAL:
            continue
        if on_disk(original):
            arrays[stub.name] = disk_weight(original)
            from_disk.append((bare.graph.initializer[k], arrays[stub.name]))
            continue
        if original.data_location == onnx.TensorProto.EXTERNAL:
            if original.external_data and original.external_data[0].value == PLACEHOLDER:
                known = shared.get(stub.name)
                if isinstance(known, DiskWeight):
                    if (known.data_type, known.dims) != (stub.data_type, tuple(stub.dims)):
                        raise ValueError(
                            f"weight {stub.name!r} is a placeholder no shared weight fills"
                        )
                    arrays[stub.name] = known
                    from_disk.append((bare.graph.initializer[k], known))
                    continue
                if isinstance(known, FileWeight):
                    raise ValueError(
                        f"weight {stub.name!r} lies in a mapped file, others in the model's own "
                        "data file: a session maps one folder"
                    )
                if known is None or (
                    (known[0].nbytes, known[0].ndim) != (tensor_nbytes(stub), 1)
                    if known[1] is None
                    else (known[0].shape, known[0].dtype)
                    != (tuple(stub.dims), np_dtype(stub.data_type))
                ):
                    raise ValueError(f"weight {stub.name!r} is a placeholder no shared weight fills")
                arrays[stub.name] = known
                if known[1] is None:  # a type handed to ORT in the model's bytes
                    filled = bare.graph.initializer[k]
                    filled.ClearField("external_data")
                    filled.ClearField("data_location")
                    filled.raw_data = known[0].tobytes()
                else:
                    weights[stub.name] = known[1]
            continue
        if stub.data_type not in _NUMPY_WEIGHTS:
            bare.graph.initializer[k].CopyFrom(original)
            # kept for a weightless copy's placeholder of this name (its bytes, no OrtValue)
            arrays[stub.name] = (np.frombuffer(original.raw_data, dtype=np.uint8), None)
            continue
        array = np.frombuffer(original.raw_data, dtype=np_dtype(stub.data_type))
        array = array.reshape(tuple(stub.dims))
        known = shared.get(stub.name)
        if isinstance(known, tuple) and _same_bytes(known[0], array):
            arrays[stub.name] = known
        else:
            arrays[stub.name] = (array, ort.OrtValue.ortvalue_from_numpy(array))
        weights[stub.name] = arrays[stub.name][1]
    return bare, weights, arrays, point_at_disk(from_disk) if from_disk else None


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    """Same dtype, shape and bytes (NaN payloads included, unlike ``==``)."""
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and np.array_equal(a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8))
    )
