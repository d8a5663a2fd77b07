"""Real architectures for the symbolize corpus, built from ``transformers`` configs.

Nobody on this project wrote these models: each is a ``transformers`` architecture instantiated
from a tiny config (hidden 32-64, 2 layers, 2-4 heads, small vocab) with random weights under a
fixed seed, never loaded from a hub. Each is wrapped in an ``nn.Module`` that takes and returns
plain tensors, so both torch exporters see the same signature::

    arch = ARCHITECTURES["llama"]
    module = arch.build()                        # eval-mode wrapper, seeded weights
    feeds = arch.make_inputs({"batch": 2, "seq": 8})
    arch.dynamic_axes                            # {"input_ids": {0: "batch", 1: "seq"}, ...}

Sizes are tiny except where an exporter's behaviour depends on them: position tables keep a
real model's length (512), because the dynamo exporter folds tables under 8192 elements into
traced-size constants, which would make the corpus harder than real models in a way they never
are. Shapes are written as templates: a string is a symbol (``"batch"``, ``"seq"``), an int is fixed.
``traced`` sizes are what the static exports are made at; ``checks`` are the other sizes the
symbolized model must match torch eager at. The decoders with a KV cache (``*_kv``) take the flat
cache as inputs and return it grown: their sizes give ``batch``, ``seq``, ``past`` and the mask's
``total``, always ``past + seq`` (a symbol of its own, as a user names it; symbolize must find
the relation), with a decode step (seq 1) and a prefill (past 0) among the checks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "ARCHITECTURES",
    "Architecture",
    "InputSpec",
    "OutputSpec",
    "Sizes",
    "arch_names",
]

Dim = int | str
Sizes = Mapping[str, int]

SEED = 0


@dataclass(frozen=True)
class InputSpec:
    """One graph input: its name, shape template, dtype and how to fill it.

    ``kind``: ``ids`` (integers in ``[low, high)``), ``mask`` (ones with a few trailing zeros on
    some rows: real padding), ``normal`` (float32 standard normal).
    """

    name: str
    shape: tuple[Dim, ...]
    kind: str = "normal"
    high: int = 0
    low: int = 0

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.int64) if self.kind in ("ids", "mask") else np.dtype(np.float32)


@dataclass(frozen=True)
class OutputSpec:
    """One graph output: name and shape template (symbols not among the inputs' are new ones)."""

    name: str
    shape: tuple[Dim, ...]


@dataclass(frozen=True)
class Architecture:
    """A corpus entry: how to build the wrapped torch model, its signature and its sizes."""

    name: str
    family: str
    builder: Callable[[], Any] = field(repr=False)
    inputs: tuple[InputSpec, ...]
    outputs: tuple[OutputSpec, ...]
    traced: tuple[dict[str, int], ...]
    checks: tuple[dict[str, int], ...]
    note: str = ""
    #: Where its exports and references are cached (None: the corpus cache, ``build/corpus/``).
    cache: Path | None = None

    @property
    def input_names(self) -> list[str]:
        return [i.name for i in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [o.name for o in self.outputs]

    @property
    def symbols(self) -> list[str]:
        seen: list[str] = []
        for spec in self.inputs:
            for d in spec.shape:
                if isinstance(d, str) and d not in seen:
                    seen.append(d)
        return seen

    @property
    def axis_sets(self) -> tuple[str, ...]:
        """``all`` (every symbolic axis) and, where there is more than batch, ``batch`` alone."""
        return ("all",) if self.symbols == ["batch"] else ("all", "batch")

    def _chosen(self, d: Dim, axes: str) -> bool:
        if axes not in ("all", "batch"):
            raise ValueError(f"axes must be 'all' or 'batch', got {axes!r}")
        return isinstance(d, str) and (axes == "all" or d == "batch")

    def dynamic_axes_for(self, axes: str = "all") -> dict[str, dict[int, str]]:
        """``{input: {axis: symbol}}``, the mapping ``torch.onnx.export(dynamic_axes=)`` takes."""
        out = {}
        for spec in self.inputs:
            chosen = {i: d for i, d in enumerate(spec.shape) if self._chosen(d, axes)}
            if chosen:
                out[spec.name] = chosen
        return out

    def output_dynamic_axes_for(self, axes: str = "all") -> dict[str, dict[int, str]]:
        """The outputs' axes that follow the chosen symbols (derived ones like ``frames`` too)."""
        out = {}
        for spec in self.outputs:
            chosen = {i: d for i, d in enumerate(spec.shape) if self._chosen(d, axes)}
            if chosen:
                out[spec.name] = chosen
        return out

    @property
    def dynamic_axes(self) -> dict[str, dict[int, str]]:
        return self.dynamic_axes_for("all")

    def sizes_for(self, traced: Sizes, axes: str = "all") -> list[dict[str, int]]:
        """The traced size, then the check sizes; with ``batch``, other symbols stay as traced."""
        if axes == "all":
            sizes = [dict(traced), *map(dict, self.checks)]
        else:
            sizes = [dict(traced)]
            for check in self.checks:
                sizes.append({k: (check[k] if k == "batch" else traced[k]) for k in traced})
        unique: list[dict[str, int]] = []
        for s in sizes:
            if s not in unique:
                unique.append(s)
        return unique

    def build(self) -> Any:
        """The wrapped torch module in eval mode, weights drawn under a fixed seed."""
        import torch

        torch.manual_seed(SEED)
        module = self.builder()
        module.eval()
        # transformers initialises biases to 0 and norm weights to 1; a trained model has neither,
        # and identical zero tensors get merged by exporters. Perturb every trained parameter. A
        # parameter the module builds frozen (Pegasus's and Marian's sinusoidal position tables,
        # nn.Embedding(_freeze=True)) is never trained: a checkpoint holds it as built, and
        # noise on it would make a table no real model has.
        with torch.no_grad():
            for p in module.parameters():
                trained = p.requires_grad
                p.requires_grad_(False)
                if p.is_floating_point() and trained:
                    p.add_(torch.randn_like(p) * 0.05)
        return module

    def shape_of(self, spec: InputSpec, sizes: Sizes) -> tuple[int, ...]:
        return tuple(sizes[d] if isinstance(d, str) else d for d in spec.shape)

    def make_inputs(self, sizes: Sizes, seed: int | None = None) -> dict[str, np.ndarray]:
        """Deterministic inputs at ``sizes`` (same sizes and seed give the same arrays)."""
        key = [sum(ord(c) for c in self.name)] + [sizes[s] for s in sorted(sizes)]
        rng = np.random.default_rng([SEED if seed is None else seed, *key])
        feeds: dict[str, np.ndarray] = {}
        for spec in self.inputs:
            shape = self.shape_of(spec, sizes)
            if spec.kind == "ids":
                feeds[spec.name] = rng.integers(spec.low, spec.high, size=shape, dtype=np.int64)
            elif spec.kind == "mask":
                mask = np.ones(shape, dtype=np.int64)
                # Right padding on every other row (never the whole row): real padding, and a
                # mask that is not all ones so no exporter can take an "all visible" shortcut.
                for row in range(0, shape[0], 2):
                    pad = min(shape[1] - 1, 1 + row % 3)
                    if pad > 0:
                        mask[row, shape[1] - pad :] = 0
                feeds[spec.name] = mask
            else:
                feeds[spec.name] = rng.standard_normal(shape).astype(np.float32)
        return feeds


# --------------------------------------------------------------------------------------------
# wrappers: plain tensors in, plain tensors out


def _text_wrapper(model: Any, outputs: Sequence[str], mask: bool = True) -> Any:
    import torch

    class TextModel(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        if mask:

            def forward(self, input_ids, attention_mask):  # noqa: ANN001
                out = self.model(input_ids=input_ids, attention_mask=attention_mask)
                return tuple(getattr(out, name) for name in outputs)

        else:

            def forward(self, input_ids):  # noqa: ANN001
                out = self.model(input_ids=input_ids)
                return tuple(getattr(out, name) for name in outputs)

    return TextModel()


def _tensor_wrapper(model: Any, arg: str, outputs: Sequence[str]) -> Any:
    import torch

    class TensorModel(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, x):  # noqa: ANN001
            out = self.model(**{arg: x})
            return tuple(getattr(out, name) for name in outputs)

    return TensorModel()


# --------------------------------------------------------------------------------------------
# architectures

VOCAB = 128
HIDDEN = 32
#: Position tables as long as real models' (512): a table under 8192 elements gets constant-folded
#: by the dynamo exporter's optimizer into a [1, traced_seq, hidden] constant, which no real BERT
#: or GPT-2 table (512 x 768) would be.
POSITIONS = 512
TEXT_TRACED = ({"batch": 1, "seq": 8}, {"batch": 2, "seq": 8})
TEXT_CHECKS = ({"batch": 3, "seq": 5}, {"batch": 2, "seq": 13}, {"batch": 1, "seq": 16})
BATCH_TRACED = ({"batch": 1}, {"batch": 2})
BATCH_CHECKS = ({"batch": 3}, {"batch": 5})

_IDS = InputSpec("input_ids", ("batch", "seq"), "ids", high=VOCAB, low=3)
_MASK = InputSpec("attention_mask", ("batch", "seq"), "mask")


def _bert() -> Any:
    from transformers import BertConfig, BertModel

    cfg = BertConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=POSITIONS,
        type_vocab_size=2,
        attn_implementation="eager",
    )
    return _text_wrapper(BertModel(cfg), ("last_hidden_state", "pooler_output"))


def _roberta() -> Any:
    from transformers import RobertaConfig, RobertaForSequenceClassification

    cfg = RobertaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=POSITIONS + 2,
        num_labels=3,
        pad_token_id=1,
        attn_implementation="eager",
    )
    return _text_wrapper(RobertaForSequenceClassification(cfg), ("logits",))


def _distilbert() -> Any:
    from transformers import DistilBertConfig, DistilBertModel

    cfg = DistilBertConfig(
        vocab_size=VOCAB,
        dim=HIDDEN,
        n_layers=2,
        n_heads=4,
        hidden_dim=64,
        max_position_embeddings=POSITIONS,
        attn_implementation="eager",
    )
    return _text_wrapper(DistilBertModel(cfg), ("last_hidden_state",))


def _gpt2() -> Any:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(
        vocab_size=VOCAB,
        n_embd=HIDDEN,
        n_layer=2,
        n_head=4,
        n_positions=POSITIONS,
        bos_token_id=0,
        eos_token_id=0,
        use_cache=False,
        attn_implementation="eager",
    )
    return _text_wrapper(GPT2LMHeadModel(cfg), ("logits",))


def _llama() -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        use_cache=False,
        attn_implementation="eager",
    )
    return _text_wrapper(LlamaForCausalLM(cfg), ("logits",))


