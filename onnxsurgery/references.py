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
  whose ``name`` is empty is keyed by its file stem (``input_0``).
- ``.npz`` files (one case per file) whose keys are ``"input:NAME"`` and ``"output:NAME"``, in
  graph order; :func:`save_npz` writes that form. A case read from ``foo.npz`` is named ``foo``.

Every failure to read raises :class:`~onnxsurgery.errors.ReferenceDataError` naming the path and
what is wrong with it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import numpy_helper

from onnxsurgery.errors import ReferenceDataError

if TYPE_CHECKING:
    import torch

__all__ = [
    "Case",
    "load_cases",
    "save_case",
    "save_npz",
    "record",
    "record_model_cases",
    "load_module",
    "import_file",
    "NPZ_INPUT_PREFIX",
    "NPZ_OUTPUT_PREFIX",
]

NPZ_INPUT_PREFIX = "input:"
NPZ_OUTPUT_PREFIX = "output:"

_CASE_DIR = re.compile(r"^test_data_set_(\d+)$")
_TENSOR_FILE = re.compile(r"^(input|output)_(\d+)\.pb$")


@dataclass
class Case:
    """One reference case: inputs keyed by graph input name, outputs keyed by output name.

    Both dicts are in graph order (insertion order is what is written to disk).
    """

    name: str
    inputs: dict[str, np.ndarray] = field(default_factory=dict)
    outputs: dict[str, np.ndarray] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# reading


def load_cases(path: str | os.PathLike[str]) -> list[Case]:
    """Read every case under ``path``.

    ``path`` may be a directory holding ``test_data_set_N/`` directories (read in numeric order
    of ``N``), a single ``test_data_set_N`` directory (any directory holding ``input_K.pb``
    files), an ``.npz`` file, or a directory of ``.npz`` files (read in natural name order).
    """
    p = Path(path)
    if not p.exists():
        raise ReferenceDataError(f"reference data {str(p)!r} does not exist")
    if p.is_file():
        if p.suffix != ".npz":
            raise ReferenceDataError(
                f"reference data {str(p)!r} is a file but not an .npz; give a directory holding "
                "test_data_set_N/ directories, a test_data_set_N directory, or an .npz file"
            )
        return [_load_npz(p)]
    if not p.is_dir():
        raise ReferenceDataError(f"reference data {str(p)!r} is neither a file nor a directory")

    case_dirs = sorted(
        (c for c in p.iterdir() if c.is_dir() and _CASE_DIR.match(c.name)),
        key=lambda c: int(_CASE_DIR.match(c.name).group(1)),  # type: ignore[union-attr]
    )
    if case_dirs:
        return [_load_case_dir(c) for c in case_dirs]
    if any(_TENSOR_FILE.match(f.name) for f in p.iterdir() if f.is_file()):
        return [_load_case_dir(p)]
    npz_files = sorted((f for f in p.iterdir() if f.is_file() and f.suffix == ".npz"), key=_natural)
    if npz_files:
        return [_load_npz(f) for f in npz_files]
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
    case = Case(name=directory.name)
    for kind, target in (("input", case.inputs), ("output", case.outputs)):
        for _, f in sorted(tensors[kind]):
            name, array = _read_tensor_pb(f)
            if name in target:
                raise ReferenceDataError(
                    f"reference case {str(directory)!r}: two {kind} tensors are named {name!r}"
                )
            target[name] = array
    return case


def _read_tensor_pb(path: Path) -> tuple[str, np.ndarray]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ReferenceDataError(f"cannot read reference tensor {str(path)!r}: {exc}") from exc
    proto = onnx.TensorProto()
    try:
        proto.ParseFromString(data)
    except Exception as exc:  # protobuf's DecodeError has no stable import path
        raise ReferenceDataError(
            f"reference tensor {str(path)!r} is not a serialized TensorProto ({exc})"
        ) from exc
    if proto.data_type == onnx.TensorProto.UNDEFINED:
        raise ReferenceDataError(
            f"reference tensor {str(path)!r} is not a TensorProto (no data type set)"
        )
    try:
        array = numpy_helper.to_array(proto)
    except Exception as exc:
        raise ReferenceDataError(
            f"reference tensor {str(path)!r} does not decode: {type(exc).__name__}: {exc}"
        ) from exc
    return proto.name or path.stem, np.asarray(array)


def _load_npz(path: Path) -> Case:
    try:
        with np.load(path, allow_pickle=False) as npz:
            items = [(key, np.asarray(npz[key])) for key in npz.files]
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise ReferenceDataError(
            f"cannot read reference .npz {str(path)!r}: {type(exc).__name__}: {exc}"
        ) from exc
    case = Case(name=path.stem)
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
                np.savez(fh, **arrays)
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


# --------------------------------------------------------------------------------------------
# recording from torch


