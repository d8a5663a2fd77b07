"""What a validation run reports: per case and output, statistics and pass/fail, as rich tables
and as JSON (``to_dict``). Truthy when every case ran and every output passed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from onnxsurgery.validation.arrays import OutputComparison, format_number
from onnxsurgery.validation.tolerances import DEFAULT_ATOL, DEFAULT_RTOL, HALF_ATOL, HALF_RTOL

if TYPE_CHECKING:  # rich is imported where a report is rendered: a quiet run never loads it
    from rich.console import Console, ConsoleOptions, Group, JustifyMethod, RenderResult

__all__ = ["CaseResult", "ValidationReport"]


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

    def _half_at_defaults(self) -> bool:
        """Whether a float16/bfloat16 output was compared at the default tolerance (the fp16 one)."""
        if (self.atol, self.rtol) != (DEFAULT_ATOL, DEFAULT_RTOL):
            return False
        half = {"float16", "bfloat16"}
        return any(
            o.expected_dtype in half and o.name not in self.tolerances
            for c in self.cases
            for o in c.outputs
        )

    def tolerance_text(self) -> str:
        text = f"atol {format_number(self.atol)}, rtol {format_number(self.rtol)}"
        if (self.atol, self.rtol) == (DEFAULT_ATOL, DEFAULT_RTOL):
            text += " (fp32 defaults)"
            if self._half_at_defaults():
                text += f"; float16 outputs atol {format_number(HALF_ATOL)}, "
                text += f"rtol {format_number(HALF_RTOL)} (fp16 defaults)"
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
            if self._half_at_defaults():
                extra += f"; float16 at atol {format_number(HALF_ATOL)}, rtol {format_number(HALF_RTOL)}"
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

    def view(self, verbose: bool = False) -> _ReportView:
        """The terminal form; ``verbose`` adds the smallest passing atol of passing rows."""
        return _ReportView(self, verbose)

    @property
    def verdict(self) -> str:
        """One line: PASS or FAIL with the summary, and on a pass the closest output."""
        if not self:
            return "FAIL: " + self.summary
        rows = [(c, o) for c in self.cases for o in c.outputs if o.max_abs is not None]
        if not rows:
            return "PASS: " + self.summary
        case, out = max(rows, key=lambda r: (r[1].severity, r[1].max_abs or 0.0))
        worst = f"worst max abs {format_number(out.max_abs)} ({case.name} {out.name})"
        return f"PASS: {self.summary}; {worst}"

    def _columns(self, width: int, verbose: bool) -> list[tuple[str, JustifyMethod]]:
        """The columns shown: from 110 columns on every statistic; the smallest passing atol
        only where a row fails (or with ``verbose``)."""
        wide = width >= 110
        columns: list[tuple[str, JustifyMethod]] = [("case", "left"), ("output", "left")]
        if wide:
            columns.append(("shape", "left"))
        columns.append(("max abs", "right"))
        if wide:
            columns += [("max rel", "right"), ("mean abs", "right")]
        columns += [("out of tol", "right"), ("worst at", "left")]
        if verbose or self.failures:
            columns.append(("min atol", "right"))
        if wide and self.tolerances:
            columns.append(("tolerance", "left"))
        columns.append(("result", "left"))
        return columns

    def render(self, width: int = 200, verbose: bool = False) -> Group:
        """The table and its footer for a terminal ``width`` columns wide.

        From 110 columns on every statistic has a column; narrower terminals leave out shape,
        max rel and mean abs (the JSON report always has them). Every cell wraps rather than
        lose a digit or a letter; ``verbose`` shows the smallest passing atol of passing rows too. Why a row failed is listed under the
        table, where a long message does not squeeze the columns.
        """
        from rich import box
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        title = "validation" + (f" against {self.reference}" if self.reference else "")
        table = Table(
            title=Text(title),
            title_justify="left",
            box=box.SIMPLE_HEAD,
            pad_edge=False,
            collapse_padding=True,
        )
        columns = self._columns(width, verbose)
        for name, justify in columns:
            table.add_column(name, justify=justify, overflow="fold")
        rows: list[tuple[CaseResult, OutputComparison | None]] = []
        rows += [(c, None) for c in self.cases if c.error]
        rows += self.failures
        passing = sorted(
            ((c, o) for c in self.cases for o in c.outputs if o), key=lambda r: -r[1].severity
        )
        shown_passing = passing[: max(0, self.max_rows - len(rows))]
        details: list[str] = []
        for case, out in rows + shown_passing:
            if out is None:
                details.append(f"{case.name}: did not run: {case.error}")
                cells = {"case": case.name, "output": "-", "result": "did not run"}
            else:
                cells = _cells(case, out, verbose)
                if not out:
                    details.append(f"{case.name} {out.describe()}")
            # Text, not markup: names are user text and "worst at" reads [1,2]
            style = None if out else "red"
            table.add_row(*(Text(cells.get(n, "")) for n, _ in columns), style=style)
        return Group(table, *self._footer(len(passing) - len(shown_passing), details))

    def _footer(self, hidden: int, details: list[str]) -> list[Any]:
        from rich.text import Text

        parts: list[Any] = []
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
        return parts


def _cells(case: CaseResult, out: OutputComparison, verbose: bool) -> dict[str, str]:
    """One row's cells; the smallest passing atol only on a failing row (or with ``verbose``):
    beside a passing row's max abs it says nothing."""
    shape = "x".join(map(str, out.shape)) if out.shape is not None else "-"
    if out.shape == ():
        shape = "scalar"
    percent = f"{out.mismatches} ({out.mismatch_percent:.2g}%)" if out.mismatches else "0"
    if out.max_abs is None and out.problem:
        percent = "-"
    worst = "[" + ",".join(map(str, out.worst_index)) + "]" if out.worst_index is not None else "-"
    return {
        "case": case.name,
        "output": out.name,
        "shape": shape,
        "max abs": format_number(out.max_abs),
        "max rel": format_number(out.max_rel),
        "mean abs": format_number(out.mean_abs),
        "out of tol": percent,
        "worst at": worst,
        "min atol": format_number(out.min_atol, up=True) if verbose or not out else "",
        "tolerance": out.tolerance_text(),
        "result": "ok" if out else "FAIL",
    }


class _ReportView:
    """Renders a ValidationReport at the width of wherever it is printed."""

    def __init__(self, report: ValidationReport, verbose: bool = False) -> None:
        self.report = report
        self.verbose = verbose

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.report.render(options.max_width, self.verbose)
