"""Constant indices that enumerate a batch.

At batch 1, ``arange(batch)`` is the constant ``[0]``: an index grid such as HF's
``attention_mask[batch_idx, kv_idx]`` folds into a constant whose batch axis has size 1 and whose
batch component is 0, and it broadcasts against the batch exactly like a mask does. Shapes alone
cannot tell the two apart; the use can. Batch rows are independent, so a constant that feeds the
*indices* of a Gather/GatherND/GatherElements addressing an axis that carries the batch, through
integer arithmetic only, can only be the enumeration of that batch: its size-1 axis is the batch
and its zero components count up along it. :func:`find_batch_indices` finds those constants;
:func:`onnxsurgery.passes.symbolize.plan.plan_symbolize` ties their axis to the batch and rebuilds them
with a ``Range``. Traced at a larger batch, the values show the enumeration themselves (they
count up by the batch's stride along one axis), and only the tie to the batch is missing when
nothing else in the graph makes it (``as_strided`` pooling reading a flat index).
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass

import numpy as np
import onnx

from onnxsurgery.shapes.analysis import ConstUse, ShapeAnalysis
from onnxsurgery.shapes.dims import Dim
from onnxsurgery.shapes.rules import op_traits
from onnxsurgery.shapes.solver import Solution

__all__ = [
    "BatchIndex",
    "addressed",
    "batch_like_symbols",
    "find_batch_indices",
    "index_constants",
    "mixed_batches",
]

#: Ops an index computation may pass through on its way from a constant to a gather.
_INDEX_ARITH = {
    "Add", "Sub", "Mul", "Cast", "Unsqueeze", "Squeeze", "Reshape", "Expand", "Identity",
    "Concat", "Neg", "Flatten",
}  # fmt: skip


@dataclass(frozen=True)
class BatchIndex:
    """A constant read (``use``) whose ``axis`` enumerates ``symbol`` with ``step`` per element."""

    use: ConstUse
    axis: int
    symbol: str
    step: np.ndarray | None  # traced at 1: the step the values cannot show; else None
    gather: str


def batch_like_symbols(analysis: ShapeAnalysis, declared: Set[str] | None = None) -> set[str]:
    """Symbols whose rows are independent (batches): ``declared`` by the user, else found in the
    graph: the one symbol on axis 0 of every input carrying it, provided no node mixes rows
    along an axis it sizes (a recurrence, a contraction, a softmax, a reduction, an arg-max or
    top-k, a cumulative sum) into values: a reduction read only as a size (how many audio
    tokens the batch holds, the length of an Expand) mixes no row's values. Never from a
    symbol's name."""
    if declared is not None:
        return {s for s in declared if s in analysis.symbols and s not in analysis.dynamic}
    first = {s for s, places in analysis.symbols.items() if all(ax == 0 for _, ax in places)}
    first = {s for s in first if _mixed(analysis, s) is None}
    named = first if len(first) == 1 else set()
    return {s for s in named if s not in analysis.dynamic}


def mixed_batches(analysis: ShapeAnalysis, declared: Set[str] | None = None) -> dict[str, str]:
    """The symbol :func:`batch_like_symbols` would take as the batch (axis 0 of every input
    carrying it) but for a node that mixes its rows, with that node: the graph cannot say
    whether its rows are independent. Empty where the user ``declared`` the batches."""
    if declared is not None:
        return {}
    first = {s for s, places in analysis.symbols.items() if all(ax == 0 for _, ax in places)}
    first -= set(analysis.dynamic)
    if len(first) != 1:
        return {}
    sym = next(iter(first))
    node = _mixed(analysis, sym)
    return {} if node is None else {sym: node}


def _mixed(analysis: ShapeAnalysis, sym: str) -> str | None:
    """The first node of the main graph that combines values across an axis whose size holds
    ``sym`` (an axis its op's traits say it mixes rows along) into values (:func:`_sizes_only`),
    or None."""
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in analysis.model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    outputs = {o.name for o in analysis.model.graph.output}
    for node in analysis.model.graph.node:
        if _sizes_only(node, consumers, outputs):
            continue
        first = analysis.tensors.get(_input(node, 0))
        if first is None or first.shape is None:
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        for mix in op_traits(node.domain, node.op_type).mixes_rows:
            info = analysis.tensors.get(_input(node, mix.input))
            if info is None or info.shape is None:
                continue
            const = analysis.consts.get(_input(node, mix.axes_input))
            axes = mix.axes(attrs, len(info.shape), const)
            if any(sym in info.shape[a].atoms() for a in axes):
                return node.name or node.output[0]
    return None


#: Ops a size passes through on its way to the size input of another node.
_SIZE_ARITH = _INDEX_ARITH | {"Div", "Max", "Min", "Gather", "Slice", "Shape"}


def _sizes_only(
    node: onnx.NodeProto, consumers: dict[str, list[onnx.NodeProto]], outputs: Set[str]
) -> bool:
    """Whether every value ``node`` makes ends up as a size input of another node (an Expand's
    shape, a Reshape's), through integer shape arithmetic only: never as data, never as an
    output of the graph."""
    frontier, seen = list(node.output), set()
    while frontier:
        name = frontier.pop()
        if name in outputs:
            return False
        if name in seen:
            continue
        seen.add(name)
        for user in consumers.get(name, []):
            at = [k for k, x in enumerate(user.input) if x == name]
            if all(k in op_traits(user.domain, user.op_type).size_inputs for k in at):
                continue
            if user.op_type not in _SIZE_ARITH:
                return False
            frontier.extend(user.output)
    return bool(seen)


