"""symbolize on decoders with a KV cache and sinusoidal position tables (issue 30).

- A mask read at every key position (HF's ``attention_mask[batch_idx, kv_idx]``: dynamo's
  GatherND over an index grid, TorchScript's Gather over the flattened mask at
  ``kv + row * total``) ties the mask's length to ``past + seq``: the check never feeds a mask
  shorter than the keys (before, it ran ``past`` apart from ``total`` and ONNX Runtime failed on
  the gather, arcee/apertus/bart with a cache).
- Sinusoidal tables a trace folds, in the forms exporters leave: sin and cos halves in one table
  with interleaved frequencies (GPT-J's ``sincos`` and its ``repeat_interleave``), a fixed lead
  (XGLM's positions from ``padding_idx + 1``) on top of a cache length, a partial rotary table
  whose last columns do not rotate; each rebuilt and compared with numpy at sizes never traced.
- A count of positions from the traced cache length plus the table's lead (BART's learned
  positions at ``past + 2``) moves with the cache; before, it stayed at the traced start and the
  model came out wrong at any other ``past``.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import onnxruntime as ort
import pytest

import onnxsurgery
from onnxsurgery.errors import PassError
from onnxsurgery.passes.symbolize import Symbolize

HEAD = '<ir_version: 8, opset_import: ["" : 17]>'
SEQ, PAST, DIM = 4, 5, 8


def floats(arr: np.ndarray) -> str:
    return ", ".join(repr(float(v)) for v in arr.ravel())


def cached_model(body: str, weights: dict[str, np.ndarray] | None = None) -> onnx.ModelProto:
    """``x [1, seq, 8]`` and a cache ``past [1, past, 8]`` (grown to ``present`` by a Concat:
    ``past`` is a cache length), traced at seq 4, past 5; ``body`` computes ``y`` from ``x``
    (and the initializers ``weights``)."""
    m = onnx.parser.parse_model(f"""{HEAD}
    g (float[1, 4, 8] x, float[1, 5, 8] past) => (float[1, 4, 8] y, float[1, 9, 8] present) {{
      h = Relu (x)
      present = Concat <axis = 1> (past, h)
      {body}
    }}""")
    for name, value in (weights or {}).items():
        m.graph.initializer.append(onnx.numpy_helper.from_array(value, name))
    onnx.checker.check_model(m)
    return m


AXES = {"x": {0: "batch", 1: "seq"}, "past": {0: "batch", 1: "past"}}


def symbolize(model: onnx.ModelProto, axes=None):
    ctx = onnxsurgery.PassContext(provider="cpu")
    return Symbolize(dynamic_axes=axes or AXES)(model, ctx)


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def angles(start: int, n: int, inv_freq: np.ndarray) -> np.ndarray:
    return (start + np.arange(n, dtype=np.float32))[:, None] * inv_freq[None, :]


def inv_freq(dim: int, base: float = 10000.0) -> np.ndarray:
    return (1.0 / base ** (np.arange(0, dim, 2, dtype=np.float32) / dim)).astype(np.float32)


# ------------------------------------------------------------------------------------------------
# the mask read at every key position


def mask_model(flat: bool) -> onnx.ModelProto:
    """keys = Concat(past, h) ``[b, past + seq, 4]``; the mask ``[b, total]`` read at every key
    position and added to the keys' sums. ``flat``: TorchScript's flat index over the mask,
    else dynamo's GatherND grid."""
    if flat:
        read = """
      flatm = Reshape (mask, minus1)
      shp = Shape (mask)
      tot = Gather <axis = 0> (shp, one)
      col = Constant <value = int64[1, 8] {0, 1, 2, 3, 4, 5, 6, 7}> ()
      row = Constant <value = int64[2, 1] {0, 1}> ()
      stride = Mul (row, tot)
      idx = Add (col, stride)
      m = Gather <axis = 0> (flatm, idx)"""
    else:
        grid = np.stack(np.meshgrid(np.arange(2), np.arange(8), indexing="ij"), -1).ravel()
        read = f"""
      idx = Constant <value = int64[2, 8, 2] {{{", ".join(map(str, grid))}}}> ()
      m = GatherND (mask, idx)"""
    model = onnx.parser.parse_model(f"""{HEAD}
    g (float[2, 3, 4] x, float[2, 5, 4] past, float[2, 8] mask)
        => (float[2, 8] y, float[2, 8, 4] present) {{
      minus1 = Constant <value = int64[1] {{-1}}> ()
      one = Constant <value = int64 {{1}}> ()
      two = Constant <value = int64[1] {{2}}> ()
      h = Relu (x)
      present = Concat <axis = 1> (past, h)
      s = ReduceSum <keepdims = 0> (present, two)
      {read}
      y = Add (s, m)
    }}""")
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("flat", [False, True])
def test_a_mask_read_at_every_key_position_ties_total_to_the_keys(flat):
    """Before: the check ran seq 4 with total kept at 8 and ONNX Runtime failed on the gather
    (index 8 / idx=16 out of range); the plan now says total = past + seq, and the model runs
    right where the mask is as long as the keys."""
    axes = {"x": {0: "batch", 1: "seq"}, "past": {0: "batch", 1: "past"}}
    axes["mask"] = {0: "batch", 1: "total"}
    result = symbolize(mask_model(flat), axes)
    assert {s: str(v) for s, v in result.report.relations.items()} == {"total": "past + seq"}
    rng = np.random.default_rng(0)
    for b, s, p in [(3, 2, 6), (1, 5, 0), (2, 1, 9)]:
        x = rng.standard_normal((b, s, 4)).astype(np.float32)
        past = rng.standard_normal((b, p, 4)).astype(np.float32)
        mask = rng.standard_normal((b, p + s)).astype(np.float32)
        y, _ = run(result.model, {"x": x, "past": past, "mask": mask})
        keys = np.concatenate([past, np.maximum(x, 0)], axis=1)
        np.testing.assert_allclose(y, keys.sum(-1) + mask, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------------
# sinusoidal tables


def check_table(result, table_at, sizes=((1, 3, 7), (2, 6, 0), (1, 1, 12))) -> None:
    """The symbolized model's ``y`` equals ``x * table_at(past, seq)`` at sizes never traced."""
    rng = np.random.default_rng(1)
    for b, s, p in sizes:
        x = rng.standard_normal((b, s, DIM)).astype(np.float32)
        past = rng.standard_normal((b, p, DIM)).astype(np.float32)
        y, _ = run(result.model, {"x": x, "past": past})
        np.testing.assert_allclose(y, x * table_at(p, s), rtol=1e-5, atol=2e-6)


def gptj_sincos(start: int, n: int) -> np.ndarray:
    """GPT-J's folded ``sincos`` after ``repeat_interleave``: sin of each frequency twice, then
    cos of each twice (rotary dim 4 of a head of 8)."""
    ang = angles(start, n, inv_freq(4))
    return np.concatenate(
        [np.repeat(np.sin(ang), 2, axis=1), np.repeat(np.cos(ang), 2, axis=1)], axis=1
    ).astype(np.float32)


def test_interleaved_sin_and_cos_in_one_folded_table_moves_with_past():
    """sin and cos halves of one table at past .. past + seq - 1, each frequency twice in a row:
    no cos or sin alone fits it (before: refused, no pattern); rebuilt as
    Sin((Range + past) * freq + phase)."""
    table = gptj_sincos(PAST, SEQ)
    model = cached_model(
        f"t = Constant <value = float[4, 8] {{{floats(table)}}}> ()\n      y = Mul (x, t)"
    )
    result = symbolize(model)
    text = "\n".join(d.message for d in result.diagnostics)
    assert "Sin((Range + past) * freq + phase)" in text
    check_table(result, lambda p, s: gptj_sincos(p, s))


def xglm_table(start: int, n: int) -> np.ndarray:
    """XGLM's sinusoidal positions (``[sin | cos]`` of ``pos * exp(-log(10000) j / (h - 1))``)
    at ``start + 2``: its positions skip the padding rows."""
    half = DIM // 2
    freq = np.exp(np.arange(half, dtype=np.float32) * -(np.log(10000) / (half - 1)))
    ang = angles(start + 2, n, freq.astype(np.float32))
    return np.concatenate([np.sin(ang), np.cos(ang)], axis=1).astype(np.float32)


def test_sinusoidal_table_from_past_plus_its_lead():
    """A folded absolute sinusoid table at positions past + 2 .. (before: refused): the lead 2
    stays, the cache length moves."""
    table = xglm_table(PAST, SEQ)
    model = cached_model(
        f"t = Constant <value = float[4, 8] {{{floats(table)}}}> ()\n      y = Mul (x, t)"
    )
    result = symbolize(model)
    text = "\n".join(d.message for d in result.diagnostics)
    assert "Sin((Range + past + 2) * freq + phase)" in text
    check_table(result, lambda p, s: xglm_table(p, s))


def partial_rotary(start: int, n: int) -> np.ndarray:
    """Phi's partial rotary as one table over the head: the first 4 columns rotate (sin, then
    cos, half-split by ``cat``), the last 4 pass through (1)."""
    ang = angles(start, n, inv_freq(4))
    rot = np.concatenate([np.sin(ang), np.cos(ang)], axis=1)
    return np.concatenate([rot, np.ones((n, 4))], axis=1).astype(np.float32)


def test_partial_rotary_table_with_pass_through_columns():
    table = partial_rotary(PAST, SEQ)
    model = cached_model(
        f"t = Constant <value = float[4, 8] {{{floats(table)}}}> ()\n      y = Mul (x, t)"
    )
    result = symbolize(model)
    check_table(result, lambda p, s: partial_rotary(p, s))


def test_a_table_that_only_looks_sinusoidal_is_refused():
    """A table whose columns are sinusoids at different starts (no one lead, no one phase): no
    position table; refused, never rebuilt."""
    ang = angles(0, SEQ, inv_freq(DIM))
    table = np.concatenate([np.sin(ang + 0.3), np.cos(ang)], axis=1).astype(np.float32)
    model = cached_model(
        f"t = Constant <value = float[4, 8] {{{floats(table)}}}> ()\n      y = Mul (x, t)"
    )
    with pytest.raises(PassError, match="blocker"):
        symbolize(model)


# ------------------------------------------------------------------------------------------------
# learned positions from past + lead


def test_learned_positions_from_past_plus_lead_move_with_past():
    """BART's ``embed_positions``: a table read at ``past + 2 + i`` (a constant index traced at
    7 .. 10 with past 5). Before: the count kept its traced start 7 and every other past read
    the wrong rows, verified all the same."""
    table = np.arange(40 * DIM, dtype=np.float32).reshape(40, DIM) / 100
    model = cached_model(
        "idx = Constant <value = int64[4] {7, 8, 9, 10}> ()\n"
        "      rows = Gather <axis = 0> (table, idx)\n"
        "      y = Add (x, rows)",
        {"table": table},
    )
    result = symbolize(model)
    rng = np.random.default_rng(2)
    for b, s, p in [(1, 3, 7), (2, 6, 0), (1, 1, 12)]:
        x = rng.standard_normal((b, s, DIM)).astype(np.float32)
        past = rng.standard_normal((b, p, DIM)).astype(np.float32)
        y, _ = run(result.model, {"x": x, "past": past})
        np.testing.assert_allclose(y, x + table[p + 2 : p + 2 + s], rtol=1e-6)
