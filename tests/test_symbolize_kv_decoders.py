"""symbolize on tiny transformers decoders with a 2-layer KV cache exported statically at batch 2,
seq 4, past 5: a Llama (RoPE, grouped-query attention; rotary cos/sin tables at positions past ..
past + seq - 1, a causal mask offset by past) by dynamo, and a GPT-2 (learned positions, ``wpe``
gathered at past .. past + seq - 1) by both exporters. Compared with torch at (batch, seq, past)
sizes they were never traced at, seq 1 and past 0 included."""

from __future__ import annotations

import onnx
import pytest

import onnxsurgery
from onnxsurgery.passes.symbolize import Symbolize
from onnxsurgery.validation.references import Case, save_case

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.e2e

LAYERS, KV_HEADS, HEAD_DIM, VOCAB = 2, 2, 8, 64
NAMES = ["input_ids"] + [f"past_{k}{i}" for i in range(LAYERS) for k in "kv"]
OUTPUTS = ["logits"] + [f"present_{k}{i}" for i in range(LAYERS) for k in "kv"]
#: (batch, seq, past): the traced size, a decode step (seq 1), prefill (past 0), and mixed.
SIZES = [(2, 4, 5), (1, 3, 2), (3, 1, 7), (2, 6, 3), (2, 1, 0), (1, 5, 0)]


class CachedLlama(torch.nn.Module):
    """``input_ids`` (with ``mask``, then ``attention_mask [batch, past + seq]``) and the flat
    cache in; logits and the grown cache out. Without a mask the causal mask comes from the
    cache position alone."""

    def __init__(self, mask: bool = False) -> None:
        super().__init__()
        self.mask = mask
        self.config = transformers.LlamaConfig(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=LAYERS,
            num_attention_heads=4, num_key_value_heads=KV_HEADS, max_position_embeddings=64,
        )  # fmt: skip
        self.lm = transformers.LlamaForCausalLM(self.config)

    def forward(self, ids, *flat):  # noqa: ANN001
        mask, flat = (flat[0], flat[1:]) if getattr(self, "mask", False) else (None, flat)
        cache = transformers.DynamicCache(config=self.config)
        for i in range(LAYERS):
            cache.update(flat[2 * i], flat[2 * i + 1], i)
        out = self.lm(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True)
        grown = [t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)]
        return (out.logits, *grown)


def llama_inputs(batch: int, seq: int, past: int, seed: int, mask: bool = False) -> list:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (batch, seq), generator=g)
    cache = [torch.randn(batch, KV_HEADS, past, HEAD_DIM, generator=g) for _ in range(2 * LAYERS)]
    if not mask:
        return [ids, *cache]
    keep = torch.ones(batch, past + seq, dtype=torch.int64)
    if past > 0:  # a padded first cached position in row 0 (no query left with no key at all)
        keep[0, 0] = 0
    return [ids, keep, *cache]


@pytest.mark.parametrize(
    ("exporter", "mask"),
    [("dynamo", False), ("dynamo", True), ("torchscript", False), ("torchscript", True)],
)
def test_cached_llama_rotary_from_past_matches_torch(exporter, mask, tmp_path):
    """dynamo folds the rotary tables to cos/sin at past .. past + seq - 1; torchscript keeps
    Cos/Sin nodes over a folded angle table ``(5 + i) * f``, a count from past steps of f. With
    an attention mask (dynamo), the mask is read by a GatherND whose index grid counts every key
    position: that ties total to past + seq, so the check never feeds a mask too short.
    TorchScript reads it through a Flatten at ``arange(n) + row * Shape(mask)[1]``: the column
    count spans the stride, the same tie (before, the check fed total apart from past + seq and
    the Gather ran out of range)."""
    torch.manual_seed(0)
    module = CachedLlama(mask).eval()
    names = NAMES[:1] + ["attention_mask"] * mask + NAMES[1:]
    kwargs = {"dynamo": True} if exporter == "dynamo" else {"dynamo": False, "opset_version": 17}
    path = tmp_path / "model.onnx"
    with torch.no_grad():
        torch.onnx.export(
            module, tuple(llama_inputs(2, 4, 5, 0, mask)), str(path), input_names=names,
            output_names=OUTPUTS, **kwargs,
        )  # fmt: skip
    for k, (b, s, p) in enumerate(SIZES):
        args = llama_inputs(b, s, p, k, mask)
        with torch.no_grad():
            outs = module(*args)
        inputs = {n: t.numpy() for n, t in zip(names, args, strict=True)}
        outputs = {n: t.numpy() for n, t in zip(OUTPUTS, outs, strict=True)}
        save_case(Case(f"b{b}_s{s}_p{p}", inputs, outputs), tmp_path / "refs", index=k)
    axes = {"input_ids": {0: "batch", 1: "seq"}}
    axes.update({n: {0: "batch", 2: "past"} for n in NAMES[1:]})
    if mask:
        axes["attention_mask"] = {0: "batch", 1: "total"}
    ctx = onnxsurgery.PassContext(provider="cpu", references=tmp_path / "refs")
    result = Symbolize(dynamic_axes=axes, verify="references")(onnx.load(path), ctx)
    levels = result.report.to_dict()["verification"]["levels"]
    assert {s: v["level"] for s, v in levels.items()} == dict.fromkeys(
        ("batch", "seq", "past", *["total"] * mask), "references"
    )
    if mask:
        assert {s: str(v) for s, v in result.report.relations.items()} == {"total": "past + seq"}
    text = "\n".join(d.message for d in result.diagnostics)
    assert f"matched {len(SIZES)} reference case(s)" in text
    if exporter == "dynamo":
        assert "Cos((Range + past) * freq)" in text and "Sin((Range + past) * freq)" in text
    else:
        assert "from past steps" in text