def _input(node: onnx.NodeProto, index: int | None) -> str:
    """The name of input ``index`` of ``node`` ("" where it has none)."""
    return node.input[index] if index is not None and index < len(node.input) else ""


def addressed(
    analysis: ShapeAnalysis, sol: Solution, node: onnx.NodeProto, read: ConstUse | None = None
) -> list[tuple[int, Dim]]:
    """(component, size) of the data axes a gather's (or ScatterND's) indices address (-1: the
    one axis of a Gather or GatherElements); ``read``: the node's data input where it is a
    constant, whose dims are then that read's unknowns (a buffer a ScatterND writes into)."""
    data = analysis.tensors.get(node.input[0])
    idx = analysis.tensors.get(node.input[1]) if len(node.input) > 1 else None
    if data is None or data.shape is None or idx is None or idx.shape is None:
        return []
    shape = list(data.shape)
    if read is not None and read.kind == "data" and len(read.atoms) == len(shape):
        shape = [d if x is None else Dim.sym(x) for d, x in zip(shape, read.atoms, strict=True)]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    rank = len(shape)
    if node.op_type in ("Gather", "GatherElements"):
        axis = attrs.get("axis", 0)
        axis = axis + rank if axis < 0 else axis
        return [(-1, sol.resolve(shape[axis]))]
    if not idx.shape:
        return []
    last = idx.shape[-1].value  # a fixed length, even where a constant read as data sets it
    last = analysis.traced(idx.shape[-1]) if last is None else last
    b = attrs.get("batch_dims", 0)
    return [(c, sol.resolve(shape[b + c])) for c in range(int(last)) if b + c < rank]


def find_batch_indices(
    analysis: ShapeAnalysis, sol: Solution, batch: Set[str] = frozenset()
) -> list[BatchIndex]:
    """Constants that enumerate a symbol of ``batch`` (whose rows are independent; see the
    module docstring)."""
    if not batch:
        return []
    graph = analysis.model.graph
    producers = {o: (i, n) for i, n in enumerate(graph.node) for o in n.output}
    uses = {
        (u.node_index, u.input_index): u for u in analysis.uses if not u.graph and u.kind == "data"
    }
    found: dict[int, BatchIndex] = {}
    for index, node in enumerate(graph.node):
        if node.op_type not in ("Gather", "GatherND", "GatherElements", "ScatterND"):
            continue
        if len(node.input) < 2:
            continue
        for component, dim in addressed(analysis, sol, node, uses.get((index, 0))):
            for sym in sorted(dim.atoms() & batch):
                stride = dim.exact_div(Dim.sym(sym))
                direct = [uses[(index, 1)]] if (index, 1) in uses else []
                for use in direct + index_constants(node.input[1], producers, uses):
                    # A flat index read directly counts in strides of the batch; one that goes
                    # through arithmetic first (``b * seq + pos``) is the batch index itself.
                    step = analysis.traced(stride) if use in direct and stride is not None else 1
                    hit = _enumerating_axis(analysis, sol, use, sym, component, step)
                    if hit is not None and id(use) not in found:
                        found[id(use)] = BatchIndex(use, hit[0], sym, hit[1], node.name)
    return list(found.values())


def index_constants(tensor: str, producers, uses) -> list[ConstUse]:
    out: list[ConstUse] = []
    stack, seen = [tensor], set()
    while stack:
        name = stack.pop()
        if name in seen or name not in producers:
            continue
        seen.add(name)
        index, node = producers[name]
        if node.op_type not in _INDEX_ARITH:
            continue
        for i, inp in enumerate(node.input):
            if (index, i) in uses:
                out.append(uses[(index, i)])
            elif inp:
                stack.append(inp)
    return out


def _enumerating_axis(
    analysis: ShapeAnalysis, sol: Solution, use: ConstUse, sym: str, component: int, step: int
) -> tuple[int, np.ndarray | None] | None:
    """The axis of an index constant that enumerates ``sym``, with its per-element step when the
    values cannot tell (traced at 1), else None (the values carry it, read by the generators)."""
    arr = use.array
    if arr.dtype.kind not in "iu" or arr.ndim == 0:
        return None
    n = analysis.atoms[sym].traced
    last = arr.ndim - 1 if component >= 0 else arr.ndim  # GatherND: the tuple axis is no batch
    for k, atom in enumerate(use.atoms[:last]):
        if atom is None or arr.shape[k] != n:
            continue
        resolved = sol.resolve(Dim.sym(atom))
        if not resolved.is_const() and not (n == 1 and resolved == Dim.sym(sym)):
            # already tied to a symbol; at batch 1, tied to the batch itself by a Concat beside
            # a per-row index (CLIP's [arange(batch), argmax]) it still counts the rows
            return None
        part = arr[..., component] if component >= 0 else arr
        axis_part = k
        if n == 1:  # the batch is the outermost size-1 axis; its index is 0 in every row
            if np.any(part != 0) and component >= 0:
                return None
            if component >= 0:
                vec = np.zeros((1,) * (arr.ndim - 1) + (arr.shape[-1],), dtype=arr.dtype)
                vec[..., component] = 1
                return k, vec
            if np.all(arr == 0) or step > 1:
                return k, np.full((1,) * arr.ndim, step, dtype=arr.dtype)
            return None
        # Traced at n >= 2: the values must count up by the batch's stride along this axis.
        diff = np.diff(part.astype(np.int64), axis=axis_part)
        if diff.size and np.all(diff == step):
            if component >= 0:
                others = [c for c in range(arr.shape[-1]) if c != component]
                if any(np.any(np.diff(arr[..., c], axis=k) != 0) for c in others):
                    return None
            return k, None
    return None
