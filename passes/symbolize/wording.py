"""How symbolize's blockers spell what they found: dims in the input symbols, the axes a symbol
names, and the fix a user can make (re-export with dynamic axes, or leave the axes out)."""

from __future__ import annotations

from onnxsurgery.shapes.analysis import ShapeAnalysis
from onnxsurgery.shapes.dims import Dim
from onnxsurgery.shapes.solver import Solution

# How a size is spelled in the input symbols is the engine's (the diff of two models spells the
# rewritten constants the same way); re-exported here for symbolize's modules.
from onnxsurgery.shapes.spelling import dim_text, input_symbols

__all__ = [
    "fmt_values",
    "symbol_hint",
    "sym_tuple",
    "input_symbols",
    "dim_text",
    "axes_text",
    "fix_text",
    "fixed_text",
    "values_text",
]


def fmt_values(values: list[Dim | int]) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"


def values_text(a: ShapeAnalysis, sol: Solution, values: list[Dim]) -> str:
    """``values`` as :func:`fmt_values` writes them, each dim in the input symbols
    (:func:`dim_text`): the solver's own unknowns (``$o1``) never reach the user."""
    return "[" + ", ".join(dim_text(a, sol, v) for v in values) + "]"


def symbol_hint(plan_syms: dict[str, list[tuple[str, int]]], atoms: set[str]) -> str:
    names = sorted(a for a in atoms if a in plan_syms)
    return ", ".join(names)


def sym_tuple(syms: str) -> tuple[str, ...]:
    return tuple(x for x in syms.split(", ") if x)


def axes_text(analysis: ShapeAnalysis, syms: str) -> str:
    """The input axes (``input:axis``) the symbols ``syms`` name, the first four listed."""
    where = [f"{i}:{a}" for s in syms.split(", ") for i, a in analysis.symbols.get(s, [])]
    return ", ".join(where[:4]) + (f" and {len(where) - 4} more axes" if len(where) > 4 else "")


def fix_text(analysis: ShapeAnalysis, syms: str) -> str:
    """What to do about a size the trace fixed: re-export with dynamic axes, or leave them out."""
    if not syms:
        return "this size is data-dependent or fixed by the model; no renaming of constants generalizes it"
    axes = axes_text(analysis, syms)
    return (
        f"re-export with dynamic axes for {syms} (dynamic_axes= in torch.onnx.export, or "
        f"dynamic_shapes= with dynamo=True), or leave {axes} out of the symbolized axes"
    )


def fixed_text(analysis: ShapeAnalysis, syms: str, size: int) -> str:
    """What to do about an axis the model itself fixes (a channel or feature axis that a weight's
    shape pins): re-exporting cannot help, only leaving the axis out."""
    axes = axes_text(analysis, syms)
    return (
        f"the model fixes {syms} at {size} (a weight's or attribute's size, a channel or feature "
        f"axis), so no export can make it vary: leave {axes} out of the symbolized axes"
    )
