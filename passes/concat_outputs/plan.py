"""Plan concat-outputs' merge: read each output's type, check dtypes, ranks, axis and padding, and
produce the :class:`~onnxsurgery.merged_outputs.Layout` the graph emission (``graph.py``) builds."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import NoReturn

import numpy as np
import onnx

from onnxsurgery.merged_outputs import (
    Layout,
    PartDim,
    PartLayout,
    has_unknown,
    render_dim,
    show_symbol,
)
from onnxsurgery.model.dtypes import dtype_name, is_lossless_cast, np_dtype, parse_dtype
from onnxsurgery.model.walk import default_opset
from onnxsurgery.pipeline.contract import Diagnostic
from onnxsurgery.shapes.dims import Dim

__all__ = ["LayoutOptions", "plan_layout", "show_dims"]

_GENERATED = re.compile(r"unk__\d+")


@dataclass(frozen=True)
class LayoutOptions:
    """The pass's options that shape the layout (see :class:`ConcatOutputs` for each)."""

    name: str
    axis: int | None
    flatten: int | None
    elem_type: int | None
    lossy: bool
    pad: float | int | None
    keep: bool


def plan_layout(
    model: onnx.ModelProto,
    infos: Sequence[onnx.ValueInfoProto],
    options: LayoutOptions,
    fail: Callable[[str], NoReturn],
) -> tuple[Layout, list[Diagnostic]]:
    """The layout of the merged output for the outputs ``infos``, and what to tell the user.

    Every check happens here, before the graph is touched; ``fail`` raises the pass's error.
    """
    notes: list[Diagnostic] = []
    names, types, dims = _read_outputs(model, infos, fail)
    target, lossy = _target_dtype(names, types, options, fail, notes)
    rank, axis = _rank_and_axis(dims, names, options, fail)
    parts = tuple(
        PartLayout(n, dtype_name(t), tuple(d), cast=t != target)
        for n, t, d in zip(names, types, dims, strict=True)
    )
    draft = Layout(options.name, axis, rank, dtype_name(target), parts, flatten=options.flatten)
    padded = _padded_axes(draft, options, fail, notes)
    if padded:
        _check_pad_value(options.pad, target, fail)
        if not all(draft.aligned(i)[j].is_const() for i in range(len(parts)) for j in padded):
            if default_opset(model) < 12:
                fail("pad= with symbolic dims needs opset >= 12 (Max on int64)")
    parts = tuple(
        replace(p, start=render_dim(b[0]), stop=render_dim(b[1]))
        for p, b in zip(parts, draft.bounds(), strict=True)
    )
    layout = Layout(
        options.name, axis, rank, dtype_name(target), parts, keep=options.keep,
        flatten=options.flatten, pad=options.pad, padded_axes=tuple(padded), lossy=lossy,
    )  # fmt: skip
    unresolved = layout.unresolved()
    if unresolved:
        layout = replace(layout, shapes=f"{options.name}_shapes")
        notes.append(Diagnostic.info(
            f"added output {layout.shapes!r} (int64, the parts' shapes): the merged shape "
            f"alone does not tell {', '.join(sorted(show_symbol(s) for s in unresolved))}"
        ))  # fmt: skip
    _check_opset(default_opset(model), layout, fail)
    layout.check()
    return layout, notes


def _read_outputs(
    model: onnx.ModelProto, infos: Sequence[onnx.ValueInfoProto], fail: Callable[[str], NoReturn]
) -> tuple[list[str], list[int], list[list[PartDim]]]:
    """Each output's name, element type and dims (shape inference's ``unk__N`` read as unknown)."""
    names = [i.name for i in infos]
    types, dims = [], []
    ours = _dim_params(model.graph)
    for info in infos:
        elem, shape = _tensor_type(info, fail)
        types.append(elem)
        # ONNX shape inference names dims it cannot tell unk__N: they are unknown to us
        dims.append([None if isinstance(d, str) and _GENERATED.fullmatch(d) and d not in ours else d
                     for d in shape])  # fmt: skip
    return names, types, dims


def _target_dtype(
    names: list[str],
    types: list[int],
    options: LayoutOptions,
    fail: Callable[[str], NoReturn],
    notes: list[Diagnostic],
) -> tuple[int, bool]:
    """The merged element type, and whether a cast to it loses information (allowed by lossy=)."""
    target = options.elem_type
    if target is None:
        first = next((i for i, t in enumerate(types) if t != types[0]), None)
        if first is not None:
            fail(
                f"outputs {names[0]!r} ({dtype_name(types[0])}) and {names[first]!r} "
                f"({dtype_name(types[first])}) have different dtypes; pass dtype= (e.g. "
                f"dtype={dtype_name(types[0])}) to cast every part to one type"
            )
        target = types[0]
    lossy = False
    for n, t in zip(names, types, strict=True):
        if t != target and onnx.TensorProto.STRING in (t, target):
            fail(f"output {n!r} is {dtype_name(t)}: strings and numbers cannot be cast to one type")
        if is_lossless_cast(t, target):
            continue
        if not options.lossy:
            fail(
                f"casting output {n!r} from {dtype_name(t)} to {dtype_name(target)} loses "
                f"information; pass lossy=true to allow it, or a dtype that holds {dtype_name(t)}"
            )
        lossy = True
        notes.append(Diagnostic.warning(
            f"cast {n!r} {dtype_name(t)} -> {dtype_name(target)} loses information "
            "(lossy=true): split_outputs is exact only for values the merged type holds"
        ))  # fmt: skip
    return target, lossy


