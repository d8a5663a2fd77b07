"""Walking ONNX graphs: the subgraphs a node holds and their paths, every name a graph uses,
node and op counts, its opset. The one subgraph walk of the project: code that descends into
If/Loop/Scan bodies goes through :func:`subgraphs` or :func:`subgraph_attrs`."""

from __future__ import annotations

from collections import Counter

import onnx

__all__ = [
    "all_names",
    "count_nodes",
    "default_opset",
    "graph_path",
    "graphs_by_path",
    "op_counts",
    "subgraph_attrs",
    "subgraphs",
]


def subgraph_attrs(node: onnx.NodeProto) -> list[tuple[str, onnx.GraphProto]]:
    """``(attribute name, graph)`` for every graph in ``node``'s attributes, in order; a graph
    of a list attribute is named ``attr[i]``."""
    out: list[tuple[str, onnx.GraphProto]] = []
    for attr in node.attribute:
        if attr.HasField("g"):
            out.append((attr.name, attr.g))
        out.extend((f"{attr.name}[{i}]", g) for i, g in enumerate(attr.graphs))
    return out


def subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    """The graphs held in ``node``'s attributes (If branches, Loop and Scan bodies), in order."""
    return [g for _, g in subgraph_attrs(node)]


def graph_path(parent: str, node: onnx.NodeProto, attr: str) -> str:
    """The path naming a subgraph: ``parent/node/attr`` (the main graph's path is ``""``)."""
    own = f"{node.name or node.output[0]}/{attr}"
    return f"{parent}/{own}" if parent else own


def graphs_by_path(graph: onnx.GraphProto, prefix: str = "") -> dict[str, onnx.GraphProto]:
    """``graph`` and every subgraph in it, keyed by :func:`graph_path`."""
    out = {prefix: graph}
    for node in graph.node:
        for attr, sub in subgraph_attrs(node):
            out.update(graphs_by_path(sub, graph_path(prefix, node, attr)))
    return out


def count_nodes(model: onnx.ModelProto) -> int:
    """Nodes of the main graph (subgraph nodes are counted in :func:`op_counts`)."""
    return len(model.graph.node)


def op_counts(graph: onnx.GraphProto) -> Counter[str]:
    """How many nodes of each op type, subgraphs (If/Loop/Scan bodies) included."""
    counts: Counter[str] = Counter()
    for node in graph.node:
        counts[node.op_type if not node.domain else f"{node.domain}::{node.op_type}"] += 1
        for sub in subgraphs(node):
            counts.update(op_counts(sub))
    return counts


def all_names(graph: onnx.GraphProto) -> set[str]:
    """Every tensor and node name in ``graph`` and its subgraphs (what a new name must avoid)."""
    names = {i.name for i in graph.input} | {o.name for o in graph.output}
    names |= {t.name for t in graph.initializer} | {v.name for v in graph.value_info}
    names |= {t.values.name for t in graph.sparse_initializer}
    for node in graph.node:
        names.update(node.input)
        names.update(node.output)
        names.add(node.name)
        for sub in subgraphs(node):
            names |= all_names(sub)
    names.discard("")
    return names


def default_opset(model: onnx.ModelProto, missing: int = 0) -> int:
    """The version of the default (``ai.onnx``) domain ``model`` imports; ``missing`` if none."""
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), missing)
