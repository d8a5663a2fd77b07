"""symbolize never hands back a wrong model as checked: evidence rules for regenerated constants,
the self-check's value comparisons, per-symbol verification levels, and honest check feeds.

Every oracle here is independent of symbolize: numpy formulas, the original model at its traced
size, or stored outputs the test writes itself.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from test_symbolize import parse

import onnxsurgery
from onnxsurgery.errors import PassError, PassOptionError
from onnxsurgery.passes.symbolize import Symbolize
from onnxsurgery.passes.symbolize.feeds import check_feeds as _feeds
from onnxsurgery.validation.references import Case, save_case
from onnxsurgery.validation.runtime import run_model

CPU = onnxsurgery.PassContext(provider="cpu")
SEQ = {"x:0": "batch", "x:1": "seq"}


def add_table(seq: int, table: np.ndarray) -> onnx.ModelProto:
    """``x + pos`` with ``pos`` a [1, seq, 3] constant (a learned position table cut at seq)."""
    return parse(
        f"""
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[2, {seq}, 3] x) => (float[2, {seq}, 3] y) {{ y = Add (x, pos) }}
        """,
        pos=table.astype(np.float32),
    )


# -- evidence rules ------------------------------------------------------------------------------


@pytest.mark.parametrize("seq", [1, 2])
def test_learned_table_traced_at_one_or_two_is_refused_naming_the_constant(seq):
    table = np.random.default_rng(seq).standard_normal((1, seq, 3))
    with pytest.raises(PassError, match="1 blocker") as info:
        Symbolize(**SEQ)(add_table(seq, table), CPU)
    text = str(info.value)
    assert "'pos'" in text and "Add" in text
    assert ("one point cannot tell" if seq == 1 else "2 point(s) fit a line") in text


@pytest.mark.parametrize("seq", [3, 4])
def test_learned_table_traced_longer_is_refused_as_before(seq):
    table = np.random.default_rng(seq).standard_normal((1, seq, 3))
    with pytest.raises(PassError, match="follow no pattern"):
        Symbolize(**SEQ)(add_table(seq, table), CPU)


def test_a_real_range_traced_at_three_is_extended_correctly():
    steps = np.array([0.5, -1.0, 2.0])
    table = 1.0 + np.arange(3)[None, :, None] * steps  # [1, 3, 3]: 1 + i * step
    model = Symbolize(**SEQ)(add_table(3, table), CPU).model
    x = np.random.default_rng(0).standard_normal((2, 7, 3)).astype(np.float32)
    want = x + (1.0 + np.arange(7)[None, :, None] * steps).astype(np.float32)
    np.testing.assert_allclose(run_model(model, {"x": x}, "cpu")["y"], want, rtol=1e-5, atol=1e-5)
    # The same line traced at 2 points is refused: two points fit any line.
    with pytest.raises(PassError, match="2 point"):
        Symbolize(**SEQ)(add_table(2, table[:, :2]), CPU)


def test_rotary_table_needs_three_points():
    freq = np.array([1.0, 0.1, 0.01])
    for seq, ok in ((2, False), (6, True)):
        model = add_table(seq, np.cos(np.arange(seq)[None, :, None] * freq))
        if not ok:
            with pytest.raises(PassError, match="do not pin that down"):
                Symbolize(**SEQ)(model, CPU)
            continue
        out = Symbolize(**SEQ)(model, CPU).model
        x = np.zeros((2, 9, 3), np.float32)
        want = np.broadcast_to(np.cos(np.arange(9)[None, :, None] * freq), (2, 9, 3))
        np.testing.assert_allclose(run_model(out, {"x": x}, "cpu")["y"], want, atol=1e-5)


def causal(seq: int) -> onnx.ModelProto:
    """Attention scores plus a causal mask [seq, seq] folded at the traced length."""
    mask = np.triu(np.full((seq, seq), -1e9, np.float32), 1)
    return parse(
        f"""
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[2, {seq}, {seq}] x) => (float[2, {seq}, {seq}] y) {{
            s = Add (x, mask)
            y = Softmax <axis = -1> (s)
        }}
        """,
        mask=mask,
    )


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_causal_mask_follows_the_length_it_is_run_at():
    axes = {"x:0": "batch", "x:1": "seq", "x:2": "seq"}
    model = Symbolize(**axes)(causal(4), CPU).model
    for n in (3, 7):  # every row sees exactly the positions up to itself, at any length
        x = np.random.default_rng(n).standard_normal((2, n, n)).astype(np.float32)
        want = softmax(x + np.triu(np.full((n, n), -1e9, np.float32), 1))
        np.testing.assert_allclose(run_model(model, {"x": x}, "cpu")["y"], want, atol=1e-6)
    with pytest.raises(PassError, match="do not pin that down"):
        Symbolize(**axes)(causal(2), CPU)


def test_batch_traced_at_one_may_repeat_its_row():
    """One traced row is enough along a batch (rows are independent by structure), and only
    there: the same constant on an axis not shown to be a batch is refused."""
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[1, 4] x) => (float[1, 7] y) { y = Concat <axis = 1> (x, state) }
        """,
        state=np.array([[1.0, 2.0, 3.0]], np.float32),
    )
    result = Symbolize()(model, CPU)
    assert result.report.rows == {"batch"}
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    want = np.concatenate([x, np.tile([[1.0, 2.0, 3.0]], (3, 1))], axis=1).astype(np.float32)
    np.testing.assert_array_equal(run_model(result.model, {"x": x}, "cpu")["y"], want)
    with pytest.raises(PassError, match="one point cannot tell"):
        Symbolize(rows="")(model, CPU)


