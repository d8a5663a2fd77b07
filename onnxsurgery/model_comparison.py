"""Compare two models on the same inputs: random ones drawn from the declared inputs, or stored.

    report = compare_models("model.dyn.onnx", "model.onnx", shapes={"x": [2, 3, 32, 32]}, cases=3)
    if not report:
        print(report.summary)

Model b is the reference; the report is a :class:`~onnxsurgery.validation.ValidationReport`,
built by the same case runner as :func:`~onnxsurgery.validation.validate`. Also here: the
``--shape NAME:DIMS`` and ``--tol NAME=ATOL[,RTOL]`` parsers and :func:`random_array`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence

import numpy as np
import onnx

from onnxsurgery.compare import DEFAULT_ATOL, DEFAULT_RTOL
from onnxsurgery.errors import ReferenceDataError, UsageError
from onnxsurgery.references import Case, load_cases
from onnxsurgery.runtime import ProviderChoice, resolve_provider
from onnxsurgery.signature import CaseFailure, check_inputs
from onnxsurgery.validation import (
    Expected,
    Tolerances,
    ValidationReport,
    _check_global_tolerances,
    _check_tolerances,
    _ModelRunner,
    _run_cases,
)

__all__ = [
    "RANDOM_INT_RANGE",
    "compare_models",
    "parse_shape_spec",
    "parse_tolerance_spec",
    "random_array",
]

#: Range of random integer inputs for ``compare_models``: small and non-negative, so indices
#: (embedding ids, gather indices) stay in range for any table of at least 4 rows.
RANDOM_INT_RANGE = (0, 4)


def parse_shape_spec(text: str) -> tuple[str, list[int]]:
    """``"x:3x3x224x224"`` -> ``("x", [3, 3, 224, 224])``; ``"x:"`` is a scalar.

    The name is everything before the last ``:`` (ONNX names may hold colons); dims are
    separated by ``x`` or ``,``.
    """
    name, sep, dims_text = text.strip().rpartition(":")
    if not sep or not name:
        raise UsageError(f"--shape {text!r}: expected NAME:DIMS, like x:1x3x224x224")
    dims_text = dims_text.strip()
    if not dims_text or dims_text == "scalar":
        return name, []
    parts = dims_text.replace(",", "x").split("x")
    try:
        dims = [int(p) for p in parts]
    except ValueError:
        raise UsageError(
            f"--shape {text!r}: dims must be integers separated by x, like {name}:1x3x224x224"
        ) from None
    if any(d < 0 for d in dims):
        raise UsageError(f"--shape {text!r}: dims must be >= 0")
    return name, dims


def parse_tolerance_spec(text: str) -> tuple[str, tuple[float | None, float | None]]:
    """``"logits=1e-3"`` -> ``("logits", (1e-3, None))``; ``"logits=1e-3,1e-2"`` sets rtol too.

    An empty part keeps the default: ``"logits=,1e-2"`` sets only rtol.
    """
    name, sep, values = text.rpartition("=")
    if not sep or not name:
        raise UsageError(f"--tol {text!r}: expected NAME=ATOL[,RTOL], like logits=1e-3,1e-2")
    parts = [p.strip() for p in values.split(",")]
    if len(parts) > 2 or not any(parts):
        raise UsageError(f"--tol {text!r}: expected NAME=ATOL[,RTOL], like logits=1e-3,1e-2")
    try:
        nums = [float(p) if p else None for p in parts]
    except ValueError:
        raise UsageError(f"--tol {text!r}: ATOL and RTOL must be numbers") from None
    if any(v is not None and not (v >= 0 and math.isfinite(v)) for v in nums):
        raise UsageError(f"--tol {text!r}: tolerances must be numbers >= 0")
    atol = nums[0]
    rtol = nums[1] if len(nums) > 1 else None
    return name, (atol, rtol)


def _random_inputs(
    runner: _ModelRunner,
    other: _ModelRunner,
    shapes: Mapping[str, Sequence[int]],
    rng: np.random.Generator,
) -> dict[str, np.ndarray]:
    others = {s.name: s for s in other.specs}
    symbols: dict[str, int] = {}
    # symbols bound by the given shapes first, so one --shape fixes 'batch' for every input
    for spec in runner.specs:
        if (
            spec.name in shapes
            and spec.dims is not None
            and len(spec.dims) == len(shapes[spec.name])
        ):
            for want, got in zip(spec.dims, shapes[spec.name], strict=True):
                if isinstance(want, str):
                    symbols.setdefault(want, int(got))
    feeds: dict[str, np.ndarray] = {}
    for spec in runner.specs:
        if spec.optional:
            continue
        if spec.dtype is None:
            raise UsageError(
                f"input {spec.name!r} is not a tensor of a known dtype; give --ref cases"
            )
        if spec.name in shapes:
            dims = [int(d) for d in shapes[spec.name]]
        elif spec.dims is None:
            raise UsageError(
                f"input {spec.name!r} declares no shape; give --shape {spec.name}:DIMS"
            )
        else:
            dims = []
            fallback = others.get(spec.name)
            for axis, d in enumerate(spec.dims):
                if isinstance(d, int):
                    dims.append(d)
                    continue
                if isinstance(d, str) and d in symbols:
                    dims.append(symbols[d])
                    continue
                if (
                    fallback is not None
                    and fallback.dims is not None
                    and len(fallback.dims) == len(spec.dims)
                    and isinstance(fallback.dims[axis], int)
                ):
                    dims.append(fallback.dims[axis])
                    continue
                label = f"symbolic ({d!r})" if d else "of unknown size"
                raise UsageError(
                    f"input {spec.name!r} axis {axis} is {label}; give its size with "
                    f"--shape {spec.name}:{'x'.join('N' if not isinstance(x, int) else str(x) for x in spec.dims)}"
                )
        feeds[spec.name] = random_array(spec.dtype, dims, rng)
    return feeds


def random_array(dtype: np.dtype, dims: Sequence[int], rng: np.random.Generator) -> np.ndarray:
    """Random values of ``dtype``: floats standard normal, integers in RANDOM_INT_RANGE, bools."""
    if dtype.kind == "b":
        return rng.random(dims) < 0.5
    if dtype.kind in "iu":
        return rng.integers(*RANDOM_INT_RANGE, size=dims, dtype=dtype)
    if dtype.kind == "f":
        return rng.standard_normal(dims, dtype=np.float32).astype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(dims) + 1j * rng.standard_normal(dims)).astype(dtype)
    raise UsageError(f"cannot make random inputs of dtype {dtype}; give --ref cases")


def compare_models(
    model_a: onnx.ModelProto | str | os.PathLike,
    model_b: onnx.ModelProto | str | os.PathLike,
    *,
    feeds_or_cases: str
    | os.PathLike
    | Sequence[Case]
    | Mapping[str, np.ndarray]
    | Sequence[Mapping[str, np.ndarray]]
    | None = None,
    shapes: Mapping[str, Sequence[int]] | None = None,
    seed: int = 0,
    cases: int = 1,
    provider: str | ProviderChoice = "auto",
    atol: float = DEFAULT_ATOL,
    rtol: float = DEFAULT_RTOL,
    tolerances: Tolerances | None = None,
) -> ValidationReport:
    """Run ``model_a`` and ``model_b`` on the same inputs and compare a's outputs with b's.

    ``model_b`` is the reference. Inputs come from ``feeds_or_cases`` (a reference path or list
    of cases, whose stored outputs are not used; one feeds dict; a list of them) or, when it is
    None, ``cases`` random sets of the dtypes model a declares, at the sizes in ``shapes``
    (``{"x": [3, 3, 224, 224]}``; a symbolic dim not given there is taken from model b's
    declaration, else it is an error), floats standard normal, integers in [0, 4), drawn from
    ``numpy.random.default_rng(seed)``.
    """
    _check_global_tolerances(atol, rtol)
    if not isinstance(cases, int) or isinstance(cases, bool) or cases < 1:
        raise UsageError(f"cases must be an integer >= 1, got {cases!r}")
    choice = provider if isinstance(provider, ProviderChoice) else resolve_provider(provider)
    runner_a = _ModelRunner(model_a, choice)
    runner_b = _ModelRunner(model_b, choice)
    label_b = runner_b.label if not isinstance(model_b, onnx.ModelProto) else "the other model"
    shapes = dict(shapes or {})
    unknown = [n for n in shapes if n not in {s.name for s in runner_a.specs}]
    if unknown:
        raise UsageError(
            f"--shape given for {', '.join(map(repr, unknown))}, not an input of the model "
            f"(inputs: {', '.join(s.name for s in runner_a.specs)})"
        )
    inputs: list[tuple[str, Mapping[str, np.ndarray]]]
    if feeds_or_cases is None:
        rng = np.random.default_rng(seed)
        inputs = [
            (f"random_{i}", _random_inputs(runner_a, runner_b, shapes, rng)) for i in range(cases)
        ]
    elif isinstance(feeds_or_cases, (str, os.PathLike)):
        inputs = [(c.name, c.inputs) for c in load_cases(feeds_or_cases)]
    elif isinstance(feeds_or_cases, Mapping):
        inputs = [("feeds_0", feeds_or_cases)]
    else:
        inputs = []
        for i, item in enumerate(feeds_or_cases):
            if isinstance(item, Case):
                inputs.append((item.name, item.inputs))
            elif isinstance(item, Mapping):
                inputs.append((f"feeds_{i}", item))
            else:
                raise TypeError(
                    f"feeds_or_cases item {i} is a {type(item).__name__}, not a Case or dict"
                )
        if not inputs:
            raise ReferenceDataError("no inputs to compare the models on")
    known = set(runner_a.output_names) | set(runner_b.output_names)
    tols = _check_tolerances(tolerances, known)
    runs: list[tuple[str, Mapping[str, np.ndarray], Expected]] = []
    for name, feeds in inputs:

        def expected(feeds: Mapping[str, np.ndarray] = feeds) -> Mapping[str, np.ndarray]:
            try:
                checked, _ = check_inputs(runner_b.specs, feeds)
                return runner_b.run(checked)
            except CaseFailure as exc:
                raise CaseFailure(f"reference model {label_b}: {exc}", node=exc.node) from None

        runs.append((name, feeds, expected))
    return _run_cases(runner_a, runs, choice, atol, rtol, tols, label_b)
