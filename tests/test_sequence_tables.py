"""A learned position table torch interpolates to the sequence's length (issue 30: SAM3's lite
text encoder, ``F.interpolate(table, size=(seq, C), mode="bilinear")`` where ``seq`` differs
from the table's length). Exported at the table's own length, the interpolation is skipped and
the table is added whole: at another length the graph cannot say whether it is sliced (learned
positions 0..seq-1) or resized, so symbolize refuses, and a reference case at another length
chooses the resize that alone matches it. Exported at another length, the file holds only the
table torch interpolated to that length, so nothing can rebuild it: the reference case then
matches no reading, and the bound (the table sliced) is refused by it too. The oracle is torch
eager at lengths never traced, shorter and longer than the table."""

from __future__ import annotations

import numpy as np
import pytest
from torch_oracle import export_static, matches_eager

import onnxsurgery
from onnxsurgery.errors import PassError
from onnxsurgery.passes.symbolize import Symbolize
from onnxsurgery.validation.references import Case, save_case

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

pytestmark = pytest.mark.e2e

LENGTH = 8


class InterpolatedPositions(nn.Module):
    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode
        self.table = nn.Parameter(torch.randn(1, 1, LENGTH, 16))
        self.proj = nn.Linear(16, 16)

    def forward(self, x):  # noqa: ANN001
        table = self.table
        if x.shape[1] != LENGTH:
            table = F.interpolate(table, size=(x.shape[1], 16), mode=self.mode)
        return self.proj(x + table.reshape(1, x.shape[1], 16))


def _with_reference(module: nn.Module, shape: tuple[int, ...], folder) -> onnxsurgery.PassContext:
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    with torch.no_grad():
        y = module(torch.from_numpy(x)).numpy()
    save_case(Case("case0", {"x": x}, {"y": y}), folder, index=0)
    return onnxsurgery.PassContext(provider="cpu", references=folder)


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
def test_a_table_exported_at_its_own_length_is_resized_as_the_reference_case_shows(mode, tmp_path):
    torch.manual_seed(0)
    module = InterpolatedPositions(mode).eval()
    model = export_static(
        module, torch.randn(2, LENGTH, 16), tmp_path / "m.onnx", dynamo=True, opset=18
    )
    axes = {"x:0": "batch", "x:1": "seq"}
    with pytest.raises(PassError, match=r"pass reference cases \(--ref\) at another seq"):
        Symbolize(**axes)(model, onnxsurgery.PassContext(provider="cpu"))
    ctx = _with_reference(module, (3, 5, 16), tmp_path / "refs")
    result = Symbolize(**axes)(model, ctx)
    matches_eager(result.model, module, [(1, 3, 16), (2, 6, 16), (4, 13, 16), (2, 20, 16)])


def test_a_table_interpolated_at_the_trace_is_not_in_the_file(tmp_path):
    """Traced at 6, the file holds the table interpolated to 6: no reading matches a case at
    another length, and the bound's slice does not match it either (the sweep, which ran the
    bound without a case, scored that slice wrong against torch: SAM3's lite text by dynamo)."""
    torch.manual_seed(0)
    module = InterpolatedPositions("bilinear").eval()
    model = export_static(module, torch.randn(2, 6, 16), tmp_path / "m.onnx", dynamo=True, opset=18)
    ctx = _with_reference(module, (3, 5, 16), tmp_path / "refs")
    for seq in ("seq", "seq<=traced"):
        with pytest.raises(PassError, match="does not match|match no reading"):
            Symbolize(**{"x:0": "batch", "x:1": seq})(model, ctx)


class SlicedPositions(nn.Module):
    """Learned positions 0..seq-1 (CLIP's text encoder): exported at the table's length, the
    slice is the whole table, added as it is."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(1, LENGTH, 16))
        self.proj = nn.Linear(16, 16)

    def forward(self, x):  # noqa: ANN001
        return self.proj(x + self.table[:, : x.shape[1]])


def test_a_case_one_row_short_does_not_tell_a_cut_table_from_the_nearest_rows(tmp_path):
    """At seq 7 of 8 the nearest rows are the first seven: the case matched the nearest resize,
    which the sweep then scored wrong at seq 5 (CLIP's text encoder by dynamo); now the cut
    table matching too leaves it refused, and the bound with the case reads it cut."""
    torch.manual_seed(0)
    module = SlicedPositions().eval()
    model = export_static(
        module, torch.randn(2, LENGTH, 16), tmp_path / "m.onnx", dynamo=True, opset=18
    )
    ctx = _with_reference(module, (3, LENGTH - 1, 16), tmp_path / "refs")
    with pytest.raises(PassError, match="cut to the length .learned positions 0..seq-1. alike"):
        Symbolize(**{"x:0": "batch", "x:1": "seq"})(model, ctx)
    result = Symbolize(**{"x:0": "batch", "x:1": "seq<=traced"})(model, ctx)
    matches_eager(result.model, module, [(1, 3, 16), (2, 5, 16), (4, LENGTH, 16)])
