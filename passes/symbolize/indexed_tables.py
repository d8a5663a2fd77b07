"""A constant index that counts along a symbol, reading a table the trace folded at the traced
size: the index would be rewritten to grow while the table keeps its traced length.

XLNet's relative attention builds a sinusoid table over ``klen + qlen`` positions (``2 * seq``
rows, positions ``seq .. -seq + 1``), multiplies it into the scores, shifts them by Reshapes and
reads ``arange(klen)`` of the result (``index_select``). A static export folds the table into a
constant of ``2 * traced seq`` rows; nothing in the graph ties its length to ``seq``, so the plan
would rewrite the index to ``Range(seq)`` and keep every length the table gives, and at
``seq > 2 * traced seq - 1`` ONNX Runtime fails on the Gather (or, with a smaller count, the model
reads the wrong positions). :class:`IndexedTable` refuses it at the Gather, naming the table:

    Constant table[16, 16] ─ Sin/Cos ─ ... ─ Reshape ─ Gather(indices=arange(8))   traced seq 8
    => blocker at the Gather: its axis stays 15 while the indices would count to seq

It is registered into :data:`~.rules.CONST_RULES` ahead of the rules that rebuild a count.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx

from onnxsurgery.model.dtypes import dtype_name, elem_type_of
from onnxsurgery.model.walk import graphs_by_path
from onnxsurgery.passes.symbolize.blockers import Blocker
from onnxsurgery.passes.symbolize.reads import ConstRead
from onnxsurgery.passes.symbolize.rules import CONST_RULES, BatchIndices, Rule
from onnxsurgery.passes.symbolize.wording import fmt_values, input_symbols, why_text
from onnxsurgery.shapes.dims import Dim

__all__ = ["IndexedTable", "folded_table", "traced_multiple", "upstream_nodes"]


def upstream_nodes(
    graph: onnx.GraphProto, starts: Sequence[onnx.NodeProto]
) -> list[onnx.NodeProto]:
    """``starts`` (nodes of ``graph``) and every node upstream of them, nearest first (breadth
    first over the inputs' producers)."""
    producer = {o: n for n in graph.node for o in n.output if o}
    queue = list(starts)
    seen = {id(n) for n in queue}
    order = []
    while queue:
        n = queue.pop(0)
        order.append(n)
        for x in n.input:
            up = producer.get(x)
            if up is not None and id(up) not in seen:
                seen.add(id(up))
                queue.append(up)
    return order


def traced_multiple(length: int, traced: Mapping[str, int], most: int = 4) -> str | None:
    """``2 x traced seq`` where ``length`` is 1 to ``most`` times a traced size of 2 or more."""
    for sym, v in traced.items():
        for times in range(1, most + 1):
            if v >= 2 and length == times * v:
                return f"traced {sym}" if times == 1 else f"{times} x traced {sym}"
    return None


def folded_table(
    nodes: Sequence[onnx.NodeProto], traced: Mapping[str, int]
) -> tuple[str, np.ndarray, int, str] | None:
    """The first Constant node of ``nodes`` holding a table (float or bool, not a scalar) with
    an axis whose length is a small multiple of a traced size (:func:`traced_multiple`): (its
    output, its array, the axis, the multiple); None where there is none."""
    for node in nodes:
        if node.op_type != "Constant" or not node.attribute or not node.attribute[0].HasField("t"):
            continue
        array = onnx.numpy_helper.to_array(node.attribute[0].t)
        if array.size <= 1 or array.dtype.kind not in "fb":
            continue  # sizes and scalars are read by the plan as sizes, not tables
        for axis, length in enumerate(array.shape):
            hit = traced_multiple(int(length), traced)
            if hit is not None:
                return node.output[0], array, axis, hit
    return None


class IndexedTable(Rule):
    """A Gather's constant index that counts along a symbol (it would become a Range), reading
    an axis that stays fixed, computed from a table folded at a multiple of a traced size."""

    kind = "indexed-table"

    def _found(self, read: ConstRead) -> tuple[int, Dim, tuple[str, np.ndarray, int, str]] | None:
        use, a, sol = read.use, read.context.analysis, read.context.solution
        gen = read.generator
        if use.op != "Gather" or use.input_index != 1 or use.kind != "data" or gen is None:
            return None
        if gen.kind != "affine" or not any(np.any(s != 0) for s in gen.steps.values()):
            return None
        if read.enumerates is not None or not read.symbolic_axes:
            return None
        graph = graphs_by_path(a.model.graph)[use.graph]
        node = graph.node[use.node_index]
        axis = next((int(at.i) for at in node.attribute if at.name == "axis"), 0)
        info = a.tensors.get(node.input[0])
        if info is None or info.shape is None:
            return None
        size = sol.resolve(info.shape[axis % len(info.shape)])
        if not size.is_const():
            return None  # the axis it reads follows the symbols too
        traced = {s: a.atoms[s].traced for s in sorted(input_symbols(a, sol, read.atoms))}
        table = folded_table(upstream_nodes(graph, [node])[1:], traced)
        if table is not None and table[0] == node.input[0] and table[2] != axis % table[1].ndim:
            # the Gather reads the table itself, along another axis than the one that matched
            # (CTRL's positions [256, d_model 32] at seq 8): it holds every row it is read at
            return None
        return None if table is None else (axis, size, table)

    def check(self, read: ConstRead) -> str | None:
        return None if self._found(read) else "it indexes no table folded at a traced length"

    def produce(self, read: ConstRead) -> Blocker:
        found = self._found(read)
        assert found is not None
        axis, size, (tensor, array, table_axis, hit) = found
        a, sol = read.context.analysis, read.context.solution
        syms = input_symbols(a, sol, read.atoms)
        why = why_text(
            self.kind, node=read.use.node, count=", ".join(sorted(syms)), axis=axis, size=size,
            table=tensor, shape=f"{dtype_name(elem_type_of(array))}{fmt_values(list(array.shape))}",
            table_axis=table_axis, length=array.shape[table_axis], hit=hit,
        )  # fmt: skip
        return read.blocker(self.kind, why, read.atoms | syms)


# Before the rules that rebuild a count (the first of them: batch enumerations).
CONST_RULES.insert(
    next(k for k, r in enumerate(CONST_RULES) if isinstance(r, BatchIndices)), IndexedTable()
)
