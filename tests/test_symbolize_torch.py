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


# -- a decoder with a KV cache: inputs carry batch, seq, past and total = past + seq ---------------


class CachedDecoder(nn.Module):
    """One attention layer over a KV cache: ``input_ids [b, seq]``, ``attention_mask [b, total]``
    (total = past + seq), ``past_k/past_v [b, heads, past, d]``; returns the logits and the
    cache grown by ``seq``. ``causal`` adds the causal mask offset by ``past`` (the query at
    position i sees keys up to past + i); ``fixed`` replaces that offset by a number that does
    not move with past (a mask that only looks like the cache's at the traced past); ``window``
    adds a sliding window (the query at past + i sees keys past + i - window < j)."""

    vocab, dim, heads = 32, 16, 2

    def __init__(self, causal: bool, fixed: int | None = None, window: int | None = None) -> None:
        super().__init__()
        self.causal = causal
        self.fixed = fixed
        self.window = window
        self.emb = nn.Embedding(self.vocab, self.dim)
        self.q, self.k, self.v = (nn.Linear(self.dim, self.dim) for _ in range(3))
        self.out = nn.Linear(self.dim, self.vocab)

    def forward(self, ids, mask, past_k, past_v):  # noqa: ANN001
        b, s = ids.shape
        x = self.emb(ids)

        def heads(t):  # noqa: ANN001, ANN202
            return t.view(b, s, self.heads, self.dim // self.heads).transpose(1, 2)

        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        k, v = torch.cat([past_k, k], 2), torch.cat([past_v, v], 2)
        keep = (mask[:, None, None, :] > 0).expand(b, 1, s, k.shape[2])
        if self.causal:
            past = past_k.shape[2] if self.fixed is None else self.fixed
            causal = torch.arange(k.shape[2])[None, :] <= torch.arange(s)[:, None] + past
            if self.window is not None:
                near = torch.arange(s)[:, None] + past - torch.arange(k.shape[2])[None, :]
                causal = causal & (near < self.window)
            keep = keep & causal[None, None]
        att = (q @ k.transpose(-1, -2)) / (self.dim // self.heads) ** 0.5
        att = att.masked_fill(~keep, -1e9).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, s, self.dim)
        return self.out(y), k, v


KV_NAMES = ["input_ids", "attention_mask", "past_k", "past_v"]
KV_AXES = {
    "input_ids": {0: "batch", 1: "seq"},
    "attention_mask": {0: "batch", 1: "total"},
    "past_k": {0: "batch", 2: "past"},
    "past_v": {0: "batch", 2: "past"},
}


def kv_inputs(batch: int, seq: int, past: int, seed: int) -> list:
    g = torch.Generator().manual_seed(seed)
    d = CachedDecoder.dim // CachedDecoder.heads
    ids = torch.randint(0, CachedDecoder.vocab, (batch, seq), generator=g)
    mask = torch.ones(batch, past + seq, dtype=torch.int64)
    mask[0, 0] = 0  # a padded first position in row 0
    cache = [torch.randn(batch, CachedDecoder.heads, past, d, generator=g) for _ in range(2)]
    return [ids, mask, *cache]


def kv_references(module, folder, sizes) -> None:
    from onnxsurgery.validation.references import Case, save_case

    for k, (b, s, p) in enumerate(sizes):
        args = kv_inputs(b, s, p, k)
        with torch.no_grad():
            outs = module(*args)
        inputs = {n: t.numpy() for n, t in zip(KV_NAMES, args, strict=True)}
        outputs = {n: t.numpy() for n, t in zip(["logits", "k", "v"], outs, strict=True)}
        save_case(Case(f"b{b}_s{s}_p{p}", inputs, outputs), folder, index=k)


def kv_export(module, path, exporter: str) -> onnx.ModelProto:
    kwargs = {"dynamo": True} if exporter == "dynamo" else {"dynamo": False, "opset_version": 17}
    torch.onnx.export(
        module, tuple(kv_inputs(2, 4, 5, 0)), str(path), input_names=KV_NAMES,
        output_names=["logits", "k", "v"], **kwargs,
    )  # fmt: skip
    return onnx.load(path)


#: (batch, seq, past) of the stored torch cases; the first is the traced size.
KV_SIZES = [(2, 4, 5), (1, 3, 2), (3, 1, 7), (2, 6, 3)]


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_kv_cache_decoder_is_verified_at_every_batch_seq_past(exporter, tmp_path):
    """Without the offset causal mask the decoder generalizes: the graph ties total to
    past + seq, every check size keeps that, and torch's outputs at other sizes all match."""
    torch.manual_seed(0)
    module = CachedDecoder(causal=False).eval()
    model = kv_export(module, tmp_path / "model.onnx", exporter)
    kv_references(module, tmp_path / "refs", KV_SIZES)
    ctx = onnxsurgery.PassContext(provider="cpu", references=tmp_path / "refs")
    result = Symbolize(dynamic_axes=KV_AXES, verify="references")(model, ctx)
    assert {s: str(v) for s, v in result.report.relations.items()} == {"total": "past + seq"}
    levels = result.report.to_dict()["verification"]["levels"]
    assert {s: v["level"] for s, v in levels.items()} == dict.fromkeys(
        ("batch", "seq", "total", "past"), "references"
    )
    checked = next(d.message for d in result.diagnostics if d.message.startswith("check:"))
    for size in re_sizes(checked):
        assert size["total"] == size["past"] + size["seq"], checked


def re_sizes(text: str) -> list[dict[str, int]]:
    import re

    ran = text.split("; traced-size")[0].removeprefix("check: ran at ")
    return [
        {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", part)} for part in ran.split("; ")
    ]


#: the offset cases: the traced size, a decode step (seq 1), prefill (past 0), and both mixed.
KV_OFFSET_SIZES = [(2, 4, 5), (1, 3, 2), (3, 1, 7), (2, 6, 3), (2, 1, 0), (1, 5, 0)]


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_kv_cache_decoder_with_offset_causal_mask_matches_torch(exporter, tmp_path):
    """The causal mask offset by past folds into a count from the traced past (torchscript:
    ``arange(seq) + 5``) or a band ``j - i <= 5`` (dynamo). past is the length of the cache axis
    the graph concatenates along, so the offset is rebuilt from past, and the model matches
    torch at every stored (batch, seq, past), seq 1 and past 0 included."""
    torch.manual_seed(0)
    module = CachedDecoder(causal=True).eval()
    model = kv_export(module, tmp_path / "model.onnx", exporter)
    kv_references(module, tmp_path / "refs", KV_OFFSET_SIZES)
    ctx = onnxsurgery.PassContext(provider="cpu", references=tmp_path / "refs")
    result = Symbolize(dynamic_axes=KV_AXES, verify="references")(model, ctx)
    levels = result.report.to_dict()["verification"]["levels"]
    assert {s: v["level"] for s, v in levels.items()} == dict.fromkeys(
        ("batch", "seq", "total", "past"), "references"
    )
    text = "\n".join(d.message for d in result.diagnostics)
    assert f"matched {len(KV_OFFSET_SIZES)} reference case(s)" in text
    assert "from past" in text or "j - i <= past" in text
    # and outside symbolize's own check: ORT on the written model against torch at a new size
    assert_kv_matches_torch(module, result.model, (2, 1, 9), seed=99)


def assert_kv_matches_torch(module, model, size: tuple[int, int, int], seed: int) -> None:
    """ORT on ``model`` against torch eager at (batch, seq, past) ``size``, no reference."""
    args = kv_inputs(*size, seed)
    with torch.no_grad():
        want = module(*args)
    feeds = {n: t.numpy() for n, t in zip(KV_NAMES, args, strict=True)}
    got = run_model(model, feeds, provider="cpu")
    for w, g in zip(want, got.values(), strict=True):
        np.testing.assert_allclose(g, w.numpy(), atol=1e-4)


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_kv_cache_decoder_with_sliding_window_matches_torch(exporter, tmp_path):
    """A sliding window of 3 over the cache (traced at past 5, seq 4: the window cuts) folds
    into a band ``3 <= j - i <= 5`` (torchscript: its lower bound alone, beside the causal count):
    both bounds are distances from past, the window's lower one included though 3 equals no
    size. Kept at 3, the model would be wrong at every other past with symbolize's own check blind
    to it; rebuilt from past it matches torch at every stored size, seq 1 and past 0 included."""
    torch.manual_seed(0)
    module = CachedDecoder(causal=True, window=3).eval()
    model = kv_export(module, tmp_path / "model.onnx", exporter)
    kv_references(module, tmp_path / "refs", KV_OFFSET_SIZES)
    ctx = onnxsurgery.PassContext(provider="cpu", references=tmp_path / "refs")
    result = Symbolize(dynamic_axes=KV_AXES, verify="references")(model, ctx)
    text = "\n".join(d.message for d in result.diagnostics)
    assert f"matched {len(KV_OFFSET_SIZES)} reference case(s)" in text
    assert "past - 2 <= j - i" in text, text
    # outside the references: a past the window cuts deep into
    assert_kv_matches_torch(module, result.model, (1, 2, 11), seed=98)


@pytest.mark.parametrize("window", [None, 3])
@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_fixed_offset_that_looks_like_the_cache_is_caught_by_references(exporter, window, tmp_path):
    """A mutation: the mask's offset is a fixed 5, which equals past only at the traced size.
    symbolize reads it as past (the graph has a cache of that length), and the torch references
    at other pasts refuse the result: an error, never a model returned. With a sliding window
    the same: bounds fixed in the keys' positions are read as distances from past, and the
    references catch it."""
    torch.manual_seed(0)
    module = CachedDecoder(causal=True, fixed=5, window=window).eval()
    model = kv_export(module, tmp_path / "model.onnx", exporter)
    kv_references(module, tmp_path / "refs", KV_OFFSET_SIZES)
    ctx = onnxsurgery.PassContext(provider="cpu", references=tmp_path / "refs")
    with pytest.raises(onnxsurgery.PassError, match="does not match the stored torch outputs"):
        Symbolize(dynamic_axes=KV_AXES, verify="references")(model, ctx)


class FixedCount(nn.Module):
    """``arange(seq) + 5`` next to an input whose length ``n`` is traced at 5 but is no cache (no
    Concat grows it): the start is a fixed 5 and must not be read as n."""

    def forward(self, x, y):  # noqa: ANN001
        return x + (torch.arange(x.shape[1]) + 5).float(), y * 2


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_count_equal_to_a_size_that_is_no_cache_is_still_refused(exporter, tmp_path):
    """Issue 11's rule stands where the graph shows no cache: a start equal to a traced size is
    value coincidence, a blocker naming the node."""
    path = tmp_path / "model.onnx"
    kwargs = {"dynamo": True} if exporter == "dynamo" else {"dynamo": False, "opset_version": 17}
    x, y = torch.randn(2, 4), torch.randn(2, 5)
    torch.onnx.export(FixedCount().eval(), (x, y), str(path), input_names=["x", "y"], **kwargs)
    model = onnx.load(path)
    axes = {"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "n"}}
    with pytest.raises(onnxsurgery.PassError, match="blocker") as info:
        Symbolize(dynamic_axes=axes)(model, onnxsurgery.PassContext(provider="cpu"))
    assert info.value.node in {n.name for n in model.graph.node}
    assert "it counts from 5, the traced size of n" in str(info.value)
