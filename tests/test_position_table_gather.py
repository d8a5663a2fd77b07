"""A Gather of positions straight from a whole position table (issue 30, CTRL by TorchScript).

CTRL keeps its sinusoidal ``pos_encoding`` for all ``n_positions`` rows ([256, d_model]) and
gathers ``arange(seq)`` from it. With d_model 32 and seq traced at 8, the table's feature axis
is 4 x traced seq, and the rule for XLNet's tables folded at a multiple of the traced length
(:mod:`passes.symbolize.indexed_tables`) took it for one and refused. The Gather reads the
table along its 256 rows, every one of them in the file: the index becomes ``Range(seq)``. The
oracle is torch eager at three other sizes, through the sweep's worker."""

from __future__ import annotations

import pytest
from sweep_cases import scored_case


@pytest.mark.sweep_rows
def test_ctrl_by_torchscript_matches_torch():
    case = scored_case("ctrl.base", "torchscript", 2)
    assert case["symbolize"]["status"] == "pass", case["symbolize"]
