"""Comparing one output array with its reference: error statistics, NaN/Inf placement, pass/fail.

An element passes when ``|actual - expected| <= atol + rtol * |expected|`` (the rule of
``numpy.allclose``), or when both are NaN, or both are the same infinity. Defaults come from
:mod:`onnxsurgery.validation.tolerances` (floating outputs loose, bool and integer outputs
exact)::

    result = compare_arrays(ort_out, torch_out, name="logits")
    if not result:
        print(result.describe())   # logits: 3/10 elements out of tolerance, max abs 2.1e-2 at [0, 3] ...

Big outputs are walked in chunks of :data:`~.array_stats.CHUNK` elements (:mod:`.array_stats`), so the temporaries (float64 work
arrays, masks) stay a few MiB whatever the output's size; inputs are never copied whole.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from onnxsurgery.validation.array_stats import CHUNK, ElementStats, ErrorHistogram
from onnxsurgery.validation.tolerances import default_tolerance, is_exact_dtype

__all__ = [
    "CHUNK",
    "ErrorHistogram",
    "OutputComparison",
    "compare_arrays",
    "format_number",
]



def format_number(value: float | None, *, up: bool = False, digits: int = 3) -> str:
    """Short form used in reports: ``2.13e-2``, ``1e-4``, ``0``, ``inf``; ``-`` for None.

    ``digits`` significant digits, trailing zeros dropped; ``up=True`` rounds up instead of to
    nearest (for a tolerance that must still pass).
    """
    if value is None:
        return "-"
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value == 0:
        return "0"
    places = max(digits - 1, 0)
    mantissa, exponent = f"{value:.{places}e}".split("e")
    if up and float(f"{mantissa}e{exponent}") < value:
        exp = int(exponent)
        scale = 10**places
        m = math.ceil(value / 10.0**exp * scale) / scale
        if m >= 10:
            m, exp = m / 10, exp + 1
        mantissa, exponent = f"{m:.{places}f}", str(exp)
    if "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    return mantissa if int(exponent) == 0 else f"{mantissa}e{int(exponent)}"


@dataclass(frozen=True)
class OutputComparison:
    """One output of one case compared with its reference. Truthy when it passes.

    Statistics are over elements where both sides are finite (NaN/Inf placed alike count as a
    match with error 0); ``nonfinite_mismatches`` counts elements whose NaN/Inf placement differs
    (NaN where the reference is finite, Inf of the other sign, ...). ``max_rel`` is
    ``max |a - e| / |e|`` over elements whose reference is nonzero. ``worst_index`` is the element
    furthest beyond the relative part of the tolerance, the one that decides ``min_atol``: the
    smallest ``atol`` that would pass at this ``rtol`` (``inf`` when no atol can pass, because a
    NaN/Inf is misplaced; then ``worst_index`` is the first such element, and it is ``None`` when
    the arrays are identical). Statistics are ``None`` when the arrays could not be compared at all
    (``problem`` says why: a shape mismatch, a missing output).
    """

    name: str
    passed: bool
    atol: float
    rtol: float
    exact: bool = False
    shape: tuple[int, ...] | None = None
    expected_shape: tuple[int, ...] | None = None
    dtype: str | None = None
    expected_dtype: str | None = None
    size: int = 0
    max_abs: float | None = None
    max_rel: float | None = None
    mean_abs: float | None = None
    mismatches: int = 0
    nonfinite_mismatches: int = 0
    worst_index: tuple[int, ...] | None = None
    worst_actual: Any = None
    worst_expected: Any = None
    min_atol: float | None = None
    problem: str | None = None
    #: the errors' spread (None where values were not differenced: strings, a shape mismatch)
    histogram: ErrorHistogram | None = None

    def __bool__(self) -> bool:
        return self.passed

    @property
    def mismatch_percent(self) -> float:
        """Percentage of elements out of tolerance (100 when nothing could be compared)."""
        if self.max_abs is None and self.problem:
            return 100.0
        return 100.0 * self.mismatches / self.size if self.size else 0.0

    @property
    def severity(self) -> float:
        """How far beyond its own tolerance this output is (``min_atol / atol``); for sorting."""
        if self.problem and self.max_abs is None:
            return math.inf
        if self.min_atol is None:
            return 0.0
        if self.min_atol == 0:
            return 0.0
        return self.min_atol / self.atol if self.atol > 0 else math.inf

    @classmethod
    def missing(
        cls, name: str, problem: str, *, atol: float = 0.0, rtol: float = 0.0
    ) -> OutputComparison:
        """An output that exists on one side only."""
        return cls(name=name, passed=False, atol=atol, rtol=rtol, problem=problem)

    def tolerance_text(self) -> str:
        if self.exact and self.atol == 0 and self.rtol == 0:
            return "exact"
        return f"atol {format_number(self.atol)}, rtol {format_number(self.rtol)}"

    def describe(self) -> str:
        """One line: why it failed (or that it passed), with the numbers that matter."""
        if self.problem and self.max_abs is None:
            return f"{self.name}: {self.problem}"
        parts: list[str] = []
        if self.problem:
            parts.append(self.problem)
        if self.nonfinite_mismatches:
            where = (
                f" (first at {list(self.worst_index)}: {_show(self.worst_actual)}, expected {_show(self.worst_expected)})"
                if self.worst_index is not None
                else ""
            )
            parts.append(f"{self.nonfinite_mismatches} NaN/Inf placed differently{where}")
        finite_out = self.mismatches - self.nonfinite_mismatches
        if finite_out:
            where = ""
            if self.worst_index is not None and not self.nonfinite_mismatches:
                apart = self._worst_apart()
                where = (
                    f"; furthest out of tolerance at {list(self.worst_index)}: {apart}"
                    if apart
                    else f" at {list(self.worst_index)}"
                )
            if self.max_abs is None:  # strings: equal or not
                parts.append(f"{finite_out}/{self.size} elements differ (first{where})")
            else:
                parts.append(
                    f"{finite_out}/{self.size} elements out of tolerance ({self.tolerance_text()}), "
                    f"max abs {format_number(self.max_abs)}{where}"
                )
            if self.min_atol is not None and math.isfinite(self.min_atol):
                parts.append(f"passes at atol >= {format_number(self.min_atol, up=True)}")
        if not parts:
            parts.append(f"ok, max abs {format_number(self.max_abs)} ({self.tolerance_text()})")
        return f"{self.name}: " + "; ".join(parts)

    def _worst_apart(self) -> str:
        """Where the element furthest out of tolerance (``worst_index``, the one that decides
        ``min_atol``) is not the one of ``max_abs``: its own error and expected value, so that
        the figures agree (``max abs 1.26e-5; furthest out of tolerance at [0, 0, 337]: 1.18e-5
        off (expected 5.08e-2); passes at atol >= 1.13e-5``: the 1.26e-5 is on a larger value,
        of which rtol forgives more). Empty where they are one element."""
        a, e = _scalar(self.worst_actual), _scalar(self.worst_expected)
        if not isinstance(a, (int, float)) or not isinstance(e, (int, float)):
            return ""
        if isinstance(a, bool) or isinstance(e, bool) or self.max_abs is None:
            return ""
        off = abs(a - e) if isinstance(a, int) and isinstance(e, int) else abs(float(a) - float(e))
        if format_number(off) == format_number(self.max_abs):
            return ""
        return f"{format_number(off)} off (expected {_show(e)})"

    def to_dict(self) -> dict[str, Any]:
        def num(v: float | None) -> float | None:
            return None if v is None or not math.isfinite(v) else float(v)

        return {
            "name": self.name,
            "passed": self.passed,
            "problem": self.problem,
            "shape": list(self.shape) if self.shape is not None else None,
            "expected_shape": list(self.expected_shape)
            if self.expected_shape is not None
            else None,
            "dtype": self.dtype,
            "expected_dtype": self.expected_dtype,
            "atol": self.atol,
            "rtol": self.rtol,
            "exact": self.exact,
            "size": self.size,
            "max_abs": num(self.max_abs),
            "max_rel": num(self.max_rel),
            "mean_abs": num(self.mean_abs),
            "mismatches": self.mismatches,
            "mismatch_percent": round(self.mismatch_percent, 6),
            "nonfinite_mismatches": self.nonfinite_mismatches,
            "worst_index": list(self.worst_index) if self.worst_index is not None else None,
            "worst_actual": _scalar(self.worst_actual),
            "worst_expected": _scalar(self.worst_expected),
            # null when no atol passes (a NaN/Inf placed differently) or nothing was compared
            "min_atol": num(self.min_atol),
            "histogram": self.histogram.to_dict() if self.histogram is not None else None,
        }


def _show(value: Any) -> str:
    v = _scalar(value)
    return format_number(v) if isinstance(v, float) else str(v)


def _scalar(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.integer, int)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        v = float(value)
        return v if math.isfinite(v) else str(v)
    return str(value)


def compare_arrays(
    actual: np.ndarray,
    expected: np.ndarray,
    *,
    atol: float | None = None,
    rtol: float | None = None,
    name: str = "output",
    histogram: bool = False,
) -> OutputComparison:
    """Compare ``actual`` (the model's output) with ``expected`` (the reference).

    ``atol``/``rtol`` of ``None`` take the dtype's default (:func:`default_tolerance`):
    :data:`DEFAULT_ATOL` / :data:`DEFAULT_RTOL` for floating outputs, wider for float16 and
    bfloat16, exact (0, 0) for bool, integer and string outputs.
    Shapes must match exactly; a different dtype fails (the values are still compared, so the
    report says how far off they are too). ``histogram`` also counts every element's error by
    binary exponent (``OutputComparison.histogram``, what an HTML report draws; it about doubles
    the comparison's time, so only a run that writes a report asks).
    """
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    exact_kind = is_exact_dtype(expected.dtype)
    atol, rtol = _tolerances(expected.dtype, atol, rtol, name)
    base = OutputComparison(  # what every outcome says; the rest is filled in below
        name=name,
        passed=False,
        atol=atol,
        rtol=rtol,
        exact=exact_kind,
        shape=tuple(int(d) for d in actual.shape),
        expected_shape=tuple(int(d) for d in expected.shape),
        dtype=str(actual.dtype),
        expected_dtype=str(expected.dtype),
        size=int(expected.size),
    )
    if actual.shape != expected.shape:
        return replace(base, problem=f"shape {list(actual.shape)}, expected {list(expected.shape)}")
    dtype_problem = None
    if actual.dtype != expected.dtype:
        dtype_problem = f"dtype {actual.dtype}, expected {expected.dtype}"

    text_kinds = "OSU"
    if actual.dtype.kind in text_kinds or expected.dtype.kind in text_kinds:
        return _compare_text(actual, expected, base, dtype_problem)
    stats = ElementStats(actual, expected, atol, rtol, exact_kind, histogram)
    passed = dtype_problem is None and stats.mismatches == 0
    return replace(
        base,
        passed=passed,
        max_abs=stats.max_abs,
        max_rel=stats.max_rel,
        mean_abs=stats.mean_abs,
        mismatches=stats.mismatches,
        nonfinite_mismatches=stats.nonfinite,
        worst_index=stats.worst_index(expected.shape),
        worst_actual=stats.worst_value(actual),
        worst_expected=stats.worst_value(expected),
        min_atol=stats.min_atol,
        problem=dtype_problem,
        histogram=stats.histogram(),
    )


def _tolerances(
    dtype: np.dtype, atol: float | None, rtol: float | None, name: str
) -> tuple[float, float]:
    """The tolerances given, or the dtype's defaults (:func:`~.tolerances.default_tolerance`:
    exact for bool, integers and strings, wider for float16/bfloat16)."""
    default_atol, default_rtol = default_tolerance(dtype)
    atol = default_atol if atol is None else atol
    rtol = default_rtol if rtol is None else rtol
    atol, rtol = float(atol), float(rtol)
    if not (atol >= 0 and rtol >= 0):
        raise ValueError(f"{name}: tolerances must be >= 0, got atol={atol}, rtol={rtol}")
    return atol, rtol


def _compare_text(
    actual: np.ndarray, expected: np.ndarray, base: OutputComparison, dtype_problem: str | None
) -> OutputComparison:
    equal = np.asarray(actual == expected, dtype=bool).reshape(expected.shape)
    mismatches = int(equal.size - np.count_nonzero(equal))
    worst = None
    if mismatches:
        worst = tuple(int(i) for i in np.unravel_index(int(np.argmin(equal)), expected.shape))
    return replace(
        base,
        passed=dtype_problem is None and mismatches == 0,
        mismatches=mismatches,
        worst_index=worst,
        worst_actual=actual[worst] if worst is not None else None,
        worst_expected=expected[worst] if worst is not None else None,
        problem=dtype_problem,
    )
