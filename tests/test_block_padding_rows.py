"""The sweep's encoder-decoder rows with block-local attention, scored as the sweep scores
them (issue 30): PEGASUS-X pads its encoder to blocks of 512 and adds global tokens, LongT5
pads to blocks of 128; traced at seq 8 both are one block, so ``seq<=traced`` (the sweep's
``+bound`` advice) reads every pad as ``block - seq`` and the models match torch within the
bound. Re-export passed on every case; symbolize refused each of these even after the advice:

- PEGASUS-X, both exporters at batch 2: the split into blocks five nodes after the pad
  (LayerNorm, projection, per-head view, transpose) was out of reach, so the pad's amount was
  never read under the bound (``tests/test_block_padding_far.py``);
- PEGASUS-X and LongT5 by TorchScript: ``F.pad`` with amounts computed at run time (the
  global tokens' pad, LongT5's later layers) lost every shape after it, so the decoder's
  cross-attention mask kept its columns at the traced seq (PEGASUS-X: ONNX Runtime failed at
  seq 7) and LongT5's block count went unread (b1);
- LongT5's later layers pad by ``(-seq) % 128`` computed at run time, read within the bound as
  ``128 - seq``.
"""

from __future__ import annotations

import pytest
from sweep_cases import scored_cases


@pytest.mark.sweep_rows
@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_pegasus_x_passes_within_the_bound_both_batches(exporter):
    cases = scored_cases("pegasus_x.base", [exporter], [2, 1])
    from sweep import after_advice  # scored_cases puts bench/ on the path

    for case in cases:
        assert after_advice(case)["+bound"], case
        assert not after_advice(case)["advice wrong"], case


@pytest.mark.sweep_rows
def test_longt5_by_torchscript_passes_within_the_bound_at_batch_1():
    cases = scored_cases("longt5.base", ["torchscript"], [1, 2])
    from sweep import after_advice

    for case in cases:
        assert after_advice(case)["+bound"], case
