"""symbolize on small torch modules exported statically here by both exporters, compared with
torch eager at batches they were never traced at."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import onnxsurgery
from onnxsurgery.passes.symbolize import Symbolize
from onnxsurgery.validation.runtime import run_model

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.e2e


class ZeroStateLSTM(nn.Module):
    """An LSTM whose zero initial state is built from the Python-int batch."""

    def __init__(self, batch: int) -> None:
        super().__init__()
        self.batch = batch
        self.lstm = nn.LSTM(6, 8, batch_first=True)
        self.head = nn.Linear(8, 3)

    def forward(self, x):  # noqa: ANN001
        h0 = torch.zeros(1, self.batch, 8)
        c0 = torch.zeros(1, self.batch, 8)
        out, _ = self.lstm(x, (h0, c0))
        return self.head(out[:, -1])


class ClsTokenExpand(nn.Module):
    """A learned token expanded to the Python-int batch and prepended (ViT style), a slice of the
    batch axis, and a ConstantOfShape-style zeros tensor added to it."""

    def __init__(self, batch: int) -> None:
        super().__init__()
        self.batch = batch
        self.cls = nn.Parameter(torch.randn(1, 1, 6))
        self.proj = nn.Linear(6, 6)

    def forward(self, x):  # noqa: ANN001
        tokens = torch.cat([self.cls.expand(self.batch, -1, -1), self.proj(x)], dim=1)
        tokens = tokens + torch.zeros(self.batch, tokens.shape[1], 6)
        return tokens[: self.batch].mean(1)


class ViewHead(nn.Module):
    """Conv features flattened with ``x.view(N, -1)``, N the Python-int batch."""

    def __init__(self, batch: int) -> None:
        super().__init__()
        self.batch = batch
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 4 * 4, 5)

    def forward(self, x):  # noqa: ANN001
        return self.fc(torch.relu(self.conv(x)).view(self.batch, -1))


CASES = {
    "zero_state_lstm": (ZeroStateLSTM, (5, 6)),
    "cls_token_expand": (ClsTokenExpand, (4, 6)),
    "view_head": (ViewHead, (3, 4, 4)),
}


def _export(module, x, path, dynamo: bool) -> onnx.ModelProto:
    kwargs = {"dynamo": True} if dynamo else {"dynamo": False, "opset_version": 17}
    torch.onnx.export(module, (x,), str(path), input_names=["x"], output_names=["y"], **kwargs)
    return onnx.load(path)


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
@pytest.mark.parametrize("traced", [1, 3])
@pytest.mark.parametrize("name", sorted(CASES))
def test_static_export_matches_torch_at_other_batches(name, traced, exporter, tmp_path):
    cls, rest = CASES[name]
    torch.manual_seed(0)
    module = cls(traced).eval()
    x = torch.randn(traced, *rest)
    model = _export(module, x, tmp_path / "model.onnx", exporter == "dynamo")
    result = Symbolize()(model, onnxsurgery.PassContext(provider="cpu"))
    assert result.modified
    for batch in (2, 5):
        state = module.state_dict()
        torch.manual_seed(0)
        eager = cls(batch).eval()
        eager.load_state_dict(state)  # the author's model configured for this batch
        xb = torch.randn(batch, *rest)
        with torch.no_grad():
            ref = eager(xb).numpy()
        got = run_model(result.model, {"x": xb.numpy()}, "cpu")["y"]
        np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-3)
