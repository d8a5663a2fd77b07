"""The readings reference cases choose between where the graph alone cannot tell (see
:mod:`onnxsurgery.passes.symbolize.baked`): each rewrites a symbolized model one way.

- ``same_padding``: a window op's pads baked at the traced size become ``auto_pad=SAME_UPPER``
  (TensorFlow's 'same' padding at every size), its Pad removed;
- ``resize_tables``: a learned table over a patch grid is resized to the run-time grid, the way
  torch interpolates it (one entry of :data:`GRID_RESIZES` each).

The other reading, keeping the graph as it is, needs no rewrite.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from onnxsurgery.passes.symbolize.baked import GridTable
from onnxsurgery.passes.symbolize.graph_edits import (
    drop_value_info,
    outer_names,
    remove_orphans,
    toposort_graph,
)
from onnxsurgery.passes.symbolize.rewrite import safe_name

__all__ = ["same_padding", "resize_tables", "slice_tables", "GRID_RESIZES"]


def same_padding(model: onnx.ModelProto, ops: list[tuple[str, str | None]]) -> onnx.ModelProto:
    """A copy of ``model`` where each window op of ``ops`` (op name, the Pad node before it or
    None) pads by ``auto_pad=SAME_UPPER`` (TensorFlow's 'same' padding at every size) instead of
    its fixed pads and that Pad (removed once nothing else reads it)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    nodes = {n.name: n for n in graph.node}
    pads: set[str] = set()
    for name, pad in ops:
        node = nodes[name]
        kept = [x for x in node.attribute if x.name not in ("pads", "auto_pad")]
        del node.attribute[:]
        node.attribute.extend([*kept, helper.make_attribute("auto_pad", "SAME_UPPER")])
        if pad is not None:
            node.input[0] = nodes[pad].input[0]
            pads.add(pad)
    dead, freed = [nodes[p] for p in pads], set()
    while dead:  # the Pads nothing reads any more, then what only they read (pads arithmetic)
        read = {i for n in graph.node for i in outer_names(n)} | {o.name for o in graph.output}
        gone = [n for n in dead if n in graph.node and not any(o in read for o in n.output)]
        for n in gone:
            graph.node.remove(n)
        inputs = {i for n in gone for i in n.input}
        freed |= inputs
        dead = [n for n in graph.node if any(o in inputs for o in n.output)]
    remove_orphans(out, freed)
    drop_value_info(graph)
    return out


#: How torch resizes a table to a grid (``F.interpolate(..., align_corners=False)``; 'nearest'
#: takes the source row ``floor(i * old / new)``, as TimeSformer's table), as ONNX Resize
GRID_RESIZES: dict[str, dict[str, Any]] = {  # Resize attributes by name
    "bicubic": {
        "mode": "cubic",
        "cubic_coeff_a": -0.75,
        "coordinate_transformation_mode": "half_pixel",
    },
    "bilinear": {"mode": "linear", "coordinate_transformation_mode": "half_pixel"},
    "nearest": {
        "mode": "nearest",
        "nearest_mode": "floor",
        "coordinate_transformation_mode": "asymmetric",
    },
}


def resize_tables(
    model: onnx.ModelProto,
    tables: list[GridTable],
    how: str,
    arrays: Mapping[str, np.ndarray],
) -> onnx.ModelProto | None:
    """A copy of ``model`` where each table's grid rows are resized (``how``: a key of
    :data:`GRID_RESIZES`) from their traced grid to the run-time size of axes 2, 3 of the table's
    ``grid`` tensor, its leading rows kept; None where a table is not an initializer. ``arrays``
    holds each table's values (``model`` may be a weightless copy)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    inits = {i.name: i for i in graph.initializer}
    nodes = {n.name: n for n in graph.node}
    added: list[onnx.NodeProto] = []
    leads: set[str] = set()  # dropped again where a table has no leading rows
    for t in tables:
        if t.tensor not in inits or t.node not in nodes:
            return None
        base = safe_name(f"symbolize/{t.tensor}/{how}")
        leads.add(f"{base}/lead")
        graph.initializer.extend(_grid_initializers(t, arrays[t.tensor], base))
        added += _resize_nodes(t, arrays[t.tensor].shape[2], base, how)
        nodes[t.node].input[t.index] = added[-1].output[0]
    graph.node.extend(added)
    available = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    ordered = toposort_graph(list(graph.node), available)
    del graph.node[:]
    graph.node.extend(ordered)
    remove_orphans(out, {t.tensor for t in tables} | leads)
    drop_value_info(graph)
    return out


def slice_tables(model: onnx.ModelProto, tables: list[GridTable]) -> onnx.ModelProto | None:
    """A copy of ``model`` where each sequence's table (one axis, :class:`GridTable`) is cut
    to its leading rows and the run-time length, as learned positions ``0 .. seq-1`` are: the
    reading a bound gives (``seq<=traced``), here only to learn whether the reference cases
    tell it from a resize; None where a table is not an initializer."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    inits = {i.name for i in graph.initializer}
    nodes = {n.name: n for n in graph.node}
    added: list[onnx.NodeProto] = []
    for t in tables:
        if t.tensor not in inits or t.node not in nodes or len(t.shape) != 1:
            return None
        base = safe_name(f"symbolize/{t.tensor}/sliced")
        graph.initializer.extend(
            [
                numpy_helper.from_array(np.array([t.axes[0]], np.int64), f"{base}/first"),
                numpy_helper.from_array(np.array([t.axes[0] + 1], np.int64), f"{base}/end"),
                numpy_helper.from_array(np.array([t.lead], np.int64), f"{base}/lead"),
                numpy_helper.from_array(np.array([0], np.int64), f"{base}/zero"),
                numpy_helper.from_array(np.array([1], np.int64), f"{base}/axis"),
            ]
        )
        added += [
            helper.make_node("Shape", [t.grid], [f"{base}/shape"], name=f"{base}/shape"),
            helper.make_node(
                "Slice", [f"{base}/shape", f"{base}/first", f"{base}/end"], [f"{base}/n"],
                name=f"{base}/n",
            ),
            helper.make_node("Add", [f"{base}/n", f"{base}/lead"], [f"{base}/rows"], name=f"{base}/rows"),
            helper.make_node(
                "Slice", [t.tensor, f"{base}/zero", f"{base}/rows", f"{base}/axis"],
                [f"{base}/table"], name=f"{base}/table",
            ),
        ]  # fmt: skip
        nodes[t.node].input[t.index] = f"{base}/table"
    graph.node.extend(added)
    available = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    ordered = toposort_graph(list(graph.node), available)
    del graph.node[:]
    graph.node.extend(ordered)
    drop_value_info(graph)
    return out


def _grid_initializers(t: GridTable, arr: np.ndarray, base: str) -> list[onnx.TensorProto]:
    """The table's grid rows as an image [1, dim, h, w] (a sequence's: [1, dim, n, 1]), its
    leading rows, and the constants :func:`_resize_nodes` reads, named under ``base``."""
    dim = arr.shape[2]
    arr = arr[:1]  # one table; broadcast over a batch it was repeated along
    image = (*t.shape, 1) if len(t.shape) == 1 else t.shape
    grid = arr[:, t.lead :].reshape(1, *image, dim).transpose(0, 3, 1, 2)
    return [
        numpy_helper.from_array(np.ascontiguousarray(grid), f"{base}/grid"),
        numpy_helper.from_array(arr[:, : t.lead], f"{base}/lead"),
        numpy_helper.from_array(np.array([1, dim], np.int64), f"{base}/head"),
        numpy_helper.from_array(np.array([t.axes[0]], np.int64), f"{base}/first"),
        numpy_helper.from_array(np.array([t.axes[-1] + 1], np.int64), f"{base}/end"),
        numpy_helper.from_array(np.array([1, -1, dim], np.int64), f"{base}/rows"),
    ] + (
        [numpy_helper.from_array(np.ones(1, np.int64), f"{base}/tail")] if len(t.shape) == 1 else []
    )


def _resize_nodes(t: GridTable, dim: int, base: str, how: str) -> list[onnx.NodeProto]:
    """The nodes that resize the grid to the run-time size of ``t.grid``'s axes ``t.axes``
    (a sequence's table: one axis, its image's width 1 kept) and lay it out as the table's rows
    again, its leading rows first; the last one's output is the new table."""
    nodes = [
        helper.make_node("Shape", [t.grid], [f"{base}/shape"], name=f"{base}/shape"),
        helper.make_node(
            "Slice", [f"{base}/shape", f"{base}/first", f"{base}/end"], [f"{base}/hw"],
            name=f"{base}/hw",
        ),
        helper.make_node(
            "Concat",
            [f"{base}/head", f"{base}/hw", *([f"{base}/tail"] if len(t.shape) == 1 else [])],
            [f"{base}/sizes"], name=f"{base}/sizes", axis=0,
        ),
        helper.make_node(
            "Resize", [f"{base}/grid", "", "", f"{base}/sizes"], [f"{base}/resized"],
            name=f"{base}/resize", **GRID_RESIZES[how],
        ),
        helper.make_node(
            "Transpose", [f"{base}/resized"], [f"{base}/hwc"], name=f"{base}/hwc",
            perm=[0, 2, 3, 1],
        ),
        helper.make_node(
            "Reshape", [f"{base}/hwc", f"{base}/rows"], [f"{base}/flat"], name=f"{base}/flat"
        ),
    ]  # fmt: skip
    if t.lead:
        out_name = f"{base}/table"
        nodes.append(
            helper.make_node(
                "Concat", [f"{base}/lead", f"{base}/flat"], [out_name], name=out_name, axis=1
            )
        )
    return nodes
