"""ShuffleNetV2's units by TorchScript (issue 30: torchvision's quantized ShuffleNetV2 x0.5 to
x2.0, refused at batch 2 and 1 where re-export passes). Each unit chunks its channels in two,
which TorchScript slices at ``(channels + 1) // 2``, computed at run time from the shape, and
shuffles them back with ``view(b, 2, c // 2, h, w)``. From the second unit on, the channels it
chunks come out of the previous unit's view, whose size the Reshape hint read as twice the
chunk computed from them: the chunk, a run-time division of itself, stayed unknown, and the
next view refused ("needs ?o20 == 4"). A size the hint wrote in the quotient it divides into
keeps its traced value there. The oracle is torch eager at batches never traced."""

from __future__ import annotations

import pytest
from torch_oracle import export_static, matches_eager

import onnxsurgery
from onnxsurgery.passes.symbolize import Symbolize

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.e2e


def channel_shuffle(x, groups: int):  # noqa: ANN001, ANN201
    b, c, h, w = x.size()
    x = x.view(b, groups, c // groups, h, w).transpose(1, 2).contiguous()
    return x.view(b, -1, h, w)


class Unit(nn.Module):
    """torchvision's ``InvertedResidual`` at stride 1: half the channels through a branch."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.branch = nn.Sequential(nn.Conv2d(channels // 2, channels // 2, 1), nn.ReLU())

    def forward(self, x):  # noqa: ANN001
        x1, x2 = x.chunk(2, dim=1)
        return channel_shuffle(torch.cat((x1, self.branch(x2)), dim=1), 2)


class Shuffle(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 1)
        self.units = nn.Sequential(Unit(8), Unit(8), Unit(8))

    def forward(self, x):  # noqa: ANN001
        return self.units(self.stem(x)).mean((2, 3))


@pytest.mark.parametrize("batch", [2, 1])
@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
def test_units_chunking_what_the_last_one_shuffled(batch, tmp_path):
    torch.manual_seed(0)
    module = Shuffle().eval()
    model = export_static(module, torch.randn(batch, 3, 4, 4), tmp_path / "m.onnx")
    result = Symbolize(**{"x:0": "batch"})(model, onnxsurgery.PassContext(provider="cpu"))
    matches_eager(result.model, module, [(3, 3, 4, 4), (1, 3, 4, 4), (5, 3, 4, 4)], seed_axis=0)
