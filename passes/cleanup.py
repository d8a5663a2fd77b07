"""Remove dead nodes and unused inputs/initializers, then sort the graph topologically.

Rules (onnx-graphsurgeon's ``cleanup`` and ``toposort``):
- a node none of whose outputs reaches a graph output is removed, in subgraphs too;
- an initializer no node reads is removed;
- a graph input no node reads is removed (``inputs=false`` keeps the signature as it is); a
  subgraph's inputs never are (a Loop body's unread iteration number is part of the Loop);
- nodes are put in topological order;
- a subgraph's value_info holds only values its own nodes make (graphsurgeon's export would
  copy the type of each outer-scope value a body reads into it, stale shapes included).

    x ─ Relu ─ y            x ─ Relu ─ y
      └ Neg ─ (unused)  =>

A sorted graph with nothing to remove is recognized by a walk over its names
(:func:`_nothing_to_clean`) and comes back unchanged without a round trip through graphsurgeon.
"""

from __future__ import annotations

import onnx
import onnx_graphsurgeon as gs

from onnxsurgery.model.handle import ModelHandle
from onnxsurgery.model.walk import subgraphs
from onnxsurgery.pipeline.contract import Diagnostic, Pass, PassContext, PassResult

__all__ = ["Cleanup"]


class Cleanup(Pass):
    """Remove dead nodes and unused inputs/initializers; sort nodes topologically.

    A node whose outputs reach no graph output is removed, in subgraphs too, and so are the
    initializers and graph inputs that no node reads; the nodes are then sorted topologically.

    Options:
        inputs (bool): Remove graph inputs that no node reads; false keeps the signature as is.

    Example:
        cleanup(inputs=false)
    """

    name = "cleanup"
    weights_on_disk = True

    def __init__(self, *, inputs: bool = True) -> None:
        super().__init__(inputs=inputs)
        if not isinstance(inputs, bool):
            raise ValueError(f"inputs must be true or false, got {inputs!r}")
        self.inputs = inputs

    def run(self, model: onnx.ModelProto, ctx: PassContext) -> PassResult:
        unsorted = not _is_sorted(model.graph)
        if not unsorted and _nothing_to_clean(model.graph, inputs=self.inputs):
            return PassResult(model, modified=False, diagnostics=[Diagnostic.info("nothing to clean")])
        return self._with_graphsurgeon(model, unsorted, ctx.handle)

    def _with_graphsurgeon(
        self, model: onnx.ModelProto, unsorted: bool, handle: ModelHandle | None = None
    ) -> PassResult:
        # graphsurgeon works on the weightless view (its export copies every tensor it is
        # given); the handle puts the kept weights back (Pass.__call__).
        handle = handle if handle is not None else ModelHandle(model)
        bare = handle.weightless()
        graph = gs.import_onnx(bare)
        # A subgraph's inputs are its op's signature (a Loop body's iteration number, read or
        # not): only the main graph's unused inputs may go, so that is a second, flat cleanup.
        graph.cleanup(remove_unused_graph_inputs=False, recurse_subgraphs=True)
        if self.inputs:
            graph.cleanup(remove_unused_graph_inputs=True, recurse_subgraphs=False)
        if unsorted:
            graph.toposort(recurse_subgraphs=True)
        cleaned = gs.export_onnx(graph, do_type_check=False)
        del graph, bare
        _drop_outer_scope_value_info(cleaned.graph)

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
        out = handle.with_graph(cleaned)
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


def _nothing_to_clean(graph: onnx.GraphProto, *, inputs: bool) -> bool:
    """Whether onnx-graphsurgeon's cleanup would find nothing to remove in a sorted ``graph``,
    decided from the graph itself: every node feeds a graph output, every initializer (and,
    with ``inputs``, every graph input) is read on the way. Graphsurgeon's import and export
    cost a weightless copy of the model and a second graph; this walk costs a set of names. Only for the plain case: a graph with subgraphs, sparse
    initializers, repeated or empty output names, an initializer listed as an input, or an
    output that no node makes goes to graphsurgeon, which decides (False)."""
    if graph.sparse_initializer or any(subgraphs(node) for node in graph.node):
        return False
    given = [i.name for i in graph.input] + [t.name for t in graph.initializer]
    made = [name for node in graph.node for name in node.output]
    if "" in made or len(set(given)) != len(given) or len(set(made)) != len(made):
        return False
    if set(made) & set(given) or not {o.name for o in graph.output} <= set(made):
        return False
    needed = {o.name for o in graph.output}
    for node in reversed(graph.node):  # sorted: every reader comes after what it reads
        if not any(name in needed for name in node.output):
            return False  # a dead node
        needed.update(node.input)
    if any(t.name not in needed for t in graph.initializer):
        return False
    return not inputs or all(i.name in needed for i in graph.input)


def _drop_outer_scope_value_info(graph: onnx.GraphProto) -> None:
    """Keep in each subgraph's value_info only the values its own nodes make.

    graphsurgeon's export writes the type of every outer-scope value a body reads into that
    body's value_info: a stale outer shape the input carried (ONNX Runtime only warns about it
    outside) then contradicts inference inside the If or Loop body, as the pass's own output.
    """
    for node in graph.node:
        for sub in subgraphs(node):
            made = {name for inner in sub.node for name in inner.output}
            kept = [vi for vi in sub.value_info if vi.name in made]
            if len(kept) != len(sub.value_info):
                del sub.value_info[:]
                sub.value_info.extend(kept)
            _drop_outer_scope_value_info(sub)


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
