"""``masked_scatter`` of rows picked by a token mask (issue 30: Higgs Audio's audio layers
normalize the hidden states of audio tokens and scatter them back; refused by both exporters at
batch 2 and 1 where re-export passes). Exported, the source is sliced to the mask's count,
``Slice(src, 0, count)``; with no masked token in the traced input both the count and the
source are empty there, and the slice's start 0 read as the end of an axis traced at 0. The
oracle is torch eager at sizes never traced, with and without masked tokens."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from sweep_cases import scored_case

import onnxsurgery
from onnxsurgery.passes.symbolize import Symbolize
from onnxsurgery.validation.runtime import run_model

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.e2e

CPU = onnxsurgery.PassContext(provider="cpu")
AXES = {"ids:0": "batch", "ids:1": "seq"}
SPECIAL = 3


class MaskedRows(nn.Module):
    """Embeddings whose special tokens' rows go through a layer of their own."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(16, 8)
        self.special = nn.Linear(8, 8)

    def forward(self, ids):  # noqa: ANN001
        x = self.embed(ids)
        mask = (ids == SPECIAL).unsqueeze(-1)
        picked = self.special(x[mask.expand_as(x)].view(-1, 8))
        return x.masked_scatter(mask.expand_as(x), picked)


def ids_without_special(shape: tuple[int, int], seed: int) -> np.ndarray:
    ids = np.random.default_rng(seed).integers(0, 16, shape)
    return np.where(ids == SPECIAL, SPECIAL + 1, ids).astype(np.int64)


@pytest.mark.parametrize("batch", [2, 1])
@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
def test_a_scatter_of_masked_rows_traced_without_any(batch, tmp_path):
    torch.manual_seed(0)
    module = MaskedRows().eval()
    path = tmp_path / "m.onnx"
    ids = torch.from_numpy(ids_without_special((batch, 6), 0))
    torch.onnx.export(
        module, (ids,), str(path), input_names=["ids"], output_names=["y"], dynamo=False,
        opset_version=17,
    )  # fmt: skip
    result = Symbolize(**AXES)(onnx.load(path), CPU)
    for shape, seed in (((3, 9), 1), ((1, 4), 2), ((2, 12), 3)):
        feed = ids_without_special(shape, seed)
        feed[0, 1] = SPECIAL  # some masked, some not
        for x in (feed, ids_without_special(shape, seed)):
            got = run_model(result.model, {"ids": x}, "cpu")["y"]
            with torch.no_grad():
                want = module(torch.from_numpy(x)).numpy()
            np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4)


@pytest.mark.sweep_rows
@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_higgs_audio_at_batch_2(exporter):
    """The sweep row: refused by both exporters before ("ScatterND updates have the indices'
    leading shape"); now it matches torch eager at every held-out size."""
    case = scored_case("higgs_audio_v2.base", exporter, 2)
    assert case["symbolize"]["status"] == "pass", case
