"""Weights left on disk: a model's large weights kept in the data file it was loaded from.

The pipeline's loader (``read_model_file(..., weights_on_disk=True)``) leaves each weight that
:func:`may_stay_on_disk` picks in its external-data file and records where it lies, by absolute
path (:func:`leave_on_disk`; ``model.tensors.on_disk`` tells such a weight). Its bytes are read
only where something needs them: :func:`tensor_data`, :func:`tensor_array` (planning reads a
weight's values), :func:`load_weights` (a pass that does not declare ``weights_on_disk``, the
model a report hands over); the save copies them file to file (:func:`copy_from_disk`), and ONNX
Runtime maps them from their file (``validation/mapped_weights.py``). A model over 2 GB then
costs the memory of its graph until a session runs, not of its weights.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

import numpy as np
import onnx
from onnx import numpy_helper

from onnxsurgery.errors import ModelLoadError, ModelSaveError
from onnxsurgery.model.dtypes import np_dtype
from onnxsurgery.model.tensors import (
    DISK_TYPES,
    EXTERNAL_THRESHOLD,
    disk_location,
    iter_tensors,
    on_disk,
    tensor_nbytes,
)
from onnxsurgery.model.walk import all_names, subgraphs

__all__ = [
    "copy_from_disk",
    "has_weights_on_disk",
    "leave_on_disk",
    "load_tensor",
    "load_weights",
    "may_stay_on_disk",
    "tensor_array",
    "tensor_data",
]

#: Types whose raw bytes numpy reads as they are (little-endian, as ONNX stores them).
_NUMPY_NATIVE = frozenset((onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16))


def may_stay_on_disk(model: onnx.ModelProto) -> set[str]:
    """Names of the main-graph weights a loader may leave in their data file: large
    floating-point initializers with plain external data (location, offset and a length that
    fits their dims and type) that no subgraph reads (a tool may move such a weight into the
    subgraph, where a weightless copy would not stand in for it)."""
    in_subgraphs: set[str] = set()
    for node in model.graph.node:
        for sub in subgraphs(node):
            in_subgraphs |= all_names(sub)
    names = set()
    for tensor in model.graph.initializer:
        if (
            tensor.data_location != onnx.TensorProto.EXTERNAL
            or tensor.data_type not in DISK_TYPES
            or tensor.name in in_subgraphs
            or not tensor.name
            or {e.key for e in tensor.external_data} - {"location", "offset", "length"}
            or tensor.HasField("segment")
        ):
            continue
        lengths = [e.value for e in tensor.external_data if e.key == "length"]
        nbytes = tensor_nbytes(onnx.TensorProto(data_type=tensor.data_type, dims=tensor.dims))
        if nbytes >= EXTERNAL_THRESHOLD and lengths and int(lengths[0]) == nbytes:
            names.add(tensor.name)
    return names


def leave_on_disk(tensor: onnx.TensorProto, base: Path) -> None:
    """Record, in place, where ``tensor``'s data lies: its file's absolute (resolved) path."""
    for entry in tensor.external_data:
        if entry.key == "location":
            entry.value = str((base / entry.value).resolve())
    if not any(e.key == "offset" for e in tensor.external_data):
        tensor.external_data.add(key="offset", value="0")


def has_weights_on_disk(model: onnx.ModelProto) -> bool:
    """Whether any weight of ``model`` was left in its data file (``model.tensors.on_disk``)."""
    return any(on_disk(t) for t in iter_tensors(model.graph))


def load_tensor(tensor: onnx.TensorProto) -> None:
    """Read a weight left on disk into ``tensor``, the fields set as onnx's loader sets them."""
    data = tensor_data(tensor)
    del tensor.external_data[:]
    tensor.data_location = onnx.TensorProto.DEFAULT
    tensor.raw_data = data


def load_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """Read, in place, every weight left on disk into ``model``; returns ``model``. A model
    with none is returned as it is. Raises ModelLoadError when a data file cannot give them."""
    for tensor in iter_tensors(model.graph):
        if on_disk(tensor):
            load_tensor(tensor)
    return model


#: Bytes copied per read and write where the system cannot copy file to file itself.
_COPY_CHUNK = 1 << 24


def copy_from_disk(tensor: onnx.TensorProto, data: BinaryIO) -> tuple[int, int]:
    """Append a weight left on disk to the open data file ``data``, file to file (the kernel's
    ``copy_file_range`` where it can; never through the heap in one piece). Returns (offset,
    length) in ``data``."""
    source, offset, length = disk_location(tensor)  # type: ignore[misc]
    data.flush()
    start = data.tell()
    done = 0
    with open(source, "rb") as src:
        if os.fstat(src.fileno()).st_size < offset + length:
            raise ModelSaveError(
                f"weight {tensor.name!r}: its data file {source} no longer holds bytes "
                f"{offset}..{offset + length}; the file changed since the model was loaded"
            )
        try:
            while done < length:
                n = os.copy_file_range(
                    src.fileno(), data.fileno(), length - done, offset + done, start + done
                )
                if not n:
                    break
                done += n
        except (AttributeError, OSError):  # no copy_file_range here, or not between these files
            src.seek(offset + done)
            data.seek(start + done)
            while done < length:
                chunk = src.read(min(_COPY_CHUNK, length - done))
                if not chunk:
                    break
                data.write(chunk)
                done += len(chunk)
            data.flush()
    if done != length:
        raise ModelSaveError(f"weight {tensor.name!r}: its data file {source} ended early")
    data.seek(start + length)
    return start, length


def tensor_data(tensor: onnx.TensorProto) -> bytes:
    """The bytes of a weight left on disk, read from its file.

    Raises ModelLoadError naming the weight and the file when the file can no longer give
    them (removed, truncated or replaced since the model was loaded)."""
    where = disk_location(tensor)
    if where is None:
        raise ValueError(f"tensor {tensor.name!r} is not a weight left on disk")
    path, offset, length = where
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read(length)  # one buffer, handed on as it is
    except OSError as exc:
        raise ModelLoadError(
            f"weight {tensor.name!r}: cannot read its data from {path}: {exc.strerror or exc}"
        ) from None
    if len(data) != length:
        raise ModelLoadError(
            f"weight {tensor.name!r}: its data file {path} ends at byte {offset + len(data)}, "
            f"before the {length} bytes at offset {offset} the model was loaded with; the file "
            "changed since the model was loaded"
        )
    return data


def tensor_array(tensor: onnx.TensorProto) -> np.ndarray:
    """``numpy_helper.to_array(tensor)``, for a weight left on disk too (read from its file)."""
    if not on_disk(tensor):
        return numpy_helper.to_array(tensor)
    if tensor.data_type in _NUMPY_NATIVE:  # a view of the one buffer read, read-only as onnx's
        dtype = np_dtype(tensor.data_type)
        return np.frombuffer(tensor_data(tensor), dtype=dtype).reshape(tuple(tensor.dims))
    loaded = onnx.TensorProto(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims)
    loaded.raw_data = tensor_data(tensor)
    return numpy_helper.to_array(loaded)
