"""Recognize how a constant was generated along the axes that carry a traced size.

A static export folds computations on ``arange(seq)`` into constants: position ids, a row-major
index grid, a causal mask, the rotary ``cos``/``sin`` tables, T5's relative positions. When such a
constant's dims must follow a symbol, symbolize rebuilds it at run time from the generator it
matches here, verified element by element against the traced constant:

- ``affine``: ``base + sum_k step_k * i_k`` (``i_k`` the index along symbolic axis ``k``; a step
  of 0 is a plain broadcast, a step of 1 a ``Range``; steps may vary along the other axes, as in
  an index grid ``[..., (b, s)]`` or ``pos * inv_freq``);
- ``cos`` / ``sin``: ``amp * cos(i_k * freq)`` / ``sin(i_k * freq)`` along one axis; any
  other sinusoidal position table (:func:`~.trig_tables.sinusoid`) is a ``sin`` with a per-column ``shift``:
  ``amp * sin((lead + i_k) * freq + phi)``, ``phi`` 0 or pi/2 per column (sin and cos halves in
  one table, GPT-J's ``sincos``), ``lead`` a fixed start (XGLM's padding offset 2), the
  frequencies in any order (interleaved by ``repeat_interleave``, half-split by ``cat``), and
  columns that do not rotate (partial rotary: frequency 0);
  A sinusoid over relative distances (distance 0 at a row past the first, the table
  ``2T - 1`` rows long) is :mod:`.relative_tables`': its length and start follow a size the
  plan ties it to, and it is rebuilt from ``Range + start`` (``offset``);
- ``band``: two values split by ``lo <= j - i <= hi`` over two axes (a bound at the edge of the
  traced range is unbounded): a causal or sliding-window mask, boolean or additive.

- ``tile``: an axis of size ``batch*c`` made of one block of ``c`` repeated (a per-head bias
  flattened over ``batch*heads``).
- ``prefix``: the traced table itself, sliced to the sizes on ``axes``, under bounded symbols
  only (``seq<=traced``; :class:`~.rules.BoundedTable` decides, never a match here); ``steps``
  holds the block of each axis tiled over a batch (``batch*heads``), cut to it in ``base``.

A constant that matches none of these is a table cut to the traced size: a blocker.

Evidence (:func:`evidence_gap`): a pattern is taken only when the traced values pin it down, with
more points along each symbolic axis than the pattern has parameters there. A moving ``affine``
axis (base and step: two points fit any line), ``cos``/``sin`` (amplitude or phase, and the
frequency) and a ``band`` (its values and bounds) need 3 points; a broadcast or a ``tile`` needs
2 (one traced row repeats nothing). The exceptions are structural, never from the values: an
axis whose symbols have independent rows (a batch) repeats its one traced row, and what counts
along it can only enumerate the rows (an index: the check then runs rows alone), shown by two
points or by the graph (:mod:`.batch_indices`). One more is structural in the values: a rotary
cos/sin pair at positions 0 and 1 whose angles are one geometric progression of 3 or more
frequencies, or one that is the first 2 rows of a longer table pinned by its own positions
(:func:`~.trig_tables.two_positions`): its frequencies, not its positions, pin it down.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from onnxsurgery.passes.symbolize.table_generator import (
    MAX_LEAD,
    Generator,
    close,
    index_grid,
    take0,
)
from onnxsurgery.passes.symbolize.trig_tables import position_table, trig, two_positions
from onnxsurgery.shapes.dims import Dim, dim_product

__all__ = ["MAX_LEAD", "Generator", "evidence_gap", "flat_strides", "match_generator"]


def _affine(arr: np.ndarray, axes: list[int]) -> Generator | None:
    if arr.dtype.kind not in "iuf":  # bool and others can only be a broadcast
        base = take0(arr, axes)
        if np.array_equal(arr, np.broadcast_to(base, arr.shape)):
            return Generator("affine", axes, base, {k: np.zeros_like(base) for k in axes})
        return None
    base = take0(arr, axes)
    steps: dict[int, np.ndarray] = {}
    work = arr.astype(np.float64) if arr.dtype.kind == "f" else arr.astype(np.int64)
    expected = np.broadcast_to(base.astype(work.dtype), arr.shape).copy()
    for k in axes:
        if arr.shape[k] <= 1:
            steps[k] = np.zeros_like(base)
            continue
        others = [a for a in axes if a != k]
        step = np.take(work, [1], axis=k) - np.take(work, [0], axis=k)
        step = take0(step, others)
        steps[k] = step.astype(arr.dtype)
        expected = expected + step * index_grid(arr.shape[k], k, arr.ndim)
    if not close(arr, expected.astype(work.dtype)):
        return None
    return Generator("affine", axes, base, steps)


def _band(arr: np.ndarray, axes: list[int]) -> Generator | None:
    """A band over two of ``axes``; any other symbolic axis must be a broadcast (a causal mask
    expanded over the batch), rebuilt by Expand."""
    if len(axes) < 2:
        return None
    for n, i_ax in enumerate(axes):
        for j_ax in axes[n + 1 :]:
            gen = _band_on(arr, axes, i_ax, j_ax)
            if gen is not None:
                return gen
    return None


def _band_on(arr: np.ndarray, axes: list[int], i_ax: int, j_ax: int) -> Generator | None:
    ni, nj = arr.shape[i_ax], arr.shape[j_ax]
    # Every other axis must be uniform: reduce to the (i, j) plane.
    plane = arr
    for k in range(arr.ndim):
        if k not in (i_ax, j_ax):
            first = np.take(plane, [0], axis=k)
            if not np.array_equal(plane, np.broadcast_to(first, plane.shape)):
                return None
            plane = first
    plane = plane.reshape(ni, nj)
    values = np.unique(plane)
    if len(values) != 2:
        return None
    diff = np.arange(nj)[None, :] - np.arange(ni)[:, None]
    lo_all, hi_all = int(diff.min()), int(diff.max())
    for a, b in ((values[1], values[0]), (values[0], values[1])):
        inside = np.unique(diff[plane == a])
        if inside.size == 0 or inside.size != inside[-1] - inside[0] + 1:
            continue  # the a-values must sit on a contiguous run of diagonals
        lo, hi = int(inside[0]), int(inside[-1])
        if not np.array_equal(plane == a, (diff >= lo) & (diff <= hi)):
            continue
        # A bound at the edge of the traced range extends forever (causal: j - i <= 0); one
        # inside it is a window kept at every size (sliding window: j - i > -w).
        bound_lo = None if lo == lo_all else lo
        bound_hi = None if hi == hi_all else hi
        if bound_lo is None and bound_hi is None:
            continue
        return Generator("band", axes, band=(i_ax, j_ax, bound_lo, bound_hi, a.item(), b.item()))
    return None


def _tile(arr: np.ndarray, axes: list[int], blocks: dict[int, int]) -> Generator | None:
    """One symbolic axis of size ``sym * block`` whose blocks repeat (``batch*heads``)."""
    if len(axes) != 1 or axes[0] not in blocks:
        return None
    k, block = axes[0], blocks[axes[0]]
    n = arr.shape[k]
    if block <= 0 or n % block:
        return None  # (n == block: traced at batch 1, the one block is the table to tile)
    base = np.take(arr, range(block), axis=k)
    reps = [1] * arr.ndim
    reps[k] = n // block
    if not np.array_equal(arr, np.tile(base, reps)):
        return None
    return Generator("tile", axes, base=base)


def match_generator(
    arr: np.ndarray,
    axes: list[int],
    blocks: dict[int, int] | None = None,
    starts: tuple[int, ...] = (),
    tables: Sequence[np.ndarray] = (),
) -> Generator | None:
    """The generator that reproduces ``arr`` along its symbolic ``axes``, or None.

    ``blocks`` maps an axis whose size is ``symbols * c`` to ``c``: such an axis may repeat a
    block of ``c`` (a per-head table tiled over ``batch*heads``). ``starts``: positions a
    cos/sin table may start from (the traced cache lengths, from the plan), tried last; then any
    sinusoidal table (:func:`~.trig_tables.sinusoid`), from each of ``starts`` first, then from a fixed lead.
    ``tables``: the model's other constants of ``arr``'s rank, where a rotary table traced at 2
    positions may find its sin or cos twin or the longer table it begins (:func:`~.trig_tables.two_positions`),
    tried first.
    """
    axes = sorted(axes)
    gen = two_positions(arr, axes, tables)
    if gen is not None:
        return gen
    for finder in (_affine, trig, _band):
        gen = finder(arr, axes)
        if gen is not None:
            return gen
    gen = _tile(arr, axes, blocks or {})
    return gen or position_table(arr, axes, starts)


def flat_strides(arr: np.ndarray, dims: list[Dim]) -> dict[int, Dim]:
    """The row-major strides of ``dims`` that are no constant, by axis, for a constant that
    holds 0 .. n-1 in order (``arr``): each symbolic axis steps by the product of the later
    dims; None of them where an axis of the traced grid that counts stays fixed (its traced
    stride in the base could not grow: the check would show it)."""
    if any(arr.shape[k] > 1 and d.is_const() for k, d in enumerate(dims)):
        return {}
    strides = {k: dim_product(dims[k + 1 :]) for k in range(len(dims))}
    return {k: s for k, s in strides.items() if not dims[k].is_const() and not s.is_const()}


def evidence_gap(
    gen: Generator, arr: np.ndarray, rows: set[int], structural: bool = False
) -> str | None:
    """Why the traced values of ``arr`` do not pin ``gen`` down, or None when they do.

    ``rows`` are the symbolic axes whose symbols have independent rows (a batch): there, one
    traced row is a broadcast by structure. ``structural``: the graph shows ``arr`` indexes a
    batch, so its count along the batch is known without a third point.
    """
    for k in gen.axes:
        n = arr.shape[k]
        moving = gen.kind != "affine" or (k in gen.steps and bool(np.any(gen.steps[k] != 0)))
        if gen.kind in ("cos", "sin"):
            moving = k == gen.axes[0]  # the positions; the other axes repeat their one row
        if gen.kind == "band" and gen.band is not None:
            moving = k in gen.band[:2]
        if gen.kind == "tile":
            need = 2 * gen.base_array.shape[k]
            if n < need and k not in rows:
                return f"axis {k} holds one block of {n}: one copy does not show that it repeats"
            continue
        if k in rows and (structural or (gen.kind == "affine" and n >= 2)):
            # Rows are independent: a constant that counts along them can only enumerate them
            # (an index), and the check runs each row alone to show it reads its own row.
            continue
        if not moving:
            if n < 2 and k not in rows:
                return (
                    f"axis {k} was traced at size 1: one point cannot tell a table of that "
                    "length from one row repeated"
                )
            continue
        if n == 2 and gen.pinned:
            continue  # a rotary table pinned by its frequencies (:func:`~.trig_tables.two_positions`)
        if n < 3:
            what = "a line" if gen.kind == "affine" else f"a {gen.describe()}"
            return (
                f"axis {k} was traced at size {n}: {n} point(s) fit {what} whatever the "
                "table holds, so they do not show the pattern"
            )
    return None
