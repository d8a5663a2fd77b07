"""Windowed attention over a feature map padded to whole windows, the pad computed in torch code
(SAM's and SAM-HQ's vision encoders, issue 30: refused by TorchScript at batch 2 and 1 where
re-export passes). Traced, ``pad = (window - height % window) % window`` is a run-time Mod of the
window size, a constant the analysis may not take for fixed; the window count ``(height + pad)
* (width + pad) / window**2`` an exact division of run-time values. The height is fixed by the
model and only the batch varies, so both are one number at every size. The oracle is torch
eager at batches never traced."""

from __future__ import annotations

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


class WindowAttention(nn.Module):
    """SAM's vision layer: a 4x4 map of 8 channels padded to one 14x14 window, mixed within
    each window, merged back (the batch recovered from the window count) and cropped, after a
    residual LayerNorm, as ``SamVisionLayer`` writes it. The second of two layers reads its
    height from the first's crop, whose end is a constant that could be a size."""

    def __init__(self, window: int = 14) -> None:
        super().__init__()
        self.window = window
        self.norm = nn.LayerNorm(8)
        self.mix = nn.Linear(8, 8)

    def forward(self, x):  # noqa: ANN001
        y = self.norm(x)
        height, width = y.shape[1], y.shape[2]
        b, h, w, c = y.shape
        pad_h = (self.window - h % self.window) % self.window
        pad_w = (self.window - w % self.window) % self.window
        y = F.pad(y, (0, 0, 0, pad_w, 0, pad_h))
        hp, wp = h + pad_h, w + pad_w
        win = y.reshape(b, hp // self.window, self.window, wp // self.window, self.window, c)
        win = win.permute(0, 1, 3, 2, 4, 5).contiguous().reshape(-1, self.window, self.window, c)
        flat = win.reshape(win.shape[0], -1, c)
        mixed = torch.softmax(flat @ flat.transpose(1, 2), -1) @ self.mix(flat)
        win = mixed.reshape(win.shape)
        batch = win.shape[0] // (hp * wp // self.window // self.window)
        back = win.reshape(
            batch, hp // self.window, wp // self.window, self.window, self.window, -1
        )
        back = back.permute(0, 1, 3, 2, 4, 5).contiguous().reshape(batch, hp, wp, -1)
        return x + back[:, :height, :width, :].contiguous()


@pytest.mark.parametrize("batch", [2, 1])
def test_a_window_pad_of_a_fixed_map_is_one_number_at_every_batch(batch, tmp_path):
    torch.manual_seed(0)
    module = nn.Sequential(WindowAttention(), WindowAttention()).eval()
    model = export_static(module, torch.randn(batch, 4, 4, 8), tmp_path / "m.onnx")
    assert any(n.op_type == "Mod" for n in model.graph.node)  # the mechanism: a run-time pad
    result = Symbolize(**{"x:0": "batch"})(model, CPU)
    matches_eager(result.model, module, [(b, 4, 4, 8) for b in (1, 3, 5)], seed_axis=0)


@pytest.mark.sweep_rows
@pytest.mark.parametrize("batch", [2, 1])
def test_sam_vision_by_torchscript(batch):
    """The sweep rows: refused at both traces before ("Div $o63 + 4 / $v66 is exact"); now
    they match torch eager at every held-out batch."""
    case = scored_case("sam_vision_model.base", "torchscript", batch)
    assert case["symbolize"]["status"] == "pass", case


@pytest.mark.sweep_rows
@pytest.mark.parametrize("batch", [2, 1])
def test_sam3_vit_by_torchscript(batch):
    """The sweep row, height and width symbolized as well: the pad ``(24 - h % 24) % 24`` of
    a map that follows the image, the padded size ``24 * windows``, the windows' batch
    ``batch * windows`` (read where the window count is computed). Refused before ("Div
    $o26 + $v21 / $v30 is exact"); now it matches torch eager at every held-out size."""
    case = scored_case("sam3_vit_model.base", "torchscript", batch)
    assert case["symbolize"]["status"] == "pass", case
