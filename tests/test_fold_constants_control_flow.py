"""fold-constants on control flow and deep graphs: never a failure on a model ONNX Runtime runs.

The oracle is always the original model on ONNX Runtime, at sizes that take each If branch.
silero-vad (the ``op15`` and ``half`` models in its wheel: an If whose branch holds an LSTM;
onnxsim fails on both and onnx-graphsurgeon used to die of RecursionError) is fetched from the
package registry and skipped when that cannot be reached; ``if_lstm_model`` has the same
structure and always runs.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxsurgery
from onnxsurgery.passes.fold_constants import FoldConstants
from onnxsurgery.passes.fold_constants.capture import FolderFailed
from onnxsurgery.passes.fold_constants.graphsurgeon import fold_with_graphsurgeon
from onnxsurgery.validation.runtime import run_model

HIDDEN, FEATURES = 8, 4


def _const(name: str, values, dtype=np.int64) -> onnx.NodeProto:
    return helper.make_node(
        "Constant", [], [name], value=numpy_helper.from_array(np.asarray(values, dtype), name)
    )


def if_lstm_model(ir_version: int = 8, opset: int = 15) -> onnx.ModelProto:
    """x [batch, seq, 4] -> If(batch == 1): then an LSTM over x (with foldable shape arithmetic
    inside the branch), else Relu(x) reduced; main graph with a foldable Constant chain too."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((1, 4 * HIDDEN, FEATURES)).astype(np.float32), "W")
    r = numpy_helper.from_array(rng.standard_normal((1, 4 * HIDDEN, HIDDEN)).astype(np.float32), "R")
    b = numpy_helper.from_array(rng.standard_normal((1, 8 * HIDDEN)).astype(np.float32), "B")
    then_nodes = [
        helper.make_node("Transpose", ["x"], ["t_seq_first"], perm=[1, 0, 2]),
        helper.make_node("LSTM", ["t_seq_first", "W", "R", "B"], ["t_y", "t_yh"], hidden_size=HIDDEN),
        # foldable inside the branch: [1] ++ [-1] -> the shape the LSTM's state is read at
        _const("t_one", [1]),
        _const("t_minus", [-1]),
        helper.make_node("Concat", ["t_one", "t_minus"], ["t_shape"], axis=0),
        helper.make_node("Reshape", ["t_yh", "t_shape"], ["t_flat"]),
        helper.make_node("Squeeze", ["t_flat", "squeeze_axes"], ["t_out"]),
    ]
    then_branch = helper.make_graph(
        then_nodes, "then", [], [helper.make_tensor_value_info("t_out", TensorProto.FLOAT, ["t_n"])]
    )
    else_nodes = [
        helper.make_node("Relu", ["x"], ["e_relu"]),
        _const("e_axes", [1, 2]),
        helper.make_node("ReduceSum", ["e_relu", "e_axes"], ["e_out"], keepdims=0),
    ]
    else_branch = helper.make_graph(
        else_nodes, "else", [], [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, ["e_n"])]
    )
    main = [
        helper.make_node("Shape", ["x"], ["shape"]),
        _const("zero", 0),
        helper.make_node("Gather", ["shape", "zero"], ["batch"]),
        _const("one", 1),
        helper.make_node("Equal", ["batch", "one"], ["is_one"]),
        # foldable in the main graph: squeeze_axes = Unsqueeze(0) of a constant
        _const("axis0", 0),
        _const("unsq_axes", [0]),
        helper.make_node("Unsqueeze", ["axis0", "unsq_axes"], ["squeeze_axes"]),
        helper.make_node("If", ["is_one"], ["y"], then_branch=then_branch, else_branch=else_branch),
    ]
    graph = helper.make_graph(
        main,
        "if_lstm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", FEATURES])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])],
        [w, r, b],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version
    onnx.checker.check_model(model, full_check=True)
    return model


def _feeds(batch: int, seq: int = 5) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(batch).standard_normal((batch, seq, FEATURES)).astype(np.float32)}


