"""Per-op shape rules for :mod:`onnxsurgery.shape_propagation`: tensor and shape-vector ops.

Each rule reads its inputs through a :class:`NodeCtx` (which turns constant inputs into per-use
unknowns where the op reads them as sizes or as data), records the constraints the op's structure
imposes, and returns one :class:`TensorInfo` (or ``None``) per output. Ops without a rule go
through ONNX's own per-node shape inference, with each symbolic dim passed as a ``dim_param``;
dims it cannot derive become fresh ``derived`` unknowns (and a note says so).

Shape-vector and layout ops (Shape, Reshape, Concat, Slice, Gather, Expand, ...) live in
:mod:`onnxsurgery.shape_rules_tensor`; neural-network ops (MatMul, Gemm, Conv, pooling,
normalization, RNNs, Einsum, control flow) in :mod:`onnxsurgery.shape_rules_nn`. Both register
into the same table.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx

from onnxsurgery.dim_algebra import Dim, as_dim
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

    def __init__(
        self, analysis: ShapeAnalysis, index: int, node: onnx.NodeProto, graph: str
    ) -> None:
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

    def suggest(self, x: Dim | int, y: Dim | int, why: str, when_free: bool = False) -> None:
        self.a.suggest(x, y, self.node, why, when_free)

    def opaque(
        self,
        traced: int,
        k: int = 0,
        axis: int | None = None,
        value_index: int | None = None,
        note: str = "",
    ) -> Dim:
        """A dim only known at run time: axis ``axis`` (or element ``value_index``) of output ``k``."""
        out = self.node.output[k] if k < len(self.node.output) else ""
        origin = ("dim", out, axis) if value_index is None else ("value", out, value_index)
        return self.a.new_atom("opaque", traced, origin, note or f"{self.node.op_type} output")

    def derived(self, traced: int, k: int = 0, axis: int | None = None, note: str = "") -> Dim:
        out = self.node.output[k] if k < len(self.node.output) else ""
        return self.a.new_atom(
            "derived", traced, ("dim", out, axis), note or f"{self.node.op_type} output"
        )

    def div(
        self,
        num: Dim,
        den: Dim | int,
        k: int = 0,
        axis: int | None = None,
        ceil: bool = False,
        plus: int = 0,
        exact: bool = False,
    ) -> Dim:
        """``num // den + plus`` (ceil with ``ceil``) as a Dim: polynomial where the division is
        exact, else an opaque runtime dim read from ``axis`` of output ``k``.

        With ``exact`` (equal Split chunks, depth-to-space) a division that is exact at the traced
        size and involves unknowns is left to the solver as a derived dim instead. Opaque dims are
        shared by expression, so two branches computing ``(H - 1) // 2 + 1`` get the same one.
        """
        den = as_dim(den)
        q = num.exact_div(den)
        if q is not None:
            return q + plus
        tn, td = self.traced(num), self.traced(den)
        if exact and td and tn % td == 0 and (self.a.unknowns(num) or self.a.unknowns(den)):
            q = self.derived(tn // td + plus, k, axis, f"{self.node.op_type}: {num} / {den}")
            self.equal((q - plus) * den, num, f"{self.node.op_type} divides {num} by {den} exactly")
            return q
        if ceil:
            num = num + den - 1
            q = num.exact_div(den)
            if q is not None:
                return q + plus
            tn = self.traced(num)
        if num.is_const() and den.is_const():
            return Dim.const(tn // td + plus)
        key = (str(num), str(den), plus)
        cached = self.a.floors.get(key)
        if cached is not None:
            return cached
        note = f"{self.node.op_type}: {num} // {den} + {plus}"
        if self.a.unknowns(num) or self.a.unknowns(den):
            # Decided once the unknowns are: a constant, a polynomial, or a run-time dim.
            d = self.derived(tn // td + plus if td else 0, k, axis, note)
            self.a.pending_floors.append((next(iter(d.atoms())), num, den, plus))
        else:
            d = self.opaque(tn // td + plus if td else 0, k, axis, note=note)
        self.a.floors[key] = d
        return d

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
        # An unknown beats a literal 1: it may still turn out to be that symbol.
        free = [d for d in dims if not d.is_const() and not ctx.a.unknowns(d)]
        open_ = [d for d in dims if ctx.a.unknowns(d)]
        result.append(free[0] if free else open_[0] if open_ else Dim.const(1))
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
    data, idx, upd = ctx.shape(0, data=True), ctx.shape(1, data=True), ctx.shape(2, data=True)
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
    kind = (
        "size"
        if shape_arith and op in ("Add", "Sub", "Mul", "Div", "Max", "Min", "Equal")
        else "data"
    )
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
            if ty and tx % ty == 0 and tx // ty >= 0 and (ctx.a.unknowns(x) or ctx.a.unknowns(y)):
                q = ctx.a.new_atom(
                    "derived", tx // ty, ("value", ctx.node.output[0], k[0] - 1), "Div"
                )
                ctx.equal(q * y, x, f"Div {x} / {y} is exact")
                return q
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
        (i := ctx.info(k)) is not None and i.value is not None and (i.rank or 0) <= 1
        for k in range(3)
    )
    infos = [ctx.info(0, None if shape_arith else "data")]
    infos += [ctx.info(k, "size" if shape_arith else "data") for k in (1, 2)]
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
# dispatch and fallback


def run_node(analysis: ShapeAnalysis, index: int, node: onnx.NodeProto, graph: str) -> None:
    """Apply the rule for ``node`` (or the fallback) and store its outputs' infos."""
    from onnxsurgery import shape_rules_nn, shape_rules_tensor  # noqa: F401  (register their rules)

    if _fold(analysis, node):
        return
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


