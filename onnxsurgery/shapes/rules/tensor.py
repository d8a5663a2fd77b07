"""Per-op shape rules for shape vectors and layout ops (see :mod:`onnxsurgery.shapes.rules.core`).

Shape, Size, ConstantOfShape, Reshape (element count kept, ``0``/``-1`` honoured, leading and
trailing dims aligned as soft hints), Flatten, Transpose, Squeeze/Unsqueeze, Concat, Split, Slice,
Gather/GatherElements/GatherND, Expand, Tile, Range, Pad, Reduce*, ArgMax/ArgMin, TopK, NonZero
(a data-dependent count) and OneHot; the traits of CenterCropPad, which has no rule. Integer
constants these ops read as sizes get per-use ``var`` unknowns; the values of shape vectors are
tracked element by element.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import onnx

from onnxsurgery.shapes.analysis import INT_TYPES, MAX_VALUE_ELEMENTS, TensorInfo
from onnxsurgery.shapes.dims import Dim, const_ints, dim_product, dim_sum
from onnxsurgery.shapes.rules.core import (
    NodeCtx,
    broadcast,
    fallback,
    out,
    pick,
    rule,
    with_shapes,
)
from onnxsurgery.shapes.rules.traits import ALL, MixAxis, traits

__all__: list[str] = []


@rule("Shape")
def _shape(ctx: NodeCtx):
    shape = ctx.shape(0)
    if shape is None:
        return fallback(ctx)
    rank = len(shape)
    start = ctx.attr("start", 0)
    end = ctx.attr("end", rank)
    start = max(0, min(rank, start + rank if start < 0 else start))
    end = max(0, min(rank, end + rank if end < 0 else end))
    vals = shape[start:end]
    return [out([Dim.const(len(vals))], onnx.TensorProto.INT64, vals)]


@rule("Size")
def _size(ctx: NodeCtx):
    shape = ctx.shape(0)
    if shape is None:
        return fallback(ctx)
    return [out([], onnx.TensorProto.INT64, [dim_product(shape)])]


@rule("Constant", foldable=False)
def _constant(ctx: NodeCtx):
    return fallback(ctx)


@rule("ConstantOfShape", size_inputs=(0,))
def _constant_of_shape(ctx: NodeCtx):
    vals = ctx.value(0, size=True)
    dtype = onnx.TensorProto.FLOAT
    t = ctx.attr("value")
    if t is not None:
        dtype = t.data_type
    if vals is None:
        return fallback(ctx)
    value = None
    if t is not None and dtype in INT_TYPES and len(vals) <= 1:
        # A small int fill is usually a shape vector (its length a rank, not a size); its values
        # are tracked at the traced length.
        n = int(np.prod([ctx.traced(v) for v in vals])) if vals else 1
        if n <= MAX_VALUE_ELEMENTS:
            fill = int(onnx.numpy_helper.to_array(t).reshape(-1)[0])
            value = [Dim.const(fill)] * n
    return [out(vals, dtype, value)]


@rule("Reshape", size_inputs=(1,))
def _reshape(ctx: NodeCtx):
    info = ctx.info(0, "data")
    # a vector of known values whose length is fixed (pads, a shape) keeps its element count at
    # every size: its target's constants are no sizes (TorchScript's F.pad pairs its amounts
    # with a Reshape to [-1, 2]); read as sizes, its values would be lost
    fixed = info is not None and info.value is not None and _constant_shape(info.shape)
    target = ctx.value(1, size=not fixed)
    if info is None or info.shape is None or target is None:
        return fallback(ctx)
    src = info.shape
    allowzero = ctx.attr("allowzero", 0)
    dims: list[Dim | None] = []
    for k, v in enumerate(target):
        if v.value == 0 and not allowzero:
            dims.append(src[k] if k < len(src) else Dim.const(0))
        elif v.value == -1:
            dims.append(None)
        else:
            dims.append(v)
    total = dim_product(src)
    known = dim_product(d for d in dims if d is not None)
    if None in dims:
        q = total.exact_div(known)
        if q is None:
            tk = ctx.traced(known)
            traced = ctx.traced(total) // tk if tk else 0
            k = dims.index(None)
            q = ctx.derived(traced, 0, k, "Reshape -1 dim")
            ctx.equal(q * known, total, "Reshape keeps the element count")
        dims = [q if d is None else d for d in dims]
    else:
        ctx.equal(known, total, "Reshape keeps the element count")
    result: list[Dim] = [d for d in dims if d is not None]
    if any(ctx.a.unknowns(d) for d in result):
        ctx.a.align(list(src), result, ctx.node)
    value = None
    if info.value is not None and all(d.is_const() for d in result):
        value = info.value
    return [out(result, info.dtype, value)]


def _constant_shape(shape: list[Dim] | None) -> bool:
    """Whether ``shape`` is known and fixed on every axis."""
    return shape is not None and all(d.is_const() for d in shape)


@rule("Flatten")
def _flatten(ctx: NodeCtx):
    info = ctx.info(0, "data")
    if info is None or info.shape is None:
        return fallback(ctx)
    shape = info.shape
    ax = ctx.axis(ctx.attr("axis", 1), len(shape))
    return [out([dim_product(shape[:ax]), dim_product(shape[ax:])], info.dtype)]


@rule("Transpose")
def _transpose(ctx: NodeCtx):
    info = ctx.info(0, "data")
    if info is None or info.shape is None:
        return fallback(ctx)
    perm = ctx.attr("perm") or list(range(len(info.shape)))[::-1]
    value = None
    if info.value is not None and _constant_shape(info.shape):
        value = _moved(info, lambda idx: idx.transpose(perm))
    return [out([info.shape[p] for p in perm], info.dtype, value)]


def _moved(info: TensorInfo, move: Callable[[np.ndarray], np.ndarray]) -> list[Dim] | None:
    """The known values of ``info`` (a fixed shape) after ``move`` rearranges its elements (a
    Transpose, a Slice): ``move`` applied to the elements' flat positions; None where the
    values do not fill the shape."""
    dims = [int(d.value) for d in info.shape or [] if d.value is not None]
    if info.value is None or len(info.value) != math.prod(dims):
        return None
    picked = move(np.arange(len(info.value)).reshape(dims))
    return [info.value[int(i)] for i in picked.reshape(-1)]


def _axes_input(ctx: NodeCtx, attr: str = "axes", index: int = 1) -> list[int] | None:
    axes = ctx.attr(attr)
    if axes is None and ctx.has(index):
        axes = ctx.ints(index)
        if axes is None:
            return None
    return list(axes) if axes is not None else []


@rule("Squeeze", size_inputs=(1,))
def _squeeze(ctx: NodeCtx):
    info = ctx.info(0, "data")
    if info is None or info.shape is None:
        return fallback(ctx)
    shape = info.shape
    axes = _axes_input(ctx)
    if axes is None:
        return fallback(ctx)
    if not axes:
        axes = [k for k, d in enumerate(shape) if ctx.traced(d) == 1]
        if any(not shape[k].is_const() for k in axes):
            ctx.a.note(
                ctx.node, "Squeeze without axes removes a dim that is 1 only at the traced size"
            )
    axes = [ctx.axis(a, len(shape)) for a in axes]
    for a in axes:
        ctx.equal(shape[a], 1, f"Squeeze axis {a} must be 1")
    return [out([d for k, d in enumerate(shape) if k not in axes], info.dtype, info.value)]


@rule("Unsqueeze", size_inputs=(1,))
def _unsqueeze(ctx: NodeCtx):
    info = ctx.info(0, "data")
    if info is None or info.shape is None:
        return fallback(ctx)
    axes = _axes_input(ctx)
    if axes is None:
        return fallback(ctx)
    rank = len(info.shape) + len(axes)
    axes = sorted(ctx.axis(a, rank) for a in axes)
    shape = list(info.shape)
    for a in axes:
        shape.insert(a, Dim.const(1))
    value = info.value
    base = ctx.info(0)
    if base is not None and base.value is not None:
        value = base.value
    return [out(shape, info.dtype, value)]


@rule("Concat")
def _concat(ctx: NodeCtx):
    plain = with_shapes([ctx.info(i) for i in range(ctx.n_inputs())])
    if plain is None:
        return fallback(ctx)
    shape_vec = all(i.value is not None and (i.rank or 0) <= 1 for i in plain[0])
    found = with_shapes(
        [ctx.info(i, "size" if shape_vec else "data") for i in range(ctx.n_inputs())]
    )
    if found is None:
        return fallback(ctx)
    infos, shapes = found
    first = shapes[0]
    rank = len(first)
    ax = ctx.axis(ctx.attr("axis", 0), rank)
    shape = list(first)
    for other in shapes[1:]:
        for k in range(rank):
            if k != ax and other[k] != first[k]:
                ctx.equal(other[k], first[k], f"Concat inputs agree on axis {k}")
    shape[ax] = dim_sum(s[ax] for s in shapes)
    shape = [pick(ctx, [d] + [s[k] for s in shapes]) if k != ax else d for k, d in enumerate(shape)]
    values = [i.value for i in infos if i.value is not None]
    value = [v for vs in values for v in vs] if shape_vec and len(values) == len(infos) else None
    return [out(shape, infos[0].dtype, value)]


@rule("Split", size_inputs=(1,))
def _split(ctx: NodeCtx):
    info = ctx.info(0, "data")
    if info is None or info.shape is None:
        return fallback(ctx)
    shape = info.shape
    ax = ctx.axis(ctx.attr("axis", 0), len(shape))
    n = len(ctx.node.output)
    sizes: list[Dim] | None = None
    if ctx.has(1):
        sizes = ctx.value(1, size=True)
        if sizes is None:  # computed from the data (an MoE's tokens per expert): run time,
            # the last part what the others leave of the axis (ONNX Runtime checks the sum)
            static = [ctx.static_shape(k) for k in range(n)]
            known = [t for s in static if s and len(s) > ax and (t := s[ax]) is not None]
            # not inferred: any split of the traced axis is as good
            traced = known if len(known) == n else [ctx.traced(shape[ax]) // n] * n
            parts = [ctx.opaque(t, k, ax, note="Split size") for k, t in enumerate(traced[:-1])]
            parts.append(shape[ax] - dim_sum(parts))
            return [out([*shape[:ax], p, *shape[ax + 1 :]], info.dtype) for p in parts]
    elif ctx.attr("split") is not None:
        sizes = [Dim.const(s) for s in ctx.attr("split")]
    if sizes is None:
        d = shape[ax]
        chunk = ctx.div(d, n, axis=ax, ceil=True, exact=True)
        last = d - chunk * (n - 1)
        sizes = [chunk] * (n - 1) + [last]
    else:
        ctx.equal(dim_sum(sizes), shape[ax], "Split sizes add up to the split axis")
    outs = []
    for s in sizes[:n]:
        new = list(shape)
        new[ax] = s
        outs.append(out(new, info.dtype))
    return outs


@rule("Slice", size_inputs=(1, 2, 3, 4))
def _slice(ctx: NodeCtx):
    base = ctx.info(0)
    if base is None or base.shape is None:
        return fallback(ctx)
    vector = base.value is not None and (base.rank or 0) == 1
    # a fixed-shape tensor of known values (pads as [n, 2] pairs) is sliced element-wise too
    small = base.value is not None and not vector and _constant_shape(base.shape)
    vector = vector or small
    info = base if vector else ctx.info(0, "data")
    if info is None or info.shape is None:
        return fallback(ctx)
    shape = list(info.shape)
    starts: list[Dim] | None
    ends: list[Dim] | None
    axes: list[int] | None
    steps: list[int] | None
    if ctx.opset < 10:
        starts = [Dim.const(v) for v in ctx.attr("starts", [])]
        ends = [Dim.const(v) for v in ctx.attr("ends", [])]
        axes = ctx.attr("axes") or list(range(len(starts)))
        steps = [1] * len(starts)
    else:
        starts = ctx.value(1, size=not vector)
        ends = ctx.value(2, size=not vector)
        axes = ctx.ints(3) if ctx.has(3) else None
        steps = ctx.ints(4) if ctx.has(4) else None
        if (
            starts is None
            or ends is None
            or (ctx.has(3) and axes is None)
            or (ctx.has(4) and steps is None)
        ):
            return fallback(ctx)
        axes = axes if axes is not None else list(range(len(starts)))
        steps = steps if steps is not None else [1] * len(starts)
    if small and all(x.value is not None for x in (*starts, *ends)):
        return [out(*_sliced(base, starts, ends, axes, steps, ctx))]
    if small:  # bounds computed at run time: sliced as data
        vector, info = False, ctx.info(0, "data")
        if info is None or info.shape is None:
            return fallback(ctx)
        shape = list(info.shape)
    value = list(base.value) if vector and base.value is not None else None
    for s, e, a, st in zip(starts, ends, axes, steps, strict=False):
        a = ctx.axis(a, len(shape))
        d = shape[a]
        sv, ev = s.value, e.value
        if value is not None and sv is not None and ev is not None:
            idx = range(len(value))[slice(sv, ev, st)]
            value = [value[i] for i in idx]
            shape[a] = Dim.const(len(value))
            continue
        value = None
        shape[a] = _slice_len(ctx, d, s, e, st, a)
    return [out(shape, info.dtype, value)]


def _sliced(
    info: TensorInfo,
    starts: list[Dim],
    ends: list[Dim],
    axes: list[int],
    steps: list[int],
    ctx: NodeCtx,
) -> tuple[list[Dim], int, list[Dim] | None]:
    """Shape, dtype and values of a Slice of a fixed-shape tensor of known values (``info``) by
    bounds that are numbers."""
    rank = len(info.shape or [])
    cuts: list[slice] = [slice(None)] * rank
    for s, e, a, st in zip(starts, ends, axes, steps, strict=False):
        cuts[ctx.axis(a, rank)] = slice(s.value, e.value, st)
    kept: list[int] = []
    value = _moved(info, lambda idx: _keep_shape(idx[tuple(cuts)], kept))
    if value is None:  # values that do not fill the shape: the shape alone
        dims = [d.value or 0 for d in info.shape or []]
        kept = list(np.empty(dims, dtype=np.int8)[tuple(cuts)].shape)
    return [Dim.const(n) for n in kept], info.dtype, value


def _keep_shape(arr: np.ndarray, kept: list[int]) -> np.ndarray:
    kept[:] = list(arr.shape)
    return arr


def _slice_len(ctx: NodeCtx, d: Dim, s: Dim, e: Dim, step: int, axis: int) -> Dim:
    """Length of ``x[s:e:step]`` along an axis of size ``d`` (bounds clamped as ONNX does)."""
    td = ctx.traced(d)

    def bound(x: Dim) -> Dim:
        v = x.value
        if v is not None:
            if v >= 2**31 - 1:
                return d
            if v < 0:
                return d + v if td + v >= 0 else Dim.const(0)
            return d if v >= td and v > 0 else x  # 0 is the start at every size, even of an
            # axis empty at the trace (a NonZero count: no masked token in the traced input)
        tx = ctx.traced(x)
        if tx < 0:  # counted from the end (``x[:, -seq:]``): a negated unknown
            if td + tx < 0:
                return Dim.const(0)
            if td + tx == 0:
                ctx.suggest(-x, d, f"Slice bound from the end spans the whole axis {axis}")
            return d + x
        if tx > td:
            return d
        if tx == td:
            ctx.suggest(x, d, f"Slice bound equals the whole axis {axis}")
        return x

    if step > 0:
        n = bound(e) - bound(s)
        if step != 1:
            n = ctx.div(n, step, axis=axis, ceil=True)
    else:
        sv, ev = s.value, e.value
        if sv is not None and sv >= td:
            s2 = d - 1
        elif sv is not None and sv < 0:
            s2 = d + sv
        else:
            s2 = s
        if ev is not None and ev < -td:
            e2: Dim = Dim.const(-1)
        elif ev is not None and ev < 0:
            e2 = d + ev
        else:
            e2 = e
        n = ctx.div(s2 - e2, -step, axis=axis, ceil=True)
    if ctx.traced(n) < 0:
        return Dim.const(0)
    return n


@rule("Gather")
def _gather(ctx: NodeCtx):
    base = ctx.info(0)
    idx = ctx.info(1)
    if base is None or base.shape is None or idx is None or idx.shape is None:
        return fallback(ctx)
    vector = base.value is not None and (base.rank or 0) <= 1
    info = ctx.info(0, "size") if vector else base
    # Constant indices into a tensor (positions 0..S-1) may carry a traced length in their dims.
    idx_shape = idx.shape if vector or not idx.shape else ctx.shape(1, data=True)
    if info is None or info.shape is None or idx_shape is None:
        return fallback(ctx)
    shape = info.shape
    ax = ctx.axis(ctx.attr("axis", 0), len(shape))
    if not vector:
        _gather_spans(ctx, shape[ax], idx_shape)
    out_shape = shape[:ax] + idx_shape + shape[ax + 1 :]
    value = None
    if vector and info.value is not None and idx.value is not None:
        n = len(info.value)
        picked = [ctx.traced(v) for v in idx.value]
        if all(v.is_const() and -n <= t < n for v, t in zip(idx.value, picked, strict=True)):
            value = [info.value[t + n if t < 0 else t] for t in picked]
    return [out(out_shape, base.dtype, value)]


def _gather_spans(ctx: NodeCtx, axis: Dim, idx: list[Dim]) -> None:
    """Constant indices that are 0 .. n-1 in order, n the traced length of the axis they read
    (every element of a flattened mask, gathered back into a grid): soft-tie the product of the
    index dims to that axis, so the grid and what it reads are sized alike (a product the solver
    splits symbol by symbol, like a Reshape's middle dims).

    Left out where the axis holds a size traced at 1 and the grid a dim traced at 1: the traced
    sizes cannot show which grid dim that size spans (Swin's pooler by dynamo at batch 1 reads
    ``[batch*32]`` with a ``[1, 32, 1, 1]`` grid, whose 1 is the batch: tying the 32 to
    ``batch*32`` sized the pooled features by the batch); a batch among them is found by the
    gather it indexes (:mod:`passes.symbolize.batch_indices`)."""
    arr = ctx.a.consts.get(ctx.node.input[1])
    if arr is None or arr.dtype.kind not in "iu" or arr.ndim != len(idx) or arr.size < 2:
        return
    if axis.is_const() or arr.size != ctx.traced(axis) or all(d.is_const() for d in idx):
        return
    if 1 in arr.shape and any(ctx.a.atoms[x].traced == 1 for x in axis.atoms()):
        return
    if np.array_equal(arr.reshape(-1), np.arange(arr.size)):
        spans = dim_product(d for d in idx if ctx.traced(d) != 1)  # a 1 only broadcasts
        ctx.suggest(spans, axis, "Gather indices enumerate the whole axis")


@rule("GatherElements")
def _gather_elements(ctx: NodeCtx):
    idx = ctx.shape(1, data=True)
    data = ctx.shape(0, data=True)
    if idx is None or data is None:
        return fallback(ctx)
    ax = ctx.axis(ctx.attr("axis", 0), len(data))
    for k in range(len(data)):
        # No broadcasting here: indices cover the data on every other axis.
        if k != ax and ctx.traced(idx[k]) == ctx.traced(data[k]):
            ctx.suggest(idx[k], data[k], "GatherElements indices span the data's other axes")
    return [out(idx, ctx.dtype(0))]


@rule("GatherND")
def _gather_nd(ctx: NodeCtx):
    data, idx, plain = ctx.shape(0), ctx.shape(1, data=True), ctx.shape(1)
    if data is None or idx is None or plain is None or not plain:
        return fallback(ctx)
    b = ctx.attr("batch_dims", 0)
    # the index tuple's length is fixed (how many data axes it addresses), even where the
    # indices are a Concat of a constant read as data (CLIP's [arange(batch), argmax])
    last = int(plain[-1].value if plain[-1].value is not None else ctx.traced(plain[-1]))
    if b + last > len(data):
        return fallback(ctx)
    _gather_nd_spans(ctx, data, idx, b, last)
    return [out(idx[:-1] + data[b + last :], ctx.dtype(0))]


def _gather_nd_spans(ctx: NodeCtx, data: list[Dim], idx: list[Dim], b: int, last: int) -> None:
    """A constant index grid whose component ``c`` counts 0 .. n-1 along one of its axes, n the
    traced length of the data axis it reads (a mask read at every key position): soft-tie that
    index axis to the data axis, as a Slice bound equal to the whole axis is."""
    arr = ctx.a.consts.get(ctx.node.input[1])
    if arr is None or arr.ndim != len(idx) or arr.shape[-1] != last or arr.dtype.kind not in "iu":
        return
    for c in range(last):
        if b + c >= len(data) or data[b + c].is_const():
            continue
        comp = arr[..., c]
        for k in range(comp.ndim):
            n = comp.shape[k]
            if idx[k].is_const() or n < 2 or n != ctx.traced(data[b + c]):
                continue
            shape = [1] * comp.ndim
            shape[k] = n
            if np.array_equal(comp, np.broadcast_to(np.arange(n).reshape(shape), comp.shape)):
                ctx.suggest(idx[k], data[b + c], f"GatherND index counts the whole axis {b + c}")


@rule("Expand", size_inputs=(1,), broadcasts=True)
def _expand(ctx: NodeCtx):
    info = ctx.info(0, "data")
    target = ctx.value(1, size=True)
    if info is None or info.shape is None or target is None:
        return fallback(ctx)
    shape = broadcast(ctx, [info.shape, target], "Expand input and shape")
    value = None
    sizes = const_ints(shape)
    if info.value is not None and len(info.value) == 1 and sizes is not None:
        n = int(np.prod(sizes)) if shape else 1
        if n <= MAX_VALUE_ELEMENTS:
            value = info.value * n
    return [out(shape, info.dtype, value)]


@rule("Tile", size_inputs=(1,))
def _tile(ctx: NodeCtx):
    info = ctx.info(0, "data")
    reps = ctx.value(1, size=True)
    if info is None or info.shape is None or reps is None:
        return fallback(ctx)
    return [out([d * r for d, r in zip(info.shape, reps, strict=False)], info.dtype)]


@rule("Range", size_inputs=(0, 1, 2))
def _range(ctx: NodeCtx):
    start, limit = ctx.value(0, size=True), ctx.value(1, size=True)
    delta = ctx.value(2)
    if start is None or limit is None or delta is None:
        return fallback(ctx)
    s, lim, dl = start[0], limit[0], delta[0]
    td = ctx.traced(dl)
    if dl.is_const() and td == 1:
        n = lim - s
    elif dl.is_const() and td == -1:
        n = s - lim
    elif dl.is_const() and td > 0:
        n = ctx.div(lim - s, td, axis=0, ceil=True)
    else:
        n = ctx.opaque(max(0, -(-(ctx.traced(lim) - ctx.traced(s)) // td)) if td else 0, axis=0)
    value = None
    nv, sv = n.value, s.value
    if nv is not None and sv is not None and dl.is_const() and 0 <= nv <= MAX_VALUE_ELEMENTS:
        value = [Dim.const(sv + i * td) for i in range(nv)]
    elif (
        n.is_const() is False and dl.is_const() and td == 1 and ctx.traced(n) <= MAX_VALUE_ELEMENTS
    ):
        value = None
    return [out([n], ctx.dtype(0), value)]


@rule("Pad", size_inputs=(1,))
def _pad(ctx: NodeCtx):
    info = ctx.info(0, "data")
    if info is None or info.shape is None:
        return fallback(ctx)
    shape = list(info.shape)
    rank = len(shape)
    pads: list[Dim] | None
    if ctx.opset < 11:
        pads = [Dim.const(p) for p in ctx.attr("pads", [])]
    else:
        pads = ctx.value(1, size=True)
    if pads is None:
        return fallback(ctx)
    axes = ctx.ints(3) if ctx.has(3) else list(range(rank))
    if axes is None:
        return fallback(ctx)
    n = len(axes)
    for k, a in enumerate(axes):
        a = ctx.axis(a, rank)
        shape[a] = shape[a] + pads[k] + pads[k + n]
    return [out(shape, info.dtype)]


@rule(
    "ReduceMean",
    "ReduceSum",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceSumSquare",
    mixes_rows=(MixAxis(attr="axes", axes_input=1, default=ALL),),
)
def _reduce(ctx: NodeCtx):
    info = ctx.info(0, "data")
    if info is None or info.shape is None:
        return fallback(ctx)
    shape = info.shape
    axes = ctx.attr("axes")
    if axes is None and ctx.has(1):
        axes = ctx.ints(1)
        if axes is None:
            return fallback(ctx)
    keep = ctx.attr("keepdims", 1)
    if not axes:
        if ctx.attr("noop_with_empty_axes", 0):
            return [out(shape, info.dtype, info.value)]
        axes = list(range(len(shape)))
    axes = {ctx.axis(a, len(shape)) for a in axes}
    new = [Dim.const(1) if k in axes else d for k, d in enumerate(shape) if keep or k not in axes]
    value = None
    base = ctx.info(0)
    if base is not None and base.value is not None and len(shape) <= 1 and not keep:
        if ctx.node.op_type == "ReduceProd":
            value = [dim_product(base.value)]
        elif ctx.node.op_type == "ReduceSum":
            value = [dim_sum(base.value)]
    return [out(new, info.dtype, value)]


@rule("ArgMax", "ArgMin", mixes_rows=(MixAxis(attr="axis", default=0),))
def _argmax(ctx: NodeCtx):
    shape = ctx.shape(0)
    if shape is None:
        return fallback(ctx)
    ax = ctx.axis(ctx.attr("axis", 0), len(shape))
    keep = ctx.attr("keepdims", 1)
    new = [Dim.const(1) if k == ax else d for k, d in enumerate(shape) if keep or k != ax]
    return [out(new, onnx.TensorProto.INT64)]


@rule("TopK", size_inputs=(1,), mixes_rows=(MixAxis(attr="axis", default=-1),))
def _topk(ctx: NodeCtx):
    shape = ctx.shape(0)
    k = ctx.value(1, size=True) if ctx.has(1) else [Dim.const(ctx.attr("k", 1))]
    if shape is None or k is None:
        return fallback(ctx)
    ax = ctx.axis(ctx.attr("axis", -1), len(shape))
    new = list(shape)
    new[ax] = k[0]
    return [out(new, ctx.dtype(0)), out(new, onnx.TensorProto.INT64)]


@rule("NonZero")
def _nonzero(ctx: NodeCtx):
    shape = ctx.shape(0)
    static = ctx.static_shape(0)
    if shape is None:
        return fallback(ctx)
    traced = static[1] if static and len(static) == 2 and static[1] is not None else 0
    n = ctx.opaque(traced or 0, 0, 1, note="NonZero count (data-dependent)")
    return [out([Dim.const(len(shape)), n], onnx.TensorProto.INT64)]


@rule("OneHot", size_inputs=(1,))
def _onehot(ctx: NodeCtx):
    idx = ctx.shape(0)
    depth = ctx.value(1, size=True)
    if idx is None or depth is None:
        return fallback(ctx)
    rank = len(idx) + 1
    ax = ctx.axis(ctx.attr("axis", -1), rank)
    new = list(idx)
    new.insert(ax, depth[0])
    return [out(new, ctx.dtype(2))]


traits("CenterCropPad", size_inputs=(1,))  # ONNX inference sizes it; its shape input is a size
