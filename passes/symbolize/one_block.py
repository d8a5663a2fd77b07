"""symbolize's bounded reading of a length padded to one block (issue 30, LongT5's local
attention): under a bound (``seq<=traced``), a pad the export baked at the traced size
(:class:`~.block_padding.BlockPadding`) is exact as ``block - seq``.

LongT5 pads ``seq`` by ``(-seq) % 128`` and splits the padded length into blocks of 128; traced
at seq 8 the export keeps the amount 120, one block. Every size from 1 to 128 pads to that same
one block, so where the bound keeps the size within it, ``(-seq) % 128`` *is* ``128 - seq``: not
a guess, the same values at every size the bound allows. So :func:`read_under_bounds` ties the
amount's unknown to ``block - seq`` before the plan is solved (the padded length is then the
constant block, the count 1, and the Div or Reshape that split it hold at every size), and
:class:`BoundedPadAmount` writes the amount as that computation, guarded: a Gather past a
table of ``bound + 1`` zeros fails on ONNX Runtime, naming the bound, where a size is over it
(``128 - seq`` would crop past 128, and is not what torch pads past the bound anyway).

    Pad(x[batch, seq, d], pads: +120 on axis 1)    seq<=8 (traced 8), blocks of 128
    =>
    Pad(x, pads: +(128 - seq) on axis 1) -> [batch, 128, d]   (seq over 8 fails at the guard)

Not where the traced length pads to more than one block: a size under ``(count-1)*block + 1``
pads to fewer blocks, which a pad of ``count*block - seq`` does not give (it stays refused, and
says so). Without a bound, :func:`advise_bound` adds the bound to the "what to do" of each
blocker it would answer: the Pad's, and a Div or Reshape that holds only at the traced size
because of the pad (TorchScript's count ``padded / 128``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from onnxsurgery.passes.symbolize.block_padding import (
    ONE_BLOCK,
    BlockSplit,
    PadSite,
    constant_pads,
    tied_amounts,
)
from onnxsurgery.passes.symbolize.bounds import bound_text, largest
from onnxsurgery.passes.symbolize.coincident import tie
from onnxsurgery.passes.symbolize.graph_blockers import ConflictSite, Found
from onnxsurgery.passes.symbolize.reads import Change, ConstRead
from onnxsurgery.passes.symbolize.rules import CONST_RULES, Rule, SizeConstant
from onnxsurgery.passes.symbolize.wording import dim_text, input_symbols
from onnxsurgery.shapes.analysis import ShapeAnalysis
from onnxsurgery.shapes.dims import Dim
from onnxsurgery.shapes.solver import Solution

__all__ = ["BoundedPadAmount", "advise_bound", "one_block", "read_under_bounds"]


def one_block(site: PadSite, split: BlockSplit, bounds: Mapping[str, int]) -> str | None:
    """None where the pad ``split`` records is exact as ``block - size`` at every size within
    ``bounds``; else why not."""
    a, sol = site.analysis, site.solution
    if split.count != 1:
        least = (split.count - 1) * split.block
        return (
            f"it pads to {split.count} blocks of {split.block}: a size of {least} or less pads to "
            "fewer blocks, which a pad read from the size within a bound does not give"
        )
    if split.amount is None:
        return "its amount is no one size the export read from a constant"
    syms = input_symbols(a, sol, split.dim.atoms())
    if not syms or not syms <= bounds.keys():
        return "the size it pads is not bounded"
    most = largest(a, sol, split.dim, bounds)
    if most is None:
        return "the size it pads does not grow with its bounded symbols alone"
    if most > split.block:
        return (
            f"within {bound_text(syms, bounds)} the size reaches {most}, over one block of "
            f"{split.block}: a larger size pads to more blocks"
        )
    return _smallest_gap(sol, split)


def _smallest_gap(sol: Solution, split: BlockSplit) -> str | None:
    """Why the size may not be 1 or more at every size (a size of 0 pads by nothing, not by a
    whole block); None where it is: its symbols alone, with non-negative terms."""
    d = sol.resolve(split.dim)
    try:
        low = d.evaluate({x: 1 for x in d.atoms()})
    except KeyError:
        return "the size it pads is not in its symbols alone"
    if low < 1:
        return f"the size it pads ({d}) is {low} where its symbols are 1"
    return None


def read_under_bounds(a: ShapeAnalysis, sol: Solution, bounds: Mapping[str, int]) -> bool:
    """Tie each block padding's amount that :func:`one_block` reads exactly within ``bounds``
    to ``block - size`` (a hard constraint marked :data:`~.block_padding.ONE_BLOCK`), unless
    tied already; whether any was tied (the caller solves again)."""
    if not bounds:
        return False
    tied, done = False, tied_amounts(a)
    for site in constant_pads(a, sol):
        for split in site.splits:
            if split.amount is None or split.amount in done:
                continue
            if one_block(site, split, bounds) is not None:
                continue
            value = Dim.const(split.block) - sol.resolve(split.dim)
            tie(a, split.amount, value, site.node.name, site.node.op_type, ONE_BLOCK)
            tied = True
    return tied


#: the constant reads a pad's amount may be: a Pad's pads, the shape of the zeros a Concat adds
AMOUNTS = {("Pad", 1), ("ConstantOfShape", 0)}


class BoundedPadAmount(Rule):
    """A pad's amount tied to ``block - size`` by :func:`read_under_bounds`: written from the
    size like any size constant (:class:`~.rules.SizeConstant`), with a guard that fails where
    a size is over its bound (``Change.guard``)."""

    kind = "one-block"

    def check(self, read: ConstRead) -> str | None:
        if read.use.kind != "size" or (read.use.op, read.use.input_index) not in AMOUNTS:
            return "no pad amount"
        tied = tied_amounts(read.context.analysis)
        return None if tied & {x for x in read.use.atoms if x} else "no pad amount tied to a bound"

    def produce(self, read: ConstRead) -> Change:
        c = read.context
        change = SizeConstant().produce(read)
        amounts = tied_amounts(c.analysis) & {x for x in read.use.atoms if x}
        syms = input_symbols(c.analysis, c.solution, amounts)
        change.guard = {s: c.bounds[s] for s in sorted(syms)}
        change.new += f" (one block within {bound_text(syms, c.bounds)})"
        c.used_bounds |= syms
        return change


def advise_bound(
    found: Iterable[Found], a: ShapeAnalysis, sol: Solution, bounds: Mapping[str, int]
) -> None:
    """Word the blockers the bounded reading concerns: a Pad whose size has no bound, where a
    bound at the traced size would let it through, and each conflict over its amount (the
    count a Div computes, a Reshape's element count) advise that bound; a Pad whose size is
    bounded says why the reading does not apply."""
    found = list(found)
    advised: dict[str, str] = {}  # pad amount -> the advice that answers it
    for f in found:
        if f.rule.kind != "block-padding":
            continue
        site: PadSite = f.site
        for split in site.open:
            syms = input_symbols(a, sol, split.dim.atoms())
            at_traced = {**{s: a.atoms[s].traced for s in syms}, **bounds}
            if syms and syms <= bounds.keys():
                why = one_block(site, split, bounds)
                if why is not None:
                    f.blocker.why += f"; within {bound_text(syms, bounds)} it stays so: {why}"
            elif split.amount and one_block(site, split, at_traced) is None:
                advised[split.amount] = _lead(site, split, syms)
        leads = dict.fromkeys(advised[s.amount] for s in site.open if s.amount in advised)
        f.blocker.fix = "".join(leads) + f.blocker.fix
    for f in found:
        if isinstance(f.site, ConflictSite):
            atoms = f.site.conflict.constraint.expr.atoms()
            leads = dict.fromkeys(advised[x] for x in sorted(atoms & advised.keys()))
            f.blocker.fix = "".join(leads) + f.blocker.fix


def _lead(site: PadSite, split: BlockSplit, syms: set[str]) -> str:
    """The advice to bound ``syms``, naming the pad it lets through."""
    a, sol = site.analysis, site.solution
    names, dim = ", ".join(sorted(syms)), dim_text(a, sol, split.dim)
    return (
        f"if no size you need is over the traced one, bound {names} (like {min(syms)}<=traced "
        f"among the axes symbolize names): {site.node.op_type} {site.node.name!r} then pads {dim} to one "
        f"block of {split.block} ({split.block} - {dim}), exact at every size within the bound, "
        "and a larger size fails; or "
    )


CONST_RULES.insert(0, BoundedPadAmount())
