"""The symbolize pass: options, rewriting, blockers, the ORT check, the preview for inspect."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import onnxsurgery
from onnxsurgery.errors import PassError, PassOptionError
from onnxsurgery.passes.symbolize import Symbolize
from onnxsurgery.passes.symbolize.plan import SymbolizePlan, plan_symbolize
from onnxsurgery.pipeline.contract import Pass
from onnxsurgery.pipeline.registry import get_pass
from onnxsurgery.validation.runtime import run_model


def parse(text: str, **inits: np.ndarray) -> onnx.ModelProto:
    model = onnx.parser.parse_model(text)
    for name, arr in inits.items():
        model.graph.initializer.append(onnx.numpy_helper.from_array(arr, name))
    onnx.checker.check_model(model)
    return model


RNG = np.random.default_rng(0)


@pytest.fixture
def view_model() -> onnx.ModelProto:
    """Conv, then ``x.view(4, -1)`` with the traced batch baked in, then a Linear layer."""
    return parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[4, 3, 8, 8] x) => (float[4, 5] y) <int64[2] shape = {4, -1}> {
            c = Conv <kernel_shape = [3, 3], pads = [1, 1, 1, 1]> (x, w)
            p = MaxPool <kernel_shape = [2, 2], strides = [2, 2]> (c)
            r = Reshape (p, shape)
            y = Gemm <transB = 1> (r, fc, bias)
        }
        """,
        w=RNG.standard_normal((2, 3, 3, 3)).astype(np.float32),
        fc=RNG.standard_normal((5, 32)).astype(np.float32),
        bias=RNG.standard_normal(5).astype(np.float32),
    )


def dims(vi: onnx.ValueInfoProto) -> list[str | int]:
    return [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]


def feeds(batch: int) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(batch).standard_normal((batch, 3, 8, 8)).astype(np.float32)}


# -- options -------------------------------------------------------------------------------------


def test_registered_and_documented():
    cls = get_pass("symbolize")
    assert cls is Symbolize and issubclass(cls, Pass)
    assert Symbolize.summary().startswith("Give input axes symbolic names")


def test_option_forms():
    assert Symbolize().wildcard == {0: "batch"}
    p = Symbolize(**{"x:0": "batch", "x:1": "seq", "*:2": "width"})
    assert p.explicit == {"x": {0: "batch", 1: "seq"}} and p.wildcard == {2: "width"}
    assert Symbolize(dynamic_axes={"x": [0, 2]}).explicit == {"x": {0: "batch", 2: "x_dim2"}}
    assert Symbolize(dynamic_axes={"mask": {"1": "seq"}}).explicit == {"mask": {1: "seq"}}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"x0": "batch"}, "not INPUT:AXIS"),
        ({"x:a": "batch"}, "not INPUT:AXIS"),
        ({"x:0": "not a name"}, "must be a name"),
        ({"strict": "yes"}, "strict must be true or false"),
        ({"dynamic_axes": {"x": {"zero": "batch"}}}, "is not an int"),
        ({"dynamic_axes": ["x"]}, "must be a mapping"),
    ],
)
def test_bad_options_are_option_errors(options, message):
    with pytest.raises(PassOptionError, match=message):
        Symbolize.from_options(options)


def test_unknown_input_names_the_inputs(view_model):
    with pytest.raises(PassError, match=r"no graph input 'nope'; the model's inputs are x"):
        Symbolize(**{"nope:0": "batch"})(view_model)


