"""symbolize's blocker for a length padded to a multiple of a block at the traced size: a
constant Pad whose amount the trace computed from the size (torch's ``(-seq) % block``, as
LongT5's local attention pads to its block length), then split into blocks by a Reshape.

The export keeps the traced size's amount (120, for seq 8 and blocks of 128); kept, the padded
length reads ``seq + 120``, which is no multiple of 128 at another size, and the blocks come out
wrong: wrong values, not an error. A fixed pad gives the same graph, so symbolize cannot rewrite
it either way; it refuses, naming the Pad, the block and the traced size. The rule is declared
in :data:`~.graph_blockers.GRAPH_RULES`:

    Pad(x[batch, seq, d], pads: +120 on axis 1) -> [batch, seq + 120, d]     traced seq 8
    Reshape(., [2, 1, 128, d])                  -> 1 block of 128: 8 + 120 is 128
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
from onnxsurgery.passes.symbolize.graph_blockers import GRAPH_RULES, GraphRule
from onnxsurgery.passes.symbolize.wording import (
    WHY,
    dim_text,
    fix_text,
    input_symbols,
    why_text,
)
from onnxsurgery.shapes.analysis import ShapeAnalysis
from onnxsurgery.shapes.dims import Dim
from onnxsurgery.shapes.solver import Solution

__all__ = ["BlockSplit", "PadSite", "BlockPadding", "constant_pads"]

#: how many nodes past the Pad the Reshape that splits its output into blocks may be
REACH = 3


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


@dataclass
class PadSite:
    """A constant-mode Pad with constant amounts, its data input's shape solved."""

    analysis: ShapeAnalysis
    solution: Solution
    node: onnx.NodeProto
    shape: list[Dim]
    before: list[tuple[int, int]]

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
            for node in _reached(a, self.node.output[0]):
                split = _block_split(a, sol, node, padded, length)
                if split is not None and split[1] > b + e:
                    found.append(BlockSplit(axis, d, padded, a.traced(d), (b, e), node, *split))
                    break
        return found


def constant_pads(a: ShapeAnalysis, sol: Solution) -> Iterator[PadSite]:
    """Each constant-mode Pad of the main graph whose amounts are constant, in the graph's order."""
    for node in a.model.graph.node:
        if node.op_type != "Pad":
            continue
        info = a.tensors.get(node.input[0])
        if info is None or info.shape is None:
            continue
        pad_node, before = pad_before(a, node.output[0], len(info.shape))
        if pad_node is not None and before is not None:
            yield PadSite(a, sol, node, list(info.shape), before)


def _reached(a: ShapeAnalysis, tensor: str) -> Iterator[onnx.NodeProto]:
    """The Reshape nodes at most :data:`REACH` nodes after ``tensor``, nearest first."""
    consumers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in a.model.graph.node:
        for name in node.input:
            consumers[name].append(node)
    queue, seen = deque([(tensor, 0)]), {tensor}
    while queue:
        name, depth = queue.popleft()
        for node in consumers.get(name, []):
            if node.op_type == "Reshape" and node.input[0] == name:
                yield node
            for out in node.output if depth + 1 < REACH else ():
                if out not in seen:
                    seen.add(out)
                    queue.append((out, depth + 1))


def _block_split(
    a: ShapeAnalysis, sol: Solution, node: onnx.NodeProto, padded: Dim, length: int
) -> tuple[int, int] | None:
    """(count, block) where the Reshape ``node`` turns the axis of its input whose size is
    ``padded`` (traced ``length``) into two axes, ``count`` blocks of ``block``; else None."""
    x, y = a.tensors.get(node.input[0]), a.tensors.get(node.output[0])
    if x is None or y is None or x.shape is None or y.shape is None:
        return None
    ins = [sol.resolve(d) for d in x.shape]
    if padded not in ins:
        return None
    lead = math.prod(a.traced(d) for d in ins[: ins.index(padded)])
    outs = [a.traced(d) for d in y.shape]
    for i in range(len(outs) - 1):
        if math.prod(outs[:i]) == lead and outs[i] * outs[i + 1] == length and outs[i + 1] > 1:
            return outs[i], outs[i + 1]
    return None


class BlockPadding(GraphRule):
    """A symbolic axis padded by a constant Pad to a length a Reshape splits into blocks, each
    longer than the pad: a pad to a multiple of the block (``(-seq) % block``) the export baked
    at the traced size, or a fixed one; the graph cannot tell which, so it is a blocker."""

    kind = "block-padding"
    sites = staticmethod(constant_pads)

    def check(self, site: PadSite) -> str | None:
        if site.splits:
            return None
        return "no symbolic axis it pads is split into blocks longer than the pad"

    def produce(self, site: PadSite) -> Blocker:
        a, sol, node = site.analysis, site.solution, site.node
        found = site.splits
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
        pads = node.input[1] if len(node.input) > 1 and node.input[1] else None
        fix = fix_text(a, ", ".join(syms))
        return Blocker(node.name, node.op_type, pads, traced, why, fix, tuple(syms), self.kind)


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
