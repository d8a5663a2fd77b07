"""Symbols bounded at the traced size (``ids:1=seq<=traced``, issue 30 item 3): a table the
export folded at the traced length (learned positions 0..L-1, a relative-position bias that
depends only on j - i) is right, sliced, at every shorter size. With the bound symbolize slices
it, the check stays within the bound, the bound is recorded in metadata_props and shown by
``inspect``, and a size over it fails on ONNX Runtime naming the bound, never wrong values."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from test_symbolize import parse
from typer.testing import CliRunner

import onnxsurgery
from onnxsurgery.cli import app
from onnxsurgery.errors import PassError, ValidationMismatch
from onnxsurgery.model.bounds import read_bounds
from onnxsurgery.passes.symbolize import Symbolize
from onnxsurgery.passes.symbolize.sizes import check_sizes
from onnxsurgery.pipeline.chain import parse_passes
from onnxsurgery.validation.references import Case, save_case

OPSET = '<ir_version: 8, opset_import: ["" : 17]>'
RNG = np.random.default_rng(0)
CPU = onnxsurgery.PassContext(provider="cpu")
L, D, V, H = 8, 6, 40, 2
EMB = RNG.standard_normal((V, D)).astype(np.float32)
WPE = RNG.standard_normal((L + 2, D)).astype(np.float32)  # learned positions, offset 2 (BART)


def learned_positions() -> onnx.ModelProto:
    """``wte[ids] + wpe[2 + arange(seq)]`` with the position rows folded at the traced seq 8."""
    return parse(
        f"""{OPSET} net (int64[2, {L}] ids) => (float[2, {L}, {D}] y) {{
            e = Gather (wte, ids)
            y = Add (e, pos)
        }}""",
        wte=EMB,
        pos=WPE[2 : 2 + L],
    )


def positions_at(ids: np.ndarray) -> np.ndarray:
    """What torch computes at any length up to the table's."""
    return EMB[ids] + WPE[2 : 2 + ids.shape[1]]


def bias(n: int) -> np.ndarray:
    """A relative-position bias [1, H, n, n]: a learned value per distance j - i (T5's buckets
    collapsed to distances), as torch computes it at length ``n``."""
    per_distance = np.random.default_rng(1).standard_normal((H, 2 * 32 - 1)).astype(np.float32)
    d = np.arange(n)[None, :] - np.arange(n)[:, None]
    return per_distance[:, d + 31][None]


def attention_scores() -> onnx.ModelProto:
    """``softmax(q @ k^T + bias)`` with the bias folded at the traced length 8."""
    return parse(
        f"""{OPSET} net (float[1, {H}, {L}, 4] q, float[1, {H}, {L}, 4] k)
            => (float[1, {H}, {L}, {L}] p) {{
            kt = Transpose <perm = [0, 1, 3, 2]> (k)
            s = MatMul (q, kt)
            b = Add (s, rel)
            p = Softmax <axis = -1> (b)
        }}""",
        rel=bias(L),
    )