def test_one_name_for_axes_of_different_sizes_is_an_error():
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[2, 3] a, float[4, 3] b) => (float[2, 3] y) { y = Identity (a) }
        """
    )
    with pytest.raises(PassError, match=r"a:0 \(traced size 2\) and to b:0 \(traced size 4\)"):
        Symbolize()(model)


# -- rewriting -----------------------------------------------------------------------------------


def test_view_with_traced_batch_runs_at_other_batches(view_model):
    # The baseline: naming the axis alone breaks at batch 2 inside Gemm.
    relaxed = onnx.ModelProto()
    relaxed.CopyFrom(view_model)
    relaxed.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    relaxed.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    with pytest.raises(Exception, match="Gemm|GEMM|Reshape"):
        run_model(relaxed, feeds(2), "cpu")

    result = Symbolize()(view_model, onnxsurgery.PassContext(provider="cpu"))
    assert result.modified
    model = result.model
    assert dims(model.graph.input[0]) == ["batch", 3, 8, 8]
    assert dims(model.graph.output[0]) == ["batch", 5]
    reshape = next(n for n in model.graph.node if n.op_type == "Reshape")
    shape = next(i for i in model.graph.initializer if i.name == reshape.input[1])
    assert onnx.numpy_helper.to_array(shape).tolist() == [0, -1]  # the simplest correct form
    x7 = feeds(7)["x"]
    for batch in (1, 2, 7):
        out = run_model(model, {"x": x7[:batch]}, "cpu")["y"]
        assert out.shape == (batch, 5)
        # The oracle is the original model at its traced batch 4: rows it can run (zero rows
        # pad the batch; rows are independent) must agree.
        padded = np.zeros((4, 3, 8, 8), np.float32)
        padded[: min(batch, 4)] = x7[: min(batch, 4)]
        ref = run_model(view_model, {"x": padded}, "cpu")["y"]
        np.testing.assert_allclose(out[:4], ref[: min(batch, 4)], atol=1e-5, rtol=1e-5)
    tail = run_model(view_model, {"x": x7[3:7]}, "cpu")["y"]
    np.testing.assert_allclose(run_model(model, {"x": x7}, "cpu")["y"][3:], tail, atol=1e-5)
    # Batch rows are independent: row 0 of a batch-7 run equals a batch-1 run of that row.
    one = run_model(model, {"x": x7[:1]}, "cpu")["y"]
    seven = run_model(model, {"x": x7}, "cpu")["y"]
    assert np.allclose(one[0], seven[0], atol=1e-5)
    assert any("check: ran at batch=4" in d.message for d in result.diagnostics)


def test_output_is_byte_identical_run_to_run(view_model):
    a = Symbolize(check=False)(view_model).model.SerializeToString()
    b = Symbolize(check=False)(view_model).model.SerializeToString()
    assert a == b


def test_zero_initial_state_and_expand_become_batch_sized():
    """A GRU whose zero state [1, B, 4] is a constant: rebuilt as [1, 1, 4] + Expand."""
    hidden, feat = 4, 3
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[5, 3, 3] x) => (float[1, 3, 4] h) {
            y, h = GRU <hidden_size = 4> (x, w, r, b, , h0)
        }
        """,
        w=RNG.standard_normal((1, 3 * hidden, feat)).astype(np.float32),
        r=RNG.standard_normal((1, 3 * hidden, hidden)).astype(np.float32),
        b=RNG.standard_normal((1, 6 * hidden)).astype(np.float32),
        h0=np.zeros((1, 3, hidden), np.float32),
    )
    result = Symbolize(**{"x:0": "seq", "x:1": "batch"})(
        model, onnxsurgery.PassContext(provider="cpu")
    )
    out = result.model
    assert dims(out.graph.output[0]) == [1, "batch", 4]
    assert "Expand" in {n.op_type for n in out.graph.node}
    x = np.random.default_rng(1).standard_normal((6, 2, 3)).astype(np.float32)
    assert run_model(out, {"x": x}, "cpu")["h"].shape == (1, 2, 4)


