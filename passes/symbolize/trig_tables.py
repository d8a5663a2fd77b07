"""Sinusoidal and rotary position tables: ``cos``/``sin`` of positions times frequencies.

The trigonometric half of :mod:`.generators` (read its docstring for every form and for the
evidence a pattern needs): :func:`trig` (one axis, one frequency per column), :func:`sinusoid`
(any sinusoidal position table: per-column phase, a fixed lead, interleaved or half-split
frequencies, partial rotary), :func:`position_table` (a table folded with a leading axis traced
at 1 that is a batch), and :func:`two_positions` (a rotary pair traced at 2 positions, pinned by
its frequencies or by a longer table it begins).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from onnxsurgery.passes.symbolize.table_generator import (
    MAX_LEAD,
    Generator,
    broadcast_rest,
    close,
    index_grid,
    take0,
)

__all__ = ["position_table", "sinusoid", "trig", "two_positions"]


#: how closely the ratios of consecutive rotary frequencies must agree (float32 angles)
RATIO_RTOL = 1e-3


def trig(arr: np.ndarray, axes: list[int]) -> Generator | None:
    if arr.dtype.kind != "f" or len(axes) != 1:
        return None
    k = axes[0]
    n = arr.shape[k]
    if n < 2:
        return None
    first = np.take(arr, [0], axis=k).astype(np.float64)
    second = np.take(arr, [1], axis=k).astype(np.float64)
    idx = index_grid(n, k, arr.ndim)
    if np.all(np.abs(first) > 1e-6):  # cos(0) = 1: amplitude, then the angle per step
        ratio = np.clip(second / first, -1.0, 1.0)
        freq = np.arccos(ratio)
        if n > 2:  # a longer lever arm where the angle stays below pi
            last = np.take(arr, [n - 1], axis=k).astype(np.float64)
            wide = np.arccos(np.clip(last / first, -1.0, 1.0)) / (n - 1)
            freq = np.where(freq * (n - 1) < np.pi - 1e-2, wide, freq)
        if close(arr, first * np.cos(idx * freq)):
            return Generator(
                "cos", axes, steps={k: freq.astype(np.float32)}, amp=first.astype(arr.dtype)
            )
    if np.all(np.abs(first) <= 1e-6):  # sin(0) = 0
        freq = np.arcsin(np.clip(second, -1.0, 1.0))
        if close(arr, np.sin(idx * freq)):
            return Generator("sin", axes, steps={k: freq.astype(np.float32)})
        freq = np.pi - freq
        if close(arr, np.sin(idx * freq)):
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
                best = (
                    (theta, cand)
                    if best is None
                    else (np.where(cand < best[1], theta, best[0]), np.minimum(cand, best[1]))
                )
        assert best is not None
        freqs = best[0] / pos
        # per column, the position where an error in x moves the angle least
        cond = np.abs(np.sin(best[0]) if kind == "cos" else np.cos(best[0])) * pos
        pick = np.argmax(cond, axis=0)
        freq = np.take_along_axis(freqs, pick[None], axis=0)
        fit = np.cos(pos * freq) if kind == "cos" else np.sin(pos * freq)
        if close(arr, np.moveaxis(fit, 0, k).astype(arr.dtype)):
            return Generator(
                kind,
                axes,
                steps={k: np.moveaxis(freq, 0, k).astype(np.float32)},
                phase=start,
            )
    return None


def sinusoid(arr: np.ndarray, axes: list[int], start: int = 0) -> Generator | None:
    """A sinusoidal position table along one axis: column ``c`` holds
    ``amp_c * sin((start + lead + i) * f_c + phi_c)`` with ``phi_c`` a multiple of pi/2 (sin,
    cos, or their negatives), ``lead`` one fixed start for every column (0 ..
    :data:`MAX_LEAD`), ``start`` a traced cache length (0: none; the plan names the length it
    moves with, ``phase``). The frequencies come from the values (:func:`_fit_sinusoid`); the
    lead and phases are snapped to those forms, and every traced value must then fit."""
    if arr.dtype.kind != "f" or len(axes) != 1 or arr.shape[axes[0]] < 3:
        return None
    k = axes[0]
    n = arr.shape[k]
    x = np.moveaxis(arr.astype(np.float64), k, 0)
    flat = x.reshape(n, -1)
    pos = start + np.arange(n, dtype=np.float64)[:, None]
    fitted = _fit_sinusoid(flat, pos)
    if fitted is None:
        return None
    freq, amp, rel, pinned = fitted  # x_i = amp * sin(f * pos_i + rel)
    shape = (1,) + x.shape[1:]

    def back(v: np.ndarray) -> np.ndarray:
        return np.moveaxis(v.reshape(shape), 0, k)

    quarter = np.pi / 2
    for lead in range(MAX_LEAD + 1):
        turns = (rel - freq * lead) / quarter
        snapped = np.round(turns)
        if np.any((np.abs(turns - snapped) > 1e-3) & pinned & (freq > 0)):
            continue
        at = _through_phase(flat, pos + lead, freq, amp, snapped * quarter)
        shift = at * lead + snapped * quarter
        if not _fits(flat, amp, pos * at + shift, (pos + lead) * at, arr.dtype):
            continue
        return Generator(
            "sin", axes, steps={k: back(at).astype(np.float32)},
            amp=back(amp).astype(arr.dtype), phase=start or None,
            shift=back(np.mod(shift, 2 * np.pi)).astype(np.float32), lead=lead,
        )  # fmt: skip
    return None


def _fits(x: np.ndarray, amp: np.ndarray, angle: np.ndarray, turned: np.ndarray, dtype) -> bool:
    """Whether ``x`` holds ``amp * sin(angle)``: :func:`close`, or off by no more than the
    rounding of the angle the table turned through (``turned``, ``pos * f``) in its own dtype.
    A float32 table at position 100 has angles near 100 whose rounding (4e-6) moves its
    values past :func:`close`'s 1e-6: the exporter's arithmetic, not another table."""
    fit = amp * np.sin(angle)
    if close(x, fit):
        return True
    scale = max(1.0, float(np.max(np.abs(x))) if x.size else 1.0)
    rounding = np.finfo(dtype).eps * np.abs(turned) * np.abs(amp)
    return bool(np.all(np.abs(x - fit) <= 1e-6 * scale + 1e-5 * np.abs(fit) + rounding))


def _through_phase(
    x: np.ndarray, pos: np.ndarray, freq: np.ndarray, amp: np.ndarray, phase: np.ndarray
) -> np.ndarray:
    """Per column, the frequency of ``amp * sin(pos * f + phase)`` nearest ``x`` with the
    phase known (snapped by :func:`sinusoid`): Gauss-Newton steps from ``freq``, on the columns
    whose values pin it (``sum (df x)^2 >= 1``, as :func:`_fit_sinusoid`'s ``reach``).

    The line of :func:`_angle_line` has its intercept free: over a few positions far from 0
    (a table from a cache length, positions 9 .. 11) its slope is off by float32 noise over the
    span (2), and that error times the position (11) outgrows the tolerance. With the angle at
    0 known, the lever arm is the position itself."""
    for _ in range(2):
        angle = pos * freq + phase
        jac = amp * np.cos(angle) * pos
        jj = np.sum(jac * jac, axis=0)
        step = np.sum((x - amp * np.sin(angle)) * jac, axis=0) / np.where(jj > 0, jj, 1.0)
        freq = np.where((jj >= 1.0) & (freq > 0), freq + step, freq)
    return freq


def _fit_sinusoid(
    x: np.ndarray, pos: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """Per column of ``x`` (values at positions ``pos`` along axis 0): frequency, amplitude,
    the angle at position 0 and whether the values pin the frequency down.

    A position table has one amplitude (:func:`_common_amplitude`; a column that never moves
    holds its value at frequency 0). With it, each value gives its angle (the branch nearest a
    first fit), and a weighted line through them the frequency. A column whose values barely
    move over the traced positions (a low frequency's cos near its peak) does not pin its
    frequency: it takes that of a pinned column the table repeats at a fixed distance (a
    ``[sin | cos]`` table's twin, :func:`_borrowed`); with none, no generator."""
    still = np.all(x == x[:1], axis=0)
    amp0, freq = _common_amplitude(x, still)
    if amp0 is None:
        return None
    amp = np.where(still, x[0], amp0)
    i = pos - pos[0]
    freq, theta = _angle_line(x, amp, freq, i, still)
    # how far the values move per unit of frequency: float32 values (~1e-7) pin a frequency
    # to 1e-7 / reach, under 1e-7 (1e-4 of angle at position 1000) where reach >= 1
    reach = np.sqrt(np.sum((amp * np.cos(theta) * pos) ** 2, axis=0))
    # the line's slope, its intercept free, is pinned by the span of the positions: to
    # 1e-7 / spread (a cos near its peak at positions 17 .. 19 moves 1e-4: 3e-4 of its
    # frequency), what a pinned pair may differ by beyond float32 rounding; a spread of 1 pins
    # it as a reach of 1 does (sin(p) at 0, 1, 2 turns past its peak: reach 0.99, spread 1.08)
    spread = np.sqrt(np.sum((amp * np.cos(theta) * (i - i.mean())) ** 2, axis=0))
    slack = 1e-7 / np.maximum(spread, 1e-12)
    pinned = still | (reach >= 1.0) | (spread >= 1.0)
    every = _borrowed(freq, pinned, still, slack)
    if every is None:
        return None
    freq = every
    _, start = _amplitude(x, freq, i)
    theta = np.where(still, np.where(amp >= 0, np.pi / 2, -np.pi / 2), start)
    return freq, np.abs(amp), theta - freq * pos[0], pinned


def _common_amplitude(x: np.ndarray, still: np.ndarray) -> tuple[float | None, np.ndarray]:
    """(the one amplitude of the moving columns, a first frequency per column): frequencies
    from the recurrence ``x[i-1] + x[i+1] = 2 cos(f) x[i]``, the amplitude from a
    least-squares fit where a column turns by half a radian or more (well conditioned); they
    must agree. None where no column shows it or they differ."""
    n = x.shape[0]
    mid = x[1:-1]
    den = 2 * np.sum(mid * mid, axis=0)
    num = np.sum((x[:-2] + x[2:]) * mid, axis=0)
    freq = np.arccos(np.clip(num / np.where(den > 0, den, 1.0), -1.0, 1.0))
    freq = np.where(still, 0.0, freq)
    amps, _ = _amplitude(x, freq, np.arange(n, dtype=np.float64)[:, None])
    sure = ~still & (freq * (n - 1) >= 0.5)
    if not np.any(sure):
        return None, freq
    amp = float(np.median(amps[sure]))
    if amp <= 0 or not np.allclose(amps[sure], amp, rtol=1e-4):
        return None, freq
    return amp, freq


def _angle_line(
    x: np.ndarray, amp: np.ndarray, freq: np.ndarray, i: np.ndarray, still: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Frequency and angles per column at a known amplitude: each value's angle on the branch
    nearest the current fit, then a line through them weighted by how well each value pins its
    angle (twice, from the first frequency).

    A moving column whose first frequency is 0 turns too little per step for the recurrence
    to see (a low frequency's sin near 0, ``sin(p f) ~ p f``: CTRL's last columns at positions
    5 .. 7). A fit at frequency 0 is a constant, at angle pi/2, as far from either branch of
    every value: each would take one at random and the line through them would be steep
    nonsense. Such a column's values lie on one branch (a turn too small to see crosses no
    peak, or the column does not pin its frequency, :func:`_fit_sinusoid`), so its first
    angles are the principal ones; the line then gives its frequency."""
    theta = np.zeros_like(x)
    unseen = ~still & (freq == 0)
    for step in range(2):
        _, first = _amplitude(x, freq, i)
        base = np.arcsin(np.clip(x / np.where(amp != 0, amp, 1.0), -1.0, 1.0))
        guess = np.where(unseen, base, first + freq * i) if step == 0 else first + freq * i
        best = None
        for br in (base, np.pi - base):
            cand = br + 2 * np.pi * np.round((guess - br) / (2 * np.pi))
            best = (
                cand
                if best is None
                else np.where(np.abs(cand - guess) < np.abs(best - guess), cand, best)
            )
        assert best is not None
        theta = best
        w = np.cos(best) ** 2 + 1e-12
        sw, si, sii = w.sum(0), (w * i).sum(0), (w * i * i).sum(0)
        sa, sia = (w * best).sum(0), (w * i * best).sum(0)
        det = sw * sii - si * si
        ok = ~still & (det > 1e-9 * np.maximum(sw * sii, 1e-30))
        slope = (sw * sia - si * sa) / np.where(ok, det, 1.0)
        freq = np.clip(np.where(ok, np.abs(slope), freq), 0.0, np.pi)
    return freq, theta


def _borrowed(
    freq: np.ndarray, pinned: np.ndarray, still: np.ndarray, slack: np.ndarray
) -> np.ndarray | None:
    """Frequencies with each unpinned column's taken from a pinned one at the distance ``m``
    (1 .. columns - 1, the smallest) at which every pinned pair of moving columns agrees (to
    1e-4, or to the ``slack`` of each column's fitted frequency where that is wider): a
    ``[sin | cos]`` table repeats its frequencies at half its width (columns that never move,
    a partial rotary's pass-through, are no pair). None where an unpinned column has no pinned
    one in its repeat."""
    if np.all(pinned):
        return freq
    cols = freq.size
    moving = pinned & ~still
    paired = _paired(freq, pinned, moving, slack)
    if paired is not None:
        return paired
    for m in range(1, cols):
        a, b = freq[:-m], freq[m:]
        both = moving[:-m] & moving[m:]
        if not np.any(both) or not _agree(a[both], b[both], (slack[:-m] + slack[m:])[both]):
            continue
        out = freq.copy()
        for c in np.flatnonzero(~pinned):
            twins = [t for t in range(c % m, cols, m) if moving[t]]
            if not twins:
                break
            out[c] = freq[twins[0]]
        else:
            return out
    return None


def _agree(a: np.ndarray, b: np.ndarray, slack: np.ndarray) -> bool:
    """Whether frequencies ``a`` and ``b`` agree to 1e-4 or within ``slack``."""
    return bool(np.all(np.abs(a - b) <= 1e-9 + np.maximum(1e-4 * np.abs(b), slack)))


def _paired(
    freq: np.ndarray, pinned: np.ndarray, moving: np.ndarray, slack: np.ndarray
) -> np.ndarray | None:
    """:func:`_borrowed` for a table whose columns come in adjacent pairs of one frequency
    (Vaswani's ``pe[:, 0::2] = sin, pe[:, 1::2] = cos``; a rotary table repeated by
    ``repeat_interleave``): every pair with both columns moving and pinned agrees, and each
    unpinned column takes its partner's. None where the columns are odd, a pinned pair
    disagrees, or an unpinned column's partner is unpinned too."""
    cols = freq.size
    if cols % 2 or cols < 4:
        return None
    a, b = freq[0::2], freq[1::2]
    both = moving[0::2] & moving[1::2]
    if np.sum(both) < 2 or not _agree(a[both], b[both], (slack[0::2] + slack[1::2])[both]):
        return None
    out = freq.copy()
    for c in np.flatnonzero(~pinned):
        partner = c ^ 1
        if not moving[partner]:
            return None
        out[c] = freq[partner]
    return out


def _amplitude(x: np.ndarray, freq: np.ndarray, i: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least squares ``x_i = a sin(f i) + b cos(f i)`` per column: (hypot(a, b), atan2(b, a))."""
    s, c = np.sin(i * freq), np.cos(i * freq)
    ss, cc, sc = (s * s).sum(0), (c * c).sum(0), (s * c).sum(0)
    sx, cx = (s * x).sum(0), (c * x).sum(0)
    det = ss * cc - sc * sc
    flat = det <= 1e-12 * np.maximum(ss * cc, 1e-30)  # frequency 0: a constant column
    safe = np.where(flat, 1.0, det)
    a = np.where(flat, 0.0, (sx * cc - cx * sc) / safe)
    b = np.where(flat, cx / np.maximum(cc, 1e-30), (cx * ss - sx * sc) / safe)
    return np.hypot(a, b), np.arctan2(b, a)


def position_table(arr: np.ndarray, axes: list[int], starts: tuple[int, ...]) -> Generator | None:
    """A cos/sin position table along one axis: from each of ``starts`` (:func:`_trig_from`,
    then :func:`~.trig_tables.sinusoid`), then any sinusoid. Where the other symbolic axes were traced at 1
    (a table folded with a leading axis of 1, read as a batch traced at 1), the table is matched
    along the one longer axis, tried last: ``axes[0]`` is then the positions, the others follow
    as broadcasts (:func:`evidence_gap` takes their one row only along a batch, whose rows
    repeat; the rebuilt table is expanded over them). So do symbolic axes along which every
    row is the same (:func:`_repeats`: a table expanded over a batch traced above 1), the
    table matched on their first row."""
    gen = None
    for start in starts:
        gen = gen or _trig_from(arr, axes, start) or sinusoid(arr, axes, start)
    gen = gen or sinusoid(arr, axes)
    along = [k for k in axes if arr.shape[k] > 1 and not _repeats(arr, k)]
    if gen is not None or len(axes) < 2 or len(along) != 1:
        return gen
    row = take0(arr, [k for k in axes if k not in along])  # one row along the broadcasts
    gen = trig(row, along)
    for start in starts:
        gen = gen or _trig_from(row, along, start) or sinusoid(row, along, start)
    gen = gen or sinusoid(row, along)
    return None if gen is None else broadcast_rest(gen, axes)


def _repeats(arr: np.ndarray, axis: int) -> bool:
    """Whether every slice of ``arr`` along ``axis`` is the first one: a table the exporter
    folded with the positions expanded over the batch (dynamo's rotary ``cos`` of ModernBERT's
    decoder, ``[batch, 1, seq, d]`` at batch 2), which broadcasts its one row there."""
    first = np.take(arr, [0], axis=axis)
    return bool(np.array_equal(arr, np.broadcast_to(first, arr.shape)))


def two_positions(
    arr: np.ndarray, axes: list[int], tables: Sequence[np.ndarray]
) -> Generator | None:
    """A rotary ``cos`` or ``sin`` table traced at 2 positions (0 and 1), taken only where more
    than its 2 rows show what it is; then :func:`evidence_gap` takes its 2 points (``pinned``).

    Two points fit a line, or any table, so a table of 2 rows alone shows nothing. A rotary
    table ``cos(p * f_i)`` / ``sin(p * f_i)`` is pinned by its frequencies instead: at position
    0 it holds exactly 1 / 0, at position 1 ``cos(f_i)`` / ``sin(f_i)``, and with both tables
    (``arr`` and a twin of its shape among ``tables``, or ``[sin | cos]`` halves of one table)
    each ``f_i`` is one angle, ``atan2(sin, cos)``, whose ``cos(p f)``, ``sin(p f)`` at every
    integer position ``p`` follow whatever turn it was traced on. What the values must then
    show, and a table not made so would not: ``sin^2 + cos^2 = 1`` in every column (the two
    tables hold one angle each) and the frequencies ``f_0 r^j`` of rotary's ``base^(-2j/d)``, a
    geometric progression of 3 or more distinct frequencies (any two numbers are one; a scaled
    rotary whose frequencies are no progression, llama3's or YaRN's, is refused). Never one
    table alone: a sin of 2 points cannot tell ``f`` from ``pi - f``, a cos alone not that it
    is one. Or (:func:`_prefix_of`) the table is, bit for bit, the first 2 rows of another of
    ``tables`` that its own 3 or more positions pin down as a cos/sin (an encoder's and a
    decoder's rotary tables from one ``inv_freq``, the decoder's traced longer).

    What no trace shows, at 2 positions as at more: positions that are no integer count
    (``linspace(0, 1, n)``) or a frequency that changes with the length (dynamic NTK)."""
    along = [k for k in axes if arr.shape[k] > 1]
    if arr.dtype.kind != "f" or len(along) != 1 or arr.shape[along[0]] != 2:
        return None
    k = along[0]
    gen = _prefix_of(arr, k, tables) or _pair_at_two(arr, k, tables) or _halves_at_two(arr, k)
    return None if gen is None else broadcast_rest(gen, axes, pinned=True)


def _prefix_of(arr: np.ndarray, k: int, tables: Sequence[np.ndarray]) -> Generator | None:
    """The cos/sin generator of the first of ``tables`` whose first 2 rows along ``k`` are
    ``arr`` exactly and whose 3 or more rows fit it from position 0 (:func:`~.trig_tables.trig`)."""
    for table in tables:
        if table.ndim != arr.ndim or table.dtype != arr.dtype or table.shape[k] < 3:
            continue
        if any(table.shape[j] != n for j, n in enumerate(arr.shape) if j != k):
            continue
        if np.array_equal(np.take(table, [0, 1], axis=k), arr):
            gen = trig(table, [k])
            if gen is not None:
                return gen
    return None


def _pair_at_two(arr: np.ndarray, k: int, tables: Sequence[np.ndarray]) -> Generator | None:
    """A cos (sin) table at positions 0 and 1 with its sin (cos) twin among ``tables``: one
    rotary angle per column (:func:`_rotary_angles`)."""
    x = np.moveaxis(arr.astype(np.float64), k, 0)
    if not (np.all(x[0] == 1) or np.all(x[0] == 0)):
        return None
    kind = "cos" if np.all(x[0] == 1) else "sin"
    for twin in tables:
        if twin.shape != arr.shape:
            continue
        y = np.moveaxis(twin.astype(np.float64), k, 0)
        if not np.all(y[0] == (1 if kind == "sin" else 0)):
            continue
        sin1, cos1 = (y[1], x[1]) if kind == "cos" else (x[1], y[1])
        freq = _rotary_angles(sin1, cos1)
        if freq is not None:
            steps = np.moveaxis(freq[None], 0, k)
            amp = np.ones_like(steps).astype(arr.dtype) if kind == "cos" else None
            return Generator(kind, [k], steps={k: steps}, amp=amp)
    return None


def _halves_at_two(arr: np.ndarray, k: int) -> Generator | None:
    """``[sin | cos]`` (or ``[cos | sin]``) halves of one rotary table along its last axis,
    traced at 2 positions: :func:`_pair_at_two` with the twin in the table itself."""
    x = np.moveaxis(arr.astype(np.float64), k, 0)
    if x.ndim < 2 or x.shape[-1] % 2 or k == arr.ndim - 1:
        return None
    half = x.shape[-1] // 2
    first, second = x[..., :half], x[..., half:]
    for sin, cos, phase in ((first, second, (0.0, np.pi / 2)), (second, first, (np.pi / 2, 0.0))):
        if not (np.all(sin[0] == 0) and np.all(cos[0] == 1)):
            continue
        freq = _rotary_angles(sin[1], cos[1])
        if freq is None:
            return None
        steps = np.moveaxis(np.concatenate([freq, freq], axis=-1)[None], 0, k)
        shift = np.concatenate([np.full_like(freq, phase[0]), np.full_like(freq, phase[1])], -1)
        return Generator(
            "sin", [k], steps={k: steps.astype(np.float32)},
            amp=np.ones_like(steps).astype(arr.dtype),
            shift=np.moveaxis(shift[None], 0, k).astype(np.float32),
        )  # fmt: skip
    return None


def _rotary_angles(sin1: np.ndarray, cos1: np.ndarray) -> np.ndarray | None:
    """The angle of each (sin, cos) pair at position 1, where every pair is one angle on the
    unit circle and the angles are a geometric progression of 3 or more distinct frequencies
    (each repeated any number of times, in any order: interleaved or half-split); else None."""
    if not np.allclose(sin1 * sin1 + cos1 * cos1, 1.0, rtol=0, atol=1e-5):
        return None
    freq = np.arctan2(sin1, cos1)
    if not np.all(freq > 0):
        return None  # a pass-through column (0) or an angle past pi: no rotary frequency
    distinct: list[float] = []
    for f in sorted(freq.reshape(-1).tolist(), reverse=True):
        if not distinct or f < distinct[-1] * (1 - RATIO_RTOL):
            distinct.append(f)
    if len(distinct) < 3:
        return None
    ratios = np.array(distinct[1:]) / np.array(distinct[:-1])
    if not np.allclose(ratios, ratios[0], rtol=RATIO_RTOL, atol=0):
        return None
    return freq.astype(np.float32)
