"""Reading, checking and writing models: external data, atomic and byte-identical saves.

``load_model`` reads a model with its external data and turns every way a file can be wrong (not
there, a directory, empty, not protobuf, truncated, failing the checker, external data missing or
pointing outside the model's folder) into one :class:`~onnxsurgery.errors.ModelLoadError` line.
``save_model`` writes to a temporary file beside the target and renames it into place, so a
failed or interrupted run never leaves a file that ``make`` would take as up to date. The same
model always serializes to the same bytes. A weightless copy (:func:`weightless`) is what the
checker and shape inference see: the graph, with a placeholder for each weight.

What tensors weigh and the placeholders live in ``model/tensors.py``, every way a file can be
wrong in ``model/file_checks.py``, weights left on disk in ``model/weights_on_disk.py``; the
names this module took from there are still importable from here.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import onnx
from google.protobuf.message import Message
from onnx.external_data_helper import (
    load_external_data_for_model,
    save_external_data,
    set_external_data,
)

from onnxsurgery.errors import ModelLoadError, ModelSaveError
from onnxsurgery.files import write_atomic
from onnxsurgery.model.file_checks import (
    bad_text,
    check_external_data,
    check_file,
    check_graph,
    external_tensors,
    read_bytes,
)
from onnxsurgery.model.tensors import (
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
    tensor_nbytes,
    weight_stub,
)
from onnxsurgery.model.walk import graphs_by_path, subgraphs
from onnxsurgery.model.weights_on_disk import (
    copy_from_disk,
    has_weights_on_disk,
    is_inline,
    leave_on_disk,
    load_tensor,
    load_weights,
    may_stay_on_disk,
    name_external_data,
    read_without_weights,
    write_inline,
)

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
        bad = bad_text(model, "model")
        if bad:
            raise ModelLoadError(f"{where} {bad} is not valid UTF-8 text")
        check_graph(model.graph, where)
        refs = external_tensors(model)
        external = any(not is_inline(t) for t in refs)  # as the file had it
        if refs:
            if base_dir is None:
                raise ModelLoadError(
                    f"{where} keeps tensor data in external files; give the folder they are in "
                    "(base_dir=...), or load the model with onnxsurgery.load_model(path)"
                )
            check_external_data(model, Path(base_dir), where)
            stay = may_stay_on_disk(model, Path(base_dir)) if weights_on_disk else set()
            ours = [t for t in model.graph.initializer if t.name in stay or is_inline(t)]
            for tensor in ours:  # out of onnx's sight while it loads every other tensor
                tensor.data_location = onnx.TensorProto.DEFAULT
            load_external_data_for_model(model, str(base_dir))
            for tensor in ours:
                tensor.data_location = onnx.TensorProto.EXTERNAL
                leave_on_disk(tensor, Path(base_dir))
                if tensor.name not in stay:  # stored inline, read by a subgraph: back inline
                    load_tensor(tensor)
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
    :func:`prepare_model`), or, stored inline, in the ``.onnx`` file itself
    (``read_without_weights``: not even read); :func:`load_weights` reads them in later."""
    p = Path(path)
    data = None
    if weights_on_disk and check_file(p) and (real := p.resolve()).parent == p.parent.resolve():
        # weights stored inline stay in this file too: neither read nor parsed (named from
        # the model's folder: a link to a file elsewhere is read whole, as before)
        data = read_without_weights(p, real.name)
    if data is None:
        data = read_bytes(p)
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
        _write_whole(model, path)
        return
    data_path = path.parent / (path.name + ".data")
    if data_path.exists():
        data_path.unlink()
    copy = onnx.ModelProto()
    copy_fields(model, copy, skip="graph")
    copy_fields(model.graph, copy.graph, skip="initializer")
    _write_main_weights(model, copy, data_path, moved)
    _externalise_subgraphs(copy, data_path.name, path.parent)
    path.write_bytes(_serialize(copy))


def _write_whole(model: onnx.ModelProto, path: Path) -> None:
    """Write ``model`` at ``path`` with every weight inside: a weight left on disk is copied
    from its file (:func:`write_inline`), or where that cannot be, read into a copy first."""
    if has_weights_on_disk(model):
        with open(path, "wb") as out:  # weights on disk go from their file into this one
            if write_inline(model, out, _serialize(model)):
                return
        loaded = onnx.ModelProto()
        loaded.CopyFrom(model)
        model = load_weights(loaded)
    path.write_bytes(_serialize(model))


def _write_main_weights(
    model: onnx.ModelProto,
    copy: onnx.ModelProto,
    data_path: Path,
    moved: list[tuple[int, int, int]] | None,
) -> None:
    """Append each main-graph initializer of ``model`` to ``copy``: a small one as it is, a
    large one (or one left on disk) written to ``data_path`` in graph order (the file made for
    the first of them) and described as lying there. ``moved``: see :func:`_write`."""
    with contextlib.ExitStack() as stack:
        data: BinaryIO | None = None
        for index, tensor in enumerate(model.graph.initializer):
            disk = on_disk(tensor)
            raw = tensor.raw_data if not disk and tensor.HasField("raw_data") else None
            if not disk and (raw is None or sys.getsizeof(raw) < EXTERNAL_THRESHOLD):
                copy.graph.initializer.append(tensor)
                continue
            if data is None:
                data = stack.enter_context(open(data_path, "wb"))
            offset, length = _append_data(tensor, raw, data)
            del raw
            if disk and moved is not None:
                moved.append((index, offset, length))
            described = _description(tensor)
            name_external_data(described, data_path.name, offset, length)
            copy.graph.initializer.append(described)


def _append_data(tensor: onnx.TensorProto, raw: bytes | None, data: BinaryIO) -> tuple[int, int]:
    """Append a weight's bytes to the open data file ``data``: ``raw``, or (None, a weight left
    on disk) its bytes copied from their file. Returns (offset, length) in ``data``."""
    if raw is None:
        return copy_from_disk(tensor, data)
    offset = data.tell()
    data.write(raw)
    return offset, data.tell() - offset


def _externalise_subgraphs(copy: onnx.ModelProto, location: str, folder: Path) -> None:
    """Externalise, in place, the large weights of ``copy``'s subgraphs into ``location`` (after
    the main graph's), as onnx does; a weight left on disk there is read in first."""
    for node in copy.graph.node:
        for sub in subgraphs(node):
            for tensor in _initializers(sub):
                if on_disk(tensor):  # a weight a tool moved into the subgraph reading it
                    load_tensor(tensor)
                _externalise(tensor, location, folder)


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
    data_file = str((written.parent / (written.name + ".data")).resolve())  # a link's end
    for index, offset, length in moved:
        tensor = model.graph.initializer[index]
        where = disk_location(tensor)
        if where is not None and where[0] == data_file:
            name_external_data(tensor, data_file, offset, length)
    return written
