"""Position tables over a patch grid that torch interpolates to the input's grid in code.

YOLOS interpolates its learned table to ``(height // 8, width // 8)`` computed in Python ints:
TorchScript folds the Resize's sizes at the traced grid, and the table (class token, grid rows,
detection tokens) must still be added to the patch tokens at every size. symbolize ties the
Resize's height and width to the patch grid's, axis by axis. The oracle is torch eager.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from sweep_cases import scored_case

import onnxsurgery
from onnxsurgery.errors import PassError
from onnxsurgery.passes.symbolize import Symbolize
from onnxsurgery.validation.references import Case, save_case
from onnxsurgery.validation.runtime import run_model

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

pytestmark = pytest.mark.e2e

CPU = onnxsurgery.PassContext(provider="cpu")
SPATIAL = {"x:0": "batch", "x:2": "height", "x:3": "width"}


class ScaledTable(nn.Module):
    """YOLOS's embeddings: 8x8 patches between a class token and 3 detection tokens, plus a
    learned table for a 2x3 grid resized bicubically to the input's grid, whose size is
    computed in Python ints (``swap``: to (width, height), a look-alike torch code)."""

    def __init__(self, swap: bool = False) -> None:
        super().__init__()
        self.swap = swap
        self.patch = nn.Conv2d(3, 6, 8, stride=8)
        self.cls = nn.Parameter(torch.randn(1, 1, 6))
        self.det = nn.Parameter(torch.randn(1, 3, 6))
        self.pos = nn.Parameter(torch.randn(1, 1 + 2 * 3 + 3, 6))

    def forward(self, x):  # noqa: ANN001
        b, _, height, width = x.shape
        tokens = self.patch(x).flatten(2).transpose(1, 2)
        tokens = torch.cat([self.cls.expand(b, -1, -1), tokens, self.det.expand(b, -1, -1)], 1)
        size = (height // 8, width // 8)
        grid = self.pos[:, 1:-3].transpose(1, 2).reshape(1, 6, 2, 3)
        grid = F.interpolate(grid, size=size[::-1] if self.swap else size, mode="bicubic")
        table = torch.cat([self.pos[:, :1], grid.flatten(2).transpose(1, 2), self.pos[:, -3:]], 1)
        return tokens + table


def export(module, shape, path) -> onnx.ModelProto:  # noqa: ANN001
    x = torch.from_numpy(np.random.default_rng(0).standard_normal(shape).astype(np.float32))
    torch.onnx.export(
        module, (x,), str(path), input_names=["x"], output_names=["y"], dynamo=False,
        opset_version=17,
    )  # fmt: skip
    return onnx.load(path)


def eager(module, x) -> np.ndarray:  # noqa: ANN001
    with torch.no_grad():
        return module(torch.from_numpy(x)).numpy()


def resize_sizes(model: onnx.ModelProto) -> list[str]:
    """What each Resize of ``model`` reads as its sizes."""
    return [n.input[3] for n in model.graph.node if n.op_type == "Resize"]


@pytest.mark.parametrize("batch", [2, 1])
def test_a_resize_folded_at_the_traced_grid_follows_the_patch_grid(batch, tmp_path):
    """Traced at a square grid (2x2), where height and width cannot be told apart by value: the
    Resize's sizes follow the patch grid axis by axis, and the model matches torch at grids it
    never saw, square or not."""
    torch.manual_seed(0)
    module = ScaledTable().eval()
    model = export(module, (batch, 3, 16, 16), tmp_path / "m.onnx")
    folded = {i.name for i in model.graph.initializer} | {
        o for n in model.graph.node if n.op_type == "Constant" for o in n.output
    }
    assert all(s in folded for s in resize_sizes(model))  # the mechanism: sizes folded
    result = Symbolize(**SPATIAL)(model, CPU)
    assert not any(s in folded for s in resize_sizes(result.model))
    for shape in ((3, 3, 24, 40), (1, 3, 40, 16), (2, 3, 16, 16), (2, 3, 32, 24)):
        x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        got = run_model(result.model, {"x": x}, "cpu")["y"]
        np.testing.assert_allclose(got, eager(module, x), atol=1e-4, rtol=1e-3)


def test_references_that_contradict_the_grid_reading_keep_a_refusal(tmp_path):
    """Torch code resizing to (width, height) exports the same graph at a square grid; a
    reference case at a grid that is not square shows the axis-by-axis reading wrong, and
    symbolize refuses rather than return it."""
    torch.manual_seed(0)
    module = ScaledTable(swap=True).eval()
    model = export(module, (2, 3, 16, 16), tmp_path / "m.onnx")
    x = np.random.default_rng(2).standard_normal((1, 3, 24, 40)).astype(np.float32)
    save_case(Case("case0", {"x": x}, {"y": eager(module, x)}), tmp_path / "refs", index=0)
    ctx = onnxsurgery.PassContext(provider="cpu", references=tmp_path / "refs")
    with pytest.raises(PassError):
        Symbolize(**SPATIAL)(model, ctx)


class NearestTable(nn.Module):
    """TimeSformer's embeddings: 8x8 patches, a class token, and a learned table for a 2x2 grid,
    added as is where the token count is the table's (TorchScript records that branch) and
    else resized to the grid with torch's 'nearest' (``floor(i * old / new)``)."""

    def __init__(self) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, 6, 8, stride=8)
        self.cls = nn.Parameter(torch.randn(1, 1, 6))
        self.pos = nn.Parameter(torch.randn(1, 1 + 2 * 2, 6))

    def forward(self, x):  # noqa: ANN001
        patches = self.patch(x)
        width = patches.shape[3]
        tokens = patches.flatten(2).transpose(1, 2)
        tokens = torch.cat([self.cls.expand(x.shape[0], -1, -1), tokens], dim=1)
        if tokens.size(1) == self.pos.size(1):
            return tokens + self.pos
        grid = self.pos[:, 1:].transpose(1, 2).reshape(1, 6, 2, 2)
        grid = F.interpolate(grid, size=(tokens.size(1) // width, width), mode="nearest")
        return tokens + torch.cat([self.pos[:, :1], grid.flatten(2).transpose(1, 2)], 1)


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")  # the branch, on purpose
def test_references_at_another_grid_choose_a_nearest_resize(tmp_path):
    """The table exported as is at the traced grid: a reference case at another grid matches
    its nearest resize alone (not bicubic, not bilinear), and the model then matches torch at
    grids it never saw."""
    torch.manual_seed(0)
    module = NearestTable().eval()
    model = export(module, (2, 3, 16, 16), tmp_path / "m.onnx")
    x = np.random.default_rng(2).standard_normal((1, 3, 24, 40)).astype(np.float32)  # 3x5
    save_case(Case("case0", {"x": x}, {"y": eager(module, x)}), tmp_path / "refs", index=0)
    ctx = onnxsurgery.PassContext(provider="cpu", references=tmp_path / "refs")
    result = Symbolize(**SPATIAL)(model, ctx)
    said = " ".join(d.message for d in result.diagnostics)
    assert "resized nearest to the grid matches the reference cases" in said
    for shape in ((3, 3, 40, 24), (2, 3, 16, 56), (1, 3, 56, 48)):  # grids 5x3, 2x7, 7x6
        xs = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        got = run_model(result.model, {"x": xs}, "cpu")["y"]
        np.testing.assert_allclose(got, eager(module, xs), atol=1e-4, rtol=1e-3)


class LookedUpTable(NearestTable):
    """Idefics3's embeddings: the table looked up per image by position ids (``arange`` over
    the patches, one row per image), which dynamo folds into a [batch, tokens, dim] constant
    holding the table once per traced image; resized as :class:`NearestTable` at other
    grids."""

    def forward(self, x):  # noqa: ANN001
        tokens = self.patch(x).flatten(2).transpose(1, 2)
        tokens = torch.cat([self.cls.expand(x.shape[0], -1, -1), tokens], dim=1)
        if tokens.size(1) == self.pos.size(1):
            ids = torch.arange(tokens.size(1)).expand(x.shape[0], -1)
            return tokens + self.pos[0][ids]
        return super().forward(x)


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")  # the branch, on purpose
def test_a_table_repeated_over_the_batch_is_resized_as_one(tmp_path):
    """Folded once per image of the traced batch, the table is still one table: the blocker
    offers the resize, and a reference case at another grid chooses it."""
    torch.manual_seed(0)
    module = LookedUpTable().eval()
    x = torch.randn(2, 3, 16, 16)
    path = tmp_path / "m.onnx"
    torch.onnx.export(module, (x,), path, input_names=["x"], output_names=["y"], dynamo=True)
    model = onnx.load(path)
    folded = [i for i in model.graph.initializer if list(i.dims) == [2, 5, 6]]
    assert folded  # the mechanism: the lookup folded at the traced batch
    with pytest.raises(PassError, match="resizes the table to the grid"):
        Symbolize(**SPATIAL)(model, CPU)
    x = np.random.default_rng(2).standard_normal((1, 3, 24, 40)).astype(np.float32)  # 3x5
    save_case(Case("case0", {"x": x}, {"y": eager(module, x)}), tmp_path / "refs", index=0)
    ctx = onnxsurgery.PassContext(provider="cpu", references=tmp_path / "refs")
    result = Symbolize(**SPATIAL)(model, ctx)
    for shape in ((3, 3, 40, 24), (2, 3, 16, 56), (1, 3, 56, 48)):
        xs = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        got = run_model(result.model, {"x": xs}, "cpu")["y"]
        np.testing.assert_allclose(got, eager(module, xs), atol=1e-4, rtol=1e-3)


@pytest.mark.sweep_rows
def test_idefics3_vision_by_dynamo_at_batch_2():
    """The sweep row: its refusal offered no reference cases before; now one reference case
    at another grid chooses the resize, and the model matches torch eager at every held-out
    size."""
    case = scored_case("idefics3_vision.base", "dynamo", 2)
    assert case["symbolize"]["status"] == "refused", case
    assert case["symbolize+ref"]["status"] == "pass", case
