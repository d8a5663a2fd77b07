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
    to ``block - size`` (a hard constraint marked :data:`~.block_padding.ONE_BLOCK`), and each
    run-time remainder of a bounded size to what it is within the bound (:func:`remainders`),
    unless tied already; whether any was tied (the caller solves again)."""
    if not bounds:
        return False
    tied, done = remainders(a, sol, bounds), tied_amounts(a)
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


#: why a run-time remainder (``(-seq) % 128``) reads as ``128 - seq``: within the bound the size
#: stays within one block
ONE_BLOCK_REMAINDER = "a remainder by a block that the bound keeps the size within"


def remainders(a: ShapeAnalysis, sol: Solution, bounds: Mapping[str, int]) -> bool:
    """Tie each remainder computed at run time (``a.value_mods``: ``x % block``, TorchScript's
    ``(-seq) % 128`` before a pad it leaves to run time, as LongT5's later blocks) whose size
    the bound keeps within one block to its value there: ``(-n) % block`` is ``block - n`` for
    every ``n`` from 1 to ``block``, ``n % block`` is ``n`` for every ``n`` under it. The
    padded length is then the block at every size within the bound, as a pad baked to one
    block is (:func:`one_block`). Whether any was tied."""
    tied = False
    done = remainder_atoms(a)
    for atom, (num, block) in a.value_mods.items():
        if atom in done:
            continue
        value = _remainder_within(a, sol, sol.resolve(num), block, bounds)
        if value is not None:
            a.read_as[atom] = (value, ONE_BLOCK_REMAINDER)
            tied = True
    return tied


def _remainder_within(
    a: ShapeAnalysis, sol: Solution, x: Dim, block: int, bounds: Mapping[str, int]
) -> Dim | None:
    """What ``x % block`` is at every size within ``bounds``: ``block + x`` where ``-x`` is a
    size from 1 to ``block`` there, ``x`` where ``x`` is one from 1 to ``block - 1``; None
    where neither holds. An affine ``x`` in bounded symbols is read over its whole range, so
    one that shrinks as a size grows counts too (``(64 - seq % 64) % 64``, TorchScript's
    Bailing: ``64 - seq`` is 56..63 for seq within 8)."""
    span = _affine_range(x, bounds)
    if span is not None:
        low, high = span
        if 1 <= low and high <= block - 1:
            return x
        if 1 <= -high and -low <= block:
            return Dim.const(block) + x
    for size, value, top in ((-x, Dim.const(block) + x, block), (x, x, block - 1)):
        syms = input_symbols(a, sol, size.atoms())
        if not syms or not syms <= bounds.keys() or _smallest_gap_of(size) is not None:
            continue
        most = largest(a, sol, size, bounds)
        if most is not None and most <= top:
            return value
    return None


def _affine_range(x: Dim, bounds: Mapping[str, int]) -> tuple[int, int] | None:
    """(least, most) of ``x`` with each symbol from 1 to its bound, where ``x`` is affine in
    bounded symbols alone; else None."""
    low = high = 0
    for mono, coef in x.terms.items():
        if not mono:
            low, high = low + coef, high + coef
            continue
        if len(mono) != 1 or mono[0] not in bounds:
            return None
        ends = (coef * 1, coef * bounds[mono[0]])
        low, high = low + min(ends), high + max(ends)
    return low, high


def remainder_atoms(a: ShapeAnalysis) -> set[str]:
    """The run-time remainders :func:`remainders` tied."""
    return {atom for atom, (_, why) in a.read_as.items() if why == ONE_BLOCK_REMAINDER}


def remainder_bounds(a: ShapeAnalysis, sol: Solution) -> set[str]:
    """The bounded symbols the tied remainders read (bounds the plan keeps)."""
    syms: set[str] = set()
    for atom in remainder_atoms(a):
        num, _ = a.value_mods[atom]
        syms |= input_symbols(a, sol, sol.resolve(num).atoms())
    return syms


def _smallest_gap_of(d: Dim) -> str | None:
    """None where ``d`` is 1 or more wherever its symbols are (its value at 1, non-negative
    terms); else why not."""
    if any(coef < 0 for mono, coef in d.terms.items() if mono):
        return "it shrinks as a size grows"
    try:
        low = d.evaluate({x: 1 for x in d.atoms()})
    except KeyError:
        return "not in its symbols alone"
    return None if low >= 1 else f"it is {low} where its symbols are 1"


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
    for atom, (num, block) in a.value_mods.items():  # a remainder computed at run time
        x = sol.resolve(num)
        syms = input_symbols(a, sol, x.atoms())
        at_traced = {**{s: a.atoms[s].traced for s in syms}, **bounds}
        if syms and not syms <= bounds.keys():
            if _remainder_within(a, sol, x, block, at_traced) is not None:
                advised[atom] = _remainder_lead(a, sol, x, block, syms)
    for f in found:
        if isinstance(f.site, ConflictSite):
            conflict = f.site.conflict
            atoms = conflict.constraint.expr.atoms() | conflict.residual.atoms()
            leads = dict.fromkeys(advised[x] for x in sorted(atoms & advised.keys()))
            f.blocker.fix = "".join(leads) + f.blocker.fix


def _remainder_lead(a: ShapeAnalysis, sol: Solution, x: Dim, block: int, syms: set[str]) -> str:
    """The advice to bound ``syms``, naming the remainder ``x % block`` it reads."""
    names = ", ".join(sorted(syms))
    return (
        f"if no size you need is over the traced one, bound {names} (like {min(syms)}<=traced "
        f"among the axes symbolize names): the remainder ({dim_text(a, sol, x)}) % {block} the "
        f"graph computes is then {dim_text(a, sol, Dim.const(block) + x)} at every size within "
        "the bound; or "
    )


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