def test_traced_batch_one_mask_that_broadcasts_is_left_alone():
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[1, 4, 4] x) => (float[1, 4, 4] y) {
            y = Add (x, mask)
        }
        """,
        mask=np.triu(np.full((1, 4, 4), -1e9, np.float32), 1),
    )
    result = Symbolize()(model, onnxsurgery.PassContext(provider="cpu"))
    assert result.modified  # the input axis is named
    assert not result.report.changes  # but the [1, 4, 4] mask only broadcasts over the batch
    assert dims(result.model.graph.output[0]) == ["batch", 4, 4]


def test_already_dynamic_model_is_not_modified():
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[batch, 4] x) => (float[batch, 4] y) { y = Relu (x) }
        """
    )
    result = Symbolize()(model)
    assert not result.modified
    assert result.model is model


def test_runs_through_the_pipeline_from_chain_text(view_model, tmp_path):
    src = tmp_path / "m.onnx"
    onnx.save(view_model, src)
    out = tmp_path / "m.dyn.onnx"
    report = onnxsurgery.run(src, passes="symbolize(x:0=batch)", output=out, provider="cpu")
    assert report.passes[0].modified
    saved = onnx.load(out)
    assert dims(saved.graph.input[0])[0] == "batch"
    assert run_model(saved, feeds(3), "cpu")["y"].shape == (3, 5)


# -- blockers ------------------------------------------------------------------------------------


@pytest.fixture
def table_model() -> onnx.ModelProto:
    """A learned positional table already cut to the traced length 4."""
    return parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[2, 4, 3] x) => (float[2, 4, 3] y) {
            y = Add (x, pos)
        }
        """,
        pos=RNG.standard_normal((1, 4, 3)).astype(np.float32),
    )


def test_table_cut_to_the_traced_length_is_a_blocker(table_model):
    with pytest.raises(PassError) as info:
        Symbolize(**{"x:0": "batch", "x:1": "seq"})(table_model)
    text = str(info.value)
    assert "1 blocker(s)" in text and "'pos'" in text and "seq" in text
    assert "re-export" in text and "x:1" in text
    assert info.value.node == ""  # the Add has no name; the message names the input instead


def test_strict_false_applies_the_rest_and_reports(table_model):
    result = Symbolize(strict=False, **{"x:0": "batch", "x:1": "seq"})(
        table_model, onnxsurgery.PassContext(provider="cpu")
    )
    assert result.modified
    blockers = [d for d in result.diagnostics if d.level == "blocker"]
    assert len(blockers) == 1 and "pos" in blockers[0].message
    # Batch alone is fine for the same model.
    assert Symbolize(**{"x:0": "batch"})(table_model).modified


def test_unrolled_loop_is_a_blocker():
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[2, 5, 3] x) => (float[2, 8, 3] y) {
            a = Concat <axis = 1> (x, pad)
            b = Concat <axis = 1> (a, pad)
            y = Concat <axis = 1> (b, pad)
        }
        """,
        pad=np.zeros((2, 1, 3), np.float32),
    )
    with pytest.raises(PassError, match="loop unrolled at trace time: 3 identical Concat"):
        Symbolize(**{"x:0": "batch", "x:1": "seq"})(model)
    out = Symbolize(**{"x:0": "batch"})(model, onnxsurgery.PassContext(provider="cpu")).model
    y = run_model(out, {"x": np.ones((3, 5, 3), np.float32)}, "cpu")["y"]
    assert y.shape == (3, 8, 3) and y[:, 5:].sum() == 0


