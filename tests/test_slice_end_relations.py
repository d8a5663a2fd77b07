"""Sizes over a KV cache the graph shows only at the traced length (issue 30): Doge's mask
sliced to the keys' length, and RoBERTa's positions counted from a folded cache length.

Doge with a cache by TorchScript cuts its expanded attention mask with ``mask[..., :key_len]``: a Slice from 0 to
``past + seq`` of an axis sized by the mask's own ``total``, traced where both were 8. The plan
read the end right, but did not know that ``total`` is the keys' length, so its check ran
``total`` 8 against 9 keys, ONNX Runtime failed where torch would have too, and symbolize
called its own plan wrong and refused. The relation ``total = past + seq`` now goes to the
check; the oracle is torch eager at three other sizes, through the sweep's worker."""

from __future__ import annotations

import pytest
from sweep_cases import scored_case


@pytest.mark.sweep_rows
@pytest.mark.parametrize("batch", [2, 1])
def test_doge_with_a_cache_matches_torch_by_torchscript(batch):
    case = scored_case("doge.causal-lm-kv", "torchscript", batch)
    assert case["symbolize"]["status"] == "pass", case["symbolize"]


@pytest.mark.sweep_rows
@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_camembert_with_a_cache_counts_positions_from_past(exporter):
    """RoBERTa's position ids over a cache are ``cumsum(mask) + past_key_values_length``, the
    length a Python int the export folds (5 here): it now moves with ``past``; kept, CamemBERT
    was 0.56 off torch at past 7 (output scale 0.89), exit 0, by both exporters."""
    case = scored_case("camembert.causal-lm-kv", exporter, 2)
    assert case["symbolize"]["status"] == "pass", case["symbolize"]


@pytest.mark.sweep_rows
def test_gemma4_with_a_cache_moves_a_partial_rotary_start_with_past():
    """Gemma 4's partial rotary angles by TorchScript are ``[p, 0, 0, 0, p, 0, 0, 0]`` at
    positions p = 5, 6, 7 (past 5): every moving step is 1, and the columns that do not rotate
    hold 0, so no uniform base read the start 5 and it stayed fixed: 0.72 off torch at past 7
    (output scale 0.93), exit 0. It is read as ``past`` steps now."""
    case = scored_case("gemma4.causal-lm-kv", "torchscript", 1)
    assert case["symbolize"]["status"] == "pass", case["symbolize"]