def record(
    module: torch.nn.Module,
    inputs: Mapping[str, torch.Tensor | np.ndarray],
    out_dir: str | os.PathLike[str] | None,
    *,
    output_names: Sequence[str],
    index: int | None = None,
) -> Case:
    """Run ``module`` in torch eager on ``inputs`` and write the case under ``out_dir``.

    ``inputs`` are passed positionally in mapping order (graph input order) and keyed by graph
    input name. Runs under ``torch.no_grad()``; the module's train/eval mode is left as the
    caller set it (call ``module.eval()`` first for dropout and batch norm). Nested tuple/list
    outputs are flattened depth-first and named by ``output_names``. With ``out_dir=None``
    nothing is written. The returned case is named after the ``test_data_set_N`` written.
    """
    import torch

    tensors = [
        value if isinstance(value, torch.Tensor) else torch.from_numpy(np.asarray(value))
        for value in inputs.values()
    ]
    with torch.no_grad():
        result = module(*tensors)
    flat = _flatten_outputs(result)
    if len(flat) != len(output_names):
        raise ReferenceDataError(
            f"{type(module).__name__} returned {len(flat)} tensors but {len(output_names)} "
            f"output names were given ({list(output_names)})"
        )
    case = Case(
        name="recorded",
        inputs={name: _to_numpy(t) for name, t in zip(inputs, tensors, strict=True)},
        outputs={name: _to_numpy(t) for name, t in zip(output_names, flat, strict=True)},
    )
    if out_dir is not None:
        case.name = save_case(case, out_dir, index=index).name
    elif index is not None:
        case.name = f"test_data_set_{index}"
    return case


def _flatten_outputs(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _flatten_outputs(item)]
    raise ReferenceDataError(
        f"module output of type {type(value).__name__} is not a tensor or a tuple/list of tensors"
    )


def _to_numpy(tensor: Any) -> np.ndarray:
    return np.ascontiguousarray(tensor.detach().cpu().numpy())


def import_file(path: str | os.PathLike[str], name: str) -> Any:
    """Import the Python file at ``path`` as module ``name`` (once; later calls reuse it).

    The module is registered in ``sys.modules`` while it executes (dataclasses look their
    module up then) and removed again if executing it fails.
    """
    import importlib.util
    import sys

    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {path} as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name]


def load_module(spec: str) -> Any:
    """Import a torch module from ``"package.module:attr"`` or ``"path/to/file.py:attr"``.

    ``attr`` may be an ``nn.Module`` instance, an ``nn.Module`` subclass or a factory function;
    classes and factories are called with no arguments. The module is put in eval mode.
    """
    import importlib
    import importlib.util

    import torch

    source, sep, attr = spec.rpartition(":")
    if not sep or not source or not attr:
        raise ReferenceDataError(f"{spec!r}: expected MODULE:ATTR, like my_pkg.nets:make_model or nets.py:Net")
    try:
        if source.endswith(".py"):
            path = Path(source)
            if not path.is_file():
                raise ReferenceDataError(f"{spec!r}: no such file {path}")
            digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]
            module = import_file(path, f"_onnxsurgery_user_{path.stem}_{digest}")
        else:
            module = importlib.import_module(source)
    except ReferenceDataError:
        raise
    except Exception as exc:
        raise ReferenceDataError(f"{spec!r}: importing {source} failed: {type(exc).__name__}: {exc}") from None
    if not hasattr(module, attr):
        raise ReferenceDataError(f"{spec!r}: {source} has no attribute {attr!r}")
    obj = getattr(module, attr)
    try:
        if isinstance(obj, torch.nn.Module):
            net = obj
        elif callable(obj):
            net = obj()
        else:
            raise TypeError(f"{attr} is a {type(obj).__name__}")
    except Exception as exc:
        raise ReferenceDataError(f"{spec!r}: cannot build the module: {type(exc).__name__}: {exc}") from None
    if not isinstance(net, torch.nn.Module):
        raise ReferenceDataError(f"{spec!r}: {attr} gave a {type(net).__name__}, not a torch.nn.Module")
    return net.eval()


def record_model_cases(
    module: Any,
    model: onnx.ModelProto | str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    sizes: Sequence[Mapping[str, Sequence[int]]],
    seed: int = 0,
) -> list[Case]:
    """Record one torch eager case per entry of ``sizes`` for the exported ``model``.

    Input names and dtypes, and output names, come from the ONNX model; each entry of
    ``sizes`` gives the dims of some inputs (``{"x": [2, 3, 224, 224]}``), the others keep the
    model's declared fixed dims. Inputs are random (``numpy.random.default_rng(seed + k)``):
    floats standard normal, integers in a small non-negative range, bools.
    """
    from onnxsurgery.model_comparison import random_array
    from onnxsurgery.model_io import as_model
    from onnxsurgery.signature import model_inputs

    proto = as_model(model)
    specs = [s for s in model_inputs(proto) if not s.optional]
    output_names = [o.name for o in proto.graph.output]
    cases = []
    for k, given in enumerate(sizes):
        unknown = sorted(set(given) - {s.name for s in specs})
        if unknown:
            raise ReferenceDataError(
                f"size given for {unknown}, which the model has no input named; inputs: {[s.name for s in specs]}"
            )
        rng = np.random.default_rng(seed + k)
        feeds: dict[str, np.ndarray] = {}
        for spec in specs:
            if spec.name in given:
                dims = [int(d) for d in given[spec.name]]
            elif spec.dims is not None and all(isinstance(d, int) for d in spec.dims):
                dims = list(spec.dims)
            else:
                raise ReferenceDataError(
                    f"input {spec.name!r} has dims {spec.dims}; give its size with --shape {spec.name}:DIMS"
                )
            if spec.dtype is None:
                raise ReferenceDataError(f"input {spec.name!r} is not a tensor of a known dtype")
            feeds[spec.name] = random_array(spec.dtype, dims, rng)
        cases.append(record(module, feeds, out_dir, output_names=output_names))
    return cases
