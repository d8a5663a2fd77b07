"""Edits of a graph after symbolize rewrote it: the names a node reads (its subgraphs' too), a
stable topological order, initializers and Constants nothing reads any more, stale value infos."""

from __future__ import annotations

import heapq

import onnx

from onnxsurgery.model.io import IR_INITIALIZERS_AS_INPUTS
from onnxsurgery.model.walk import subgraphs

__all__ = ["drop_value_info", "outer_names", "remove_orphans", "toposort_graph"]


def drop_value_info(graph: onnx.GraphProto) -> None:
    del graph.value_info[:]
    for node in graph.node:
        for sub in subgraphs(node):
            drop_value_info(sub)


def outer_names(node: onnx.NodeProto) -> set[str]:
    """Names a node reads, including those its subgraphs read from the enclosing scope."""
    names = {i for i in node.input if i}
    for g in subgraphs(node):
        inner = {i.name for i in g.input} | {i.name for i in g.initializer}
        for n in g.node:
            inner.update(o for o in n.output if o)
        for n in g.node:
            names.update(x for x in outer_names(n) if x not in inner)
        names.update(o.name for o in g.output if o.name not in inner)
    return names


def toposort_graph(nodes: list[onnx.NodeProto], available: set[str]) -> list[onnx.NodeProto]:
    """Stable topological order: among ready nodes, the earliest in ``nodes`` goes first."""
    producer: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for o in n.output:
            if o:
                producer[o] = i
    deps: list[set[int]] = []
    users: dict[int, list[int]] = {i: [] for i in range(len(nodes))}
    for i, n in enumerate(nodes):
        d = {
            producer[x]
            for x in outer_names(n)
            if x in producer and x not in available and producer[x] != i
        }
        deps.append(d)
        for p in d:
            users[p].append(i)
    count = [len(d) for d in deps]
    ready = [i for i, c in enumerate(count) if c == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(nodes[i])
        for u in users[i]:
            count[u] -= 1
            if count[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(nodes):
        stuck = [nodes[i].name or nodes[i].output[0] for i, c in enumerate(count) if c > 0]
        raise ValueError(f"the rewritten graph has a cycle through {', '.join(stuck[:5])}")
    return order


def remove_orphans(model: onnx.ModelProto, candidates: set[str]) -> None:
    used: set[str] = set()

    def walk(g: onnx.GraphProto) -> None:
        for n in g.node:
            used.update(outer_names(n))
        used.update(o.name for o in g.output)

    walk(model.graph)
    g = model.graph
    dead = {c for c in candidates if c not in used}
    keep = [i for i in g.initializer if i.name not in dead]
    if len(keep) != len(g.initializer):
        dropped = {i.name for i in g.initializer} - {i.name for i in keep}
        del g.initializer[:]
        g.initializer.extend(keep)
        # IR < 4 lists initializers as graph inputs too: a dropped one would become a required input
        inputs = [i for i in g.input if i.name not in dropped]
        if model.ir_version < IR_INITIALIZERS_AS_INPUTS and len(inputs) != len(g.input):
            del g.input[:]
            g.input.extend(inputs)
    nodes = [n for n in g.node if not (n.op_type == "Constant" and n.output[0] in dead)]
    if len(nodes) != len(g.node):
        del g.node[:]
        g.node.extend(nodes)
