"""Output lengths rounded down to a multiple at run time, where the trace saw no rounding.

SEW pools its frames by 2 (``AvgPool1d``), runs its encoder, and expands them back by 2: the
graph's output has ``2 * (frames // 2)`` frames. Traced at an even frame count, that is the
frame count itself, and torch's own code pads an odd one back to it in Python
(``if hidden.shape[1] < n_input_timesteps: pad``), a branch the trace did not take and the
graph does not hold. At an odd frame count the symbolized model gives one frame less than torch
(the sweep's 2 wrong SEW cases by TorchScript; re-export with dynamic axes gives the same).
Whether torch rounds too (a U-Net without a skip does) or pads back, the graph cannot tell:

    output axis = k * (x // k) + r, traced where x is a multiple of k (so it read as x + r)

is a blocker (:class:`RoundedLength`), for reference cases at a size where ``x`` is no multiple
of ``k`` to decide: the graph as it is matches them, or the model stays refused
(:func:`~.by_references.decide_readings`). A case where ``x`` is a multiple decides nothing
(:func:`rounding_unseen`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from onnxsurgery.passes.symbolize.blockers import Blocker
from onnxsurgery.passes.symbolize.graph_blockers import GRAPH_RULES, GraphRule
from onnxsurgery.passes.symbolize.sizes import Divisions
from onnxsurgery.passes.symbolize.wording import (
    FIX,
    WHY,
    dim_text,
    fix_text,
    input_symbols,
    why_text,
)
from onnxsurgery.shapes.analysis import ShapeAnalysis
from onnxsurgery.shapes.dims import Dim
from onnxsurgery.shapes.solver import Solution

__all__ = ["RoundedLength", "RoundedSite", "rounded_outputs"]


@dataclass
class RoundedSite:
    """Axis ``axis`` of output ``output`` is ``dim`` = ``k * (x // k) + r``, ``length`` the
    ``x + r`` it equals where ``x`` is a multiple of ``k`` (as traced)."""

    analysis: ShapeAnalysis
    solution: Solution
    output: str
    axis: int
    dim: Dim
    length: Dim
    k: int


def rounded_outputs(a: ShapeAnalysis, sol: Solution) -> Iterator[RoundedSite]:
    """Every output axis rounded down to a multiple at run time where the trace was one."""
    for o in a.model.graph.output:
        info = a.tensors.get(o.name)
        for axis, d in enumerate(info.shape if info is not None and info.shape else []):
            site = _rounded(a, sol, o.name, axis, sol.resolve(d))
            if site is not None:
                yield site


def _rounded(a: ShapeAnalysis, sol: Solution, output: str, axis: int, d: Dim) -> RoundedSite | None:
    for q in sorted(d.atoms()):
        parts = a.floor_parts.get(q)
        if parts is None:
            continue
        num, den, plus = parts
        den = sol.resolve(den)
        k = den.value
        if k is None or k < 2:
            continue
        rest = d - Dim.sym(q) * k
        if not rest.is_const():
            continue
        length = sol.resolve(num) + k * plus + rest
        if length != d and a.traced(length) == a.traced(d):
            return RoundedSite(a, sol, output, axis, d, length, k)
    return None


class RoundedLength(GraphRule):
    """An output axis the graph rounds down to a multiple of ``k`` at run time, traced where it
    did not round (module docstring): the graph as it is, or torch padding it back in code the
    trace did not record; reference cases decide."""

    kind = "rounded-length"
    sites = staticmethod(rounded_outputs)

    def check(self, site: RoundedSite) -> str | None:
        return None

    def produce(self, site: RoundedSite) -> Blocker:
        a, sol = site.analysis, site.solution
        made = a.producers.get(site.output)
        node, op = (made[1].name, made[1].op_type) if made is not None else (site.output, "output")
        syms = sorted(input_symbols(a, sol, site.length.atoms()))
        traced = a.traced(site.dim)
        why = why_text(self.kind, output=site.output, axis=site.axis, k=site.k, traced=traced)
        shows = showing_size(site)
        example = ", ".join(f"{s} = {v}" for s, v in shows.items())
        fix = FIX[self.kind].format(k=site.k, example=f" ({example}, for one)" if example else "")
        return Blocker(
            node, op, None, f"{dim_text(a, sol, site.dim)} = {traced}", why,
            fix + fix_text(a, ", ".join(syms)), tuple(syms), self.kind,
        )  # fmt: skip


def showing_size(site: RoundedSite) -> dict[str, int]:
    """The nearest input size past the traced one (one symbol moved, up to twice its traced
    size) where the output length comes out rounded; empty where none does."""
    a, sol = site.analysis, site.solution
    divisions = Divisions.of(a, sol)
    traced = {s: a.atoms[s].traced for s in a.symbols}
    for sym in sorted(input_symbols(a, sol, site.length.atoms())):
        for size in range(traced[sym] + 1, 2 * traced[sym] + 1):
            at = {**traced, sym: size}
            known = {**at, **{x: v for x, (_, _, v) in divisions.values(at).items()}}
            try:
                if site.dim.evaluate(known) != site.length.evaluate(known):
                    return {sym: size}
            except KeyError:
                break
    return {}


WHY["rounded-length"] = (
    "output {output!r} axis {axis} is a length pooled by {k} and expanded back: {k} * (n // {k}) "
    "of the n it pooled, which is n only where n is a multiple of {k}, as traced ({traced}); "
    "torch code often pads it back to n in Python (SEW does), a branch the trace does not "
    "record, so at other sizes the graph may give fewer than torch gives, or round as torch "
    "does: the graph cannot tell which"
)
FIX["rounded-length"] = (
    "pass reference cases (--ref) at a size where n is no multiple of {k}{example}: the graph as "
    "it is, rounding, is the only reading symbolize can extend, which the cases confirm or it "
    "stays refused; or "
)

GRAPH_RULES.append(RoundedLength())