def scores_at(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    s = q @ k.transpose(0, 1, 3, 2) + bias(q.shape[2])
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


IDS = {"ids:0": "batch", "ids:1": "seq"}
IDS_BOUND = {"ids:0": "batch", "ids:1": "seq<=traced"}
QK = {"q:2": "seq", "k:2": "seq"}
QK_BOUND = {"q:2": "seq<=traced", "k:2": "seq"}


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_learned_positions_are_refused_without_the_bound_saying_how_to_bound_them():
    with pytest.raises(PassError, match="follow no pattern") as info:
        Symbolize(**IDS)(learned_positions(), CPU)
    assert "bound seq (like seq<=traced in symbolize's axes)" in str(info.value)


def test_learned_positions_sliced_under_the_bound_match_at_every_shorter_size():
    result = Symbolize(**IDS_BOUND)(learned_positions(), CPU)
    assert result.modified and read_bounds(result.model) == {"seq": L}
    run = session(result.model)
    for batch, seq in ((2, L), (3, 5), (1, 2), (2, 7)):
        ids = RNG.integers(0, V, (batch, seq))
        (got,) = run.run(None, {"ids": ids})
        np.testing.assert_allclose(got, positions_at(ids), rtol=1e-6, atol=1e-6)
    # the check ran only within the bound
    assert all(s["seq"] <= L for s in result.report.verification.sizes)


def test_a_size_over_the_bound_fails_on_onnx_runtime_naming_the_bound():
    run = session(Symbolize(**IDS_BOUND)(learned_positions(), CPU).model)
    with pytest.raises(Exception, match=r"seq<=8 \(a size over the bound fails here\)"):
        run.run(None, {"ids": RNG.integers(0, V, (2, L + 1))})


def test_a_relative_position_bias_sliced_under_the_bound_matches_at_every_shorter_size():
    with pytest.raises(PassError, match="depends only on j - i") as info:
        Symbolize(**QK)(attention_scores(), CPU)
    assert "seq<=traced" in str(info.value)
    model = Symbolize(**QK_BOUND)(attention_scores(), CPU).model
    run = session(model)
    for n in (L, 3, 5, 7):
        q, k = (RNG.standard_normal((1, H, n, 4)).astype(np.float32) for _ in range(2))
        (got,) = run.run(None, {"q": q, "k": k})
        np.testing.assert_allclose(got, scores_at(q, k), rtol=1e-5, atol=1e-6)
    big = RNG.standard_normal((1, H, L + 3, 4)).astype(np.float32)
    with pytest.raises(Exception, match=r"seq<=8 \(a size over the bound fails here\)"):
        run.run(None, {"q": big, "k": big})


def test_a_bound_over_the_folded_length_is_refused_naming_what_is_missing():
    with pytest.raises(PassError) as info:
        Symbolize(**{"ids:0": "batch", "ids:1": "seq<=12"})(learned_positions(), CPU)
    text = str(info.value)
    assert "seq<=12 needs 12 entries on axis 0 and it has 8" in text
    assert "at most the traced size (seq<=traced)" in text


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("seq<=4", "under seq's traced size 8"),
        ("seq<=lots", "'traced' or a positive whole number"),
        ("seq<=0", "'traced' or a positive whole number"),
        ("<=8", "the symbol must be a name"),
    ],
)
def test_a_bad_bound_is_a_clear_error(value, words):
    with pytest.raises((PassError, ValueError), match=words):
        Symbolize(**{"ids:0": "batch", "ids:1": value})(learned_positions(), CPU)


def test_two_bounds_of_one_symbol_must_agree():
    with pytest.raises(ValueError, match="seq is bounded twice"):
        Symbolize(**{"q:2": "seq<=traced", "k:2": "seq<=9"})


def test_the_chain_grammar_reads_a_bound():
    (spec,) = parse_passes("symbolize(ids:0=batch, ids:1=seq<=traced, x:2=h <= 64)")
    assert spec.options == {"ids:0": "batch", "ids:1": "seq<=traced", "x:2": "h <= 64"}
    assert parse_passes(str(spec))[0].options == spec.options  # it round-trips


def test_the_check_stays_within_the_bound():
    assert check_sizes({"batch": 2, "seq": 8}, bounds={"seq": 8}) == [
        {"batch": 2, "seq": 8},
        {"batch": 3, "seq": 8},
        {"batch": 4, "seq": 8},
        {"batch": 2, "seq": 7},
        {"batch": 2, "seq": 6},
    ]
    # a bound over the traced size lets the check go over the traced size, never over the bound
    sizes = check_sizes({"seq": 8}, bounds={"seq": 9})
    assert [s["seq"] for s in sizes] == [8, 9, 7]


def test_the_bound_is_in_the_report_metadata_and_inspect(tmp_path):
    src, out, report = tmp_path / "m.onnx", tmp_path / "out.onnx", tmp_path / "r.json"
    onnx.save(learned_positions(), src)
    chain = "symbolize(ids:0=batch, ids:1=seq<=traced)"
    ran = CliRunner().invoke(
        app, ["run", str(src), "-o", str(out), "--passes", chain, "--report", str(report)]
    )
    assert ran.exit_code == 0, ran.output
    saved = onnx.load(out)
    assert {p.key: p.value for p in saved.metadata_props}["onnxsurgery.symbol_bound.seq"] == "8"
    facts = json.loads(report.read_text())["passes"][0]
    assert facts["report"]["bounds"] == {"seq": 8}
    assert any("seq (traced 8, at most 8," in d["message"] for d in facts["diagnostics"])
    shown = CliRunner().invoke(app, ["inspect", str(out)], terminal_width=200)
    assert shown.exit_code == 0, shown.output
    assert "bounds" in shown.output and "seq <= 8 (a larger size fails)" in shown.output
    as_json = CliRunner().invoke(app, ["inspect", str(out), "--json"], terminal_width=200)
    assert '"bounds": {' in as_json.output and '"seq": 8' in as_json.output


