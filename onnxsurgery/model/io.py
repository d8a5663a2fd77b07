"""Reading, checking and writing models: external data, atomic and byte-identical saves.

``load_model`` reads a model with its external data and turns every way a file can be wrong (not
there, a directory, empty, not protobuf, truncated, failing the checker, external data missing or
pointing outside the model's folder) into one :class:`~onnxsurgery.errors.ModelLoadError` line.
``save_model`` writes to a temporary file beside the target and renames it into place, so a
failed or interrupted run never leaves a file that ``make`` would take as up to date. The same
model always serializes to the same bytes. A weightless copy (:func:`weightless`) is what the
checker and shape inference see: the graph, with a placeholder for each weight.

What tensors weigh and the placeholders live in ``model/tensors.py``; the names this module
took from there before are still importable from here.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import onnx
from google.protobuf.descriptor import Descriptor
from google.protobuf.message import Message
from onnx.external_data_helper import (
    load_external_data_for_model,
    save_external_data,
    set_external_data,
)

from onnxsurgery.errors import ModelLoadError, ModelSaveError
from onnxsurgery.files import shown, write_atomic
from onnxsurgery.model.tensors import (
    DISK_TYPES,
    EXTERNAL_THRESHOLD,
    LARGE_MODEL_BYTES,
    PLACEHOLDER,
    PROTOBUF_LIMIT,
    disk_location,
    is_large,
    is_placeholder,
    iter_tensors,
    on_disk,
    tensor_bytes,
    tensor_data,
    tensor_nbytes,
    weight_stub,
)
from onnxsurgery.model.walk import all_names, graphs_by_path, subgraphs

__all__ = [
    "IR_INITIALIZERS_AS_INPUTS",
    "sync_initializer_inputs",
    "ModelFile",
    "load_model",
    "read_model_file",
    "prepare_model",
    "save_model",
    "check_model",
    "infer_shapes",
    "as_model",
    "tensor_bytes",
    "tensor_nbytes",
    "iter_tensors",
    "is_large",
    "is_placeholder",
    "LARGE_MODEL_BYTES",
    "PROTOBUF_LIMIT",
    "weightless",
    "weight_stub",
    "copy_fields",
    "adopt_graph",
    "restore_weights",
    "load_weights",
    "has_weights_on_disk",
    "PLACEHOLDER",
]

@dataclass
class ModelFile:
    """A model read from disk, with what the pipeline needs to write it back alike."""

    model: onnx.ModelProto
    path: Path
    external_data: bool


def _external_tensors(model: onnx.ModelProto) -> list[onnx.TensorProto]:
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


def _check_external_data(model: onnx.ModelProto, base: Path, where: str) -> None:
    base = base.resolve()
    for tensor in _external_tensors(model):
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


def _check_graph(graph: onnx.GraphProto, where: str) -> None:
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
            _check_graph(sub, where)


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


def _bad_text(message: Message, path: str) -> str | None:
    """The first string field (by its path in the model) that is not valid UTF-8: protobuf
    parses such bytes, but onnx, onnx-graphsurgeon and ORT fail on them later.

    Only text and message fields are read: ``ListFields`` would also hand over every bytes
    field, and reading ``raw_data`` copies the weight (the whole model once more, 65 ms on
    BERT-base)."""
    for name, repeated, text in _text_fields(message.DESCRIPTOR):
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
                found = _bad_text(item, where)
                if found:
                    return found
    return None


def _read_bytes(p: Path) -> bytes:
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
    try:
        with open(p, "rb") as fh:
            return fh.read(PROTOBUF_LIMIT + 1)
    except OSError as exc:
        raise ModelLoadError(f"{p}: cannot read: {exc.strerror or exc}") from None


def _may_stay_on_disk(model: onnx.ModelProto) -> set[str]:
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


def _leave_on_disk(tensor: onnx.TensorProto, base: Path) -> None:
    """Record, in place, where ``tensor``'s data lies: its file's absolute (resolved) path."""
    for entry in tensor.external_data:
        if entry.key == "location":
            entry.value = str((base / entry.value).resolve())
    if not any(e.key == "offset" for e in tensor.external_data):
        tensor.external_data.add(key="offset", value="0")


def prepare_model(
    model: onnx.ModelProto,
    *,
    where: str,
    base_dir: str | os.PathLike | None,
    check: bool = True,
    weights_on_disk: bool = False,
) -> bool:
    """The loader's checks on a parsed model (in place): structure, element types, dims,
    external data resolved against ``base_dir`` and loaded, the ONNX checker. Returns whether
    the model kept data externally. Every failure is one ModelLoadError line.

    ``weights_on_disk``: leave the large floating-point weights in their data file instead of
    loading them (``model.tensors.on_disk``); everything else is loaded."""
    try:
        if not model.HasField("graph") or not model.opset_import or model.ir_version <= 0:
            missing = [
                what
                for what, present in (
                    ("graph", model.HasField("graph")),
                    ("opset_import", bool(model.opset_import)),
                    ("ir_version", model.ir_version > 0),
                )
                if not present
            ]
            raise ModelLoadError(f"{where} not an ONNX model: no {', '.join(missing)}")
        bad = _bad_text(model, "model")
        if bad:
            raise ModelLoadError(f"{where} {bad} is not valid UTF-8 text")
        _check_graph(model.graph, where)
        external = bool(_external_tensors(model))
        if external:
            if base_dir is None:
                raise ModelLoadError(
                    f"{where} keeps tensor data in external files; give the folder they are in "
                    "(base_dir=...), or load the model with onnxsurgery.load_model(path)"
                )
            _check_external_data(model, Path(base_dir), where)
            stay = _may_stay_on_disk(model) if weights_on_disk else set()
            stays = [t for t in model.graph.initializer if t.name in stay]
            for tensor in stays:  # out of onnx's sight while it loads every other tensor
                tensor.data_location = onnx.TensorProto.DEFAULT
            load_external_data_for_model(model, str(base_dir))
            for tensor in stays:
                tensor.data_location = onnx.TensorProto.EXTERNAL
                _leave_on_disk(tensor, Path(base_dir))
        if check:
            check_model(model, where=where, error=ModelLoadError)
        return external
    except ModelLoadError:
        raise
    except Exception as exc:  # any other failure on a model read from outside is bad input
        raise ModelLoadError(f"{where} cannot be loaded: {type(exc).__name__}: {_first_line(exc)}") from exc


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return (text[:300] + " ...") if len(text) > 300 else text


def read_model_file(
    path: str | os.PathLike, *, check: bool = True, weights_on_disk: bool = False
) -> ModelFile:
    """Read ``path`` with its external data; every way it can be wrong is a ModelLoadError.

    ``weights_on_disk``: leave the large floating-point weights in the data file (see
    :func:`prepare_model`); :func:`load_weights` reads them in later."""
    p = Path(path)
    data = _read_bytes(p)
    if not data:
        raise ModelLoadError(f"{p}: is empty (0 bytes), not an ONNX model")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as exc:  # DecodeError, RuntimeError, ValueError, ... all mean "not a model"
        raise ModelLoadError(
            f"{p}: not an ONNX model: protobuf parse failed ({_first_line(exc)}); the file is "
            "truncated, corrupted or of another format"
        ) from None
    del data  # the parsed model holds its own copy
    external = prepare_model(
        model, where=f"{p}:", base_dir=p.parent, check=check, weights_on_disk=weights_on_disk
    )
    return ModelFile(model=model, path=p, external_data=external)


def load_model(path: str | os.PathLike, *, check: bool = True) -> onnx.ModelProto:
    """Load a model with its external data, checked. Raises ModelLoadError naming the problem."""
    return read_model_file(path, check=check).model


def as_model(model: onnx.ModelProto | str | os.PathLike) -> onnx.ModelProto:
    """Accept a ModelProto or a path, as the Python API does everywhere."""
    if isinstance(model, onnx.ModelProto):
        return model
    return load_model(model)


def has_weights_on_disk(model: onnx.ModelProto) -> bool:
    """Whether any weight of ``model`` was left in its data file (``model.tensors.on_disk``)."""
    return any(on_disk(t) for t in iter_tensors(model.graph))


def _load_tensor(tensor: onnx.TensorProto) -> None:
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
            _load_tensor(tensor)
    return model


#: Below this IR version every initializer must also be listed as a graph input.
IR_INITIALIZERS_AS_INPUTS = 4


def sync_initializer_inputs(model: onnx.ModelProto) -> list[str]:
    """For IR < 4, list every initializer (main graph and subgraphs) as a graph input again.

    Tools that treat initializers as constants (onnx-graphsurgeon, onnxsim) drop them from the
    inputs, which IR 3's checker refuses. The input takes the initializer's dtype and dims.
    Returns the names added; does nothing for IR >= 4.
    """
    if model.ir_version >= IR_INITIALIZERS_AS_INPUTS:
        return []
    added = []
    for graph in graphs_by_path(model.graph).values():
        listed = {i.name for i in graph.input}
        for init in graph.initializer:
            if init.name not in listed:
                graph.input.append(
                    onnx.helper.make_tensor_value_info(init.name, init.data_type, init.dims)
                )
                listed.add(init.name)
                added.append(init.name)
    return added


def copy_fields(source: Message, target: Message, skip: str) -> None:
    """Copy every set field of ``source`` but ``skip`` into ``target`` (same message type)."""
    for field, value in source.ListFields():
        if field.name == skip:
            continue
        if field.is_repeated:
            getattr(target, field.name).extend(value)
        elif field.message_type is not None:
            getattr(target, field.name).CopyFrom(value)
        else:
            setattr(target, field.name, value)


#: Every TensorProto field but ``raw_data``: (name, is repeated, is a message).
_DESCRIBING_FIELDS = tuple(
    (f.name, f.is_repeated, f.message_type is not None)
    for f in onnx.TensorProto.DESCRIPTOR.fields
    if f.name != "raw_data"
)


def _description(tensor: onnx.TensorProto) -> onnx.TensorProto:
    """A copy of ``tensor`` without its ``raw_data``, never reading that field (``ListFields``
    and ``CopyFrom`` would copy every weight's bytes once more)."""
    out = onnx.TensorProto()
    for name, repeated, message in _DESCRIBING_FIELDS:
        if repeated:
            values = getattr(tensor, name)
            if len(values):
                getattr(out, name).extend(values)
        elif tensor.HasField(name):
            if message:
                getattr(out, name).CopyFrom(getattr(tensor, name))
            else:
                setattr(out, name, getattr(tensor, name))
    return out


def weightless(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose large floating-point initializers (main graph) carry no data.

    Each becomes an external-data placeholder of the same name, type and dims naming the file
    ``PLACEHOLDER``: what the checker and shape inference need of a weight, without the weight.
    Such a copy costs the graph's structure, not its weights, so checking it stays cheap as
    models grow (and works for models over 2 GB without writing them out).
    """
    copy = onnx.ModelProto()
    copy_fields(model, copy, skip="graph")
    copy_fields(model.graph, copy.graph, skip="initializer")
    for tensor in model.graph.initializer:
        stub = weight_stub(tensor)
        copy.graph.initializer.append(tensor if stub is None else stub)
    return copy


def adopt_graph(model: onnx.ModelProto, source: onnx.ModelProto) -> onnx.ModelProto:
    """``source``'s graph with every model-level field (opsets, metadata, producer) of ``model``.

    The same model as ``out.CopyFrom(model); out.graph.CopyFrom(source.graph)``, without copying
    either graph's weights: ``source`` (a model a tool just exported) is changed and returned.
    """
    for field, _ in source.ListFields():
        if field.name != "graph":
            source.ClearField(field.name)
    copy_fields(model, source, skip="graph")
    return source


def restore_weights(derived: onnx.ModelProto, model: onnx.ModelProto) -> onnx.ModelProto:
    """``derived`` (made from a weightless copy of ``model``) with each placeholder weight
    replaced by ``model``'s main-graph initializer of that name; returns ``derived``. Subgraphs
    are searched too: a tool may move a weight only a subgraph reads into that subgraph
    (onnx-graphsurgeon's export does)."""
    originals = {t.name: t for t in model.graph.initializer}
    for tensor in _initializers(derived.graph):
        if (
            tensor.data_location == onnx.TensorProto.EXTERNAL
            and tensor.external_data
            and tensor.external_data[0].value == PLACEHOLDER
            and tensor.name in originals
        ):
            tensor.CopyFrom(originals[tensor.name])
    return derived


def check_model(
    model: onnx.ModelProto, *, where: str = "model", error: type[Exception] = ModelLoadError
) -> None:
    """Run ``onnx.checker`` on a weightless copy (by path, beside an empty placeholder file);
    failures raise ``error``."""
    stub = weightless(model)
    try:
        with tempfile.TemporaryDirectory(prefix="onnxsurgery-check-") as tmp:
            tmp_path = Path(tmp) / "model.onnx"
            (Path(tmp) / PLACEHOLDER).touch()
            # Still over 2 GB (weights the copy keeps, such as integer tables): data beside it.
            _write(stub, tmp_path, external_data=is_large(stub))
            onnx.checker.check_model(str(tmp_path))
    except onnx.checker.ValidationError as exc:
        text = " ".join(line.strip() for line in str(exc).strip().splitlines() if line.strip())
        first = (text[:300] + " ...") if len(text) > 300 else (text or type(exc).__name__)
        raise error(f"{where} fails the ONNX checker: {first}") from None


def infer_shapes(model: onnx.ModelProto, *, data_prop: bool = True) -> onnx.ModelProto:
    """ONNX shape inference (strict) on a weightless copy; returns a new model with the weights."""
    bare = weightless(model)
    if not is_large(bare):
        inferred = onnx.shape_inference.infer_shapes(bare, strict_mode=True, data_prop=data_prop)
        return restore_weights(inferred, model)
    # Still over 2 GB (weights the copy keeps): by path, with its data beside it.
    with tempfile.TemporaryDirectory(prefix="onnxsurgery-infer-") as tmp:
        src, dst = Path(tmp) / "in.onnx", Path(tmp) / "out.onnx"
        _write(bare, src, external_data=True)
        onnx.shape_inference.infer_shapes_path(str(src), str(dst), strict_mode=True, data_prop=data_prop)
        inferred = onnx.load(str(dst), load_external_data=False)
    result = onnx.ModelProto()
    result.CopyFrom(model)
    del result.graph.value_info[:]
    result.graph.value_info.extend(inferred.graph.value_info)
    del result.graph.output[:]
    result.graph.output.extend(inferred.graph.output)
    return result


def _serialize(model: onnx.ModelProto) -> bytes:
    return model.SerializeToString(deterministic=True)


def _initializers(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """Initializers of ``graph`` and its subgraphs, in the order onnx externalises them."""
    yield from graph.initializer
    for node in graph.node:
        for sub in subgraphs(node):
            yield from _initializers(sub)


def _externalise(tensor: onnx.TensorProto, location: str, folder: Path) -> None:
    """What ``convert_model_to_external_data`` + ``write_external_data_tensors`` do to one
    tensor: data of ``EXTERNAL_THRESHOLD`` bytes or more goes to the end of ``location``."""
    if tensor.HasField("raw_data") and sys.getsizeof(tensor.raw_data) >= EXTERNAL_THRESHOLD:
        set_external_data(tensor, location)
        save_external_data(tensor, str(folder))
        tensor.ClearField("raw_data")


#: Bytes copied per read and write where the system cannot copy file to file itself.
_COPY_CHUNK = 1 << 24


def _copy_from_disk(tensor: onnx.TensorProto, data: BinaryIO) -> tuple[int, int]:
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


def _write(
    model: onnx.ModelProto,
    path: Path,
    *,
    external_data: bool,
    moved: list[tuple[int, int, int]] | None = None,
) -> None:
    """Write model (and its data file) at ``path`` directly; callers make it atomic.

    With external data, the main graph's weights go to the data file straight from ``model``,
    one at a time: each weight's bytes are read once (``raw_data`` is a copy each time it is
    read) and the copy that is serialized gets only each tensor's description. A weight copied
    into that copy and cleared there would stay in memory (with protobuf's upb backend a
    cleared field keeps its memory until the whole message goes): +1x the model's size at every
    save. The files are those ``onnx``'s own two steps (``convert_model_to_external_data`` +
    ``write_external_data_tensors``) write. A weight left on disk (``model.tensors.on_disk``)
    is copied from its file into the data file; ``moved`` gets (index among the main graph's
    initializers, offset, length) of each. Without external data, such weights are read into
    the one copy that is serialized.
    """
    if not external_data:
        if has_weights_on_disk(model):
            loaded = onnx.ModelProto()
            loaded.CopyFrom(model)
            model = load_weights(loaded)
        path.write_bytes(_serialize(model))
        return
    location = path.name + ".data"
    data_path = path.parent / location
    if data_path.exists():
        data_path.unlink()
    copy = onnx.ModelProto()
    copy_fields(model, copy, skip="graph")
    copy_fields(model.graph, copy.graph, skip="initializer")
    # Externalised tensors are written in graph order to one file named after the model.
    data = None
    try:
        for index, tensor in enumerate(model.graph.initializer):
            disk = on_disk(tensor)
            raw = tensor.raw_data if not disk and tensor.HasField("raw_data") else None
            if not disk and (raw is None or sys.getsizeof(raw) < EXTERNAL_THRESHOLD):
                copy.graph.initializer.append(tensor)
                continue
            if data is None:
                data = open(data_path, "wb")  # noqa: SIM115 (closed below)
            if disk:
                offset, length = _copy_from_disk(tensor, data)
                if moved is not None:
                    moved.append((index, offset, length))
            else:
                offset = data.tell()
                data.write(raw)
                length = data.tell() - offset
            del raw
            described = _description(tensor)
            del described.external_data[:]
            described.data_location = onnx.TensorProto.EXTERNAL
            for key, value in (("location", location), ("offset", offset), ("length", length)):
                described.external_data.add(key=key, value=str(value))
            copy.graph.initializer.append(described)
    finally:
        if data is not None:
            data.close()
    for node in copy.graph.node:
        for sub in subgraphs(node):
            for tensor in _initializers(sub):
                if on_disk(tensor):  # a weight a tool moved into the subgraph reading it
                    _load_tensor(tensor)
                _externalise(tensor, location, path.parent)
    path.write_bytes(_serialize(copy))


def save_model(
    model: onnx.ModelProto,
    path: str | os.PathLike,
    *,
    external_data: bool | None = None,
) -> Path:
    """Write ``model`` to ``path`` atomically; returns the path.

    ``external_data``: ``True`` writes weights to ``<name>.data`` beside the model, ``False``
    keeps them inside, ``None`` (default) does so only when the model is over 2 GB. The file
    appears at ``path`` only once it is complete; nothing is left behind when writing fails.
    """
    target = Path(path)
    use_external = is_large(model) if external_data is None else external_data
    if is_large(model) and not use_external:
        raise ModelSaveError(f"{target}: model is over 2 GB and must be saved with external data")

    moved: list[tuple[int, int, int]] = []

    def write(staged: Path) -> None:
        moved.clear()
        _write(model, staged, external_data=use_external, moved=moved)

    written = write_atomic(
        target, write, what="model", companions=(".data",) if use_external else ()
    )
    # A weight still on disk whose file this save replaced (the same data file name) now reads
    # from the new file, where the save copied it.
    data_file = str((target.parent / (target.name + ".data")).resolve())
    for index, offset, length in moved:
        tensor = model.graph.initializer[index]
        where = disk_location(tensor)
        if where is not None and where[0] == data_file:
            del tensor.external_data[:]
            for key, value in (("location", data_file), ("offset", offset), ("length", length)):
                tensor.external_data.add(key=key, value=str(value))
    return written
