"""symbolize's blocker for a length padded to a multiple of a block at the traced size: a
constant Pad whose amount the trace computed from the size (torch's ``(-seq) % block``, as
LongT5's local attention pads to its block length), or a Concat of one constant value (zeros,
a ConstantOfShape) of that length, then split into blocks by a Reshape.

The export keeps the traced size's amount (120, for seq 8 and blocks of 128); kept, the padded
length reads ``seq + 120``, which is no multiple of 128 at another size, and the blocks come out
wrong: wrong values, not an error. A fixed pad gives the same graph, so symbolize cannot rewrite
it either way; it refuses, naming the Pad, the block and the traced size. The rule is declared
in :data:`~.graph_blockers.GRAPH_RULES`:

    Pad(x[batch, seq, d], pads: +120 on axis 1) -> [batch, seq + 120, d]     traced seq 8
    Reshape(., [2, 1, 128, d])                  -> 1 block of 128: 8 + 120 is 128

Under a bound that keeps the size within the one block it was traced at (``seq<=traced``), the
pad is ``128 - seq`` at every size the bound allows: :mod:`.one_block` ties its amount so before
the plan is solved (:data:`ONE_BLOCK`), and a split whose amount is tied so is no blocker here.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

import onnx

from onnxsurgery.passes.symbolize.baked import pad_before
from onnxsurgery.passes.symbolize.blockers import Blocker
from onnxsurgery.passes.symbolize.coincident import tie
from onnxsurgery.passes.symbolize.graph_blockers import GRAPH_RULES, GraphRule
from onnxsurgery.passes.symbolize.wording import (
    WHY,
    dim_text,
    fix_text,
    input_symbols,
    why_text,
)
from onnxsurgery.shapes.analysis import ShapeAnalysis
from onnxsurgery.shapes.dims import Dim, dim_product
from onnxsurgery.shapes.solver import Solution

__all__ = [
    "BlockSplit",
    "PadSite",
    "BlockPadding",
    "constant_pads",
    "hold_runtime_blocks",
    "ONE_BLOCK",
    "RUNTIME_BLOCK",
    "tied_amounts",
]

#: how many nodes past the Pad the Reshape that splits its output into blocks may be, whatever
#: the tensors between carry
REACH = 3

#: how many nodes past the Pad it may be along tensors that still carry the padded length (a
#: pad on the model's hidden states, split into blocks per head only after a LayerNorm, the
#: projection, the per-head Reshape and its Transpose: PEGASUS-X's encoder)
CARRY_REACH = 16

#: why a pad's amount follows the size: the bounded reading (:mod:`.one_block`) tied it so; a
#: split whose amount is tied so is no blocker here
ONE_BLOCK = "pads to one block at every size within the bound"


@dataclass
class BlockSplit:
    """A padded symbolic axis split into blocks: ``axis`` (``dim``, traced at ``traced``) padded
    by ``pad`` (begin, end) to ``padded`` (``traced + sum(pad)`` when traced), which ``reshape``
    splits into ``count`` blocks of ``block``."""

    axis: int
    dim: Dim
    padded: Dim
    traced: int
    pad: tuple[int, int]
    reshape: onnx.NodeProto
    count: int
    block: int
    #: the unknown the export's constant read left for the amount (the padded length less the
    #: unpadded one, as propagated), where it is one; None: the amount is no such read
    amount: str | None = None


@dataclass
class PadSite:
    """A constant-mode Pad with constant amounts (``amounts``: its pads input), or a Concat of
    one constant value (``amounts``: that piece), as what it adds to its data input's ``shape``:
    (begin, end) per axis, traced."""

    analysis: ShapeAnalysis
    solution: Solution
    node: onnx.NodeProto
    shape: list[Dim]
    before: list[tuple[int, int]]
    amounts: str | None
    #: the main graph's nodes by the tensors they read
    consumers: dict[str, list[onnx.NodeProto]]

    @cached_property
    def splits(self) -> list[BlockSplit]:
        """Each symbolic axis the Pad pads to a length a Reshape after it splits into blocks
        longer than the pad (what ``(-size) % block`` gives), the first such Reshape."""
        a, sol = self.analysis, self.solution
        found = []
        for axis, (b, e) in enumerate(self.before):
            d = sol.resolve(self.shape[axis])
            if d.is_const() or b < 0 or e < 0 or b + e == 0:
                continue
            out = a.tensors.get(self.node.output[0])
            if out is None or out.shape is None:
                return []
            padded = sol.resolve(out.shape[axis])
            length = a.traced(d) + b + e
            for node in _reached(a, sol, self.consumers, self.node.output[0], padded):
                split = _block_split(a, sol, node, padded, length)
                if split is not None and split[1] > b + e:
                    count, block, _ = split
                    amount = _amount(a, self.shape[axis], out.shape[axis])
                    found.append(
                        BlockSplit(axis, d, padded, a.traced(d), (b, e), node, count, block, amount)
                    )
                    break
        return found

    @cached_property
    def open(self) -> list[BlockSplit]:
        """The :attr:`splits` whose amount no bound made follow the size (:data:`ONE_BLOCK`)."""
        tied = tied_amounts(self.analysis)
        return [s for s in self.splits if s.amount is None or s.amount not in tied]


def tied_amounts(a: ShapeAnalysis) -> set[str]:
    """The pad amounts the bounded reading tied to the size (:data:`ONE_BLOCK`)."""
    return {
        next(iter(c.lhs.atoms()))
        for c in a.constraints
        if c.why == ONE_BLOCK and c.lhs is not None and c.lhs.is_atom()
    }


def _amount(a: ShapeAnalysis, before: Dim, after: Dim) -> str | None:
    """The one unknown ``after - before`` is (a pad's amount on one end, as a constant read
    left it: ``$v3`` of ``seq + $v3``), where it is one the export read from a constant."""
    extra = after - before
    if not extra.is_atom():
        return None
    (atom,) = extra.atoms()
    return atom if a.atoms[atom].kind == "var" else None


def constant_pads(a: ShapeAnalysis, sol: Solution) -> Iterator[PadSite]:
    """Each constant-mode Pad of the main graph whose amounts are constant, and each Concat of
    two pieces, one of one constant value and a constant length on the axis, in the graph's
    order."""
    consumers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in a.model.graph.node:
        for name in node.input:
            consumers[name].append(node)
    for node in a.model.graph.node:
        info = a.tensors.get(node.input[0]) if node.input else None
        if node.op_type == "Concat":
            site = _concat_pad(a, sol, node, consumers)
            if site is not None:
                yield site
        elif node.op_type == "Pad" and info is not None and info.shape is not None:
            pad_node, before = pad_before(a, node.output[0], len(info.shape))
            if pad_node is not None and before is not None and _fixed_amounts(a, sol, node):
                amounts = node.input[1] if len(node.input) > 1 and node.input[1] else None
                yield PadSite(a, sol, node, list(info.shape), before, amounts, consumers)


def _fixed_amounts(a: ShapeAnalysis, sol: Solution, node: onnx.NodeProto) -> bool:
    """Whether the Pad ``node``'s amounts are fixed numbers (a constant, or arithmetic of
    constants the trace folded), not computed from a size at run time."""
    if a.opset < 11:
        return True
    info = a.tensors.get(node.input[1])
    return info is not None and info.value is not None and all(
        sol.resolve(v).is_const() for v in info.value
    )


def _concat_pad(
    a: ShapeAnalysis,
    sol: Solution,
    node: onnx.NodeProto,
    consumers: dict[str, list[onnx.NodeProto]],
) -> PadSite | None:
    """``node`` as a :class:`PadSite`: a Concat of a tensor and a piece of one constant value
    (``torch.cat([x, x.new_zeros(...)])``) whose length on the axis is constant; else None."""
    if len(node.input) != 2:
        return None
    shapes = []
    for name in node.input:
        info = a.tensors.get(name)
        if info is None or info.shape is None:
            return None
        shapes.append(list(info.shape))
    rank = len(shapes[0])
    if rank == 0 or len(shapes[1]) != rank:
        return None
    axis = next((x.i for x in node.attribute if x.name == "axis"), 0) % rank
    for data, piece in ((0, 1), (1, 0)):
        length = sol.resolve(shapes[piece][axis]).value
        if length is None or not _one_value(a, node.input[piece]):
            continue
        before = [(0, 0)] * rank
        before[axis] = (0, int(length)) if piece else (int(length), 0)
        return PadSite(a, sol, node, shapes[data], before, node.input[piece], consumers)
    return None


def _one_value(a: ShapeAnalysis, tensor: str) -> bool:
    """Whether ``tensor`` holds one value throughout: a constant of one value, or made by
    ConstantOfShape."""
    arr = a.consts.get(tensor)
    if arr is not None:
        return arr.size > 0 and bool((arr == arr.reshape(-1)[0]).all())
    found = a.producers.get(tensor)
    return found is not None and found[1].op_type == "ConstantOfShape"


def _reached(
    a: ShapeAnalysis,
    sol: Solution,
    consumers: dict[str, list[onnx.NodeProto]],
    tensor: str,
    padded: Dim,
) -> Iterator[onnx.NodeProto]:
    """The Reshape nodes at most :data:`REACH` nodes after ``tensor``, or at most
    :data:`CARRY_REACH` along tensors whose shape still holds ``padded``, nearest first."""
    queue, seen = deque([(tensor, 0)]), {tensor}
    while queue:
        name, depth = queue.popleft()
        for node in consumers.get(name, []):
            if node.op_type == "Reshape" and node.input[0] == name:
                yield node
            if depth + 1 >= CARRY_REACH:
                continue
            for out in node.output:
                if out not in seen and (depth + 1 < REACH or _carries(a, sol, out, padded)):
                    seen.add(out)
                    queue.append((out, depth + 1))


#: why the block a run-time remainder pads to stays that block (:func:`hold_runtime_blocks`)
RUNTIME_BLOCK = (
    "a length padded by its remainder to a multiple of the block splits into blocks of it"
)


def hold_runtime_blocks(a: ShapeAnalysis, sol: Solution) -> bool:
    """Tie the block of each Reshape that splits a length padded at run time by its remainder
    (``x`` padded by ``(-x) % block``, ``a.value_mods``: LongT5's later layers, left to run
    time by TorchScript) to the block, where the solver did not keep it the block. The padded
    length is a multiple of the block at every size, but traced at one block the split ``1 x 128`` reads as well as ``padded x 1``: the
    solver would make the block the padded length, one block of 256 where torch makes two of
    128, wrong values past one block. Held, the count is the padded length over the block: a
    conflict the bound answers (the remainder ``block - seq`` within it, :mod:`.one_block`).
    Whether any was tied (the caller solves again)."""
    consumers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in a.model.graph.node:
        for name in node.input:
            consumers[name].append(node)
    held = {
        next(iter(c.lhs.atoms()))
        for c in a.constraints
        if c.why == RUNTIME_BLOCK and c.lhs is not None
    }
    tied = False
    for node in a.model.graph.node:
        if node.op_type != "Pad":
            continue
        x, y = a.tensors.get(node.input[0]), a.tensors.get(node.output[0])
        if x is None or y is None or x.shape is None or y.shape is None:
            continue
        for before, after in zip(x.shape, y.shape, strict=False):
            size, padded = sol.resolve(before), sol.resolve(after)
            block = _remainder_block(a, sol, size, padded - size)
            if block is None:
                continue
            for num, den in a.exact_divs.values():  # the count a Div of the padded length reads
                if (
                    sol.resolve(num) == padded
                    and den.is_atom()
                    and a.unknowns(den)
                    and not sol.resolve(den).is_const()
                ):
                    atom = next(iter(den.atoms()))
                    if atom not in held and a.traced(den) == block:
                        tie(a, atom, Dim.const(block), node.name, "Div", RUNTIME_BLOCK)
                        held.add(atom)
                        tied = True
            for reshape in _reached(a, sol, consumers, node.output[0], padded):
                split = _block_split(a, sol, reshape, padded, a.traced(padded))
                if (
                    split is None
                    or split[1] != block
                    or not _leads_alike(a, sol, reshape, padded, split[2])
                ):
                    continue
                out = a.tensors[reshape.output[0]].shape or []
                dim = out[split[2] + 1] if split[2] + 1 < len(out) else None
                if (
                    dim is not None
                    and dim.is_atom()
                    and a.unknowns(dim)
                    and not sol.resolve(dim).is_const()  # solved as the block already
                ):
                    atom = next(iter(dim.atoms()))
                    if atom not in held:
                        tie(a, atom, Dim.const(block), reshape.name, "Reshape", RUNTIME_BLOCK)
                        held.add(atom)
                        tied = True
                break
    return tied


def _leads_alike(
    a: ShapeAnalysis, sol: Solution, reshape: onnx.NodeProto, padded: Dim, axis: int
) -> bool:
    """Whether the axes before the split's count (output ``axis``) are, as solved, the axes
    before the padded one: at batch 1 a per-head ``[1, 128, heads, d]`` reads as one block of
    128 by its traced sizes alone, though its first axis is the batch."""
    ins = [sol.resolve(d) for d in a.tensors[reshape.input[0]].shape or []]
    outs = [sol.resolve(d) for d in a.tensors[reshape.output[0]].shape or []]
    return padded in ins and dim_product(outs[:axis]) == dim_product(ins[: ins.index(padded)])


def _remainder_block(a: ShapeAnalysis, sol: Solution, size: Dim, extra: Dim) -> int | None:
    """The block where ``extra`` is ``(-size) % block``, computed at run time; else None."""
    if not extra.is_atom():
        return None
    found = a.value_mods.get(next(iter(extra.atoms())))
    if found is None or size.is_const():
        return None
    num, block = found
    return block if sol.resolve(num) == -size else None


def _carries(a: ShapeAnalysis, sol: Solution, tensor: str, padded: Dim) -> bool:
    """Whether ``tensor``'s shape holds the padded length ``padded`` on some axis."""
    info = a.tensors.get(tensor)
    return (
        info is not None
        and info.shape is not None
        and any(sol.resolve(d) == padded for d in info.shape)
    )


