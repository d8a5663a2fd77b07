"""Apply a :class:`~onnxsurgery.passes.symbolize.plan.SymbolizePlan`: constants become shape computations.

Each symbol is read once from the input that carries it (``Shape(x, start=0, end=1)``, or
``Shape -> Gather`` before opset 15) into a node named ``symbolize/<symbol>``; expressions are
built from those with ``Mul``/``Add`` and shared by name, so the same plan always gives the same
bytes. A size constant becomes the simplest vector that is right at every size: a Reshape shape
uses ``0`` (copy the input's dim) and ``-1`` where it can, an Expand shape uses ``1`` where the
input already has the dim, and only what is left is computed and concatenated. A data constant
whose dims carry a symbol is rebuilt from a smaller constant plus ``Expand`` (or from ``Range``
when it counts along the axis), and the ``Expand`` is skipped where the consuming op broadcasts it
anyway. Then the chosen input axes get their ``dim_param``, output dims are set from the
propagated shapes (cleared where they are not expressible in the symbols), stale intermediate
``value_info`` is dropped, orphaned constants are removed and the graph is sorted topologically.
"""

from __future__ import annotations

import re

import numpy as np
import onnx
from numpy.typing import DTypeLike
from onnx import helper, numpy_helper

from onnxsurgery.model.dtypes import elem_type_of
from onnxsurgery.model.io import sync_initializer_inputs
from onnxsurgery.model.walk import graphs_by_path
from onnxsurgery.passes.symbolize.generators import Generator
from onnxsurgery.passes.symbolize.graph_edits import drop_value_info, remove_orphans, toposort_graph
from onnxsurgery.passes.symbolize.plan import Change, SymbolizePlan
from onnxsurgery.shapes.dims import Dim, const_ints
from onnxsurgery.shapes.rules import op_traits

__all__ = [
    "apply_plan",
    "safe_name",
]


def safe_name(text: str) -> str:
    text = text.replace(" + ", "+").replace(" - ", "-").replace(" ", "")
    return re.sub(r"[^A-Za-z0-9_+\-*.,\[\]/]", "_", text)


