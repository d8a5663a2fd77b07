"""What an export bakes in and the graph cannot give back: TensorFlow 'same' padding computed
from the input size (transformers' MobileNetV2 ``tf_padding``), and relative-position tables
folded at the traced length (T5, WavLM exported by dynamo).

symbolize must refuse these naming the node, in one message that says why, and must not refuse
the look-alikes whose meaning the graph does fix (a convolution's own padding, a stride-1 pad).
The oracles are torch eager and the original model on ONNX Runtime.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from test_symbolize import parse

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


def same_pad(x, kernel: int, stride: int):  # noqa: ANN001
    """transformers' ``apply_tf_padding``: TensorFlow 'same' padding from the Python-int size."""
    pads = []
    for size in (int(x.shape[-1]), int(x.shape[-2])):
        total = max(kernel - stride, 0) if size % stride == 0 else max(kernel - size % stride, 0)
        pads += [total // 2, total - total // 2]
    return F.pad(x, pads)


class Stem(nn.Module):
    """A stride-2 3x3 conv, a stride-1 3x3 conv and a global pool. ``padding``: ``same`` computes
    the pads from the size, ``fixed`` pads (0, 1) always (Stable Diffusion's VAE downsampler),
    ``conv`` uses the convolutions' own padding=1."""

    def __init__(self, padding: str) -> None:
        super().__init__()
        self.padding = padding
        pad = 1 if padding == "conv" else 0
        self.down = nn.Conv2d(3, 4, 3, stride=2, padding=pad)
        self.conv = nn.Conv2d(4, 4, 3, padding=pad)

    def forward(self, x):  # noqa: ANN001
        if self.padding == "same":
            x = self.down(same_pad(x, 3, 2))
            x = self.conv(same_pad(x, 3, 1))
        elif self.padding == "fixed":
            x = self.conv(F.pad(self.down(F.pad(x, (0, 1, 0, 1))), (1, 1, 1, 1)))
        else:
            x = self.conv(self.down(x))
        return x.mean((2, 3))


def export(module, x, path, exporter: str) -> onnx.ModelProto:
    kwargs = {"dynamo": True} if exporter == "dynamo" else {"dynamo": False, "opset_version": 17}
    torch.onnx.export(module, (x,), str(path), input_names=["x"], output_names=["y"], **kwargs)
    return onnx.load(path)


def eager(module, x) -> np.ndarray:  # noqa: ANN001
    with torch.no_grad():
        return module(torch.from_numpy(x)).numpy()


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_same_padding_from_the_size_is_refused_naming_the_node(exporter, tmp_path):
    torch.manual_seed(0)
    same, fixed = Stem("same").eval(), Stem("fixed").eval()
    fixed.load_state_dict(same.state_dict())
    x = np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32)
    model = export(same, torch.from_numpy(x), tmp_path / "same.onnx", exporter)
    # Why it must be refused: at the traced size the two torch models are one graph, at an odd
    # size they differ, so no rebuild of the graph can be right for both.
    np.testing.assert_allclose(run_model(model, {"x": x}, "cpu")["y"], eager(fixed, x), atol=1e-5)
    odd = np.random.default_rng(1).standard_normal((2, 3, 15, 17)).astype(np.float32)
    assert np.abs(eager(same, odd) - eager(fixed, odd)).max() > 1e-3
    with pytest.raises(PassError) as info:
        Symbolize(**SPATIAL)(model, CPU)
    text = str(info.value)
    assert "TensorFlow 'same' padding" in text and "stride-2x2" in text
    assert "(1, 1) at lengths 1 mod 2" in text and "keep height, width static" in text
    down = next(n for n in model.graph.node if n.op_type in ("Pad", "Conv"))
    assert down.name in text  # the Pad (TorchScript) or the Conv it was folded into (dynamo)
    assert "\n" not in text.split("\n  ")[0] and len(text.split("\n  ")[0]) < 1500
    # The batch alone is fine: the padding at the traced height and width is right for any batch.
    result = Symbolize(**{"x:0": "batch"})(model, CPU)
    x3 = np.random.default_rng(2).standard_normal((3, 3, 16, 16)).astype(np.float32)
    np.testing.assert_allclose(
        run_model(result.model, {"x": x3}, "cpu")["y"], eager(same, x3), atol=1e-4, rtol=1e-3
    )


