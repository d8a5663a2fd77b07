"""What a model's tensors weigh, and the placeholders that stand in for weights.

Sizes are counted from each tensor's dims and type, never from its data (reading ``raw_data``
copies it): :func:`tensor_nbytes`, :func:`tensor_bytes`, and :func:`is_large`, whether a model
is too big for one protobuf message and goes by path with external data. A weightless copy
(``model/io.py``) swaps each large floating-point weight for :func:`weight_stub`: a tensor of
the same name, type and dims whose external data names :data:`PLACEHOLDER`.

A weight can also stay *on disk*: the pipeline's loader leaves a large floating-point weight
of a model with external data in its data file and records where it lies, by absolute path
(:func:`on_disk`, :func:`disk_location`); ``model/weights_on_disk.py`` reads, loads and copies
such weights.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator

import onnx

from onnxsurgery.model.dtypes import np_dtype
from onnxsurgery.model.walk import subgraphs

__all__ = [
    "PROTOBUF_LIMIT",
    "EXTERNAL_THRESHOLD",
    "LARGE_MODEL_BYTES",
    "PLACEHOLDER",
    "iter_tensors",
    "tensor_nbytes",
    "tensor_bytes",
    "is_large",
    "is_placeholder",
    "weight_stub",
    "on_disk",
    "disk_location",
    "DISK_TYPES",
]

#: Protobuf cannot serialize a message of 2 GiB or more; such models keep weights outside.
PROTOBUF_LIMIT = 2**31 - 1
#: Tensors at least this large go to the external data file when a model is saved with one.
EXTERNAL_THRESHOLD = 1024


def iter_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """Every tensor a graph holds: initializers, tensor attributes, subgraphs' tensors."""
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
        for sub in subgraphs(node):
            yield from iter_tensors(sub)


_SUB_BYTE_BITS = {
    getattr(onnx.TensorProto, name): bits
    for name, bits in (("INT4", 4), ("UINT4", 4), ("FLOAT4E2M1", 4), ("INT2", 2), ("UINT2", 2))
    if hasattr(onnx.TensorProto, name)
}


def tensor_nbytes(tensor: onnx.TensorProto) -> int:
    """Bytes of a tensor's data, from its dims and type: reading ``raw_data`` would copy it."""
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        for entry in tensor.external_data:
            if entry.key == "length":
                return int(entry.value)
        return 0
    if tensor.data_type == onnx.TensorProto.STRING:
        return sum(len(v) for v in tensor.string_data)
    count = math.prod(tensor.dims)
    if tensor.data_type in _SUB_BYTE_BITS:
        return (count * _SUB_BYTE_BITS[tensor.data_type] + 7) // 8
    try:
        itemsize = np_dtype(tensor.data_type).itemsize
    except (KeyError, TypeError, ValueError):
        itemsize = 1
    return count * itemsize


def tensor_bytes(model: onnx.ModelProto) -> int:
    """Bytes held by the model's tensors (initializers, Constant attributes, subgraphs), counted
    from dims and types, so that no tensor's data is copied to count it."""
    return sum(tensor_nbytes(t) for t in iter_tensors(model.graph))


#: Models whose tensors reach this go by path with external data (protobuf stops at 2 GiB).
LARGE_MODEL_BYTES = PROTOBUF_LIMIT - 64 * 2**20


def is_large(
    model: onnx.ModelProto, *, left_out: Callable[[onnx.TensorProto], bool] | None = None
) -> bool:
    """Too big to pass through protobuf in one message (goes by path with external data).

    A weightless copy's placeholders (``weightless``) carry no data into the message, so they
    do not count: such a copy of a model over 2 GB passes as one small message. ``left_out``:
    the tensors a caller will not put into the message (default: the placeholders)."""
    skip = left_out or is_placeholder
    held = sum(tensor_nbytes(t) for t in iter_tensors(model.graph) if not skip(t))
    return held >= LARGE_MODEL_BYTES


def is_placeholder(tensor: onnx.TensorProto) -> bool:
    """A weightless copy's stand-in for a weight (external data naming ``PLACEHOLDER``)."""
    return tensor.data_location == onnx.TensorProto.EXTERNAL and any(
        entry.key == "location" and entry.value == PLACEHOLDER for entry in tensor.external_data
    )


#: Floating-point tensors the checker and shape inference see without their data (see ``weightless``).
_FLOAT_TYPES = frozenset(
    getattr(onnx.TensorProto, name)
    for name in ("FLOAT", "DOUBLE", "FLOAT16", "BFLOAT16", "COMPLEX64", "COMPLEX128")
)
#: The file every placeholder tensor of a weightless copy names (an empty file beside it).
PLACEHOLDER = "onnxsurgery-weights-placeholder"


#: (name, is repeated) of every TensorProto field a placeholder does not carry over.
_OTHER_TENSOR_FIELDS = tuple(
    (f.name, f.is_repeated)
    for f in onnx.TensorProto.DESCRIPTOR.fields
    if f.name not in ("name", "data_type", "dims", "data_location", "raw_data")
)


def weight_stub(tensor: onnx.TensorProto) -> onnx.TensorProto | None:
    """A data-less stand-in for a large floating-point tensor whose data is exactly its
    ``raw_data`` of the size its dims and type say, or that stays on disk (:func:`on_disk`);
    None for any other tensor.

    The check looks at which fields are set and at the data's length: a tensor with other
    fields, or data of the wrong size, stays as it is and gets the checker's own verdict.
    (``ByteSize()`` would serialize the tensor to measure it: a copy of every weight, on every
    weightless copy.)
    """
    if tensor.data_type not in _FLOAT_TYPES:
        return None
    if on_disk(tensor):
        return _stub(tensor, tensor_nbytes(tensor))
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        return None
    if not (tensor.HasField("raw_data") and tensor.HasField("name")):
        return None
    for name, repeated in _OTHER_TENSOR_FIELDS:  # float_data, doc_string, segment, ...
        if len(getattr(tensor, name)) if repeated else tensor.HasField(name):
            return None
    nbytes = tensor_nbytes(tensor)
    if nbytes < EXTERNAL_THRESHOLD or len(tensor.raw_data) != nbytes:
        return None
    return _stub(tensor, nbytes)


def _stub(tensor: onnx.TensorProto, nbytes: int) -> onnx.TensorProto:
    stub = onnx.TensorProto(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims)
    if tensor.HasField("data_location"):  # set to DEFAULT by onnx when it loads external data
        stub.data_location = tensor.data_location
    stub.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", PLACEHOLDER), ("offset", "0"), ("length", str(nbytes))):
        stub.external_data.add(key=key, value=value)
    return stub


#: Types whose weights the loader may leave on disk (see :func:`on_disk`): those a weightless
#: copy stands in for.
DISK_TYPES = _FLOAT_TYPES


def disk_location(tensor: onnx.TensorProto) -> tuple[str, int, int] | None:
    """(absolute path of the data file, offset, length) of a weight left on disk; else None."""
    if tensor.data_location != onnx.TensorProto.EXTERNAL:
        return None
    fields = {entry.key: entry.value for entry in tensor.external_data}
    location = fields.get("location", "")
    if not os.path.isabs(location):
        return None
    return location, int(fields.get("offset") or 0), int(fields.get("length") or 0)


def on_disk(tensor: onnx.TensorProto) -> bool:
    """A weight the loader left in its data file: external data named by an absolute path.

    A model file can only name its data relative to its own folder (the loader refuses an
    absolute location), so an absolute one is always the loader's record of where the weight
    lies (``read_model_file(..., weights_on_disk=True)``)."""
    return disk_location(tensor) is not None
