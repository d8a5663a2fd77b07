"""symbolize on models other exporters write: IR-3 models from the onnx wheel's backend tests
(every initializer also a graph input), ``-1`` / ``"?"`` / empty input dims, shape vectors and
sequences as graph inputs. The oracle is the test data the onnx wheel stores with each model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

import onnxsurgery
from onnxsurgery.cli import app
from onnxsurgery.passes.symbolize import Symbolize
from onnxsurgery.validation.runtime import run_model

BACKEND = Path(onnx.__file__).parent / "backend" / "test" / "data" / "pytorch-converted"
runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


def stored(name: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray], list[np.ndarray]]:
    """A backend model and its stored case (inputs by name, outputs in order)."""
    folder = BACKEND / name
    model = onnx.load(folder / "model.onnx")
    data = folder / "test_data_set_0"
    inits = {t.name for t in model.graph.initializer}
    feeds_names = [i.name for i in model.graph.input if i.name not in inits]
    inputs = {
        n: numpy_helper.to_array(onnx.load_tensor(data / f"input_{k}.pb"))
        for k, n in enumerate(feeds_names)
    }
    outputs = [
        numpy_helper.to_array(onnx.load_tensor(data / f"output_{k}.pb"))
        for k in range(len(model.graph.output))
    ]
    return model, inputs, outputs


def symbolize(model: onnx.ModelProto, tmp_path: Path, passes: str = "symbolize"):
    src, dst = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, src)
    return invoke("run", src, "--passes", passes, "-o", dst), dst


def one_line_error(result) -> str:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "Traceback" not in result.output
    return lines[0]


def matches_stored(path: Path, inputs: dict[str, np.ndarray], outputs: list[np.ndarray]) -> None:
    got = run_model(onnx.load(path), inputs)
    for ref, out in zip(outputs, got.values(), strict=True):
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["test_PixelShuffle", "test_Conv2d", "test_Embedding"])
def test_ir3_backend_model_stays_checker_valid_and_matches_its_stored_case(name, tmp_path):
    model, inputs, outputs = stored(name)
    assert model.ir_version < 4
    result, out = symbolize(model, tmp_path)
    assert result.exit_code == 0, result.output
    new = onnx.load(out)
    onnx.checker.check_model(new, full_check=True)
    # IR 3: every initializer, the ones symbolize added too, is still a graph input
    assert {t.name for t in new.graph.initializer} <= {i.name for i in new.graph.input}
    # weights stay weights: their inputs keep the declared (static) shape, only data gets batch
    first = new.graph.input[0].type.tensor_type.shape.dim[0]
    assert first.dim_param == "batch"
    weights = {t.name for t in new.graph.initializer}
    for vi in new.graph.input:
        if vi.name in weights:
            assert all(d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim), vi.name
    matches_stored(out, inputs, outputs)


@pytest.mark.parametrize(
    "make_dynamic",
    [
        lambda d: setattr(d, "dim_value", -1),
        lambda d: setattr(d, "dim_param", "?"),
        lambda d: None,
    ],
    ids=["minus-one", "question-mark", "empty"],
)
def test_dynamic_batch_from_other_exporters_is_named_and_never_fed_negative(make_dynamic, tmp_path):
    model, inputs, outputs = stored("test_Conv2d")
    dim = model.graph.input[0].type.tensor_type.shape.dim[0]
    dim.Clear()
    make_dynamic(dim)
    result, out = symbolize(model, tmp_path)
    assert result.exit_code == 0, result.output
    new = onnx.load(out)
    assert new.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    matches_stored(out, inputs, outputs)


def test_an_unnamed_dynamic_axis_the_check_cannot_size_is_one_line_naming_it(tmp_path):
    model, _, _ = stored("test_Conv2d")  # 3x2 kernel: height 2 is too small
    dim = model.graph.input[0].type.tensor_type.shape.dim[2]
    dim.Clear()
    dim.dim_value = -1
    line = one_line_error(symbolize(model, tmp_path)[0])
    assert "axis 2 of input '0'" in line and "check=false" in line
    assert not (tmp_path / "out.onnx").exists()


def _model(nodes, inputs, outputs) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def test_a_sequence_input_is_refused_in_one_line(tmp_path):
    model = _model(
        [
            helper.make_node("ConcatFromSequence", ["s"], ["c"], axis=0),
            helper.make_node("Add", ["x", "x"], ["z"]),
        ],
        [
            helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3]),
        ],
        [
            helper.make_tensor_value_info("c", TensorProto.FLOAT, [None, 3]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, [4, 3]),
        ],
    )
    line = one_line_error(symbolize(model, tmp_path)[0])
    assert "input 's' is a sequence, not a tensor" in line and "check=false" in line
    line = one_line_error(symbolize(model, tmp_path, "symbolize(s:0=n)")[0])
    assert "input 's' is a sequence, not a tensor: symbolize names tensor axes only" in line
    result, out = symbolize(model, tmp_path, "symbolize(check=false)")  # x alone; s kept as is
    assert result.exit_code == 0, result.output
    new = onnx.load(out)
    assert new.graph.input[0].type == model.graph.input[0].type
    assert new.graph.input[1].type.tensor_type.shape.dim[0].dim_param == "batch"


def _shape_input_model(op: str, x_shape: list[int]) -> onnx.ModelProto:
    return _model(
        [helper.make_node(op, ["x", "shape"], ["y"])],
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape),
            helper.make_tensor_value_info("shape", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None])],
    )


def test_a_shape_vector_input_is_no_batch_and_an_expand_target_runs(tmp_path):
    result, out = symbolize(_shape_input_model("Expand", [4, 1]), tmp_path)
    assert result.exit_code == 0, result.output
    new = onnx.load(out)
    dims = {vi.name: vi.type.tensor_type.shape.dim for vi in new.graph.input}
    assert dims["x"][0].dim_param == "batch"
    assert [d.dim_value for d in dims["shape"]] == [2]  # its axis 0 is a rank
    x = np.arange(3, dtype=np.float32).reshape(3, 1)
    got = run_model(new, {"x": x, "shape": np.array([3, 5], dtype=np.int64)})
    np.testing.assert_array_equal(next(iter(got.values())), np.broadcast_to(x, (3, 5)))


def test_a_reshape_target_input_is_never_checked_with_made_up_values(tmp_path):
    line = one_line_error(symbolize(_shape_input_model("Reshape", [4, 6]), tmp_path)[0])
    assert "input 'shape' is read as a size" in line and "does not make sizes up" in line


# -- blockers people can read ----------------------------------------------------------------------


def _tables_model(channels: list[int]) -> onnx.ModelProto:
    """One Add per entry, each adding a learned table cut to the traced length 4 (seq)."""
    rng = np.random.default_rng(0)
    nodes, inits, outputs = [], [], []
    inputs = []
    for k, c in enumerate(channels):
        inputs.append(helper.make_tensor_value_info(f"x{k}", TensorProto.FLOAT, [2, 4, c]))
        inits.append(numpy_helper.from_array(rng.standard_normal((1, 4, c)).astype(np.float32), f"pos{k}"))
        nodes.append(helper.make_node("Add", [f"x{k}", f"pos{k}"], [f"y{k}"], name=f"node_add_{k}"))
        outputs.append(helper.make_tensor_value_info(f"y{k}", TensorProto.FLOAT, [2, 4, c]))
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_identical_blockers_are_one_entry_and_the_report_lists_every_one(tmp_path):
    result, _ = symbolize(_tables_model([3] * 8), tmp_path, "symbolize(*:0=batch, *:1=seq)")
    line = one_line_error(result)
    assert line.count("(1)") == 1 and "(2)" not in line
    assert "8 blocker(s)" in line and "8 Add nodes (node_add_0, node_add_1, node_add_2, ...)" in line
    assert "--report" in line and len(line) < 1200  # the cut table's three ways out, once
    report = tmp_path / "report.json"
    src = tmp_path / "in.onnx"
    invoke("run", src, "--passes", "symbolize(*:0=batch, *:1=seq)", "-o", tmp_path / "o.onnx",
           "--report", report)  # fmt: skip
    (record,) = json.loads(report.read_text())["passes"]
    assert [b["node"] for b in record["report"]["blockers"]] == [f"node_add_{k}" for k in range(8)]
    (group,) = record["report"]["blocker_groups"]
    assert group["count"] == 8 and group["nodes"][-1] == "node_add_7"


def test_many_kinds_of_blockers_stay_on_one_screen(tmp_path):
    # 40 tables, each cut to its own symbol: 40 kinds, each with its own "what to do"
    names = ", ".join(f"x{k}:1=s{k}" for k in range(40))
    result, _ = symbolize(_tables_model([3] * 40), tmp_path, f"symbolize(*:0=batch, {names})")
    line = one_line_error(result)
    assert "40 blocker(s)" in line and "more kind(s)" in line and "--report" in line
    assert len(line) < 24 * 80  # one screen
    assert "node_add_0" in line and "node_add_39" not in line


def test_one_blocker_reads_as_before(tmp_path):
    line = one_line_error(symbolize(_tables_model([3]), tmp_path, "symbolize(*:0=batch, *:1=seq)")[0])
    assert "1 blocker(s) keep the model from being symbolized: (1) Add 'node_add_0' (input 'pos0')" in line
    assert "re-export with dynamic axes for seq" in line and "--report" not in line


def test_minus_one_reaches_the_pass_unloaded_and_is_still_no_size():
    """Through the Python API no loader runs first: the pass itself reads -1 as no size."""
    model, inputs, outputs = stored("test_Conv2d")
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = -1
    result = Symbolize()(model, onnxsurgery.PassContext(provider="cpu"))
    assert result.model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    got = run_model(result.model, inputs)
    np.testing.assert_allclose(next(iter(got.values())), outputs[0], rtol=1e-4, atol=1e-5)


def test_an_operator_ort_has_no_kernel_for_at_an_old_opset_is_one_line(tmp_path):
    model, _, _ = stored("test_BatchNorm2d_eval")  # BatchNormalization-6: no ORT kernel
    line = one_line_error(symbolize(model, tmp_path)[0])
    assert "BatchNormalization(6)" in line and "onnx.version_converter" in line
    result, out = symbolize(model, tmp_path, "symbolize(check=false)")
    assert result.exit_code == 0, result.output
    onnx.checker.check_model(onnx.load(out), full_check=True)