def _qwen2() -> Any:
    from transformers import Qwen2Config, Qwen2Model

    cfg = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        use_cache=False,
        attn_implementation="eager",
    )
    return _text_wrapper(Qwen2Model(cfg), ("last_hidden_state",))


def _t5_encoder() -> Any:
    from transformers import T5Config, T5EncoderModel

    cfg = T5Config(
        vocab_size=VOCAB,
        d_model=HIDDEN,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_heads=4,
        relative_attention_num_buckets=32,  # T5 defaults: exact up to 8, log buckets beyond
        relative_attention_max_distance=128,
        use_cache=False,
        attn_implementation="eager",
    )
    return _text_wrapper(T5EncoderModel(cfg), ("last_hidden_state",))


WHISPER_MELS = 16
WHISPER_FRAMES = 32  # 2 * max_source_positions: the encoder accepts exactly this many frames


def _whisper_encoder() -> Any:
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    cfg = WhisperConfig(
        vocab_size=VOCAB,
        num_mel_bins=WHISPER_MELS,
        d_model=HIDDEN,
        encoder_layers=2,
        encoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_layers=1,
        decoder_attention_heads=4,
        decoder_ffn_dim=64,
        max_source_positions=WHISPER_FRAMES // 2,
        max_target_positions=32,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
        attn_implementation="eager",
    )
    return _tensor_wrapper(WhisperEncoder(cfg), "input_features", ("last_hidden_state",))