def test_same_padding_traced_at_an_odd_size(tmp_path):
    """At an odd traced size 'same' pads (1, 1): TorchScript keeps the Pad node and is refused;
    dynamo folds it into the Conv's own even pads, the very graph of Conv2d(padding=1), so only
    references at an even size can tell, and they do: the check refuses the model."""
    torch.manual_seed(0)
    same = Stem("same").eval()
    x = np.random.default_rng(0).standard_normal((2, 3, 15, 15)).astype(np.float32)
    script = export(same, torch.from_numpy(x), tmp_path / "ts.onnx", "torchscript")
    with pytest.raises(PassError, match=r"TensorFlow 'same' padding.*\(0, 1\) at lengths 0 mod 2"):
        Symbolize(**SPATIAL)(script, CPU)
    folded = export(same, torch.from_numpy(x), tmp_path / "dynamo.onnx", "dynamo")
    assert {n.op_type for n in folded.graph.node} == {"Conv", "ReduceMean"}
    even = np.random.default_rng(1).standard_normal((2, 3, 16, 18)).astype(np.float32)
    save_case(Case("even", {"x": even}, {"y": eager(same, even)}), tmp_path / "refs", index=0)
    ctx = onnxsurgery.PassContext(provider="cpu", references=tmp_path / "refs")
    with pytest.raises(PassError, match="height=16, width=18.*does not match the stored torch"):
        Symbolize(**SPATIAL)(folded, ctx)


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_a_convolutions_own_padding_is_no_same_padding(exporter, tmp_path):
    torch.manual_seed(0)
    module = Stem("conv").eval()
    x = np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32)
    model = export(module, torch.from_numpy(x), tmp_path / "conv.onnx", exporter)
    result = Symbolize(**SPATIAL)(model, CPU)
    for shape in ((3, 3, 15, 17), (1, 3, 20, 24)):
        xs = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        got = run_model(result.model, {"x": xs}, "cpu")["y"]
        np.testing.assert_allclose(got, eager(module, xs), atol=1e-4, rtol=1e-3)


# -- relative-position tables folded at the traced length ----------------------------------------


def bucket(d: np.ndarray, buckets: int = 8, exact: int = 2, far: int = 16) -> np.ndarray:
    """T5's bidirectional relative-position bucket of distance ``d``."""
    half = buckets // 2
    out = (d > 0) * half
    n = np.abs(d)
    large = exact + (np.log(np.maximum(n, 1) / exact) / np.log(far / exact) * (half - exact))
    return out + np.where(n < exact, n, np.minimum(large.astype(int), half - 1))


def scores_plus(table: np.ndarray) -> onnx.ModelProto:
    n = table.shape[-1]
    return parse(
        f"""
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[2, 2, {n}, {n}] x) => (float[2, 2, {n}, {n}] y) {{ y = Add (x, bias) }}
        """,
        bias=table.astype(np.float32),
    )


def test_a_folded_relative_position_table_is_refused_saying_what_is_missing():
    emb = np.random.default_rng(0).standard_normal((8, 2))  # [bucket, head]
    pos = np.arange(6)
    table = emb[bucket(pos[None, :] - pos[:, None])].transpose(2, 0, 1)[None]  # [1, 2, 6, 6]
    with pytest.raises(PassError) as info:
        Symbolize(**{"x:0": "batch", "x:2": "seq", "x:3": "seq"})(scores_plus(table), CPU)
    text = str(info.value)
    assert "Add 'y'" in text or "'bias'" in text
    assert "depends only on j - i along axes 2, 3" in text and "folded for distances -5..5" in text
    assert "export with TorchScript" in text and "not in the graph" in text
    # A table of no such structure keeps the general reason.
    other = np.random.default_rng(1).standard_normal((1, 2, 6, 6))
    with pytest.raises(PassError, match="follow no pattern") as info:
        Symbolize(**{"x:0": "batch", "x:2": "seq", "x:3": "seq"})(scores_plus(other), CPU)
    assert "j - i" not in str(info.value)


def test_a_patch_grid_table_is_named_in_the_input_sizes():
    """A learned table added whole to a stride-8 patch grid (DINOv2 by dynamo at its configured
    size): the blocker spells the grid from height and width and says which axes to leave out,
    not "data-dependent or fixed by the model"."""
    rng = np.random.default_rng(0)
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[1, 3, 16, 24] x) => (float[1, 6, 6] y) <int64[3] shape = {1, 6, -1}> {
            c = Conv <kernel_shape = [8, 8], strides = [8, 8]> (x, w)
            r = Reshape (c, shape)
            t = Transpose <perm = [0, 2, 1]> (r)
            y = Add (t, pos)
        }
        """,
        w=rng.standard_normal((6, 3, 8, 8)).astype(np.float32),
        pos=rng.standard_normal((1, 6, 6)).astype(np.float32),
    )
    with pytest.raises(PassError) as info:
        Symbolize(**SPATIAL)(model, CPU)
    text = str(info.value)
    assert "axis 1 (((height - 8)//8 + 1)*((width - 8)//8 + 1))" in text
    assert "re-export with dynamic axes for height, width" in text and "x:2, x:3" in text
    assert "data-dependent" not in text


def test_two_symbols_equal_when_traced_that_the_graph_joins_say_so():
    """T5 by dynamo adds the encoder's [seq, seq] mask in the decoder's cross-attention (one
    tensor, shared because seq == tgt when traced): the conflict says both were 8 and why."""
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[2, 4] a, float[2, 4] b) => (float[2, 4] y) { y = Add (b, a) }
        """
    )
    with pytest.raises(PassError) as info:
        Symbolize(**{"a:1": "seq", "b:1": "tgt"})(model, CPU)
    text = str(info.value)
    assert "needs seq == tgt, which holds only at the traced size (both 4 when traced" in text
    assert "re-export with dynamic axes for seq, tgt" in text


