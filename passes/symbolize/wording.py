"""How symbolize's blockers spell what they found: dims in the input symbols, the axes a symbol
names, and the fix a user can make (re-export with dynamic axes, or leave the axes out)."""

from __future__ import annotations

import re

from onnxsurgery.shapes.analysis import ShapeAnalysis
from onnxsurgery.shapes.dims import Dim
from onnxsurgery.shapes.solver import Solution

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


def input_symbols(a: ShapeAnalysis, sol: Solution, atoms: set[str]) -> set[str]:
    """The input-axis symbols behind ``atoms``: symbols themselves, what the solver made an
    unknown, and the dims a strided op divides for a run-time division (``$o1`` =
    ``(height - 8) // 8 + 1`` is height's)."""
    divides: dict[str, str] = {}
    for (num_text, den_text, _), d in a.floors.items():
        for atom in d.atoms():
            divides[atom] = f"{num_text} {den_text}"
    for atom, num, den, _ in a.pending_floors:
        divides[atom] = f"{num} {den}"
    found: set[str] = set()
    todo, seen = list(atoms), set()
    while todo:
        atom = todo.pop()
        if atom in seen:
            continue
        seen.add(atom)
        if atom in a.symbols:
            found.add(atom)
        elif atom in sol.values:
            todo += sol.values[atom].atoms()
        elif atom in divides:
            todo += re.findall(r"[$\w]+", divides[atom])
    return found


def dim_text(a: ShapeAnalysis, sol: Solution, d: Dim) -> str:
    """``d`` in the input symbols where the run-time divisions behind it are known
    (``$o1*$o2 + 1`` is ``((height - 8)//8 + 1)*((width - 8)//8 + 1) + 1``); where that is long
    or not known, which symbols it is computed from."""
    exprs: dict[str, str] = {}
    for (num_text, den_text, plus), q in a.floors.items():
        for atom in q.atoms():
            exprs[atom] = f"({num_text})//{den_text}" + (f" + {plus}" if plus else "")
    for atom, num, den, plus in a.pending_floors:
        exprs[atom] = f"({num})//{den}" + (f" + {plus}" if plus else "")

    def spell(m: re.Match) -> str:
        atom = m.group()
        value = sol.values.get(atom)
        text = str(value) if value is not None and value != Dim.sym(atom) else exprs.get(atom)
        if text is None:
            return atom
        return text if re.fullmatch(r"[$\w]+", text) else f"({text})"

    text = str(d)
    for _ in range(8):
        new = re.sub(r"\$\w+", spell, text)
        if new == text:
            break
        text = new
    if "$" not in text and len(text) <= 60 and text.count("//") <= 2:
        return text
    syms = sorted(input_symbols(a, sol, d.atoms()))
    return f"a size computed from {', '.join(syms)}" if syms else str(d)


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