def test_blocker_names_the_symbol_that_cannot_vary():
    # seq reaches a weight through a flattening Reshape: only batch can vary.
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[2, 4, 3] x) => (float[2, 5] y) <int64[2] shape = {2, 12}> {
            r = Reshape (x, shape)
            y = Gemm <transB = 1> (r, w)
        }
        """,
        w=RNG.standard_normal((5, 12)).astype(np.float32),
    )
    with pytest.raises(PassError, match="Reshape keeps the element count: needs 4 == seq") as info:
        Symbolize(**{"x:0": "batch", "x:1": "seq"})(model)
    assert "leave x:1 out of the symbolized axes" in str(info.value)
    # strict=False: applied, reported, and checked over batch only (seq stays at its traced size)
    result = Symbolize(strict=False, **{"x:0": "batch", "x:1": "seq"})(
        model, onnxsurgery.PassContext(provider="cpu")
    )
    check = next(d.message for d in result.diagnostics if d.message.startswith("check:"))
    assert "batch=3, seq=4" in check and "seq=5" not in check


def test_a_failed_check_names_the_node(view_model, monkeypatch):
    import onnxsurgery.passes.symbolize as module

    real = module.apply_plan

    def broken(model, plan):  # undo the Reshape fix: the check must catch it at another batch
        out = real(model, plan)
        node = next(n for n in out.graph.node if n.op_type == "Reshape")
        node.input[1] = "stale_shape"
        next(n for n in out.graph.node if n.op_type == "Gemm").name = "fc"
        out.graph.initializer.append(
            onnx.numpy_helper.from_array(np.array([4, -1], np.int64), "stale_shape")
        )
        return out

    monkeypatch.setattr(module, "apply_plan", broken)
    with pytest.raises(PassError, match="check at batch=5: ONNX Runtime failed") as info:
        Symbolize()(view_model, onnxsurgery.PassContext(provider="cpu"))
    assert info.value.node == "fc"  # [4, 40] reaches the Gemm: that is the node that breaks
    assert "Gemm" in str(info.value)


# -- the preview for inspect ---------------------------------------------------------------------


def test_plan_preview_lists_changes_without_editing(view_model):
    before = view_model.SerializeToString()
    plan = plan_symbolize(view_model, {"x": {0: "batch"}})
    assert isinstance(plan, SymbolizePlan) and plan.ok
    assert view_model.SerializeToString() == before
    (change,) = plan.changes
    assert (change.op, change.old, change.new) == ("Reshape", "[4, -1]", "[batch, -1]")
    data = plan.to_dict()
    assert data["symbols"] == {"batch": 4} and data["outputs"] == {"y": ["batch", 5]}
    assert data["changes"][0]["node"] == change.node

    from rich.console import Console

    console = Console(record=True, width=120)
    console.print(plan)
    text = console.export_text()
    assert "would change" in text and "[batch, -1]" in text


def test_plan_preview_lists_blockers(table_model):
    plan = plan_symbolize(table_model, {"x": [0, 1]})
    assert not plan.ok
    assert plan.to_dict()["blockers"][0]["input"] == "pos"


# -- batch traced at 1 ---------------------------------------------------------------------------


@pytest.fixture
def mask_index_model() -> onnx.ModelProto:
    """HF-style ``mask[batch_idx, pos]`` gathered with an index grid folded at batch 1."""
    grid = np.stack([np.zeros(4, np.int64), np.arange(4)], axis=-1)[None]  # [1, 4, 2]: (b=0, pos)
    return parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[1, 4, 2] x, int64[1, 4] mask) => (float[1, 4, 2] y) <int64[1] last = {-1}> {
            g = GatherND (mask, grid)
            f = Cast <to = 1> (g)
            u = Unsqueeze (f, last)
            y = Mul (x, u)
        }
        """,
        grid=grid,
    )


def test_index_grid_traced_at_batch_one_enumerates_the_batch(mask_index_model):
    result = Symbolize()(mask_index_model, onnxsurgery.PassContext(provider="cpu"))
    (change,) = result.report.changes
    assert change.new == "int64[batch, 4, 2] (Range on axis 0)"
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4, 2)).astype(np.float32)
    mask = rng.integers(0, 2, (3, 4)).astype(np.int64)
    y = run_model(result.model, {"x": x, "mask": mask}, "cpu")["y"]
    np.testing.assert_allclose(y, x * mask[..., None])  # row b reads mask row b
    assert any("batch rows independent" in d.message for d in result.diagnostics)