# -- reference cases decide what the graph cannot ------------------------------------------------


def torch_cases(module, folder, shapes) -> None:  # noqa: ANN001
    for k, shape in enumerate(shapes):
        x = np.random.default_rng(10 + k).standard_normal(shape).astype(np.float32)
        save_case(Case(f"case{k}", {"x": x}, {"y": eager(module, x)}), folder, index=k)


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
@pytest.mark.parametrize("padding", ["same", "fixed"])
def test_references_at_another_parity_choose_the_padding(padding, exporter, tmp_path):
    """With torch outputs at one odd size, symbolize keeps whichever of the fixed pads and
    'same' padding matches them, and the model then matches torch at sizes it never saw."""
    torch.manual_seed(0)
    module = Stem(padding).eval()
    x = np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32)
    model = export(module, torch.from_numpy(x), tmp_path / "m.onnx", exporter)
    torch_cases(module, tmp_path / "refs", [(1, 3, 15, 17)])
    ctx = onnxsurgery.PassContext(provider="cpu", references=tmp_path / "refs")
    result = Symbolize(**SPATIAL)(model, ctx)
    said = " ".join(d.message for d in result.diagnostics)
    if padding == "same":
        assert "'same' padding (auto_pad=SAME_UPPER) matches the reference cases" in said
        assert any(a.s == b"SAME_UPPER" for n in result.model.graph.node for a in n.attribute)
        pads = [sum(n.op_type == "Pad" for n in m.graph.node) for m in (model, result.model)]
        assert pads[1] == pads[0] - (exporter == "torchscript")  # the stride-2 conv's Pad went
    else:
        assert "the fixed pads as exported matches the reference cases" in said
    for shape in ((3, 3, 21, 18), (1, 3, 9, 30), (2, 3, 16, 16)):
        xs = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        got = run_model(result.model, {"x": xs}, "cpu")["y"]
        np.testing.assert_allclose(got, eager(module, xs), atol=1e-4, rtol=1e-3)


def test_references_that_cannot_tell_the_paddings_apart_keep_the_refusal(tmp_path):
    torch.manual_seed(0)
    module = Stem("same").eval()
    x = np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32)
    model = export(module, torch.from_numpy(x), tmp_path / "m.onnx", "dynamo")
    torch_cases(module, tmp_path / "refs", [(3, 3, 16, 16), (1, 3, 20, 12)])  # all even
    ctx = onnxsurgery.PassContext(provider="cpu", references=tmp_path / "refs")
    with pytest.raises(PassError, match=r"the reference cases given match .* alike \(add cases"):
        Symbolize(**SPATIAL)(model, ctx)


class PatchTable(nn.Module):
    """DINOv2's embeddings: 8x8 patches, a class token, and a learned position table for a 2x3
    grid, used as is at that grid (torch.export takes that branch) and resized (``mode``) to
    any other."""

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode
        self.patch = nn.Conv2d(3, 6, 8, stride=8)
        self.cls = nn.Parameter(torch.randn(1, 1, 6))
        self.pos = nn.Parameter(torch.randn(1, 1 + 2 * 3, 6))

    def forward(self, x):  # noqa: ANN001
        tokens = self.patch(x).flatten(2).transpose(1, 2)
        tokens = torch.cat([self.cls.expand(x.shape[0], -1, -1), tokens], dim=1)
        h, w = x.shape[2] // 8, x.shape[3] // 8
        if (h, w) == (2, 3):
            return tokens + self.pos
        grid = self.pos[:, 1:].reshape(1, 2, 3, 6).permute(0, 3, 1, 2)
        grid = F.interpolate(grid, size=(h, w), mode=self.mode, align_corners=False)
        return tokens + torch.cat([self.pos[:, :1], grid.permute(0, 2, 3, 1).reshape(1, -1, 6)], 1)


@pytest.mark.parametrize("mode", ["bicubic", "bilinear"])
def test_references_at_another_grid_resize_a_learned_table(mode, tmp_path):
    torch.manual_seed(0)
    module = PatchTable(mode).eval()
    x = np.random.default_rng(0).standard_normal((2, 3, 16, 24)).astype(np.float32)
    model = export(module, torch.from_numpy(x), tmp_path / "m.onnx", "dynamo")
    with pytest.raises(PassError, match=r"pass reference cases \(--ref\) at another grid size"):
        Symbolize(**SPATIAL)(model, CPU)
    torch_cases(module, tmp_path / "refs", [(1, 3, 40, 32)])  # a 5x4 grid
    ctx = onnxsurgery.PassContext(provider="cpu", references=tmp_path / "refs")
    result = Symbolize(**SPATIAL)(model, ctx)
    said = " ".join(d.message for d in result.diagnostics)
    assert f"resized {mode} to the grid matches the reference cases" in said
    for shape in ((3, 3, 16, 24), (2, 3, 24, 56), (1, 3, 8, 16)):  # grids 2x3, 3x7, 1x2
        xs = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        got = run_model(result.model, {"x": xs}, "cpu")["y"]
        np.testing.assert_allclose(got, eager(module, xs), atol=1e-4, rtol=1e-3)
