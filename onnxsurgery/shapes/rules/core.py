"""The shape-rule registry and what every rule uses: :class:`NodeCtx`, broadcasting, dispatch.

A rule is a function registered with :func:`rule` for one or more ops of one domain; the registry
is keyed by ``(domain, op_type)`` and refuses a second rule for the same key; the same decorator
declares the ops' traits (:mod:`~onnxsurgery.shapes.rules.traits`). Each rule reads its inputs
through a :class:`NodeCtx` (which turns constant inputs into per-use unknowns where the op reads
them as sizes or as data), records the constraints the op's structure imposes, and returns one
:class:`TensorInfo` (or ``None``) per output. Ops without a rule go through ONNX's own per-node
shape inference, with each symbolic dim passed as a ``dim_param``; dims it cannot derive become
fresh ``derived`` unknowns (and a note says so).

The rules themselves live by op family beside this module (``elementwise``, ``tensor``, ``nn``,
``control_flow``); importing :mod:`onnxsurgery.shapes.rules` registers all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx

from onnxsurgery.model.dtypes import elem_type_of
from onnxsurgery.model.walk import subgraphs
from onnxsurgery.shapes.analysis import (
    MAX_VALUE_ELEMENTS,
    ShapeAnalysis,
    TensorInfo,
    UseKind,
    constant_info,
)
from onnxsurgery.shapes.dims import Dim, as_dim, const_ints
from onnxsurgery.shapes.rules.traits import DEFAULT, declare, domain_key, op_traits, traits_from

__all__ = [
    "NodeCtx",
    "RULES",
    "rule",
    "run_node",
    "broadcast",
    "pick",
    "out",
    "fallback",
    "with_shapes",
]

Rule = Callable[["NodeCtx"], list[TensorInfo | None]]
#: (domain, op_type) -> rule; the default domain is ``""`` (``ai.onnx`` is read as ``""``).
RULES: dict[tuple[str, str], Rule] = {}
BIG = 2**31 - 1


def rule(*ops: str, domain: str = "", **options: object) -> Callable[[Rule], Rule]:
    """Register the decorated function as the rule for ``ops`` of ``domain``, and with keyword
    ``options`` (the fields of :class:`~onnxsurgery.shapes.rules.traits.OpTraits`: which inputs
    are sizes, which axes mix rows, whether it broadcasts, may be folded) their traits.

    A second rule or a second traits declaration for the same ``(domain, op)`` is an error naming
    both places.
    """
    declared = traits_from(options)

    def register(fn: Rule) -> Rule:
        place = f"{fn.__module__}.{fn.__qualname__}"
        for op in ops:
            key = (domain_key(domain), op)
            if key in RULES:
                old = RULES[key]
                raise ValueError(
                    f"shape rule for {key[0] or 'ai.onnx'}::{op} registered twice: "
                    f"{old.__module__}.{old.__qualname__} and {place}"
                )
        if declared != DEFAULT:
            declare(ops, domain, declared, place)
        for op in ops:
            RULES[(domain_key(domain), op)] = fn
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

    def info(self, i: int, kind: UseKind | None = None) -> TensorInfo | None:
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
        return None if vals is None else const_ints(vals)

    def dtype(self, i: int) -> int:
        info = self.info(i)
        return info.dtype if info else 0

    def attr(self, name: str, default: Any = None) -> Any:
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
        self.a.floor_parts[next(iter(d.atoms()))] = (num, den, plus)
        return d

    def axis(self, a: int, rank: int) -> int:
        return a + rank if a < 0 else a

    def static_shape(self, k: int) -> list[int | None] | None:
        out = self.node.output[k] if k < len(self.node.output) else ""
        return self.a.static.get(out)

    def symbolic_inputs(self) -> bool:
        """Whether an input may carry a symbol: a symbolic dim or value, or a tensor whose shape
        propagation lost (no rule could follow it): its static sizes are only traced ones.
        Traced at batch 1, ONNX's inference leaves ``1`` broadcast with an unknown dim unknown
        (at batch 2 the 2 decides), so a residual Add behind LongT5's block padding lost its
        shape, and the cross-attention behind it read ``[1, 8, 32]`` as fixed sizes, fixing
        the decoder's ``tgt`` at 8 where TorchScript's batch-2 export kept it a symbol."""
        for name in self.node.input:
            info = self.a.info(name) if name else None
            if info is None:
                if name and self.a.const(name) is None:
                    return True
                continue
            for d in (info.shape or []) + (info.value or []):
                if not d.is_const():
                    return True
        return False


def with_shapes(
    infos: Sequence[TensorInfo | None],
) -> tuple[list[TensorInfo], list[list[Dim]]] | None:
    """``infos`` and their shapes when every one is known with a rank, else None."""
    known = [i for i in infos if i is not None]
    shapes = [i.shape for i in known if i.shape is not None]
    return (known, shapes) if len(shapes) == len(infos) else None


def _const_value(values: list[Dim] | None, dtype: int) -> list[Dim] | None:
    if values is None or len(values) > MAX_VALUE_ELEMENTS:
        return None
    return values


def out(shape: list[Dim] | None, dtype: int = 0, value: list[Dim] | None = None) -> TensorInfo:
    return TensorInfo(None if shape is None else list(shape), dtype, value)


# ------------------------------------------------------------------------------------------------
# broadcasting


def pick(ctx: NodeCtx, dims: list[Dim]) -> Dim:
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
        place = [i for i, s in enumerate(shapes) if len(s) - rank + k >= 0]
        big = [d for d in dims if ctx.traced(d) != 1]
        if big:
            rep = pick(ctx, big)
            for d in big:
                if d != rep:
                    text = f"{why}: dim {k - rank} of {rep} and {d} must match"
                    ctx.a.equal(d, rep, ctx.node, text, broadcast=True)
            result.append(rep)
            continue
        # Every operand is 1 at the traced size: the output follows a symbolic one, if any.
        # An unknown beats a literal 1: it may still turn out to be that symbol.
        free = [d for d in dims if not d.is_const() and not ctx.a.unknowns(d)]
        open_ = [d for d in dims if ctx.a.unknowns(d)]
        site = (ctx.graph, ctx.index, why, k - rank)
        first = ctx.a.follow.get(site)
        if first in place and dims[place.index(first)] in open_:
            # a solve made the unknown followed by default the constant 1, this one varies:
            # at run time the output is this one (:func:`~onnxsurgery.shapes.solver.misfollowed`)
            lead = dims[place.index(first)]
            open_ = [lead, *(d for d in open_ if d != lead)]
        for d in open_ if free else ():
            if d.is_atom() and ctx.a.atoms[next(iter(d.atoms()))].kind == "data":
                ctx.a.one_point.setdefault(next(iter(d.atoms())), free[0])
        sizes = [d for d in open_ if d.is_atom() and ctx.a.atoms[next(iter(d.atoms()))].kind == "var"]
        for d in sizes[1:] if not free else ():
            # two sizes read from constants, both 1 here: where one turns out to be the batch
            # and nothing keeps the other at 1, they broadcast alike (a query expanded from a
            # learned token meeting the keys' batch)
            ctx.suggest(d, sizes[0], f"{why}: dim {k - rank} broadcasts {sizes[0]} and {d} alike")
        # The output follows the first unknown (not a size read from a constant put first:
        # that made a batch traced at 1 follow an Expand's or Reshape's constant 1 for good,
        # [1, S, C] at batch 2, in make fuzz's templates); the others it drops are recorded: they must be
        # 1 wherever that one is the constant 1 (the solver keeps them so).
        for d in open_[1:] if not free else ():
            if d.is_atom() and d != open_[0]:
                atom = next(iter(d.atoms()))
                ctx.a.dropped_ones.setdefault(atom, open_[0])
                ctx.a.dropped_at.setdefault(atom, (site, place[dims.index(d)]))
        result.append(free[0] if free else open_[0] if open_ else Dim.const(1))
        if open_ and len(dims) > 1:
            ctx.a.ones_met.append((ctx.node.name, list(dims), result[-1]))
    return result


# ------------------------------------------------------------------------------------------------
# dispatch and fallback


def run_node(analysis: ShapeAnalysis, index: int, node: onnx.NodeProto, graph: str) -> None:
    """Apply the rule for ``node`` (or the fallback) and store its outputs' infos."""
    if _fold(analysis, node):
        return
    ctx = NodeCtx(analysis, index, node, graph)
    fn = RULES.get((domain_key(node.domain), node.op_type))
    try:
        outs = fn(ctx) if fn is not None else fallback(ctx)
    except (IndexError, KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        analysis.note(node, f"shape rule failed ({type(exc).__name__}: {exc}); used ONNX inference")
        outs = fallback(ctx)
    for name, info in zip(node.output, outs, strict=False):
        if name and info is not None:
            analysis.tensors[name] = info


FOLD_LIMIT = 1 << 16  # elements of input
#: Outputs up to this many elements are folded: scalars and pads-sized vectors. Larger tables
#: built from constants (T5's relative buckets) stay as computations on their (regenerable) inputs.
FOLD_OUTPUT_LIMIT = 8
#: ... and up to this many where a Pad's pads are computed from them: the pads of a tensor of
#: up to rank 8 (TorchScript builds a rank-5 Pad's 10 pads by Concat, Reshape [-1, 2], a
#: reversing Slice and a Transpose; unfolded, the Pad's output shape, and every size after it,
#: was lost: LongT5's local attention)
FOLD_PADS_LIMIT = 16


def pads_sources(analysis: ShapeAnalysis) -> frozenset[str]:
    """The tensors of the main graph that some Pad's pads (input 1) are computed from, through
    any nodes (found once per analysis)."""
    if analysis.pads_sources is None:
        producers = {o: n for n in analysis.model.graph.node for o in n.output if o}
        todo = [n.input[1] for n in analysis.model.graph.node if n.op_type == "Pad" and len(n.input) > 1]
        seen: set[str] = set()
        while todo:
            name = todo.pop()
            if name and name not in seen:
                seen.add(name)
                node = producers.get(name)
                todo += list(node.input) if node is not None else []
        analysis.pads_sources = frozenset(seen)
    return analysis.pads_sources


def _fold(analysis: ShapeAnalysis, node: onnx.NodeProto) -> bool:
    """Compute a node whose inputs are all constants and whose outputs are small (scalar
    arithmetic such as ``Cast(Pow(16.0, 0.5))``, a pads vector built by Concat/Reshape/Slice);
    its outputs become constants, whose uses get unknowns like any other constant's, so a traced
    size they hold is still found where it is used. Returns whether it folded."""
    names = [i for i in node.input if i]
    if (
        not names
        or node.domain not in ("", "ai.onnx")
        or not op_traits(node.domain, node.op_type).foldable
        or subgraphs(node)
        or not all(n in analysis.consts for n in names)
        or sum(analysis.consts[n].size for n in names) > FOLD_LIMIT
    ):
        return False
    from onnx.reference import ReferenceEvaluator

    inputs = [
        onnx.helper.make_tensor_value_info(
            n,
            elem_type_of(analysis.consts[n]),
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
    limit = FOLD_OUTPUT_LIMIT
    if any(o in pads_sources(analysis) for o in node.output):
        limit = FOLD_PADS_LIMIT
    for name, value in zip([o for o in node.output if o], values, strict=False):
        arr = np.asarray(value)
        if arr.size > limit:
            return False
        analysis.consts[name] = arr
        analysis.tensors[name] = constant_info(arr, elem_type_of(arr))
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


def fallback(ctx: NodeCtx) -> list[TensorInfo | None]:
    """ONNX's per-node shape inference with symbolic dims as dim_params; unknowns become atoms."""
    node = ctx.node
    names: dict[str, Dim] = {}
    types, data = _inference_inputs(ctx, names)
    inferred: dict[str, onnx.TypeProto] = {}
    if node.domain in ("", "ai.onnx") and not subgraphs(node):
        try:
            schema = onnx.defs.get_schema(node.op_type, ctx.a.opset, node.domain)
            inferred = onnx.shape_inference.infer_node_outputs(
                schema, node, types, data, opset_imports=list(ctx.a.model.opset_import)
            )
        except Exception:  # noqa: BLE001 - inference is best effort here
            inferred = {}
    symbolic = ctx.symbolic_inputs()
    outs = [
        _inferred_info(ctx, k, inferred.get(name), ctx.a.static.get(name), names, symbolic)
        for k, name in enumerate(node.output)
    ]
    if symbolic and node.op_type not in ("Constant",):
        ruled = (node.domain or "", node.op_type) in RULES or (
            node.domain == "ai.onnx" and ("", node.op_type) in RULES
        )
        why = (
            "its symbolic rule could not read its inputs (a shape or size left unknown upstream)"
            if ruled
            else f"no symbolic rule for {node.op_type}"
        )
        ctx.a.note(node, f"{why}; used ONNX shape inference")
    return outs


def _inference_inputs(
    ctx: NodeCtx, names: dict[str, Dim]
) -> tuple[dict[str, onnx.TypeProto], dict[str, onnx.TensorProto]]:
    """The node's input types for ONNX inference (symbolic dims as dim_params, recorded in
    ``names``) and the values it knows: constants, and integer vectors known element-wise."""
    types: dict[str, onnx.TypeProto] = {}
    data: dict[str, onnx.TensorProto] = {}
    for name in ctx.node.input:
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
                and (ints := const_ints(info.value)) is not None
            ):
                arr = np.array(ints, dtype=np.int64)
                if info.rank == 0:
                    arr = arr.reshape(())
                data[name] = onnx.numpy_helper.from_array(arr, name)
    return types, data


def _inferred_info(
    ctx: NodeCtx,
    k: int,
    t: onnx.TypeProto | None,
    static: list[int | None] | None,
    names: dict[str, Dim],
    symbolic: bool,
) -> TensorInfo | None:
    """Output ``k`` as ONNX inferred it (``t``): its dim_params read back through ``names``, a
    dim it left unknown taken from the static shape (a derived atom when inputs are symbolic);
    None when neither tells the rank or a dim."""
    dtype = t.tensor_type.elem_type if t is not None else 0
    dims_in: list | None = None
    if t is not None and t.tensor_type.HasField("shape"):
        dims_in = list(t.tensor_type.shape.dim)
    elif static is not None:
        dims_in = [None] * len(static)
    if dims_in is None:
        return None
    shape: list[Dim] = []
    for axis, d in enumerate(dims_in):
        if d is not None and d.HasField("dim_value"):
            shape.append(Dim.const(d.dim_value))
        elif d is not None and d.dim_param in names:
            shape.append(names[d.dim_param])
        else:
            sv = static[axis] if static is not None and axis < len(static) else None
            if sv is None:
                return None
            if not symbolic:
                shape.append(Dim.const(sv))
            else:
                shape.append(ctx.derived(sv, k, axis, f"{ctx.node.op_type} output dim (no rule)"))
    return TensorInfo(shape, dtype)
