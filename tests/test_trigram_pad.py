"""MobileBERT's trigram embedding pads the sequence by one token at either end, then its
attention views ``[batch, seq, width]`` as ``[batch, seq, heads, dim]`` (issue 30: refused at a
batch-1 trace by both exporters, passed at batch 2). At batch 1 the view's leading 1 times seq
is the padded length, which read as one block of ``seq`` after a pad to a multiple of it, so a
fixed pad of 1 could not be told from a block pad. The oracle is torch eager at other sizes."""

from __future__ import annotations

import onnx
import pytest
from sweep_cases import scored_case

import onnxsurgery
from onnxsurgery.passes.symbolize import Symbolize

torch = pytest.importorskip("torch")
from torch_oracle import export_static, matches_eager  # noqa: E402

nn = torch.nn
F = torch.nn.functional

pytestmark = pytest.mark.e2e

CPU = onnxsurgery.PassContext(provider="cpu")
AXES = {"x:0": "batch", "x:1": "seq"}


class Trigram(nn.Module):
    """Each token's embedding beside its neighbours' (zeros past either end), projected, then
    self-attention over 2 heads."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(24, 8)
        self.qkv = nn.Linear(8, 24)

    def forward(self, x):  # noqa: ANN001
        tri = torch.cat(
            [F.pad(x[:, 1:], [0, 0, 0, 1]), x, F.pad(x[:, :-1], [0, 0, 1, 0])], dim=2
        )  # fmt: skip
        h = self.proj(tri)
        b, s, _ = h.shape
        q, k, v = (t.view(b, s, 2, 4).transpose(1, 2) for t in self.qkv(h).split(8, dim=2))
        att = torch.softmax(q @ k.transpose(2, 3), -1) @ v
        return att.transpose(1, 2).reshape(b, s, 8)


@pytest.mark.parametrize("dynamo", [False, True])
def test_a_fixed_pad_before_a_view_at_batch_1_is_not_a_block_pad(dynamo, tmp_path):
    torch.manual_seed(0)
    module = Trigram().eval()
    model = export_static(module, torch.randn(1, 8, 8), tmp_path / "m.onnx", dynamo=dynamo, opset=18)
    result = Symbolize(**AXES)(model, CPU)
    matches_eager(result.model, module, ((1, 5, 8), (3, 8, 8), (2, 13, 8), (1, 16, 8)))


class BlockMeans(nn.Module):
    """LongT5's local blocks: the sequence padded to a multiple of 4, viewed as blocks."""

    def forward(self, x):  # noqa: ANN001
        b, s, f = x.shape
        x = F.pad(x, [0, 0, 0, -s % 4])
        return x.view(b, -1, 4, f).mean(2)


@pytest.mark.parametrize("dynamo", [False, True])
def test_a_pad_to_one_block_at_batch_1_is_still_told_apart(dynamo, tmp_path):
    """The other side: a pad to one whole block, traced at batch 1, stays the blocker it is
    (a fixed pad and a pad to the block fit the graph alike)."""
    path = tmp_path / "m.onnx"
    torch.onnx.export(
        BlockMeans(), (torch.randn(1, 3, 8),), str(path), input_names=["x"], output_names=["y"],
        dynamo=dynamo, opset_version=18,
    )  # fmt: skip
    with pytest.raises(onnxsurgery.PassError, match="a pad to a multiple of 4"):
        Symbolize(**AXES)(onnx.load(path), CPU)


@pytest.mark.sweep_rows
@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_mobilebert_at_batch_1(exporter):
    """The sweep row: refused at batch 1 by both exporters before; now it matches torch eager
    at every held-out size."""
    case = scored_case("mobilebert.base", exporter, 1)
    assert case["symbolize"]["status"] == "pass", case
