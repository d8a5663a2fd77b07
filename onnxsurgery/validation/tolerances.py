"""Tolerances: the defaults, which outputs compare exactly, per-output overrides, ``--tol`` text.

An element passes when ``|actual - expected| <= atol + rtol * |expected|``. Floating outputs
default to ``atol=1e-4, rtol=1e-3`` (fp32 after a graph rewrite); bool, integer and string
outputs are compared exactly unless a per-output tolerance names them. Float16 and bfloat16
outputs, where the defaults are left as they are, default to ``atol=2e-2, rtol=1e-2``
(:func:`default_tolerance`): their rounding step near 1 is ~1e-3 (fp16) and ~8e-3 (bf16),
against ~1e-7 for fp32. Every default in the
project (the validate pass, the CLI, :func:`~onnxsurgery.validation.validate`) is read from here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np

from onnxsurgery.errors import UsageError

__all__ = [
    "DEFAULT_ATOL",
    "DEFAULT_RTOL",
    "Tolerances",
    "check_global_tolerances",
    "check_tolerances",
    "default_tolerance",
    "HALF_ATOL",
    "HALF_RTOL",
    "is_exact_dtype",
    "parse_tolerance_spec",
    "tolerance_for",
]

#: Default absolute tolerance for floating outputs (fp32).
DEFAULT_ATOL = 1e-4
#: Default relative tolerance for floating outputs (fp32).
DEFAULT_RTOL = 1e-3
#: Default absolute tolerance for float16 and bfloat16 outputs. A TinyLlama-1.1B-shaped fp16
#: decoder (22 layers) on ONNX Runtime's CPU provider against torch's own fp16 outputs: max abs
#: error 1.03e-2 at rtol 1e-2; this leaves it twice that.
HALF_ATOL = 2e-2
#: Default relative tolerance for float16 and bfloat16 outputs (about 10 fp16 rounding steps).
HALF_RTOL = 1e-2
#: Per-output tolerances: output name -> (atol, rtol); ``None`` keeps the default.
Tolerances = Mapping[str, tuple[float | None, float | None]]


def is_exact_dtype(dtype: np.dtype) -> bool:
    """Whether values of ``dtype`` are compared exactly by default (bool, integers, strings)."""
    return np.dtype(dtype).kind in "biuOSU"


def _is_half(dtype: np.dtype) -> bool:
    dtype = np.dtype(dtype)
    return dtype == np.float16 or dtype.name == "bfloat16"


def default_tolerance(dtype: np.dtype) -> tuple[float, float]:
    """(atol, rtol) for values of ``dtype`` where none is given: exact for bool, integers and
    strings, :data:`HALF_ATOL`/:data:`HALF_RTOL` for float16 and bfloat16, else the fp32
    defaults."""
    if is_exact_dtype(dtype):
        return 0.0, 0.0
    return (HALF_ATOL, HALF_RTOL) if _is_half(dtype) else (DEFAULT_ATOL, DEFAULT_RTOL)


def check_global_tolerances(atol: float, rtol: float) -> None:
    for what, v in (("atol", atol), ("rtol", rtol)):
        if not (
            isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 and math.isfinite(v)
        ):
            raise UsageError(f"{what} must be a number >= 0, got {v!r}")


def check_tolerances(
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


def tolerance_for(
    name: str,
    expected: np.ndarray,
    atol: float,
    rtol: float,
    tolerances: Mapping[str, tuple[float | None, float | None]],
) -> tuple[float | None, float | None]:
    a, r = tolerances.get(name, (None, None))
    if is_exact_dtype(expected.dtype):  # exact unless a tolerance names this output
        return a, r
    if (atol, rtol) == (DEFAULT_ATOL, DEFAULT_RTOL):  # the defaults, as given: per dtype
        atol, rtol = default_tolerance(expected.dtype)
    return (atol if a is None else a), (rtol if r is None else r)


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
