"""Build concat-outputs' merge in a graph: the nodes that pack each output into one tensor.

:func:`add_merged_output` emits, for every part of a :class:`~onnxsurgery.merged_outputs.Layout`,
Cast, Reshape (flatten), Unsqueeze and Pad (amounts from ``Shape``/``Max``/``Sub`` when the
dims are symbolic), then one Concat, and the optional ``<name>_shapes`` output
(Shape + Concat). New names are ``<merged name>/<part>/<step>``, made unique against the names
the graph has, so the same model and layout always give the same bytes. The layout has been
checked by the pass already: nothing here decides or fails.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from onnxsurgery.merged_outputs import Layout, PartLayout, has_unknown
from onnxsurgery.model.dtypes import parse_dtype
from onnxsurgery.model.walk import default_opset
from onnxsurgery.shapes.dims import Dim, const_ints, dim_sum

__all__ = ["add_merged_output"]

_INT64_MAX = 2**63 - 1


def add_merged_output(
    model: onnx.ModelProto,
    layout: Layout,
    taken: set[str],
    declared: dict[str, onnx.ValueInfoProto],
) -> None:
    """Append to ``model`` (in place) the nodes that merge ``layout``'s parts into its output.

    ``taken`` holds every name in use (it grows with the new ones); ``declared`` is the
    original output value infos by name: a part merged away keeps its type as value_info.
    """
    _Builder(model, layout, taken).build(declared)


@dataclass
class _Builder:
    model: onnx.ModelProto
    layout: Layout
    taken: set[str]

    def fresh(self, hint: str) -> str:
        base = f"{self.layout.name}/{hint}"
        name, n = base, 1
        while name in self.taken:
            n += 1
            name = f"{base}_{n}"
        self.taken.add(name)
        return name

    def node(self, op: str, inputs: list[str], hint: str, **attrs) -> str:
        out = self.fresh(hint)
        self.model.graph.node.append(
            helper.make_node(op, inputs, [out], name=self.fresh(f"{hint}/{op}"), **attrs)
        )
        return out

    def const(self, values, dtype, hint: str) -> str:
        name = self.fresh(hint)
        self.model.graph.initializer.append(numpy_helper.from_array(np.asarray(values, dtype=dtype), name))
        return name

    def build(self, declared: dict[str, onnx.ValueInfoProto]) -> None:
        layout, opset = self.layout, default_opset(self.model)
        target = parse_dtype(layout.dtype)
        blocks = []
        for i, part in enumerate(layout.parts):
            x, tag = part.name, f"part{i}"
            if part.cast:
                x = self.node("Cast", [x], f"{tag}/cast", to=target)
            if layout.flatten is not None and part.rank != layout.flatten + 1:
                x = self.flatten(x, part, tag)
            have = layout.flatten + 1 if layout.flatten is not None else part.rank
            if have < layout.rank:
                axes = list(range(have, layout.rank))
                if opset >= 13:
                    x = self.node("Unsqueeze", [x, self.const(axes, np.int64, f"{tag}/axes")], f"{tag}/unsqueeze")
                else:
                    x = self.node("Unsqueeze", [x], f"{tag}/unsqueeze", axes=axes)
            blocks.append(x)
        if layout.padded_axes:
            blocks = self.padded(blocks)
        self.model.graph.node.append(
            helper.make_node("Concat", blocks, [layout.name], name=self.fresh("Concat"), axis=layout.axis)
        )
        new = [helper.make_tensor_value_info(layout.name, target, self.merged_dims())]
        if layout.shapes:
            shapes = [self.node("Shape", [p.name], f"part{i}/shape") for i, p in enumerate(layout.parts) if p.rank]
            total = sum(p.rank for p in layout.parts)
            self.model.graph.node.append(
                helper.make_node("Concat", shapes, [layout.shapes], name=self.fresh("shapes/Concat"), axis=0)
            )
            new.append(helper.make_tensor_value_info(layout.shapes, onnx.TensorProto.INT64, [total]))
        self.place_outputs(new, declared)

    def flatten(self, x: str, part: PartLayout, tag: str) -> str:
        """Reshape to rank flatten+1 keeping the leading axes; right for zero-size dims too."""
        n, opset = self.layout.flatten, default_opset(self.model)
        assert n is not None
        tail = [d for d in part.dims[n:] if isinstance(d, int)]
        size = math.prod(tail) if len(tail) == len(part.dims[n:]) else None
        if size:  # 0 in a Reshape shape copies the input dim: right for the kept axes
            shape = self.const([0] * n + [size], np.int64, f"{tag}/flat_shape")
            return self.node("Reshape", [x, shape], f"{tag}/flatten")
        if opset < 14:  # no allowzero: -1 cannot be inferred when a kept dim is 0 at run time
            shape = self.const([0] * n + [-1], np.int64, f"{tag}/flat_shape")
            return self.node("Reshape", [x, shape], f"{tag}/flatten")
        if all(isinstance(d, int) for d in part.dims):
            shape = self.const(list(part.dims[:n]) + [size], np.int64, f"{tag}/flat_shape")
        else:
            dims = self.node("Shape", [x], f"{tag}/shape")
            n_const = self.const([n], np.int64, f"{tag}/n")
            head = self.node("Slice", [dims, self.const([0], np.int64, f"{tag}/zero"), n_const], f"{tag}/head")
            rest = self.node("Slice", [dims, n_const, self.const([_INT64_MAX], np.int64, f"{tag}/end")], f"{tag}/tail")
            prod = self.node("ReduceProd", [rest], f"{tag}/tail_size", keepdims=1)
            shape = self.node("Concat", [head, prod], f"{tag}/flat_shape", axis=0)
        return self.node("Reshape", [x, shape], f"{tag}/flatten", allowzero=1)

    def padded(self, blocks: list[str]) -> list[str]:
        layout = self.layout
        aligned = [layout.aligned(i) for i in range(len(blocks))]
        zeros = [0] * layout.rank
        if default_opset(self.model) >= 11:
            value = self.const(np.asarray(layout.pad).astype(layout.np_dtype()), layout.np_dtype(), "pad_value")
        axes = layout.padded_axes
        sizes = [const_ints([a[j] for j in axes]) for a in aligned]
        known = [dict(zip(axes, s, strict=True)) for s in sizes if s is not None]
        if len(known) == len(sizes):
            top = {j: max(k[j] for k in known) for j in axes}
            out = []
            for i, (x, k) in enumerate(zip(blocks, known, strict=True)):
                ends = [top[j] - k[j] if j in axes else 0 for j in range(layout.rank)]
                if any(ends) and default_opset(self.model) < 11:  # Pad(2): attributes, floats
                    assert layout.pad is not None  # a layout with padded axes has its pad
                    x = self.node("Pad", [x], f"part{i}/pad", mode="constant", pads=zeros + ends, value=float(layout.pad))
                elif any(ends):
                    pads = self.const(zeros + ends, np.int64, f"part{i}/pads")
                    x = self.node("Pad", [x, pads, value], f"part{i}/pad")
                out.append(x)
            return out
        shapes = [self.node("Shape", [x], f"part{i}/aligned_shape") for i, x in enumerate(blocks)]
        largest = self.node("Max", shapes, "padded_shape") if len(shapes) > 1 else shapes[0]
        mask = self.const([int(j in layout.padded_axes) for j in range(layout.rank)], np.int64, "pad_mask")
        begin = self.const(zeros, np.int64, "pad_begin")
        out = []
        for i, (x, shape) in enumerate(zip(blocks, shapes, strict=True)):
            gap = self.node("Sub", [largest, shape], f"part{i}/gap")
            pad_ends = self.node("Mul", [gap, mask], f"part{i}/pad_ends")
            pads = self.node("Concat", [begin, pad_ends], f"part{i}/pads", axis=0)
            out.append(self.node("Pad", [x, pads, value], f"part{i}/pad"))
        return out

    def merged_dims(self) -> list[int | str | None]:
        """Declared dims of the merged output: ints, a shared dim_param, else unknown."""
        layout = self.layout
        dims: list[int | str | None] = []
        columns = [[layout.aligned(i)[j] for i in range(len(layout.parts))] for j in range(layout.rank)]
        for j, column in enumerate(columns):
            d: Dim | None
            if j == layout.axis:
                d = dim_sum(column)
            elif j in layout.padded_axes:
                sizes = const_ints(column)
                d = None if sizes is None else Dim.const(max(sizes))
            else:
                d = next((c for c in column if not has_unknown(c)), None)
            if d is None or d.is_const():
                dims.append(None if d is None else d.value)
            else:
                # a plain symbol such as batch; an expression is no dim_param a runtime would match
                dims.append(str(d) if d.is_atom() else None)
        return dims

    def place_outputs(self, new: list[onnx.ValueInfoProto], declared: dict[str, onnx.ValueInfoProto]) -> None:
        graph, layout = self.model.graph, self.layout
        if layout.keep:
            graph.output.extend(new)
            return
        merged = set(layout.part_names)
        first = next(i for i, o in enumerate(graph.output) if o.name in merged)
        kept = [o for o in graph.output if o.name not in merged]
        outputs = kept[:first] + new + kept[first:]
        # A merged-away output is an intermediate now: keep what is known of its type.
        sources = {i.name for i in graph.input} | {t.name for t in graph.initializer}
        have_info = {v.name for v in graph.value_info}
        for n in layout.part_names:
            if n not in sources and n not in have_info:
                graph.value_info.append(declared[n])
                have_info.add(n)
        del graph.output[:]
        graph.output.extend(outputs)