def assert_same_on_ort(original: onnx.ModelProto, folded: onnx.ModelProto, feeds_list) -> None:
    for feeds in feeds_list:
        want = run_model(original, feeds, "cpu")
        got = run_model(folded, feeds, "cpu")
        assert list(got) == list(want)
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=name)


def _raising_simplify(*args, **kwargs):
    raise RuntimeError("onnxsim cannot simplify this (forced by the test)")


# -- an If with an LSTM in a branch ---------------------------------------------------------------


def test_if_with_lstm_folds_and_computes_what_the_original_does():
    model = if_lstm_model()
    result = FoldConstants()(model)
    onnx.checker.check_model(result.model, full_check=True)
    # batch 1 takes the LSTM branch, batch 3 the other
    assert_same_on_ort(model, result.model, [_feeds(1), _feeds(3), _feeds(1, seq=9)])


def test_graphsurgeon_folds_inside_subgraphs_at_an_ir_version_ort_loads(monkeypatch):
    """onnx-graphsurgeon stamps the parts it evaluates with onnx's newest IR, which ORT refused;
    with basic partitioning every refusal recursed until RecursionError."""
    monkeypatch.setattr("onnxsim.simplify", _raising_simplify)
    model = if_lstm_model()
    result = FoldConstants(isolate=False)(model)
    assert result.modified
    warning = next(d for d in result.diagnostics if d.level == "warning")
    assert "folded with onnx-graphsurgeon" in str(warning)
    ops = [n.op_type for n in result.model.graph.node]
    assert "Unsqueeze" not in ops  # the main graph's constant chain is folded
    then = next(a.g for n in result.model.graph.node if n.op_type == "If" for a in n.attribute if a.name == "then_branch")
    assert "Concat" not in [n.op_type for n in then.node]  # and the branch's
    assert_same_on_ort(model, result.model, [_feeds(1), _feeds(2)])


def test_main_graph_only_when_subgraph_folding_fails(monkeypatch):
    """A fallback result the checker refuses is not taken: the next attempt folds less."""
    monkeypatch.setattr("onnxsim.simplify", _raising_simplify)
    model = if_lstm_model()
    real = fold_with_graphsurgeon
    calls = []

    def subgraphs_fail(m, **kwargs):
        calls.append(kwargs)
        if kwargs["subgraphs"]:
            raise FolderFailed("RuntimeError: forced subgraph failure")
        return real(m, **kwargs)

    monkeypatch.setattr("onnxsurgery.passes.fold_constants.fold_with_graphsurgeon", subgraphs_fail)
    result = FoldConstants(isolate=False)(model)
    assert [c["subgraphs"] for c in calls] == [True, True, False]
    warning = next(d for d in result.diagnostics if d.level == "warning")
    assert "main graph only (RuntimeError: forced subgraph failure when folding subgraphs)" in str(warning)
    assert_same_on_ort(model, result.model, [_feeds(1), _feeds(2)])


def test_pipeline_fold_of_if_lstm_validates_against_the_original(tmp_path):
    model = if_lstm_model()
    src = tmp_path / "if_lstm.onnx"
    onnx.save(model, src)
    report = onnxsurgery.run(src, "cleanup, infer-shapes, fold-constants", output=tmp_path / "out.onnx")
    assert_same_on_ort(model, onnx.load(tmp_path / "out.onnx"), [_feeds(1), _feeds(4)])
    assert report.passes[-1].error is None


# -- deep graphs ----------------------------------------------------------------------------------


