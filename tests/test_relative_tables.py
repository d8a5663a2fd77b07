"""Relative-position sinusoids folded at the traced length (issue 30, wav2vec2-conformer).

wav2vec2-conformer's ``RelPositionalEmbedding`` builds sin/cos over the distances ``T-1 .. -(T-1)``
(``2T - 1`` rows) and reads them through the rel-shift (pad, reshape, slice). TorchScript folds
the table at the traced frame count; dynamo keeps the whole buffer and slices a window around
its distance 0. Nothing downstream fixes the table's length, so it stayed as traced: the model
ran at every length and was 9.2e-3 off torch (3.5e-3 of the output's scale) at 3 frames,
traced at 4, by both exporters at both batches: the sweep's 4 wrong cases. The oracle here is
torch eager, through the sweep's own worker."""

from __future__ import annotations

import numpy as np
import pytest
from sweep_cases import scored_cases

from onnxsurgery.passes.symbolize.trig_tables import sinusoid


def vaswani(positions: np.ndarray, width: int) -> np.ndarray:
    """The table as ESPnet and transformers build it: interleaved sin/cos columns."""
    div = np.exp(np.arange(0, width, 2, dtype=np.float32) * -(np.log(10000.0) / width))
    pe = np.zeros((positions.size, width), np.float32)
    pe[:, 0::2] = np.sin(positions[:, None] * div)
    pe[:, 1::2] = np.cos(positions[:, None] * div)
    return pe


def test_an_interleaved_table_over_descending_distances_is_a_sinusoid_from_minus_its_center():
    # its slow columns barely move over 7 rows: each takes the frequency of its pair's sin
    table = vaswani(np.arange(3, -4, -1, dtype=np.float32), 32)[None]
    gen = sinusoid(table, [1], start=-3)
    assert gen is not None and gen.lead == 0
    assert sinusoid(table, [1]) is None  # from row 0 it is no table (distance 0 is row 3)


@pytest.mark.sweep_rows
def test_wav2vec2_conformer_matches_torch_at_other_lengths_by_both_exporters():
    cases = scored_cases("wav2vec2-conformer.base", ["torchscript", "dynamo"], [2, 1])
    got = {(c["exporter"], c["batch"]): c["symbolize"]["status"] for c in cases}
    assert got == {(e, b): "pass" for e in ("torchscript", "dynamo") for b in (2, 1)}, cases
