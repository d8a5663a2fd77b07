"""The sweep's rows: every registry entry that can be built tiny, as a corpus ``Architecture``.

Rows come from the registries, never from a hand list:

- ``transformers``: every model type of ``MODEL_MAPPING_NAMES`` as its base model; every type of
  ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` also as a causal LM, and as a causal LM over a flat KV
  cache (``*.causal-lm-kv``; a type whose cache is not a flat list of 2 key/value layers is
  listed with why). The config is ``AutoConfig.for_model(type)`` shrunk by :func:`shrink`;
  encoder-decoders get their decoder inputs.
- ``torchvision``: every name of ``torchvision.models.list_models()`` (weights=None), at the
  smallest square input it accepts.

A row's kind (the table's grouping) comes from the registries too (:func:`transformers_kind`).
:func:`architecture` turns a row into a ``tests/corpus`` ``Architecture`` by probing the built
model in torch eager: which inputs it takes, whether its sequence/resolution may vary, and the
shapes of its outputs at several sizes (an axis that follows a symbol gets that symbol).
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import json
import math
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from corpus.architectures import (  # noqa: E402
    KV_LAYERS,
    TEXT_CHECKS,
    TEXT_TRACED,
    VOCAB,
    Architecture,
    InputSpec,
    OutputSpec,
    _cached,
    _cached_wrapper,
)

__all__ = ["KINDS", "Row", "BuildError", "architecture", "enumerate_rows", "shrink"]

#: The table's kinds, in table order.
KINDS = (
    "encoder",
    "decoder",
    "decoder-kv",
    "encoder-decoder",
    "vision",
    "segmentation",
    "video",
    "audio",
    "optical-flow",
    "detection",
)


class BuildError(Exception):
    """The row cannot be built tiny or fed generically (a fact for the list, not scored)."""


@dataclass(frozen=True)
class Row:
    """One registry entry as the sweep builds it: ``bert.base``, ``gpt2.causal-lm-kv``, ..."""

    source: str
    model: str
    head: str
    kind: str
    cls: str

    @property
    def name(self) -> str:
        """``bert.base``; a torchvision model is named for its source (``torchvision.resnet18``):
        transformers has a ``mobilenet_v2`` too."""
        if self.source == "torchvision":
            return f"torchvision.{self.model}"
        return f"{self.model}.{self.head}"


# --------------------------------------------------------------------------------------------
# enumerating the registries


def transformers_kind(model_type: str) -> str:
    """The table kind of a transformers model type, read from the task registries."""
    from transformers.models.auto import modeling_auto as m

    def within(*names: str) -> bool:
        return any(model_type in getattr(m, f"MODEL_FOR_{n}_MAPPING_NAMES", {}) for n in names)

    if within("VIDEO_CLASSIFICATION"):
        return "video"
    if within("SEMANTIC_SEGMENTATION", "UNIVERSAL_SEGMENTATION", "INSTANCE_SEGMENTATION"):
        return "segmentation"
    if within("CTC", "AUDIO_CLASSIFICATION", "SPEECH_SEQ_2_SEQ", "AUDIO_XVECTOR"):
        return "audio"
    if within("SEQ_TO_SEQ_CAUSAL_LM"):
        return "encoder-decoder"
    if within("IMAGE", "IMAGE_CLASSIFICATION", "OBJECT_DETECTION"):
        return "vision"
    if within("CAUSAL_LM") and not within("MASKED_LM"):
        return "decoder"
    return "encoder"


def _transformers_rows() -> Iterator[Row]:
    from transformers.models.auto import modeling_auto as m

    lms = m.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    for model_type, cls in m.MODEL_MAPPING_NAMES.items():
        if not isinstance(cls, str):  # a type with several base classes: the first
            cls = cls[0]
        yield Row("transformers", model_type, "base", transformers_kind(model_type), cls)
        if model_type in lms:
            lm = lms[model_type] if isinstance(lms[model_type], str) else lms[model_type][0]
            yield Row("transformers", model_type, "causal-lm", "decoder", lm)
            yield Row("transformers", model_type, "causal-lm-kv", "decoder-kv", lm)


_TORCHVISION_KINDS = {
    "segmentation": "segmentation",
    "video": "video",
    "optical_flow": "optical-flow",
    "detection": "detection",
    "quantization": "vision",
}


def _torchvision_rows() -> Iterator[Row]:
    import torchvision.models as tvm

    for name in tvm.list_models():
        module = tvm.get_model_builder(name).__module__.split(".")
        kind = next((_TORCHVISION_KINDS[p] for p in module if p in _TORCHVISION_KINDS), "vision")
        yield Row("torchvision", name, "base", kind, name)


def enumerate_rows() -> tuple[list[Row], dict[str, str]]:
    """(every row of every registry that imports, {source: why it is missing})."""
    rows: list[Row] = []
    missing: dict[str, str] = {}
    for source, rows_of in (
        ("transformers", _transformers_rows),
        ("torchvision", _torchvision_rows),
    ):
        try:
            rows.extend(rows_of())
        except Exception as exc:  # a registry that does not import is a fact for the report
            missing[source] = (
                f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            )
    return rows, missing


# --------------------------------------------------------------------------------------------
# shrinking a config

HIDDEN, HEADS, KV_HEADS, FFN, LAYERS, IMAGE, PATCH, POSITIONS = 32, 4, 2, 64, 2, 32, 8, 512
_SIZES: dict[str, int] = {
    **dict.fromkeys(("hidden_size", "d_model", "n_embd", "dim", "embed_dim", "word_embed_proj_dim"), HIDDEN),
    **dict.fromkeys(("num_attention_heads", "n_head", "n_heads", "encoder_attention_heads", "decoder_attention_heads"), HEADS),
    **dict.fromkeys(("head_dim", "d_kv", "attention_head_dim"), HIDDEN // HEADS),
    **dict.fromkeys(("intermediate_size", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "d_ff", "n_inner", "hidden_dim"), FFN),
    **dict.fromkeys(("moe_intermediate_size", "shared_expert_intermediate_size"), FFN // 2),
    **dict.fromkeys(("num_hidden_layers", "n_layer", "num_layers", "n_layers", "encoder_layers", "decoder_layers", "num_decoder_layers"), LAYERS),
    **dict.fromkeys(("num_experts", "num_local_experts", "n_routed_experts"), 4),
    "num_experts_per_tok": 2,
    "embedding_size": HIDDEN,  # 16 would make 512x16 position tables the dynamo exporter folds
    "rotary_dim": HIDDEN // HEADS // 2,  # GPT-J, CodeGen: 64 of a 256 head; 64 > a head of 8 fails
    "num_conv_pos_embeddings": 16,
    "num_conv_pos_embedding_groups": 4,
    "num_mel_bins": 16,
}  # fmt: skip
_CAPS = {"vocab_size": VOCAB, **dict.fromkeys(
    ("max_position_embeddings", "n_positions", "max_source_positions", "max_target_positions"), POSITIONS
)}  # fmt: skip
_TOKEN_IDS = re.compile(r"^(pad|bos|eos|unk|sep|cls|mask|decoder_start)_token_id$")
_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")


def _shrink_value(key: str, value: Any, consistent: bool = False, widths: Any = None) -> Any:
    if isinstance(value, dict):  # a sub-config (id2label and friends are not)
        return shrink(value, consistent, widths) if "model_type" in value else value
    if isinstance(value, bool) or value is None:
        return value
    if key in _SIZES and isinstance(value, int):
        return _SIZES[key]
    if key in _CAPS and isinstance(value, int):
        return min(value, _CAPS[key])
    if _TOKEN_IDS.match(key):
        ids = value if isinstance(value, list) else [value]
        small = [i if not isinstance(i, int) or i < VOCAB else 1 + n for n, i in enumerate(ids)]
        return small if isinstance(value, list) else small[0]
    if key in ("image_size", "patch_size", "tubelet_size", "num_frames") and isinstance(value, int):
        return {"image_size": IMAGE, "patch_size": PATCH, "tubelet_size": 2, "num_frames": 4}[key]
    if key in ("hidden_sizes", "embed_dims", "neck_hidden_sizes") and isinstance(value, list):
        return [max(8, int(v) // 16 // 8 * 8 or 8) for v in value]
    if key in ("out_features", "out_indices"):  # backbone stages named by the old depth
        return None
    if key in ("depths", "num_heads") and isinstance(value, list):
        return [1 if key == "depths" else 2 for _ in value]
    if key == "conv_dim" and isinstance(value, list | tuple):
        return [16 for _ in value]
    return value


def shrink(
    config: dict[str, Any], consistent: bool = False, widths: dict[int, int] | None = None
) -> dict[str, Any]:
    """A config dict made tiny: whatever of hidden size, layers, heads, intermediate size,
    vocabulary (and the token ids inside it), positions, image and patch size, stage widths and
    depths, audio conv stacks it has (sub-configs too: text, vision, audio, encoder, decoder).
    Per-layer lists as long as the old layer count are cut to the new one.

    ``consistent``: also the rules that keep the shrunk sizes consistent with each other
    (:func:`_consistent`). :func:`_config` asks for them only where the config as shrunk without
    them fails validation or construction, so a row that built without them keeps its config
    (and its cache key) byte for byte. ``widths``: {old width: new} over the whole config (its
    sub-configs'), which the top-level call gathers."""
    if consistent and widths is None:
        widths = _old_widths(config)
    out = {k: _shrink_value(k, v, consistent, widths) for k, v in config.items()}
    heads = config.get("num_attention_heads")
    kv = config.get("num_key_value_heads")
    if isinstance(kv, int) and not isinstance(kv, bool):
        out["num_key_value_heads"] = HEADS if kv == heads else KV_HEADS
    layers = next((config[k] for k in _LAYER_KEYS if isinstance(config.get(k), int)), None)
    for key, value in config.items():
        if isinstance(value, list) and layers and len(value) == layers and key not in ("depths",):
            if consistent and _per_stage(config, value):
                continue
            out[key] = value[:LAYERS]
    if (
        "attn_implementation" in config
        or "_attn_implementation" in config
        or "model_type" in config
    ):
        out["attn_implementation"] = "eager"
    return _consistent(config, out, widths or {}) if consistent else out


_HEAD_KEYS = (
    "num_attention_heads", "num_heads", "n_head", "n_heads", "encoder_attention_heads",
    "decoder_attention_heads",
)  # fmt: skip
_WIDTH_KEYS = ("hidden_size", "d_model", "n_embd", "dim", "embed_dim", "hidden_sizes", "embed_dims")


def _per_stage(config: dict[str, Any], value: list[Any]) -> bool:
    """A list with one entry per stage (as long as ``depths``: Swin's ``num_heads``, CLAP's
    ``num_attention_heads``), where the layer count is the stage count: not a per-layer list."""
    depths = config.get("depths")
    return isinstance(depths, list) and len(depths) == len(value)


def _ints(value: Any) -> list[int]:
    items = value if isinstance(value, list) else [value]
    return [v for v in items if isinstance(v, int) and not isinstance(v, bool) and v > 0]


def _old_widths(config: dict[str, Any]) -> dict[int, int]:
    """{old width: shrunk width} of every width of ``config`` and its sub-configs (a stage list
    entry by entry); the first seen of a width wins."""
    found: dict[int, int] = {}
    for key, value in config.items():
        if isinstance(value, dict) and "model_type" in value:
            for old, new in _old_widths(value).items():
                found.setdefault(old, new)
        elif key in _WIDTH_KEYS and _ints(value):
            small = _shrink_value(key, value)
            pairs = zip(value, small, strict=True) if isinstance(value, list) else [(value, small)]
            for old, new in pairs:
                found.setdefault(old, new)
    return found


def _consistent(
    config: dict[str, Any], out: dict[str, Any], widths: dict[int, int]
) -> dict[str, Any]:
    """The shrunk config ``out`` of ``config`` with its sizes made consistent again, one class of
    build failure per rule, each leaving alone what was already consistent:

    - head counts divide the width they split (per stage too: PVT's ``[1, 2, 5, 8]`` heads over
      widths ``[8, 8, 8, 16]``; Bark's 12 heads of a 32 wide layer): the greatest common divisor;
    - key/value heads divide the heads;
    - a group count (GroupNorm's ``num_groups``, a grouped conv's ``*_groups``) divides the
      smallest width: BiT's 32 groups over 4 bottleneck channels (a quarter of its least stage
      width), so at most 4;
    - a size the shrink did not name but that was an old width of the config or of another
      sub-config (``codebook_dim``, ``audio_hidden_size``, ``backbone_hidden_size``,
      ``hidden_size_global``, ``upsample_groups``; a list of them, every entry) is that width
      shrunk;
    - ``per_layer_config`` keeps the layers that are left, its overrides shrunk;
    - a backbone keeps its stages, so its ``out_indices`` and ``out_features`` are kept; where
      they named layers (which a strict config may not leave unset), the layers left;
    - ``mrope_section`` sums to half the shrunk head as it did to half the old one;
    - any other ``*_token_id`` is within the shrunk vocabulary."""
    out = dict(out)
    new_width = [v for k in _WIDTH_KEYS for v in _ints(out.get(k))]
    for key, value in config.items():  # an old width under another name
        if (
            key not in _SIZES
            and key not in _WIDTH_KEYS
            and out.get(key) == value
            and _ints(value)
            and len(_ints(value)) == (len(value) if isinstance(value, list) else 1)
            and all(v in widths for v in _ints(value))
            and re.search(r"(hidden|_dim$|_dims$|channels|groups)", key)
        ):
            out[key] = [widths[v] for v in value] if isinstance(value, list) else widths[value]
    for key in _HEAD_KEYS:
        heads = out.get(key)
        width = next((out[k] for k in _WIDTH_KEYS if _ints(out.get(k))), None)
        if width is None or not _ints(heads):
            continue
        if isinstance(heads, list):
            widths = width if isinstance(width, list) and len(width) == len(heads) else None
            out[key] = [
                math.gcd(h, widths[i] if widths else min(_ints(width))) if isinstance(h, int) else h
                for i, h in enumerate(heads)
            ]
        elif isinstance(heads, int) and isinstance(width, int):
            out[key] = math.gcd(heads, width)
    if _ints(out.get("num_key_value_heads")) and isinstance(out.get("num_attention_heads"), int):
        out["num_key_value_heads"] = math.gcd(
            out["num_key_value_heads"], out["num_attention_heads"]
        )
    least = min(new_width, default=None)
    for key, value in out.items():
        if (
            key.endswith("groups")
            and least
            and isinstance(value, int)
            and not isinstance(value, bool)
            and value > 1
            and least % value
        ):
            out[key] = math.gcd(value, 4)
    if isinstance(out.get("per_layer_config"), dict):
        kept = {
            k: {n: _shrink_value(n, v) for n, v in layer.items()}
            for k, layer in out["per_layer_config"].items()
            if str(k).isdigit() and int(k) < LAYERS and isinstance(layer, dict)
        }
        out["per_layer_config"] = kept or None
    if isinstance(config.get("out_indices"), list | tuple):
        if "depths" in config:
            out["out_indices"], out["out_features"] = (
                config["out_indices"],
                config.get("out_features"),
            )
        else:
            out["out_indices"] = [i for i in config["out_indices"] if i <= LAYERS] or [LAYERS]
    rope = out.get("rope_parameters")
    head = out.get("head_dim")
    if isinstance(rope, dict) and _ints(rope.get("mrope_section")) and isinstance(head, int):
        old = rope["mrope_section"]
        half = head // 2
        sections = [max(1, s * half // sum(old)) for s in old]
        sections[0] += half - sum(sections)
        out["rope_parameters"] = {**rope, "mrope_section": sections}
    for key, value in out.items():  # a token id the shrink did not name (NeMo's blank_token_id)
        if key.endswith("_token_id") and _ints(value) == [value] and value >= VOCAB:
            out[key] = VOCAB - 1
    return out


# --------------------------------------------------------------------------------------------
# building a row


def _config(row: Row, use_cache: bool) -> Any:
    """The row's shrunk config: as :func:`shrink` makes it, or, where that fails validation or
    construction (or, for a row over a KV cache, returns no cache), with its sizes made
    consistent too (``shrink(consistent=True)``) and, over a cache, as a decoder (BERT and its
    kin return a cache only as one). A row that built without these is built exactly as before."""
    import transformers
    from transformers import AutoConfig

    try:
        base = AutoConfig.for_model(row.model)
    except Exception as exc:
        raise BuildError(f"AutoConfig.for_model: {_first_line(exc)}") from None
    cls = getattr(transformers, row.cls, None)
    why = ""
    for consistent in (False, True):
        small = shrink(base.to_dict(), consistent)
        small["use_cache"] = use_cache
        if consistent and use_cache and small.get("is_decoder") is False:
            small["is_decoder"] = True
        try:
            config = type(base).from_dict(small)
        except Exception as exc:
            why = f"shrunk config: {_first_line(exc)}"
            continue
        if consistent or cls is None or _builds(cls, config, use_cache):
            return config
    raise BuildError(why)


def _builds(cls: Any, config: Any, use_cache: bool) -> bool:
    """Whether ``cls`` builds from ``config`` (a copy: a model may set its config's fields, as
    BartForCausalLM's is_decoder) and, over a cache, returns one."""
    import torch

    try:
        model = cls(copy.deepcopy(config))
        if not use_cache:
            return True
        with torch.no_grad():
            out = model.eval()(input_ids=torch.full((2, 3), 3), use_cache=True)
        return getattr(out, "past_key_values", None) is not None
    except Exception:
        return False


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"[:300]


def row_key(row: Row) -> str:
    """A hash of what builds the row: its config, class and the library versions (the harness's
    own fingerprint adds the builder's source and the signature)."""
    import torch

    parts: list[Any] = [row, torch.__version__]
    if row.source == "torchvision":
        import torchvision

        parts.append(torchvision.__version__)
    if row.source == "transformers":
        import transformers

        parts.append(transformers.__version__)
        parts.append(
            json.dumps(
                _config(row, row.head == "causal-lm-kv").to_dict(), sort_keys=True, default=str
            )
        )
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:10]


def _transformers_module(row: Row) -> Any:
    import transformers

    cls = getattr(transformers, row.cls, None)
    if cls is None:
        raise BuildError(f"transformers has no class {row.cls}")
    config = _config(row, use_cache=row.head == "causal-lm-kv")
    try:
        return cls(config)
    except Exception as exc:
        raise BuildError(f"{row.cls}(config): {_first_line(exc)}") from None


def _flat_outputs(out: Any) -> list[tuple[str, Any]]:
    """(name, tensor) of every tensor a model returned, in order (tuples flattened)."""
    import torch

    items = (
        out.items()
        if hasattr(out, "items")
        else enumerate(out if isinstance(out, tuple) else (out,))
    )
    flat: list[tuple[str, Any]] = []
    for key, value in items:
        if isinstance(value, torch.Tensor):
            flat.append((str(key), value))
        elif isinstance(value, tuple | list):
            flat.extend(
                (f"{key}_{i}", v) for i, v in enumerate(value) if isinstance(v, torch.Tensor)
            )
    return flat


def _named_wrapper(model: Any, input_names: list[str]) -> Any:
    """``model`` as plain tensors in (named: its ``forward`` signature lists ``input_names``, so
    dynamo's ``dynamic_shapes`` match them one to one) and a flat tuple of tensors out."""
    import torch

    class Flat(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args: Any) -> tuple[Any, ...]:
            out = self.model(**dict(zip(input_names, args, strict=True)))
            return tuple(t for _, t in _flat_outputs(out))

    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in input_names]
    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    Flat.forward.__signature__ = inspect.Signature([self_param, *params])  # type: ignore[attr-defined]  # read by torch.export
    return Flat()


@dataclass(frozen=True)
class _Feed:
    """How a row is fed: input specs, traced sizes, check sizes."""

    inputs: tuple[InputSpec, ...]
    traced: tuple[dict[str, int], ...]
    checks: tuple[dict[str, int], ...]


_B = ({"batch": 1}, {"batch": 2})
_B_CHECKS = ({"batch": 3}, {"batch": 5})


def _with(sizes: tuple[dict[str, int], ...], **extra: int) -> tuple[dict[str, int], ...]:
    return tuple({**s, **extra} for s in sizes)


def _text_feeds(params: list[str], config: Any) -> list[_Feed]:
    vocab = min(getattr(config, "vocab_size", None) or VOCAB, VOCAB)
    ids = InputSpec("input_ids", ("batch", "seq"), "ids", high=vocab, low=min(3, vocab - 1))
    inputs = [ids]
    if "attention_mask" in params:
        inputs.append(InputSpec("attention_mask", ("batch", "seq"), "mask"))
    if "decoder_input_ids" in params and getattr(config, "is_encoder_decoder", False):
        inputs.append(InputSpec("decoder_input_ids", ("batch", "tgt"), "ids", high=vocab))
        checks = (
            {"batch": 3, "seq": 5, "tgt": 7},
            {"batch": 2, "seq": 13, "tgt": 4},
            {"batch": 1, "seq": 16, "tgt": 16},
        )
        return [_Feed(tuple(inputs), _with(TEXT_TRACED, tgt=8), checks)]
    return [_Feed(tuple(inputs), TEXT_TRACED, TEXT_CHECKS)]


def _image_feeds(config: Any, video: bool) -> list[_Feed]:
    """Square images of the config's size, else the smallest of 64, 128, 224 the model takes;
    at each, height and width free first (checked at other sides and aspect ratios)."""
    channels = getattr(config, "num_channels", 3) or 3
    configured = getattr(config, "image_size", IMAGE)
    configured = configured if isinstance(configured, int) else IMAGE
    lead: tuple[Any, ...] = (
        ("batch", getattr(config, "num_frames", 4), channels) if video else ("batch", channels)
    )
    feeds = []
    for side in dict.fromkeys((configured, 64, 128, 224)):
        free = InputSpec("pixel_values", (*lead, "height", "width"))
        fixed = InputSpec("pixel_values", (*lead, side, side))
        checks = (
            {"batch": 3, "height": side, "width": side},
            {"batch": 2, "height": side + side // 2, "width": 2 * side},
            {"batch": 1, "height": 2 * side, "width": side + side // 4},
        )
        feeds.append(_Feed((free,), _with(_B, height=side, width=side), checks))
        feeds.append(_Feed((fixed,), _B, (*_B_CHECKS, {"batch": 4})))
    return feeds


def _audio_feeds(first: str, config: Any, params: list[str]) -> list[_Feed]:
    decoder = "decoder_input_ids" in params and getattr(config, "is_encoder_decoder", False)
    extra = (
        (
            InputSpec(
                "decoder_input_ids",
                ("batch", "tgt"),
                "ids",
                high=min(getattr(config, "vocab_size", VOCAB), VOCAB),
            ),
        )
        if decoder
        else ()
    )
    tgt = {"tgt": 4} if decoder else {}
    if first == "input_values":
        free = (InputSpec("input_values", ("batch", "samples")), *extra)
        checks = (
            {"batch": 3, "samples": 1200, **tgt},
            {"batch": 2, "samples": 2000, **tgt},
            {"batch": 1, "samples": 3200, **tgt},
        )
        fixed = (InputSpec("input_values", ("batch", 1600)), *extra)
        return [
            _Feed(free, _with(_B, samples=1600, **tgt), checks),
            _Feed(fixed, _with(_B, **tgt), _with((*_B_CHECKS, {"batch": 4}), **tgt)),
        ]
    mels = getattr(config, "num_mel_bins", None) or getattr(config, "feature_size", 16) or 16
    frames = 2 * getattr(config, "max_source_positions", 32)
    fixed = (InputSpec("input_features", ("batch", mels, frames)), *extra)
    return [_Feed(fixed, _with(_B, **tgt), _with((*_B_CHECKS, {"batch": 4}), **tgt))]


def _feeds(row: Row, model: Any) -> list[_Feed]:
    """The ways to feed ``model``, most dynamic first (sequence / resolution / samples free)."""
    params = [p for p in inspect.signature(model.forward).parameters if p not in ("self", "kwargs")]
    first = params[0] if params else ""
    if first == "input_ids":
        return _text_feeds(params, model.config)
    if first == "pixel_values" or (first == "pixel_values_videos"):
        return _image_feeds(
            model.config, video=row.kind == "video" or hasattr(model.config, "num_frames")
        )
    if first in ("input_values", "input_features"):
        return _audio_feeds(first, model.config, params)
    raise BuildError(f"first input {first!r} is not one the sweep feeds generically")


def _symbols(feed: _Feed) -> list[str]:
    return [d for spec in feed.inputs for d in spec.shape if isinstance(d, str)]


def _templates(
    names: list[str], shapes: list[list[tuple[int, ...]]], sizes: list[dict[str, int]]
) -> tuple[OutputSpec, ...]:
    """Each output axis as the symbol whose size it follows at every size, else fixed or new."""
    specs = []
    for i, name in enumerate(names):
        dims: list[int | str] = []
        for axis in range(len(shapes[0][i])):
            seen = [s[i][axis] for s in shapes]
            follows = [
                k for k in sizes[0] if all(sz[k] == v for sz, v in zip(sizes, seen, strict=True))
            ]
            dims.append(
                follows[0] if follows else seen[0] if len(set(seen)) == 1 else f"{name}_{axis}"
            )
        specs.append(OutputSpec(name, tuple(dims)))
    return tuple(specs)


def _outputs_at(
    module: Any, arch: Architecture, sizes: dict[str, int]
) -> list[tuple[str, tuple[int, ...]]]:
    import torch

    feeds = arch.make_inputs(sizes)
    with torch.no_grad():
        out = module.model(**{k: torch.from_numpy(v) for k, v in feeds.items()})
    return [(n, tuple(t.shape)) for n, t in _flat_outputs(out)]


def _probe(arch: Architecture, module: Any) -> tuple[OutputSpec, ...]:
    """Run ``module`` in eager at the traced batch 2 and at every check size; name output axes."""
    sizes = [dict(arch.traced[-1]), *map(dict, arch.checks)]
    runs = [_outputs_at(module, arch, s) for s in sizes]
    names = [n for n, _ in runs[0]]
    if not names:
        raise BuildError("the model returns no tensor")
    if any(
        [n for n, _ in r] != names or [len(s) for _, s in r] != [len(s) for _, s in runs[0]]
        for r in runs
    ):
        raise BuildError("the model returns different outputs at different sizes")
    return _templates(names, [[s for _, s in r] for r in runs], sizes)


def _transformers_architecture(row: Row, name: str) -> Architecture:
    model = _transformers_module(row)
    why = "no way to feed it"
    for feed in _feeds(row, model):
        input_names = [i.name for i in feed.inputs]

        def builder(names: list[str] = input_names) -> Any:
            return _named_wrapper(_transformers_module(row), names)

        arch = Architecture(name, row.kind, builder, feed.inputs, (), feed.traced, feed.checks)
        try:
            outputs = _probe(arch, arch.build())
        except BuildError:
            raise
        except Exception as exc:  # torch eager refuses this feed: try the next, less dynamic one
            why = f"torch eager at {dict(feed.traced[-1])}: {_first_line(exc)}"
            continue
        return Architecture(name, row.kind, builder, feed.inputs, outputs, feed.traced, feed.checks)
    raise BuildError(why)


def _kv_architecture(row: Row, name: str) -> Architecture:
    """A causal LM over a flat cache of ``KV_LAYERS`` layers (the corpus's ``*_kv`` wrapper)."""
    import torch

    model = _transformers_module(row).eval()
    try:
        with torch.no_grad():
            out = model(input_ids=torch.full((2, 3), 3), use_cache=True)
        layers = out.past_key_values.layers
        keys = [layer.keys for layer in layers]
    except Exception as exc:
        raise BuildError(f"no flat KV cache: {_first_line(exc)}") from None
    if len(keys) != KV_LAYERS or any(k is None or k.dim() != 4 for k in keys):
        raise BuildError(f"cache is not {KV_LAYERS} layers of [batch, heads, past, head_dim] keys")
    if out.logits.shape[-1] != VOCAB:
        raise BuildError(f"logits over {out.logits.shape[-1]} tokens, not the shrunk {VOCAB}")
    _, kv_heads, _, head_dim = keys[0].shape
    arch = _cached(
        name, row.kind, lambda: _cached_wrapper(_transformers_module(row)), kv_heads, head_dim
    )
    module = arch.build()
    feeds = arch.make_inputs(arch.traced[-1])
    try:
        with torch.no_grad():
            module(*(torch.from_numpy(v) for v in feeds.values()))
    except Exception as exc:
        raise BuildError(f"torch eager over the flat cache: {_first_line(exc)}") from None
    return arch


# --------------------------------------------------------------------------------------------
# torchvision: the smallest square input each model accepts

_SIDES = (32, 64, 96, 128, 160, 224, 299, 320, 520)
_FRAMES = (4, 16)


def _torchvision_module(row: Row) -> Any:
    import torch
    import torchvision.models as tvm

    builder = tvm.get_model_builder(row.model)
    # no download: a segmentation or detection model's backbone is pretrained by default
    extra = (
        {"weights_backbone": None}
        if "weights_backbone" in inspect.signature(builder).parameters
        else {}
    )
    model = builder(weights=None, **extra)
    detection = row.kind == "detection"

    class Flat(torch.nn.Module):
        """The model's tensors as a tuple, as the harness takes them: a classifier's one tensor,
        a segmentation model's dict (out, aux), RAFT's list of flows; for detection, a batch in
        and every image's tensors out."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *xs: Any) -> tuple[Any, ...]:
            if detection:
                found = self.model(list(xs[0].unbind(0)))
                return tuple(t for image in found for t in image.values())
            return tuple(t for _, t in _flat_outputs(self.model(*xs)))

    # named as the inputs are (x; RAFT's image1, image2), so dynamo's dynamic_shapes match them
    # one to one: with *xs the re-export of every torchvision row failed ("mismatch between the
    # structure of inputs and dynamic_shapes")
    names = [spec.name for spec in _torchvision_inputs(row, 32)]
    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names]
    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    Flat.forward.__signature__ = inspect.Signature([self_param, *params])  # type: ignore[attr-defined]  # read by torch.export
    return Flat()


def _torchvision_inputs(row: Row, side: int, frames: int = 4) -> tuple[InputSpec, ...]:
    if row.kind == "video":
        return (InputSpec("x", ("batch", 3, frames, side, side)),)
    if row.kind == "optical-flow":
        return (
            InputSpec("image1", ("batch", 3, side, side)),
            InputSpec("image2", ("batch", 3, side, side)),
        )
    return (InputSpec("x", ("batch", 3, side, side)),)


def _torchvision_architecture(row: Row, name: str) -> Architecture:
    import torch

    why = ""
    # a video model takes 4 frames, or 16 (MViT, S3D), at the smallest side it accepts
    frames = _FRAMES if row.kind == "video" else _FRAMES[:1]
    for side, length in ((s, f) for s in _SIDES for f in frames):
        inputs = _torchvision_inputs(row, side, length)
        arch = Architecture(
            name,
            row.kind,
            lambda: _torchvision_module(row),
            inputs,
            (),
            _B,
            (*_B_CHECKS, {"batch": 4}),
        )
        module = arch.build()
        try:
            runs = []
            for sizes in [dict(arch.traced[-1]), *map(dict, arch.checks)]:
                with torch.no_grad():
                    out = module(*(torch.from_numpy(v) for v in arch.make_inputs(sizes).values()))
                runs.append([tuple(t.shape) for _, t in _flat_outputs(out)])
        except Exception as exc:
            where = f"{length} frames of {side}x{side}" if row.kind == "video" else f"{side}x{side}"
            why = f"torch eager at {where}: {_first_line(exc)}"
            continue
        names = [f"out_{i}" for i in range(len(runs[0]))]
        outputs = _templates(names, runs, [dict(arch.traced[-1]), *map(dict, arch.checks)])
        return Architecture(name, row.kind, arch.builder, inputs, outputs, _B, arch.checks)
    raise BuildError(why or "no input size accepted")


def architecture(row: Row, name: str) -> Architecture:
    """The row as a corpus ``Architecture`` named ``name``, probed in torch eager.

    Raises :class:`BuildError` when the row cannot be built tiny or fed generically."""
    if row.source == "torchvision":
        return _torchvision_architecture(row, name)
    if row.head == "causal-lm-kv":
        return _kv_architecture(row, name)
    return _transformers_architecture(row, name)


BuilderFor = Callable[[Row, str], Architecture]


# --------------------------------------------------------------------------------------------
# a stored torch reference case, as a user following symbolize's "--ref" advice records one


def reference_sizes(
    arch: Architecture, traced: dict[str, int], least: dict[str, int] | None = None
) -> list[dict[str, int]]:
    """Sizes for the one reference case the sweep gives ``--ref``, the first torch eager takes
    to be used: sizes the scoring never checks, so the held-out sizes stay held out. ``batch``
    is the least batch of 2 or more that neither the traced sizes nor the check sizes use (4 for
    text); every other symbol differs from every value a check size or another symbol uses:
    what coincides at the traced size differs here. Under the traced value first (so within a
    ``seq<=traced`` bound too): of the other parity, about a quarter less, stepping down by 2
    (seq 8 -> 7; tgt 8 -> 7, checked, -> 5; height 32 -> 25 and width -> 23, other patch grids;
    1600 samples -> 1201); then in steps of a quarter, for a model that takes only whole patches
    (height 32 -> 24, width -> 16; seq 8 -> 6); then the same two over the traced value
    (height 32 -> 41, width -> 43; 32 -> 40, width -> 56), for a model that takes no smaller;
    last, those with one symbol at a time at its traced value (:func:`_one_kept`).
    A symbol that is the sum of two others at every traced and check size (a mask's total =
    past + seq) is their sum here too.

    ``least``: the sizes a refusal asks the reference case to reach (``height 128 or more``:
    :func:`advised_least`); those symbols are then at least that, the least value no check
    uses, tried before the others."""
    sizes = [*map(dict, arch.traced), *map(dict, arch.checks)]
    if least:
        return [_at_least(sizes, traced, least), *reference_sizes(arch, traced)]
    batch = next(b for b in range(2, 100) if b not in {s["batch"] for s in sizes if "batch" in s})
    sums = _sums(sizes, [k for k in traced if k != "batch"])
    out: list[dict[str, int]] = []
    for sign, odd in ((-1, True), (-1, False), (1, True), (1, False)):
        size: dict[str, int] = {"batch": batch} if "batch" in traced else {}
        for sym, value in traced.items():
            if sym in sums:
                continue
            used = {s[sym] for s in sizes if sym in s} | set(size.values())
            step = max(1, value // 4)
            pick = value + sign * step + (odd and step % 2 == 0)
            while pick in used and (sign > 0 or pick > 1 + (2 if odd else step)):
                pick += sign * (2 if odd else step)
            size.setdefault(sym, pick if pick not in used else value + 1)
        size.update({sym: size[a] + size[b] for sym, (a, b) in sums.items()})
        size = {k: size[k] for k in traced}
        if size not in out:
            out.append(size)
    return out + _one_kept(out, sizes, traced, sums)


def _one_kept(
    out: list[dict[str, int]],
    sizes: list[dict[str, int]],
    traced: dict[str, int],
    sums: dict[str, tuple[str, str]],
) -> list[dict[str, int]]:
    """The sizes of ``out`` again with one symbol at a time back at its traced value (last
    resort, for a model torch eager runs at one value of a symbol only: TimeSformer's width,
    its patch grid's width read from the config), never a traced or check size."""
    kept: list[dict[str, int]] = []
    for size in out:
        for sym in traced:
            if sym == "batch" or sym in sums:
                continue
            again = {**size, sym: traced[sym]}
            again.update({k: again[a] + again[b] for k, (a, b) in sums.items()})
            if again not in (*out, *kept, *sizes):
                kept.append(again)
    return kept


def _at_least(
    sizes: list[dict[str, int]], traced: dict[str, int], least: dict[str, int]
) -> dict[str, int]:
    """One reference size with each symbol of ``least`` at least its value, and every symbol at
    a value no traced or check size uses (batch: the least such of 2 or more; another symbol
    without a least: under its traced value, the other parity where it can)."""
    out: dict[str, int] = {}
    for sym, value in traced.items():
        used = {s[sym] for s in sizes if sym in s}
        start = least.get(sym, 2 if sym == "batch" else value - 1)
        step = 1 if sym in least or sym == "batch" else -1
        pick = start
        while pick in used and pick > 1:
            pick += step
        out[sym] = pick if pick > 1 else value + 1
    return out


def advised_least(text: str) -> dict[str, int]:
    """The input sizes a refusal's advice to pass reference cases asks them to reach:
    ``pass reference cases (--ref) at another size, where A is 2 or more (height 128 or more,
    width 128 or more)`` -> {height: 128, width: 128}; {} where it names none."""
    said = re.search(
        r"reference cases \(--ref\) at another size, where .*? (?:is|are) \d+ or more \(([^)]*)\)",
        text,
    )
    return {m[1]: int(m[2]) for m in re.finditer(r"(\w+) (\d+) or more", said[1])} if said else {}


def _sums(sizes: list[dict[str, int]], symbols: list[str]) -> dict[str, tuple[str, str]]:
    """{symbol: (a, b)} for each symbol equal to a + b, two others, at every size of ``sizes``."""
    out: dict[str, tuple[str, str]] = {}
    for sym in symbols:
        others = [k for k in symbols if k != sym and k not in out]
        pairs = [(a, b) for i, a in enumerate(others) for b in others[i + 1 :]]
        found = [p for p in pairs if all(s[sym] == s[p[0]] + s[p[1]] for s in sizes)]
        if found:
            out[sym] = found[0]
    return out


def write_reference(
    arch: Architecture, model_path: Path, sizes: dict[str, int], folder: Path
) -> Path:
    """Torch eager at ``sizes`` (the harness's cached :func:`~corpus.harness.reference`) as one
    reference case ``folder/test_data_set_0`` in the layout ``--ref`` reads, keyed by the ONNX
    model's input and output names; returns ``folder``."""
    import shutil

    import onnx
    from corpus.harness import reference

    from onnxsurgery.validation.references import Case, save_case

    graph = onnx.load(str(model_path), load_external_data=False).graph
    inits = {i.name for i in graph.initializer}
    inputs, outputs = reference(arch, sizes)
    names = [i.name for i in graph.input if i.name not in inits]
    case = Case(
        name=f"torch eager at {sizes}",
        inputs={n: inputs[n] for n in names},
        outputs=dict(zip([o.name for o in graph.output], outputs, strict=True)),
    )
    shutil.rmtree(folder, ignore_errors=True)
    save_case(case, folder, index=0)
    return folder
