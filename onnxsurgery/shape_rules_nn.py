"""Per-op shape rules for neural-network ops and control flow (see :mod:`onnxsurgery.shape_rules`).

MatMul, Gemm, Conv, ConvTranspose, pooling, normalization, LSTM/GRU/RNN, Resize/Upsample,
DepthToSpace/SpaceToDepth, Einsum, and the subgraphs of If and Loop. Weights (a Conv kernel, a
Gemm matrix, RNN weights) are read as fixed constants; initial states and other data constants get
per-use unknowns so a zero state ``[layers, B, hidden]`` can be tied to the batch.
"""

from __future__ import annotations

import re

import onnx

from onnxsurgery.dim_algebra import Dim
from onnxsurgery.shape_propagation import TensorInfo, constant_info, read_constants
from onnxsurgery.shape_rules import NodeCtx, _fallback, broadcast, out, rule, run_node

__all__: list[str] = []


@rule("MatMul", "MatMulInteger", "QLinearMatMul")
def _matmul(ctx: NodeCtx):
    if ctx.node.op_type == "QLinearMatMul":
        a, b = ctx.shape(0, data=True), ctx.shape(3)
    else:
        a, b = ctx.shape(0, data=True), ctx.shape(1, data=ctx.a.const(ctx.node.input[1]) is None)
    if a is None or b is None:
        return _fallback(ctx)
    drop_a, drop_b = len(a) == 1, len(b) == 1
    if drop_a:
        a = [Dim.const(1)] + a
    if drop_b:
        b = b + [Dim.const(1)]
    ctx.equal(a[-1], b[-2], "MatMul inner dims")
    batch = broadcast(ctx, [a[:-2], b[:-2]], "MatMul batch dims")
    shape = batch + ([] if drop_a else [a[-2]]) + ([] if drop_b else [b[-1]])
    dtype = onnx.TensorProto.INT32 if ctx.node.op_type == "MatMulInteger" else ctx.dtype(0)
    return [out(shape, dtype)]


@rule("Gemm")
def _gemm(ctx: NodeCtx):
    a, b = ctx.shape(0, data=True), ctx.shape(1)
    if a is None or b is None or len(a) != 2 or len(b) != 2:
        return _fallback(ctx)
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
        return _fallback(ctx)
    group = ctx.attr("group", 1)
    kernel = ctx.attr("kernel_shape") or [int(d.value) for d in w[2:]]  # type: ignore[arg-type]
    ctx.equal(x[1], w[1] * group, f"{ctx.node.op_type} input channels match the weight")
    return [out([x[0], w[0]] + _spatial(ctx, x, kernel), ctx.dtype(0))]


@rule("ConvTranspose")
def _conv_transpose(ctx: NodeCtx):
    x, w = ctx.shape(0, data=True), ctx.shape(1)
    if x is None or w is None:
        return _fallback(ctx)
    group = ctx.attr("group", 1)
    kernel = ctx.attr("kernel_shape") or [int(d.value) for d in w[2:]]  # type: ignore[arg-type]
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
        return _fallback(ctx)
    shape = x[:2] + _spatial(ctx, x, list(ctx.attr("kernel_shape")))
    outs = [out(shape, ctx.dtype(0))]
    if len(ctx.node.output) > 1:
        outs.append(out(shape, onnx.TensorProto.INT64))
    return outs