def _rank_and_axis(
    dims: list[list[PartDim]], names: list[str], options: LayoutOptions, fail: Callable[[str], NoReturn]
) -> tuple[int, int]:
    """The common rank after flatten= and unsqueezing, and the concat axis in it (non-negative)."""
    if options.flatten is not None:
        for n, d in zip(names, dims, strict=True):
            if len(d) < options.flatten:
                fail(
                    f"flatten={options.flatten} keeps {options.flatten} leading axes, but output "
                    f"{n!r} has rank {len(d)} (dims {show_dims(d)})"
                )
        rank = options.flatten + 1
    else:
        rank = max(1, *(len(d) for d in dims))
    axis = rank - 1 if options.axis is None else options.axis
    if not -rank <= axis < rank:
        fail(
            f"axis={options.axis} is out of range for outputs of rank {rank} after alignment "
            f"(valid: {-rank}..{rank - 1})"
        )
    return rank, axis % rank


def _padded_axes(
    draft: Layout, options: LayoutOptions, fail: Callable[[str], NoReturn], notes: list[Diagnostic]
) -> list[int]:
    """The axes other than the concat axis whose dims differ, so pad= pads them; without pad= a
    known difference is an error and an unknown one a warning."""
    names = [p.name for p in draft.parts]  # not part_names: a name listed twice is two parts
    padded = []
    for j in range(draft.rank):
        if j == draft.axis:
            continue
        column = [draft.aligned(i)[j] for i in range(len(draft.parts))]
        known = list(dict.fromkeys(c for c in column if not has_unknown(c)))
        if len(known) > 1:
            if options.pad is None:
                i1, i2 = column.index(known[0]), column.index(known[1])
                fail(
                    f"outputs {names[i1]!r} and {names[i2]!r} differ in dim {j} "
                    f"({render_dim(known[0])} vs {render_dim(known[1])}; shapes after alignment "
                    f"{show_dims(draft.aligned(i1))} and {show_dims(draft.aligned(i2))}), so they "
                    f"cannot be concatenated on axis {draft.axis}; pass pad=VALUE to pad to the "
                    "largest, flatten=N, another axis=, or fewer outputs="
                )
            padded.append(j)
        elif len(known) < len(set(column)):
            if options.pad is not None:
                padded.append(j)
            else:
                notes.append(Diagnostic.warning(
                    f"dim {j} is unknown for some outputs ({show_dims(column)}): ONNX Runtime's "
                    "Concat checks at run time that it agrees"
                ))  # fmt: skip
    return padded


#: Pad(2) (opsets 2-10) takes pads and value as attributes and pads only these.
_PAD2_TYPES = frozenset({onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE})


def _check_opset(opset: int, layout: Layout, fail: Callable[[str], NoReturn]) -> None:
    """Refuse, naming the op, what the nodes graph.py emits cannot express at ``opset``.

    Concat, Shape and Unsqueeze (axes attribute below opset 13) exist at every opset; the rest
    came later: Cast with an integer ``to`` at 6, Reshape with a shape input at 5, Pad with
    computed pads (and a value of any type) at 11.
    """
    where = f"the model imports opset {opset}"
    if opset < 6 and any(p.cast for p in layout.parts):
        fail(f"dtype= casts need Cast(6) (opset >= 6); {where}")
    if opset < 5 and layout.flatten is not None and any(
        p.rank != layout.flatten + 1 for p in layout.parts
    ):
        fail(f"flatten= needs Reshape(5) with a shape input (opset >= 5); {where}")
    if layout.padded_axes and opset < 11:
        target = parse_dtype(layout.dtype)
        if target not in _PAD2_TYPES:
            fail(
                f"pad= on {layout.dtype} outputs needs Pad(11) (opset >= 11); {where}, whose "
                "Pad(2) pads only float16/float/double"
            )

def _check_pad_value(value: float | int | None, target: int, fail: Callable[[str], NoReturn]) -> None:
    dt = np_dtype(target)
    assert value is not None
    if target == onnx.TensorProto.STRING:
        fail(f"pad={value!r}: string outputs cannot be padded")
    if dt.kind in "iub":
        ok = float(value).is_integer() and (
            value in (0, 1) if dt.kind == "b" else np.iinfo(dt).min <= value <= np.iinfo(dt).max
        )
    else:
        with np.errstate(all="ignore"):
            back = float(np.asarray(value, dtype=np.float64).astype(dt).astype(np.float64))
        ok = math.isnan(value) or back == value
    if not ok:
        fail(f"pad={value!r} cannot be held exactly by the merged dtype {dtype_name(target)}")


# -- reading types --------------------------------------------------------------------------------
def _tensor_type(info: onnx.ValueInfoProto, fail) -> tuple[int, list[PartDim]]:
    if not info.type.HasField("tensor_type"):
        kind = info.type.WhichOneof("value") or "untyped"
        fail(f"output {info.name!r} is a {kind.replace('_type', '')}, not a tensor; only tensors can be merged")
    tt = info.type.tensor_type
    if tt.elem_type == onnx.TensorProto.UNDEFINED:
        fail(f"output {info.name!r} has no known element type; run infer-shapes first")
    if not tt.HasField("shape"):
        fail(
            f"output {info.name!r} has unknown rank even after shape inference; concat-outputs "
            "needs every output's rank"
        )
    dims: list[PartDim] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return tt.elem_type, dims


def show_dims(dims: Sequence[PartDim | Dim]) -> str:
    shown = [render_dim(d) if isinstance(d, Dim) else ("?" if d is None else d) for d in dims]
    return "[" + ", ".join(map(str, shown)) + "]"


def _dim_params(graph: onnx.GraphProto) -> set[str]:
    """The dim_params the model itself declares (inputs, outputs, value_info)."""
    values = [*graph.input, *graph.output, *graph.value_info]
    return {
        d.dim_param
        for v in values
        if v.type.HasField("tensor_type")
        for d in v.type.tensor_type.shape.dim
        if d.HasField("dim_param")
    }
