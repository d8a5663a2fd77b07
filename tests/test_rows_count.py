"""The rows check counts the rows of an output whose dims the plan does not know (issue 30,
SigLIP's vision model by TorchScript at batch 1).

SigLIP pools with ``probe.repeat(batch, 1, 1)`` into a ``MultiheadAttention``. Traced at batch 1,
the plan read the probe and the Tile's ones the wrong way round, and the pooled output came out
with ``batch * batch`` rows: 9 at batch 3 where torch gives 3, exit 0, verified ``rows`` (the
sweep's wrong case): the check compared the first and last of them with each row run alone and
they happened to agree. A batch of n rows gives n rows where one row alone gives 1: any other
count now fails the check, and the case is refused, not wrong. The oracle is torch eager,
through the sweep's worker."""

from __future__ import annotations

import pytest
from sweep_cases import scored_case


@pytest.mark.sweep_rows
def test_siglip_vision_by_torchscript_at_batch_1_is_not_wrong():
    case = scored_case("siglip_vision_model.base", "torchscript", 1)
    assert case["symbolize"]["status"] in ("pass", "refused"), case["symbolize"]
    if case["symbolize"]["status"] == "refused":
        assert (
            "rows along axis 0 at batch 2, where one row alone gives 1"
            in case["symbolize"]["message"]
        )
