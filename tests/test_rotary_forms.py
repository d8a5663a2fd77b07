"""symbolize on rotary and sinusoidal tables in more of the forms exporters leave (issue 30).

- A table folded with a leading axis of 1 that the solver reads as the batch traced at 1
  (dynamo's rotary ``cos``/``sin`` table ``[1, seq, d]`` joined with the batch's rows, CodeGen's
  and GPT-J's ``sincos`` at batch 1; at batch 2 the same axis stays 1): matched along its one
  longer axis, the positions, and expanded over the batch, whose rows repeat. One row along an
  axis that is no batch shows nothing and stays a blocker. A table expanded over a batch traced
  at 2 (ModernBERT's decoder by dynamo), its rows the same, is matched on one row likewise.
- A rotary table traced at 2 positions (Moonshine's encoder, 2 frames at the traced length):
  2 points fit any line, so it is taken only where more shows what it is: its sin and cos
  together on the unit circle with 3 or more frequencies in rotary's geometric progression, or
  the first 2 rows, bit for bit, of a longer table that its own positions pin down (the
  decoder's, from the same ``inv_freq``). Two frequencies alone, a cos alone, frequencies that
  are no progression, rows that are not positions 0 and 1, or the prefix of a table that is no
  sinusoid: refused as before.
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
from onnxsurgery.passes.symbolize.generators import evidence_gap, match_generator

HEAD = '<ir_version: 8, opset_import: ["" : 17]>'
SEQ, PAST, DIM = 4, 5, 8
AXES = {"x": {0: "batch", 1: "seq"}, "past": {0: "batch", 1: "past"}}


def floats(arr: np.ndarray) -> str:
    return ", ".join(repr(float(v)) for v in arr.ravel())


def symbolize(model: onnx.ModelProto, axes: dict | None = None):
    ctx = onnxsurgery.PassContext(provider="cpu")
    return Symbolize(dynamic_axes=axes or AXES)(model, ctx)


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def inv_freq(dim: int, base: float = 10000.0) -> np.ndarray:
    return (1.0 / base ** (np.arange(0, dim, 2, dtype=np.float32) / dim)).astype(np.float32)


def sincos(start: int, n: int) -> np.ndarray:
    """GPT-J's and CodeGen's folded ``sincos`` (``[sin | cos]`` of each frequency twice, rotary
    dim 4 of a head of 8) at positions ``start .. start + n - 1``."""
    ang = (start + np.arange(n, dtype=np.float32))[:, None] * inv_freq(4)[None, :]
    return np.concatenate(
        [np.repeat(np.sin(ang), 2, axis=1), np.repeat(np.cos(ang), 2, axis=1)], axis=1
    ).astype(np.float32)


def joined_with_the_batch(table: np.ndarray) -> onnx.ModelProto:
    """``x [b, seq, 8]`` traced at batch ``b`` (the table's axis 0) joined on its last axis with
    a folded table ``[b, seq, 8]``: the Concat makes the solver read the table's axis 0 as the
    batch; a cache ``past`` (a Concat grows it to ``present``) is the length the positions may
    start at. At batch 2 the table holds one row of positions per batch row, the same twice
    (dynamo's rotary ``cos`` of ModernBERT's decoder with a cache, ``[batch, 1, seq, d]``)."""
    b = table.shape[0]
    m = onnx.parser.parse_model(f"""{HEAD}
    g (float[{b}, 4, 8] x, float[{b}, 5, 8] past) => (float[{b}, 4, 16] y, float[{b}, 9, 8] present) {{
      h = Relu (x)
      present = Concat <axis = 1> (past, h)
      t = Constant <value = float[{b}, 4, 8] {{{floats(table)}}}> ()
      y = Concat <axis = 2> (x, t)
    }}""")
    onnx.checker.check_model(m)
    return m


@pytest.mark.parametrize("start", [0, PAST], ids=["from-0", "from-past"])
def test_a_rotary_table_with_a_leading_axis_read_as_the_batch_traced_at_1(start):
    """Before: 'its values follow no pattern' (the cos/sin generators took one axis only, and
    the batch axis of 1 made two). Now: matched along seq, expanded over the batch."""
    model = joined_with_the_batch(sincos(start, SEQ)[None])
    result = symbolize(model)
    text = "\n".join(d.message for d in result.diagnostics)
    pos = "(Range + past)" if start else "Range"
    assert f"float32[batch, seq, 8] (Sin({pos} * freq + phase) on axis 1)" in text
    rng = np.random.default_rng(3)
    for b, s, p in [(3, 7, 2), (2, 1, 9), (1, 12, 0)]:
        x = rng.standard_normal((b, s, DIM)).astype(np.float32)
        past = rng.standard_normal((b, p, DIM)).astype(np.float32)
        y, _ = run(result.model, {"x": x, "past": past})
        table = np.broadcast_to(sincos(p if start else 0, s), (b, s, DIM))
        np.testing.assert_allclose(y, np.concatenate([x, table], axis=2), rtol=1e-5, atol=2e-6)


def test_a_rotary_table_repeated_over_a_batch_traced_at_2_follows_the_batch():
    """Before: 'its values follow no pattern' (axis 0 was 2 long, so the table had two axes
    that grow). Its rows repeat along the batch: matched on one row along seq, from past, and
    expanded over the batch; it matches numpy at other batches, lengths and cache lengths."""
    model = joined_with_the_batch(np.stack([sincos(PAST, SEQ)] * 2))
    result = symbolize(model)
    text = "\n".join(d.message for d in result.diagnostics)
    assert "(Sin((Range + past) * freq + phase) on axis 1)" in text, text
    rng = np.random.default_rng(4)
    for b, s, p in [(3, 7, 2), (1, 1, 9), (4, 4, 0)]:
        x = rng.standard_normal((b, s, DIM)).astype(np.float32)
        past = rng.standard_normal((b, p, DIM)).astype(np.float32)
        y, _ = run(result.model, {"x": x, "past": past})
        table = np.broadcast_to(sincos(p, s), (b, s, DIM))
        np.testing.assert_allclose(y, np.concatenate([x, table], axis=2), rtol=1e-5, atol=2e-6)


def test_one_row_of_a_position_table_repeats_only_along_a_batch():
    """The axis traced at 1 is taken as one row repeated only where its symbol is a batch: along
    any other axis one row shows no pattern (evidence_gap names it)."""
    table = sincos(0, SEQ)[None]
    gen = match_generator(table, [0, 1])
    assert gen is not None and gen.kind == "sin" and gen.axes == [1, 0]
    assert evidence_gap(gen, table, rows={0}) is None
    gap = evidence_gap(gen, table, rows=set())
    assert gap is not None and "axis 0 was traced at size 1" in gap


def test_a_table_that_is_no_sinusoid_along_its_positions_stays_a_blocker():
    """The one longer axis must still hold a position table: a sinusoid at different starts
    per column is refused with the batch axis as without it."""
    ang = (np.arange(SEQ, dtype=np.float32))[:, None] * inv_freq(DIM)[None, :]
    table = np.concatenate([np.sin(ang + 0.3), np.cos(ang)], axis=1).astype(np.float32)
    with pytest.raises(PassError, match="follow no pattern"):
        symbolize(joined_with_the_batch(table[None]))


# ------------------------------------------------------------------------------------------------
# a rotary table traced at 2 positions (Moonshine's encoder: 2 frames at the traced length)


def rope(n: int, dim: int, interleave: bool, scale: np.ndarray | None = None):
    """HF's rotary ``cos``, ``sin`` at positions 0 .. n-1 (``dim // 2`` frequencies, each twice:
    ``cat`` halves or ``repeat_interleave``; ``scale`` divides them per frequency)."""
    freq = inv_freq(dim) / (np.float32(1) if scale is None else scale.astype(np.float32))
    ang = np.arange(n, dtype=np.float32)[:, None] * freq[None, :]
    ang = np.repeat(ang, 2, axis=1) if interleave else np.concatenate([ang, ang], axis=1)
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def two_positions(tables: list[np.ndarray]) -> onnx.ModelProto:
    """``x [3, 2, 8]`` (seq traced at 2) times each folded ``[2, 8]`` table, summed."""
    names = [f"t{i}" for i in range(len(tables))]
    body = "\n".join(
        f"      {n} = Constant <value = float[2, 8] {{{floats(t)}}}> ()\n      m{n} = Mul (x, {n})"
        for n, t in zip(names, tables, strict=True)
    )
    total = f"m{names[0]}"
    for n in names[1:]:
        body += f"\n      s{n} = Add ({total}, m{n})"
        total = f"s{n}"
    m = onnx.parser.parse_model(f"""{HEAD}
    g (float[3, 2, 8] x) => (float[3, 2, 8] y) {{
{body}
      y = Identity ({total})
    }}""")
    onnx.checker.check_model(m)
    return m


SEQ_AXES = {"x": {0: "batch", 1: "seq"}}


@pytest.mark.parametrize("interleave", [False, True], ids=["cat", "repeat-interleave"])
def test_a_rotary_pair_at_2_positions_is_pinned_by_its_frequencies(interleave):
    """cos and sin tables at positions 0 and 1 whose frequencies are rotary's geometric
    progression (4 of them): rebuilt as Cos/Sin(Range * freq) and right at lengths never
    traced. Before: refused, '2 point(s) fit a line'."""
    cos, sin = rope(2, DIM, interleave)
    result = symbolize(two_positions([cos, sin]), SEQ_AXES)
    text = "\n".join(d.message for d in result.diagnostics)
    assert "(Cos(Range * freq) on axis 0)" in text and "(Sin(Range * freq) on axis 0)" in text
    rng = np.random.default_rng(4)
    for b, s in [(1, 9), (2, 1), (3, 40)]:
        x = rng.standard_normal((b, s, DIM)).astype(np.float32)
        (y,) = run(result.model, {"x": x})
        c, si = rope(s, DIM, interleave)
        np.testing.assert_allclose(y, x * c + x * si, rtol=1e-4, atol=1e-5)


def test_sin_and_cos_halves_of_one_table_at_2_positions():
    """``[sin | cos]`` in one table (GPT-J's ``sincos`` at position 0 and 1): the twin is the
    other half."""
    ang = np.arange(2, dtype=np.float32)[:, None] * inv_freq(DIM)[None, :]
    table = np.concatenate([np.sin(ang), np.cos(ang)], axis=1).astype(np.float32)
    result = symbolize(two_positions([table]), SEQ_AXES)
    x = np.random.default_rng(5).standard_normal((2, 6, DIM)).astype(np.float32)
    (y,) = run(result.model, {"x": x})
    ang = np.arange(6, dtype=np.float32)[:, None] * inv_freq(DIM)[None, :]
    np.testing.assert_allclose(
        y, x * np.concatenate([np.sin(ang), np.cos(ang)], axis=1), rtol=1e-4, atol=1e-5
    )


def refused_at_2(tables: list[np.ndarray]) -> None:
    with pytest.raises(PassError, match=r"traced at size 2: 2 point\(s\) fit"):
        symbolize(two_positions(tables), SEQ_AXES)


def test_two_frequencies_at_2_positions_are_refused():
    """Moonshine's tiny rotary (2 frequencies): any two numbers are a geometric progression,
    so nothing shows the table is one; refused as before."""
    cos, sin = rope(2, 4, interleave=True)
    refused_at_2([np.tile(cos, (1, 2)), np.tile(sin, (1, 2))])


def test_a_cos_table_alone_at_2_positions_is_refused():
    """Without its sin, a cos at 2 positions shows no angle: refused."""
    cos, _ = rope(2, DIM, interleave=False)
    refused_at_2([cos])


def test_scaled_frequencies_that_are_no_progression_are_refused_at_2_positions():
    """llama3-like scaling (each frequency divided by its own factor): no geometric
    progression, so 2 positions do not pin the table; refused."""
    cos, sin = rope(2, DIM, interleave=False, scale=np.array([1.0, 1.0, 3.0, 8.0]))
    refused_at_2([cos, sin])


def test_a_pair_on_the_unit_circle_but_not_at_position_0_is_refused():
    """Rows at positions 3 and 4 (an offset the trace cannot show): row 0 is no cos 0 / sin 0;
    refused."""
    freq = np.concatenate([inv_freq(DIM)] * 2)
    ang = np.array([3.0, 4.0], dtype=np.float32)[:, None] * freq[None, :]
    refused_at_2([np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)])


def encoder_decoder(enc: list[np.ndarray], dec: list[np.ndarray]) -> onnx.ModelProto:
    """``x [3, 2, 8]`` (seq traced at 2) times each ``enc`` table ``[2, 8]``, summed, and
    ``z [3, 4, 8]`` (tgt traced at 4) times each ``dec`` table ``[4, 8]``, summed."""
    lines, outs = [], []
    for inp, n, tables in (("x", 2, enc), ("z", 4, dec)):
        terms = []
        for i, t in enumerate(tables):
            lines.append(f"{inp}t{i} = Constant <value = float[{n}, 8] {{{floats(t)}}}> ()")
            lines.append(f"{inp}m{i} = Mul ({inp}, {inp}t{i})")
            terms.append(f"{inp}m{i}")
        lines.append(f"{inp}y = Sum ({', '.join(terms)})")
        outs.append(f"{inp}y")
    body = "\n      ".join(lines)
    m = onnx.parser.parse_model(f"""{HEAD}
    g (float[3, 2, 8] x, float[3, 4, 8] z) => (float[3, 2, 8] xy, float[3, 4, 8] zy) {{
      {body}
    }}""")
    onnx.checker.check_model(m)
    return m


ENC_DEC = {"x": {0: "batch", 1: "seq"}, "z": {0: "batch", 1: "tgt"}}


def tiny_rope(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Moonshine's tiny rotary (2 frequencies, interleaved) over a head of 8."""
    cos, sin = rope(n, 4, interleave=True)
    return np.tile(cos, (1, 2)), np.tile(sin, (1, 2))


def test_a_pair_at_2_positions_that_begins_a_longer_pinned_table_takes_its_generator():
    """Moonshine: the encoder's rotary tables traced at 2 frames, the decoder's from the same
    ``inv_freq`` at 4 tokens; the encoder's are bit for bit the decoder's first 2 rows, which
    4 positions pin down. Before: refused ('2 point(s) fit a line'); now rebuilt as the
    decoder's Cos/Sin(Range * freq) and right at other lengths."""
    model = encoder_decoder(list(tiny_rope(2)), list(tiny_rope(4)))
    result = symbolize(model, ENC_DEC)
    text = "\n".join(d.message for d in result.diagnostics)
    assert "float32[2, 8] -> float32[seq, 8] (Cos(Range * freq) on axis 0)" in text
    rng = np.random.default_rng(6)
    for b, s, t in [(1, 7, 3), (2, 1, 9)]:
        x = rng.standard_normal((b, s, DIM)).astype(np.float32)
        z = rng.standard_normal((b, t, DIM)).astype(np.float32)
        xy, zy = run(result.model, {"x": x, "z": z})
        np.testing.assert_allclose(xy, x * sum(tiny_rope(s)), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(zy, z * sum(tiny_rope(t)), rtol=1e-4, atol=1e-5)


def test_a_prefix_of_a_longer_table_that_is_no_sinusoid_is_refused():
    """The longer table begins with the same 2 rows but its later rows are no cos/sin: it pins
    nothing, and the 2-row tables stay refused."""
    cos4, sin4 = tiny_rope(4)
    cos4[2:], sin4[2:] = cos4[2:] * 0.5, sin4[2:] + 0.25
    with pytest.raises(PassError, match=r"traced at size 2: 2 point\(s\) fit"):
        symbolize(encoder_decoder(list(tiny_rope(2)), [cos4, sin4]), ENC_DEC)


@pytest.mark.sweep_rows
def test_modernbert_decoder_with_a_cache_by_dynamo_at_batch_2():
    from sweep_cases import scored_case

    case = scored_case("modernbert-decoder.causal-lm-kv", "dynamo", 2)
    assert case["symbolize"]["status"] == "pass", case["symbolize"]