def _wav2vec2() -> Any:
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    cfg = Wav2Vec2Config(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        conv_dim=(16, 16, 16),
        conv_stride=(5, 2, 2),
        conv_kernel=(10, 3, 3),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4,
        feat_extract_norm="group",
        do_stable_layer_norm=False,
        mask_time_prob=0.0,
        attn_implementation="eager",
    )
    return _tensor_wrapper(Wav2Vec2Model(cfg), "input_values", ("last_hidden_state",))


IMAGE = 32


def _vit() -> Any:
    from transformers import ViTConfig, ViTForImageClassification

    cfg = ViTConfig(
        hidden_size=HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        image_size=IMAGE,
        patch_size=8,
        num_channels=3,
        num_labels=5,
        attn_implementation="eager",
    )
    return _tensor_wrapper(ViTForImageClassification(cfg), "pixel_values", ("logits",))


def _resnet() -> Any:
    from transformers import ResNetConfig, ResNetForImageClassification

    cfg = ResNetConfig(
        num_channels=3,
        embedding_size=16,
        hidden_sizes=[16, 32],
        depths=[1, 1],
        layer_type="bottleneck",
        num_labels=5,
    )
    return _tensor_wrapper(ResNetForImageClassification(cfg), "pixel_values", ("logits",))


def _convnext() -> Any:
    from transformers import ConvNextConfig, ConvNextForImageClassification

    cfg = ConvNextConfig(
        num_channels=3,
        patch_size=4,
        hidden_sizes=[16, 32],
        depths=[1, 1],
        num_stages=2,
        num_labels=5,
    )
    return _tensor_wrapper(ConvNextForImageClassification(cfg), "pixel_values", ("logits",))