_NO_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
            "Bernoulli", "If", "Loop", "Scan", "Constant"}  # fmt: skip
FOLD_LIMIT = 1 << 16  # elements of input
#: Outputs up to this many elements are folded: scalars and pads-sized vectors. Larger tables
#: built from constants (T5's relative buckets) stay as computations on their (regenerable) inputs.
FOLD_OUTPUT_LIMIT = 8


def _fold(analysis: ShapeAnalysis, node: onnx.NodeProto) -> bool:
    """Compute a node whose inputs are all constants and whose outputs are small (scalar
    arithmetic such as ``Cast(Pow(16.0, 0.5))``, a pads vector built by Concat/Reshape/Slice);
    its outputs become constants, whose uses get unknowns like any other constant's, so a traced
    size they hold is still found where it is used. Returns whether it folded."""
    names = [i for i in node.input if i]
    if (
        not names
        or node.domain not in ("", "ai.onnx")
        or node.op_type in _NO_FOLD
        or any(a.HasField("g") or a.graphs for a in node.attribute)
        or not all(n in analysis.consts for n in names)
        or sum(analysis.consts[n].size for n in names) > FOLD_LIMIT
    ):
        return False
    from onnx.reference import ReferenceEvaluator

    inputs = [
        onnx.helper.make_tensor_value_info(
            n,
            onnx.helper.np_dtype_to_tensor_dtype(analysis.consts[n].dtype),
            analysis.consts[n].shape,
        )
        for n in dict.fromkeys(names)
    ]
    outputs = [onnx.helper.make_value_info(o, onnx.TypeProto()) for o in node.output if o]
    graph = onnx.helper.make_graph([node], "fold", inputs, outputs)
    model = onnx.helper.make_model(graph, opset_imports=list(analysis.model.opset_import))
    try:
        with np.errstate(all="ignore"):
            values = ReferenceEvaluator(model).run(
                None, {n: analysis.consts[n] for n in dict.fromkeys(names)}
            )
    except Exception:  # noqa: BLE001 - not foldable here: let the rules see it
        return False
    from onnxsurgery.shape_propagation import constant_info

    for name, value in zip([o for o in node.output if o], values, strict=False):
        arr = np.asarray(value)
        if arr.size > FOLD_OUTPUT_LIMIT:
            return False
        analysis.consts[name] = arr
        try:
            dtype = onnx.helper.np_dtype_to_tensor_dtype(arr.dtype)
        except (KeyError, TypeError, ValueError):
            dtype = 0
        analysis.tensors[name] = constant_info(arr, dtype)
    return True


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
            if (
                info is not None
                and info.value is not None
                and all(v.is_const() for v in info.value)
            ):
                arr = np.array([int(v.value) for v in info.value], dtype=np.int64)  # type: ignore[arg-type]
                if info.rank == 0:
                    arr = arr.reshape(())
                data[name] = onnx.numpy_helper.from_array(arr, name)
    inferred: dict[str, onnx.TypeProto] = {}
    if node.domain in ("", "ai.onnx") and not any(
        a.HasField("g") or a.graphs for a in node.attribute
    ):
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
