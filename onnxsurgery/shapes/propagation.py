"""Symbolic shape propagation with provenance over an ONNX graph.

:func:`propagate` walks a model in topological order and gives every tensor a symbolic shape
(a list of :class:`~onnxsurgery.shapes.dims.Dim`) and, for small integer tensors (shape vectors
and the arithmetic on them), symbolic element values. The chosen input axes carry *symbols*
(``batch``, ``seq``); everything else is derived from them by per-op rules
(:mod:`onnxsurgery.shapes.rules.core`).

Constants are where a statically exported model keeps its traced sizes, so each *use* of a
constant gets fresh unknowns instead of fixed ints:

- ``var`` atoms: the elements of an integer constant read as sizes (a Reshape shape, an Expand
  shape, Slice ends, a Concat piece of a shape vector ...);
- ``data`` atoms: the dims of a constant tensor used as data (a zero initial state
  ``[layers, B, hidden]``, a broadcast mask);
- ``derived`` atoms: dims a rule cannot write in closed form (a Reshape ``-1`` whose known part
  holds unknowns, an op without a rule); ``opaque`` atoms: dims only known at run time (NonZero,
  strided convolution over a symbolic length).

Rules record *constraints*: equalities the graph's structure requires (elementwise operands whose
dims are not 1, MatMul inner dims, Concat's other axes, an RNN's batch, Reshape's element count)
and softer alignment hints. :mod:`onnxsurgery.shapes.solver` unifies them: an unknown becomes
symbolic only when a constraint forces it, never because its value happens to match.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import onnx

from onnxsurgery.errors import PassError
from onnxsurgery.limits import current as current_limits
from onnxsurgery.model.signature import fixed_size
from onnxsurgery.model.walk import default_opset
from onnxsurgery.shapes.analysis import (
    SENTINEL_SIZE,
    UNSIZED,
    Atom,
    BroadcastSite,
    ShapeAnalysis,
    TensorInfo,
    elem_type,
    read_constants,
    static_shapes,
)
from onnxsurgery.shapes.dims import Dim
from onnxsurgery.shapes.rules import run_node

__all__ = ["propagate"]


def propagate(
    model: onnx.ModelProto,
    axes: dict[str, dict[int, str]],
    *,
    bare: onnx.ModelProto | None = None,
    follow: Mapping[BroadcastSite, int] | None = None,
) -> ShapeAnalysis:
    """Propagate symbolic shapes through ``model`` with ``axes`` ({input: {axis: symbol}}).
    ``bare``: ``weightless(model)`` where the caller has made it (ONNX shape inference reads
    it; else it is made here). ``follow``: broadcasts whose operands are all 1 at the traced
    size that follow a given operand (:attr:`~.analysis.ShapeAnalysis.follow`; what
    :func:`~.solver.misfollowed` found in an earlier propagation).

    Raises ValueError for an input or axis that does not exist, or for one symbol given to axes
    of different traced sizes.
    """
    graph = model.graph
    inits = {i.name for i in graph.initializer}
    inputs = {i.name: i for i in graph.input if i.name not in inits}
    analysis = ShapeAnalysis(model=model, symbols={}, opset=default_opset(model, missing=17))
    analysis.static = static_shapes(model, bare)
    analysis.follow = dict(follow or {})
    analysis.consts = read_constants(graph)
    _declare_symbols(analysis, inputs, axes)
    for name, vi in inputs.items():
        analysis.tensors[name] = _input_info(analysis, name, vi, axes.get(name, {}))
    analysis.tensors.update(analysis.consts.infos())
    for index, node in enumerate(graph.node):
        for out in node.output:
            if out:
                analysis.producers[out] = (index, node)
        for k, name in enumerate(node.input):
            if name:
                analysis.consumers.setdefault(name, []).append((index, k, node))
    _run_nodes(analysis, graph)
    return analysis


def _declare_symbols(
    analysis: ShapeAnalysis, inputs: dict[str, onnx.ValueInfoProto], axes: dict[str, dict[int, str]]
) -> None:
    """An atom per symbol of ``axes``, with its traced size; a symbol only on axes that are
    dynamic already gets a sentinel size and is marked dynamic. ValueError for an input or
    axis that does not exist, or one symbol on axes of different traced sizes."""
    sym_traced: dict[str, tuple[int, str]] = {}
    for name, spec in axes.items():
        if name not in inputs:
            raise ValueError(f"no graph input {name!r}; the model's inputs are {', '.join(inputs)}")
        dims = inputs[name].type.tensor_type.shape.dim
        for axis, sym in spec.items():
            rank = len(dims)
            ax = axis + rank if axis < 0 else axis
            if not 0 <= ax < rank:
                raise ValueError(f"input {name!r} has rank {rank}; axis {axis} does not exist")
            traced = fixed_size(dims[ax])
            if traced is None:
                # Already dynamic: no traced size here, so this axis matches no constant.
                analysis.symbols.setdefault(sym, []).append((name, ax))
                if sym not in sym_traced:
                    sym_traced[sym] = (SENTINEL_SIZE + len(sym_traced), "")
                continue
            if sym in sym_traced and sym_traced[sym][1] and sym_traced[sym][0] != traced:
                other = sym_traced[sym][1]
                raise ValueError(
                    f"symbol {sym!r} is given to {other} (traced size {sym_traced[sym][0]}) and to "
                    f"{name}:{ax} (traced size {traced}); axes sharing a name must have the same size"
                )
            sym_traced[sym] = (traced, f"{name}:{ax}")
            analysis.symbols.setdefault(sym, []).append((name, ax))
    for sym, (traced, where) in sym_traced.items():
        analysis.atoms[sym] = Atom(sym, "sym", traced, analysis.symbols[sym])
        if not where:
            analysis.dynamic.add(sym)


def _input_info(
    analysis: ShapeAnalysis, name: str, vi: onnx.ValueInfoProto, axes: dict[int, str]
) -> TensorInfo:
    """Graph input ``name``'s symbolic shape: its symbols on ``axes``, its fixed sizes, and an
    opaque atom for a dim without a size (no shape at all when the input declares none)."""
    spec = {(a + len(vi.type.tensor_type.shape.dim)) if a < 0 else a: s for a, s in axes.items()}
    shape: list[Dim] = []
    known = vi.type.tensor_type.HasField("shape")
    for k, d in enumerate(vi.type.tensor_type.shape.dim):
        if k in spec:
            shape.append(Dim.sym(spec[k]))
        elif (size := fixed_size(d)) is not None:
            shape.append(Dim.const(size))
        else:
            shape.append(analysis.new_atom("opaque", 1, (name, k), UNSIZED))
    return TensorInfo(shape if known else None, elem_type(vi))


def _run_nodes(analysis: ShapeAnalysis, graph: onnx.GraphProto) -> None:
    """Each node's shape rule in graph order (constants read already are skipped), within the
    ``propagate_seconds`` limit."""
    budget = current_limits().propagate_seconds
    deadline = time.monotonic() + budget
    for index, node in enumerate(graph.node):
        if node.op_type == "Constant" and node.output[0] in analysis.consts:
            continue
        if time.monotonic() > deadline:
            raise PassError(
                f"shape propagation stopped at node {index} of {len(graph.node)} ({node.op_type} "
                f"{node.name!r}) after {budget:g} s, {current_limits().hint('propagate_seconds')}"
            )
        run_node(analysis, index, node, "")
