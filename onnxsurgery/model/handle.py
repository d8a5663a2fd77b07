"""The model a pipeline run holds: its graph, and its weights where they lie until read.

A :class:`ModelHandle` holds a ModelProto whose large weights the loader left on disk (in their
external-data file, one file per tensor, or inside the ``.onnx`` itself: ``weights_on_disk.py``)
and whether its holder drops that model once a pass returns (``owned``: the pipeline does). It
is the one place that knows how weights travel between a model and what a pass makes of it:

    array(name)     a weight's values, read from its file if it lies there
    weightless()    the graph with a placeholder per large weight, for passes that edit structure
    with_graph(m)   ``m``'s graph (a pass's edit of the weightless view) with this model's
                    model-level fields (opsets, metadata, producer)
    adopt(m)        ``m`` with its placeholders filled by this model's weights: in place, the
                    weights never copied, where the model is owned and holds MAPPED_BYTES or
                    more; else a copy of each weight into ``m``
    full()          the model with every weight read in, for the edges that need one
                    (onnxsim's child, onnx-graphsurgeon's fallback)

Passes get the handle as ``PassContext.handle`` and return the weightless graph they edited;
``Pass.__call__`` hands it to :meth:`ModelHandle.adopt`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from onnxsurgery.model.io import adopt_graph, copy_fields, restore_weights, weightless
from onnxsurgery.model.tensors import is_placeholder, iter_tensors
from onnxsurgery.model.walk import subgraphs
from onnxsurgery.model.weights_on_disk import MAPPED_BYTES, held_bytes, load_weights, tensor_array

__all__ = ["ModelHandle", "adopt_in_place"]


@dataclass
class ModelHandle:
    """A model and where its weights live. ``model``: the graph, large weights left on disk
    (``model.tensors.on_disk``); ``owned``: whoever holds the handle drops the model a pass
    was given once it returns, so the handle may turn that model into the pass's result;
    ``external_data``: the file it came from kept weights in data files; ``path``: that file."""

    model: onnx.ModelProto
    owned: bool = False
    external_data: bool = False
    path: Path | None = None

    def array(self, name: str) -> np.ndarray:
        """The values of the main-graph initializer ``name`` (read from its file if it lies
        there). Raises KeyError when the graph has no initializer of that name."""
        for tensor in self.model.graph.initializer:
            if tensor.name == name:
                return tensor_array(tensor)
        raise KeyError(name)

    def weightless(self) -> onnx.ModelProto:
        """A copy of the model whose large weights are placeholders: the graph, never the
        weights' bytes (``model.io.weightless``). A pass edits it and returns it (or a model
        made from it); :meth:`adopt` puts the weights back."""
        return weightless(self.model)

    def with_graph(self, edited: onnx.ModelProto) -> onnx.ModelProto:
        """``edited`` (a tool's export of the weightless view) given this model's model-level
        fields: the graph is ``edited``'s, everything else the model's. Changes ``edited``."""
        return adopt_graph(self.model, edited)

    def adopt(self, result: onnx.ModelProto) -> onnx.ModelProto:
        """``result`` (a pass's output) with each placeholder filled by the model's weight of
        that name. A result with none is returned as it is. Where the model is owned and holds
        :data:`MAPPED_BYTES` or more, the model itself becomes the result, its weights left
        where they are (:func:`adopt_in_place`); else (below it, sessions copied the weights
        into the heap, and a copy reuses that memory) each weight is copied into ``result``."""
        if result is self.model or not any(is_placeholder(t) for t in iter_tensors(result.graph)):
            return result
        if self.owned and held_bytes(self.model) >= MAPPED_BYTES:
            adopted = adopt_in_place(self.model, result)
            if adopted is not None:
                return adopted
        return restore_weights(result, self.model)

    def full(self) -> onnx.ModelProto:
        """The model with every weight left on disk read in: the model itself where owned (and
        returned), else a copy (the model given stays as it was)."""
        if self.owned:
            return load_weights(self.model)
        copy = onnx.ModelProto()
        copy.CopyFrom(self.model)
        return load_weights(copy)


def adopt_in_place(model: onnx.ModelProto, new: onnx.ModelProto) -> onnx.ModelProto | None:
    """``model`` turned, in place, into ``new`` (made from ``model``'s weightless copy), its
    weights where they are: byte for byte what ``restore_weights(new, model)`` makes, without
    a copy of any weight. ``new``'s initializers must start with some of ``model``'s, in their
    order (its placeholders among them; one given again is copied), then any new ones, no
    placeholder among these, and no placeholder in a subgraph; else None, ``model`` untouched."""
    inits = model.graph.initializer
    order = [t.name for t in new.graph.initializer]
    if len(set(order)) != len(order):
        return None
    kept = 0  # how many of new's initializers lead it in model's order
    for tensor in inits:
        if kept < len(order) and order[kept] == tensor.name:
            kept += 1
    if any(is_placeholder(t) for t in new.graph.initializer[kept:]):
        return None
    nodes = list(new.graph.node)
    while nodes:
        for sub in subgraphs(nodes.pop()):
            if any(is_placeholder(t) for t in sub.initializer):
                return None
            nodes.extend(sub.node)
    leading = set(order[:kept])
    for i in reversed(range(len(inits))):
        if inits[i].name not in leading:
            del inits[i]
    for tensor, source in zip(inits, new.graph.initializer[:kept], strict=True):
        if not is_placeholder(source):
            tensor.CopyFrom(source)
    inits.extend(new.graph.initializer[kept:])
    for field in onnx.GraphProto.DESCRIPTOR.fields:
        if field.name != "initializer":
            model.graph.ClearField(field.name)
    copy_fields(new.graph, model.graph, skip="initializer")
    for field in onnx.ModelProto.DESCRIPTOR.fields:
        if field.name != "graph":
            model.ClearField(field.name)
    copy_fields(new, model, skip="graph")
    return model