# -- the self-check compares values ---------------------------------------------------------------


@pytest.fixture
def gemm_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    return parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[4, 6] x) => (float[4, 5] y) <int64[2] shape = {4, -1}> {
            r = Reshape (x, shape)
            y = Gemm <transB = 1> (r, w, b)
        }
        """,
        w=rng.standard_normal((5, 6)).astype(np.float32),
        b=np.zeros(5, np.float32),
    )


def test_check_catches_a_small_change_at_the_traced_size(gemm_model, monkeypatch):
    """A rewrite that moves outputs by 5e-5 (above the 1e-5 tolerance) fails the check."""
    import onnxsurgery.passes.symbolize as module

    real = module.apply_plan

    def nudged(model, plan):
        out = real(model, plan)
        for init in out.graph.initializer:
            if init.name == "b":
                init.CopyFrom(onnx.numpy_helper.from_array(np.full(5, 5e-5, np.float32), "b"))
        return out

    monkeypatch.setattr(module, "apply_plan", nudged)
    with pytest.raises(PassError, match="at the traced size batch=4: output 'y' differs"):
        Symbolize()(gemm_model, CPU)


def references(tmp_path, model: onnx.ModelProto, batches, wrong: bool = False):
    """Cases at ``batches`` whose outputs come from ``model``'s formula in numpy."""
    w = onnx.numpy_helper.to_array(model.graph.initializer[1])
    folder = tmp_path / "refs"
    for k, n in enumerate(batches):
        x = np.random.default_rng(k).standard_normal((n, 6)).astype(np.float32)
        y = x @ w.T + (1.0 if wrong and n != 4 else 0.0)
        save_case(Case(f"case{k}", {"x": x}, {"y": y.astype(np.float32)}), folder, index=k)
    return folder


def levels(report) -> dict[str, str]:
    return {s: v["level"] for s, v in report.to_dict()["verification"]["levels"].items()}


def test_levels_rows_without_references_and_references_with_them(gemm_model, tmp_path):
    plain = Symbolize()(gemm_model, CPU)
    assert levels(plain.report) == {"batch": "rows"}
    hint = [d.message for d in plain.diagnostics if d.level == "warning"]
    assert len(hint) == 1 and "batch: rows" in hint[0] and "onnxsurgery reference record" in hint[0]

    ctx = onnxsurgery.PassContext(provider="cpu", references=references(tmp_path, gemm_model, (4, 2, 7)))
    checked = Symbolize(verify="references")(gemm_model, ctx)
    assert levels(checked.report) == {"batch": "references"}
    oracle = checked.report.to_dict()["verification"]["levels"]["batch"]["oracle"]
    assert "batch=2" in oracle and "batch=7" in oracle
    assert not [d for d in checked.diagnostics if d.level == "warning"]


