"""Which node and tensor of one model is which of another: by name first, then by what it computes.

A node of model a is matched with the node of model b that has its name and op; failing that,
with a node of b of the same domain, op and attributes reading the counterparts of its inputs (a
pass that renamed nodes, onnxsim's folding). Matched nodes match their outputs by position, so a
tensor a pass renamed still has its counterpart. Graph inputs match by name, else by position;
constants (initializers, ``Constant`` nodes) by name, else by value. Main graph only: a subgraph's
tensors are not visible outside its node.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import onnx

from onnxsurgery.model.equality import constant_node_tensor, tensor_key

__all__ = ["Matching", "constants_of", "match_models"]


@dataclass
class Matching:
    """Node pairs and tensor counterparts of model a in model b."""

    #: a's node index -> b's node index (unmatched nodes are absent)
    nodes: dict[int, int] = field(default_factory=dict)
    #: a's tensor name -> b's tensor name
    tensors: dict[str, str] = field(default_factory=dict)
    #: a's tensors whose counterpart has another name (matched by position or value)
    renamed: set[str] = field(default_factory=set)
    #: a's node indices matched by name whose inputs or attributes differ in b
    rewired: list[int] = field(default_factory=list)

    def unmatched_b(self, b: onnx.ModelProto) -> list[int]:
        used = set(self.nodes.values())
        return [k for k in range(len(b.graph.node)) if k not in used]


def constants_of(graph: onnx.GraphProto) -> dict[str, onnx.TensorProto]:
    """Every constant tensor of ``graph`` by name: initializers and ``Constant`` node outputs."""
    found = {t.name: t for t in graph.initializer}
    for node in graph.node:
        tensor = constant_node_tensor(node)
        if tensor is not None and node.output:
            found[node.output[0]] = tensor
    return found


def _attrs(node: onnx.NodeProto) -> tuple[bytes, ...]:
    return tuple(
        a.SerializeToString(deterministic=True) for a in sorted(node.attribute, key=lambda a: a.name)
    )


def _signature(node: onnx.NodeProto, inputs: tuple[str, ...]) -> tuple:
    const = constant_node_tensor(node)
    if const is not None:
        return ("Constant", tensor_key(const))
    return (node.domain, node.op_type, _attrs(node), inputs)


def _seed(a: onnx.GraphProto, b: onnx.GraphProto, m: Matching) -> None:
    """Graph inputs and constants: by name, then inputs by position and constants by value."""
    inits_a = {t.name for t in a.initializer}
    inits_b = {t.name for t in b.initializer}
    ins_a = [i.name for i in a.input if i.name not in inits_a]
    ins_b = [i.name for i in b.input if i.name not in inits_b]
    for k, name in enumerate(ins_a):
        if name in ins_b:
            m.tensors[name] = name
        elif len(ins_a) == len(ins_b) and ins_b[k] not in ins_a:
            m.tensors[name] = ins_b[k]
            m.renamed.add(name)
    consts_b = constants_of(b)
    by_value = {tensor_key(t): n for n, t in consts_b.items()}
    for name, tensor in constants_of(a).items():
        if name in consts_b:
            m.tensors[name] = name
        elif (other := by_value.get(tensor_key(tensor))) is not None:
            m.tensors[name] = other
            m.renamed.add(name)


def match_models(a: onnx.ModelProto, b: onnx.ModelProto) -> Matching:
    """Match ``a``'s nodes and tensors with ``b``'s (see the module docstring)."""
    m = Matching()
    _seed(a.graph, b.graph, m)
    by_name = {n.name: k for k, n in enumerate(b.graph.node) if n.name}
    by_sig: dict[tuple, list[int]] = defaultdict(list)
    for j, n in enumerate(b.graph.node):
        by_sig[_signature(n, tuple(n.input))].append(j)
    used: set[int] = set()
    k: int | None
    for i, node in enumerate(a.graph.node):
        mapped = tuple(m.tensors.get(x, "?" + x) if x else "" for x in node.input)
        k = by_name.get(node.name) if node.name else None
        if k is not None and (k in used or b.graph.node[k].op_type != node.op_type):
            k = None
        if k is None:
            k = next((c for c in by_sig.get(_signature(node, mapped), []) if c not in used), None)
        elif constant_node_tensor(node) is None and (
            mapped != tuple(b.graph.node[k].input) or _attrs(node) != _attrs(b.graph.node[k])
        ):
            m.rewired.append(i)
        if k is None:
            continue
        used.add(k)
        m.nodes[i] = k
        for out_a, out_b in zip(node.output, b.graph.node[k].output, strict=False):
            if out_a and out_b:
                m.tensors[out_a] = out_b
                if out_a != out_b:
                    m.renamed.add(out_a)
    return m