@rule("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
def _global_pool(ctx: NodeCtx):
    x = ctx.shape(0, data=True)
    if x is None:
        return _fallback(ctx)
    return [out(x[:2] + [Dim.const(1)] * (len(x) - 2), ctx.dtype(0))]


@rule("LayerNormalization")
def _layer_norm(ctx: NodeCtx):
    x = ctx.shape(0, data=True)
    if x is None:
        return _fallback(ctx)
    ax = ctx.axis(ctx.attr("axis", -1), len(x))
    stat = x[:ax] + [Dim.const(1)] * (len(x) - ax)
    return [
        out(x, ctx.dtype(0)),
        out(stat, onnx.TensorProto.FLOAT),
        out(stat, onnx.TensorProto.FLOAT),
    ]


@rule("BatchNormalization", "GroupNormalization")
def _batch_norm(ctx: NodeCtx):
    x = ctx.shape(0, data=True)
    if x is None:
        return _fallback(ctx)
    outs = [out(x, ctx.dtype(0))]
    for _ in ctx.node.output[1:]:
        outs.append(out(x[1:2], ctx.dtype(0)))
    return outs


@rule("LSTM", "GRU", "RNN")
def _rnn(ctx: NodeCtx):
    x = ctx.shape(0, data=True)
    if x is None or len(x) != 3:
        return _fallback(ctx)
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
        return _fallback(ctx)
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
        return _fallback(ctx)
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


@rule("DepthToSpace", "SpaceToDepth")
def _depth_space(ctx: NodeCtx):
    x = ctx.shape(0, data=True)
    if x is None or len(x) != 4:
        return _fallback(ctx)
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
        return _fallback(ctx)
    lhs, rhs = eq.split("->")
    terms = lhs.split(",")
    shapes = [ctx.shape(i, data=True) for i in range(len(terms))]
    if any(s is None for s in shapes):
        return _fallback(ctx)
    letters: dict[str, list[Dim]] = {}
    ellipses: list[list[Dim]] = []
    for term, shape in zip(terms, shapes, strict=True):
        if "..." in term:
            pre, post = term.split("...")
            n_ell = len(shape) - len(pre) - len(post)  # type: ignore[arg-type]
            ellipses.append(shape[len(pre) : len(pre) + n_ell])  # type: ignore[index]
            labels = list(pre) + [None] * n_ell + list(post)
        else:
            labels = list(term)
        for lab, d in zip(labels, shape, strict=True):  # type: ignore[arg-type]
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


# ------------------------------------------------------------------------------------------------
# control flow: propagate through subgraphs (outer-scope names are visible inside)


def _run_subgraph(
    ctx: NodeCtx, g: onnx.GraphProto, path: str, inputs: list[TensorInfo | None]
) -> list[TensorInfo | None]:
    consts = read_constants(g)
    for name, arr in consts.items():
        ctx.a.consts[name] = arr
        try:
            dtype = onnx.helper.np_dtype_to_tensor_dtype(arr.dtype)
        except (KeyError, TypeError, ValueError):
            dtype = 0
        ctx.a.tensors[name] = constant_info(arr, dtype)
    for vi, info in zip(g.input, inputs, strict=False):
        if info is not None:
            ctx.a.tensors[vi.name] = info
    for index, node in enumerate(g.node):
        if node.op_type == "Constant" and node.output[0] in consts:
            continue
        run_node(ctx.a, index, node, path)
    return [ctx.a.info(o.name) for o in g.output]


def _graph_attr(node: onnx.NodeProto, name: str) -> onnx.GraphProto | None:
    for a in node.attribute:
        if a.name == name and a.HasField("g"):
            return a.g
    return None


def _path(ctx: NodeCtx, attr: str) -> str:
    own = f"{ctx.node.name or ctx.node.output[0]}/{attr}"
    return f"{ctx.graph}/{own}" if ctx.graph else own


@rule("If")
def _if(ctx: NodeCtx):
    then_g, else_g = _graph_attr(ctx.node, "then_branch"), _graph_attr(ctx.node, "else_branch")
    if then_g is None or else_g is None:
        return _fallback(ctx)
    then_out = _run_subgraph(ctx, then_g, _path(ctx, "then_branch"), [])
    else_out = _run_subgraph(ctx, else_g, _path(ctx, "else_branch"), [])
    cond = ctx.value(0)
    taken = None
    if cond is not None and cond[0].is_const():
        taken = then_out if cond[0].value else else_out
    outs: list[TensorInfo | None] = []
    for k, (t, e) in enumerate(zip(then_out, else_out, strict=False)):
        if t is not None and e is not None and t.shape is not None and e.shape is not None:
            if len(t.shape) == len(e.shape):  # both branches feed the same consumers
                for a, (dt, de) in enumerate(zip(t.shape, e.shape, strict=True)):
                    if dt != de and ctx.traced(dt) == ctx.traced(de):
                        ctx.equal(dt, de, f"If branches agree on output {k} axis {a}")
                        e.shape[a] = dt
        pick = taken[k] if taken is not None else t
        if taken is None and (t is None or e is None or t.shape != e.shape):
            static = ctx.static_shape(k)
            if static is None or any(s is None for s in static):
                outs.append(None)
                continue
            shape = [ctx.derived(s, k, a, "If branches disagree") for a, s in enumerate(static)]  # type: ignore[arg-type]
            outs.append(TensorInfo(shape, t.dtype if t else 0))
            continue
        outs.append(pick)
    return outs


@rule("Loop")
def _loop(ctx: NodeCtx):
    body = _graph_attr(ctx.node, "body")
    if body is None:
        return _fallback(ctx)
    n_carried = len(ctx.node.input) - 2
    trip = ctx.value(0, size=True) if ctx.has(0) else None
    iter_info = TensorInfo([], onnx.TensorProto.INT64, None)
    cond_info = TensorInfo([], onnx.TensorProto.BOOL, None)
    carried = [ctx.info(2 + i, "data") for i in range(n_carried)]
    body_out = _run_subgraph(ctx, body, _path(ctx, "body"), [iter_info, cond_info] + carried)
    outs: list[TensorInfo | None] = []
    for i in range(n_carried):
        init, final = carried[i], body_out[1 + i] if 1 + i < len(body_out) else None
        if (
            init is not None
            and final is not None
            and init.shape is not None
            and final.shape == init.shape
        ):
            outs.append(TensorInfo(init.shape, init.dtype))
        else:
            static = ctx.static_shape(i)
            if static is None or any(s is None for s in static):
                outs.append(None)
            else:
                outs.append(
                    TensorInfo(
                        [
                            ctx.derived(s, i, a, "Loop-carried dim changes")
                            for a, s in enumerate(static)
                        ],
                        init.dtype if init else 0,
                    )
                )  # type: ignore[arg-type]
    for j, scan in enumerate(body_out[1 + n_carried :]):
        k = n_carried + j
        static = ctx.static_shape(k)
        if (
            trip is not None
            and trip[0] is not None
            and scan is not None
            and scan.shape is not None
            and not ctx.has(1)
        ):
            count = trip[0]
        else:
            count = ctx.opaque(
                static[0] if static and static[0] is not None else 0, k, 0, "Loop iteration count"
            )  # type: ignore[arg-type]
        if scan is None or scan.shape is None:
            outs.append(None)
        else:
            outs.append(TensorInfo([count] + list(scan.shape), scan.dtype))
    return outs
