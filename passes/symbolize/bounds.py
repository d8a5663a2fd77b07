"""Symbols bounded at a size (``seq<=traced``, ``seq<=512``): the bounds asked, as numbers,
and the largest value a size takes under them (what a table folded at the traced length must
hold for :class:`~.rules.BoundedTable` to slice it)."""

from __future__ import annotations

from collections.abc import Mapping, Set

from onnxsurgery.shapes.analysis import ShapeAnalysis
from onnxsurgery.shapes.dims import Dim
from onnxsurgery.shapes.solver import Solution

__all__ = ["bound_text", "largest", "symbol_bounds"]


def symbol_bounds(analysis: ShapeAnalysis, asked: Mapping[str, int | None]) -> dict[str, int]:
    """The bounds asked (``seq<=traced``: None, the traced size) as numbers; ValueError for a
    bound on no symbol of the graph or under its traced size (the check compares the result
    with the original there)."""
    bounds = {}
    for sym, bound in asked.items():
        if sym not in analysis.symbols:
            raise ValueError(f"{sym}<={bound or 'traced'}: no input axis is named {sym}")
        traced = analysis.atoms[sym].traced
        if bound is not None and bound < traced:
            raise ValueError(
                f"{sym}<={bound} is under {sym}'s traced size {traced}: the bound must be at "
                f"least the traced size ({sym}<=traced), where the check compares the result "
                "with the original"
            )
        bounds[sym] = traced if bound is None else bound
    return bounds


def bound_text(syms: Set[str], bounds: Mapping[str, int]) -> str:
    """``seq<=8, tgt<=8``: the bounds of ``syms``."""
    return ", ".join(f"{s}<={bounds[s]}" for s in sorted(syms))


def largest(a: ShapeAnalysis, sol: Solution, d: Dim, bounds: Mapping[str, int]) -> int | None:
    """The largest value ``d`` takes with every symbol at most its bound: ``d`` at the bounds,
    where it grows with each symbol (positive coefficients, down to the floor divisions a
    strided op makes: frames = (samples - 400) // 320 + 1); None where it does not, or names a
    symbol with no bound."""
    floors = a.floor_parts  # every run-time division: atom -> (num, den, plus)
    seen: set[str] = set()

    def value(x: Dim) -> int | None:
        total = 0
        for mono, coef in x.terms.items():
            if mono and coef < 0:
                return None  # shrinks as a symbol grows
            term = coef
            for atom in mono:
                v = atom_value(atom)
                if v is None:
                    return None
                term *= v
            total += term
        return total

    def atom_value(atom: str) -> int | None:
        if atom in bounds:
            return bounds[atom]
        if atom in a.symbols or atom in seen:
            return None
        seen.add(atom)
        solved = sol.values.get(atom)
        if solved is not None and solved != Dim.sym(atom):
            return value(solved)
        if atom in floors:
            num, den, plus = floors[atom]
            n, q = value(sol.resolve(num)), sol.resolve(den).value
            return None if n is None or not q or q < 0 else n // q + plus
        return None

    return value(d)
