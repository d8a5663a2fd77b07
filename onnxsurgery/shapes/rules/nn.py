"""Shape rules for neural-network ops (see :mod:`onnxsurgery.shapes.rules.core`).

MatMul, Gemm, Conv, ConvTranspose, pooling, normalization, LSTM/GRU/RNN, Resize/Upsample,
DepthToSpace/SpaceToDepth, Einsum, with their traits (the axes a contraction or a recurrence
mixes rows along, Resize's sizes). Weights (a Conv kernel, a
Gemm matrix, RNN weights) are read as fixed constants; initial states and other data constants get
per-use unknowns so a zero state ``[layers, B, hidden]`` can be tied to the batch.
"""

from __future__ import annotations

import re

import onnx

from onnxsurgery.shapes.analysis import Constraint
from onnxsurgery.shapes.dims import Dim, const_ints, dim_product
from onnxsurgery.shapes.rules.core import NodeCtx, broadcast, fallback, out, rule
from onnxsurgery.shapes.rules.traits import MixAxis, traits

__all__: list[str] = []


@rule("MatMul", "MatMulInteger", "QLinearMatMul")
def _matmul(ctx: NodeCtx):
    if ctx.node.op_type == "QLinearMatMul":
        a, b = ctx.shape(0, data=True), ctx.shape(3)
    else:
        a, b = ctx.shape(0, data=True), ctx.shape(1, data=_not_a_weight(ctx, 1))
    if a is None or b is None:
        return fallback(ctx)
    drop_a, drop_b = len(a) == 1, len(b) == 1
    if drop_a:
        a = [Dim.const(1)] + a
    if drop_b:
        b = b + [Dim.const(1)]
    ctx.equal(a[-1], b[-2], "MatMul inner dims")
    before = len(ctx.a.constraints)
    batch = broadcast(ctx, [a[:-2], b[:-2]], "MatMul batch dims")
    if not (drop_a or drop_b):
        _foldable(ctx, a, b, batch, ctx.a.constraints[before:])
    shape = batch + ([] if drop_a else [a[-2]]) + ([] if drop_b else [b[-1]])
    dtype = onnx.TensorProto.INT32 if ctx.node.op_type == "MatMulInteger" else ctx.dtype(0)
    return [out(shape, dtype)]


def _not_a_weight(ctx: NodeCtx, i: int) -> bool:
    """Input ``i`` read as data, its dims unknowns: not a constant, or a constant with batch
    dims (rank over 2), which a weight of a MatMul seldom has and a state the exporter folded
    does (a linear attention's zero state ``torch.zeros(batch, heads, k, v)``, traced at its
    batch; a plain ``[K, N]`` weight stays fixed)."""
    const = ctx.a.consts.get(ctx.node.input[i])
    return const is None or const.ndim > 2


def _foldable(
    ctx: NodeCtx, a: list[Dim], b: list[Dim], batch: list[Dim], added: list[Constraint]
) -> None:
    """Read a MatMul where A has more batch dims than B, A's extra ones all 1 at the traced size
    and not constants, as ``bmm`` between views ``[B*H, M, K]`` and ``[B*H, K, N]`` that dynamo,
    traced at batch 1, exports as ``[1, H, M, K] @ [H, K, N]``, dropping the queries' view to
    ``[H, M, K]`` and the scores' view back to ``[1, H, M, N]``: the broadcast ``$b0 == a1``
    holds at batch 1 alone there; B's first dim holds A's leading batch dims folded
    (``$b0 == a0*a1``, the same wherever ``a0`` stays 1), and where ``a0`` is not 1 the rewrite
    unfolds B to ``[a0, a1, K, N]`` before the MatMul (``ShapeAnalysis.unfolded``). The
    broadcast's constraint is kept aside (``ShapeAnalysis.foldable``): where the fold leaves
    conflicts the broadcast does not (B a table shared by the batch), the plan reads it so."""
    ext = len(a) - len(b)
    lead = a[: ext + 1]
    if ext < 1 or len(b) < 3 or ctx.graph or b[0].is_const() or len(batch) <= ext:
        return
    if all(d.is_const() for d in lead[:-1]) or any(ctx.traced(d) != 1 for d in lead[:-1]):
        return
    old = [c for c in added if c.expr in (b[0] - lead[-1], lead[-1] - b[0])]
    if len(old) != 1 or batch[ext] != lead[-1] or ctx.traced(b[0]) == 1:
        return
    why = "MatMul batch dims: B's first dim folds A's leading batch dims"
    folded = Constraint(
        b[0] - dim_product(lead), ctx.node.name, ctx.node.op_type, why, False, b[0], dim_product(lead)
    )
    at = next(i for i, c in enumerate(ctx.a.constraints) if c is old[0])
    ctx.a.constraints[at] = folded
    ctx.a.foldable[ctx.index] = (ext, folded, old[0])
    ctx.a.unfolded[ctx.index] = ext