def _swin() -> Any:
    from transformers import SwinConfig, SwinModel

    cfg = SwinConfig(
        image_size=IMAGE,
        patch_size=4,
        num_channels=3,
        embed_dim=16,
        depths=[1, 1],
        num_heads=[2, 4],
        window_size=4,
        mlp_ratio=2.0,
        attn_implementation="eager",
    )
    return _tensor_wrapper(SwinModel(cfg), "pixel_values", ("last_hidden_state", "pooler_output"))


def _seq2seq_wrapper(model: Any, outputs: Sequence[str]) -> Any:
    import torch

    class Seq2SeqModel(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, decoder_input_ids):  # noqa: ANN001
            out = self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                decoder_input_ids=decoder_input_ids,
            )
            return tuple(getattr(out, name) for name in outputs)

    return Seq2SeqModel()


def _t5() -> Any:
    from transformers import T5Config, T5Model

    cfg = T5Config(
        vocab_size=VOCAB,
        d_model=HIDDEN,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        relative_attention_num_buckets=32,  # T5 defaults: exact up to 8, log buckets beyond
        relative_attention_max_distance=128,
        decoder_start_token_id=0,
        use_cache=False,
        attn_implementation="eager",
    )
    return _seq2seq_wrapper(T5Model(cfg), ("last_hidden_state",))


def _mistral() -> Any:
    from transformers import MistralConfig, MistralModel

    cfg = MistralConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        sliding_window=4,  # shorter than the sequences: the sliding-window mask is exercised
        use_cache=False,
        attn_implementation="eager",
    )
    return _text_wrapper(MistralModel(cfg), ("last_hidden_state",))


def _opt() -> Any:
    from transformers import OPTConfig, OPTForCausalLM

    cfg = OPTConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=2,
        ffn_dim=64,
        num_attention_heads=4,
        max_position_embeddings=POSITIONS,
        word_embed_proj_dim=HIDDEN,
        pad_token_id=1,
        bos_token_id=2,
        eos_token_id=2,
        use_cache=False,
        attn_implementation="eager",
    )
    return _text_wrapper(OPTForCausalLM(cfg), ("logits",))


def _bloom() -> Any:
    from transformers import BloomConfig, BloomModel

    cfg = BloomConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        n_layer=2,
        n_head=4,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=3,
        use_cache=False,
        attn_implementation="eager",
    )
    return _text_wrapper(BloomModel(cfg), ("last_hidden_state",))


def _deberta_v2() -> Any:
    from transformers import DebertaV2Config, DebertaV2Model

    cfg = DebertaV2Config(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=POSITIONS,
        relative_attention=True,
        position_buckets=POSITIONS // 2,
        max_relative_positions=-1,
        pos_att_type=["p2c", "c2p"],
        position_biased_input=False,
        norm_rel_ebd="layer_norm",
        share_att_key=True,
        type_vocab_size=0,
        attn_implementation="eager",
    )
    return _text_wrapper(DebertaV2Model(cfg), ("last_hidden_state",))


