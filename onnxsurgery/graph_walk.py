"""Walking ONNX graphs: the subgraphs a node holds, every name a graph uses, its opset."""

from __future__ import annotations

import onnx

__all__ = ["all_names", "default_opset", "subgraphs"]


def subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    """The graphs held in ``node``'s attributes (If branches, Loop and Scan bodies), in order."""
    out: list[onnx.GraphProto] = []
    for attr in node.attribute:
        if attr.HasField("g"):
            out.append(attr.g)
        out.extend(attr.graphs)
    return out


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
