"""The sizes symbolize's check may run at: inputs the model accepts, keeping the traced remainders.

A strided convolution or pool divides a size (``(height - 8)//8 + 1``), a stack of them divides
it again and again (ConvNeXt's stem and three 2x2 downsamplings: 32 in all). Two things follow
for the sizes the check picks (:func:`check_sizes`):

- a size that leaves a later stage with less than its kernel is no input of the model at all
  (torch refuses it as ONNX Runtime does: ``Invalid input shape: {1,2}``), so running it would
  blame the plan for the check's own choice: :meth:`Divisions.accepts` says whether every
  division still comes out at 1 or more;
- a padding or a remainder computed for the traced size is baked into the graph at every level,
  so the step between sizes keeps every division's remainder (:func:`size_steps`), not only the
  first one's.

Both are read off the graph's divisions (``ShapeAnalysis.floor_parts``), in the input symbols,
never off names or known architectures.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass

from onnxsurgery.shapes.analysis import ShapeAnalysis
from onnxsurgery.shapes.dims import Dim
from onnxsurgery.shapes.solver import Solution

__all__ = ["Divisions", "check_sizes", "size_steps"]

#: The largest multiple of the first step tried for keeping every remainder.
_MAX_MULTIPLE = 64


@dataclass(frozen=True)
class Divisions:
    """The graph's run-time divisions of sizes, each ``atom = num // den + plus`` with ``num``
    and ``den`` in the input symbols and earlier atoms (in an order each reads only those
    before it)."""

    parts: tuple[tuple[str, Dim, Dim, int], ...] = ()

    @classmethod
    def of(cls, analysis: ShapeAnalysis, sol: Solution) -> Divisions:
        """The divisions the solved graph still makes at run time (a division the solver
        decided, exact or constant, is none)."""
        todo = {}
        for atom, (num, den, plus) in analysis.floor_parts.items():
            if sol.resolve(Dim.sym(atom)) == Dim.sym(atom):
                todo[atom] = (sol.resolve(num), sol.resolve(den), plus)
        known = set(analysis.symbols)
        parts: list[tuple[str, Dim, Dim, int]] = []
        while todo:
            ready = [a for a, (n, d, _) in todo.items() if (n.atoms() | d.atoms()) <= known]
            if not ready:
                break  # the rest read unknowns the solver left open: nothing to say of them
            for atom in ready:
                num, den, plus = todo.pop(atom)
                parts.append((atom, num, den, plus))
                known.add(atom)
        return cls(tuple(parts))

    def values(self, size: Mapping[str, int]) -> dict[str, tuple[int, int, int]]:
        """Each division at ``size``: atom -> (numerator, denominator, value)."""
        known = dict(size)
        out = {}
        for atom, num, den, plus in self.parts:
            try:
                n, d = num.evaluate(known), den.evaluate(known)
            except KeyError:  # a symbol ``size`` does not give
                continue
            if d <= 0:
                continue
            known[atom] = n // d + plus
            out[atom] = (n, d, known[atom])
        return out

    def accepts(self, size: Mapping[str, int]) -> bool:
        """Whether the model takes inputs at ``size``: every division comes out at 1 or more
        (a strided op whose input is smaller than its kernel gives 0 or less)."""
        return all(v >= 1 for _, _, v in self.values(size).values())

    def smallest(self, traced: Mapping[str, int], atom: str, at_least: int) -> dict[str, int]:
        """For each symbol, the smallest size from the traced one up (the others traced) at
        which division ``atom`` comes out at ``at_least`` or more; a symbol that does not get
        it there within 16 times its traced size is left out."""
        out = {}
        for sym, v in traced.items():
            for size in range(v, 16 * v + 1):
                got = self.values({**traced, sym: size}).get(atom)
                if got is None:
                    break
                if got[2] >= at_least:
                    out[sym] = size
                    break
        return out

    def keeps_remainders(self, traced: Mapping[str, int], size: Mapping[str, int]) -> bool:
        """Whether every division's numerator at ``size`` leaves the remainder it left at the
        traced size (so a padding computed there holds at ``size`` too)."""
        before, after = self.values(traced), self.values(size)
        return all(
            atom in after and after[atom][1] == d and (after[atom][0] - n) % d == 0
            for atom, (n, d, _) in before.items()
        )


def size_steps(
    symbols: Mapping[str, int], divisions: Divisions, first: Mapping[str, int]
) -> dict[str, int]:
    """For each symbol a division reads: the step between the check's sizes, the smallest
    multiple of ``first`` (the symbol's first step, else 1) that keeps every division's
    remainder; ``first`` where none up to 64 times it does."""
    steps = dict(first)
    for sym, traced in symbols.items():
        base = first.get(sym, 1)
        if not _reads_through(sym, divisions):
            continue
        for m in range(1, _MAX_MULTIPLE + 1):
            if divisions.keeps_remainders(symbols, {**symbols, sym: traced + m * base}):
                steps[sym] = m * base
                break
    return steps


def _reads_through(sym: str, divisions: Divisions) -> bool:
    """Whether a division reads ``sym`` (directly or through another division)."""
    reach = {sym}
    for atom, num, den, _ in divisions.parts:
        if (num.atoms() | den.atoms()) & reach:
            reach.add(atom)
    return len(reach) > 1


def check_sizes(
    traced: Mapping[str, int],
    fixed: Set[str] = frozenset(),
    steps: Mapping[str, int] | None = None,
    relations: Mapping[str, Dim] | None = None,
    *,
    bounds: Mapping[str, int] | None = None,
    divisions: Divisions | None = None,
) -> list[dict[str, int]]:
    """The traced size, then two other values for each symbol not in ``fixed`` (others traced).

    The other values are ``traced + step`` and ``traced - step`` (or ``+ 2*step`` when that is
    too small, or is no input the model takes: a stage left smaller than its kernel, as
    ``divisions`` tell, :meth:`Divisions.accepts`); ``steps`` defaults to 1, and is
    larger for symbols that strided convolutions or pools divide, so the sizes keep the traced
    size's remainder at every division (a padding computed for an even height is baked into the
    graph; :func:`size_steps`). A symbol in ``relations`` (``total`` = ``past + seq``)
    is never varied itself: every size computes it from the others, so the sizes respect what
    the graph requires. A symbol in ``bounds`` (``seq<=8``) stays within its bound: the values
    over it are replaced by smaller ones (``traced - 2*step``), none under 2.
    """
    relations = relations or {}
    sizes = [dict(traced)]
    for sym in traced:
        if sym in fixed or sym in relations:
            continue
        step = (steps or {}).get(sym, 1)
        bound = (bounds or {}).get(sym)
        for s in _others(traced, sym, step, bound, relations, divisions):
            if s not in sizes:
                sizes.append(s)
    return sizes


def _others(
    traced: Mapping[str, int],
    sym: str,
    step: int,
    bound: int | None,
    relations: Mapping[str, Dim],
    divisions: Divisions | None,
) -> list[dict[str, int]]:
    """Two sizes with ``sym`` moved off its traced value: up a step, then down one (two up
    where down is under 2 or no input the model takes); within ``bound``, the values over it
    give way to ones further down."""
    v = traced[sym]
    values = [v + step, v - step, v + 2 * step]
    if bound is not None:
        values = [o for o in (*values, v - 2 * step) if o <= bound]
    chosen: list[dict[str, int]] = []
    for o in values:
        size = _varied(traced, sym, o, relations)
        lower = o < v
        if lower and (o < 2 or (divisions is not None and not divisions.accepts(size))):
            continue
        chosen.append(size)
        if len(chosen) == 2:
            break
    return chosen


def _varied(
    traced: Mapping[str, int], sym: str, value: int, relations: Mapping[str, Dim]
) -> dict[str, int]:
    """The traced size with ``sym`` at ``value`` and every related symbol computed from it."""
    s = dict(traced)
    s[sym] = value
    for _ in relations:  # relations may chain
        s.update({d: rel.evaluate(s) for d, rel in relations.items()})
    return s
