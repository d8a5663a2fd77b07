"""Remove dead nodes and unused inputs/initializers, then sort the graph topologically."""

from __future__ import annotations

import onnx
import onnx_graphsurgeon as gs

from onnxsurgery.model.io import adopt_graph, restore_weights, weightless
from onnxsurgery.model.walk import subgraphs
from onnxsurgery.pipeline.contract import Diagnostic, Pass, PassContext, PassResult

__all__ = ["Cleanup"]


class Cleanup(Pass):
    """Remove dead nodes and unused inputs/initializers; sort nodes topologically.

    Rules (onnx-graphsurgeon's ``cleanup`` and ``toposort``):
    - a node none of whose outputs reaches a graph output is removed, in subgraphs too;
    - an initializer no node reads is removed;
    - a graph input no node reads is removed (``inputs=false`` keeps the signature as it is);
    - nodes are put in topological order.

        x ─ Relu ─ y            x ─ Relu ─ y
          └ Neg ─ (unused)  =>
    """

    name = "cleanup"

    def __init__(self, *, inputs: bool = True) -> None:
        super().__init__(inputs=inputs)
        if not isinstance(inputs, bool):
            raise ValueError(f"inputs must be true or false, got {inputs!r}")
        self.inputs = inputs

    def run(self, model: onnx.ModelProto, ctx: PassContext) -> PassResult:
        # graphsurgeon works on a weightless copy (its export copies every tensor it is given);
        # the kept weights are put back from ``model`` afterwards, each copied once.
        bare = weightless(model)
        graph = gs.import_onnx(bare)
        graph.cleanup(remove_unused_graph_inputs=self.inputs, recurse_subgraphs=True)
        unsorted = not _is_sorted(model.graph)
        if unsorted:
            graph.toposort(recurse_subgraphs=True)
        cleaned = gs.export_onnx(graph, do_type_check=False)
        del graph, bare

        before_nodes = [n.name or n.output[0] for n in model.graph.node]
        after_nodes = [n.name or n.output[0] for n in cleaned.graph.node]
        removed_nodes = len(model.graph.node) - len(cleaned.graph.node)
        removed_inits = sorted(
            {i.name for i in model.graph.initializer} - {i.name for i in cleaned.graph.initializer}
        )
        removed_inputs = [
            i.name for i in model.graph.input if i.name not in {j.name for j in cleaned.graph.input}
        ]
        reordered = unsorted and before_nodes != after_nodes
        if not (removed_nodes or removed_inits or removed_inputs or reordered):
            return PassResult(model, modified=False, diagnostics=[Diagnostic.info("nothing to clean")])

        # Keep every model-level field (opsets, metadata, producer) and take only the graph.
        out = adopt_graph(model, restore_weights(cleaned, model))
        diagnostics = []
        if removed_nodes:
            diagnostics.append(Diagnostic.info(f"removed {removed_nodes} dead node(s)"))
        if removed_inits:
            diagnostics.append(
                Diagnostic.info(f"removed {len(removed_inits)} unused initializer(s)")
            )
        if removed_inputs:
            diagnostics.append(Diagnostic.info(f"removed unused input(s) {', '.join(removed_inputs)}"))
        if reordered:
            diagnostics.append(Diagnostic.info("sorted nodes topologically"))
        return PassResult(out, modified=True, diagnostics=diagnostics)


def _is_sorted(graph: onnx.GraphProto, outer: frozenset[str] = frozenset()) -> bool:
    """Whether every node reads only values defined before it (subgraphs included)."""
    known = set(outer) | {i.name for i in graph.input} | {i.name for i in graph.initializer}
    known.add("")
    for node in graph.node:
        if any(name not in known for name in node.input):
            return False
        if any(not _is_sorted(sub, frozenset(known)) for sub in subgraphs(node)):
            return False
        known.update(node.output)
    return True
