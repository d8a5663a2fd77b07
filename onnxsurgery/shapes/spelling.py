"""How a symbolic size is spelled for a user: in the input symbols (``height``, ``batch``), never
in the solver's own unknowns (``$o1``). Symbolize's wording and the diff of two models share it.
"""

from __future__ import annotations

import re

from onnxsurgery.shapes.analysis import ShapeAnalysis
from onnxsurgery.shapes.dims import Dim
from onnxsurgery.shapes.solver import Solution

__all__ = ["dim_text", "input_symbols"]


def input_symbols(a: ShapeAnalysis, sol: Solution, atoms: set[str]) -> set[str]:
    """The input-axis symbols behind ``atoms``: symbols themselves, what the solver made an
    unknown, and the dims a strided op divides for a run-time division (``$o1`` =
    ``(height - 8) // 8 + 1`` is height's)."""
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
        elif atom in a.floor_parts:  # a run-time division: what it divides, by what
            num, den, _ = a.floor_parts[atom]
            todo += num.atoms() | den.atoms()
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
