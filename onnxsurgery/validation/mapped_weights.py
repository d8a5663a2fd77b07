"""Weights ONNX Runtime maps from a file instead of copying, shared by the sessions over them.

Handed to ORT as OrtValues, a model's weights sit in memory three times: the model's own,
numpy's (protobuf hands ``raw_data`` out as a copy) and ORT's (every session copies what
``add_external_initializers`` gives it). :func:`write_mapped` writes each weight once to a data
file beside a weightless copy of the model; ORT maps that file, so the weights sit in memory
twice, and a second session over another weightless copy (symbolize's rewritten model) maps the
same file. ``create_session`` (:mod:`onnxsurgery.validation.runtime`) takes this route for a
model of 2 GB and more, or of :data:`MAPPED_BYTES` and more when asked (``mapped=True``).

A weight the loader left on disk (``model.tensors.on_disk``) needs no file written: ORT maps it
from the data file the model was loaded from (:class:`DiskWeight`, :func:`point_at_disk`), and
the weights sit in memory once, in ORT's mapping.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import onnx

from onnxsurgery.model.io import (
    is_large,
    is_placeholder,
    save_model,
    weightless,
)
from onnxsurgery.model.tensors import on_disk
from onnxsurgery.model.weights_on_disk import (
    MAPPED_BYTES,
    disk_place,
    held_bytes,
    name_external_data,
)

__all__ = [
    "MAPPED_BYTES",
    "DiskWeight",
    "FileWeight",
    "disk_weight",
    "filled_from_disk",
    "filled_from_file",
    "held_bytes",
    "point_at_disk",
    "write_mapped",
]


@dataclass(frozen=True)
class FileWeight:
    """A weight a session reads from a data file ORT maps into memory: the file's folder
    (removed once no session or mapping holds it), the file's name there, the weight's offset
    and length in it, its type and dims."""

    folder: tempfile.TemporaryDirectory
    location: str
    offset: int
    length: int
    data_type: int
    dims: tuple[int, ...]


@dataclass(frozen=True)
class DiskWeight:
    """A weight ORT maps from the data file its model was loaded from (a weight the loader left
    on disk): the file's absolute path, the weight's offset and length there, its type and dims."""

    path: str
    offset: int
    length: int
    data_type: int
    dims: tuple[int, ...]


def disk_weight(tensor: onnx.TensorProto) -> DiskWeight:
    """Where a weight left on disk (``model.tensors.on_disk``) lies, for a session to map it."""
    path, offset, length = disk_place(tensor)
    return DiskWeight(path, offset, length, tensor.data_type, tuple(tensor.dims))


def filled_from_disk(model: onnx.ModelProto, shared: Mapping[str, object]) -> bool:
    """Whether a session over ``model`` maps weights from a loaded model's data file: a weight
    of ``model`` left on disk, or a placeholder ``shared`` fills with a :class:`DiskWeight`."""
    return any(
        on_disk(t) or (is_placeholder(t) and isinstance(shared.get(t.name), DiskWeight))
        for t in model.graph.initializer
    )


def point_at_disk(tensors: list[tuple[onnx.TensorProto, DiskWeight]]) -> str:
    """Make each tensor (of a weightless copy ORT parses from bytes) name where its weight lies,
    relative to one folder holding every such file; returns that folder, for ORT's
    ``session.model_external_initializers_file_folder_path``."""
    folder = os.path.commonpath([os.path.dirname(w.path) for _, w in tensors])
    for tensor, weight in tensors:
        name_external_data(
            tensor, os.path.relpath(weight.path, folder), weight.offset, weight.length
        )
    return folder


#: Memory-backed temporary files where the system has them: the weights' file there is written
#: at memory speed and never reaches a disk (faster than /tmp on ext4). Its pages cannot be evicted as a disk file's can, so it is used
#: only where it has room for the file with a quarter to spare and twice the file's size of
#: memory is free; the system's temporary folder otherwise.
_MEMORY_FOLDER = "/dev/shm"


def _folder_for(size: int) -> str | None:
    """Where a data file of ``size`` bytes goes: the memory-backed folder where it fits, else
    None (the system's temporary folder)."""
    try:
        room = shutil.disk_usage(_MEMORY_FOLDER).free if os.path.isdir(_MEMORY_FOLDER) else 0
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None
    return _MEMORY_FOLDER if room >= size + size // 4 and free >= 2 * size else None


def filled_from_file(model: onnx.ModelProto, shared: Mapping[str, object]) -> bool:
    """Whether a placeholder of ``model`` is filled by a weight in a file (``shared``: what a
    session over :func:`write_mapped`'s files left)."""
    return any(
        isinstance(shared.get(t.name), FileWeight)
        for t in model.graph.initializer
        if is_placeholder(t)
    )


def write_mapped(
    model: onnx.ModelProto,
    shared: Mapping[str, object],
    made: onnx.ModelProto | None = None,
) -> tuple[Path, tempfile.TemporaryDirectory, dict[str, FileWeight]]:
    """See :func:`_write_mapped`; a new file goes to the memory-backed folder where it fits, and
    to the system's temporary folder where that fails (filled meanwhile)."""
    memory = _folder_for(held_bytes(model))
    if memory is not None:
        try:
            return _write_mapped(model, shared, made, memory)
        except OSError:
            pass
    return _write_mapped(model, shared, made, None)


def _write_mapped(
    model: onnx.ModelProto,
    shared: Mapping[str, object],
    made: onnx.ModelProto | None,
    where: str | None,
) -> tuple[Path, tempfile.TemporaryDirectory, dict[str, FileWeight]]:
    """Write ``model``'s weightless copy (``made``, if given, is copied) with its placeholders
    pointing into a data file: each weight of ``model`` written there once, each placeholder of
    ``model`` itself pointing where the weight in ``shared`` of its name, type and dims lies (the
    copy is then written beside that file). Returns the path to load, the folder (keep it until
    ORT has loaded the path) and every weight by name, for a later session to share.

    Where the copy is still over 2 GB (tensors no placeholder stands for), the model is saved
    with external data as it is, and none of its weights is given to share. Raises ValueError
    for a placeholder no weight in ``shared`` fills. A new folder is made in ``where`` (None: the
    system's temporary folder)."""
    bare = weightless(model) if made is None else onnx.ModelProto()
    if made is not None:
        bare.CopyFrom(made)
    filled = _file_weights(model, shared)
    folder = _one_folder(filled, where)
    k = len(list(Path(folder.name).glob("*.onnx")))
    path = Path(folder.name) / f"model{k}.onnx"
    if is_large(bare):
        save_model(model, path, external_data=True)
        return path, folder, {}
    weights = _point_into_file(model, bare, filled, folder, f"model{k}.data")
    path.write_bytes(bare.SerializeToString())
    return path, folder, weights


def _file_weights(model: onnx.ModelProto, shared: Mapping[str, object]) -> dict[str, FileWeight]:
    """The weights in a file that ``shared`` holds for placeholders of ``model``, by name."""
    return {
        t.name: weight
        for t in model.graph.initializer
        if is_placeholder(t) and isinstance(weight := shared.get(t.name), FileWeight)
    }


def _one_folder(filled: Mapping[str, FileWeight], where: str | None) -> tempfile.TemporaryDirectory:
    """The folder of the files ``filled`` lies in, or a new one in ``where`` where it is empty.
    Raises ValueError for weights in several folders: a session maps one."""
    folders = {id(w.folder): w.folder for w in filled.values()}
    if len(folders) > 1:
        raise ValueError("the shared weights lie in several files; a session reads one folder")
    if folders:
        return next(iter(folders.values()))
    return tempfile.TemporaryDirectory(prefix="onnxsurgery-session-", dir=where)


def _point_into_file(
    model: onnx.ModelProto,
    bare: onnx.ModelProto,
    filled: Mapping[str, FileWeight],
    folder: tempfile.TemporaryDirectory,
    location: str,
) -> dict[str, FileWeight]:
    """Point, in place, each placeholder of ``bare`` (the weightless copy of ``model``) into a
    file in ``folder``: ``model``'s own weight written to ``location`` (made for the first), a
    placeholder of ``model`` to where the weight ``filled`` holds for it lies. Returns
    ``filled`` with every weight written."""
    originals = {t.name: t for t in model.graph.initializer}
    weights = dict(filled)
    with contextlib.ExitStack() as opened:
        data: BinaryIO | None = None  # opened for the first weight this model writes
        for tensor in bare.graph.initializer:
            if not is_placeholder(tensor):
                continue
            original = originals[tensor.name]
            if is_placeholder(original):  # a weightless copy's: the shared weight of its name
                at = _filled_place(tensor, filled)
            else:
                if data is None:
                    data = opened.enter_context(open(Path(folder.name) / location, "wb"))
                at = (location, data.tell(), data.write(original.raw_data))
                weights[tensor.name] = FileWeight(folder, *at, tensor.data_type, tuple(tensor.dims))
            name_external_data(tensor, *at)
    return weights


def _filled_place(
    tensor: onnx.TensorProto, filled: Mapping[str, FileWeight]
) -> tuple[str, int, int]:
    """(location, offset, length) of the weight ``filled`` holds for the placeholder ``tensor``,
    of its type and dims; ValueError where it holds none."""
    known = filled.get(tensor.name)
    if known is None or (known.data_type, known.dims) != (tensor.data_type, tuple(tensor.dims)):
        raise ValueError(f"weight {tensor.name!r} is a placeholder no shared weight fills")
    return known.location, known.offset, known.length
