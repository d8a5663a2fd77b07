"""Weights left on disk: a model's large weights kept in the file they were read from.

The pipeline's loader (``read_model_file(..., weights_on_disk=True)``) leaves each weight that
:func:`may_stay_on_disk` picks where it lies, and records where, by absolute path
(:func:`leave_on_disk`; ``model.tensors.on_disk`` tells such a weight): in its external-data
file, or, for a weight stored inline, in the ``.onnx`` file itself (:func:`read_without_weights`
reads the file around its bytes, never the bytes themselves, with ``model/wire.py``). Its
bytes are read only where something needs them: :func:`tensor_data`, :func:`tensor_array`
(planning reads a weight's values), :func:`load_weights` (a pass that does not declare
``weights_on_disk``, the model a report hands over). A save copies them file to file
(:func:`copy_from_disk` into a data file, :func:`write_inline` into an ``.onnx``), and ONNX
Runtime reads them from their file (``validation/session_weights.py``). A run then costs the
memory of the graph, not of the weights, until a session runs.
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
    is_placeholder,
    iter_tensors,
    on_disk,
    tensor_nbytes,
)
from onnxsurgery.model.walk import all_names, subgraphs
from onnxsurgery.model.wire import Buffer, FileBytes, fields, len_field, varint, varint_bytes

__all__ = [
    "INLINE_KEY",
    "MAPPED_BYTES",
    "held_bytes",
    "copy_from_disk",
    "disk_place",
    "is_inline",
    "read_without_weights",
    "strip_inline_weights",
    "write_inline",
    "has_weights_on_disk",
    "leave_on_disk",
    "load_tensor",
    "load_weights",
    "may_stay_on_disk",
    "name_external_data",
    "tensor_array",
    "tensor_data",
]

#: Types whose raw bytes numpy reads as they are (little-endian, as ONNX stores them).
_NUMPY_NATIVE = frozenset((onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16))


#: The external-data key that marks a weight whose bytes lie inside the ``.onnx`` file itself
#: (:func:`strip_inline_weights`): read back in, it is stored inline again, as it was.
INLINE_KEY = "onnxsurgery.inline"


#: :data:`INLINE_KEY`'s value for a weight whose file set ``data_location`` to DEFAULT (as
#: ``onnx.save`` writes a model whose external data it loaded): read back in, it is set again.
_DEFAULT_SET = "default"


def is_inline(tensor: onnx.TensorProto) -> bool:
    """A weight :func:`strip_inline_weights` left in the model file it was stored inline in."""
    return any(entry.key == INLINE_KEY for entry in tensor.external_data)


def _inline_location_set(tensor: onnx.TensorProto) -> bool:
    """Whether a weight stored inline had ``data_location`` (DEFAULT) set in its file."""
    return any(e.key == INLINE_KEY and e.value == _DEFAULT_SET for e in tensor.external_data)


#: Field numbers of the wire format: ModelProto.graph, GraphProto.initializer, and TensorProto's.
_GRAPH, _INITIALIZER = 7, 5
_DIMS, _DATA_TYPE, _NAME, _RAW_DATA, _EXTERNAL_DATA, _DATA_LOCATION = 1, 2, 8, 9, 13, 14
#: TensorProto fields that hold data or say where it lies (segment, the typed ``*_data`` lists):
#: a tensor with any of these beside ``raw_data`` stays as it is.
_DATA_FIELDS = frozenset((3, 4, 5, 6, 7, 10, 11, _EXTERNAL_DATA))
_METADATA_PROPS = 16  # repeated: may come several times


def _graph_span(view: Buffer) -> tuple[int, int, int] | None:
    """(start of its tag, start of its bytes, end) of a serialized model's one ``graph`` field;
    None for none, or several (protobuf would merge them: left to the parser). Malformed bytes
    raise ValueError."""
    graphs = [f for f in fields(view) if f[0] == _GRAPH and f[1] == 2]
    if len(graphs) != 1:
        return None
    _, _, tag_at, at, end, _ = graphs[0]
    return tag_at, at, end


def strip_inline_weights(data: bytes | FileBytes, location: str) -> bytes | None:
    """``data`` (a whole ``.onnx`` file, weights stored inline; a :class:`FileBytes` reads only
    the bytes it walks and keeps, never the weights' own) without the bytes of its large
    floating-point initializers: each names instead where they lie in that file (``location``,
    the file's own name, with their offset and length, and :data:`INLINE_KEY`), so the model
    parses without them and they stay on disk like weights in a data file. None when no
    initializer qualifies, or the bytes are not what this reader expects (the parser then reads
    the file as it is). What qualifies: a tensor of name, type, dims and ``raw_data`` alone, as
    :func:`~onnxsurgery.model.tensors.weight_stub` asks."""
    view = data if isinstance(data, FileBytes) else memoryview(data)
    try:
        graph = _graph_span(view)
        if graph is None:
            return None
        g_tag, g_at, g_end = graph
        pieces: list[bytes | memoryview] = []
        last = g_at
        for number, wire, tag_at, at, end, _ in fields(view, g_at, g_end):
            if number != _INITIALIZER or wire != 2:
                continue
            stripped = _strip_tensor(view, at, end, location)
            if stripped is not None:
                pieces += [view[last:tag_at], len_field(_INITIALIZER, stripped)]
                last = end
        if not pieces:
            return None
        pieces.append(view[last:g_end])
        field = len_field(_GRAPH, b"".join(pieces))
        return b"".join((view[:g_tag], field, view[g_end:]))
    except ValueError:
        return None


def read_without_weights(path: Path, location: str) -> bytes | None:
    """:func:`strip_inline_weights` of the file at ``path``, read with :class:`FileBytes`: the
    weights it leaves out are never read, only the bytes around them. None as there (no weight
    to leave out, bytes this reader does not expect), and when the file cannot be read: the
    caller reads it whole then, which says what is wrong."""
    try:
        with open(path, "rb", buffering=0) as fh:
            size = os.fstat(fh.fileno()).st_size
            return strip_inline_weights(FileBytes(fh.fileno(), size), location)
    except OSError:
        return None


def _strip_tensor(view: Buffer, at: int, end: int, location: str) -> bytes | None:
    """The TensorProto in ``view[at:end]`` without its ``raw_data``, naming where it lies.

    Fields that only describe the tensor (doc_string, metadata_props, a ``data_location`` of
    DEFAULT) stay with it; one that holds data besides ``raw_data``, or any given twice, keeps
    the tensor as it is."""
    dims: list[int] = []
    seen: dict[int, tuple[int, int, int, int, int]] = {}
    for number, wire, tag_at, v_at, v_end, value in fields(view, at, end):
        if number == _DIMS and wire == 0:
            dims.append(value)
        elif number == _DIMS and wire == 2:  # packed
            pos = v_at
            while pos < v_end:
                dim, pos = varint(view, pos)
                dims.append(dim)
        elif number in _DATA_FIELDS or (number in seen and number != _METADATA_PROPS):
            return None
        else:
            seen[number] = (wire, tag_at, v_at, v_end, value)
    if not {_DATA_TYPE, _NAME, _RAW_DATA} <= set(seen):
        return None
    (t_wire, *_, data_type), (n_wire, *_), (r_wire, _, r_at, r_end, _) = (
        seen[_DATA_TYPE], seen[_NAME], seen[_RAW_DATA]
    )
    if (t_wire, n_wire, r_wire) != (0, 2, 2) or data_type not in DISK_TYPES:
        return None
    set_default = _DATA_LOCATION in seen
    if set_default and seen[_DATA_LOCATION][::4] != (0, onnx.TensorProto.DEFAULT):
        return None
    nbytes = tensor_nbytes(onnx.TensorProto(data_type=data_type, dims=dims))
    if nbytes < EXTERNAL_THRESHOLD or r_end - r_at != nbytes or seen[_NAME][3] == seen[_NAME][2]:
        return None
    marker = _DEFAULT_SET if set_default else "1"
    entries = (("location", location), ("offset", str(r_at)), ("length", str(nbytes)), (INLINE_KEY, marker))
    described = b"".join(
        len_field(_EXTERNAL_DATA, len_field(1, key.encode()) + len_field(2, value.encode()))
        for key, value in entries
    )
    location_field = varint_bytes(_DATA_LOCATION << 3) + varint_bytes(onnx.TensorProto.EXTERNAL)
    kept = b"".join(
        view[tag_at:v_end]
        for number, _, tag_at, _, v_end, _ in fields(view, at, end)
        if number not in (_RAW_DATA, _DATA_LOCATION)
    )
    return b"".join((kept, described, location_field))


def may_stay_on_disk(model: onnx.ModelProto, base: Path | None = None) -> set[str]:
    """Names of the main-graph weights a loader may leave in their data file: large
    floating-point initializers with external data whose bytes it can locate, that no subgraph
    reads (a tool may move such a weight into the subgraph, where a weightless copy would not
    stand in for it). Keys besides location, offset and length (a checksum) and fields that
    describe the tensor (doc_string) do not matter. A length, where given, must fit the
    tensor's dims and type; where not (torch's exporter writes ``location`` alone), the bytes
    from the offset to the end of the file in ``base`` (what onnx's loader reads) must."""
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
            or tensor.HasField("segment")
        ):
            continue
        nbytes = tensor_nbytes(onnx.TensorProto(data_type=tensor.data_type, dims=tensor.dims))
        if nbytes >= EXTERNAL_THRESHOLD and _stored_length(tensor, base) == nbytes:
            names.add(tensor.name)
    return names


def _stored_length(tensor: onnx.TensorProto, base: Path | None) -> int | None:
    """The length of a tensor's external data: its ``length`` entry, or without one the bytes
    from its offset to the end of its file in ``base``; None where that cannot be told."""
    entries = {e.key: e.value for e in tensor.external_data}
    try:
        if "length" in entries:
            return int(entries["length"])
        if base is None or not entries.get("location"):
            return None
        return (base / entries["location"]).stat().st_size - int(entries.get("offset") or 0)
    except (OSError, ValueError):
        return None


def leave_on_disk(tensor: onnx.TensorProto, base: Path) -> None:
    """Record, in place, where ``tensor``'s data lies: its file's absolute (resolved) path, its
    offset and its length (from the tensor's dims and type where the file gives none)."""
    for entry in tensor.external_data:
        if entry.key == "location":
            entry.value = str((base / entry.value).resolve())
    keys = {e.key for e in tensor.external_data}
    if "offset" not in keys:
        tensor.external_data.add(key="offset", value="0")
    if "length" not in keys:
        nbytes = tensor_nbytes(onnx.TensorProto(data_type=tensor.data_type, dims=tensor.dims))
        tensor.external_data.add(key="length", value=str(nbytes))


#: From this many bytes of tensors a session asked for with ``mapped=True`` maps its weights
#: from a file (``validation/mapped_weights.py``): BERT-base's check, peak RSS 1359 -> 944 MiB.
#: Below, the file's fixed costs (a folder, a file per session) outweigh the copies it saves;
#: and a model's handle (``model/handle.py``) puts a pass's result back into the model it holds
#: only from here on.
MAPPED_BYTES = 64 * 2**20


def held_bytes(model: onnx.ModelProto) -> int:
    """Bytes of the tensors ``model`` holds itself (a weightless copy's placeholders hold none)."""
    return sum(tensor_nbytes(t) for t in iter_tensors(model.graph) if not is_placeholder(t))


def has_weights_on_disk(model: onnx.ModelProto) -> bool:
    """Whether any weight of ``model`` was left in its data file (``model.tensors.on_disk``)."""
    return any(on_disk(t) for t in iter_tensors(model.graph))


def disk_place(tensor: onnx.TensorProto) -> tuple[str, int, int]:
    """(absolute path of its data file, offset, length) of a weight left on disk
    (:func:`~onnxsurgery.model.tensors.disk_location`); ValueError for any other tensor."""
    where = disk_location(tensor)
    if where is None:
        raise ValueError(f"tensor {tensor.name!r} is not a weight left on disk")
    return where


def name_external_data(tensor: onnx.TensorProto, location: str, offset: int, length: int) -> None:
    """Make ``tensor`` say, in place, that its data lies in ``location`` (offset, length): its
    external-data entries are these three alone, its ``data_location`` EXTERNAL."""
    del tensor.external_data[:]
    tensor.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        tensor.external_data.add(key=key, value=str(value))


def load_tensor(tensor: onnx.TensorProto) -> None:
    """Read a weight left on disk into ``tensor``, the fields set as onnx's loader sets them
    (a weight from inside the ``.onnx`` file as it was there)."""
    data = tensor_data(tensor)
    inline, set_default = is_inline(tensor), _inline_location_set(tensor)
    del tensor.external_data[:]
    if inline and not set_default:  # stored inline in the file it came from: as it was there
        tensor.ClearField("data_location")
    else:
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
    source, offset, length = disk_place(tensor)
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
    path, offset, length = disk_place(tensor)
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


def write_inline(model: onnx.ModelProto, out: BinaryIO, serialized: bytes) -> bool:
    """Write ``serialized`` (``model`` serialized as it is held) to ``out`` with each
    main-graph weight left on disk stored inline, as the model would serialize with every weight
    read in: its bytes copied from their file (:func:`copy_from_disk`), never held in memory.
    False, with nothing written, where a weight on disk lies outside the main graph's
    initializers or ``serialized`` is not what this writer expects (the caller then reads the
    weights into a copy)."""
    inits = model.graph.initializer
    disk = {i for i, t in enumerate(inits) if on_disk(t)}
    if len(disk) != sum(1 for t in iter_tensors(model.graph) if on_disk(t)):
        return False
    view = memoryview(serialized)
    try:
        graph = _graph_span(view)
        if graph is None:
            return False
        g_tag, g_at, g_end = graph
        spans = [f for f in fields(view, g_at, g_end) if f[0] == _INITIALIZER and f[1] == 2]
        if len(spans) != len(inits):
            return False
        # the graph's bytes: serialized as they are, or (a weight on disk) its fields around a
        # raw_data field whose bytes come from the file
        plan: list[bytes | memoryview | onnx.TensorProto] = []
        last = g_at
        for i in sorted(disk):
            _, _, tag_at, at, end, _ = spans[i]
            inline = is_inline(inits[i]) and not _inline_location_set(inits[i])
            head, tail = _inline_fields(view, at, end, inline)
            length = disk_place(inits[i])[2]
            raw_head = varint_bytes(_RAW_DATA << 3 | 2) + varint_bytes(length)
            size = len(head) + len(raw_head) + length + len(tail)
            plan += [
                view[last:tag_at],
                varint_bytes(_INITIALIZER << 3 | 2) + varint_bytes(size) + head + raw_head,
                inits[i],
                tail,
            ]
            last = end
        plan.append(view[last:g_end])
    except ValueError:
        return False
    graph_size = sum(disk_place(p)[2] if isinstance(p, onnx.TensorProto) else len(p) for p in plan)
    out.write(view[:g_tag])
    out.write(varint_bytes(_GRAPH << 3 | 2) + varint_bytes(graph_size))
    for part in plan:
        if isinstance(part, onnx.TensorProto):
            copy_from_disk(part, out)
        else:
            out.write(part)
    out.write(view[g_end:])
    return True


def _inline_fields(view: memoryview, at: int, end: int, inline: bool) -> tuple[bytes, bytes]:
    """The fields of the serialized tensor in ``view[at:end]`` (a weight on disk) that come
    before and after its ``raw_data`` once read in (:func:`load_tensor`): external_data gone,
    data_location gone (``inline``: stored inline at first, without one) or DEFAULT."""
    kept: list[tuple[int, bytes]] = []
    for number, _, tag_at, _, v_end, _ in fields(view, at, end):
        if number not in (_EXTERNAL_DATA, _DATA_LOCATION, _RAW_DATA):
            kept.append((number, bytes(view[tag_at:v_end])))
    if not inline:
        kept.append((_DATA_LOCATION, varint_bytes(_DATA_LOCATION << 3) + varint_bytes(0)))
    kept.sort(key=lambda field: field[0])  # stable: repeated fields keep their order
    head = b"".join(b for n, b in kept if n < _RAW_DATA)
    tail = b"".join(b for n, b in kept if n > _RAW_DATA)
    return head, tail