def test_references_hold_the_rewrite_to_the_exports_own_error(gemm_model, tmp_path):
    """Stored outputs 3e-4 off everywhere (the export's own error at the traced size) are not
    the rewrite's fault; 3e-4 off only at other sizes is."""
    folder = references(tmp_path, gemm_model, (4, 2, 7))
    for k in range(3):
        path = folder / f"test_data_set_{k}" / "output_0.pb"
        arr = onnx.numpy_helper.to_array(onnx.load_tensor(str(path)))
        onnx.save_tensor(onnx.numpy_helper.from_array(arr + 3e-4, "y"), str(path))
    ctx = onnxsurgery.PassContext(provider="cpu", references=folder)
    assert levels(Symbolize()(gemm_model, ctx).report) == {"batch": "references"}
    path = folder / "test_data_set_0" / "output_0.pb"
    arr = onnx.numpy_helper.to_array(onnx.load_tensor(str(path)))
    onnx.save_tensor(onnx.numpy_helper.from_array(arr - 3e-4, "y"), str(path))
    with pytest.raises(PassError, match="does not match the stored torch outputs"):
        Symbolize()(gemm_model, ctx)


def test_references_that_disagree_fail_the_check(gemm_model, tmp_path):
    ctx = onnxsurgery.PassContext(
        provider="cpu", references=references(tmp_path, gemm_model, (4, 2), wrong=True)
    )
    with pytest.raises(PassError, match="does not match the stored torch outputs"):
        Symbolize()(gemm_model, ctx)


def test_verify_makes_a_lower_level_an_error(gemm_model):
    with pytest.raises(PassError, match=r"verify=references: batch to rows only.*--ref"):
        Symbolize(verify="references")(gemm_model, CPU)
    assert Symbolize(verify="rows")(gemm_model, CPU).modified
    with pytest.raises(PassOptionError, match="needs the check"):
        Symbolize.from_options({"check": False, "verify": "runs"})
    result = Symbolize(check=False)(gemm_model, CPU)
    assert levels(result.report) == {"batch": "traced-only"}


@pytest.mark.parametrize(
    ("options", "message"),
    [({"verify": "all"}, "verify must be one of"), ({"rows": "not a name"}, "rows must name")],
)
def test_bad_verify_and_rows_options(options, message):
    with pytest.raises(PassOptionError, match=message):
        Symbolize.from_options(options)


def test_levels_reach_the_json_report(gemm_model, tmp_path):
    src = tmp_path / "m.onnx"
    onnx.save(gemm_model, src)
    report = onnxsurgery.run(src, passes="symbolize", provider="cpu")
    data = json.loads(json.dumps(report.to_dict(), default=str))
    sym = data["passes"][0]["report"]["verification"]["levels"]
    assert sym == {
        "batch": {
            "level": "rows",
            "oracle": "each row equals a run of that row alone; the first 4 rows of a larger "
            "batch equal the original model",
        }
    }


def test_strict_false_keeps_a_blocked_symbol_traced_only():
    table = np.random.default_rng(0).standard_normal((1, 4, 3))
    result = Symbolize(strict=False, **SEQ)(add_table(4, table), CPU)
    assert levels(result.report) == {"batch": "rows", "seq": "traced-only"}


# -- batch-like symbols come from the graph, never from names --------------------------------------


def test_rows_are_found_by_structure_not_by_name():
    rng = np.random.default_rng(0)
    gru = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[5, 3, 3] x) => (float[1, 3, 4] h) { y, h = GRU <hidden_size = 4> (x, w, r) }
        """,
        w=rng.standard_normal((1, 12, 3)).astype(np.float32),
        r=rng.standard_normal((1, 12, 4)).astype(np.float32),
    )
    # Axis 0 of x is the GRU's time axis: rows there are not independent, whatever its name.
    plan = Symbolize(**{"x:0": "batch", "x:1": "n"}).preview(gru)
    assert plan.rows == set()
    plain = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[3, 4] x) => (float[3, 4] y) { y = Relu (x) }
        """
    )
    assert Symbolize(**{"x:0": "n"}).preview(plain).rows == {"n"}
    assert Symbolize(**{"x:0": "n", "x:1": "m"}, rows="m").preview(plain).rows == {"m"}


# -- feeds ---------------------------------------------------------------------------------------


