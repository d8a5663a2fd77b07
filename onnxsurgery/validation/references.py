"""Reference cases: named inputs and the torch outputs for them, read from and written to disk.

A *case* is one set of model inputs with the outputs torch eager computed for them. A reference
is a list of cases, usually at several sizes (the traced size and others), which is what proves a
symbolized model dynamic.

On-disk forms read by :func:`load_cases`:

- the ONNX test-data layout used by the model zoo and ONNX's backend tests::

      DIR/test_data_set_0/input_0.pb    TensorProto, ``name`` = graph input name
      DIR/test_data_set_0/output_0.pb   TensorProto, ``name`` = graph output name
      DIR/test_data_set_1/...

  ``input_K`` / ``output_K`` are read in numeric order of ``K``, which is graph order. A tensor
  whose ``name`` is empty is keyed by its file stem (``input_0``) and marked unnamed;
  :func:`bind_cases` then binds it as ONNX's backend runner does: ``input_K`` to the K-th graph
  input that is not an initializer, ``output_K`` to the K-th graph output, once the counts are
  checked to match.
- ``.npz`` files (one case per file) whose keys are ``"input:NAME"`` and ``"output:NAME"``, in
  graph order; :func:`save_npz` writes that form. A case read from ``foo.npz`` is named ``foo``.

Recording cases from a torch module is :mod:`onnxsurgery.validation.recording`.

Every failure to read raises :class:`~onnxsurgery.errors.ReferenceDataError` naming the path and
what is wrong with it.
"""

from __future__ import annotations

import functools
import math
import os
import re
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

import numpy as np
import onnx
from onnx import numpy_helper

from onnxsurgery.errors import ReferenceDataError
from onnxsurgery.model.dtypes import np_dtype
from onnxsurgery.model.signature import no_value_text
from onnxsurgery.model.wire import varint

__all__ = [
    "Case",
    "CaseStream",
    "case_loaders",
    "load_cases",
    "bind_cases",
    "save_case",
    "save_npz",
    "NPZ_INPUT_PREFIX",
    "NPZ_OUTPUT_PREFIX",
]

NPZ_INPUT_PREFIX = "input:"
NPZ_OUTPUT_PREFIX = "output:"

_CASE_DIR = re.compile(r"^test_data_set_(\d+)$")
_TENSOR_FILE = re.compile(r"^(input|output)_(\d+)\.pb$")
#: Element types stored bit-packed in ``raw_data`` (numpy_helper unpacks them).
_PACKED_TYPES = frozenset(
    getattr(onnx.TensorProto, name)
    for name in ("INT4", "UINT4", "INT2", "UINT2", "FLOAT4E2M1", "FLOAT6E2M3", "FLOAT6E3M2")
    if hasattr(onnx.TensorProto, name)
)


@dataclass
class Case:
    """One reference case: inputs keyed by graph input name, outputs keyed by output name.

    Both dicts are in graph order (insertion order is what is written to disk). ``source`` is
    the file or directory the case was read from; ``unnamed`` holds the keys that are file stems
    of tensors stored without a name (``input_0``), which :func:`bind_cases` binds by position.
    """

    name: str
    inputs: dict[str, np.ndarray] = field(default_factory=dict)
    outputs: dict[str, np.ndarray] = field(default_factory=dict)
    source: str | None = None
    unnamed: frozenset[str] = frozenset()


# --------------------------------------------------------------------------------------------
# reading


def load_cases(path: str | os.PathLike[str]) -> list[Case]:
    """Read every case under ``path``.

    ``path`` may be a directory holding ``test_data_set_N/`` directories (read in numeric order
    of ``N``), a single ``test_data_set_N`` directory (any directory holding ``input_K.pb``
    files), an ``.npz`` file, or a directory of ``.npz`` files (read in natural name order).
    """
    return [load() for load in case_loaders(path)]


