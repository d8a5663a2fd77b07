"""Shape rules for control flow: the subgraphs of If and Loop, propagated in place. If, Loop and
Scan (no rule) are never folded as a node of constants (:func:`~.core.run_node`).

Outer-scope names are visible inside a subgraph; each subgraph node goes through the same
dispatch (:func:`~onnxsurgery.shapes.rules.core.run_node`) as the main graph's.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx

from onnxsurgery.model.walk import graph_path, subgraph_attrs
from onnxsurgery.shapes.analysis import TensorInfo, read_constants
from onnxsurgery.shapes.rules.core import NodeCtx, fallback, rule, run_node
from onnxsurgery.shapes.rules.traits import traits

__all__: list[str] = []

traits("Scan", foldable=False)


def _run_subgraph(
    ctx: NodeCtx, g: onnx.GraphProto, path: str, inputs: Sequence[TensorInfo | None]
) -> list[TensorInfo | None]:
    consts = read_constants(g)
    for name, info in consts.infos():
        ctx.a.consts[name] = consts[name]
        ctx.a.tensors[name] = info
    for vi, given in zip(g.input, inputs, strict=False):
        if given is not None:
            ctx.a.tensors[vi.name] = given
    for index, node in enumerate(g.node):
        if node.op_type == "Constant" and node.output[0] in consts:
            continue
        run_node(ctx.a, index, node, path)
    return [ctx.a.info(o.name) for o in g.output]


def _graph_attr(node: onnx.NodeProto, name: str) -> onnx.GraphProto | None:
    return dict(subgraph_attrs(node)).get(name)


def _path(ctx: NodeCtx, attr: str) -> str:
    return graph_path(ctx.graph, ctx.node, attr)


def _static_dims(ctx: NodeCtx, k: int) -> list[int] | None:
    """The traced shape of output ``k`` when ONNX inference gave every dim of it, else None."""
    static = ctx.static_shape(k)
    dims = [s for s in static or () if s is not None]
    return dims if static is not None and len(dims) == len(static) else None


@rule("If", foldable=False)
def _if(ctx: NodeCtx):
    then_g, else_g = _graph_attr(ctx.node, "then_branch"), _graph_attr(ctx.node, "else_branch")
    if then_g is None or else_g is None:
        return fallback(ctx)
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
            static = _static_dims(ctx, k)
            if static is None:
                outs.append(None)
                continue
            shape = [ctx.derived(s, k, a, "If branches disagree") for a, s in enumerate(static)]
            outs.append(TensorInfo(shape, t.dtype if t else 0))
            continue
        outs.append(pick)
    return outs


@rule("Loop", foldable=False)
def _loop(ctx: NodeCtx):
    body = _graph_attr(ctx.node, "body")
    if body is None:
        return fallback(ctx)
    n_carried = len(ctx.node.input) - 2
    trip = ctx.value(0, size=True) if ctx.has(0) else None
    iter_info = TensorInfo([], onnx.TensorProto.INT64, None)
    cond_info = TensorInfo([], onnx.TensorProto.BOOL, None)
    carried = [ctx.info(2 + i, "data") for i in range(n_carried)]
    body_out = _run_subgraph(ctx, body, _path(ctx, "body"), [iter_info, cond_info, *carried])
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
            static = _static_dims(ctx, i)
            if static is None:
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
                )
    for j, scan in enumerate(body_out[1 + n_carried :]):
        k = n_carried + j
        traced = ctx.static_shape(k)
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
                traced[0] if traced and traced[0] is not None else 0, k, 0, note="Loop iteration count"
            )
        if scan is None or scan.shape is None:
            outs.append(None)
        else:
            outs.append(TensorInfo([count] + list(scan.shape), scan.dtype))
    return outs
