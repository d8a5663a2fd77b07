"""Per-op shape rules for :mod:`onnxsurgery.shape_propagation`: tensor and shape-vector ops.

Each rule reads its inputs through a :class:`NodeCtx` (which turns constant inputs into per-use
unknowns where the op reads them as sizes or as data), records the constraints the op's structure
imposes, and returns one :class:`TensorInfo` (or ``None``) per output. Ops without a rule go
through ONNX's own per-node shape inference, with each symbolic dim passed as a ``dim_param``;
dims it cannot derive become fresh ``derived`` unknowns (and a note says so).

Neural-network ops (MatMul, Gemm, Conv, pooling, normalization, RNNs, Einsum, control flow) live
in :mod:`onnxsurgery.shape_rules_nn`, which registers into the same table.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx

from onnxsurgery.dim_algebra import Dim, as_dim, dim_product, dim_sum
from onnxsurgery.shape_propagation import (
    _INT_TYPES,
    MAX_VALUE_ELEMENTS,
    ShapeAnalysis,
    TensorInfo,
)

__all__ = ["NodeCtx", "RULES", "rule", "run_node", "broadcast"]

Rule = Callable[["NodeCtx"], list[TensorInfo | None]]
RULES: dict[str, Rule] = {}
BIG = 2**31 - 1


def rule(*ops: str) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        for op in ops:
            RULES[op] = fn
        return fn

    return register


class NodeCtx:
    """What a rule sees: the node, its inputs (with per-use unknowns on request), the analysis."""

    def __init__(self, analysis: ShapeAnalysis, index: int, node: onnx.NodeProto, graph: str) -> None:
        self.a = analysis
        self.index = index
        self.node = node
        self.graph = graph
        self.attrs = {attr.name: onnx.helper.get_attribute_value(attr) for attr in node.attribute}

    # inputs
    def n_inputs(self) -> int:
        return len(self.node.input)

    def has(self, i: int) -> bool:
        return i < len(self.node.input) and bool(self.node.input[i])

    def info(self, i: int, kind: str | None = None) -> TensorInfo | None:
        if not self.has(i):
            return None
        if kind is None:
            return self.a.info(self.node.input[i])
        return self.a.use(self.index, self.node, i, kind, self.graph)

    def shape(self, i: int, data: bool = False) -> list[Dim] | None:
        info = self.info(i, "data" if data else None)
        return None if info is None or info.shape is None else list(info.shape)

    def value(self, i: int, size: bool = False) -> list[Dim] | None:
        info = self.info(i, "size" if size else None)
        return None if info is None or info.value is None else list(info.value)

    def ints(self, i: int) -> list[int] | None:
        """Concrete int elements of input ``i`` (None if not all known)."""
        vals = self.value(i)
        if vals is None or any(v.value is None for v in vals):
            return None
        return [int(v.value) for v in vals]  # type: ignore[arg-type]

    def dtype(self, i: int) -> int:
        info = self.info(i)
        return info.dtype if info else 0

    def attr(self, name: str, default=None):
        return self.attrs.get(name, default)

    @property
    def opset(self) -> int:
        return self.a.opset

    # helpers
    def traced(self, d: Dim | int) -> int:
        return self.a.traced(d)

    def equal(self, x: Dim | int, y: Dim | int, why: str) -> None:
        self.a.equal(x, y, self.node, why)

    def suggest(self, x: Dim | int, y: Dim | int, why: str) -> None:
        self.a.suggest(x, y, self.node, why)

    def opaque(self, traced: int, k: int = 0, axis: int | None = None, value_index: int | None = None, note: str = "") -> Dim:
        """A dim only known at run time: axis ``axis`` (or element ``value_index``) of output ``k``."""
        out = self.node.output[k] if k < len(self.node.output) else ""
        origin = ("dim", out, axis) if value_index is None else ("value", out, value_index)
        return self.a.new_atom("opaque", traced, origin, note or f"{self.node.op_type} output")

    def derived(self, traced: int, k: int = 0, axis: int | None = None, note: str = "") -> Dim:
        out = self.node.output[k] if k < len(self.node.output) else ""
        return self.a.new_atom("derived", traced, ("dim", out, axis), note or f"{self.node.op_type} output")

    def div(self, num: Dim, den: Dim | int, k: int = 0, axis: int | None = None, ceil: bool = False) -> Dim:
        """``num // den`` (or ceil) as a Dim: exact where possible, else an opaque runtime dim."""
        den = as_dim(den)
        if ceil:
            num = num + den - 1
        q = num.exact_div(den)
        if q is not None:
            return q
        tn, td = self.traced(num), self.traced(den)
        if num.is_const() and den.is_const():
            return Dim.const(tn // td)
        return self.opaque(tn // td if td else 0, k, axis, note=f"{self.node.op_type}: {num} / {den} is not exact")

    def axis(self, a: int, rank: int) -> int:
        return a + rank if a < 0 else a

    def static_shape(self, k: int) -> list[int | None] | None:
        out = self.node.output[k] if k < len(self.node.output) else ""
        return self.a.static.get(out)

    def symbolic_inputs(self) -> bool:
        for name in self.node.input:
            info = self.a.info(name) if name else None
            if info is None:
                continue
            for d in (info.shape or []) + (info.value or []):
                if not d.is_const():
                    return True
        return False


def _const_value(values: list[Dim] | None, dtype: int) -> list[Dim] | None:
    if values is None or len(values) > MAX_VALUE_ELEMENTS:
        return None
    return values


def out(shape: list[Dim] | None, dtype: int = 0, value: list[Dim] | None = None) -> TensorInfo:
    return TensorInfo(None if shape is None else list(shape), dtype, value)


# ------------------------------------------------------------------------------------------------
# broadcasting


def _pick(ctx: NodeCtx, dims: list[Dim]) -> Dim:
    """The representative of dims that must be equal: prefer ones without unknowns."""
    for d in dims:
        if not ctx.a.unknowns(d):
            return d
    return dims[0]


def broadcast(ctx: NodeCtx, shapes: list[list[Dim]], why: str = "broadcast operands") -> list[Dim]:
    """Numpy broadcasting; dims that are not 1 at the traced size must be equal."""
    rank = max((len(s) for s in shapes), default=0)
    result: list[Dim] = []
    for k in range(rank):
        dims = [s[len(s) - rank + k] for s in shapes if len(s) - rank + k >= 0]
        big = [d for d in dims if ctx.traced(d) != 1]
        if big:
            rep = _pick(ctx, big)
            for d in big:
                if d != rep:
                    ctx.equal(d, rep, f"{why}: dim {k - rank} of {rep} and {d} must match")
            result.append(rep)
            continue
        # Every operand is 1 at the traced size: the output follows a symbolic one, if any.
        free = [d for d in dims if not d.is_const() and not ctx.a.unknowns(d)]
        if free:
            result.append(free[0])
        elif any(d.is_const() for d in dims):
            result.append(Dim.const(1))
        else:
            result.append(dims[0])
    return result


def _bcast_values(vals: list[list[Dim]], fn) -> list[Dim] | None:
    n = max(len(v) for v in vals)
    if any(len(v) not in (1, n) for v in vals):
        return None
    return [fn(*[v[i] if len(v) > 1 else v[0] for v in vals]) for i in range(n)]


# ------------------------------------------------------------------------------------------------
# elementwise


UNARY = (
    "Relu Sigmoid Tanh Exp Log Sqrt Erf Gelu Softmax LogSoftmax Hardmax Not LeakyRelu Elu Selu "
    "HardSigmoid HardSwish Softplus Softsign Sin Cos Tan Asin Acos Atan Sinh Cosh Asinh Acosh Atanh "
    "Reciprocal Floor Ceil Round Sign IsNaN IsInf Mish Celu Shrink ThresholdedRelu BitwiseNot "
    "LRN LpNormalization MeanVarianceNormalization InstanceNormalization CumSum Trilu "
    "ReverseSequence QuantizeLinear DequantizeLinear "
    "DynamicQuantizeLinear Clip Bernoulli Swish"
).split()


@rule(*UNARY)
def _unary(ctx: NodeCtx):
    info = ctx.info(0, "data")
    if info is None:
        return [None]
    outs = [out(info.shape, info.dtype)]
    return outs + [out(info.shape, info.dtype) for _ in ctx.node.output[1:]]


@rule("Identity", "Cast", "CastLike", "Dropout", "Neg", "Abs")
def _pass_values(ctx: NodeCtx):
    info = ctx.info(0, "data")
    if info is None:
        return [None]
    value = info.value
    base = ctx.info(0)
    if base is not None and base.value is not None:
        value = base.value
        if ctx.node.op_type == "Neg":
            value = [-v for v in value]
        elif ctx.node.op_type == "Abs":
            value = [v if ctx.traced(v) >= 0 else -v for v in value]
    dtype = info.dtype
    if ctx.node.op_type == "Cast":
        dtype = ctx.attr("to", dtype)
    elif ctx.node.op_type == "CastLike":
        dtype = ctx.dtype(1) or dtype
    result = [out(info.shape, dtype, value)]
    if ctx.node.op_type == "Dropout" and len(ctx.node.output) > 1:
        result.append(out(info.shape, onnx.TensorProto.BOOL))
    return result


@rule("ScatterElements", "Scatter", "ScatterND")
def _scatter(ctx: NodeCtx):
    data, idx, upd = ctx.shape(0, data=True), ctx.shape(1), ctx.shape(2, data=True)
    if data is None:
        return _fallback(ctx)
    if idx is not None and upd is not None and ctx.node.op_type != "ScatterND":
        for a, b in zip(upd, idx, strict=False):
            ctx.equal(a, b, "Scatter updates have the indices' shape")
        for a, b in zip(data, idx, strict=False):
            if ctx.traced(a) == ctx.traced(b):
                ctx.suggest(a, b, "Scatter into a buffer the size of the index set")
    return [out(data, ctx.dtype(0))]


_ARITH = {
    "Add": lambda x, y: x + y,
    "Sub": lambda x, y: x - y,
    "Mul": lambda x, y: x * y,
}
_COMPARE = {
    "Equal": lambda x, y: x == y,
    "Less": lambda x, y: x < y,
    "Greater": lambda x, y: x > y,
    "LessOrEqual": lambda x, y: x <= y,
    "GreaterOrEqual": lambda x, y: x >= y,
}
BINARY = (
    "Add Sub Mul Div Pow Mod Max Min Sum Mean Equal Less Greater LessOrEqual GreaterOrEqual "
    "And Or Xor BitShift BitwiseAnd BitwiseOr BitwiseXor PRelu"
).split()


def _is_shape_arith(ctx: NodeCtx) -> bool:
    """Whether this node computes on integer shape-like values (so constants are sizes)."""
    infos = [ctx.info(i) for i in range(ctx.n_inputs())]
    if any(i is None for i in infos):
        return False
    if not all(i.dtype in _INT_TYPES for i in infos):  # type: ignore[union-attr]
        return False
    return all(i.value is not None and (i.rank or 0) <= 1 for i in infos)  # type: ignore[union-attr]


@rule(*BINARY)
def _binary(ctx: NodeCtx):
    op = ctx.node.op_type
    shape_arith = _is_shape_arith(ctx)
    kind = "size" if shape_arith and op in ("Add", "Sub", "Mul", "Div", "Max", "Min", "Equal") else "data"
    infos = [ctx.info(i, kind) for i in range(ctx.n_inputs())]
    if any(i is None or i.shape is None for i in infos):
        return _fallback(ctx)
    shape = broadcast(ctx, [i.shape for i in infos], f"{op} operands")  # type: ignore[union-attr,misc]
    dtype = infos[0].dtype  # type: ignore[union-attr]
    if op in _COMPARE or op in ("And", "Or", "Xor"):
        dtype = onnx.TensorProto.BOOL
    value = None
    vals = [i.value for i in infos]  # type: ignore[union-attr]
    if shape_arith and all(v is not None for v in vals) and len(vals) == 2:
        value = _binary_values(ctx, op, vals)  # type: ignore[arg-type]
    return [out(shape, dtype, value)]


def _binary_values(ctx: NodeCtx, op: str, vals: list[list[Dim]]) -> list[Dim] | None:
    if op in _ARITH:
        return _bcast_values(vals, _ARITH[op])
    if op in _COMPARE:
        fn = _COMPARE[op]
        return _bcast_values(vals, lambda x, y: Dim.const(int(fn(ctx.traced(x), ctx.traced(y)))))
    if op == "Div":
        k = [0]

        def div(x: Dim, y: Dim) -> Dim:
            k[0] += 1
            q = x.exact_div(y)
            if q is not None:
                return q
            tx, ty = ctx.traced(x), ctx.traced(y)
            if x.is_const() and y.is_const():
                return Dim.const(int(np.trunc(tx / ty)) if ty else 0)
            return ctx.opaque(tx // ty if ty else 0, value_index=k[0] - 1, note=f"Div {x} / {y}")

        return _bcast_values(vals, div)
    if op in ("Max", "Min", "Mod"):
        k = [0]

        def pick(x: Dim, y: Dim) -> Dim:
            k[0] += 1
            tx, ty = ctx.traced(x), ctx.traced(y)
            if op == "Mod":
                if x.is_const() and y.is_const():
                    return Dim.const(tx % ty)
                return ctx.opaque(tx % ty, value_index=k[0] - 1)
            if x == y:
                return x
            if x.is_const() and y.is_const():
                return Dim.const(max(tx, ty) if op == "Max" else min(tx, ty))
            return ctx.opaque(max(tx, ty) if op == "Max" else min(tx, ty), value_index=k[0] - 1)

        return _bcast_values(vals, pick)
    return None


@rule("Where")
def _where(ctx: NodeCtx):
    shape_arith = all(
        (i := ctx.info(k)) is not None and i.value is not None and (i.rank or 0) <= 1 for k in range(3)
    )
    infos = [ctx.info(0)] + [ctx.info(k, "size" if shape_arith else "data") for k in (1, 2)]
    if any(i is None or i.shape is None for i in infos):
        return _fallback(ctx)
    shape = broadcast(ctx, [i.shape for i in infos], "Where operands")  # type: ignore[union-attr,misc]
    value = None
    if shape_arith:
        vals = [i.value for i in infos]  # type: ignore[union-attr]
        if all(v is not None for v in vals):
            value = _bcast_values(vals, lambda c, x, y: x if ctx.traced(c) else y)  # type: ignore[arg-type]
    return [out(shape, infos[1].dtype, value)]  # type: ignore[union-attr]


# ------------------------------------------------------------------------------------------------
# shape-vector ops


@rule("Shape")
def _shape(ctx: NodeCtx):
    shape = ctx.shape(0)
    if shape is None:
        return _fallback(ctx)
    rank = len(shape)
    start = ctx.attr("start", 0)
    end = ctx.attr("end", rank)
    start = max(0, min(rank, start + rank if start < 0 else start))
    end = max(0, min(rank, end + rank if end < 0 else end))
    vals = shape[start:end]
    return [out([Dim.const(len(vals))], onnx.TensorProto.INT64, vals)]


@rule("Size")
def _size(ctx: NodeCtx):
    shape = ctx.shape(0)
    if shape is None:
        return _fallback(ctx)
    return [out([], onnx.TensorProto.INT64, [dim_product(shape)])]


@rule("Constant")
def _constant(ctx: NodeCtx):
    return _fallback(ctx)


@rule("ConstantOfShape")
def _constant_of_shape(ctx: NodeCtx):
    vals = ctx.value(0, size=True)
    dtype = onnx.TensorProto.FLOAT
    t = ctx.attr("value")
    if t is not None:
        dtype = t.data_type
    if vals is None:
        return _fallback(ctx)
    value = None
    if t is not None and dtype in _INT_TYPES and all(v.is_const() for v in vals):
        n = int(np.prod([v.value for v in vals])) if vals else 1
        if n <= MAX_VALUE_ELEMENTS:
            fill = int(onnx.numpy_helper.to_array(t).reshape(-1)[0])
            value = [Dim.const(fill)] * n
    return [out(vals, dtype, value)]


@rule("Reshape")
def _reshape(ctx: NodeCtx):
    info = ctx.info(0, "data")
    target = ctx.value(1, size=True)
    if info is None or info.shape is None or target is None:
        return _fallback(ctx)
    src = info.shape
    allowzero = ctx.attr("allowzero", 0)
    dims: list[Dim | None] = []
    for k, v in enumerate(target):
        if v.value == 0 and not allowzero:
            dims.append(src[k] if k < len(src) else Dim.const(0))
        elif v.value == -1:
            dims.append(None)
        else:
            dims.append(v)
    total = dim_product(src)
    known = dim_product(d for d in dims if d is not None)
    if None in dims:
        q = total.exact_div(known)
        if q is None:
            tk = ctx.traced(known)
            traced = ctx.traced(total) // tk if tk else 0
            k = dims.index(None)
            q = ctx.derived(traced, 0, k, "Reshape -1 dim")
            ctx.equal(q * known, total, "Reshape keeps the element count")
        dims = [q if d is None else d for d in dims]
    else:
        ctx.equal(known, total, "Reshape keeps the element count")
    result: list[Dim] = [d for d in dims if d is not None]
    if any(ctx.a.unknowns(d) for d in result):
        _align(ctx, src, result)
    value = None
    if info.value is not None and all(d.is_const() for d in result):
        value = info.value
    return [out(result, info.dtype, value)]


def _align(ctx: NodeCtx, src: list[Dim], dst: list[Dim]) -> None:
    """Soft hints for Reshape: leading and trailing dims that keep their size stay the same dim."""
    lead = 0
    while lead < min(len(src), len(dst)) and ctx.traced(src[lead]) == ctx.traced(dst[lead]):
        ctx.suggest(dst[lead], src[lead], f"Reshape keeps leading dim {lead}")
        lead += 1
    trail = 0
    while (
        len(src) - trail - 1 >= lead
        and len(dst) - trail - 1 >= lead
        and ctx.traced(src[-1 - trail]) == ctx.traced(dst[-1 - trail])
    ):
        ctx.suggest(dst[-1 - trail], src[-1 - trail], f"Reshape keeps trailing dim {-1 - trail}")
        trail += 1
    mid_src = src[lead : len(src) - trail]
    mid_dst = dst[lead : len(dst) - trail]
    if mid_src or mid_dst:
        ctx.suggest(dim_product(mid_dst), dim_product(mid_src), "Reshape merges/splits middle dims")


@rule("Flatten")
def _flatten(ctx: NodeCtx):
    info = ctx.info(0, "data")
    if info is None or info.shape is None:
        return _fallback(ctx)
    shape = info.shape
    ax = ctx.axis(ctx.attr("axis", 1), len(shape))
    return [out([dim_product(shape[:ax]), dim_product(shape[ax:])], info.dtype)]


@rule("Transpose")
def _transpose(ctx: NodeCtx):
    info = ctx.info(0, "data")
    if info is None or info.shape is None:
        return _fallback(ctx)
    perm = ctx.attr("perm") or list(range(len(info.shape)))[::-1]
    return [out([info.shape[p] for p in perm], info.dtype)]


def _axes_input(ctx: NodeCtx, attr: str = "axes", index: int = 1) -> list[int] | None:
    axes = ctx.attr(attr)
    if axes is None and ctx.has(index):
        axes = ctx.ints(index)
        if axes is None:
            return None
    return list(axes) if axes is not None else []


@rule("Squeeze")
def _squeeze(ctx: NodeCtx):
    info = ctx.info(0, "data")
    if info is None or info.shape is None:
        return _fallback(ctx)
    shape = info.shape
    axes = _axes_input(ctx)
    if axes is None:
        return _fallback(ctx)
    if not axes:
        axes = [k for k, d in enumerate(shape) if ctx.traced(d) == 1]
        if any(not shape[k].is_const() for k in axes):
            ctx.a.note(ctx.node, "Squeeze without axes removes a dim that is 1 only at the traced size")
    axes = [ctx.axis(a, len(shape)) for a in axes]
    for a in axes:
        ctx.equal(shape[a], 1, f"Squeeze axis {a} must be 1")
    return [out([d for k, d in enumerate(shape) if k not in axes], info.dtype, info.value)]


@rule("Unsqueeze")
def _unsqueeze(ctx: NodeCtx):
    info = ctx.info(0, "data")
    if info is None or info.shape is None:
        return _fallback(ctx)
    axes = _axes_input(ctx)
    if axes is None:
        return _fallback(ctx)
    rank = len(info.shape) + len(axes)
    axes = sorted(ctx.axis(a, rank) for a in axes)
    shape = list(info.shape)
    for a in axes:
        shape.insert(a, Dim.const(1))
    value = info.value
    base = ctx.info(0)
    if base is not None and base.value is not None:
        value = base.value
    return [out(shape, info.dtype, value)]


@rule("Concat")
def _concat(ctx: NodeCtx):
    infos0 = [ctx.info(i) for i in range(ctx.n_inputs())]
    if any(i is None or i.shape is None for i in infos0):
        return _fallback(ctx)
    shape_vec = all(i.value is not None and (i.rank or 0) <= 1 for i in infos0)  # type: ignore[union-attr]
    infos = [ctx.info(i, "size" if shape_vec else "data") for i in range(ctx.n_inputs())]
    rank = len(infos[0].shape)  # type: ignore[union-attr,arg-type]
    ax = ctx.axis(ctx.attr("axis", 0), rank)
    first = infos[0].shape  # type: ignore[union-attr]
    shape = list(first)  # type: ignore[arg-type]
    for info in infos[1:]:
        for k in range(rank):
            if k != ax and info.shape[k] != first[k]:  # type: ignore[union-attr,index]
                ctx.equal(info.shape[k], first[k], f"Concat inputs agree on axis {k}")  # type: ignore[union-attr,index]
    shape[ax] = dim_sum(i.shape[ax] for i in infos)  # type: ignore[union-attr,index]
    shape = [_pick(ctx, [d] + [i.shape[k] for i in infos]) if k != ax else d for k, d in enumerate(shape)]  # type: ignore[union-attr,index]
    value = None
    if shape_vec:
        value = [v for i in infos for v in i.value]  # type: ignore[union-attr]
    return [out(shape, infos[0].dtype, value)]  # type: ignore[union-attr]


@rule("Split")
def _split(ctx: NodeCtx):
    info = ctx.info(0, "data")
    if info is None or info.shape is None:
        return _fallback(ctx)
    shape = info.shape
    ax = ctx.axis(ctx.attr("axis", 0), len(shape))
    n = len(ctx.node.output)
    sizes: list[Dim] | None = None
    if ctx.has(1):
        sizes = ctx.value(1, size=True)
    elif ctx.attr("split") is not None:
        sizes = [Dim.const(s) for s in ctx.attr("split")]
    if sizes is None:
        d = shape[ax]
        chunk = ctx.div(d, n, axis=ax, ceil=True)
        last = d - chunk * (n - 1)
        sizes = [chunk] * (n - 1) + [last]
    else:
        ctx.equal(dim_sum(sizes), shape[ax], "Split sizes add up to the split axis")
    outs = []
    for s in sizes[:n]:
        new = list(shape)
        new[ax] = s
        outs.append(out(new, info.dtype))
    return outs


@rule("Slice")
def _slice(ctx: NodeCtx):
    base = ctx.info(0)
    if base is None or base.shape is None:
        return _fallback(ctx)
    vector = base.value is not None and (base.rank or 0) == 1
    info = base if vector else ctx.info(0, "data")
    shape = list(info.shape)  # type: ignore[union-attr,arg-type]
    if ctx.opset < 10:
        starts = [Dim.const(v) for v in ctx.attr("starts", [])]
        ends = [Dim.const(v) for v in ctx.attr("ends", [])]
        axes = ctx.attr("axes") or list(range(len(starts)))
        steps = [1] * len(starts)
    else:
        starts = ctx.value(1, size=not vector)
        ends = ctx.value(2, size=not vector)
        axes = ctx.ints(3) if ctx.has(3) else None
        steps = ctx.ints(4) if ctx.has(4) else None
        if starts is None or ends is None or (ctx.has(3) and axes is None) or (ctx.has(4) and steps is None):
            return _fallback(ctx)
        axes = axes if axes is not None else list(range(len(starts)))
        steps = steps if steps is not None else [1] * len(starts)
    value = list(base.value) if vector else None
    for s, e, a, st in zip(starts, ends, axes, steps, strict=False):
        a = ctx.axis(a, len(shape))
        d = shape[a]
        if value is not None and s.is_const() and e.is_const():
            idx = range(len(value))[slice(int(s.value), int(e.value), st)]  # type: ignore[arg-type]
            value = [value[i] for i in idx]
            shape[a] = Dim.const(len(value))
            continue
        value = None
        shape[a] = _slice_len(ctx, d, s, e, st, a)
    return [out(shape, info.dtype, value)]  # type: ignore[union-attr]


def _slice_len(ctx: NodeCtx, d: Dim, s: Dim, e: Dim, step: int, axis: int) -> Dim:
    """Length of ``x[s:e:step]`` along an axis of size ``d`` (bounds clamped as ONNX does)."""
    td = ctx.traced(d)

    def bound(x: Dim) -> Dim:
        v = x.value
        if v is not None:
            if v >= 2**31 - 1:
                return d
            if v < 0:
                return d + v if td + v >= 0 else Dim.const(0)
            return d if v >= td else x
        tx = ctx.traced(x)
        if tx > td:
            return d
        if tx == td:
            ctx.suggest(x, d, f"Slice bound equals the whole axis {axis}")
        return x

    if step > 0:
        n = bound(e) - bound(s)
        if step != 1:
            n = ctx.div(n, step, axis=axis, ceil=True)
    else:
        sv, ev = s.value, e.value
        if sv is not None and sv >= td:
            s2 = d - 1
        elif sv is not None and sv < 0:
            s2 = d + sv
        else:
            s2 = s
        if ev is not None and ev < -td:
            e2: Dim = Dim.const(-1)
        elif ev is not None and ev < 0:
            e2 = d + ev
        else:
            e2 = e
        n = ctx.div(s2 - e2, -step, axis=axis, ceil=True)
    if ctx.traced(n) < 0:
        return Dim.const(0)
    return n


@rule("Gather")
def _gather(ctx: NodeCtx):
    base = ctx.info(0)
    idx = ctx.info(1)
    if base is None or base.shape is None or idx is None or idx.shape is None:
        return _fallback(ctx)
    vector = base.value is not None and (base.rank or 0) <= 1
    info = ctx.info(0, "size") if vector else base
    shape = info.shape  # type: ignore[union-attr]
    ax = ctx.axis(ctx.attr("axis", 0), len(shape))  # type: ignore[arg-type]
    out_shape = shape[:ax] + idx.shape + shape[ax + 1 :]  # type: ignore[index,operator]
    value = None
    if vector and info.value is not None and idx.value is not None:  # type: ignore[union-attr]
        n = len(info.value)  # type: ignore[union-attr]
        picks = []
        for v in idx.value:
            t = ctx.traced(v)
            if not v.is_const() or not -n <= t < n:
                picks = None
                break
            picks.append(info.value[t + n if t < 0 else t])  # type: ignore[union-attr]
        value = picks
    return [out(out_shape, base.dtype, value)]


@rule("GatherElements")
def _gather_elements(ctx: NodeCtx):
    idx = ctx.shape(1)
    data = ctx.shape(0)
    if idx is None or data is None:
        return _fallback(ctx)
    ax = ctx.axis(ctx.attr("axis", 0), len(data))
    for k in range(len(data)):
        if k != ax and ctx.traced(idx[k]) == ctx.traced(data[k]) and ctx.traced(data[k]) != 1:
            ctx.suggest(idx[k], data[k], "GatherElements indices follow the data")
    return [out(idx, ctx.dtype(0))]


@rule("GatherND")
def _gather_nd(ctx: NodeCtx):
    data, idx = ctx.shape(0), ctx.shape(1)
    if data is None or idx is None or idx[-1].value is None:
        return _fallback(ctx)
    b = ctx.attr("batch_dims", 0)
    last = int(idx[-1].value)
    return [out(idx[:-1] + data[b + last :], ctx.dtype(0))]


@rule("Expand")
def _expand(ctx: NodeCtx):
    info = ctx.info(0, "data")
    target = ctx.value(1, size=True)
    if info is None or info.shape is None or target is None:
        return _fallback(ctx)
    shape = broadcast(ctx, [info.shape, target], "Expand input and shape")
    value = None
    if info.value is not None and len(info.value) == 1 and all(d.is_const() for d in shape):
        n = int(np.prod([d.value for d in shape])) if shape else 1
        if n <= MAX_VALUE_ELEMENTS:
            value = info.value * n
    return [out(shape, info.dtype, value)]


@rule("Tile")
def _tile(ctx: NodeCtx):
    info = ctx.info(0, "data")
    reps = ctx.value(1, size=True)
    if info is None or info.shape is None or reps is None:
        return _fallback(ctx)
    return [out([d * r for d, r in zip(info.shape, reps, strict=False)], info.dtype)]


@rule("Range")
def _range(ctx: NodeCtx):
    start, limit = ctx.value(0, size=True), ctx.value(1, size=True)
    delta = ctx.value(2)
    if start is None or limit is None or delta is None:
        return _fallback(ctx)
    s, lim, dl = start[0], limit[0], delta[0]
    td = ctx.traced(dl)
    if dl.is_const() and td == 1:
        n = lim - s
    elif dl.is_const() and td == -1:
        n = s - lim
    elif dl.is_const() and td > 0:
        n = ctx.div(lim - s, td, axis=0, ceil=True)
    else:
        n = ctx.opaque(max(0, -(-(ctx.traced(lim) - ctx.traced(s)) // td)) if td else 0, axis=0)
    value = None
    if n.is_const() and s.is_const() and dl.is_const() and 0 <= int(n.value) <= MAX_VALUE_ELEMENTS:  # type: ignore[arg-type]
        value = [Dim.const(int(s.value) + i * td) for i in range(int(n.value))]  # type: ignore[arg-type]
    elif n.is_const() is False and dl.is_const() and td == 1 and ctx.traced(n) <= MAX_VALUE_ELEMENTS:
        value = None
    return [out([n], ctx.dtype(0), value)]


@rule("Pad")
def _pad(ctx: NodeCtx):
    info = ctx.info(0, "data")
    if info is None or info.shape is None:
        return _fallback(ctx)
    shape = list(info.shape)
    rank = len(shape)
    if ctx.opset < 11:
        pads = [Dim.const(p) for p in ctx.attr("pads", [])]
    else:
        pads = ctx.value(1, size=True)
    if pads is None:
        return _fallback(ctx)
    axes = ctx.ints(3) if ctx.has(3) else list(range(rank))
    if axes is None:
        return _fallback(ctx)
    n = len(axes)
    for k, a in enumerate(axes):
        a = ctx.axis(a, rank)
        shape[a] = shape[a] + pads[k] + pads[k + n]
    return [out(shape, info.dtype)]


@rule("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
      "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")
def _reduce(ctx: NodeCtx):
    info = ctx.info(0, "data")
    if info is None or info.shape is None:
        return _fallback(ctx)
    shape = info.shape
    axes = ctx.attr("axes")
    if axes is None and ctx.has(1):
        axes = ctx.ints(1)
        if axes is None:
            return _fallback(ctx)
    keep = ctx.attr("keepdims", 1)
    if not axes:
        if ctx.attr("noop_with_empty_axes", 0):
            return [out(shape, info.dtype, info.value)]
        axes = list(range(len(shape)))
    axes = {ctx.axis(a, len(shape)) for a in axes}
    new = [Dim.const(1) if k in axes else d for k, d in enumerate(shape) if keep or k not in axes]
    value = None
    base = ctx.info(0)
    if base is not None and base.value is not None and len(shape) <= 1 and not keep:
        if ctx.node.op_type == "ReduceProd":
            value = [dim_product(base.value)]
        elif ctx.node.op_type == "ReduceSum":
            value = [dim_sum(base.value)]
    return [out(new, info.dtype, value)]


@rule("ArgMax", "ArgMin")
def _argmax(ctx: NodeCtx):
    shape = ctx.shape(0)
    if shape is None:
        return _fallback(ctx)
    ax = ctx.axis(ctx.attr("axis", 0), len(shape))
    keep = ctx.attr("keepdims", 1)
    new = [Dim.const(1) if k == ax else d for k, d in enumerate(shape) if keep or k != ax]
    return [out(new, onnx.TensorProto.INT64)]


@rule("TopK")
def _topk(ctx: NodeCtx):
    shape = ctx.shape(0)
    k = ctx.value(1, size=True) if ctx.has(1) else [Dim.const(ctx.attr("k", 1))]
    if shape is None or k is None:
        return _fallback(ctx)
    ax = ctx.axis(ctx.attr("axis", -1), len(shape))
    new = list(shape)
    new[ax] = k[0]
    return [out(new, ctx.dtype(0)), out(new, onnx.TensorProto.INT64)]


@rule("NonZero")
def _nonzero(ctx: NodeCtx):
    shape = ctx.shape(0)
    static = ctx.static_shape(0)
    if shape is None:
        return _fallback(ctx)
    traced = static[1] if static and len(static) == 2 and static[1] is not None else 0
    n = ctx.opaque(traced or 0, 0, 1, note="NonZero count (data-dependent)")
    return [out([Dim.const(len(shape)), n], onnx.TensorProto.INT64)]


@rule("OneHot")
def _onehot(ctx: NodeCtx):
    idx = ctx.shape(0)
    depth = ctx.value(1, size=True)
    if idx is None or depth is None:
        return _fallback(ctx)
    rank = len(idx) + 1
    ax = ctx.axis(ctx.attr("axis", -1), rank)
    new = list(idx)
    new.insert(ax, depth[0])
    return [out(new, ctx.dtype(2))]


# ------------------------------------------------------------------------------------------------
# dispatch and fallback


def run_node(analysis: ShapeAnalysis, index: int, node: onnx.NodeProto, graph: str) -> None:
    """Apply the rule for ``node`` (or the fallback) and store its outputs' infos."""
    from onnxsurgery import shape_rules_nn  # noqa: F401  (registers the nn rules)

    ctx = NodeCtx(analysis, index, node, graph)
    fn = RULES.get(node.op_type) if node.domain in ("", "ai.onnx") else None
    try:
        outs = fn(ctx) if fn is not None else _fallback(ctx)
    except (IndexError, KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        analysis.note(node, f"shape rule failed ({type(exc).__name__}: {exc}); used ONNX inference")
        outs = _fallback(ctx)
    for k, name in enumerate(node.output):
        if name and k < len(outs) and outs[k] is not None:
            analysis.tensors[name] = outs[k]  # type: ignore[assignment]


def _type_for(info: TensorInfo | None, names: dict[str, Dim]) -> onnx.TypeProto | None:
    if info is None:
        return None
    shape: list[int | str] | None = None
    if info.shape is not None:
        shape = []
        for d in info.shape:
            if d.value is not None:
                shape.append(int(d.value))
            else:
                key = f"__s{len(names)}"
                names[key] = d
                shape.append(key)
    return onnx.helper.make_tensor_type_proto(info.dtype or onnx.TensorProto.FLOAT, shape)


def _fallback(ctx: NodeCtx) -> list[TensorInfo | None]:
    """ONNX's per-node shape inference with symbolic dims as dim_params; unknowns become atoms."""
    node = ctx.node
    names: dict[str, Dim] = {}
    types: dict[str, onnx.TypeProto] = {}
    data: dict[str, onnx.TensorProto] = {}
    for name in node.input:
        if not name or name in types:
            continue
        t = _type_for(ctx.a.info(name), names)
        if t is not None:
            types[name] = t
        arr = ctx.a.const(name)
        if arr is not None:
            data[name] = onnx.numpy_helper.from_array(arr, name)
        else:
            info = ctx.a.info(name)
            if info is not None and info.value is not None and all(v.is_const() for v in info.value):
                arr = np.array([int(v.value) for v in info.value], dtype=np.int64)  # type: ignore[arg-type]
                if info.rank == 0:
                    arr = arr.reshape(())
                data[name] = onnx.numpy_helper.from_array(arr, name)
    inferred: dict[str, onnx.TypeProto] = {}
    if node.domain in ("", "ai.onnx") and not any(a.HasField("g") or a.graphs for a in node.attribute):
        try:
            schema = onnx.defs.get_schema(node.op_type, ctx.a.opset, node.domain)
            inferred = onnx.shape_inference.infer_node_outputs(
                schema, node, types, data, opset_imports=list(ctx.a.model.opset_import)
            )
        except Exception:  # noqa: BLE001 - inference is best effort here
            inferred = {}
    symbolic = ctx.symbolic_inputs()
    outs: list[TensorInfo | None] = []
    for k, name in enumerate(node.output):
        t = inferred.get(name)
        static = ctx.a.static.get(name)
        dtype = t.tensor_type.elem_type if t is not None else 0
        dims_in: list | None = None
        if t is not None and t.tensor_type.HasField("shape"):
            dims_in = list(t.tensor_type.shape.dim)
        elif static is not None:
            dims_in = [None] * len(static)
        if dims_in is None:
            outs.append(None)
            continue
        shape: list[Dim] = []
        ok = True
        for axis, d in enumerate(dims_in):
            if d is not None and d.HasField("dim_value"):
                shape.append(Dim.const(d.dim_value))
            elif d is not None and d.dim_param in names:
                shape.append(names[d.dim_param])
            else:
                sv = static[axis] if static is not None and axis < len(static) else None
                if sv is None:
                    ok = False
                    break
                if not symbolic:
                    shape.append(Dim.const(sv))
                else:
                    shape.append(ctx.derived(sv, k, axis, f"{node.op_type} output dim (no rule)"))
        if not ok:
            outs.append(None)
            continue
        outs.append(TensorInfo(shape, dtype))
    if symbolic and node.op_type not in ("Constant",):
        ctx.a.note(node, f"no symbolic rule for {node.op_type}; used ONNX shape inference")
    return outs