def _albert() -> Any:
    from transformers import AlbertConfig, AlbertModel

    cfg = AlbertConfig(
        vocab_size=VOCAB,
        embedding_size=16,
        hidden_size=HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=2 * POSITIONS,
        attn_implementation="eager",
    )
    return _text_wrapper(AlbertModel(cfg), ("last_hidden_state", "pooler_output"))


def _wavlm() -> Any:
    from transformers import WavLMConfig, WavLMModel

    cfg = WavLMConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        conv_dim=(16, 16, 16),
        conv_stride=(5, 2, 2),
        conv_kernel=(10, 3, 3),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4,
        num_buckets=32,
        max_bucket_distance=64,
        mask_time_prob=0.0,
    )
    return _tensor_wrapper(WavLMModel(cfg), "input_values", ("last_hidden_state",))


def _mobilevit() -> Any:
    from transformers import MobileViTConfig, MobileViTForImageClassification

    cfg = MobileViTConfig(
        num_channels=3,
        image_size=IMAGE,
        patch_size=2,
        hidden_sizes=[16, 24, 32],
        neck_hidden_sizes=[8, 8, 16, 16, 24, 24, 32],
        num_attention_heads=2,
        mlp_ratio=2.0,
        num_labels=5,
        attn_implementation="eager",
    )
    return _tensor_wrapper(MobileViTForImageClassification(cfg), "pixel_values", ("logits",))


def _segformer() -> Any:
    from transformers import SegformerConfig, SegformerForSemanticSegmentation

    cfg = SegformerConfig(
        num_channels=3,
        num_encoder_blocks=2,
        depths=[1, 1],
        sr_ratios=[2, 1],
        hidden_sizes=[16, 32],
        patch_sizes=[7, 3],
        strides=[4, 2],
        num_attention_heads=[1, 2],
        mlp_ratios=[2, 2],
        decoder_hidden_size=32,
        num_labels=3,
    )
    return _tensor_wrapper(SegformerForSemanticSegmentation(cfg), "pixel_values", ("logits",))


def _mobilenet_v2() -> Any:
    from transformers import MobileNetV2Config, MobileNetV2ForImageClassification

    cfg = MobileNetV2Config(
        num_channels=3,
        image_size=IMAGE,
        depth_multiplier=0.25,
        tf_padding=True,
        num_labels=5,
    )
    return _tensor_wrapper(MobileNetV2ForImageClassification(cfg), "pixel_values", ("logits",))


def _dinov2() -> Any:
    from transformers import Dinov2Config, Dinov2Model

    cfg = Dinov2Config(
        hidden_size=HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=4,
        mlp_ratio=2,
        image_size=IMAGE,
        patch_size=8,
        num_channels=3,
        attn_implementation="eager",
    )
    return _tensor_wrapper(Dinov2Model(cfg), "pixel_values", ("last_hidden_state", "pooler_output"))


# --------------------------------------------------------------------------------------------
# decoders with a KV cache: input_ids [batch, seq], attention_mask [batch, total] and the flat
# cache past_{key,value}_<layer> [batch, kv_heads, past, head_dim] in; logits and the grown cache
# present_{key,value}_<layer> [batch, kv_heads, total, head_dim] out, total = past + seq.

KV_LAYERS = 2
KV_NAMES = tuple(f"past_{kind}_{i}" for i in range(KV_LAYERS) for kind in ("key", "value"))
PRESENT_NAMES = tuple(n.replace("past_", "present_") for n in KV_NAMES)


def _kv_sizes(batch: int, seq: int, past: int) -> dict[str, int]:
    return {"batch": batch, "seq": seq, "past": past, "total": past + seq}


#: Traced at seq 3 after a cache of 5 (the corpus's batch 1 and 2); checked at a decode step
#: (seq 1), at prefill (past 0: 0-length cache dims on ONNX Runtime) and at other mixes.
KV_TRACED = (_kv_sizes(1, 3, 5), _kv_sizes(2, 3, 5))
KV_CHECKS = (_kv_sizes(3, 1, 7), _kv_sizes(2, 4, 0), _kv_sizes(1, 1, 9), _kv_sizes(2, 6, 2))