def test_check_catches_rows_that_read_one_batch_row(mask_index_model, monkeypatch):
    import onnxsurgery.passes.symbolize.plan as plan_module

    monkeypatch.setattr(plan_module, "find_batch_indices", lambda *args: [])
    with pytest.raises(PassError, match=r"batch rows are not independent: row \d of output 'y'"):
        Symbolize()(mask_index_model, onnxsurgery.PassContext(provider="cpu"))


def _one_op_model(nodes, consts, shape=(2, 4)) -> onnx.ModelProto:
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))],
        [numpy_helper.from_array(np.asarray(v, np.int64), k) for k, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model


def test_check_catches_a_larger_batch_whose_first_rows_are_not_the_originals():
    """Rows agree with each other at every batch but the traced one (y = x only at batch 2,
    else -x): only the original model on the first rows of a larger batch tells."""
    from onnx import helper

    model = _one_op_model(
        [
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
            helper.make_node("Equal", ["b", "two"], ["eq"]),
            helper.make_node("Neg", ["x"], ["nx"]),
            helper.make_node("Where", ["eq", "x", "nx"], ["y"]),
        ],
        {"zero": 0, "two": 2},
    )
    with pytest.raises(PassError, match="the first 2 batch rows of output 'y' differ from the original"):
        Symbolize(**{"x:0": "batch"})(model, onnxsurgery.PassContext(provider="cpu"))


@pytest.mark.parametrize("causal", [True, False])
def test_check_says_when_the_first_positions_of_a_longer_run_are_the_originals(causal):
    from onnx import helper

    if causal:  # a running sum: the first 4 positions do not see the ones after them
        nodes, consts = [helper.make_node("CumSum", ["x", "one"], ["y"])], {"one": 1}
    else:  # minus the mean over positions: every position sees them all
        nodes = [
            helper.make_node("ReduceMean", ["x", "axes"], ["m"], keepdims=1),
            helper.make_node("Sub", ["x", "m"], ["y"]),
        ]
        consts = {"axes": [1]}
    result = Symbolize(**{"x:1": "seq"})(_one_op_model(nodes, consts), onnxsurgery.PassContext(provider="cpu"))
    oracle = result.report.verification.oracles["seq"]
    assert ("beyond the first 4 positions, which equal the original model" in oracle) is causal, oracle


def test_the_original_model_runs_once_for_each_size_grown_alone_only_where_it_must(monkeypatch):
    """A larger size begins with the traced run's inputs, so the original model's outputs on
    its first traced-many rows or positions are the traced run's: the original runs at the
    traced size (and once with a new first row) only; and a run asked for twice runs once."""
    import threading

    from onnx import helper

    import onnxsurgery.validation.runtime as runtime

    sessions: list = []  # each session the check runs (held: no id is reused), the original first
    runs: list[int] = []

    lock = threading.Lock()  # run_many runs from two threads

    def counted(session, names, feeds):
        with lock:
            if not any(s is session for s in sessions):
                sessions.append(session)
                runs.append(0)
            runs[next(k for k, s in enumerate(sessions) if s is session)] += 1
        return timed(session, names, feeds)

    timed = runtime._run_timed
    monkeypatch.setattr(runtime, "_run_timed", counted)
    model = _one_op_model([helper.make_node("CumSum", ["x", "one"], ["y"])], {"one": 1}, (2, 4))
    result = Symbolize(**{"x:0": "batch", "x:1": "seq"})(model, onnxsurgery.PassContext(provider="cpu"))
    assert result.report.verification.levels == {"batch": "rows", "seq": "runs"}
    # the original: the traced size, and a new row 0 (batch rows are independent); the rewritten
    # model: the traced size, batch 3 and 4 with their first and last rows alone (the first row
    # alone is one run for both: it is the traced run's first row), seq 5 and 3
    assert runs == [2, 8], runs


def test_inputs_that_cannot_begin_with_the_traced_feeds_keep_their_own():
    from onnxsurgery.passes.symbolize.row_checks import begin_with

    base = {"x": np.arange(8, dtype=np.float32).reshape(2, 4), "n": np.array([4], np.int64)}
    grown = {"x": np.zeros((3, 4), np.float32), "n": np.array([7], np.int64)}
    inputs = dict(grown)
    assert begin_with(inputs, base, {"x": 0}, 2, frozenset())
    assert np.array_equal(inputs["x"][:2], base["x"]) and not inputs["x"][2].any()
    assert inputs["n"] is base["n"]
    for in_axis, n, sized, feeds in (
        ({"x": 0}, 2, {"n"}, base),  # an input read as a size is made for its size
        ({"x": 1}, 2, set(), base),  # the traced feed is not the first entries along that axis
        ({"x": 0}, 2, set(), {**base, "x": base["x"].astype(np.float64)}),
        ({"x": -2}, 4, set(), base),  # fewer entries than the traced size
    ):
        inputs = dict(grown)
        assert not begin_with(inputs, feeds, in_axis, n, frozenset(sized))
        assert all(inputs[k] is grown[k] for k in grown)


# -- subgraphs -----------------------------------------------------------------------------------


def test_constants_inside_if_branches_are_rewritten():
    from onnx import TensorProto, helper, numpy_helper

    def branch(name: str, shape: list[int], scale: bool) -> onnx.GraphProto:
        const = helper.make_node(
            "Constant", [], [f"{name}_s"], value=numpy_helper.from_array(np.array(shape, np.int64))
        )
        reshape = helper.make_node("Reshape", ["x", f"{name}_s"], [f"{name}_r"])
        last = helper.make_node(
            "Mul" if scale else "Identity",
            [f"{name}_r", "two"][: 2 if scale else 1],
            [f"{name}_out"],
        )
        out = helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, [4, 12])
        return helper.make_graph([const, reshape, last], name, [], [out])

    nodes = [
        helper.make_node(
            "If", ["flag"], ["y0"], name="if",
            then_branch=branch("then", [4, -1], False), else_branch=branch("else", [4, 12], True),
        ),
        helper.make_node("MatMul", ["y0", "w"], ["y"], name="fc"),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3, 4]),
            helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 5])],
        [
            numpy_helper.from_array(np.float32(2), "two"),
            numpy_helper.from_array(RNG.standard_normal((12, 5)).astype(np.float32), "w"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    result = Symbolize()(model, onnxsurgery.PassContext(provider="cpu"))
    assert {c.input for c in result.report.changes} == {"then_s", "else_s"}
    assert dims(result.model.graph.output[0]) == ["batch", 5]
    x = np.random.default_rng(0).standard_normal((6, 3, 4)).astype(np.float32)
    for flag, scale in ((True, 1.0), (False, 2.0)):
        y = run_model(result.model, {"x": x, "flag": np.array(flag)}, "cpu")["y"]
        w = onnx.numpy_helper.to_array(model.graph.initializer[1])
        np.testing.assert_allclose(y, scale * x.reshape(6, 12) @ w, rtol=1e-5, atol=1e-5)


def test_flat_index_grid_traced_at_batch_two_is_tied_to_the_batch():
    """``as_strided`` pooling: a constant flat index ``b*4 + c`` into ``x.reshape(-1)``."""
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[2, 4] x) => (float[2, 4] y) <int64[1] flat = {-1}> {
            f = Reshape (x, flat)
            y = Gather <axis = 0> (f, idx)
        }
        """,
        idx=np.arange(8, dtype=np.int64).reshape(2, 4),
    )
    result = Symbolize()(model, onnxsurgery.PassContext(provider="cpu"))
    assert dims(result.model.graph.output[0]) == ["batch", 4]
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    np.testing.assert_array_equal(run_model(result.model, {"x": x}, "cpu")["y"], x)
