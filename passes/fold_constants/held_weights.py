"""Weights onnxsim never needs to see: large weights of a model over 2 GB that no folding reads.

A weight that every node reading it also reads a runtime value with (``MatMul(x, W)``,
``Gather(W, ids)``) is never folded: constant folding only evaluates nodes whose inputs are all
constants. Such weights are *held back*: onnxsim gets the model with each of them as a graph
input of the same type and shape (its name, dims and dtype are all shape inference needs), and
the result gets the weights back. onnxsim then never loads, copies, writes or reads back the
bulk of a large model: that, not the folding, was most of its time and memory on a 2 GB model.
A weight a constant-only node reads (``Transpose(W)``, ``Cast(W)``, ``Mul(W, 0.5)``) stays an
initializer and is folded as before.

What holding back gives up: onnx-optimizer fusions that rewrite a weight's values (BatchNorm
into the Conv before it, packing Q/K/V weights into one attention op) cannot see a held weight,
so on a model over 2 GB they do not happen; every rewrite onnxsim makes is still one that
holds for any value of its inputs, so the result computes what the model computes.
"""

from __future__ import annotations

import onnx

from onnxsurgery.model.io import copy_fields, tensor_nbytes, weight_stub
from onnxsurgery.model.walk import subgraphs
from onnxsurgery.shapes.rules import op_traits

__all__ = [
    "HELD_MIN_BYTES",
    "held_read",
    "held_view",
    "held_weights",
    "restore_held",
    "without_held",
]

#: Weights smaller than this always go to onnxsim (holding them back saves nothing worth it).
HELD_MIN_BYTES = 1 << 20


def _names_read_in(graph: onnx.GraphProto) -> set[str]:
    """Every name a node of ``graph`` or of its subgraphs reads."""
    names: set[str] = set()
    for node in graph.node:
        names.update(node.input)
        for sub in subgraphs(node):
            names |= _names_read_in(sub)
    return names


def held_weights(model: onnx.ModelProto) -> list[str]:
    """Main-graph initializers of ``HELD_MIN_BYTES`` or more that no constant folding reads:
    every node reading one also reads a value computed from a graph input (or from a random
    op), none is read inside an If/Loop/Scan body, none is a graph input or output."""
    graph = model.graph
    inputs = {i.name for i in graph.input}
    outputs = {o.name for o in graph.output}
    constant = {t.name for t in graph.initializer if t.name not in inputs}
    constant |= {t.values.name for t in graph.sparse_initializer}
    candidates = {
        t.name
        for t in graph.initializer
        if t.name in constant and t.name not in outputs and tensor_nbytes(t) >= HELD_MIN_BYTES
    }
    if not candidates:
        return []
    folded_by: set[str] = set()  # candidates some all-constant node reads
    for node in graph.node:  # topologically sorted (the checker's rule)
        reads = [name for name in node.input if name]
        bodies = subgraphs(node)
        if bodies:  # read inside a body (or by the node holding it): left to onnxsim
            for body in bodies:
                candidates -= _names_read_in(body)
            candidates -= set(reads)
            continue
        random = op_traits(node.domain, node.op_type).random
        if not random and node.domain in ("", "ai.onnx") and all(
            name in constant for name in reads
        ):
            constant.update(node.output)
            folded_by.update(name for name in reads if name in candidates)
    held = candidates - folded_by
    return [t.name for t in graph.initializer if t.name in held]


def without_held(model: onnx.ModelProto, held: list[str]) -> onnx.ModelProto:
    """A copy of ``model`` whose ``held`` initializers are graph inputs of the same type and
    shape instead (appended after its own inputs); the weights' data is not copied."""
    names = set(held)
    copy = onnx.ModelProto()
    copy_fields(model, copy, skip="graph")
    copy_fields(model.graph, copy.graph, skip="initializer")
    for tensor in model.graph.initializer:
        if tensor.name in names:
            copy.graph.input.append(
                onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, tensor.dims)
            )
        else:
            copy.graph.initializer.append(tensor)
    return copy


def restore_held(folded: onnx.ModelProto, model: onnx.ModelProto, held: list[str]) -> int:
    """Give ``folded`` (onnxsim's result for ``without_held(model, held)``) its held weights
    back, from ``model``: each one a node still reads becomes an initializer again, and no held
    name stays a graph input. Returns how many came back."""
    names = set(held)
    kept = [i for i in folded.graph.input if i.name not in names]
    if len(kept) != len(folded.graph.input):
        del folded.graph.input[:]
        folded.graph.input.extend(kept)
    read = _names_read_in(folded.graph) & names
    for tensor in model.graph.initializer:
        if tensor.name in read:
            folded.graph.initializer.append(tensor)
    return len(read)


def held_read(folded: onnx.ModelProto, held: list[str]) -> set[str]:
    """The ``held`` weights a node of ``folded`` still reads (those that come back)."""
    return _names_read_in(folded.graph) & set(held)


def held_view(folded: onnx.ModelProto, model: onnx.ModelProto, held: list[str]) -> onnx.ModelProto:
    """``folded`` (onnxsim's result for ``without_held(model, held)``) with its held weights back
    as :func:`~onnxsurgery.model.io.weightless` placeholders (a real copy only for a weight that
    has none), ahead of its own initializers in ``model``'s order, no held name left an input:
    the model's handle fills them (``ModelHandle.adopt``: in a pipeline, in place). Compared
    with ``weightless(model)``, it tells what folding changed without a copy of any held weight.
    ``folded``'s initializers are copied; it is left as it was."""
    view = onnx.ModelProto()
    copy_fields(folded, view, skip="graph")
    copy_fields(folded.graph, view.graph, skip="initializer")
    names = set(held)
    read = held_read(folded, held)
    kept = [i for i in view.graph.input if i.name not in names]
    del view.graph.input[:]
    view.graph.input.extend(kept)
    for tensor in model.graph.initializer:
        if tensor.name in read:
            stub = weight_stub(tensor)
            view.graph.initializer.append(tensor if stub is None else stub)
    view.graph.initializer.extend(folded.graph.initializer)
    return view
