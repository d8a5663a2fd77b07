"""Recognize how a constant was generated along the axes that carry a traced size.

A static export folds computations on ``arange(seq)`` into constants: position ids, a row-major
index grid, a causal mask, the rotary ``cos``/``sin`` tables, T5's relative positions. When such a
constant's dims must follow a symbol, symbolize rebuilds it at run time from the generator it
matches here, verified element by element against the traced constant:

- ``affine``: ``base + sum_k step_k * i_k`` (``i_k`` the index along symbolic axis ``k``; a step
  of 0 is a plain broadcast, a step of 1 a ``Range``; steps may vary along the other axes, as in
  an index grid ``[..., (b, s)]`` or ``pos * inv_freq``);
- ``cos`` / ``sin``: ``amp * cos(i_k * freq)`` / ``sin(i_k * freq)`` along one axis;
- ``band``: two values split by ``lo <= j - i <= hi`` over two axes (a bound at the edge of the
  traced range is unbounded): a causal or sliding-window mask, boolean or additive.

- ``tile``: an axis of size ``batch*c`` made of one block of ``c`` repeated (a per-head bias
  flattened over ``batch*heads``).

A constant that matches none of these is a table cut to the traced size: a blocker.

Evidence (:func:`evidence_gap`): a pattern is taken only when the traced values pin it down, with
more points along each symbolic axis than the pattern has parameters there. A moving ``affine``
axis (base and step: two points fit any line), ``cos``/``sin`` (amplitude or phase, and the
frequency) and a ``band`` (its values and bounds) need 3 points; a broadcast or a ``tile`` needs
2 (one traced row repeats nothing). The exceptions are structural, never from the values: an
axis whose symbols have independent rows (a batch) repeats its one traced row, and what counts
along it can only enumerate the rows (an index: the check then runs rows alone), shown by two
points or by the graph (:mod:`.batch_indices`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from onnxsurgery.shapes.dims import Dim, dim_product

__all__ = ["Generator", "evidence_gap", "flat_strides", "match_generator"]


@dataclass
class Generator:
    """How to rebuild a constant from the sizes of its symbolic axes (see module docstring)."""

    kind: str  # "affine" | "cos" | "sin" | "band" | "tile"
    axes: list[int]
    base: np.ndarray | None = None  # affine: value at index 0 (size 1 on the symbolic axes)
    steps: dict[int, np.ndarray] = field(default_factory=dict)  # affine/trig: per-axis step
    amp: np.ndarray | None = None  # cos: amplitude
    #: (i_axis, j_axis, lo, hi, a, b): ``a`` where ``lo <= j - i <= hi`` (None: unbounded), else ``b``
    band: tuple[int, int, int | None, int | None, object, object] | None = None
    #: (where, size, traced): a start or band bound that moves with a cache size (issue 12's
    #: offset by ``past``): ``where`` is "base" (an affine count starts at ``size``), "lo" or
    #: "hi" (that band bound is ``size``), "shift" (both bounds count from ``size``, the key
    #: axis's excess over the query axis); ``traced`` is its value in the traced constant. Set by
    #: the plan only where the graph shows ``size`` is the length of a cache axis.
    offset: tuple[str, Dim, int] | None = None
    #: affine: axes whose step is the row-major stride of the axes after them (an index over
    #: every element of a flattened grid); set by the plan only where the graph shows the
    #: indices read an axis as long as the grid, whose step then grows with those axes
    strides: dict[int, Dim] = field(default_factory=dict)
    #: cos/sin: the traced position the table starts at (``offset`` once the plan names the
    #: cache length it moves with)
    phase: int | None = None

    @property
    def base_array(self) -> np.ndarray:
        """``base``, which an affine or tile generator always has."""
        if self.base is None:
            raise ValueError(f"a {self.kind} generator has no base")
        return self.base

    def band_bounds(self) -> tuple[Dim | int | None, Dim | int | None]:
        """(lo, hi) of a band: ints, None (unbounded), or a bound that moves with a cache size.

        Where one bound moves (``offset``), the other keeps its distance to it: a sliding window
        over a cache (``past - w < j - i <= past``) keeps its width ``w`` at every past; only the
        offset comes from the cache length. ``shift`` (the key axis is the query axis plus a
        cache): both bounds are distances from the cache length, ``bound - traced + moved``."""
        assert self.band is not None
        _, _, lo, hi, _, _ = self.band
        if self.offset is None:
            return lo, hi
        where, moved, traced = self.offset
        if where == "shift":
            return (
                None if lo is None else moved - (traced - lo),
                None if hi is None else moved - (traced - hi),
            )
        if where == "hi":  # lo keeps its distance to the moving hi
            return (None if lo is None or hi is None else moved - (hi - lo)), moved
        return moved, (None if hi is None or lo is None else moved + (hi - lo))

    def describe(self) -> str:
        if self.kind == "affine":
            moving = [k for k, s in self.steps.items() if np.any(s != 0)]
            if not moving:
                return "Expand"
            start = ""
            if self.offset is not None:
                start = f" from {self.offset[1]}" + (" steps" if self.offset[0] == "scaled" else "")
            return "Range on axis " + ", ".join(str(k) for k in moving) + start
        if self.kind == "tile":
            return f"Tile of a {self.base_array.shape[self.axes[0]]}-block on axis {self.axes[0]}"
        if self.kind in ("cos", "sin"):
            pos = f"(Range + {self.offset[1]})" if self.offset is not None else "Range"
            return f"{self.kind.capitalize()}({pos} * freq) on axis {self.axes[0]}"
        assert self.band is not None
        i, j, lo, hi, _, _ = self.band
        lo_text, hi_text = self.band_bounds()
        parts = ([f"{lo_text} <= j - i"] if lo is not None else []) + (
            [f"j - i <= {hi_text}"] if hi is not None else []
        )
        return f"band mask ({' and '.join(parts)}) on axes {i}, {j}"


def _take0(arr: np.ndarray, axes: list[int]) -> np.ndarray:
    out = arr
    for k in axes:
        out = np.take(out, [0], axis=k)
    return out


def _index(n: int, axis: int, rank: int) -> np.ndarray:
    shape = [1] * rank
    shape[axis] = n
    return np.arange(n).reshape(shape)


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype.kind in "iub":
        return bool(np.array_equal(a, b.astype(a.dtype)))
    scale = max(1.0, float(np.max(np.abs(a))) if a.size else 1.0)
    return bool(np.allclose(a, b, rtol=1e-5, atol=1e-6 * scale))


def _affine(arr: np.ndarray, axes: list[int]) -> Generator | None:
    if arr.dtype.kind not in "iuf":  # bool and others can only be a broadcast
        base = _take0(arr, axes)
        if np.array_equal(arr, np.broadcast_to(base, arr.shape)):
            return Generator("affine", axes, base, {k: np.zeros_like(base) for k in axes})
        return None
    base = _take0(arr, axes)
    steps: dict[int, np.ndarray] = {}
    work = arr.astype(np.float64) if arr.dtype.kind == "f" else arr.astype(np.int64)
    expected = np.broadcast_to(base.astype(work.dtype), arr.shape).copy()
    for k in axes:
        if arr.shape[k] <= 1:
            steps[k] = np.zeros_like(base)
            continue
        others = [a for a in axes if a != k]
        step = np.take(work, [1], axis=k) - np.take(work, [0], axis=k)
        step = _take0(step, others)
        steps[k] = step.astype(arr.dtype)
        expected = expected + step * _index(arr.shape[k], k, arr.ndim)
    if not _close(arr, expected.astype(work.dtype)):
        return None
    return Generator("affine", axes, base, steps)


def _trig(arr: np.ndarray, axes: list[int]) -> Generator | None:
    if arr.dtype.kind != "f" or len(axes) != 1:
        return None
    k = axes[0]
    n = arr.shape[k]
    if n < 2:
        return None
    first = np.take(arr, [0], axis=k).astype(np.float64)
    second = np.take(arr, [1], axis=k).astype(np.float64)
    idx = _index(n, k, arr.ndim)
    if np.all(np.abs(first) > 1e-6):  # cos(0) = 1: amplitude, then the angle per step
        ratio = np.clip(second / first, -1.0, 1.0)
        freq = np.arccos(ratio)
        if n > 2:  # a longer lever arm where the angle stays below pi
            last = np.take(arr, [n - 1], axis=k).astype(np.float64)
            wide = np.arccos(np.clip(last / first, -1.0, 1.0)) / (n - 1)
            freq = np.where(freq * (n - 1) < np.pi - 1e-2, wide, freq)
        if _close(arr, first * np.cos(idx * freq)):
            return Generator(
                "cos", axes, steps={k: freq.astype(np.float32)}, amp=first.astype(arr.dtype)
            )
    if np.all(np.abs(first) <= 1e-6):  # sin(0) = 0
        freq = np.arcsin(np.clip(second, -1.0, 1.0))
        if _close(arr, np.sin(idx * freq)):
            return Generator("sin", axes, steps={k: freq.astype(np.float32)})
        freq = np.pi - freq
        if _close(arr, np.sin(idx * freq)):
            return Generator("sin", axes, steps={k: freq.astype(np.float32)})
    return None


def _trig_from(arr: np.ndarray, axes: list[int], start: int) -> Generator | None:
    """Rotary cos/sin at positions ``start .. start + n - 1`` (a table offset by a cache length),
    unit amplitude. The angle per step comes coarse from the recurrence ``x[i-1] + x[i+1] =
    2 cos(f) x[i]`` (needs 3 points, any branch), then exact from the position where the inverse
    is best conditioned, on the branch the coarse value picks; every traced value must fit.
    ``phase`` holds the start: the plan names the size it moves with (``offset``)."""
    if arr.dtype.kind != "f" or len(axes) != 1 or start < 1:
        return None
    k = axes[0]
    n = arr.shape[k]
    if n < 3:
        return None
    x = np.moveaxis(arr.astype(np.float64), k, 0)
    mid = x[1:-1]
    den = 2 * np.sum(mid * mid, axis=0)
    num = np.sum((x[:-2] + x[2:]) * mid, axis=0)
    coarse = np.arccos(np.clip(num / np.where(den > 0, den, 1.0), -1.0, 1.0))
    pos = (start + np.arange(n)).reshape((n,) + (1,) * (x.ndim - 1))
    turns = np.round(coarse * pos / (2 * np.pi))
    for kind in ("cos", "sin"):
        if kind == "cos":
            base = np.arccos(np.clip(x, -1.0, 1.0))
            branches = [base, -base]
        else:
            base = np.arcsin(np.clip(x, -1.0, 1.0))
            branches = [base, np.pi - base]
        guess = coarse * pos
        best = None
        for br in branches:
            for shift in (-1, 0, 1):
                theta = br + 2 * np.pi * (turns + shift)
                cand = np.abs(theta - guess)
                best = (theta, cand) if best is None else (
                    np.where(cand < best[1], theta, best[0]), np.minimum(cand, best[1])
                )
        assert best is not None
        freqs = best[0] / pos
        # per column, the position where an error in x moves the angle least
        cond = np.abs(np.sin(best[0]) if kind == "cos" else np.cos(best[0])) * pos
        pick = np.argmax(cond, axis=0)
        freq = np.take_along_axis(freqs, pick[None], axis=0)
        fit = np.cos(pos * freq) if kind == "cos" else np.sin(pos * freq)
        if _close(arr, np.moveaxis(fit, 0, k).astype(arr.dtype)):
            return Generator(
                kind,
                axes,
                steps={k: np.moveaxis(freq, 0, k).astype(np.float32)},
                phase=start,
            )
    return None


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
) -> Generator | None:
    """The generator that reproduces ``arr`` along its symbolic ``axes``, or None.

    ``blocks`` maps an axis whose size is ``symbols * c`` to ``c``: such an axis may repeat a
    block of ``c`` (a per-head table tiled over ``batch*heads``). ``starts``: positions a
    cos/sin table may start from (the traced cache lengths, from the plan), tried last.
    """
    axes = sorted(axes)
    for finder in (_affine, _trig, _band):
        gen = finder(arr, axes)
        if gen is not None:
            return gen
    gen = _tile(arr, axes, blocks or {})
    for start in starts:
        gen = gen or _trig_from(arr, axes, start)
    return gen


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
        if gen.kind == "band" and gen.band is not None:
            moving = k in gen.band[:2]
        if gen.kind == "tile":
            need = 2 * gen.base_array.shape[k]
            if n < need and k not in rows:
                return (
                    f"axis {k} holds one block of {n}: one copy does not show that it repeats"
                )
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
        if n < 3:
            what = "a line" if gen.kind == "affine" else f"a {gen.describe()}"
            return (
                f"axis {k} was traced at size {n}: {n} point(s) fit {what} whatever the "
                "table holds, so they do not show the pattern"
            )
    return None
