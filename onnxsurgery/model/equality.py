"""Whether two models compute the same thing, up to names, node order and value_info.

:func:`same_graph` is how a pass tells a real change from a rewrite that only renamed tensors or
reordered nodes (onnxsim does both even when it folds nothing). Graphs are compared by keys
built from each node's op, attributes and the keys of what it reads, so names never matter.
"""

from __future__ import annotations

import hashlib

import numpy as np
import onnx
from onnx import numpy_helper

from onnxsurgery.model.tensors import on_disk
from onnxsurgery.model.weights_on_disk import tensor_data

__all__ = ["same_graph", "constant_node_tensor", "tensor_key"]


def _tensor_key(tensor: onnx.TensorProto, content: bool) -> str:
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{tensor.data_type}:{list(tensor.dims)}".encode())
    if not content:
        return "c:" + h.hexdigest()
    if tensor.data_type == onnx.TensorProto.STRING:
        for s in tensor.string_data:
            h.update(len(s).to_bytes(8, "little") + s)
    elif tensor.HasField("raw_data"):
        h.update(tensor.raw_data)
    elif on_disk(tensor):  # the same bytes as once loaded
        h.update(tensor_data(tensor))
    elif tensor.data_location == onnx.TensorProto.EXTERNAL:
        # Data not loaded (a weightless placeholder): where it lives is what identifies it.
        for entry in tensor.external_data:
            h.update(f"{entry.key}={entry.value};".encode())
    else:
        array = np.ascontiguousarray(numpy_helper.to_array(tensor))
        h.update(array.data.cast("B"))
    return "c:" + h.hexdigest()


def tensor_key(tensor: onnx.TensorProto) -> str:
    """A key equal for two tensors of the same type, dims and bytes, whatever their names (the
    diff of two models matches a renamed constant by it)."""
    return _tensor_key(tensor, True)


def constant_node_tensor(node: onnx.NodeProto) -> onnx.TensorProto | None:
    """The tensor a ``Constant`` node holds (value, value_float(s), value_int(s)); else None."""
    if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or len(node.attribute) != 1:
        return None
    attr = node.attribute[0]
    if attr.name == "value":
        return attr.t
    try:
        value = onnx.helper.get_attribute_value(attr)
        if attr.name in ("value_float", "value_floats"):
            return numpy_helper.from_array(np.asarray(value, dtype=np.float32))
        if attr.name in ("value_int", "value_ints"):
            return numpy_helper.from_array(np.asarray(value, dtype=np.int64))
    except Exception:
        return None
    return None


def _attr_key(attr: onnx.AttributeProto) -> bytes:
    if attr.doc_string:
        copy = onnx.AttributeProto()
        copy.CopyFrom(attr)
        copy.doc_string = ""
        attr = copy
    return attr.SerializeToString(deterministic=True)


def _node_key(node: onnx.NodeProto, ident: dict[str, str], content: bool, storage: bool) -> str:
    """Key of one node; records the identities of its outputs in ``ident``."""
    const = constant_node_tensor(node)
    if const is not None:
        key = _tensor_key(const, content)
        for name in node.output[:1]:
            ident[name] = key
        # the same key as an initializer holding that value, unless storage counts
        return "Constant->" + key if storage else key
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{node.domain}::{node.op_type}|".encode())
    for attr in sorted(node.attribute, key=lambda a: a.name):
        h.update(attr.name.encode() + b"=" + _attr_key(attr) + b";")
    for name in node.input:
        h.update((ident.get(name, "free:" + name) if name else "-").encode() + b",")
    key = h.hexdigest()
    for i, name in enumerate(node.output):
        if name:
            ident[name] = f"{key}#{i}"
    return key


def _graph_key(graph: onnx.GraphProto, content: bool, storage: bool) -> tuple:
    """A key equal for two graphs that compute the same thing the same way.

    Tensors are identified by what produces them (graph input name, constant value, or op +
    attributes + identities of its inputs), so tensor and node names, node order and whether a
    constant is an initializer or a Constant node do not enter the key; every node (dead ones
    too), every initializer, the graph inputs and outputs with their types do.
    """
    ident: dict[str, str] = {}
    for vi in graph.input:
        ident[vi.name] = "in:" + vi.name
    inits = []
    for t in graph.initializer:
        key = _tensor_key(t, content)
        inits.append(key)
        ident.setdefault(t.name, key)  # an initializer shadowed by a graph input stays an input
    node_keys: list[str] = []
    pending = list(graph.node)
    while pending:  # one round for a sorted graph
        waiting = []
        for node in pending:
            if any(name and name not in ident for name in node.input):
                waiting.append(node)
            else:
                node_keys.append(_node_key(node, ident, content, storage))
        if len(waiting) == len(pending):  # a cycle or names from an outer scope
            for node in waiting:
                for name in node.input:
                    if name:
                        ident.setdefault(name, "free:" + name)
        pending = waiting
    outputs = [
        (
            vi.name,
            ident.get(vi.name, "free:" + vi.name),
            vi.type.SerializeToString(deterministic=True),
        )
        for vi in graph.output
    ]
    inputs = [(vi.name, vi.type.SerializeToString(deterministic=True)) for vi in graph.input]
    return (tuple(inputs), tuple(outputs), tuple(sorted(node_keys + inits)))


def _model_key(model: onnx.ModelProto, content: bool, storage: bool) -> tuple:
    opsets = tuple(sorted((o.domain, o.version) for o in model.opset_import))
    return (opsets, _graph_key(model.graph, content, storage))


def _node_counts(graph: onnx.GraphProto, storage: bool) -> tuple[int, ...]:
    """Cheap counts that differ whenever the keys would (checked first)."""
    constants = sum(constant_node_tensor(n) is not None for n in graph.node)
    others = len(graph.node) - constants
    if storage:
        return (others, constants, len(graph.initializer))
    return (others, constants + len(graph.initializer))


def same_graph(a: onnx.ModelProto, b: onnx.ModelProto, *, constant_storage: bool = False) -> bool:
    """Whether ``b`` computes what ``a`` computes, the same way, with the same constants.

    Not a change: tensor and node names, node order, ``value_info``, and (unless
    ``constant_storage``) a constant stored as an initializer instead of a Constant node. A
    change: any node added, removed or rewired (dead ones included), a constant's value, an
    initializer added or removed, the graph's inputs/outputs or their declared types, the
    opsets. Constant contents are hashed only when everything else already matches.
    """
    storage = constant_storage
    if _node_counts(a.graph, storage) != _node_counts(b.graph, storage):
        return False
    if _model_key(a, False, storage) != _model_key(b, False, storage):
        return False
    return _model_key(a, True, storage) == _model_key(b, True, storage)