def case_loaders(path: str | os.PathLike[str]) -> list[Callable[[], Case]]:
    """One callable per case :func:`load_cases` would read, in its order, each reading its case
    when called: a run over the cases then holds one case at a time. The layout is checked
    now (a missing path, no cases); a case's own files when it is read."""
    p = Path(path)
    if not p.exists():
        raise ReferenceDataError(f"reference data {str(p)!r} does not exist")
    if p.is_file():
        if p.suffix != ".npz":
            raise ReferenceDataError(
                f"reference data {str(p)!r} is a file but not an .npz; give a directory holding "
                "test_data_set_N/ directories, a test_data_set_N directory, or an .npz file"
            )
        return [functools.partial(_load_npz, p)]
    if not p.is_dir():
        raise ReferenceDataError(f"reference data {str(p)!r} is neither a file nor a directory")

    numbered = [
        (int(m.group(1)), c) for c in p.iterdir() if c.is_dir() and (m := _CASE_DIR.match(c.name))
    ]
    case_dirs = [c for _, c in sorted(numbered, key=lambda nc: nc[0])]
    if case_dirs:
        return [functools.partial(_load_case_dir, c) for c in case_dirs]
    if any(_TENSOR_FILE.match(f.name) for f in p.iterdir() if f.is_file()):
        return [functools.partial(_load_case_dir, p)]
    npz_files = sorted((f for f in p.iterdir() if f.is_file() and f.suffix == ".npz"), key=_natural)
    if npz_files:
        return [functools.partial(_load_npz, f) for f in npz_files]
    raise ReferenceDataError(
        f"reference data {str(p)!r} holds no cases: expected test_data_set_N/ directories, "
        "input_K.pb/output_K.pb files, or .npz files"
    )


def _natural(path: Path) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path.name)]


def _load_case_dir(directory: Path) -> Case:
    tensors: dict[str, list[tuple[int, Path]]] = {"input": [], "output": []}
    for f in directory.iterdir():
        m = _TENSOR_FILE.match(f.name)
        if m and f.is_file():
            tensors[m.group(1)].append((int(m.group(2)), f))
    if not tensors["input"]:
        raise ReferenceDataError(f"reference case {str(directory)!r} has no input_K.pb files")
    if not tensors["output"]:
        raise ReferenceDataError(f"reference case {str(directory)!r} has no output_K.pb files")
    case = Case(name=directory.name, source=str(directory))
    unnamed = set()
    for kind, target in (("input", case.inputs), ("output", case.outputs)):
        for _, f in sorted(tensors[kind]):
            name, array = _read_tensor_pb(f)
            if not name:
                name = f.stem
                unnamed.add(name)
            if name in target:
                raise ReferenceDataError(
                    f"reference case {str(directory)!r}: two {kind} tensors are named {name!r}"
                )
            target[name] = array
    case.unnamed = frozenset(unnamed)
    return case


def _read_tensor_pb(path: Path) -> tuple[str, np.ndarray]:
    """A tensor file's name and array. A plain ``raw_data`` tensor's array is a view of the
    file's bytes, read to an address aligned for SIMD (parsing the file whole would copy them
    twice: into the message, and out of it again when ``raw_data`` is read); any other tensor
    is decoded by onnx's numpy_helper."""
    try:
        data = _read_aligned(path)
    except OSError as exc:
        raise ReferenceDataError(f"cannot read reference tensor {str(path)!r}: {exc}") from exc
    proto = onnx.TensorProto()
    raw = _raw_data_span(data)
    try:  # everything but the raw bytes, which are read in place below
        proto.ParseFromString(
            bytes(data) if raw is None else bytes(data[: raw[0]]) + bytes(data[raw[2] :])
        )
    except Exception as exc:  # protobuf's DecodeError has no stable import path
        raise ReferenceDataError(
            f"reference tensor {str(path)!r} is not a serialized TensorProto ({exc})"
        ) from exc
    if proto.data_type == onnx.TensorProto.UNDEFINED:
        raise ReferenceDataError(
            f"reference tensor {str(path)!r} is not a TensorProto (no data type set)"
        )
    if raw is not None:
        array = _raw_array(proto, data, raw[1], raw[2])
        if array is not None:
            return proto.name, array
        proto.raw_data = bytes(data[raw[1] : raw[2]])  # anything unusual: onnx decodes it
    try:
        array = numpy_helper.to_array(proto)
    except Exception as exc:
        raise ReferenceDataError(
            f"reference tensor {str(path)!r} does not decode: {type(exc).__name__}: {exc}"
        ) from exc
    return proto.name, np.asarray(array)