def test_reference_cases_over_the_bound_are_left_out_of_the_check(tmp_path):
    refs = tmp_path / "refs"
    for k, (batch, seq) in enumerate(((2, L), (3, 5), (2, L + 4))):
        ids = RNG.integers(0, V, (batch, seq))
        # over the bound the model cannot run: the case is not the model's to match
        y = positions_at(ids) if seq <= L else np.zeros((batch, seq, D), np.float32)
        save_case(Case(f"case{k}", {"ids": ids}, {"y": y}), refs, index=k)
    ctx = onnxsurgery.PassContext(provider="cpu", references=refs)
    result = Symbolize(**IDS_BOUND)(learned_positions(), ctx)
    verification = result.report.verification
    assert verification.levels["seq"] == "references" and verification.reference_cases == 2
    # validate runs every case: the one over the bound does not run, naming the bound
    src = tmp_path / "m.onnx"
    onnx.save(learned_positions(), src)
    chain = "symbolize(ids:0=batch, ids:1=seq<=traced)"
    with pytest.raises(ValidationMismatch) as info:
        onnxsurgery.run(src, chain, output=tmp_path / "out.onnx", references=refs)
    text = str(info.value)
    assert "1 case did not run (test_data_set_2" in text
    assert "input 'ids' axis 1 is seq = 12, over the bound seq<=8 the model records" in text


def conv_heads_bias() -> onnx.ModelProto:
    """WavLM's mechanism: frames computed by a strided Conv from ``samples`` (traced 20 ->
    10), scores per head flattened over ``batch*heads``, plus a j - i bias folded at the traced
    frames and tiled over the batch (one block of 2 heads, repeated per row)."""
    block = bias(10)[0]  # [H, 10, 10]
    return parse(
        f"""{OPSET} net (float[3, 4, 20] x) => (float[6, 10, 10] p) <int64[3] heads = {{6, 2, 10}}> {{
            h = Conv <kernel_shape = [2], strides = [2]> (x, w)
            r = Reshape (h, heads)
            t = Transpose <perm = [0, 2, 1]> (r)
            s = MatMul (t, r)
            b = Add (s, rel)
            p = Softmax <axis = -1> (b)
        }}""",
        w=RNG.standard_normal((4, 4, 2)).astype(np.float32) * 0.3,
        rel=np.concatenate([block, block, block]),
    )


def test_a_bias_over_frames_a_conv_computes_tiled_over_the_batch_is_sliced_and_tiled():
    model = conv_heads_bias()
    axes = {"x:0": "batch", "x:2": "samples"}
    with pytest.raises(PassError, match="depends only on j - i"):
        Symbolize(**axes)(model, CPU)
    rewritten = Symbolize(**{"x:0": "batch", "x:2": "samples<=traced"})(model, CPU).model
    assert read_bounds(rewritten) == {"samples": 20}
    got = session(rewritten)
    w = next(onnx.numpy_helper.to_array(t) for t in model.graph.initializer if t.name == "w")
    for batch, samples in ((3, 20), (2, 14), (1, 9), (4, 19)):
        x = RNG.standard_normal((batch, 4, samples)).astype(np.float32)
        frames = samples // 2
        h = np.einsum("bcfk,ock->bof", x[:, :, : 2 * frames].reshape(batch, 4, frames, 2), w)
        r = h.reshape(batch * H, 2, frames)
        s = r.transpose(0, 2, 1) @ r + np.tile(bias(frames)[0], (batch, 1, 1))
        e = np.exp(s - s.max(-1, keepdims=True))
        (out,) = got.run(None, {"x": x})
        np.testing.assert_allclose(out, e / e.sum(-1, keepdims=True), rtol=1e-4, atol=1e-5)
    with pytest.raises(Exception, match=r"samples<=20 \(a size over the bound fails here\)"):
        got.run(None, {"x": RNG.standard_normal((3, 4, 22)).astype(np.float32)})


def test_a_bound_no_table_needs_is_dropped_with_a_note():
    model = parse(
        f"""{OPSET} net (int64[2, {L}] ids) => (float[2, {L}, {D}] y) {{ y = Gather (wte, ids) }}""",
        wte=EMB,
    )
    result = Symbolize(**IDS_BOUND)(model, CPU)
    assert read_bounds(result.model) == {}
    notes = [d.message for d in result.diagnostics]
    assert any("seq<=8: no table folded at the traced length needs it" in n for n in notes)
    assert any(s["seq"] > L for s in result.report.verification.sizes)  # checked over it too
