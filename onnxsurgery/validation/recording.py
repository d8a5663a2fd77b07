"""Recording reference cases from torch: run a module in eager mode and store what it computed.

    record(net, {"x": x}, "refs", output_names=["logits"])          # one case, test_data_set_N
    record_model_cases(net, "model.onnx", "refs", sizes=[{"x": [2, 3, 32, 32]}])

:func:`record_model_cases` checks every case against the model's declared inputs (rank) before
torch runs, draws integers as the graph uses them (ids over the table they index, masks 0/1:
:func:`~onnxsurgery.validation.feeds.graph_int_array`), and runs the ONNX model on ONNX Runtime
on the case at its traced size: a module whose weights are not the exported ones is refused
before anything is written. :func:`load_module` imports the user's ``nn.Module`` from
``pkg.mod:Net`` or ``file.py:Net`` (what ``onnxsurgery reference record`` takes);
:func:`import_file` imports a Python file by path; :func:`read_input_file` reads ``--input
NAME=FILE`` (``.npy`` or a ``.pb`` TensorProto).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from onnxsurgery.errors import ReferenceDataError, UsageError
from onnxsurgery.model.io import as_model
from onnxsurgery.model.signature import CaseFailure, InputSpec, check_inputs, model_inputs
from onnxsurgery.validation.feeds import graph_int_array, random_array, ranged_array, shape_inputs
from onnxsurgery.validation.references import Case, _read_tensor_pb, save_case

if TYPE_CHECKING:
    import torch

__all__ = [
    "record",
    "record_model_cases",
    "RecordedCases",
    "load_module",
    "import_file",
    "read_input_file",
    "require_torch",
]


def require_torch() -> Any:
    """``import torch``, or a UsageError saying how to install it."""
    try:
        import torch
    except ModuleNotFoundError as exc:
        if exc.name not in (None, "torch") and not str(exc.name).startswith("torch."):
            raise
        raise UsageError("reference record needs torch: pip install 'onnxsurgery[torch]'") from None
    return torch


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
    An exception the module raises becomes a ReferenceDataError ``your module raised ...``
    (its first line; the original is its ``__cause__``).
    """
    torch = require_torch()
    tensors = [
        value if isinstance(value, torch.Tensor) else torch.from_numpy(np.asarray(value))
        for value in inputs.values()
    ]
    try:
        with torch.no_grad():
            result = module(*tensors)
    except Exception as exc:
        lines = str(exc).strip().splitlines() or [""]
        text = lines[0] if len(lines[0]) <= 300 else lines[0][:300] + "..."
        raise ReferenceDataError(f"your module raised {type(exc).__name__}: {text}") from exc
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

    torch = require_torch()
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


def read_input_file(text: str) -> tuple[str, np.ndarray]:
    """``--input NAME=FILE`` (or onnxsim's ``NAME:FILE``): an input's values from a ``.npy``
    file or a ``.pb`` TensorProto (the ONNX test-data layout's ``input_K.pb``)."""
    name, sep, path_text = text.partition("=") if "=" in text else text.rpartition(":")
    name, path = name.strip(), Path(path_text.strip())
    if not sep or not name or path.suffix not in (".npy", ".pb"):
        raise UsageError(f"--input {text!r} must read NAME=FILE with a .npy or .pb file, like ids=ids.npy")
    if not path.is_file():
        raise UsageError(f"--input {name}: no such file {path}")
    if path.suffix == ".pb":
        return name, _read_tensor_pb(path)[1]
    try:
        return name, np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--input {name}: {path} is not a .npy array: {exc}") from None


class RecordedCases(list[Case]):
    """The cases :func:`record_model_cases` recorded (a list), with what else the caller shows:
    ``existing``, the ``test_data_set_N`` folders that were there before (kept, or replaced
    with ``overwrite``), and ``check``, what the traced-size check found (``None``: not run)."""

    existing: list[str]
    replaced: bool
    check: str | None

    def appended_note(self, out_dir: str | os.PathLike[str]) -> str:
        """One line on the cases ``out_dir`` already held and what became of them."""
        held = f"{os.fspath(out_dir)} held {len(self.existing)} case{'s' if len(self.existing) != 1 else ''}"
        held += f" ({_span(self.existing)})"
        new = _span([c.name for c in self])
        if self.replaced:
            return f"{held}; --overwrite replaced them with {new}"
        return f"{held}; the new ones are {new} (--overwrite replaces the old ones)"


def _span(names: Sequence[str]) -> str:
    """``test_data_set_2..4`` for a run of case folders, the name itself for one."""
    if len(names) < 2:
        return "".join(names)
    return f"{names[0]}..{names[-1].rpartition('_')[2]}"


