"""TorchScript's ``x.chunk(k, dim)`` with the chunk size computed at run time: chunk ``i`` is
``x[..., c * i : c * (i + 1)]`` with ``c = ceil(n / k)``, ``n = Shape(x)[dim]``, exported as
``Mul(Div(Add(n, k - 1), k), i)`` for each bound. The constants ``k - 1``, ``k`` and ``i`` are
the chunk's own: never a traced size, whatever size they meet. Read as sizes, they did (MPT's
fused ``qkv.chunk(3, dim=2)`` traced at seq 3 and batch 2: a Slice "fixed at 3 or follows
seq", and a chunk width that stayed an opaque division, so the keys' length never met
``total - past``).
"""

from __future__ import annotations

import onnx

from onnxsurgery.shapes.rules.core import NodeCtx

__all__ = ["in_chunk_bounds"]

#: how many nodes a chunk's bound is from the Shape it starts at: Add, Div, Mul
_DEPTH = 3


def in_chunk_bounds(ctx: NodeCtx) -> bool:
    """Whether ``ctx``'s node computes a bound of a chunk (its constants the chunk's own)."""
    if ctx.graph:
        return False
    frontier = [ctx.node.output[0]]
    for _ in range(_DEPTH):
        nxt = []
        for tensor in frontier:
            for _index, k, node in ctx.a.consumers.get(tensor, []):
                if node.op_type == "Slice" and k in (1, 2) and len(node.input) > 3:
                    if ctx.index in {i for i, _ in _chain(ctx, node, k)}:
                        return True
                elif node.op_type in ("Div", "Mul"):
                    nxt.append(node.output[0])
        frontier = nxt
    return False


def _chain(ctx: NodeCtx, slice_: onnx.NodeProto, k: int) -> list[tuple[int, onnx.NodeProto]]:
    """The nodes (index, node) of Slice bound ``k`` computed as
    ``Mul(Div(Add(Shape(x)[axis], k - 1), k), i)`` (or without the Add) over the Slice's own
    data ``x`` and axis, each with one constant operand; empty where it is not so."""
    axes = ctx.a.consts.get(slice_.input[3])
    if axes is None or axes.size != 1:
        return []
    mul = _made(ctx, slice_.input[k], "Mul")
    div = _made(ctx, _other(ctx, mul[1]), "Div") if mul is not None else None
    if mul is None or div is None or div[1].input[1] not in ctx.a.consts:
        return []
    chain = [mul, div]
    size: str | None = div[1].input[0]
    add = _made(ctx, size, "Add")
    if add is not None:
        size = _other(ctx, add[1])
        chain.append(add)
    gather = _made(ctx, size, "Gather")
    shape = _made(ctx, gather[1].input[0], "Shape") if gather is not None else None
    at = ctx.a.consts.get(gather[1].input[1]) if gather is not None else None
    info = ctx.a.info(slice_.input[0])
    if shape is None or at is None or at.size != 1 or shape[1].input[0] != slice_.input[0]:
        return []
    rank = info.rank if info is not None else None
    axis, read = int(axes.reshape(-1)[0]), int(at.reshape(-1)[0])
    if not rank or axis % rank != read % rank:
        return []
    return chain


def _made(ctx: NodeCtx, tensor: str | None, op: str) -> tuple[int, onnx.NodeProto] | None:
    found = ctx.a.producers.get(tensor) if tensor else None
    return found if found is not None and found[1].op_type == op else None


def _other(ctx: NodeCtx, node: onnx.NodeProto) -> str | None:
    """The operand of a binary ``node`` that is not a constant, where the other one is."""
    if len(node.input) != 2:
        return None
    consts = [x in ctx.a.consts for x in node.input]
    return node.input[consts.index(False)] if consts.count(True) == 1 else None