#: A contraction: A's last axis against B's second to last.
traits("MatMul", mixes_rows=(MixAxis(axis=-1), MixAxis(input=1, axis=-2)))


@rule(
    "Gemm",
    mixes_rows=(
        MixAxis(axis=1, swap="transA", swapped=0),
        MixAxis(input=1, axis=0, swap="transB", swapped=1),
    ),
)
def _gemm(ctx: NodeCtx):
    a, b = ctx.shape(0, data=True), ctx.shape(1)
    if a is None or b is None or len(a) != 2 or len(b) != 2:
        return fallback(ctx)
    m, k = (a[1], a[0]) if ctx.attr("transA", 0) else (a[0], a[1])
    k2, n = (b[1], b[0]) if ctx.attr("transB", 0) else (b[0], b[1])
    ctx.equal(k, k2, "Gemm inner dims")
    if ctx.has(2):
        c = ctx.shape(2, data=True)
        if c is not None:
            broadcast(ctx, [[m, n], c], "Gemm C")
    return [out([m, n], ctx.dtype(0))]


def _spatial(
    ctx: NodeCtx, shape: list[Dim], kernel: list[int], transpose: bool = False
) -> list[Dim]:
    nsp = len(kernel)
    strides = ctx.attr("strides") or [1] * nsp
    dil = ctx.attr("dilations") or [1] * nsp
    pads = ctx.attr("pads") or [0] * (2 * nsp)
    auto = ctx.attr("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    ceil = bool(ctx.attr("ceil_mode", 0))
    result = []
    for i in range(nsp):
        d = shape[2 + i]
        axis = 2 + i
        if transpose:
            op = (ctx.attr("output_padding") or [0] * nsp)[i]
            if auto in ("SAME_UPPER", "SAME_LOWER"):
                result.append(d * strides[i])
            else:
                result.append(
                    (d - 1) * strides[i]
                    + op
                    + (kernel[i] - 1) * dil[i]
                    + 1
                    - pads[i]
                    - pads[i + nsp]
                )
            continue
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            result.append(ctx.div(d, strides[i], axis=axis, ceil=True))
        elif auto == "VALID":
            result.append(ctx.div(d - (kernel[i] - 1) * dil[i], strides[i], axis=axis, ceil=True))
        else:
            num = d + pads[i] + pads[i + nsp] - dil[i] * (kernel[i] - 1) - 1
            result.append(ctx.div(num, strides[i], axis=axis, ceil=ceil, plus=1))
    return result


@rule("Conv", "ConvInteger", "QLinearConv")
def _conv(ctx: NodeCtx):
    wi = 3 if ctx.node.op_type == "QLinearConv" else 1
    x, w = ctx.shape(0, data=True), ctx.shape(wi)
    if x is None or w is None:
        return fallback(ctx)
    group = ctx.attr("group", 1)
    kernel = ctx.attr("kernel_shape") or const_ints(w[2:])
    if kernel is None:
        return fallback(ctx)
    ctx.equal(x[1], w[1] * group, f"{ctx.node.op_type} input channels match the weight")
    return [out([x[0], w[0]] + _spatial(ctx, x, kernel), ctx.dtype(0))]


@rule("ConvTranspose")
def _conv_transpose(ctx: NodeCtx):
    x, w = ctx.shape(0, data=True), ctx.shape(1)
    if x is None or w is None:
        return fallback(ctx)
    group = ctx.attr("group", 1)
    kernel = ctx.attr("kernel_shape") or const_ints(w[2:])
    if kernel is None:
        return fallback(ctx)
    ctx.equal(x[1], w[0], "ConvTranspose input channels match the weight")
    if ctx.attr("output_shape"):
        spatial = [Dim.const(v) for v in ctx.attr("output_shape")]
    else:
        spatial = _spatial(ctx, x, kernel, transpose=True)
    return [out([x[0], w[1] * group] + spatial, ctx.dtype(0))]


@rule("MaxPool", "AveragePool", "LpPool")
def _pool(ctx: NodeCtx):
    x = ctx.shape(0, data=True)
    if x is None or not ctx.attr("kernel_shape"):
        return fallback(ctx)
    shape = x[:2] + _spatial(ctx, x, list(ctx.attr("kernel_shape")))
    outs = [out(shape, ctx.dtype(0))]
    if len(ctx.node.output) > 1:
        outs.append(out(shape, onnx.TensorProto.INT64))
    return outs


@rule("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
def _global_pool(ctx: NodeCtx):
    x = ctx.shape(0, data=True)
    if x is None:
        return fallback(ctx)
    return [out(x[:2] + [Dim.const(1)] * (len(x) - 2), ctx.dtype(0))]


@rule("LayerNormalization")
def _layer_norm(ctx: NodeCtx):
    x = ctx.shape(0, data=True)
    if x is None:
        return fallback(ctx)
    ax = ctx.axis(ctx.attr("axis", -1), len(x))
    stat = x[:ax] + [Dim.const(1)] * (len(x) - ax)
    return [
        out(x, ctx.dtype(0)),
        out(stat, onnx.TensorProto.FLOAT),
        out(stat, onnx.TensorProto.FLOAT),
    ]


@rule("BatchNormalization", "GroupNormalization", "InstanceNormalization")
def _batch_norm(ctx: NodeCtx):
    x = ctx.shape(0, data=True)
    if x is None:
        return fallback(ctx)
    if ctx.node.op_type != "GroupNormalization" and len(x) >= 2:
        # one scale (and bias, mean, var) per channel: ONNX Runtime rejects any other length
        # (GroupNorm(1, C) exported as a Reshape to [N, 1, -1] then InstanceNormalization with
        # a scale of 1: that 1 is the group count, not a size traced at 1)
        for i in range(1, len(ctx.node.input)):
            weight = ctx.a.const(ctx.node.input[i]) if ctx.has(i) else None
            if weight is not None and weight.ndim == 1:  # a weight's length is the model's
                why = f"{ctx.node.op_type} has one parameter per channel"
                ctx.equal(x[1], weight.shape[0], why)
    outs = [out(x, ctx.dtype(0))]
    for _ in ctx.node.output[1:]:
        outs.append(out(x[1:2], ctx.dtype(0)))
    return outs


@rule("LSTM", "GRU", "RNN", mixes_rows=(MixAxis(axis=0, swap="layout", swapped=1),))
def _rnn(ctx: NodeCtx):
    x = ctx.shape(0, data=True)
    if x is None or len(x) != 3:
        return fallback(ctx)
    layout = ctx.attr("layout", 0)
    hidden = Dim.const(ctx.attr("hidden_size"))
    direction = ctx.attr("direction", b"forward")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    ndir = Dim.const(2 if direction == "bidirectional" else 1)
    seq, batch = (x[1], x[0]) if layout else (x[0], x[1])
    if ctx.has(4):
        lens = ctx.shape(4, data=True)
        if lens is not None and lens:
            ctx.equal(
                lens[0], batch, f"{ctx.node.op_type} sequence_lens has one length per batch row"
            )
    n_states = 2 if ctx.node.op_type == "LSTM" else 1
    for i in range(5, 5 + n_states):
        if ctx.has(i):
            h = ctx.shape(i, data=True)
            if h is None or len(h) != 3:
                continue
            want = [batch, ndir, hidden] if layout else [ndir, batch, hidden]
            names = (
                ("batch", "directions", "hidden") if layout else ("directions", "batch", "hidden")
            )
            for got, exp, what in zip(h, want, names, strict=True):
                ctx.equal(got, exp, f"{ctx.node.op_type} initial state's {what} dim")
    y = [batch, seq, ndir, hidden] if layout else [seq, ndir, batch, hidden]
    yh = [batch, ndir, hidden] if layout else [ndir, batch, hidden]
    outs = [out(y, ctx.dtype(0)), out(yh, ctx.dtype(0))]
    if ctx.node.op_type == "LSTM":
        outs.append(out(yh, ctx.dtype(0)))
    return outs


@rule("Resize", "Upsample")
def _resize(ctx: NodeCtx):
    x = ctx.shape(0, data=True)
    if x is None:
        return fallback(ctx)
    rank = len(x)
    axes = ctx.attr("axes") or list(range(rank))
    shape = list(x)
    sizes_i = 3 if ctx.node.op_type == "Resize" and ctx.opset >= 11 else None
    scales_i = 2 if ctx.node.op_type == "Resize" and ctx.opset >= 11 else 1
    sizes = ctx.value(sizes_i, size=True) if sizes_i is not None and ctx.has(sizes_i) else None
    if sizes:
        mode = ctx.attr("mode", b"nearest")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        for a, s in zip(axes, sizes, strict=False):
            a = ctx.axis(a, rank)
            # Batch and channels are kept (ONNX Runtime resizes only the spatial axes in the
            # linear and cubic modes). A spatial target equal to a symbolic input size is taken
            # as "resize to your own size" (SegFormer's stage 0); one equal to a constant grid
            # (a position table) is a coincidence of the traced resolution.
            if ctx.traced(s) != ctx.traced(x[a]):
                pass
            elif rank >= 3 and a < 2:
                if mode in ("linear", "cubic") and rank == 4:
                    ctx.equal(s, x[a], f"Resize ({mode}) keeps axis {a}")
                else:
                    ctx.suggest(s, x[a], f"Resize keeps axis {a}")
            elif not x[a].is_const():
                ctx.suggest(s, x[a], f"Resize to the input's own size on axis {a}", when_free=True)
            shape[a] = s
        return [out(shape, ctx.dtype(0))]
    arr = ctx.a.const(ctx.node.input[scales_i]) if ctx.has(scales_i) else None
    if arr is None and ctx.attr("scales") is not None:
        import numpy as np

        arr = np.array(ctx.attr("scales"), dtype="float32")
    if arr is None or arr.size == 0:
        return fallback(ctx)
    for a, sc in zip(axes, arr.reshape(-1).tolist(), strict=False):
        a = ctx.axis(a, rank)
        d = shape[a]
        if float(sc).is_integer():
            shape[a] = d * int(sc)
        elif d.is_const():
            shape[a] = Dim.const(int(ctx.traced(d) * sc))
        else:
            shape[a] = ctx.opaque(
                int(ctx.traced(d) * sc), axis=a, note="Resize by a fractional scale"
            )
    return [out(shape, ctx.dtype(0))]


traits("Resize", size_inputs=(2, 3))  # scales and sizes (Upsample's scales never were)


@rule("DepthToSpace", "SpaceToDepth")
def _depth_space(ctx: NodeCtx):
    x = ctx.shape(0, data=True)
    if x is None or len(x) != 4:
        return fallback(ctx)
    b = ctx.attr("blocksize")
    n, c, h, w = x
    if ctx.node.op_type == "DepthToSpace":
        return [out([n, ctx.div(c, b * b, axis=1, exact=True), h * b, w * b], ctx.dtype(0))]
    h2, w2 = ctx.div(h, b, axis=2, exact=True), ctx.div(w, b, axis=3, exact=True)
    return [out([n, c * (b * b), h2, w2], ctx.dtype(0))]


@rule("Einsum")
def _einsum(ctx: NodeCtx):
    eq = ctx.attr("equation")
    eq = (eq.decode() if isinstance(eq, bytes) else eq).replace(" ", "")
    if "->" not in eq:
        return fallback(ctx)
    lhs, rhs = eq.split("->")
    terms = lhs.split(",")
    read = [ctx.shape(i, data=True) for i in range(len(terms))]
    shapes = [s for s in read if s is not None]
    if len(shapes) < len(read):
        return fallback(ctx)
    letters: dict[str, list[Dim]] = {}
    ellipses: list[list[Dim]] = []
    for term, shape in zip(terms, shapes, strict=True):
        if "..." in term:
            pre, post = term.split("...")
            n_ell = len(shape) - len(pre) - len(post)
            ellipses.append(shape[len(pre) : len(pre) + n_ell])
            labels: list[str | None] = [*pre, *[None] * n_ell, *post]
        else:
            labels = list(term)
        for lab, d in zip(labels, shape, strict=True):
            if lab is not None:
                letters.setdefault(lab, []).append(d)
    rep = {
        lab: broadcast(ctx, [[d] for d in ds], f"Einsum label {lab!r}")[0]
        for lab, ds in letters.items()
    }
    ell = broadcast(ctx, ellipses, "Einsum ellipsis") if ellipses else []
    result: list[Dim] = []
    for part in re.split(r"(\.\.\.)", rhs):
        if part == "...":
            result.extend(ell)
        else:
            result.extend(rep[c] for c in part)
    return [out(result, ctx.dtype(0))]
