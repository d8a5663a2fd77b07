"""Constant indices that enumerate a batch traced at size 1.

At batch 1, ``arange(batch)`` is the constant ``[0]``: an index grid such as HF's
``attention_mask[batch_idx, kv_idx]`` folds into a constant whose batch axis has size 1 and whose
batch component is 0, and it broadcasts against the batch exactly like a mask does. Shapes alone
cannot tell the two apart; the use can. Batch rows are independent, so a constant that feeds the
*indices* of a Gather/GatherND/GatherElements addressing an axis that carries the batch, through
integer arithmetic only, can only be the enumeration of that batch: its size-1 axis is the batch
and its zero components count up along it. :func:`find_batch_indices` finds those constants;
:func:`onnxsurgery.symbolize_plan.plan_symbolize` ties their axis to the batch and rebuilds them
with a ``Range``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from onnxsurgery.dim_algebra import Dim
from onnxsurgery.shape_propagation import ConstUse, ShapeAnalysis
from onnxsurgery.shape_solver import Solution

__all__ = ["BatchIndex", "batch_like_symbols", "find_batch_indices"]

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
    step: np.ndarray
    gather: str


def batch_like_symbols(analysis: ShapeAnalysis) -> set[str]:
    """Symbols whose rows are independent and that were traced at 1: ``batch`` by name, else the
    symbol on axis 0 of every input that has one."""
    named = {s for s in analysis.symbols if "batch" in s.lower()}
    if not named:
        first = {s for s, places in analysis.symbols.items() if all(ax == 0 for _, ax in places)}
        named = first if len(first) == 1 else set()
    return {s for s in named if analysis.atoms[s].traced == 1}


def _addressed(
    analysis: ShapeAnalysis, sol: Solution, node: onnx.NodeProto
) -> list[tuple[int, set[str]]]:
    """(component, symbols) of the data axes a gather's indices address."""
    data = analysis.tensors.get(node.input[0])
    idx = analysis.tensors.get(node.input[1]) if len(node.input) > 1 else None
    if data is None or data.shape is None or idx is None or idx.shape is None:
        return []
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    rank = len(data.shape)
    if node.op_type in ("Gather", "GatherElements"):
        axis = attrs.get("axis", 0)
        axis = axis + rank if axis < 0 else axis
        return [(-1, sol.resolve(data.shape[axis]).atoms())]
    last = idx.shape[-1].value if idx.shape else None
    if last is None:
        return []
    b = attrs.get("batch_dims", 0)
    return [(c, sol.resolve(data.shape[b + c]).atoms()) for c in range(int(last)) if b + c < rank]


def find_batch_indices(analysis: ShapeAnalysis, sol: Solution) -> list[BatchIndex]:
    """Constants that enumerate a batch-like symbol traced at 1 (see the module docstring)."""
    batch = batch_like_symbols(analysis)
    if not batch:
        return []
    graph = analysis.model.graph
    producers = {o: (i, n) for i, n in enumerate(graph.node) for o in n.output}
    uses = {
        (u.node_index, u.input_index): u for u in analysis.uses if not u.graph and u.kind == "data"
    }
    found: dict[int, BatchIndex] = {}
    for index, node in enumerate(graph.node):
        if node.op_type not in ("Gather", "GatherND", "GatherElements") or len(node.input) < 2:
            continue
        for component, atoms in _addressed(analysis, sol, node):
            for sym in sorted(atoms & batch):
                direct = [uses[(index, 1)]] if (index, 1) in uses else []
                for use in direct + _index_constants(node.input[1], producers, uses):
                    hit = _enumerating_axis(analysis, sol, use, sym, component)
                    if hit is not None and id(use) not in found:
                        found[id(use)] = BatchIndex(use, hit[0], sym, hit[1], node.name)
    return list(found.values())


def _index_constants(tensor: str, producers, uses) -> list[ConstUse]:
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
    analysis: ShapeAnalysis, sol: Solution, use: ConstUse, sym: str, component: int
) -> tuple[int, np.ndarray] | None:
    arr = use.array
    if arr.dtype.kind not in "iu" or arr.ndim == 0:
        return None
    # The batch is the outermost axis: the first size-1 axis (not the index tuple's own axis).
    for k, atom in enumerate(use.atoms):
        if atom is None or arr.shape[k] != 1 or sol.resolve(Dim.sym(atom)).value != 1:
            continue
        if component >= 0:  # GatherND: the component addressing the batch counts up
            if arr.shape[-1] <= component or k == arr.ndim - 1:
                continue
            part = arr[..., component]
            if np.any(part != 0):
                return None
            step = np.zeros((1,) * (arr.ndim - 1) + (arr.shape[-1],), dtype=arr.dtype)
            step[..., component] = 1
            return k, step
        if np.all(arr == 0):  # a flat index b*stride + ...: the b term itself
            return k, np.ones((1,) * arr.ndim, dtype=arr.dtype)
        return None
    return None
