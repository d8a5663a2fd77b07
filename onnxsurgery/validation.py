"""Validation: run a model on ONNX Runtime over stored torch cases and compare every output.

    report = validate("model.onnx", "fixtures/net/torchscript")     # a folder of test_data_set_N
    if not report:
        print(report.summary)   # 3 cases, 3 outputs: 1 mismatch (case test_data_set_2 output ...)

Two models against each other (:func:`compare_models`, importable from here too) live in
:mod:`onnxsurgery.model_comparison`; they share the case runner below.

One session serves every case. Before a case runs, its inputs are checked against the model's
declared inputs (a missing input, a dtype or a size the model does not accept fails that case
with a message naming the input, the expected and the got dims); an ONNX Runtime failure while
running a case fails that case with ORT's message and node. Every output is compared with
:func:`onnxsurgery.compare.compare_arrays`: floating outputs at ``atol=1e-4, rtol=1e-3`` by default,
bool and integer outputs exactly unless per-output tolerances say otherwise.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.table import Table
from rich.text import Text

from onnxsurgery.compare import (
    DEFAULT_ATOL,
    DEFAULT_RTOL,
    OutputComparison,
    compare_arrays,
    format_number,
    is_exact_dtype,
)
from onnxsurgery.errors import ModelLoadError, ReferenceDataError, UsageError
from onnxsurgery.model_io import as_model
from onnxsurgery.references import Case, load_cases
from onnxsurgery.runtime import (
    ProviderChoice,
    create_session,
    describe_ort_error,
    quiet_stderr,
    resolve_provider,
)
from onnxsurgery.signature import CaseFailure, check_inputs, model_inputs

__all__ = [
    "CaseResult",
    "ValidationReport",
    "validate",
]

Tolerances = Mapping[str, tuple[float | None, float | None]]
OutputMapFn = Callable[[Mapping[str, np.ndarray]], Mapping[str, np.ndarray]]
#: A case's reference outputs, or a function computing them when the case runs.
Expected = Mapping[str, np.ndarray] | Callable[[], Mapping[str, np.ndarray]]


# --------------------------------------------------------------------------------------------
# running one model

class _ModelRunner:
    """One model, one session, reused over every case."""

    def __init__(self, model: onnx.ModelProto | str | os.PathLike, choice: ProviderChoice) -> None:
        proto = as_model(model)
        self.label = str(model) if not isinstance(model, onnx.ModelProto) else "model"
        self.specs = model_inputs(proto)
        self.output_names = [o.name for o in proto.graph.output]
        try:
            self.session = create_session(
                proto if isinstance(model, onnx.ModelProto) else model, choice, spin=False
            )
        except Exception as exc:  # ORT rejecting the model is the user's model, not our bug
            message, node = describe_ort_error(exc)
            where = f" (node {node!r})" if node and node not in message else ""
            raise ModelLoadError(
                f"{self.label}: ONNX Runtime cannot load the model: {message}{where}"
            ) from None
        self.choice = choice

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            with quiet_stderr():
                values = self.session.run(self.output_names, dict(feeds))
        except Exception as exc:  # any ORT failure on this case is this case's failure
            message, node = describe_ort_error(exc)
            where = f" (node {node!r})" if node and node not in message else ""
            raise CaseFailure(f"ONNX Runtime failed: {message}{where}", node=node) from None
        return dict(zip(self.output_names, values, strict=True))


# --------------------------------------------------------------------------------------------
# results


@dataclass
class CaseResult:
    """One case: its outputs compared, or the reason it could not run. Truthy when it passes."""

    name: str
    outputs: list[OutputComparison] = field(default_factory=list)
    error: str | None = None
    node: str | None = None
    notes: list[str] = field(default_factory=list)
    inputs: dict[str, tuple[list[int], str]] = field(default_factory=dict)
    inference_seconds: float = 0.0
    compare_seconds: float = 0.0

    def __bool__(self) -> bool:
        return self.error is None and all(self.outputs)

    @property
    def failures(self) -> list[OutputComparison]:
        return [o for o in self.outputs if not o]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "passed": bool(self),
            "error": self.error,
            "node": self.node,
            "notes": list(self.notes),
            "inputs": {k: {"shape": s, "dtype": d} for k, (s, d) in self.inputs.items()},
            "outputs": [o.to_dict() for o in self.outputs],
            "inference_seconds": round(self.inference_seconds, 6),
            "compare_seconds": round(self.compare_seconds, 6),
        }


@dataclass
class ValidationReport:
    """Every case of a validation run. Truthy when every case ran and every output passed.

    ``summary`` is one line; ``provider`` says which ONNX Runtime provider ran and why;
    ``to_dict()`` is the ``--report`` JSON; ``__rich__()`` the terminal table, worst outputs first.
    """

    cases: list[CaseResult]
    provider: str
    atol: float = DEFAULT_ATOL
    rtol: float = DEFAULT_RTOL
    tolerances: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    reference: str | None = None
    notes: list[str] = field(default_factory=list)
    #: rows shown by ``__rich__`` beyond the failing ones (the JSON always has every row)
    max_rows: int = 30

    def __bool__(self) -> bool:
        return bool(self.cases) and all(self.cases)

    @property
    def passed(self) -> bool:
        return bool(self)

    @property
    def output_count(self) -> int:
        return sum(len(c.outputs) for c in self.cases)

    @property
    def failures(self) -> list[tuple[CaseResult, OutputComparison]]:
        """Failing outputs, worst first."""
        rows = [(c, o) for c in self.cases for o in c.outputs if not o]
        return sorted(rows, key=lambda row: -row[1].severity)

    @property
    def inference_seconds(self) -> float:
        return sum(c.inference_seconds for c in self.cases)

    @property
    def compare_seconds(self) -> float:
        return sum(c.compare_seconds for c in self.cases)

    def tolerance_text(self) -> str:
        text = f"atol {format_number(self.atol)}, rtol {format_number(self.rtol)}"
        if (self.atol, self.rtol) == (DEFAULT_ATOL, DEFAULT_RTOL):
            text += " (fp32 defaults)"
        text += "; bool/int outputs exact"
        for name, (a, r) in self.tolerances.items():
            parts = [
                f"atol {format_number(a)}" if a is not None else "",
                f"rtol {format_number(r)}" if r is not None else "",
            ]
            text += f"; {name}: " + ", ".join(p for p in parts if p)
        return text

    @property
    def summary(self) -> str:
        n_cases, n_out = len(self.cases), self.output_count
        head = f"{n_cases} case{'s' if n_cases != 1 else ''}, {n_out} output{'s' if n_out != 1 else ''}"
        broken = [c for c in self.cases if c.error]
        failures = self.failures
        if not broken and not failures:
            if not self.cases:
                return "no cases"
            extra = " and per-output tolerances" if self.tolerances else ""
            tol = f"atol {format_number(self.atol)}, rtol {format_number(self.rtol)}{extra}"
            return f"{head}: all match ({tol})"
        parts = []
        if failures:
            case, out = failures[0]
            n = len(failures)
            label = "1 mismatch" if n == 1 else f"{n} mismatches, worst"
            parts.append(f"{label} (case {case.name} output {out.describe()})")
        if broken:
            n = len(broken)
            first = broken[0]
            label = "1 case did not run" if n == 1 else f"{n} cases did not run, first"
            parts.append(f"{label} ({first.name}: {first.error})")
        return f"{head}: " + "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": bool(self),
            "summary": self.summary,
            "provider": self.provider,
            "reference": self.reference,
            "atol": self.atol,
            "rtol": self.rtol,
            "tolerances": {k: list(v) for k, v in self.tolerances.items()},
            "exact_dtypes": "bool and integer outputs are compared exactly unless a per-output tolerance is given",
            "notes": list(self.notes),
            "cases": [c.to_dict() for c in self.cases],
            "inference_seconds": round(self.inference_seconds, 6),
            "compare_seconds": round(self.compare_seconds, 6),
        }

    def __rich__(self) -> _ReportView:
        """The terminal form: a table, worst outputs first, failing rows red; fits the width."""
        return _ReportView(self)

    def render(self, width: int = 200) -> Group:
        """The table and its footer for a terminal ``width`` columns wide.

        From 110 columns on every statistic has a column; narrower terminals drop shape, max rel
        and mean abs (the JSON report always has them). Why a row failed is listed under the
        table, where a long message does not squeeze the columns.
        """
        wide = width >= 110
        title = "validation" + (f" against {self.reference}" if self.reference else "")
        table = Table(
            title=title,
            title_justify="left",
            box=box.SIMPLE_HEAD,
            pad_edge=False,
            collapse_padding=True,
        )
        uniform = not self.tolerances  # else show each row's tolerance
        columns: list[tuple[str, str]] = [("case", "left"), ("output", "left")]
        if wide:
            columns.append(("shape", "left"))
        columns.append(("max abs", "right"))
        if wide:
            columns += [("max rel", "right"), ("mean abs", "right")]
        columns += [("out of tol", "right"), ("worst at", "left"), ("min atol", "right")]
        if wide and not uniform:
            columns.append(("tolerance", "left"))
        columns.append(("result", "left"))
        for name, justify in columns:
            table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]

        rows: list[tuple[CaseResult, OutputComparison | None]] = []
        rows += [(c, None) for c in self.cases if c.error]
        rows += self.failures
        passing = sorted(
            ((c, o) for c in self.cases for o in c.outputs if o), key=lambda r: -r[1].severity
        )
        shown_passing = passing[: max(0, self.max_rows - len(rows))]
        details: list[str] = []
        for case, out in rows + shown_passing:
            cells: dict[str, str] = {"case": case.name}
            if out is None:
                cells.update(output="-", result="did not run")
                details.append(f"{case.name}: did not run: {case.error}")
                table.add_row(*(cells.get(n, "") for n, _ in columns), style="red")
                continue
            shape = "x".join(map(str, out.shape)) if out.shape is not None else "-"
            if out.shape == ():
                shape = "scalar"
            percent = f"{out.mismatches} ({out.mismatch_percent:.2g}%)" if out.mismatches else "0"
            if out.max_abs is None and out.problem:
                percent = "-"
            cells.update(
                {
                    "output": out.name,
                    "shape": shape,
                    "max abs": format_number(out.max_abs),
                    "max rel": format_number(out.max_rel),
                    "mean abs": format_number(out.mean_abs),
                    "out of tol": percent,
                    "worst at": "[" + ",".join(map(str, out.worst_index)) + "]"
                    if out.worst_index is not None
                    else "-",
                    "min atol": format_number(out.min_atol, up=True),
                    "tolerance": out.tolerance_text(),
                    "result": "ok" if out else "FAIL",
                }
            )
            if not out:
                details.append(f"{case.name} {out.describe()}")
            table.add_row(*(cells[n] for n, _ in columns), style=None if out else "red")
        parts: list[Any] = [table]
        hidden = len(passing) - len(shown_passing)
        if hidden:
            parts.append(
                Text(
                    f"... {hidden} more passing output(s); --report FILE.json has every row",
                    style="dim",
                )
            )
        for line in details[:10]:
            parts.append(Text(f"  {line}", style="red"))
        if len(details) > 10:
            parts.append(
                Text(f"  ... {len(details) - 10} more failures in --report FILE.json", style="red")
            )
        style = "green" if self else "red"
        parts.append(Text(("PASS: " if self else "FAIL: ") + self.summary, style=style))
        parts.append(Text(f"tolerance: {self.tolerance_text()}", style="dim"))
        parts.append(Text(f"runtime: {self.provider}", style="dim"))
        for note in self.notes:
            parts.append(Text(f"note: {note}", style="yellow"))
        return Group(*parts)


class _ReportView:
    """Renders a ValidationReport at the width of wherever it is printed."""

    def __init__(self, report: ValidationReport) -> None:
        self.report = report

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.report.render(options.max_width)


# --------------------------------------------------------------------------------------------
# running


def _as_cases(references: str | os.PathLike | Sequence[Case]) -> tuple[list[Case], str | None]:
    if references is None:
        raise UsageError("no reference cases: give ref=PATH to the validate pass, or --ref PATH")
    if isinstance(references, (str, os.PathLike)):
        return load_cases(references), os.fspath(references)
    cases = list(references)
    if not cases:
        raise ReferenceDataError("no reference cases to validate against")
    for c in cases:
        if not isinstance(c, Case):
            raise TypeError(f"references must be a path or a list of Case, got {type(c).__name__}")
    return cases, None


def _check_tolerances(
    tolerances: Tolerances | None, known: Iterable[str]
) -> dict[str, tuple[float | None, float | None]]:
    result: dict[str, tuple[float | None, float | None]] = {}
    known = set(known)
    for name, pair in (tolerances or {}).items():
        if name not in known:
            raise UsageError(
                f"tolerance given for output {name!r}, which is neither a model output nor a "
                f"reference output (outputs: {', '.join(sorted(known)) or 'none'})"
            )
        a, r = pair
        for what, v in (("atol", a), ("rtol", r)):
            if v is not None and not (isinstance(v, (int, float)) and v >= 0 and math.isfinite(v)):
                raise UsageError(f"{what} for output {name!r} must be a number >= 0, got {v!r}")
        result[name] = (None if a is None else float(a), None if r is None else float(r))
    return result


def _tolerance_for(
    name: str,
    expected: np.ndarray,
    atol: float,
    rtol: float,
    tolerances: Mapping[str, tuple[float | None, float | None]],
) -> tuple[float | None, float | None]:
    a, r = tolerances.get(name, (None, None))
    if is_exact_dtype(expected.dtype):  # exact unless a tolerance names this output
        return a, r
    return (atol if a is None else a), (rtol if r is None else r)


def _run_case(
    runner: _ModelRunner,
    name: str,
    inputs: Mapping[str, np.ndarray],
    expected: Expected,
    *,
    atol: float,
    rtol: float,
    tolerances: Mapping[str, tuple[float | None, float | None]],
) -> CaseResult:
    result = CaseResult(
        name=name,
        inputs={k: (list(np.shape(v)), str(np.asarray(v).dtype)) for k, v in inputs.items()},
    )
    try:
        feeds, result.notes = check_inputs(runner.specs, inputs)
        if callable(expected):
            expected = expected()
        t0 = time.perf_counter()
        actual = runner.run(feeds)
        result.inference_seconds = time.perf_counter() - t0
    except CaseFailure as exc:
        result.error, result.node = str(exc), exc.node
        return result
    t0 = time.perf_counter()
    produced = runner.output_names
    for out_name in produced:
        if out_name not in expected:
            result.outputs.append(
                OutputComparison.missing(
                    out_name,
                    f"model output with no reference (the case has {', '.join(expected) or 'none'})",
                )
            )
            continue
        ref = np.asarray(expected[out_name])
        a, r = _tolerance_for(out_name, ref, atol, rtol, tolerances)
        result.outputs.append(compare_arrays(actual[out_name], ref, atol=a, rtol=r, name=out_name))
    for ref_name in expected:
        if ref_name not in actual:
            result.outputs.append(
                OutputComparison.missing(
                    ref_name,
                    f"reference output the model does not produce (model outputs: {', '.join(produced)})",
                )
            )
    result.compare_seconds = time.perf_counter() - t0
    return result


def _run_cases(
    runner: _ModelRunner,
    runs: Iterable[tuple[str, Mapping[str, np.ndarray], Expected]],
    choice: ProviderChoice,
    atol: float,
    rtol: float,
    tolerances: dict[str, tuple[float | None, float | None]],
    reference: str | None,
) -> ValidationReport:
    """Run every ``(name, inputs, expected)`` on ``runner`` and gather the report."""
    results = [
        _run_case(runner, name, inputs, expected, atol=atol, rtol=rtol, tolerances=tolerances)
        for name, inputs, expected in runs
    ]
    return ValidationReport(
        cases=results,
        provider=choice.note,
        atol=float(atol),
        rtol=float(rtol),
        tolerances=tolerances,
        reference=reference,
        notes=_collect_notes(results),
    )


def _collect_notes(cases: Iterable[CaseResult]) -> list[str]:
    seen: dict[str, list[str]] = {}
    for c in cases:
        for note in c.notes:
            seen.setdefault(note, []).append(c.name)
    return [
        f"{note} ({len(names)} case{'s' if len(names) != 1 else ''})"
        for note, names in seen.items()
    ]


def _check_global_tolerances(atol: float, rtol: float) -> None:
    for what, v in (("atol", atol), ("rtol", rtol)):
        if not (
            isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 and math.isfinite(v)
        ):
            raise UsageError(f"{what} must be a number >= 0, got {v!r}")


def validate(
    model: onnx.ModelProto | str | os.PathLike,
    references: str | os.PathLike | Sequence[Case],
    *,
    provider: str | ProviderChoice = "auto",
    atol: float = DEFAULT_ATOL,
    rtol: float = DEFAULT_RTOL,
    tolerances: Tolerances | None = None,
    output_map: OutputMapFn | None = None,
) -> ValidationReport:
    """Run ``model`` on every reference case and compare each output with torch's.

    ``references`` is a path :func:`onnxsurgery.references.load_cases` reads or a list of
    :class:`~onnxsurgery.references.Case`. ``atol``/``rtol`` apply to floating outputs;
    ``tolerances`` maps an output name to ``(atol, rtol)`` (``None`` keeps the default) and is
    the only way to loosen bool/int outputs, which are otherwise compared exactly.
    ``output_map`` maps each case's reference outputs onto the model's current outputs (the
    pipeline passes ``PassContext.map_outputs``). Raises ProviderError when the provider cannot
    run, ModelLoadError when ONNX Runtime cannot load the model, ReferenceDataError when the
    references cannot be read; everything about a single case goes into the report.
    """
    _check_global_tolerances(atol, rtol)
    cases, reference = _as_cases(references)
    choice = provider if isinstance(provider, ProviderChoice) else resolve_provider(provider)
    runner = _ModelRunner(model, choice)
    known = set(runner.output_names) | {n for c in cases for n in c.outputs}
    tols = _check_tolerances(tolerances, known)
    runs: list[tuple[str, Mapping[str, np.ndarray], Expected]] = []
    for case in cases:
        expected: Any = case.outputs
        if output_map is not None:

            def expected(case: Case = case) -> Mapping[str, np.ndarray]:
                try:
                    return output_map(case.outputs)
                except (KeyError, ValueError, UsageError, ReferenceDataError) as exc:
                    raise CaseFailure(
                        f"mapping reference outputs onto the model's failed: {exc}"
                    ) from None

        runs.append((case.name, case.inputs, expected))
    return _run_cases(runner, runs, choice, atol, rtol, tols, reference)