def test_ids_cover_the_vocabulary_and_initializer_inputs_are_not_fed():
    model = parse(
        """
        <ir_version: 3, opset_import: ["" : 11]>
        net (int64[1, 6] ids, float[50, 4] emb) => (float[1, 6, 4] y) {
            y = Gather <axis = 0> (emb, ids)
        }
        """,
        emb=np.random.default_rng(0).standard_normal((50, 4)).astype(np.float32),
    )
    axes = {"ids": {0: "batch", 1: "seq"}}
    feeds = _feeds(model, axes, {"batch": 1, "seq": 6}, 0)
    assert set(feeds) == {"ids"}  # emb is an initializer listed as an input (IR 3)
    big = _feeds(model, axes, {"batch": 40, "seq": 6}, 0)["ids"]
    assert big.max() >= 10 and big.min() >= 0 and big.max() < 50  # not [0, 1) at batch 1


def test_strings_and_bools_get_valid_values():
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (string[2] s, bool[2, 3] m) => (bool[2, 3] y) { y = Not (m) }
        """
    )
    feeds = _feeds(model, {"m": {0: "batch"}, "s": {0: "batch"}}, {"batch": 3}, 0)
    assert feeds["s"].shape == (3,) and all(isinstance(v, str) for v in feeds["s"])
    assert feeds["m"].dtype == np.bool_ and feeds["m"].shape == (3, 3)


def test_first_rows_of_a_larger_batch_must_equal_the_original(gemm_model, monkeypatch):
    """A rewrite that is self-consistent row by row but wrong everywhere (every row shifted by
    the same amount) passes the row test; the original model at the traced batch catches it."""
    import onnxsurgery.passes.symbolize.check as check_module

    real = check_module.run_many

    def shifted(session, jobs, workers=None):  # the rewritten model runs shifted off batch 4
        outs = real(session, jobs, workers)
        return [
            {k: v + 1.0 for k, v in out.items()}
            if not isinstance(out, Exception) and next(iter(feeds.values())).shape[0] != 4
            else out
            for feeds, out in zip(jobs, outs, strict=True)
        ]

    monkeypatch.setattr(check_module, "run_many", shifted)
    with pytest.raises(PassError, match="first 4 batch rows of output 'y' differ from the original"):
        Symbolize()(gemm_model, CPU)


def test_an_input_read_as_a_size_is_never_made_up(tmp_path):
    """An int64 input that is an Expand target gets ones (valid), one that is a Reshape shape
    comes from the references at that size, or the check says it cannot run."""
    expand = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[2, 3] x, int64[2] shape) => (float[2, 3] y) { y = Expand (x, shape) }
        """
    )
    feeds = _feeds(expand, {"x": {0: "batch"}}, {"batch": 5}, 0)
    assert feeds["shape"].tolist() == [1, 1]
    assert Symbolize(**{"x:0": "batch"})(expand, CPU).modified
    reshape = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[2, 6] x, int64[3] shape) => (float[2, 2, 3] y) { y = Reshape (x, shape) }
        """
    )
    with pytest.raises(PassError, match="input 'shape' is read as a size .* Reshape") as info:
        Symbolize(**{"x:0": "batch"})(reshape, CPU)
    assert info.value.node == "y"
    cases = [
        Case(f"b{b}", {"x": np.ones((b, 6), np.float32), "shape": np.array([b, 2, 3])},
             {"y": np.ones((b, 2, 3), np.float32)})
        for b in (2, 1, 3, 4)
    ]  # fmt: skip
    folder = tmp_path / "refs"
    for k, case in enumerate(cases):
        save_case(case, folder, index=k)
    ctx = onnxsurgery.PassContext(provider="cpu", references=folder)
    result = Symbolize(**{"x:0": "batch"}, verify="references")(reshape, ctx)
    assert levels(result.report) == {"batch": "references"}


def test_a_causal_prefix_is_reported_as_matching_the_original():
    """Without references, seq stays at ``runs``; for a causal model the first traced-many
    positions of a longer run equal the original, and the oracle says so; a bidirectional one
    claims nothing."""
    axes = {"x:0": "batch", "x:1": "seq", "x:2": "seq"}
    result = Symbolize(**axes)(causal(4), CPU)
    seq = result.report.to_dict()["verification"]["levels"]["seq"]
    # seq sizes two axes of the output: no single axis to cut a prefix along, so none is claimed.
    assert seq["level"] == "runs" and "prefix" not in seq["oracle"]
    cumulative = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[2, 4] x) => (float[2, 4] y) <int64 axis = {1}> { y = CumSum (x, axis) }
        """
    )
    seq = Symbolize(**{"x:0": "batch", "x:1": "seq"})(cumulative, CPU).report.to_dict()
    assert "first 4 positions, which equal the original" in seq["verification"]["levels"]["seq"]["oracle"]

    bidirectional = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[2, 4] x) => (float[2, 4] y) { y = Softmax <axis = 1> (x) }
        """
    )
    seq = Symbolize(**{"x:0": "batch", "x:1": "seq"})(bidirectional, CPU).report.to_dict()
    assert seq["verification"]["levels"]["seq"]["oracle"].endswith("values unverified")


def test_two_names_for_one_traced_size_stay_a_conflict():
    """``seq == tgt`` required by the graph is not taken as a relation: both traced at 4, which
    of them a constant stands for would be a guess."""
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[2, 4] a, float[2, 4] b) => (float[2, 4] y) { y = Add (a, b) }
        """
    )
    with pytest.raises(PassError, match="needs seq == tgt|needs tgt == seq"):
        Symbolize(**{"a:0": "batch", "b:0": "batch", "a:1": "seq", "b:1": "tgt"})(model, CPU)


