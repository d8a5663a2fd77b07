"""Slice assignment into a buffer made in torch code (issue 30: MiniCPM3's multi-head latent
attention builds its keys as ``k = new_empty(bsz, heads, q_len, dim)`` and fills
``k[..., :nope] = k_nope`` and ``k[..., nope:] = k_pe``; refused at a batch-1 trace by
TorchScript, "batch rows are not independent", where re-export passes). TorchScript folds the
buffer at the traced sizes and lowers each assignment to a ScatterND over one index per element,
whose batch coordinate is the constant 0 at batch 1. The buffer's axes that an assignment writes
whole are its indices' axes, and that coordinate enumerates the batch. The oracle is torch eager
at sizes never traced."""

from __future__ import annotations

import onnx
import pytest
from sweep_cases import scored_case

import onnxsurgery
from onnxsurgery.passes.symbolize import Symbolize

torch = pytest.importorskip("torch")
from torch_oracle import export_static, matches_eager  # noqa: E402

nn = torch.nn

pytestmark = pytest.mark.e2e

CPU = onnxsurgery.PassContext(provider="cpu")
AXES = {"x:0": "batch", "x:1": "seq"}


class SplitKeys(nn.Module):
    """Keys of two parts per head (a projected part and a shared part broadcast over the
    heads) written into one buffer, then attention over them."""

    def __init__(self) -> None:
        super().__init__()
        self.nope = nn.Linear(8, 3 * 3)
        self.pe = nn.Linear(8, 4)
        self.q = nn.Linear(8, 3 * 7)

    def forward(self, x):  # noqa: ANN001
        b, s, _ = x.shape
        k_nope = self.nope(x).view(b, s, 3, 3).transpose(1, 2)
        k_pe = self.pe(x).view(b, s, 1, 4).transpose(1, 2)
        keys = k_pe.new_empty(b, 3, s, 7)
        keys[:, :, :, :3] = k_nope
        keys[:, :, :, 3:] = k_pe
        q = self.q(x).view(b, s, 3, 7).transpose(1, 2)
        att = torch.softmax(q @ keys.transpose(2, 3), -1) @ keys
        return att.transpose(1, 2).reshape(b, s, 21)


def built() -> SplitKeys:
    torch.manual_seed(0)
    return SplitKeys().eval()


def export(batch: int, path) -> onnx.ModelProto:  # noqa: ANN001
    return export_static(built(), torch.randn(batch, 6, 8), path)


def test_at_batch_2_the_buffer_follows_the_batch(tmp_path):
    model = export(2, tmp_path / "m.onnx")
    assert any(n.op_type == "ScatterND" for n in model.graph.node)  # the mechanism
    result = Symbolize(**AXES)(model, CPU)
    matches_eager(result.model, built(), ((3, 6, 8), (2, 9, 8), (1, 4, 8), (4, 11, 8)))


def test_at_batch_1_a_broadcast_part_is_refused_not_wrong(tmp_path):
    """Traced at batch 1, the part broadcast over the heads (``k_pe``) reaches its assignment
    through a view whose 1s the graph cannot place: refused, caught by the check, never a
    model with rows mixed (MiniCPM3's own graph passes: the sweep row below)."""
    with pytest.raises(onnxsurgery.PassError):
        Symbolize(**AXES)(export(1, tmp_path / "m.onnx"), CPU)


@pytest.mark.sweep_rows
def test_minicpm3_by_torchscript_at_batch_1():
    """The sweep row: refused by the check ("batch rows are not independent") before; now it
    matches torch eager at every held-out size."""
    case = scored_case("minicpm3.base", "torchscript", 1)
    assert case["symbolize"]["status"] == "pass", case
