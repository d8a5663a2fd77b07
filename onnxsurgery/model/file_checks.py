"""Every way a model file can be wrong that onnx's own checker lets through.

The loader (``model/io.py``) reads a file with :func:`read_bytes` (not there, a folder, a FIFO,
over protobuf's 2 GiB) and checks what it parsed: text that is not UTF-8 (:func:`bad_text`),
element types ONNX does not define and negative dims (:func:`check_graph`), external data that
is missing, too short or outside the model's folder (:func:`check_external_data`). Each problem
is one :class:`~onnxsurgery.errors.ModelLoadError` line naming the file and the tensor.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import cast

import onnx
from google.protobuf.descriptor import Descriptor
from google.protobuf.message import Message

from onnxsurgery.errors import ModelLoadError
from onnxsurgery.files import shown
from onnxsurgery.model.tensors import PROTOBUF_LIMIT, iter_tensors
from onnxsurgery.model.walk import subgraphs

__all__ = [
    "bad_text",
    "check_external_data",
    "check_file",
    "check_graph",
    "external_tensors",
    "read_bytes",
]


def external_tensors(model: onnx.ModelProto) -> list[onnx.TensorProto]:
    return [
        t
        for t in iter_tensors(model.graph)
        if t.HasField("data_location") and t.data_location == onnx.TensorProto.EXTERNAL
    ]


def _external_field(tensor: onnx.TensorProto, key: str, where: str) -> int | None:
    """offset/length of an external-data entry as a non-negative int, or None when absent."""
    for entry in tensor.external_data:
        if entry.key == key:
            try:
                value = int(entry.value)
            except ValueError:
                raise ModelLoadError(f"{where}: its {key} {shown(entry.value)} is not an integer") from None
            if value < 0:
                raise ModelLoadError(f"{where}: its {key} {value} is negative")
            return value
    return None


def check_external_data(model: onnx.ModelProto, base: Path, where: str) -> None:
    base = base.resolve()
    for tensor in external_tensors(model):
        locations = [e.value for e in tensor.external_data if e.key == "location"]
        location = locations[0] if locations else ""
        here = f"{where} initializer {shown(tensor.name)} keeps its data in {shown(location)}"
        if not location:
            raise ModelLoadError(f"{here}, which is empty")
        if "\0" in location:
            raise ModelLoadError(f"{here}, a name with a NUL byte")
        offset = _external_field(tensor, "offset", here) or 0
        length = _external_field(tensor, "length", here)
        if os.path.isabs(location):
            raise ModelLoadError(
                f"{here}, an absolute path; external data must sit in the model's folder {base}"
            )
        target = (base / location).resolve()
        if base not in target.parents and target != base:
            raise ModelLoadError(
                f"{here}, which points outside the model's folder {base}; "
                "move the data file beside the model"
            )
        if not target.is_file():
            raise ModelLoadError(f"{here}, which does not exist (looked for {target})")
        size = target.stat().st_size
        end = offset + (length or 0)
        if length is not None and end > size:
            raise ModelLoadError(
                f"{here} at bytes {offset}..{end}, but that file has only {size} bytes"
            )


_KNOWN_ELEM_TYPES = frozenset(v for v in onnx.TensorProto.DataType.values() if v != onnx.TensorProto.UNDEFINED)


def _check_type(tp: onnx.TypeProto, where: str) -> None:
    kind = tp.WhichOneof("value")
    if kind == "tensor_type" or kind == "sparse_tensor_type":
        tt = getattr(tp, kind)
        if tt.elem_type != onnx.TensorProto.UNDEFINED and tt.elem_type not in _KNOWN_ELEM_TYPES:
            raise ModelLoadError(f"{where} has element type {tt.elem_type}, which ONNX does not define")
        if tt.HasField("shape"):
            for axis, dim in enumerate(tt.shape.dim):
                if dim.HasField("dim_value") and dim.dim_value == -1:
                    # Paddle's and older exporters' "any size": the same as a dim with no value,
                    # which is how every pass after the loader sees it (never as a size).
                    dim.Clear()
                elif dim.HasField("dim_value") and dim.dim_value < 0:
                    raise ModelLoadError(f"{where} has dim {axis} = {dim.dim_value}, a negative size")
    elif kind == "sequence_type":
        _check_type(tp.sequence_type.elem_type, where)
    elif kind == "optional_type":
        _check_type(tp.optional_type.elem_type, where)
    elif kind == "map_type":
        _check_type(tp.map_type.value_type, where)


def check_graph(graph: onnx.GraphProto, where: str) -> None:
    """What the checker lets through but passes, onnxsim and ORT trip over: element types ONNX
    does not define, negative dims (``-1``, "any size" to Paddle and older exporters, becomes a
    dim with no value, in place), negative tensor dims."""
    for what, infos in (("input", graph.input), ("output", graph.output), ("value", graph.value_info)):
        for vi in infos:
            if vi.HasField("type"):
                _check_type(vi.type, f"{where} {what} {shown(vi.name)}")
    for tensor in iter_tensors(graph):
        if tensor.data_type not in _KNOWN_ELEM_TYPES:
            raise ModelLoadError(
                f"{where} tensor {shown(tensor.name)} has data type {tensor.data_type}, which ONNX does not define"
            )
        if any(d < 0 for d in tensor.dims):
            raise ModelLoadError(f"{where} tensor {shown(tensor.name)} has negative dims {list(tensor.dims)}")
    for node in graph.node:
        for sub in subgraphs(node):
            check_graph(sub, where)


#: Per message type: its text and message fields, in field-number order (the order of
#: ``ListFields``), as (name, is repeated, is text).
_TEXT_FIELDS: dict[Descriptor, tuple[tuple[str, bool, bool], ...]] = {}


def _text_fields(descriptor: Descriptor) -> tuple[tuple[str, bool, bool], ...]:
    found = _TEXT_FIELDS.get(descriptor)
    if found is None:
        found = _TEXT_FIELDS[descriptor] = tuple(
            (fd.name, fd.is_repeated, fd.type == fd.TYPE_STRING)
            for fd in sorted(descriptor.fields, key=lambda fd: fd.number)
            if fd.type in (fd.TYPE_STRING, fd.TYPE_MESSAGE)
        )
    return found


def bad_text(message: Message, path: str) -> str | None:
    """The first string field (by its path in the model) that is not valid UTF-8: protobuf
    parses such bytes, but onnx, onnx-graphsurgeon and ORT fail on them later.

    Only text and message fields are read: ``ListFields`` would also hand over every bytes
    field, and reading ``raw_data`` copies the weight (the whole model once more)."""
    # The stubs add upb's Descriptor class; at run time it is a descriptor.Descriptor (isinstance).
    descriptor = cast(Descriptor, message.DESCRIPTOR)
    for name, repeated, text in _text_fields(descriptor):
        if repeated:
            items = getattr(message, name)
            if not len(items):
                continue
        elif message.HasField(name):
            items = (getattr(message, name),)
        else:
            continue
        for k, item in enumerate(items):
            where = f"{path}.{name}" + (f"[{k}]" if repeated else "")
            if text:
                try:
                    item.encode("utf-8")
                except UnicodeError:
                    return where
            else:
                found = bad_text(item, where)
                if found:
                    return found
    return None


def read_bytes(p: Path) -> bytes:
    """The bytes of the model file ``p``, once :func:`check_file` finds it one to read."""
    check_file(p)
    try:
        with open(p, "rb") as fh:
            return fh.read(PROTOBUF_LIMIT + 1)
    except OSError as exc:
        raise ModelLoadError(f"{p}: cannot read: {exc.strerror or exc}") from None


def check_file(p: Path) -> int:
    """The size of ``p``, a regular file under protobuf's limit; anything else (not there, a
    folder, a FIFO, too large) is a ModelLoadError naming it."""
    try:
        info = p.stat()
    except FileNotFoundError:
        raise ModelLoadError(f"{p}: no such file") from None
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"{p}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    if stat.S_ISDIR(info.st_mode):
        raise ModelLoadError(f"{p}: is a directory, expected an .onnx file")
    if not stat.S_ISREG(info.st_mode):
        kind = "a FIFO" if stat.S_ISFIFO(info.st_mode) else "a device" if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode) else "not a regular file"
        raise ModelLoadError(f"{p}: is {kind}, expected an .onnx file (a regular file)")
    if info.st_size > PROTOBUF_LIMIT:
        raise ModelLoadError(
            f"{p}: {info.st_size} bytes, over protobuf's 2 GiB limit; a model this large keeps its "
            "weights in external data"
        )
    return info.st_size