class CachedGPT2(torch.nn.Module):
    """GPT-2 with learned absolute positions over the same flat cache (4 heads of 8)."""

    def __init__(self) -> None:
        super().__init__()
        self.config = transformers.GPT2Config(
            vocab_size=VOCAB, n_embd=32, n_layer=LAYERS, n_head=4, n_positions=64
        )
        self.lm = transformers.GPT2LMHeadModel(self.config)

    forward = CachedLlama.forward


def gpt2_inputs(batch: int, seq: int, past: int, seed: int) -> list:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (batch, seq), generator=g)
    return [ids, *(torch.randn(batch, 4, past, HEAD_DIM, generator=g) for _ in range(2 * LAYERS))]


def test_cached_gpt2_learned_positions(tmp_path):
    """torchscript keeps ``wpe`` a weight and gathers it at a count from the traced past: rebuilt
    from past, it matches torch at every stored size. dynamo folds the gathered rows into a
    [1, seq, 32] constant: the positions are gone from the graph, so it is a blocker naming the
    Add that reads them, never a model."""
    torch.manual_seed(0)
    module = CachedGPT2().eval()
    for k, (b, s, p) in enumerate(SIZES):
        args = gpt2_inputs(b, s, p, k)
        with torch.no_grad():
            outs = module(*args)
        inputs = {n: t.numpy() for n, t in zip(NAMES, args, strict=True)}
        outputs = {n: t.numpy() for n, t in zip(OUTPUTS, outs, strict=True)}
        save_case(Case(f"b{b}_s{s}_p{p}", inputs, outputs), tmp_path / "refs", index=k)
    axes = {"input_ids": {0: "batch", 1: "seq"}}
    axes.update({n: {0: "batch", 2: "past"} for n in NAMES[1:]})
    ctx = onnxsurgery.PassContext(provider="cpu", references=tmp_path / "refs")
    for exporter in ("torchscript", "dynamo"):
        path = tmp_path / f"{exporter}.onnx"
        kwargs = {"dynamo": True} if exporter == "dynamo" else {"dynamo": False, "opset_version": 17}
        with torch.no_grad():
            torch.onnx.export(
                module, tuple(gpt2_inputs(2, 4, 5, 0)), str(path), input_names=NAMES,
                output_names=OUTPUTS, **kwargs,
            )  # fmt: skip
        model = onnx.load(path)
        if exporter == "torchscript":
            result = Symbolize(dynamic_axes=axes, verify="references")(model, ctx)
            levels = result.report.to_dict()["verification"]["levels"]
            assert {s: v["level"] for s, v in levels.items()} == dict.fromkeys(
                ("batch", "seq", "past"), "references"
            )
            text = "\n".join(d.message for d in result.diagnostics)
            assert f"matched {len(SIZES)} reference case(s)" in text and "from past" in text
        else:
            with pytest.raises(onnxsurgery.PassError, match="blocker") as info:
                Symbolize(dynamic_axes=axes, verify="references")(model, ctx)
            assert info.value.node in {n.name for n in model.graph.node}
            assert "[1, 4, 32]" in str(info.value) and "folded by the exporter" in str(info.value)


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_rotary_table_offset_where_no_cache_gives_the_start_is_refused(exporter, tmp_path):
    """The same cos table offset by 5 but with no cache in the graph (5 is only a traced size
    of another input): no start to read it from, so it stays a blocker naming the node."""

    class Rotary(torch.nn.Module):
        def forward(self, x, y):  # noqa: ANN001
            pos = torch.arange(x.shape[1]).float() + 5
            freq = 10000 ** (-torch.arange(0, 8, 2).float() / 8)
            return x * torch.cos(pos[:, None] * freq), y * 2

    path = tmp_path / "model.onnx"
    kwargs = {"dynamo": True} if exporter == "dynamo" else {"dynamo": False, "opset_version": 17}
    torch.onnx.export(
        Rotary().eval(), (torch.randn(2, 4, 4), torch.randn(2, 5)), str(path),
        input_names=["x", "y"], **kwargs,
    )  # fmt: skip
    model = onnx.load(path)
    axes = {"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "n"}}
    with pytest.raises(onnxsurgery.PassError, match="blocker") as info:
        Symbolize(dynamic_axes=axes)(model, onnxsurgery.PassContext(provider="cpu"))
    assert info.value.node in {n.name for n in model.graph.node}
    if exporter == "torchscript":  # Cos over a folded angle table (5 + i) * f
        assert "it counts from 5 steps, the traced size of n" in str(info.value)