#: Where a tensor's raw bytes start in memory: a multiple of this (ONNX Runtime's kernels take
#: a different, slower path on a misaligned input, and some then round differently).
ALIGNMENT = 64
#: Bytes of a tensor file read first, to find where its raw bytes start.
_HEAD_BYTES = 4096


def _read_aligned(path: Path) -> memoryview:
    """The bytes of a tensor file, placed so that its ``raw_data`` (when the first
    :data:`_HEAD_BYTES` show where it starts) begins at a multiple of :data:`ALIGNMENT`."""
    with open(path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        head = os.pread(f.fileno(), min(size, _HEAD_BYTES), 0)
        raw = _raw_data_span(head, head_only=True)
        shift = -raw[1] % ALIGNMENT if raw else 0
        view = _aligned_bytes(size + shift).data[shift:]  # read-only once read
        done = 0
        while done < size:  # readinto may return less than asked
            got = f.readinto(view[done:])
            if not got:
                raise OSError(f"the file ended at {done} of its {size} bytes")
            done += got
    return view.toreadonly()


def _aligned_bytes(size: int) -> np.ndarray:
    """``size`` uninitialised bytes starting at a multiple of :data:`ALIGNMENT`."""
    buffer = np.empty(size + ALIGNMENT, np.uint8)
    at = -buffer.ctypes.data % ALIGNMENT
    return buffer[at : at + size]


#: TensorProto's ``raw_data`` field, length-delimited (wire type 2).
_RAW_DATA_TAG = (9 << 3) | 2
#: Element types whose raw bytes are the array as it is (not bit-packed, not strings).
_PLAIN_RAW_TYPES = frozenset(
    t
    for t in onnx.TensorProto.DataType.values()
    if t not in (onnx.TensorProto.UNDEFINED, onnx.TensorProto.STRING)
    and t not in _PACKED_TYPES
)


def _raw_data_span(
    data: bytes | memoryview, *, head_only: bool = False
) -> tuple[int, int, int] | None:
    """Where the one top-level ``raw_data`` field of a serialized TensorProto lies:
    (start of its tag, start of its bytes, end); None when there is none, more than one, or the
    bytes are not well-formed protobuf (the full parse then has the last word). ``head_only``:
    ``data`` is the start of the file, and the first ``raw_data`` tag found is the answer."""
    found = None
    pos = 0
    try:
        while pos < len(data):
            start = pos
            tag, pos = varint(data, pos)
            wire = tag & 7
            if wire == 0:
                _, pos = varint(data, pos)
            elif wire == 1:
                pos += 8
            elif wire == 5:
                pos += 4
            elif wire == 2:
                length, pos = varint(data, pos)
                if tag == _RAW_DATA_TAG:
                    if found is not None:
                        return None
                    found = (start, pos, pos + length)
                    if head_only:
                        return found
                pos += length
            else:
                return None
    except ValueError:
        return None
    if pos != len(data):
        return None
    return found


def _raw_array(
    proto: onnx.TensorProto, data: memoryview, begin: int, end: int
) -> np.ndarray | None:
    """The array of a TensorProto whose raw bytes are ``data[begin:end]``, without a copy of
    them; None unless it is a plain little-endian tensor with as many bytes as its dims say."""
    if (
        sys.byteorder != "little"
        or proto.data_type not in _PLAIN_RAW_TYPES
        or proto.data_location == onnx.TensorProto.EXTERNAL
        or proto.external_data
        or proto.HasField("segment")
    ):
        return None
    dtype = np_dtype(proto.data_type)
    dims = tuple(proto.dims)
    count = math.prod(dims)
    if any(d < 0 for d in dims) or count * dtype.itemsize != end - begin:
        return None
    array = np.frombuffer(data, dtype=dtype, count=count, offset=begin).reshape(dims)
    if array.ctypes.data % ALIGNMENT:  # raw bytes past the head read: a copy, aligned
        copy = _aligned_bytes(array.nbytes).view(dtype).reshape(dims)
        copy[...] = array
        copy.flags.writeable = False
        return copy
    return array


def _load_npz(path: Path) -> Case:
    try:
        with np.load(path, allow_pickle=False) as npz:
            items = [(key, np.asarray(npz[key])) for key in npz.files]
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise ReferenceDataError(
            f"cannot read reference .npz {str(path)!r}: {type(exc).__name__}: {exc}"
        ) from exc
    case = Case(name=path.stem, source=str(path))
    for key, array in items:
        if key.startswith(NPZ_INPUT_PREFIX):
            case.inputs[key[len(NPZ_INPUT_PREFIX) :]] = array
        elif key.startswith(NPZ_OUTPUT_PREFIX):
            case.outputs[key[len(NPZ_OUTPUT_PREFIX) :]] = array
        else:
            raise ReferenceDataError(
                f"reference .npz {str(path)!r} has key {key!r}; every key must start with "
                f"{NPZ_INPUT_PREFIX!r} or {NPZ_OUTPUT_PREFIX!r}"
            )
    if not case.inputs:
        raise ReferenceDataError(f"reference .npz {str(path)!r} has no 'input:NAME' arrays")
    if not case.outputs:
        raise ReferenceDataError(f"reference .npz {str(path)!r} has no 'output:NAME' arrays")
    return case


# --------------------------------------------------------------------------------------------
# binding to a model


def bind_cases(
    cases: Sequence[Case], input_names: Sequence[str], output_names: Sequence[str] | None
) -> list[Case]:
    """Key every case's tensors by the model's names, as ONNX reads the test-data layout.

    ``input_names`` are the model's graph inputs that are not initializers, in graph order;
    ``output_names`` its graph outputs (``None`` leaves outputs as they are). A case with no
    unnamed tensor comes back as it is. Unnamed ``input_K`` / ``output_K`` take the K-th name,
    which needs the case to hold exactly as many inputs (outputs) as the model declares; then,
    and when a required input is still missing, it is a ReferenceDataError naming the case's
    file or directory.
    """
    bound = []
    for case in cases:
        where = case.source or case.name
        inputs = _bind(case.inputs, case.unnamed, input_names, "input", where)
        outputs = (
            case.outputs
            if output_names is None
            else _bind(case.outputs, case.unnamed, output_names, "output", where)
        )
        missing = [n for n in input_names if n not in inputs]
        if missing:
            raise ReferenceDataError(
                no_value_text(f"reference case {where!r}", missing, inputs, input_names)
            )
        bound.append(
            Case(name=case.name, inputs=inputs, outputs=outputs, source=case.source)
        )
    return bound


class CaseStream(Sequence[Case]):
    """The cases under a reference path, each read from disk when it is asked for and bound to
    a model's inputs and outputs (:func:`bind_cases`) as it is read; nothing is kept, so a run
    over them holds one case at a time (the pipeline's ``PassContext.cases``).

    The layout is checked when the stream is made (:func:`case_loaders`: a missing path, no
    cases); a case's own files, and its binding, when the case is read, with the same
    ReferenceDataError :func:`load_cases` and :func:`bind_cases` raise. Reading a case twice
    reads its files twice. :meth:`loaders` gives the readers themselves, one per case, for a
    run that takes each case in turn
    (:func:`~onnxsurgery.validation.against_references.validate` does).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        input_names: Sequence[str],
        output_names: Sequence[str] | None,
    ) -> None:
        self.path = Path(path)
        self.input_names = list(input_names)
        self.output_names = list(output_names) if output_names is not None else None
        self._loaders = case_loaders(path)

    def __len__(self) -> int:
        return len(self._loaders)

    @overload
    def __getitem__(self, index: int) -> Case: ...
    @overload
    def __getitem__(self, index: slice) -> list[Case]: ...
    def __getitem__(self, index: int | slice) -> Case | list[Case]:
        if isinstance(index, slice):
            return [load() for load in self.loaders()[index]]
        return self.loaders()[index]()

    def __iter__(self) -> Iterator[Case]:
        for load in self.loaders():
            yield load()

    def loaders(self) -> list[Callable[[], Case]]:
        """One callable per case, in order, each reading its case and binding it when called."""
        return [
            functools.partial(_load_bound, load, self.input_names, self.output_names)
            for load in self._loaders
        ]

    def __repr__(self) -> str:
        return f"CaseStream({str(self.path)!r}, {len(self)} cases)"


def _load_bound(
    load: Callable[[], Case], input_names: Sequence[str], output_names: Sequence[str] | None
) -> Case:
    return bind_cases([load()], input_names, output_names)[0]


def _bind(
    arrays: dict[str, np.ndarray],
    unnamed: frozenset[str],
    names: Sequence[str],
    kind: str,
    where: str,
) -> dict[str, np.ndarray]:
    positional = [key for key in arrays if key in unnamed and key.startswith(f"{kind}_")]
    if not positional:
        return arrays
    if len(arrays) != len(names):
        what = "inputs (not initializers)" if kind == "input" else "outputs"
        raise ReferenceDataError(
            f"reference case {where!r}: {', '.join(f'{k}.pb' for k in positional)} "
            f"{'has' if len(positional) == 1 else 'have'} no tensor name, and the case holds "
            f"{len(arrays)} {kind} file(s) while the model has {len(names)} {what} "
            f"({', '.join(names) or 'none'}); cannot bind them by position"
        )
    bound: dict[str, np.ndarray] = {}
    for key, name in zip(arrays, names, strict=True):
        target = name if key in positional else key
        if target in bound:
            raise ReferenceDataError(
                f"reference case {where!r}: {key}.pb binds to {kind} {target!r} by position, "
                f"which another {kind} file already names"
            )
        bound[target] = arrays[key]
    return bound


# --------------------------------------------------------------------------------------------
# writing


def save_case(case: Case, directory: str | os.PathLike[str], *, index: int | None = None) -> Path:
    """Write ``case`` as ``directory/test_data_set_N`` and return that path.

    ``N`` is ``index`` when given (an existing ``test_data_set_N`` is replaced), else the next
    free number. The case directory is written beside its target and renamed into place, so a
    failed write never leaves a half-written case. ``case.name`` is not used for the file name.
    """
    root = Path(directory)
    _check_case(case)
    try:
        root.mkdir(parents=True, exist_ok=True)
        if index is None:
            taken = [int(m.group(1)) for c in root.iterdir() if (m := _CASE_DIR.match(c.name))]
            index = max(taken, default=-1) + 1
        if index < 0:
            raise ReferenceDataError(f"case index must be >= 0, got {index}")
        target = root / f"test_data_set_{index}"
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=root))
        try:
            for kind, arrays in (("input", case.inputs), ("output", case.outputs)):
                for k, (name, array) in enumerate(arrays.items()):
                    proto = numpy_helper.from_array(np.asarray(array), name=name)
                    (tmp / f"{kind}_{k}.pb").write_bytes(proto.SerializeToString())
            if target.exists():
                shutil.rmtree(target)
            tmp.rename(target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    except OSError as exc:
        raise ReferenceDataError(f"cannot write reference case under {str(root)!r}: {exc}") from exc
    return target


def save_npz(case: Case, path: str | os.PathLike[str]) -> Path:
    """Write ``case`` as one ``.npz`` file with keys ``"input:NAME"`` and ``"output:NAME"``.

    Arrays are stored uncompressed in graph order; the file is written beside its target and
    renamed into place. Returns the path written (exactly ``path``; no suffix is appended).
    """
    target = Path(path)
    _check_case(case)
    arrays: dict[str, np.ndarray] = {}
    for name, array in case.inputs.items():
        arrays[NPZ_INPUT_PREFIX + name] = np.asarray(array)
    for name, array in case.outputs.items():
        arrays[NPZ_OUTPUT_PREFIX + name] = np.asarray(array)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                np.savez(fh, allow_pickle=True, **arrays)  # numpy's default, said
            os.replace(tmp_name, target)
        except BaseException:
            Path(tmp_name).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise ReferenceDataError(f"cannot write reference .npz {str(target)!r}: {exc}") from exc
    return target


def _check_case(case: Case) -> None:
    if not case.inputs:
        raise ReferenceDataError(f"case {case.name!r} has no inputs")
    if not case.outputs:
        raise ReferenceDataError(f"case {case.name!r} has no outputs")
