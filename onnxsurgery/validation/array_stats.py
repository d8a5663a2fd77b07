"""The statistics of one comparison, gathered in one chunked pass over two same-shaped numeric
arrays: largest absolute and relative error, mean, mismatches at a tolerance, where NaN/Inf sit,
the worst element, the smallest atol that passes, and (for a report) the errors' histogram.
:func:`~.arrays.compare_arrays` words them (:class:`~.arrays.OutputComparison`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["CHUNK", "ElementStats", "ErrorHistogram"]

#: Elements per chunk: bounds the temporaries of one comparison (about 8 bytes x 4 per element),
#: and keeps one chunk's work (inputs, three buffers) inside a core's L2 cache: each statistic is
#: a pass over the chunk, so a chunk that spills to L3 or memory pays for every pass.
CHUNK = 1 << 15


@dataclass(frozen=True)
class ErrorHistogram:
    """How ``|actual - expected|`` spreads over the compared elements, in powers of two: bin
    ``k`` counts errors in ``[2**(low + k), 2**(low + k + 1))``; ``zeros`` those below the
    smallest normal number of the arithmetic (exact matches, NaN/Inf placed alike)."""

    zeros: int
    low: int
    counts: tuple[int, ...]

    @property
    def edges(self) -> list[float]:
        return [2.0 ** (self.low + k) for k in range(len(self.counts) + 1)]

    def to_dict(self) -> dict[str, Any]:
        return {"zeros": self.zeros, "edges": self.edges, "counts": list(self.counts)}


#: How the binary exponent of a work dtype's non-negative value is read from its bits: the
#: integer view, the shift that leaves the biased exponent, the bias (ErrorHistogram's bins).
_EXPONENT_BITS: dict[np.dtype, tuple[np.dtype, int, int]] = {
    np.dtype(np.float32): (np.dtype(np.int32), 23, 127),
    np.dtype(np.float64): (np.dtype(np.int64), 52, 1023),
}

#: Integers float64 does not hold exactly.
_WIDE_INTS = (np.dtype(np.int64), np.dtype(np.uint64))


def _work_dtype(a: np.dtype, e: np.dtype) -> np.dtype:
    """float32 for float16/float32 pairs, float64 for float64 and integers, complex128 for complex."""
    if a.kind == "c" or e.kind == "c":
        return np.dtype(np.complex128)
    if a.kind == "f" and e.kind == "f":
        return np.result_type(a, e, np.float32)
    return np.dtype(np.float64)


def _differences(
    a_in: np.ndarray, e_in: np.ndarray, diff: np.ndarray, mag: np.ndarray, work: np.dtype
) -> None:
    """``|a - e|`` into ``diff`` and ``|e|`` into ``mag``, in the work dtype."""
    if work.kind == "c":
        np.abs(np.subtract(a_in, e_in, dtype=work), out=diff)
        np.abs(e_in.astype(work), out=mag)
    elif a_in.dtype == e_in.dtype and a_in.dtype in _WIDE_INTS:
        # 64-bit integers: float64 cannot hold them all (2**62 + 1 would equal 2**62), so
        # |a - e| is taken exactly, as unsigned 64-bit (wrapping is the right answer there)
        # and only then rounded to float64
        u = a_in.view(np.uint64), e_in.view(np.uint64)
        np.copyto(diff, np.where(a_in >= e_in, u[0] - u[1], u[1] - u[0]), casting="unsafe")
        np.abs(e_in, out=mag, dtype=work)
    else:
        np.subtract(a_in, e_in, out=diff, dtype=work)  # inf - inf is NaN: handled below
        np.abs(diff, out=diff)
        np.abs(e_in, out=mag, dtype=work)


class ElementStats:
    """Chunked pass over two same-shaped numeric arrays, gathering every statistic at once.

    Work buffers of one chunk are allocated once and reused; differences are taken in the
    inputs' own precision (float32 for float32: the same arithmetic ``numpy.allclose`` uses),
    sums are accumulated in float64, and the worst element is re-measured in float64 so
    ``min_atol`` is exact.
    """

    def __init__(
        self,
        actual: np.ndarray,
        expected: np.ndarray,
        atol: float,
        rtol: float,
        exact_kind: bool,
        histogram: bool = False,
    ) -> None:
        self.max_abs = 0.0
        self.max_rel = 0.0
        self.mismatches = 0
        self.nonfinite = 0
        self._sum_abs = 0.0
        self._finite = 0
        self._excess = -math.inf  # max over elements of |a - e| - rtol * |e|
        self._worst = -1  # flat index of that element
        self._first_nonfinite = -1
        a_flat = actual.reshape(-1)  # a view for contiguous arrays (every ORT/torch output)
        e_flat = expected.reshape(-1)
        work = self._work = _work_dtype(actual.dtype, expected.dtype)
        compare_native = (
            atol == 0 and rtol == 0 and actual.dtype.kind in "biu" and expected.dtype.kind in "biu"
        )
        n = min(CHUNK, e_flat.size)
        real = np.dtype(np.float64) if work.kind == "c" else work
        # the tolerances as the chunk's arithmetic sees them (numpy rounds a Python float to the
        # array's float32); the near-zero walk may skip elements only for real, inexact work
        self._near_zero = work.kind == "f" and not compare_native
        self._atol_w, self._rtol_w = work.type(atol), work.type(rtol)
        self._bound_key: tuple[float, float, float] | None = None
        self._bound: Any = None
        self._near_misses = 0
        self._diff = np.empty(n, real)
        self._mag = np.empty(n, real)
        self._tmp = np.empty(n, real)
        self._mask = np.empty(n, bool)
        # the errors' exponents, counted chunk by chunk (None: a dtype without a bit layout here)
        self._layout = _EXPONENT_BITS.get(real) if histogram else None
        bins = 1 << (self._layout[0].itemsize * 8 - 1 - self._layout[1]) if self._layout else 0
        self._exps = np.empty(n, self._layout[0]) if self._layout else None
        self._hist = np.zeros(bins, np.int64)
        # inf - inf, overflow, x / 0 and 0 / 0 are all handled where they arise, so numpy need not
        # warn; one errstate for the walk (entering one costs as much as a pass over a chunk)
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            for start in range(0, e_flat.size, CHUNK):
                a = a_flat[start : start + CHUNK]
                e = e_flat[start : start + CHUNK]
                self._chunk(a, e, start, atol, rtol, work, compare_native)
        del self._diff, self._mag, self._tmp, self._mask, self._exps
        self.mean_abs = self._sum_abs / self._finite if self._finite else 0.0
        if self.nonfinite:
            self.min_atol = math.inf
            self._worst = self._first_nonfinite
        elif self._worst < 0 or self.max_abs == 0:
            self.min_atol = 0.0
            self._worst = -1  # identical: no element is worst
        else:
            self._settle_min_atol(a_flat, e_flat, atol, rtol)

    def _chunk(
        self,
        a_in: np.ndarray,
        e_in: np.ndarray,
        start: int,
        atol: float,
        rtol: float,
        work: np.dtype,
        compare_native: bool,
    ) -> None:
        k = e_in.size
        if k == 0:
            return
        diff, mag, tmp, mask = self._diff[:k], self._mag[:k], self._tmp[:k], self._mask[:k]
        _differences(a_in, e_in, diff, mag, work)
        chunk_max = float(np.maximum.reduce(diff))
        skip = None  # elements left out of the finite statistics
        alike_at = None  # NaN/Inf placed alike: a match, but never the worst element
        if not math.isfinite(chunk_max):
            skip, alike_at = self._set_nonfinite_aside(a_in, e_in, diff, mag, start)
            chunk_max = float(diff.max())
        self._count_errors(diff, 0 if skip is None else int(skip.size))
        self._finite += k
        self.max_abs = max(self.max_abs, chunk_max)
        # float32 pairwise sum per chunk (relative error ~1e-7), chunks accumulated in float64
        self._sum_abs += float(np.add.reduce(diff))
        if (
            skip is None
            and self._near_zero
            and self._near_zero_only(diff, mag, chunk_max, start, atol, rtol)
        ):
            return
        if chunk_max > 0:  # max |a - e| / |e| over nonzero references
            np.divide(diff, mag, out=tmp)
            rel = float(np.fmax.reduce(tmp))  # 0/0 (exact match on a zero) is NaN: ignored
            if not math.isfinite(rel):  # an error on a zero reference: leave those out
                np.greater(mag, 0, out=mask)
                tmp.fill(0)
                np.divide(diff, mag, out=tmp, where=mask)
                rel = float(tmp.max())
            self.max_rel = max(self.max_rel, rel)
        # numpy.allclose: |a - e| <= atol + rtol * |e|; excess > 0 is a mismatch
        np.multiply(mag, rtol, out=mag)
        mag += atol
        excess = np.subtract(diff, mag, out=diff)
        if skip is not None:
            excess[skip] = -math.inf
        if alike_at is not None:
            excess[alike_at] = -math.inf
        i = int(excess.argmax())
        worst = float(excess[i])
        if compare_native:  # integers compared exactly, without a detour through float
            out = a_in != e_in
            if skip is not None:
                out[skip] = False
            self.mismatches += int(np.count_nonzero(out))
        elif worst > 0:  # only then is there anything to count
            self.mismatches += int(np.count_nonzero(np.greater(excess, 0, out=mask)))
        if worst + atol > self._excess:
            self._excess = worst + atol
            self._worst = start + i

    def _count_errors(self, diff: np.ndarray, skipped: int) -> None:
        """Add a chunk's ``|a - e|`` to the histogram by binary exponent (read from the bits:
        a shift and a count, no logarithm); ``skipped`` elements were zeroed and are no error."""
        if self._exps is None or self._layout is None:
            return
        exps = self._exps[: diff.size]
        np.right_shift(diff.view(exps.dtype), self._layout[1], out=exps)
        self._hist += np.bincount(exps, minlength=self._hist.size)
        self._hist[0] -= skipped

    def histogram(self) -> ErrorHistogram | None:
        """The errors of every compared element, bins from the lowest to the highest non-empty."""
        if self._layout is None:
            return None
        filled = np.flatnonzero(self._hist[1:]) + 1
        if not filled.size:
            return ErrorHistogram(int(self._hist[0]), 0, ())
        first, last = int(filled[0]), int(filled[-1])
        counts = tuple(int(c) for c in self._hist[first : last + 1])
        return ErrorHistogram(int(self._hist[0]), first - self._layout[2], counts)

    def _set_nonfinite_aside(
        self, a_in: np.ndarray, e_in: np.ndarray, diff: np.ndarray, mag: np.ndarray, start: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Only the few elements where a side is NaN/Inf (or the difference overflowed): NaN/Inf
        placed alike count as a match (their ``diff`` 0), the others as mismatches left out of
        the finite statistics (their ``diff`` 0 too). Returns (those left out, those alike)."""
        bad = np.flatnonzero(~np.isfinite(diff))
        av, ev = a_in[bad], e_in[bad]
        alike = (np.isnan(av) & np.isnan(ev)) | (np.isinf(av) & (av == ev))
        alike_at = bad[alike]
        diff[alike_at] = 0.0  # NaN where torch has NaN, same-signed Inf: a match
        mag[bad[alike]] = 0.0
        skip = bad[~alike]
        both_finite = np.isfinite(av[~alike]) & np.isfinite(ev[~alike])
        placed = skip[~both_finite]
        if placed.size:
            if self._first_nonfinite < 0:
                self._first_nonfinite = start + int(placed[0])
            self.nonfinite += int(placed.size)
        if both_finite.any():  # finite values whose difference overflowed: a huge error
            self.max_abs = math.inf
        self.mismatches += int(skip.size)
        diff[skip] = 0.0
        mag[skip] = 0.0
        self._finite -= int(skip.size)
        return skip, alike_at

    def _near_zero_only(
        self, diff: np.ndarray, mag: np.ndarray, chunk_max: float, start: int, atol: float, rtol: float
    ) -> bool:
        """The rest of a chunk's statistics from the few elements that can change them.

        Once a worst element and a ``max_rel`` are at hand, an element can raise ``max_rel``,
        become the worst element or fail the tolerance test only where its reference is small:
        ``|a - e| / |e|`` and ``|a - e| - rtol * |e|`` both fall as ``|e|`` grows, and
        ``|a - e|`` is at most ``max_abs``. :meth:`_near_bound` works out an ``|e|`` past which
        no element can; the elements under it are measured exactly as the whole chunk would be,
        in index order, so every figure comes out the same bit for bit. False when there is no
        bound, or too many elements lie under it: the whole chunk is measured then.
        """
        key = (self.max_abs, self._excess, self.max_rel)
        if key != self._bound_key:
            self._bound_key, self._bound = key, self._near_bound(atol, rtol)
        bound = self._bound
        if bound is None:
            return False
        mask = self._mask[: diff.size]
        np.less(mag, bound, out=mask)
        near = mask.nonzero()[0]
        if near.size > diff.size >> 4:
            # gathering that many costs more than measuring the whole chunk (a reference that is
            # mostly zeros, a loose bound): after a second such chunk, stop looking
            self._near_misses += 1
            self._near_zero = self._near_misses < 2
            return False
        if not near.size:
            return True
        d, m = diff[near], mag[near]
        if chunk_max > 0:  # as the whole chunk: 0/0 is NaN, ignored; x/0 is left out
            q = np.divide(d, m)
            rel = float(np.fmax.reduce(q))
            if not math.isfinite(rel):
                positive = m > 0
                rel = float(q[positive].max()) if positive.any() else 0.0
            self.max_rel = max(self.max_rel, rel)
        np.multiply(m, rtol, out=m)  # the whole chunk's arithmetic, element by element
        m += atol
        excess = np.subtract(d, m, out=d)
        i = int(excess.argmax())
        worst = float(excess[i])
        if worst > 0:
            self.mismatches += int(np.count_nonzero(excess > 0))
        if worst + atol > self._excess:
            self._excess = worst + atol
            self._worst = start + int(near[i])
        return True

    def _near_bound(self, atol: float, rtol: float) -> Any:
        """An ``|e|`` (a work-dtype scalar) at and past which no element whose ``|a - e|`` is
        at most ``max_abs`` fails the tolerance test, beats the worst element so far, or raises
        ``max_rel``; None when there is none to be had (no worst element or ``max_rel`` yet,
        ``rtol`` 0 with an error past ``atol``, ...).

        Each bound is guessed in float64 with a margin, then checked in the work dtype's own
        arithmetic, the one the chunk uses: rounding is monotonic, so what holds at the bound
        holds for every element past it.
        """
        d_max, best = self.max_abs, self._excess
        if best == -math.inf or not math.isfinite(d_max):
            return None
        w = self._work.type
        # the excess d - (|e| * rtol + atol) must stay <= 0 and not beat the worst so far
        bound = w(0.0)
        if rtol > 0:
            need = max(0.0, (d_max - min(0.0, best - atol) - atol) / rtol)
            bound = w(need + (need + atol / rtol) * 2.0**-12)
        beyond = w(d_max) - (bound * self._rtol_w + self._atol_w)
        if not (beyond <= 0 and float(beyond) + atol <= best):
            return None
        if d_max > 0:  # d / |e| <= max_abs / |e|, which past max_abs / max_rel is <= max_rel
            if not self.max_rel > 0:
                return None
            rel_bound = w(d_max / self.max_rel * (1 + 2.0**-12))
            if not float(w(d_max) / rel_bound) <= self.max_rel:
                return None
            bound = max(bound, rel_bound)
        return bound

    def _settle_min_atol(
        self, a_flat: np.ndarray, e_flat: np.ndarray, atol: float, rtol: float
    ) -> None:
        """``min_atol``: the smallest atol that passes the worst element, in the arithmetic used.

        float64 (and integer, complex) outputs are checked as ``d <= atol + rtol * m`` in float64;
        float32 outputs as numpy does it for float32 arrays, with ``atol`` and ``rtol`` rounded to
        float32, so the figure is a float32 value that passes when given back as ``atol``.
        """
        a, e = a_flat[self._worst], e_flat[self._worst]
        if np.iscomplexobj(a) or np.iscomplexobj(e):
            d, m = float(abs(complex(a) - complex(e))), float(abs(complex(e)))
        elif a.dtype in _WIDE_INTS or e.dtype in _WIDE_INTS:  # exactly, in Python integers
            d, m = float(abs(int(a) - int(e))), float(abs(int(e)))
        else:
            d, m = abs(float(a) - float(e)), abs(float(e))
        work = self._work
        if work != np.float32:
            allowed = m * rtol
            t = max(0.0, d - allowed)
            while d > t + allowed:
                t = math.nextafter(t, math.inf)
            self.min_atol = t
            return
        f32 = np.float32
        d32 = abs(f32(a) - f32(e))
        allowed32 = f32(abs(f32(e))) * f32(rtol)

        def passes(t: np.float32) -> bool:
            return bool(d32 <= allowed32 + t)

        t32 = f32(max(0.0, d - m * rtol))
        while not passes(t32):
            t32 = np.nextafter(t32, f32(np.inf))
        while t32 > 0 and passes(np.nextafter(t32, f32(0))):
            t32 = np.nextafter(t32, f32(0))
        self.min_atol = float(t32)

    def worst_index(self, shape: tuple[int, ...]) -> tuple[int, ...] | None:
        if self._worst < 0:
            return None
        return tuple(int(i) for i in np.unravel_index(self._worst, shape))

    def worst_value(self, array: np.ndarray) -> Any:
        if self._worst < 0:
            return None
        return array.reshape(-1)[self._worst]