def _cached_wrapper(model: Any) -> Any:
    """A causal LM over a flat cache: the tensors become a ``DynamicCache`` (full-length layers,
    whatever the config's window: the cache keeps every position, the mask does the cutting)."""
    import torch
    from transformers import DynamicCache

    class CachedLM(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(  # noqa: ANN001
            self, input_ids, attention_mask, past_key_0, past_value_0, past_key_1, past_value_1
        ):
            cache = DynamicCache(((past_key_0, past_value_0), (past_key_1, past_value_1)))
            out = self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                past_key_values=cache,
                use_cache=True,
            )
            layers = out.past_key_values.layers
            return (out.logits, *(t for layer in layers for t in (layer.keys, layer.values)))

    return CachedLM()


def _gpt2_kv() -> Any:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(
        vocab_size=VOCAB,
        n_embd=HIDDEN,
        n_layer=KV_LAYERS,
        n_head=4,
        n_positions=POSITIONS,
        bos_token_id=0,
        eos_token_id=0,
        attn_implementation="eager",
    )
    return _cached_wrapper(GPT2LMHeadModel(cfg))


#: Llama, Mistral and Qwen2 alike: 4 query heads over 2 KV heads (grouped-query attention),
#: eager attention so the export sees the mask arithmetic.
_GQA_DECODER: dict[str, Any] = {
    "vocab_size": VOCAB,
    "hidden_size": HIDDEN,
    "intermediate_size": 64,
    "num_hidden_layers": KV_LAYERS,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "attn_implementation": "eager",
}


def _llama_kv() -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**_GQA_DECODER)
    return _cached_wrapper(LlamaForCausalLM(cfg))


def _mistral_kv() -> Any:
    from transformers import MistralConfig, MistralForCausalLM

    cfg = MistralConfig(
        **_GQA_DECODER,
        sliding_window=4,  # < past + seq at the traced size (8) and most checks: the window cuts
    )
    return _cached_wrapper(MistralForCausalLM(cfg))


def _qwen2_kv() -> Any:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        **_GQA_DECODER,
        use_sliding_window=True,
        sliding_window=4,
        max_window_layers=1,  # layer 0 full attention, layer 1 a window of 4: two masks
    )
    return _cached_wrapper(Qwen2ForCausalLM(cfg))


def _bloom_kv() -> Any:
    from transformers import BloomConfig, BloomForCausalLM

    cfg = BloomConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        n_layer=KV_LAYERS,
        n_head=4,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=3,
        attn_implementation="eager",
    )
    return _cached_wrapper(BloomForCausalLM(cfg))


def _cached(
    name: str, family: str, builder: Callable[[], Any], kv_heads: int, head_dim: int
) -> Architecture:
    cache = ("batch", kv_heads, "past", head_dim)
    grown = ("batch", kv_heads, "total", head_dim)
    return Architecture(
        name=name,
        family=family,
        builder=builder,
        inputs=(
            _IDS,
            InputSpec("attention_mask", ("batch", "total"), "mask"),
            *(InputSpec(n, cache) for n in KV_NAMES),
        ),
        outputs=(
            OutputSpec("logits", ("batch", "seq", VOCAB)),
            *(OutputSpec(n, grown) for n in PRESENT_NAMES),
        ),
        traced=KV_TRACED,
        checks=KV_CHECKS,
        note="KV cache: batch, seq, past and the mask's total = past + seq",
    )


def _text(
    name: str, family: str, builder: Callable[[], Any], outputs: tuple[OutputSpec, ...]
) -> Architecture:
    return Architecture(
        name=name,
        family=family,
        builder=builder,
        inputs=(_IDS, _MASK),
        outputs=outputs,
        traced=TEXT_TRACED,
        checks=TEXT_CHECKS,
    )


def _image(
    name: str,
    family: str,
    builder: Callable[[], Any],
    outputs: tuple[OutputSpec, ...],
    resolution: bool = False,
) -> Architecture:
    """An image model: batch only, or batch, height and width for fully convolutional ones."""
    if not resolution:
        return Architecture(
            name=name,
            family=family,
            builder=builder,
            inputs=(InputSpec("pixel_values", ("batch", 3, IMAGE, IMAGE)),),
            outputs=outputs,
            traced=BATCH_TRACED,
            checks=BATCH_CHECKS,
            note="batch axis only (the model needs its configured resolution)",
        )
    return Architecture(
        name=name,
        family=family,
        builder=builder,
        inputs=(InputSpec("pixel_values", ("batch", 3, "height", "width")),),
        outputs=outputs,
        traced=tuple({**t, "height": IMAGE, "width": IMAGE} for t in BATCH_TRACED),
        checks=(
            {"batch": 3, "height": IMAGE, "width": IMAGE},
            {"batch": 2, "height": 48, "width": 64},
            {"batch": 1, "height": 40, "width": 24},
        ),
        note="batch, height and width symbolic (traced height == width: decided by structure)",
    )