class _Rewriter:
    def __init__(self, model: onnx.ModelProto, plan: SymbolizePlan) -> None:
        self.m = model
        self.plan = plan
        self.a = plan.analysis
        self.opset = self.a.opset
        self.nodes: list[onnx.NodeProto] = []
        self.inits: dict[str, onnx.TensorProto] = {}
        self.cache: dict[str, str] = {}
        self.graphs = graphs_by_path(model.graph)

    # -- emitting ----------------------------------------------------------------------------
    def node(self, op: str, inputs: list[str], name: str, **attrs) -> str:
        if name in self.cache:
            return self.cache[name]
        self.nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        self.cache[name] = name
        return name

    def const(self, values: list[int], scalar: bool = False, dtype=np.int64) -> str:
        text = ",".join(str(v) for v in values)
        name = (
            f"symbolize/const[{text}]"
            + ("s" if scalar else "")
            + ("" if dtype == np.int64 else str(np.dtype(dtype)))
        )
        if name not in self.inits:
            arr = np.array(values[0] if scalar else values, dtype=dtype)
            self.inits[name] = numpy_helper.from_array(arr, name)
        return name

    def shape_dim(self, tensor: str, axis: int, name: str) -> str:
        if self.opset >= 15:
            return self.node("Shape", [tensor], name, start=axis, end=axis + 1)
        shape = self.node("Shape", [tensor], f"symbolize/{tensor}/shape")
        return self.node("Gather", [shape, self.const([axis])], name, axis=0)

    def atom(self, atom: str) -> str:
        info = self.a.atoms[atom]
        if info.kind == "sym":
            tensor, axis = self.a.symbols[atom][0]
            return self.shape_dim(tensor, axis, f"symbolize/{atom}")
        origin = info.origin
        runtime = info.kind == "opaque" or atom in self.plan.solution.opaque
        if runtime and isinstance(origin, tuple) and origin and origin[0] == "dim" and origin[1]:
            return self.shape_dim(origin[1], origin[2], f"symbolize/{origin[1]}/dim{origin[2]}")
        if runtime and isinstance(origin, tuple) and origin and origin[0] == "value" and origin[1]:
            flat = self.node(
                "Reshape", [origin[1], self.const([-1])], f"symbolize/{origin[1]}/flat"
            )
            got = self.node(
                "Gather",
                [flat, self.const([origin[2]])],
                f"symbolize/{origin[1]}/value{origin[2]}",
                axis=0,
            )
            return self.node(
                "Cast",
                [got],
                f"symbolize/{origin[1]}/value{origin[2]}/i64",
                to=onnx.TensorProto.INT64,
            )
        raise ValueError(f"cannot compute {atom} ({info.kind}, {info.note}) at run time")

    def expr(self, d: Dim) -> str:
        """A 1-D int64 tensor of one element holding ``d``."""
        if d.value is not None:
            return self.const([int(d.value)])
        key = f"symbolize/{safe_name(str(d))}"
        if key in self.cache:
            return self.cache[key]
        terms = []
        for mono, coef in sorted(d.terms.items(), key=lambda t: (-len(t[0]), t[0])):
            if not mono:
                terms.append(self.const([coef]))
                continue
            prod = self.atom(mono[0])
            for k in range(1, len(mono)):
                sub = Dim({mono[: k + 1]: 1})
                prod = self.node(
                    "Mul", [prod, self.atom(mono[k])], f"symbolize/{safe_name(str(sub))}"
                )
            if coef != 1:
                prod = self.node(
                    "Mul",
                    [prod, self.const([coef])],
                    f"symbolize/{safe_name(str(Dim({mono: coef})))}",
                )
            terms.append(prod)
        acc = terms[0]
        for k, t in enumerate(terms[1:], start=1):
            name = key if k == len(terms) - 1 else f"{key}/part{k}"
            acc = self.node("Add", [acc, t], name)
        self.cache[key] = acc
        return acc

    def vector(self, values: list[Dim]) -> str:
        """A 1-D int64 tensor with the given elements: constant runs plus computed pieces."""
        ints = const_ints(values)
        if ints is not None:
            return self.const(ints)
        pieces: list[str] = []
        run: list[int] = []
        for v in values:
            if v.value is not None:
                run.append(int(v.value))
                continue
            if run:
                pieces.append(self.const(run))
                run = []
            pieces.append(self.expr(v))
        if run:
            pieces.append(self.const(run))
        if len(pieces) == 1:
            return pieces[0]
        name = "symbolize/shape[" + ",".join(safe_name(str(v)) for v in values) + "]"
        return self.node("Concat", pieces, name, axis=0)

    # -- per change --------------------------------------------------------------------------
    def resolved_shape(self, tensor: str) -> list[Dim] | None:
        info = self.a.tensors.get(tensor)
        if info is None or info.shape is None:
            return None
        return [self.plan.solution.resolve(d) for d in info.shape]

    def size_change(self, change: Change, node: onnx.NodeProto) -> str:
        values = list(change.values)
        use = change.use
        if change.op == "Reshape" and change.input_index == 1:
            values = self.simplify_reshape(node, values, use.array)
        elif change.op == "Expand" and change.input_index == 1:
            src = self.resolved_shape(node.input[0])
            if src is not None:
                off = len(values) - len(src)
                values = [
                    Dim.const(1)
                    if 0 <= k - off < len(src) and not v.is_const() and src[k - off] == v
                    else v
                    for k, v in enumerate(values)
                ]
        vec = self.vector(values)
        tag = f"symbolize/{node.name or node.output[0]}/in{change.input_index}"
        if change.guard:
            vec = self.guarded(vec, change.guard, tag)
        if use.array.ndim == 0:
            vec = self.node("Reshape", [vec, self.const([])], f"{tag}/scalar")
        if use.array.dtype != np.int64:
            vec = self.node("Cast", [vec], f"{tag}/cast", to=elem_type_of(use.array))
        return vec

    def guarded(self, vec: str, bounds: dict[str, int], tag: str) -> str:
        """``vec`` plus, per bounded symbol, a Gather of it from ``bound + 1`` zeros: the same
        values within the bounds, and ONNX Runtime fails there, naming the bound, where a size is
        over one (:attr:`~.reads.Change.guard`)."""
        for sym, bound in sorted(bounds.items()):
            zeros = self.initializer(f"symbolize/{sym}<={bound}/zeros", np.zeros(bound + 1, np.int64))
            name = f"symbolize: {sym}<={bound} (a size over the bound fails here)/{sym}"
            zero = self.node("Gather", [zeros, self.atom(sym)], name, axis=0)
            vec = self.node("Add", [vec, zero], f"{tag}/within/{sym}")
        return vec

    def unfold(self, node: onnx.NodeProto, ext: int) -> None:
        """MatMul ``node``'s B viewed with A's ``ext`` leading batch dims unfolded from its
        first dim (``[B*H, K, N] -> [B, H, K, N]``, :func:`~.plan.plan_symbolize`'s
        ``unfolded``), so that A's batch dims meet B's one to one."""
        a, b = self.resolved_shape(node.input[0]), self.resolved_shape(node.input[1])
        if a is None or b is None:
            raise ValueError(f"MatMul {node.name!r}: no shape to unfold its second input by")
        target = self.vector(a[:ext] + [Dim.const(-1)] + b[1:])
        name = f"symbolize/{node.name or node.output[0]}/in1/unfolded"
        node.input[1] = self.node("Reshape", [node.input[1], target], name)

    def simplify_reshape(
        self, node: onnx.NodeProto, values: list[Dim], original: np.ndarray
    ) -> list[Dim]:
        src = self.resolved_shape(node.input[0])
        allowzero = next((a.i for a in node.attribute if a.name == "allowzero"), 0)
        literal_zero = allowzero and any(int(v) == 0 for v in original.reshape(-1))
        out = list(values)
        if src is not None and not literal_zero:
            for k, v in enumerate(out):
                if k < len(src) and not v.is_const() and src[k] == v:
                    out[k] = Dim.const(0)
            if allowzero and any(v.value == 0 for v in out):
                for attr in node.attribute:
                    if attr.name == "allowzero":
                        attr.i = 0
        symbolic = [k for k, v in enumerate(out) if not v.is_const()]
        if len(symbolic) == 1 and not any(v.value == -1 for v in out):
            out[symbolic[0]] = Dim.const(-1)
        return out

    def initializer(self, name: str, arr: np.ndarray) -> str:
        if name not in self.inits:
            self.inits[name] = numpy_helper.from_array(np.ascontiguousarray(arr), name)
        return name

    def index(self, n: Dim, axis: int, rank: int, dtype: DTypeLike) -> str:
        """``arange(n)`` laid along ``axis`` of a rank-``rank`` tensor, in ``dtype``."""
        key = f"symbolize/arange[{safe_name(str(n))}]"
        limit = self.node("Reshape", [self.expr(n), self.const([])], f"{key}/limit")
        rng = self.node(
            "Range", [self.const([0], scalar=True), limit, self.const([1], scalar=True)], key
        )
        shape = [-1 if i == axis else 1 for i in range(rank)]
        out = self.node("Reshape", [rng, self.const(shape)], f"{key}/axis{axis}of{rank}")
        if np.dtype(dtype) != np.int64:
            to = elem_type_of(np.dtype(dtype))
            out = self.node("Cast", [out], f"{key}/axis{axis}of{rank}/{np.dtype(dtype)}", to=to)
        return out

    def data_change(self, change: Change, node: onnx.NodeProto) -> str:
        """The constant ``change`` reads, rebuilt by its generator's kind (one emitter each),
        then expanded to its symbolic dims where the consumer does not broadcast it anyway."""
        gen = change.rebuild
        assert gen is not None  # a data change says how to rebuild the constant
        dims = list(change.values)
        tag = f"symbolize/{change.use.tensor}[{','.join(safe_name(str(v)) for v in dims)}]"
        acc, full = self.EMITTERS[gen.kind](self, gen, change.use.array, dims, tag)
        if change.use.array.ndim == 0:  # a scalar stays one (a start moved with a cache)
            return self.node("Reshape", [acc, self.const([])], f"{tag}/scalar")
        rank = len(dims)
        missing = [
            k
            for k in range(rank)
            if k not in full and k not in gen.axes and change.use.array.shape[k] != 1
        ]
        uniform = [k for k in gen.axes if k not in full]
        if not missing and (not uniform or self.broadcast_covers(change, node, uniform)):
            return acc
        target = self.vector(dims)
        return self.node(
            "Expand", [acc, target], f"{tag}/{safe_name(node.name or node.output[0])}/expand"
        )

    def affine(
        self, gen: Generator, arr: np.ndarray, dims: list[Dim], tag: str
    ) -> tuple[str, set[int]]:
        """``base + sum_k step_k * arange`` (a start that moves with a cache: ``offset``); the
        base spans every axis but the counting ones."""
        acc = self.initializer(f"{tag}/base", gen.base_array)
        if gen.offset is not None:
            acc = self.moved_start(gen, arr, tag)
        full = {k for k in range(arr.ndim) if k not in gen.axes}
        for k in gen.axes:
            step = gen.steps[k]
            if not np.any(step != 0) and k not in gen.strides:
                continue
            term = self.index(dims[k], k, arr.ndim, arr.dtype)
            if k in gen.strides:
                term = self.node("Mul", [term, self.stride(gen.strides[k], arr)], f"{tag}/term{k}")
            elif not (step.size == 1 and step.reshape(-1)[0] == 1):
                term = self.node(
                    "Mul", [term, self.initializer(f"{tag}/step{k}", step)], f"{tag}/term{k}"
                )
            acc = self.node("Add", [acc, term], f"{tag}/sum{k}")
            full.add(k)
        return acc, full

    def stride(self, d: Dim, arr: np.ndarray) -> str:
        """``d`` as a one-element tensor of ``arr``'s element type (a row-major stride)."""
        out = self.expr(d)
        if arr.dtype != np.int64:
            tag = f"symbolize/{safe_name(str(d))}/{arr.dtype}"
            out = self.node("Cast", [out], tag, to=elem_type_of(arr))
        return out

    def moved_start(self, gen: Generator, arr: np.ndarray, tag: str) -> str:
        """An affine base whose start moves with a cache length: ``base - traced + it``."""
        assert gen.offset is not None
        where, size, traced = gen.offset
        start = self.expr(size)
        if arr.dtype != np.int64:
            start = self.node("Cast", [start], f"{tag}/start", to=elem_type_of(arr))
        step = np.ones((), dtype=arr.dtype)
        if where == "scaled":  # (past + i) * step: the start is past steps
            step = next(st for st in gen.steps.values() if np.any(st != 0))
            start = self.node(
                "Mul", [start, self.initializer(f"{tag}/startstep", step)], f"{tag}/startx"
            )
        rest = (gen.base_array - traced * step).astype(arr.dtype)
        return self.node("Add", [self.initializer(f"{tag}/rest", rest), start], f"{tag}/from")

    def tile(
        self, gen: Generator, arr: np.ndarray, dims: list[Dim], tag: str
    ) -> tuple[str, set[int]]:
        """One block repeated along its axis (``batch*heads``)."""
        k = gen.axes[0]
        block = gen.base_array.shape[k]
        base = self.initializer(f"{tag}/block", gen.base_array)
        reps = [Dim.const(1)] * arr.ndim
        reps[k] = dims[k].exact_div(block) or dims[k]
        return self.node("Tile", [base, self.vector(reps)], f"{tag}/tile"), set(range(arr.ndim))

    def trig(
        self, gen: Generator, arr: np.ndarray, dims: list[Dim], tag: str
    ) -> tuple[str, set[int]]:
        """``amp * cos(pos * freq)`` / ``sin`` (plus a phase per column, ``shift``), positions
        from a cache length where it moves; the frequencies span every other axis."""
        k = gen.axes[0]
        pos = self.index(dims[k], k, arr.ndim, np.float32)
        if gen.offset is not None:  # positions start .. start + n - 1, start a cache length
            f32 = elem_type_of(np.dtype(np.float32))
            start = self.expr(gen.offset[1])
            start = self.node("Cast", [start], f"{tag}/start", to=f32)
            pos = self.node("Add", [pos, start], f"{tag}/pos")
        angle = self.node(
            "Mul", [pos, self.initializer(f"{tag}/freq", gen.steps[k])], f"{tag}/angle"
        )
        if gen.shift is not None:  # a phase per column (cos columns, a fixed start)
            shift = self.initializer(f"{tag}/shift", gen.shift)
            angle = self.node("Add", [angle, shift], f"{tag}/shifted")
        acc = self.node(gen.kind.capitalize(), [angle], f"{tag}/{gen.kind}")
        if gen.amp is not None and not np.all(gen.amp == 1):
            acc = self.node(
                "Mul",
                [acc, self.initializer(f"{tag}/amp", gen.amp.astype(np.float32))],
                f"{tag}/scaled",
            )
        if arr.dtype != np.float32:
            acc = self.node("Cast", [acc], f"{tag}/cast", to=elem_type_of(arr))
        # axes after the positions hold one row (a batch traced at 1): expanded over them
        return acc, set(range(arr.ndim)) - set(gen.axes[1:])

    def band(
        self, gen: Generator, arr: np.ndarray, dims: list[Dim], tag: str
    ) -> tuple[str, set[int]]:
        """Two values split by ``lo <= j - i <= hi`` (bounds that may move with a cache)."""
        assert gen.band is not None
        i_ax, j_ax, _, _, inside, outside = gen.band
        rank = arr.ndim
        diff = self.node(
            "Sub",
            [
                self.index(dims[j_ax], j_ax, rank, np.int64),
                self.index(dims[i_ax], i_ax, rank, np.int64),
            ],
            f"{tag}/diff",
        )
        conds = []
        for op, bound, side in zip(
            ("GreaterOrEqual", "LessOrEqual"), gen.band_bounds(), ("lo", "hi"), strict=True
        ):
            if bound is None:
                continue
            value = self.expr(bound) if isinstance(bound, Dim) else self.const([bound], scalar=True)
            conds.append(self.node(op, [diff, value], f"{tag}/{side}"))
        cond = conds[0] if len(conds) == 1 else self.node("And", conds, f"{tag}/cond")
        if arr.dtype == np.bool_ and bool(inside) and not bool(outside):
            acc = cond
        elif arr.dtype == np.bool_ and not bool(inside) and bool(outside):
            acc = self.node("Not", [cond], f"{tag}/not")
        else:
            va = self.initializer(f"{tag}/a", np.array(inside, dtype=arr.dtype))
            vb = self.initializer(f"{tag}/b", np.array(outside, dtype=arr.dtype))
            acc = self.node("Where", [cond, va, vb], f"{tag}/where")
        return acc, {i_ax, j_ax}

    def prefix(
        self, gen: Generator, arr: np.ndarray, dims: list[Dim], tag: str
    ) -> tuple[str, set[int]]:
        """The traced table's first entries along its axes (bounded symbols,
        :class:`~.rules.BoundedTable`): a Gather of ``arange(size)`` per axis, which ONNX Runtime
        fails, naming the bound, where a size is over it (a Slice would stop at the table's end
        and a Reshape after it can be optimized away)."""
        acc = self.initializer(f"{tag}/table", gen.base_array)
        for k in gen.axes:
            name = f"symbolize: {gen.bound} (a size over the bound fails here)/{tag}/axis{k}"
            rows = self.index(dims[k], 0, 1, np.int64)
            if k in gen.blocks:  # arange(size) from the start of each block, side by side
                n = gen.blocks[k]
                size = dims[k].exact_div(n)
                assert size is not None  # the rule took n*seq only
                starts = np.arange(n, dtype=np.int64).reshape(n, 1) * (arr.shape[k] // n)
                rows = self.node(
                    "Add",
                    [self.index(size, 1, 2, np.int64), self.initializer(f"{tag}/blocks{k}", starts)],
                    f"{tag}/blocks{k}/rows",
                )
                rows = self.node("Reshape", [rows, self.const([-1])], f"{tag}/blocks{k}/flat")
            acc = self.node("Gather", [acc, rows], name, axis=k)
        if gen.steps:  # axes of batch*c repeating one block of c: tiled over the batch
            reps = [Dim.const(1)] * arr.ndim
            for k, block in gen.steps.items():
                count = dims[k].exact_div(int(block))
                assert count is not None  # the rule took batch*c only
                reps[k] = count
            acc = self.node("Tile", [acc, self.vector(reps)], f"{tag}/tile")
        return acc, set(range(arr.ndim))

    #: How each generator kind is emitted (:mod:`.generators`): "cos" and "sin" by ``trig``.
    EMITTERS = {
        "affine": affine, "tile": tile, "cos": trig, "sin": trig, "band": band, "prefix": prefix,
    }  # fmt: skip

    def broadcast_covers(self, change: Change, node: onnx.NodeProto, axes: list[int]) -> bool:
        """True when the consumer broadcasts a 1 on ``axes`` to the symbolic dims anyway."""
        if not op_traits(node.domain, node.op_type).broadcasts:
            return False
        out = self.resolved_shape(node.output[0])
        if out is None:
            return False
        rank = len(change.values)
        for axis in axes:
            d = change.values[axis]
            k = len(out) - rank + axis
            if k < 0 or out[k] != d:
                return False
            found = False
            for i, name in enumerate(node.input):
                if i == change.input_index or not name or name in self.a.consts:
                    continue
                shape = self.resolved_shape(name)
                if shape is None:
                    continue
                j = len(shape) - rank + axis
                if node.op_type == "Expand" and i == 1:
                    vals = self.a.tensors[name].value
                    if vals is not None:
                        v = (
                            self.plan.solution.resolve(vals[len(vals) - rank + axis])
                            if len(vals) - rank + axis >= 0
                            else None
                        )
                        found = found or v == d
                    continue
                if 0 <= j < len(shape) and shape[j] == d:
                    found = True
            if not found:
                return False
        return True

    # -- whole model -------------------------------------------------------------------------
    def run(self) -> None:
        replaced: set[str] = set()
        for change in self.plan.changes:
            graph = self.graphs[change.graph]
            node = graph.node[change.use.node_index]
            if change.kind == "size":
                new = self.size_change(change, node)
            else:
                new = self.data_change(change, node)
            replaced.add(node.input[change.input_index])
            node.input[change.input_index] = new
        for index, ext in sorted(self.plan.unfolded.items()):
            self.unfold(self.graphs[""].node[index], ext)
        g = self.m.graph
        for init in sorted(self.inits.values(), key=lambda t: t.name):
            g.initializer.append(init)
        nodes = self.nodes + list(g.node)
        del g.node[:]
        g.node.extend(
            toposort_graph(nodes, {i.name for i in g.input} | {i.name for i in g.initializer})
        )
        remove_orphans(self.m, replaced)
        sync_initializer_inputs(self.m)  # IR < 4: the constants added are graph inputs too
        self.graphs = graphs_by_path(self.m.graph)  # the node list was rebuilt: fresh handles
        self.set_io()

    def set_io(self) -> None:
        g = self.m.graph
        for vi in g.input:
            for axis, sym in self.plan.axes.get(vi.name, {}).items():
                dims = vi.type.tensor_type.shape.dim
                ax = axis + len(dims) if axis < 0 else axis
                dims[ax].Clear()
                dims[ax].dim_param = sym
        for vi in g.output:
            _set_dims(vi, self.plan.outputs.get(vi.name))
        # Subgraph outputs (If branches, Loop bodies) declare shapes too: follow the symbols.
        for path, sub in self.graphs.items():
            if path:
                for vi in sub.output:
                    _set_dims(vi, self.symbolic_dims(vi.name))
        drop_value_info(g)

    def symbolic_dims(self, tensor: str) -> list[str | int | None] | None:
        shape = self.resolved_shape(tensor)
        if shape is None:
            return None
        out: list[str | int | None] = []
        for d in shape:
            if d.value is not None:
                out.append(int(d.value))
            elif all(x in self.a.symbols for x in d.atoms()):
                out.append(str(d))
            else:
                out.append(None)
        return out


def _set_dims(vi: onnx.ValueInfoProto, dims_out: list[str | int | None] | None) -> None:
    """Write ``dims_out`` into a value info: ints, symbol expressions, None clears the dim."""
    if not vi.type.HasField("tensor_type"):
        return
    shape = vi.type.tensor_type.shape
    if dims_out is None:
        for d in shape.dim:
            d.Clear()
        return
    if len(dims_out) != len(shape.dim):
        del shape.dim[:]
        for _ in dims_out:
            shape.dim.add()
    for d, new in zip(shape.dim, dims_out, strict=True):
        d.Clear()
        if isinstance(new, int):
            d.dim_value = new
        elif isinstance(new, str):
            d.dim_param = new


def apply_plan(model: onnx.ModelProto, plan: SymbolizePlan) -> onnx.ModelProto:
    """A copy of ``model`` with ``plan``'s changes applied (blockers are not checked here)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    _Rewriter(out, plan).run()
    return out