def tiled(n: int) -> onnx.ModelProto:
    """``x.reshape(2, n*3) + bias`` with a per-block bias [1, n*3] repeating one block of 3."""
    return parse(
        f"""
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[2, {n}, 3] x) => (float[2, {3 * n}] y) <int64[2] shape = {{2, {3 * n}}}> {{
            r = Reshape (x, shape)
            y = Add (r, bias)
        }}
        """,
        bias=np.tile(np.array([[0.5, -2.0, 1.0]], np.float32), (1, n)),
    )


def test_a_repeated_block_needs_two_copies_off_the_batch():
    axes = {"x:0": "batch", "x:1": "n"}
    with pytest.raises(PassError, match="holds one block of 3: one copy does not show"):
        Symbolize(**axes)(tiled(1), CPU)
    out = Symbolize(**axes)(tiled(2), CPU).model
    x = np.random.default_rng(0).standard_normal((4, 5, 3)).astype(np.float32)
    want = x.reshape(4, 15) + np.tile([0.5, -2.0, 1.0], 5).astype(np.float32)
    np.testing.assert_allclose(run_model(out, {"x": x}, "cpu")["y"], want, atol=1e-6)


def test_a_gemm_contracting_over_a_symbol_is_no_batch():
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[3, 4] x) => (float[5, 4] y) { y = Gemm <transA = 1> (w, x) }
        """,
        w=np.ones((3, 5), np.float32),
    )
    assert Symbolize(**{"x:0": "n"}).preview(model).rows == set()


# -- the command line ----------------------------------------------------------------------------


def test_cli_says_in_one_line_how_to_verify_and_verify_refuses_with_exit_2(gemm_model, tmp_path):
    from typer.testing import CliRunner

    from onnxsurgery.cli import app

    src = tmp_path / "m.onnx"
    onnx.save(gemm_model, src)

    def invoke(*args):
        return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "300"})

    ok = invoke("run", src, "-o", tmp_path / "o.onnx", "--passes", "symbolize", "--provider", "cpu",
                "--report", tmp_path / "r.json")  # fmt: skip
    assert ok.exit_code == 0, ok.stdout
    hints = [line for line in ok.stdout.splitlines() if "symbolize warning" in line]
    assert len(hints) == 1 and "--ref" in hints[0] and "reference record" in hints[0]
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["passes"][0]["report"]["verification"]["levels"]["batch"]["level"] == "rows"
    strict = invoke("run", src, "-o", tmp_path / "v.onnx", "--passes",
                    "symbolize(verify=references)", "--provider", "cpu")  # fmt: skip
    assert strict.exit_code == 2 and "verify=references: batch to rows only" in strict.output
    assert not (tmp_path / "v.onnx").exists()


def test_rows_claimed_for_a_mixing_symbol_are_refuted_on_the_original():
    """``rows=n`` on an axis a Softmax mixes: the original model at its traced size shows a new
    row 0 changing the others, and the check says n is no batch."""
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[3, 4] x) => (float[3, 4] y) { y = Softmax <axis = 0> (x) }
        """
    )
    with pytest.raises(PassError, match="n's rows are not independent, so it is no batch"):
        Symbolize(**{"x:0": "n"}, rows="n")(model, CPU)
    assert Symbolize(**{"x:0": "n"}).preview(model).rows == set()  # the graph shows it
    assert levels(Symbolize(**{"x:0": "n"}, rows="")(model, CPU).report) == {"n": "runs"}