def _block_split(
    a: ShapeAnalysis, sol: Solution, node: onnx.NodeProto, padded: Dim, length: int
) -> tuple[int, int, int] | None:
    """(count, block, axis) where the Reshape ``node`` turns the axis of its input whose size
    is ``padded`` (traced ``length``) into two axes, ``count`` blocks of ``block``, the count
    on output axis ``axis``; else None."""
    x, y = a.tensors.get(node.input[0]), a.tensors.get(node.output[0])
    if x is None or y is None or x.shape is None or y.shape is None:
        return None
    ins = [sol.resolve(d) for d in x.shape]
    if padded not in ins:
        return None
    before = ins[: ins.index(padded)]
    lead = math.prod(a.traced(d) for d in before)
    outs = [a.traced(d) for d in y.shape]
    kept = [sol.resolve(d) for d in y.shape]
    for i in range(len(outs) - 1):
        if math.prod(outs[:i]) == lead and outs[i] * outs[i + 1] == length and outs[i + 1] > 1:
            # the dims before the blocks are the input's, not only by their traced product: at
            # batch 1 a view [batch, seq, heads, d] of [batch, seq, width] would read batch as
            # 1 block of seq (MobileBERT's trigram pad of 1 by TorchScript and dynamo)
            if dim_product(kept[:i]) == dim_product(before):
                return outs[i], outs[i + 1], i
    return None


