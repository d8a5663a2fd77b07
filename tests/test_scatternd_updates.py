"""ScatterND's updates have the indices' leading shape (issue 30, Cosmos3-omni by TorchScript at
batch 1).

Its rotary embedding scatters per-axis positions with ``freqs[..., idx] = ...``: a ScatterND
whose index grid is a Concat of one column per indexed axis, built from ``arange(seq)`` columns
the export folded at seq 8. No rule tied the updates (``[1, seq, 1]``) to the indices
(``[1, 8, 1, 3]``), so the grid stayed at 8, the check failed on ONNX Runtime at seq 9 and
symbolize refused its own plan. The oracle is torch eager at three other sizes."""

from __future__ import annotations

import pytest
from sweep_cases import scored_case


@pytest.mark.sweep_rows
def test_cosmos3_omni_by_torchscript_at_batch_1_matches_torch():
    case = scored_case("cosmos3_omni.base", "torchscript", 1)
    assert case["symbolize"]["status"] == "pass", case["symbolize"]
