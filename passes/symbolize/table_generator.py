"""A constant's generator: how its values follow the indices along its symbolic axes.

:class:`Generator` is what :mod:`.generators` (affine, band, tile) and :mod:`.trig_tables`
(cos/sin and rotary tables) match a traced constant to, and what the rewrite rebuilds it from at
run time; the helpers here are the ones both matchers share.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from onnxsurgery.shapes.dims import Dim

__all__ = ["MAX_LEAD", "Generator", "broadcast_rest", "close", "index_grid", "take0"]


@dataclass
class Generator:
    """How to rebuild a constant from the sizes of its symbolic axes (see module docstring)."""

    kind: str  # "affine" | "cos" | "sin" | "band" | "tile" | "prefix"
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
    #: prefix: the bounds its sizes stay within (``seq<=8``), which its run-time guard names
    bound: str | None = None
    #: prefix: axes made of ``k`` blocks of one length side by side (``cat`` of two tables each
    #: cut to ``seq``: an axis of ``2*seq``), each block sliced alone
    blocks: dict[int, int] = field(default_factory=dict)
    #: sin: an angle added per column (``phi + lead * freq``, see :func:`~.trig_tables.sinusoid`)
    shift: np.ndarray | None = None
    #: sin with a ``shift``: the fixed position the table counts from (past any cache length)
    lead: int = 0
    #: cos/sin traced at 2 positions whose frequencies pin the table down (:func:`~.trig_tables.two_positions`)
    pinned: bool = False

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
                where, size, traced = self.offset
                lead = int(self.base_array.reshape(-1)[0]) - traced if where == "base" else 0
                start = f" from {size}" + (f" + {lead}" if lead > 0 else "")
                start += " steps" if where == "scaled" else ""
            return "Range on axis " + ", ".join(str(k) for k in moving) + start
        if self.kind == "prefix":
            axes = ", ".join(str(k) for k in self.axes)
            tiled = "".join(f", tiled over axis {k}" for k in self.steps)
            tiled += "".join(f", {n} blocks on axis {k} each" for k, n in self.blocks.items())
            return f"the traced table sliced on axis {axes}{tiled}, valid while {self.bound}"
        if self.kind == "tile":
            return f"Tile of a {self.base_array.shape[self.axes[0]]}-block on axis {self.axes[0]}"
        if self.kind in ("cos", "sin"):
            moved = [str(self.offset[1])] if self.offset is not None else []
            moved += [str(self.lead)] if self.lead else []
            pos = f"(Range + {' + '.join(moved)})" if moved else "Range"
            phase = " + phase" if self.shift is not None else ""
            return f"{self.kind.capitalize()}({pos} * freq{phase}) on axis {self.axes[0]}"
        assert self.band is not None
        i, j, lo, hi, _, _ = self.band
        lo_text, hi_text = self.band_bounds()
        parts = ([f"{lo_text} <= j - i"] if lo is not None else []) + (
            [f"j - i <= {hi_text}"] if hi is not None else []
        )
        return f"band mask ({' and '.join(parts)}) on axes {i}, {j}"


def take0(arr: np.ndarray, axes: list[int]) -> np.ndarray:
    out = arr
    for k in axes:
        out = np.take(out, [0], axis=k)
    return out


def index_grid(n: int, axis: int, rank: int) -> np.ndarray:
    shape = [1] * rank
    shape[axis] = n
    return np.arange(n).reshape(shape)


def close(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype.kind in "iub":
        return bool(np.array_equal(a, b.astype(a.dtype)))
    scale = max(1.0, float(np.max(np.abs(a))) if a.size else 1.0)
    return bool(np.allclose(a, b, rtol=1e-5, atol=1e-6 * scale))


def broadcast_rest(gen: Generator, axes: list[int], pinned: bool = False) -> Generator:
    """``gen`` along its one axis, the other symbolic ``axes`` (traced at 1) following it as
    broadcasts (:func:`~.trig_tables.position_table`)."""
    gen.axes = gen.axes + [k for k in axes if k not in gen.axes]
    gen.pinned = pinned
    return gen


#: the largest fixed lead a position table may count from (:func:`~.trig_tables.sinusoid`), past any cache
#: length: ``padding_idx + 1`` of the tables that keep row 0 or 1 for padding
MAX_LEAD = 2