_HIDDEN_SEQ = OutputSpec("last_hidden_state", ("batch", "seq", HIDDEN))

_ALL: tuple[Architecture, ...] = (
    _text(
        "bert",
        "BERT encoder (absolute positions, token types, pooler)",
        _bert,
        (_HIDDEN_SEQ, OutputSpec("pooler_output", ("batch", HIDDEN))),
    ),
    _text(
        "roberta",
        "RoBERTa classifier (positions from the padding mask, CLS head)",
        _roberta,
        (OutputSpec("logits", ("batch", 3)),),
    ),
    _text("distilbert", "DistilBERT encoder", _distilbert, (_HIDDEN_SEQ,)),
    _text(
        "gpt2",
        "GPT-2 LM (causal mask, learned positions, LM head)",
        _gpt2,
        (OutputSpec("logits", ("batch", "seq", VOCAB)),),
    ),
    _text(
        "llama",
        "Llama LM (RoPE, GQA, RMSNorm, causal mask)",
        _llama,
        (OutputSpec("logits", ("batch", "seq", VOCAB)),),
    ),
    _text("qwen2", "Qwen2 decoder (RoPE, GQA, qkv bias)", _qwen2, (_HIDDEN_SEQ,)),
    _text("t5_encoder", "T5 encoder (relative position buckets)", _t5_encoder, (_HIDDEN_SEQ,)),
    Architecture(
        name="t5",
        family="T5 encoder-decoder (two sequence axes traced at the same length)",
        builder=_t5,
        inputs=(_IDS, _MASK, InputSpec("decoder_input_ids", ("batch", "tgt"), "ids", high=VOCAB)),
        outputs=(OutputSpec("last_hidden_state", ("batch", "tgt", HIDDEN)),),
        traced=tuple({**t, "tgt": 8} for t in TEXT_TRACED),
        checks=(
            {"batch": 3, "seq": 5, "tgt": 7},
            {"batch": 2, "seq": 13, "tgt": 4},
            {"batch": 1, "seq": 16, "tgt": 16},
        ),
        note="seq and tgt are both 8 when traced: only the structure tells them apart",
    ),
    _text(
        "mistral",
        "Mistral decoder (sliding-window causal mask, window 4 < seq)",
        _mistral,
        (_HIDDEN_SEQ,),
    ),
    _text(
        "opt",
        "OPT LM (positions from the mask's cumsum, offset 2)",
        _opt,
        (OutputSpec("logits", ("batch", "seq", VOCAB)),),
    ),
    _text("bloom", "BLOOM decoder (ALiBi biases from the mask)", _bloom, (_HIDDEN_SEQ,)),
    _text(
        "deberta_v2",
        "DeBERTa-v2 encoder (disentangled relative attention, log buckets)",
        _deberta_v2,
        (_HIDDEN_SEQ,),
    ),
    _text(
        "albert",
        "ALBERT encoder (factorised embeddings, shared layers)",
        _albert,
        (_HIDDEN_SEQ, OutputSpec("pooler_output", ("batch", HIDDEN))),
    ),
    Architecture(
        name="whisper_encoder",
        family="Whisper encoder (conv stem on log-mel frames, sinusoidal positions)",
        builder=_whisper_encoder,
        inputs=(InputSpec("input_features", ("batch", WHISPER_MELS, WHISPER_FRAMES)),),
        outputs=(OutputSpec("last_hidden_state", ("batch", WHISPER_FRAMES // 2, HIDDEN)),),
        traced=BATCH_TRACED,
        checks=BATCH_CHECKS,
        note="batch axis only: the encoder accepts exactly 2*max_source_positions frames",
    ),
    Architecture(
        name="wav2vec2",
        family="Wav2Vec2 (conv feature extractor on raw audio, conv positions, transformer)",
        builder=_wav2vec2,
        inputs=(InputSpec("input_values", ("batch", "samples")),),
        outputs=(OutputSpec("last_hidden_state", ("batch", "frames", HIDDEN)),),
        traced=({"batch": 1, "samples": 400}, {"batch": 2, "samples": 400}),
        checks=(
            {"batch": 3, "samples": 320},
            {"batch": 2, "samples": 640},
            {"batch": 1, "samples": 1000},
        ),
        note="raw-audio length is symbolic; output frames follow the conv strides",
    ),
    Architecture(
        name="wavlm",
        family="WavLM (conv feature extractor, gated relative position bias)",
        builder=_wavlm,
        inputs=(InputSpec("input_values", ("batch", "samples")),),
        outputs=(OutputSpec("last_hidden_state", ("batch", "frames", HIDDEN)),),
        traced=({"batch": 1, "samples": 400}, {"batch": 2, "samples": 400}),
        checks=(
            {"batch": 3, "samples": 320},
            {"batch": 2, "samples": 640},
            {"batch": 1, "samples": 1000},
        ),
        note="raw-audio length is symbolic; relative positions follow the frame count",
    ),
    _image(
        "vit",
        "ViT classifier (patch embedding, CLS token)",
        _vit,
        (OutputSpec("logits", ("batch", 5)),),
    ),
    _image(
        "resnet",
        "ResNet classifier (bottleneck convs, adaptive pooling)",
        _resnet,
        (OutputSpec("logits", ("batch", 5)),),
        resolution=True,
    ),
    _image(
        "convnext",
        "ConvNeXt classifier (depthwise convs, channels-last LayerNorm)",
        _convnext,
        (OutputSpec("logits", ("batch", 5)),),
        resolution=True,
    ),
    _image(
        "mobilevit",
        "MobileViT classifier (convs + transformer on unfolded patches)",
        _mobilevit,
        (OutputSpec("logits", ("batch", 5)),),
    ),
    _image(
        "segformer",
        "SegFormer segmentation (overlapping patches, reduced attention, upsampling head)",
        _segformer,
        (OutputSpec("logits", ("batch", 3, "out_height", "out_width")),),
        resolution=True,
    ),
    _image(
        "mobilenet_v2",
        "MobileNetV2 classifier (TensorFlow 'same' padding computed from the input size)",
        _mobilenet_v2,
        (OutputSpec("logits", ("batch", 5)),),
        resolution=True,
    ),
    _image(
        "dinov2",
        "DINOv2 encoder (position embeddings interpolated to the input resolution)",
        _dinov2,
        (
            OutputSpec("last_hidden_state", ("batch", "tokens", HIDDEN)),
            OutputSpec("pooler_output", ("batch", HIDDEN)),
        ),
        resolution=True,
    ),
    _image(
        "swin",
        "Swin encoder (window partition / shifted windows)",
        _swin,
        (
            OutputSpec("last_hidden_state", ("batch", 16, 32)),
            OutputSpec("pooler_output", ("batch", 32)),
        ),
    ),
)

_KV: tuple[Architecture, ...] = (
    _cached(
        "gpt2_kv",
        "GPT-2 LM with a KV cache (learned positions gathered at past .. past + seq)",
        _gpt2_kv,
        kv_heads=4,
        head_dim=HIDDEN // 4,
    ),
    _cached(
        "llama_kv",
        "Llama LM with a KV cache (RoPE from past, GQA 4/2 heads, causal mask offset by past)",
        _llama_kv,
        kv_heads=2,
        head_dim=HIDDEN // 4,
    ),
    _cached(
        "mistral_kv",
        "Mistral LM with a KV cache (sliding window 4 < past + seq, RoPE, GQA)",
        _mistral_kv,
        kv_heads=2,
        head_dim=HIDDEN // 4,
    ),
    _cached(
        "qwen2_kv",
        "Qwen2 LM with a KV cache (a full and a sliding-window layer: two masks, RoPE, GQA)",
        _qwen2_kv,
        kv_heads=2,
        head_dim=HIDDEN // 4,
    ),
    _cached(
        "bloom_kv",
        "BLOOM LM with a KV cache (ALiBi biases from the mask's positions over past + seq)",
        _bloom_kv,
        kv_heads=4,
        head_dim=HIDDEN // 4,
    ),
)

#: Every corpus architecture by name, in table order.
ARCHITECTURES: dict[str, Architecture] = {a.name: a for a in (*_ALL, *_KV)}


def arch_names() -> list[str]:
    return list(ARCHITECTURES)