class BlockPadding(GraphRule):
    """A symbolic axis padded by a constant Pad (or a Concat of zeros) to a length a Reshape
    splits into blocks, each longer than the pad: a pad to a multiple of the block
    (``(-seq) % block``) the export baked at the traced size, or a fixed one; the graph cannot
    tell which, so it is a blocker."""

    kind = "block-padding"
    sites = staticmethod(constant_pads)

    def check(self, site: PadSite) -> str | None:
        if site.open:
            return None
        if site.splits:
            return "its pad follows the size within a bound (one block)"
        return "no symbolic axis it pads is split into blocks longer than the pad"

    def produce(self, site: PadSite) -> Blocker:
        a, sol, node = site.analysis, site.solution, site.node
        found = site.open
        syms = sorted(input_symbols(a, sol, set().union(*(s.dim.atoms() for s in found))))
        first = found[0]
        dim, p, block = dim_text(a, sol, first.dim), sum(first.pad), first.block
        step = _step(first.dim)
        other = "" if step is None else why_text(
            "block-padding-other", dim=dim, size=first.traced + step,
            needs=-(first.traced + step) % block,
        )  # fmt: skip
        why = why_text(
            self.kind, axis=first.axis, dim=dim, pad=p, length=first.traced + p, block=block,
            op=first.reshape.op_type, reshape=first.reshape.name, count=first.count,
            traced=first.traced, other=other, padded=dim_text(a, sol, first.padded),
        )  # fmt: skip
        traced = ", ".join(
            f"axis {s.axis} ({dim_text(a, sol, s.dim)}) = {s.traced} padded {s.pad} to "
            f"{s.count} x {s.block}"
            for s in found
        )
        fix = fix_text(a, ", ".join(syms))
        return Blocker(
            node.name, node.op_type, site.amounts, traced, why, fix, tuple(syms), self.kind
        )  # fmt: skip


def _step(d: Dim) -> int | None:
    """How far ``d`` moves when its one symbol grows by 1 (``seq + 2``: 1, ``seq*4``: 4); None
    where it names more than one symbol or a product."""
    terms = {mono: coef for mono, coef in d.terms.items() if mono}
    if len(terms) != 1:
        return None
    ((mono, coef),) = terms.items()
    return coef if len(mono) == 1 else None


WHY["block-padding-other"] = ", where {dim} = {size} needs {needs}"
WHY["block-padding"] = (
    "pads axis {axis} ({dim}) by {pad} to {length}, which {op} {reshape!r} splits into {count} "
    "block(s) of {block}: a pad to a multiple of {block} ((-{dim}) % {block} in torch, as LongT5 "
    "pads to its block length) that the export baked at {dim} = {traced}{other}, or a fixed pad "
    "of {pad}: the graph cannot tell which (kept, the padded length reads {padded}), and a wrong "
    "guess gives wrong values, not an error"
)

GRAPH_RULES.append(BlockPadding())
