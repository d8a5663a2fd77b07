"""Tokens routed by a sort, as a mixture of experts routes them (issue 30: JetMoE by dynamo,
refused at batch 2 and 1 where re-export passes). Each token picks its top 2 of 4 experts; the
``tokens * 2`` picks are sorted (``argsort``: a TopK whose K is the traced ``batch*seq*2``),
each pick's token is run through a layer and written back into zeros of ``tokens * 2`` rows
(folded at the trace) at the sorted positions, and those rows are viewed ``[batch, seq, 4, 16]``
as the queries of an attention under a causal mask.

The readings the graph leaves open: the zeros are as many rows as the positions written into
them (a buffer the size of its index set); the top-2's k, 2 like the traced batch, counts
experts (a fixed axis of 4), never the batch; the sort's K is a top-k of a fixed count or the
whole axis, which JetMoE's rows leave to a reference case: with the sorts fixed its queries
keep the traced length and their folded causal mask cannot grow, so that reading is no reading.
The oracle is torch eager at sizes never traced."""

from __future__ import annotations

import pytest
from sweep_cases import scored_cases
from torch_oracle import export_static, matches_eager

import onnxsurgery
from onnxsurgery.passes.symbolize import Symbolize

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.e2e

CPU = onnxsurgery.PassContext(provider="cpu")


class SortedRouting(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate = nn.Linear(8, 4)
        self.up = nn.Linear(8, 32)
        self.keys = nn.Linear(8, 64)

    def forward(self, x):  # noqa: ANN001
        b, s, h = x.shape
        flat = x.reshape(-1, h)
        _, experts = self.gate(flat).topk(2, dim=-1)
        order = experts.reshape(-1).argsort()
        routed = self.up(flat[order // 2])
        queries = torch.zeros(b * s * 2, 32).index_put((order,), routed)
        q = queries.view(b, s, 4, 16).transpose(1, 2)
        k = self.keys(x).view(b, s, 4, 16).transpose(1, 2)
        scores = q @ k.transpose(-1, -2)
        causal = torch.ones(s, s, dtype=torch.bool).tril()
        scores = scores.masked_fill(~causal, -1e4)
        return (scores.softmax(-1) @ k).transpose(1, 2).reshape(b, s, 64)


@pytest.mark.parametrize("batch", [2, 1])
def test_a_sort_of_routed_tokens_follows_the_tokens(batch, tmp_path):
    """Refused before at both batches: at 2 the top-2 read as the batch (ONNX Runtime failed
    at batch 3, "invalid index"), at 1 the sort kept its traced 16 (a row computed with
    another batch differs)."""
    torch.manual_seed(0)
    module = SortedRouting().eval()
    x = torch.randn(batch, 8, 8)
    model = export_static(module, x, tmp_path / "m.onnx", dynamo=True, opset=18)
    result = Symbolize(**{"x:0": "batch", "x:1": "seq"})(model, CPU)
    matches_eager(result.model, module, [(1, 4, 8), (4, 11, 8), (3, 8, 8), (5, 3, 8)])


@pytest.mark.sweep_rows
@pytest.mark.parametrize("row", ["jetmoe.base", "jetmoe.causal-lm-kv"])
def test_jetmoe_by_dynamo_with_a_reference_case(row):
    """The sweep rows: refused by dynamo at batch 2 and 1 before, with the reference case too.
    There the queries' folded causal mask cannot grow with the sorts fixed, so that reading is
    no reading; the reference case confirms the sorts following the tokens, and the model
    matches torch eager at every held-out size."""
    for case in scored_cases(row, ["dynamo"], [2, 1]):
        assert case["symbolize"]["status"] == "refused", case["symbolize"]
        assert case["symbolize+ref"]["status"] == "pass", case["symbolize+ref"]
