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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import onnx

from onnxsurgery.lazy import lazy_module
from onnxsurgery.model.dtypes import np_dtype
from onnxsurgery.model.io import (
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

if TYPE_CHECKING:  # mypy reads the module; a lazy module's attributes are no types to it
    import onnxruntime as ort
else:
    #: ONNX Runtime, imported on first use, like ``validation.runtime.ort`` (the same module).
    ort = lazy_module("onnxruntime")


#: A weight handed to ORT: its array and the OrtValue over it (None: its bytes, for a type
#: that goes to ORT inside the model), or where it lies in a file ORT maps. The OrtValue is
#: named as text: reading ``ort.OrtValue`` here would import onnxruntime with onnxsurgery (see
#: ``ort`` above).
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
    split = _Split()
    for stub in bare.graph.initializer:
        original = originals[stub.name]
        if stub.data_location != onnx.TensorProto.EXTERNAL:
            continue
        if on_disk(original):
            split.from_file(stub, disk_weight(original))
        elif original.data_location != onnx.TensorProto.EXTERNAL:
            _hand_over(stub, original, shared.get(stub.name), split)
        elif is_placeholder(original):
            _fill_placeholder(stub, shared.get(stub.name), split)
    folder = point_at_disk(split.from_disk) if split.from_disk else None
    return bare, split.weights, split.arrays, folder


@dataclass
class _Split:
    """What :func:`split_weights` gathers: OrtValues by name for ORT, every weight handed over
    by name (for a later session to share), and the tensors ORT maps from their data file."""

    weights: dict[str, ort.OrtValue] = field(default_factory=dict)
    arrays: dict[str, SharedWeight] = field(default_factory=dict)
    from_disk: list[tuple[onnx.TensorProto, DiskWeight]] = field(default_factory=list)

    def from_file(self, stub: onnx.TensorProto, weight: DiskWeight) -> None:
        """``stub`` (in the copy ORT parses) is mapped from where ``weight`` lies."""
        self.arrays[stub.name] = weight
        self.from_disk.append((stub, weight))

    def as_value(self, name: str, array: np.ndarray, value: ort.OrtValue) -> None:
        """The weight ``name`` goes to ORT as the OrtValue ``value`` over ``array``."""
        self.arrays[name] = (array, value)
        self.weights[name] = value


def _hand_over(
    stub: onnx.TensorProto,
    original: onnx.TensorProto,
    known: SharedWeight | None,
    split: _Split,
) -> None:
    """Hand ORT the weight ``original`` (``stub`` its placeholder): a float, double or float16
    weight as an OrtValue over its bytes (``known``'s, where it holds the same bytes), a weight
    of another type back in the model's bytes, kept for a weightless copy's placeholder."""
    if stub.data_type not in _NUMPY_WEIGHTS:
        stub.CopyFrom(original)
        # kept for a weightless copy's placeholder of this name (its bytes, no OrtValue)
        split.arrays[stub.name] = (np.frombuffer(original.raw_data, dtype=np.uint8), None)
        return
    array = np.frombuffer(original.raw_data, dtype=np_dtype(stub.data_type))
    array = array.reshape(tuple(stub.dims))
    if isinstance(known, tuple) and known[1] is not None and _same_bytes(known[0], array):
        split.as_value(stub.name, known[0], known[1])
    else:
        split.as_value(stub.name, array, ort.OrtValue.ortvalue_from_numpy(array))


def _fill_placeholder(stub: onnx.TensorProto, known: SharedWeight | None, split: _Split) -> None:
    """Fill a weightless copy's placeholder ``stub`` with ``known``, the weight of its name an
    earlier session was handed: from its data file, as its OrtValue, or (a type ORT gets in the
    model's bytes) its bytes. ValueError where ``known`` does not fit it."""
    if isinstance(known, FileWeight):
        raise ValueError(
            f"weight {stub.name!r} lies in a mapped file, others in the model's own "
            "data file: a session maps one folder"
        )
    if known is None or not _fills(known, stub):
        raise ValueError(f"weight {stub.name!r} is a placeholder no shared weight fills")
    if isinstance(known, DiskWeight):
        split.from_file(stub, known)
        return
    array, value = known
    if value is not None:
        split.as_value(stub.name, array, value)
        return
    split.arrays[stub.name] = known  # a type handed to ORT in the model's bytes
    stub.ClearField("external_data")
    stub.ClearField("data_location")
    stub.raw_data = array.tobytes()


def _fills(
    known: tuple[np.ndarray, ort.OrtValue | None] | DiskWeight, stub: onnx.TensorProto
) -> bool:
    """Whether ``known`` is a weight of ``stub``'s type and dims (bytes alone: as many)."""
    if isinstance(known, DiskWeight):
        return (known.data_type, known.dims) == (stub.data_type, tuple(stub.dims))
    array, value = known
    if value is None:
        return (array.nbytes, array.ndim) == (tensor_nbytes(stub), 1)
    return (array.shape, array.dtype) == (tuple(stub.dims), np_dtype(stub.data_type))


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    """Same dtype, shape and bytes (NaN payloads included, unlike ``==``)."""
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and np.array_equal(a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8))
    )