def test_deep_unsorted_graph_folds_without_recursion_error(monkeypatch):
    """onnx-graphsurgeon's toposort recurses once per node of an unsorted chain: 3000 deep."""
    monkeypatch.setattr("onnxsim.simplify", _raising_simplify)
    depth = 3000
    nodes = [helper.make_node("Neg", [f"v{i}"], [f"v{i + 1}"]) for i in range(depth)]
    nodes.append(_const("c", np.ones(3, np.float32), np.float32))
    nodes.append(helper.make_node("Add", ["c", "c"], ["v0"]))
    nodes.append(helper.make_node("Add", ["x", f"v{depth}"], ["y"]))
    graph = helper.make_graph(
        list(reversed(nodes)),  # consumers first: the deepest recursion
        "deep",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    assert sys.getrecursionlimit() < depth
    result = FoldConstants(isolate=False)(model)
    assert [n.op_type for n in result.model.graph.node] == ["Add"]
    x = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(run_model(result.model, {"x": x}, "cpu")["y"], x + 2.0)


# -- silero-vad from the package registry ---------------------------------------------------------


@pytest.fixture(scope="module")
def silero_models(tmp_path_factory) -> Path:
    where = tmp_path_factory.mktemp("silero")
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "silero-vad", "--no-deps", "-d", str(where), "-q"],
            capture_output=True,
            text=True,
            timeout=180,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"the package registry cannot be reached: {exc}")
    wheels = list(where.glob("silero_vad-*.whl"))
    if proc.returncode != 0 or not wheels:
        pytest.skip(f"pip download silero-vad failed: {(proc.stderr or proc.stdout).strip()[-300:]}")
    with zipfile.ZipFile(wheels[0]) as wheel:
        wheel.extractall(where)
    return where / "silero_vad" / "data"


@pytest.mark.parametrize(
    ("name", "chain"),
    [
        ("silero_vad_16k_op15", "fold-constants"),
        ("silero_vad_half", "fold-constants"),
        # after infer-shapes, shapes recorded inside the If bodies went stale on folding
        ("silero_vad", "cleanup, infer-shapes, fold-constants"),
        ("silero_vad_16k_op15", "cleanup, infer-shapes, fold-constants"),
    ],
)
def test_silero_vad_through_fold_constants(silero_models, name, chain, tmp_path):
    src = silero_models / f"{name}.onnx"
    if not src.is_file():
        pytest.skip(f"this silero-vad release has no {src.name}")
    out = tmp_path / f"{name}.folded.onnx"
    report = onnxsurgery.run(src, chain, output=out, provider="cpu")
    assert out.is_file() and all(p.error is None for p in report.passes)
    original, folded = onnx.load(src), onnx.load(out)
    rng = np.random.default_rng(0)
    names = {i.name for i in original.graph.input}
    for batch, sr, samples in ((1, 16000, 512), (2, 16000, 512), (3, 8000, 256)):
        feeds = {
            "input": rng.standard_normal((batch, samples)).astype(np.float32),
            "state": rng.standard_normal((2, batch, 128)).astype(np.float32),
        }
        if "sr" in names:
            feeds["sr"] = np.array(sr, np.int64)
        want = run_model(original, feeds, "cpu")
        got = run_model(folded, feeds, "cpu")
        for key in want:
            np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-6, err_msg=key)


def test_a_folder_result_that_would_fail_the_pipelines_check_is_not_taken(monkeypatch):
    """onnxsim's result must pass the checks the pipeline runs after the pass; else the fallback."""

    def stale_simplify(model, *args, **kwargs):
        out = onnx.ModelProto()
        out.CopyFrom(model)
        # a value_info contradicting the graph: Shape's output is int64, not float
        out.graph.value_info.append(helper.make_tensor_value_info("shape", TensorProto.FLOAT, [3]))
        return out, True

    monkeypatch.setattr("onnxsim.simplify", stale_simplify)
    model = if_lstm_model()
    result = FoldConstants(isolate=False)(model)
    warning = next(d for d in result.diagnostics if d.level == "warning")
    assert "its result fails shape inference" in str(warning)
    assert "folded with onnx-graphsurgeon" in str(warning)
    report = onnxsurgery.run(model, "fold-constants(isolate=false)")
    assert_same_on_ort(model, report.model, [_feeds(1), _feeds(2)])
