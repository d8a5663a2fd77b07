"""What an export baked in at the traced size that the graph alone cannot generalize, found so
that symbolize refuses it by name, or lets reference cases decide: TensorFlow 'same' padding
(a Pad before a strided window op, or uneven pads folded into it), a learned table over a patch
grid (DINOv2's position embeddings), and tables that depend only on j - i (a relative-position
bias folded by the exporter). The sizes of a Resize to a patch grid folded at the traced grid
(YOLOS by TorchScript) are found here too, and tied to the grid (:func:`grid_resizes`). The
'same' padding blocker is the rule :class:`~.graph_blockers.SamePadding`, made of
:func:`window`, :func:`baked_axes`, :func:`same_everywhere` and :func:`tf_padding`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from onnxsurgery.passes.symbolize.blockers import Blocker
from onnxsurgery.passes.symbolize.coincident import tie
from onnxsurgery.passes.symbolize.wording import (
    axes_text,
    dim_text,
    fix_lead,
    input_symbols,
    sym_tuple,
    why_text,
)
from onnxsurgery.shapes.analysis import Constraint, ConstUse, ShapeAnalysis
from onnxsurgery.shapes.dims import Dim
from onnxsurgery.shapes.solver import Solution, solve

__all__ = [
    "GridTable",
    "WINDOW_OPS",
    "same_total",
    "Window",
    "window",
    "same_everywhere",
    "baked_axes",
    "tf_padding",
    "pad_before",
    "grid_table",
    "grid_axes",
    "grid_resizes",
    "relative_axes",
]


@dataclass
class GridTable:
    """A [1, lead + h*w, dim] table (or one repeated over a batch) read by ``node`` (input
    ``index``, tensor ``tensor``) whose ``h*w`` rows are a grid of the traced size of axes 2, 3
    of ``grid`` (a patch embedding's output), after ``lead`` rows that do not move (class
    tokens). A sequence's table is a grid of one axis: its ``n`` rows follow axis ``axes[0]``
    of ``grid`` (a model input: the sequence length), ``shape`` ``(n,)``."""

    node: str
    index: int
    tensor: str
    grid: str
    lead: int
    shape: tuple[int, ...]
    axes: tuple[int, ...] = (2, 3)


WINDOW_OPS = ("Conv", "MaxPool", "AveragePool", "LpPool")


def same_total(length: int, kernel: int, stride: int) -> int:
    """TensorFlow's 'same' padding (ONNX ``auto_pad=SAME_UPPER``) of one axis: the total."""
    return max((-(-length // stride) - 1) * stride + kernel - length, 0)


@dataclass
class Window:
    """A strided window op as 'same' padding reads it: its input's shape, kernel, strides,
    dilations, own pads, and the constant Pad before it (None) with its (begin, end) per axis."""

    node: onnx.NodeProto
    shape: list[Dim]
    kernel: list[int]
    strides: list[int]
    dilations: list[int]
    own: list[int]
    pad_node: onnx.NodeProto | None
    before: list[tuple[int, int]] | None

    def extra(self, i: int) -> tuple[int, int]:
        """What the Pad before adds on spatial axis ``i``."""
        return self.before[2 + i] if self.before else (0, 0)

    def span(self, i: int) -> int:
        return (self.kernel[i] - 1) * self.dilations[i] + 1


def window(a: ShapeAnalysis, node: onnx.NodeProto) -> Window | None:
    """``node`` as a :class:`Window`, or None: no window op, ``auto_pad`` set, shape unknown."""
    if node.op_type not in WINDOW_OPS:
        return None
    attrs = {x.name: onnx.helper.get_attribute_value(x) for x in node.attribute}
    if attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        return None
    x = a.tensors.get(node.input[0])
    if x is None or x.shape is None or len(x.shape) < 3:
        return None
    nsp = len(x.shape) - 2
    kernel = attrs.get("kernel_shape")
    if kernel is None and len(node.input) > 1 and a.consts.get(node.input[1]) is not None:
        kernel = list(a.consts[node.input[1]].shape[2:])
    if kernel is None or len(kernel) != nsp:
        return None
    strides = attrs.get("strides") or [1] * nsp
    dilations = attrs.get("dilations") or [1] * nsp
    own = attrs.get("pads") or [0] * (2 * nsp)
    pad_node, before = pad_before(a, node.input[0], len(x.shape))
    return Window(node, list(x.shape), kernel, strides, dilations, own, pad_node, before)


def same_everywhere(a: ShapeAnalysis, w: Window) -> bool:
    """Whether every spatial axis is padded as ``auto_pad=SAME_UPPER`` pads it when traced."""
    nsp = len(w.kernel)
    same = not w.before or w.before[0] == w.before[1] == (0, 0)
    for i in range(nsp):
        extra = w.extra(i)
        length = a.traced(w.shape[2 + i]) - extra[0] - extra[1]
        total = same_total(length, w.span(i), w.strides[i])
        if (w.own[i] + extra[0], w.own[i + nsp] + extra[1]) != (total // 2, total - total // 2):
            same = False
    return same


def baked_axes(
    a: ShapeAnalysis, sol: Solution, w: Window
) -> list[tuple[int, Dim, int, tuple[int, int], str]]:
    """(axis, dim, traced length, pads, the pads 'same' gives at other lengths) of each strided
    symbolic axis padded exactly as 'same' pads its traced length, that length's parity showing."""
    nsp = len(w.kernel)
    found = []
    for i in range(nsp):
        d = sol.resolve(w.shape[2 + i])
        if w.strides[i] < 2 or d.is_const():
            continue
        extra = w.extra(i)
        length = a.traced(d) - extra[0] - extra[1]
        if w.pad_node is not None:
            src = a.tensors.get(w.pad_node.input[0])
            if src is not None and src.shape is not None:
                d = sol.resolve(src.shape[2 + i])
        b, e = w.own[i] + extra[0], w.own[i + nsp] + extra[1]
        if w.pad_node is None and b == e:
            continue  # a convolution's own even padding: fixed in torch too
        k, stride = w.span(i), w.strides[i]
        total = same_total(length, k, stride)
        if (b, e) != (total // 2, total - total // 2):
            continue
        other = {(length + r) % stride: same_total(length + r, k, stride) for r in range(1, stride)}
        alt = ", ".join(
            f"({t // 2}, {t - t // 2}) at lengths {m} mod {stride}"
            for m, t in sorted(other.items())
            if t != total
        )
        if alt:
            found.append((2 + i, d, length, (b, e), alt))
    return found


def tf_padding(
    a: ShapeAnalysis,
    sol: Solution,
    w: Window,
    found: list[tuple[int, Dim, int, tuple[int, int], str]],
) -> Blocker:
    """The blocker for a window op padded 'same' at the traced size (kind ``tf-padding``)."""
    node = w.node
    where = w.pad_node if w.pad_node is not None else node
    syms = ", ".join(sorted(input_symbols(a, sol, set().union(*(f[1].atoms() for f in found)))))
    fields = {
        "pads": " and ".join(f"({b}, {e}) on axis {ax}" for ax, _, _, (b, e), _ in found),
        "stride": "x".join(str(s) for s in w.strides),
        "kernel": "x".join(str(k) for k in w.kernel),
        "op": node.op_type,
        "node": node.name,
    }
    lead = why_text("tf-padding-pad" if w.pad_node is not None else "tf-padding-folded", **fields)
    alternatives = "; ".join(dict.fromkeys(f[4] for f in found))
    traced = ", ".join(
        f"axis {ax} ({dim_text(a, sol, d)}) = {n} padded {p}" for ax, d, n, p, _ in found
    )
    return Blocker(
        where.name,
        where.op_type,
        None,
        traced,
        why_text("tf-padding", lead=lead, alternatives=alternatives),
        fix_lead("tf-padding", syms=syms, axes=axes_text(a, syms)),
        sym_tuple(syms),
        "tf-padding",
    )


def pad_before(
    a: ShapeAnalysis, tensor: str, rank: int
) -> tuple[onnx.NodeProto | None, list[tuple[int, int]] | None]:
    """The constant-mode Pad node producing ``tensor`` and its traced (begin, end) per axis."""
    found = a.producers.get(tensor)
    if found is None or found[1].op_type != "Pad":
        return None, None
    node = found[1]
    mode = next((x.s for x in node.attribute if x.name == "mode"), b"constant")
    if mode != b"constant" or len(node.input) > 3 and node.input[3]:
        return None, None
    if a.opset < 11:
        pads = next((list(x.ints) for x in node.attribute if x.name == "pads"), None)
    else:
        info = a.tensors.get(node.input[1]) if len(node.input) > 1 else None
        pads = None if info is None or info.value is None else [a.traced(v) for v in info.value]
    if pads is None or len(pads) != 2 * rank:
        return None, None
    return node, [(int(pads[k]), int(pads[k + rank])) for k in range(rank)]


def grid_axes(a: ShapeAnalysis, mono: tuple[str, ...]) -> tuple[str, str, str] | None:
    """(tensor, h, w) where ``mono`` is the product of the run-time sizes ``h``, ``w`` of axes 2,
    3 of one tensor (a patch grid: a patch embedding's output), else None."""
    if len(mono) != 2:
        return None
    origins = [a.atoms[x].origin for x in mono]
    if not all(isinstance(o, tuple) and len(o) == 3 and o[0] == "dim" for o in origins):
        return None
    (_, t1, ax1), (_, t2, ax2) = origins
    if t1 != t2 or {ax1, ax2} != {2, 3}:
        return None
    h, w = mono if ax1 == 2 else mono[::-1]
    return t1, h, w


def grid_table(a: ShapeAnalysis, use: ConstUse, dims: list[Dim]) -> GridTable | None:
    """``use`` as a :class:`GridTable`: a [1, n, dim] constant added whole, or one repeated
    along a batch axis, its axis 1 of length ``h*w + lead`` with h, w the run-time sizes of axes
    2, 3 of one tensor (a patch grid)."""
    arr = use.array
    if use.op != "Add" or arr.ndim != 3:
        return None
    if dims[0].atoms() and not np.array_equal(arr, np.broadcast_to(arr[:1], arr.shape)):
        return None  # a batch axis must repeat one table (dynamo folds Idefics3's lookup per image)
    if not dims[0].atoms() and arr.shape[0] != 1:
        return None
    terms = dims[1].terms
    lead = terms.pop((), 0)
    if len(terms) != 1 or dims[2].atoms():
        return None
    ((mono, coef),) = terms.items()
    if len(mono) == 1 and coef == 1 and lead >= 0 and a.atoms[mono[0]].kind == "sym":
        return _sequence_table(a, use, mono[0], lead)
    found = grid_axes(a, mono)
    if coef != 1 or lead < 0 or found is None:
        return None
    grid, *hw = found
    h, w = (a.atoms[x].traced for x in hw)
    if h * w + lead != use.array.shape[1]:
        return None
    return GridTable(use.node, use.input_index, use.tensor, grid, lead, (h, w))


def _sequence_table(a: ShapeAnalysis, use: ConstUse, sym: str, lead: int) -> GridTable | None:
    """``use`` (a [1, lead + n, dim] table added whole) as the table of a sequence: its ``n``
    rows the traced length of input symbol ``sym``, read at run time from the first input axis
    it names. SAM3's lite text encoder interpolates its learned positions to the length (torch
    code dynamo does not record where the length is the table's own)."""
    origin = a.atoms[sym].origin
    if not isinstance(origin, list) or not origin:
        return None
    tensor, axis = origin[0]
    n = a.atoms[sym].traced
    if n + lead != use.array.shape[1] or n < 2:
        return None
    return GridTable(use.node, use.input_index, use.tensor, tensor, lead, (n,), (axis,))


def grid_resizes(a: ShapeAnalysis, sol: Solution) -> list[Constraint]:
    """Resizes to a patch grid whose sizes the export folded at the traced grid (YOLOS by
    TorchScript: torch interpolates its position table to ``(height // 16, width // 16)`` in
    Python ints). Where a conflict needs the product of a Resize's output height and width
    (elements 2, 3 of its constant sizes, kept as traced) to equal a patch grid's ``h*w`` (axes
    2, 3 of one tensor, :func:`grid_axes`), each is tied to its grid axis: height to height,
    width to width, the traced values alike, where that removes conflicts and adds none. The
    ties are appended to ``a`` and returned."""
    sizes = {
        x: (id(use), i)
        for use in a.uses
        if use.op == "Resize" and use.kind == "size" and use.input_index == 3
        for i, x in enumerate(use.atoms)
        if x is not None and sol.how.get(x) == "kept"
    }
    known = {x: v for x, v in sol.values.items() if x not in sizes}
    ties: list[Constraint] = []
    tied: set[str] = set()
    for conflict in sol.conflicts:
        c = conflict.constraint
        terms = list(c.expr.subs(known).terms.items())
        if len(terms) != 2 or terms[0][1] + terms[1][1] != 0 or abs(terms[0][1]) != 1:
            continue
        for (resized, _), (grid, _) in (terms, terms[::-1]):
            found = grid_axes(a, grid)
            if found is None or len(resized) != 2 or not set(resized) <= sizes.keys():
                continue
            if len({sizes[x][0] for x in resized}) != 1 or {sizes[x][1] for x in resized} != {2, 3}:
                continue
            by_axis = sorted(resized, key=lambda x: sizes[x][1])  # height, then width
            if any(
                x in tied or a.atoms[x].traced != a.atoms[g].traced
                for x, g in zip(by_axis, found[1:], strict=True)
            ):
                continue
            for x, g in zip(by_axis, found[1:], strict=True):
                tied.add(x)
                ties.append(tie(a, x, Dim.sym(g), c.node, c.op, "a Resize to the patch grid"))
    before = {id(k.constraint) for k in sol.conflicts}
    if ties and not {id(k.constraint) for k in solve(a).conflicts} < before:
        a.constraints[:] = [k for k in a.constraints if all(k is not t for t in ties)]
        return []  # the ties leave a conflict they were to remove, or add one
    return ties


def relative_axes(
    arr: np.ndarray, sym_axes: list[int], sink: bool = False
) -> tuple[int, int] | None:
    """Two symbolic axes of one length (3 or more) along which ``arr`` depends only on j - i, its
    values not all alike along them (a table of relative positions), or None. ``sink`` (a block
    of a table cut block by block): the first column may differ from the rest where every row
    holds one value there (a first key every query attends alike, ProphetNet's ngram streams),
    and the rows need only differ somewhere (a block of distances past the first row, whose
    first rows are all clipped to 0)."""
    for i, p in enumerate(sym_axes):
        for q in sym_axes[i + 1 :]:
            n = arr.shape[p]
            if n < 3 or arr.shape[q] != n:
                continue
            x = np.moveaxis(arr, (p, q), (-2, -1))
            alike = x[..., 1:, :] == x[..., :1, :] if sink else x[..., 1:2, :] == x[..., :1, :]
            if not np.all(alike) and (
                np.array_equal(x[..., 1:, 1:], x[..., :-1, :-1])
                or (
                    sink
                    and np.array_equal(x[..., 1:, 2:], x[..., :-1, 1:-1])
                    and bool(np.all(x[..., :, :1] == x[..., :1, :1]))
                )
            ):
                return p, q
    return None