def record_model_cases(
    module: Any,
    model: onnx.ModelProto | str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    sizes: Sequence[Mapping[str, Sequence[int]]],
    seed: int = 0,
    values: Mapping[str, np.ndarray] | None = None,
    value_ranges: Mapping[str, tuple[float, float]] | None = None,
    check: bool = True,
    overwrite: bool = False,
) -> RecordedCases:
    """Record one torch eager case per entry of ``sizes`` for the exported ``model``.

    Input names and dtypes, and output names, come from the ONNX model; each entry of
    ``sizes`` gives the dims of some inputs (``{"x": [2, 3, 224, 224]}``), the others keep the
    model's declared fixed dims; a rank the model does not declare is refused before torch
    runs. ``values`` fixes inputs in every case (``--input``); the others are random
    (``numpy.random.default_rng(seed + k)``): ``value_ranges`` (``--val-range``, both ends
    included for integers), else floats standard normal, bools, and integers as the graph uses
    them: ids that index a Gather over its table's rows, other integers 0/1 (masks).

    With ``check``, the ONNX model runs on ONNX Runtime (CPU) on the case at its declared sizes
    (one made for the check when no case is at them) and must match torch at the default
    tolerances, else a ReferenceDataError names the output: the module's weights are not the
    exported ones. Nothing is written before every case is recorded and checked; cases are
    added after those ``out_dir`` holds, or replace them all with ``overwrite``.
    """
    _check_out_dir(Path(out_dir))
    proto = as_model(model)
    specs = [s for s in model_inputs(proto) if not s.optional]
    output_names = [o.name for o in proto.graph.output]
    values, value_ranges = dict(values or {}), dict(value_ranges or {})
    _check_request(specs, sizes, values, value_ranges)
    require_torch()

    def case_at(given: Mapping[str, Sequence[int]], k: int) -> Case:
        feeds = _case_feeds(proto, specs, given, values, value_ranges, np.random.default_rng(seed + k), k)
        return _run(module, feeds, output_names, k, specs)

    cases = [case_at(given, k) for k, given in enumerate(sizes)]
    found = _check_traced(proto, specs, cases, lambda: case_at({}, len(sizes))) if check else None
    recorded = _write(cases, Path(out_dir), overwrite)
    recorded.check = found
    return recorded


def _check_out_dir(root: Path) -> None:
    """Refuse, before torch runs, a place cases cannot go: they are folders, never a stream."""
    if str(root) == "-":
        raise UsageError("reference record -o -: cases are test_data_set_N folders, not a stream; give a folder")
    if root.exists() and not root.is_dir():
        raise UsageError(f"reference record -o {root}: is not a folder; give a folder for the cases")


def _dims_text(dims: Sequence[Any] | None) -> str:
    return "scalar" if dims is not None and not len(dims) else "x".join("?" if d is None else str(d) for d in dims or ())


def _check_request(
    specs: Sequence[InputSpec],
    sizes: Sequence[Mapping[str, Sequence[int]]],
    values: Mapping[str, np.ndarray],
    value_ranges: Mapping[str, Any],
) -> None:
    """Names the model has, ranks it declares, dtypes of given values: before torch runs."""
    declared = {s.name: s for s in specs}
    asked = [*(n for given in sizes for n in given), *values, *value_ranges]
    unknown = sorted({n for n in asked if n not in declared})
    if unknown:
        hint = "; separate a case's inputs with ';'" if any(" " in n for n in unknown) else ""
        raise ReferenceDataError(
            f"size or values given for {unknown}, which the model has no input named; inputs: {list(declared)}{hint}"
        )
    given_dims: list[tuple[str, str, Sequence[int]]]
    given_dims = [(f"--input {n}", n, v.shape) for n, v in values.items()]
    given_dims += [(f"case {k}", n, dims) for k, given in enumerate(sizes) for n, dims in given.items()]
    for where, name, dims in given_dims:
        spec = declared[name]
        if spec.dims is not None and len(dims) != len(spec.dims):
            raise ReferenceDataError(
                f"{where}: input {name!r} has {len(spec.dims)} dims in the model (exported at "
                f"{name}:{_dims_text(spec.dims)}), got {len(dims)} ({name}:{_dims_text(dims)})"
            )
    for k, given in enumerate(sizes):
        for name in given:
            if name in values and list(given[name]) != list(values[name].shape):
                raise ReferenceDataError(
                    f"case {k}: input {name!r} is given as {name}:{_dims_text(given[name])} and by "
                    f"--input with shape {_dims_text(values[name].shape)}"
                )
    for name, array in values.items():
        if declared[name].dtype is not None and array.dtype != declared[name].dtype:
            raise ReferenceDataError(
                f"input {name!r}: the given values are {array.dtype}, the model declares {declared[name].dtype}"
            )


