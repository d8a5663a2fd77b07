"""No silent fixed sizes: a size symbolize keeps at a traced value that a symbol's traced size
fits too is refused naming the node, the value, the symbol and both readings, unless the user
keeps it (``keep=NODE``) or reference cases at another size choose; a size tied to a symbol by a
hint where the fixed value fits too leaves that symbol ``ambiguous``.

The model that found it: torchvision's deeplabv3 ends with ``F.interpolate(x, size=
input.shape[-2:])``; a static export at 64x64 bakes ``[64, 64]`` into the final Resize, which
nothing downstream forces, so symbolize kept it and said ``verified: runs`` while every output
stayed 64x64. :class:`Deeplab` below is its shape in small (stride-4 backbone, ASPP pooling
branch resized to the feature size, final resize to the input size).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

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
SPATIAL = {"*:0": "batch", "*:2": "height", "*:3": "width"}
OTHER_SIZES = ((3, 3, 48, 40), (1, 3, 32, 64))


class Deeplab(nn.Module):
    """deeplabv3's shape in small; ``fixed`` resizes to 64x64 always (the size meant fixed)."""

    def __init__(self, fixed: bool = False) -> None:
        super().__init__()
        self.fixed = fixed
        self.backbone = nn.Sequential(
            nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, 2, 1)
        )
        self.branch = nn.Conv2d(8, 4, 1)
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(8, 4, 1))
        self.head = nn.Conv2d(8, 3, 1)

    def forward(self, x):  # noqa: ANN001
        f = self.backbone(x)
        p = F.interpolate(self.pool(f), size=f.shape[-2:], mode="bilinear", align_corners=False)
        y = self.head(torch.cat([self.branch(f), p], 1))
        size = (64, 64) if self.fixed else x.shape[-2:]
        return F.interpolate(y, size=size, mode="bilinear", align_corners=False)


def export(module, batch: int, path, exporter: str) -> onnx.ModelProto:  # noqa: ANN001
    x = torch.randn(batch, 3, 64, 64)
    kwargs = {"dynamo": True} if exporter == "dynamo" else {"dynamo": False, "opset_version": 17}
    torch.onnx.export(module, (x,), str(path), input_names=["x"], output_names=["y"], **kwargs)
    return onnx.load(path)


def eager(module, x: np.ndarray) -> np.ndarray:  # noqa: ANN001
    with torch.no_grad():
        return module(torch.from_numpy(x)).numpy()


def final_resize(model: onnx.ModelProto) -> str:
    return [n.name for n in model.graph.node if n.op_type == "Resize"][-1]


def references(module, folder, shapes=((3, 3, 48, 56),)):  # noqa: ANN001
    for k, shape in enumerate(shapes):
        x = np.random.default_rng(k).standard_normal(shape).astype(np.float32)
        save_case(Case(f"case{k}", {"x": x}, {"y": eager(module, x)}), folder, index=k)
    return onnxsurgery.PassContext(provider="cpu", references=folder)


