"""Sinusoidal position tables folded at positions from a cache length (``past .. past + seq - 1``).

CTRL's ``pos_encoding`` (``[sin | cos]`` of ``pos / 10000^(2 (i // 2) / d)``) read at positions
5 .. 7 (dynamo's CTRL with a cache, traced at seq 3, past 5) was refused: "its values follow no
pattern symbolize can extend", though every value is there (:func:`sinusoid` read the table at
some starts and sizes and not at others). Three causes, each a class:

- a low frequency's sin near 0 (``sin(p f) ~ p f``) turns too little per step for the
  recurrence, which gave it frequency 0; the fit at 0 is a constant at angle pi/2, as far from
  either branch of every value, and the line through the angles each picked at random was
  steep nonsense (the last sin column at positions 5 .. 7 came out at 1.57 rad per step);
- the line's intercept is free, so over a few positions far from 0 its slope is pinned only by
  their span: a cos near its peak at positions 17 .. 19 came out 3e-4 off, and a ``[sin | cos]``
  twin then disagreed past 1e-4 (now the agreement allows each fit's own precision), and the
  frequencies, once the phase was snapped, missed at position 11 by 2e-6 (now refit with the
  phase known: the lever is the position itself);
- a float32 table's angles near 100 round by 4e-6, past :func:`close`'s 1e-6 (now the check
  allows the rounding of the angle in the table's own dtype).

A table that is no sinusoid (a column at another phase, noise of 1e-3) is still refused.
"""

from __future__ import annotations

import numpy as np
import pytest
from sweep_cases import scored_case

from onnxsurgery.passes.symbolize.trig_tables import sinusoid

F32 = np.float32


def ctrl_table(start: int, n: int, d: int, phase: float = 0.0) -> np.ndarray:
    """CTRL's ``positional_encoding`` rows ``start .. start + n - 1`` in float32 as torch makes
    them (``phase`` added to the sin half: a table that only looks like one)."""
    i = np.arange(d, dtype=F32)
    rates = (1 / np.power(F32(10000), (2 * (i // 2)) / F32(d))).astype(F32)
    ang = (np.arange(start, start + n, dtype=F32)[:, None] * rates[None]).astype(F32)
    sines = np.sin(ang[:, 0::2] + F32(phase))
    return np.concatenate([sines, np.cos(ang[:, 1::2])], axis=1).astype(F32)[None]


def expected(start: int, n: int, d: int) -> np.ndarray:
    i = np.arange(d, dtype=np.float64)
    rates = 1 / np.power(10000.0, 2 * (i // 2) / d)
    ang = np.arange(start, start + n, dtype=np.float64)[:, None] * rates[None]
    return np.concatenate([np.sin(ang[:, 0::2]), np.cos(ang[:, 1::2])], axis=1)


def rebuilt(gen, start: int, n: int) -> np.ndarray:
    """The generator's table at positions ``start ..``: ``amp * sin(pos * freq + shift)``."""
    freq = gen.steps[1].astype(np.float64).reshape(-1)
    amp = gen.amp.astype(np.float64).reshape(-1)
    shift = gen.shift.astype(np.float64).reshape(-1)
    pos = np.arange(start + gen.lead, start + gen.lead + n, dtype=np.float64)[:, None]
    return amp * np.sin(pos * freq + shift)


@pytest.mark.parametrize("d", [16, 32, 64, 128])
@pytest.mark.parametrize(("n", "past"), [(3, 5), (3, 9), (4, 7), (3, 17), (8, 33), (4, 100)])
def test_ctrl_table_from_a_cache_length_is_a_sinusoid(d, n, past):
    gen = sinusoid(ctrl_table(past, n, d), [1], start=past)
    assert gen is not None
    assert gen.lead == 0 and gen.phase == past
    for at, size in ((0, 4), (past + n, 1), (3, 12)):  # sizes and starts never traced
        np.testing.assert_allclose(rebuilt(gen, at, size), expected(at, size, d), atol=2e-5)


@pytest.mark.parametrize("d", [8, 32, 64])
def test_ctrl_table_from_0_at_3_positions_is_a_sinusoid(d):
    """sin(p) at 0, 1, 2 turns past its peak: the line pins its frequency though the values at
    0 move it by nothing."""
    gen = sinusoid(ctrl_table(0, 3, d), [1])
    assert gen is not None
    np.testing.assert_allclose(rebuilt(gen, 4, 6), expected(4, 6, d), atol=2e-5)


@pytest.mark.parametrize("past", [5, 17, 100])
def test_a_table_that_only_looks_like_ctrls_is_refused(past):
    assert sinusoid(ctrl_table(past, 4, 32, phase=0.3), [1], start=past) is None
    noisy = ctrl_table(past, 4, 32) + np.random.default_rng(0).normal(0, 1e-3, (1, 4, 32))
    assert sinusoid(noisy.astype(F32), [1], start=past) is None


@pytest.mark.sweep_rows
@pytest.mark.parametrize("batch", [2, 1])
def test_ctrl_with_a_cache_by_dynamo_matches_torch(batch):
    """dynamo folds CTRL's ``pos_encoding[past .. past + 2]`` into ``index_1 [1, 3, 32]`` (an
    Add onto the embeddings); symbolize rebuilds it from ``past`` and matches torch eager at
    held-out sizes (before: refused, no pattern)."""
    case = scored_case("ctrl.causal-lm-kv", "dynamo", batch)
    assert case["symbolize"]["status"] == "pass", case["symbolize"]


@pytest.mark.sweep_rows
@pytest.mark.parametrize("batch", [2, 1])
@pytest.mark.parametrize(
    ("row", "exporters"),
    [("pegasus.causal-lm-kv", ["torchscript"]), ("roformer.causal-lm-kv", ["torchscript", "dynamo"])],
)
def test_frozen_sinusoid_tables_with_a_cache_match_torch(row, exporters, batch):
    """Pegasus's position table is ``[sin | cos]`` too, and RoFormer's rotary one, both built
    frozen; the exporters fold their rows ``past .. past + 2`` into ``[3, d]`` constants. They
    were refused ("no pattern") only because the sweep's build put noise on the frozen tables;
    built as a checkpoint holds them, symbolize rebuilds the rows from ``past`` and matches
    torch eager at held-out sizes."""
    for exporter in exporters:
        case = scored_case(row, exporter, batch)
        assert case["symbolize"]["status"] == "pass", case["symbolize"]