def _case_feeds(
    proto: onnx.ModelProto,
    specs: Sequence[InputSpec],
    given: Mapping[str, Sequence[int]],
    values: Mapping[str, np.ndarray],
    value_ranges: Mapping[str, tuple[float, float]],
    rng: np.random.Generator,
    k: int,
) -> dict[str, np.ndarray]:
    """One case's inputs, in graph order: given values, else random at the given or declared dims."""
    as_sizes = shape_inputs(proto)
    feeds: dict[str, np.ndarray] = {}
    for spec in specs:
        if spec.name in values:
            feeds[spec.name] = values[spec.name]
            continue
        if spec.name in given:
            dims = [int(d) for d in given[spec.name]]
        elif spec.dims is not None and all(isinstance(d, int) for d in spec.dims):
            dims = [int(d) for d in spec.dims if isinstance(d, int)]
        else:
            raise ReferenceDataError(
                f"case {k}: input {spec.name!r} has dims {_dims_text(spec.dims)}; give its size with --case {spec.name}:DIMS"
            )
        if spec.dtype is None:
            raise ReferenceDataError(f"input {spec.name!r} is not a tensor of a known dtype")
        if spec.name in value_ranges:
            feeds[spec.name] = ranged_array(spec.dtype, dims, rng, value_ranges[spec.name], spec.name)
        elif spec.dtype.kind in "iu" and spec.name in as_sizes:
            node, op, slot = as_sizes[spec.name][0]
            raise ReferenceDataError(
                f"input {spec.name!r} is read as a size (input {slot} of {op} {node!r}); no random "
                f"value fits it: give its values with --input {spec.name}=FILE.npy"
            )
        elif spec.dtype.kind in "iu":
            feeds[spec.name] = graph_int_array(proto, spec.name, spec.dtype, dims, rng)
        else:
            feeds[spec.name] = random_array(spec.dtype, dims, rng)
    return feeds


def _run(
    module: Any, feeds: Mapping[str, np.ndarray], output_names: Sequence[str], k: int, specs: Sequence[InputSpec]
) -> Case:
    """:func:`record` on one case, its errors saying which case and the sizes the model was exported at."""
    try:
        return record(module, feeds, None, output_names=output_names)
    except ReferenceDataError as exc:
        got = ", ".join(f"{n}:{_dims_text(v.shape)}" for n, v in feeds.items())
        traced = ", ".join(f"{s.name}:{_dims_text(s.dims)}" for s in specs)
        raise ReferenceDataError(f"{exc} (case {k}: {got}; the model was exported at {traced})") from exc


def _check_traced(
    proto: onnx.ModelProto,
    specs: Sequence[InputSpec],
    cases: Sequence[Case],
    extra_case: Callable[[], Case],
) -> str | None:
    """Run the ONNX model on ONNX Runtime on the first case at its declared sizes (else on one
    made for the check at them) and refuse when it does not match torch there."""
    from onnxsurgery.validation.against_references import validate

    case = next((c for c in cases if _fits(specs, c)), None)
    if case is None:
        if not all(s.dims is not None and all(isinstance(d, int) for d in s.dims) for s in specs):
            return None  # a dynamic model none of whose cases fits: no traced size to check at
        case = extra_case()
    report = validate(proto, [case], provider="cpu")
    at = ", ".join(f"{n}:{_dims_text(v.shape)}" for n, v in case.inputs.items())
    if report.failures:
        _, out = report.failures[0]
        raise ReferenceDataError(
            f"the ONNX model does not match the module at its traced size ({at}): output {out.describe()}; "
            "the module's weights differ from the exported model's (a fresh or differently seeded init?): "
            "build it with the exported weights (load its state_dict); nothing was written (--no-check skips this check)"
        )
    if not report:
        broken = next(c for c in report.cases if c.error)
        raise ReferenceDataError(
            f"ONNX Runtime could not run the model at its traced size ({at}) to check it against the module: "
            f"{broken.error}; nothing was written (--no-check skips this check)"
        )
    return f"the ONNX model on ONNX Runtime matches the module at the traced size ({at})"


def _fits(specs: Sequence[InputSpec], case: Case) -> bool:
    try:
        check_inputs(specs, case.inputs)
    except CaseFailure:
        return False
    return True


def _write(cases: Sequence[Case], root: Path, overwrite: bool) -> RecordedCases:
    """Save ``cases`` under ``root``: after the cases there, or in their place with ``overwrite``
    (each new case replaces its number atomically; old ones beyond the new count are removed last)."""
    old = sorted(
        (p for p in root.glob("test_data_set_*") if p.is_dir() and p.name.rpartition("_")[2].isdigit()),
        key=lambda p: int(p.name.rpartition("_")[2]),
    ) if root.is_dir() else []
    recorded = RecordedCases()
    recorded.existing, recorded.replaced, recorded.check = [p.name for p in old], overwrite, None
    for k, case in enumerate(cases):
        case.name = save_case(case, root, index=k if overwrite else None).name
        recorded.append(case)
    if overwrite:
        keep = {c.name for c in cases}
        for path in old:
            if path.name not in keep:
                shutil.rmtree(path, ignore_errors=True)
    return recorded