def matches_torch(model: onnx.ModelProto, module) -> None:  # noqa: ANN001
    for shape in OTHER_SIZES:
        x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
        got = run_model(model, {"x": x}, "cpu")["y"]
        np.testing.assert_allclose(got, eager(module, x), atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_a_resize_to_the_input_size_is_refused_naming_the_resize(exporter, batch, tmp_path):
    torch.manual_seed(0)
    model = export(Deeplab().eval(), batch, tmp_path / "m.onnx", exporter)
    node = final_resize(model)
    with pytest.raises(PassError) as err:
        Symbolize(**SPATIAL)(model, CPU)
    text = str(err.value)
    assert f"sets the size of Resize {node!r} to 64 (= height), 64 (= width)" in text
    assert "fixed at 64, 64 (as traced) or follows height, width" in text
    assert f"symbolize(keep={node})" in text


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_references_at_another_size_make_the_resize_follow_height_and_width(
    exporter, batch, tmp_path
):
    torch.manual_seed(0)
    module = Deeplab().eval()
    model = export(module, batch, tmp_path / "m.onnx", exporter)
    result = Symbolize(**SPATIAL)(model, references(module, tmp_path / "refs"))
    said = [str(d) for d in result.diagnostics]
    assert any("the sizes following their symbols match the reference cases" in d for d in said)
    assert result.report.verification.levels == {
        "batch": "references", "height": "references", "width": "references"
    }  # fmt: skip
    matches_torch(result.model, module)


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_a_resize_meant_fixed_stays_fixed_only_when_kept_or_shown(exporter, tmp_path):
    torch.manual_seed(0)
    module = Deeplab(fixed=True).eval()
    model = export(module, 2, tmp_path / "m.onnx", exporter)
    node = final_resize(model)
    with pytest.raises(PassError, match=f"sets the size of Resize '{node}'"):
        Symbolize(**SPATIAL)(model, CPU)
    kept = Symbolize(**SPATIAL, keep=node)(model, CPU)
    assert any(
        "64 kept fixed as traced, though height fits too" in str(d) for d in kept.diagnostics
    )
    matches_torch(kept.model, module)
    shown = Symbolize(**SPATIAL)(model, references(module, tmp_path / "refs"))
    said = [str(d) for d in shown.diagnostics]
    assert any("the sizes fixed as traced match the reference cases" in d for d in said)
    matches_torch(shown.model, module)


def test_keep_naming_no_node_is_a_one_line_error(tmp_path):
    torch.manual_seed(0)
    model = export(Deeplab().eval(), 2, tmp_path / "m.onnx", "torchscript")
    with pytest.raises(PassError, match=r"keep=/Nope: no node of that name in the graph"):
        Symbolize(**SPATIAL, keep="/Nope")(model, CPU)
    with pytest.raises(ValueError, match="keep must name nodes"):
        Symbolize(keep=["/Resize", 3])


def test_the_cli_refuses_with_exit_2_and_keeps_with_keep(tmp_path):
    from typer.testing import CliRunner

    from onnxsurgery.cli import app

    torch.manual_seed(0)
    export(Deeplab(fixed=True).eval(), 2, tmp_path / "m.onnx", "torchscript")
    chain = "symbolize(*:0=batch, *:2=height, *:3=width)"
    out = str(tmp_path / "o.onnx")
    refused = CliRunner().invoke(
        app, ["run", str(tmp_path / "m.onnx"), "-o", out, "--passes", chain]
    )
    assert refused.exit_code == 2, refused.output
    assert "sets the size of Resize '/Resize_1'" in refused.output
    assert "Traceback" not in refused.output
    kept = chain.replace(")", ", keep=/Resize_1)")
    done = CliRunner().invoke(app, ["run", str(tmp_path / "m.onnx"), "-o", out, "--passes", kept])
    assert done.exit_code == 0, done.output


# -- the other direction: a size a hint tied to a symbol, where the fixed value fits too -------

SLICE_TO_SEQ = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[2,5,4] x) => (float[2,5,4] y) <int64[1] s = {0}, int64[1] e = {5}, int64[1] ax = {1}> {
  y = Slice (x, s, e, ax)
}
"""


def test_a_hinted_size_leaves_its_symbol_ambiguous_until_references_decide(tmp_path):
    """``x[:, :5]`` at seq 5 reads as ``x[:, :seq]`` (the bound equals the axis) or a fixed 5."""
    model = onnx.parser.parse_model(SLICE_TO_SEQ)
    axes = {"x:0": "batch", "x:1": "seq"}
    result = Symbolize(**axes)(model, CPU)
    assert result.report.verification.levels["seq"] == "ambiguous"
    assert any(
        "seq is ambiguous: Slice" in str(d)
        and "the fixed 5 (as traced) fits the graph too" in str(d)
        for d in result.diagnostics
    )
    with pytest.raises(PassError, match="verify=references: .*seq to ambiguous"):
        Symbolize(**axes, verify="references")(model, CPU)
    x = np.random.default_rng(0).standard_normal((2, 7, 4)).astype(np.float32)
    save_case(Case("seq7", {"x": x}, {"y": x}), tmp_path / "refs", index=0)
    ctx = onnxsurgery.PassContext(provider="cpu", references=tmp_path / "refs")
    decided = Symbolize(**axes)(model, ctx)
    assert decided.report.verification.levels["seq"] == "references"


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_torchvisions_deeplabv3_is_refused_naming_the_resize_or_follows_the_references(
    exporter, batch, tmp_path
):
    """The model itself (weights=None, 64x64): never wrong, refused naming the final Resize,
    and right at other sizes once reference cases at another size choose."""
    segmentation = pytest.importorskip("torchvision.models.segmentation")
    torch.manual_seed(0)
    net = segmentation.deeplabv3_mobilenet_v3_large(weights=None, weights_backbone=None)
    module = _Out(net.eval())
    model = export(module, batch, tmp_path / "m.onnx", exporter)
    with pytest.raises(PassError, match=f"sets the size of Resize '{final_resize(model)}'"):
        Symbolize(**SPATIAL)(model, CPU)
    result = Symbolize(**SPATIAL)(model, references(module, tmp_path / "refs"))
    matches_torch(result.model, module)


class _Out(nn.Module):
    """torchvision's segmentation models return {'out': ...}: the tensor alone."""

    def __init__(self, net) -> None:  # noqa: ANN001
        super().__init__()
        self.net = net

    def forward(self, x):  # noqa: ANN001
        return self.net(x)["out"]
