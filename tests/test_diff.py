"""The diff of two models (issue 27 item 1): ``onnxsurgery.diff``, ``onnxsurgery diff`` and the
per-pass ``"diff"`` of ``run --report``."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
from onnx import numpy_helper
from typer.testing import CliRunner

import onnxsurgery
from onnxsurgery.cli import app
from onnxsurgery.passes.symbolize import Symbolize

ROOT = Path(__file__).resolve().parents[1]
ATTENTION = ROOT / "fixtures/attention_block/torchscript"
LSTM = ROOT / "fixtures/lstm_packed/torchscript"
runner = CliRunner()


def _symbolized(fixture: Path, axes: dict, tmp_path: Path) -> Path:
    out = tmp_path / f"{fixture.parent.name}.onnx"
    onnxsurgery.run(fixture / "model.onnx", [Symbolize(dynamic_axes=axes)], output=out)
    return out


def test_diff_of_identical_models_is_empty() -> None:
    d = onnxsurgery.diff(ATTENTION / "model.onnx", ATTENTION / "model.onnx")
    assert d.empty and not d
    assert not d.added and not d.removed and not d.rewired and not d.constants
    assert d.to_dict()["empty"] is True


def test_symbolize_diff_lists_rewritten_constants_in_input_symbols(tmp_path: Path) -> None:
    out = _symbolized(ATTENTION, {"x": {0: "batch", 1: "seq"}}, tmp_path)
    d = onnxsurgery.diff(ATTENTION / "model.onnx", out)
    said = [str(c) for c in d.constants]
    assert said == [
        "Reshape '/Reshape' input 1: [4, 5, 3, 2, 8] -> [0, 0, 3, 2, 8] = [batch, seq, 3, 2, 8]",
        "Reshape '/Reshape_1' input 1: [4, 5, 16] -> [0, 0, 16] = [batch, seq, 16]",
    ]
    assert [str(n) for n in d.rewired] == ["Reshape '/Reshape'", "Reshape '/Reshape_1'"]
    assert {o.op: (o.before, o.after, o.removed) for o in d.ops}["Constant"] == (9, 7, 2)
    inputs = {c.name: (c.before, c.after) for c in d.inputs}
    assert inputs["x"] == ("float32[4, 5, 16]", "float32[batch, seq, 16]")
    assert json.loads(d.to_json())["constants"][0]["new"]["means"] == "[batch, seq, 3, 2, 8]"


def test_constant_replaced_by_a_computation_is_spelled_as_its_shape(tmp_path: Path) -> None:
    """lstm_packed: symbolize replaces the baked [0, 1, 2] / [0, 0, 0] with Range/Expand
    computations; the diff names the node computing each and its size in the symbol."""
    out = _symbolized(LSTM, {"x": {0: "batch"}, "lengths": {0: "batch"}}, tmp_path)
    d = onnxsurgery.diff(LSTM / "model.onnx", out)
    by_input = {c.input_index: c for c in d.constants if c.node.op == "ScatterElements"}
    assert by_input[2].old.text == "[0, 1, 2]"
    assert by_input[2].new.kind == "computed" and by_input[2].new.means == "shape [batch]"
    assert by_input[0].old.text == "[0, 0, 0]"
    assert {n.op for n in d.added} >= {"Range", "Shape"}


def test_changed_weight_says_how_many_elements_differ(tmp_path: Path) -> None:
    model = onnx.load(ATTENTION / "model.onnx")
    weight = next(t for t in model.graph.initializer if t.name == "qkv.bias")
    arr = numpy_helper.to_array(weight).copy()
    arr[3] += 0.5
    weight.CopyFrom(numpy_helper.from_array(arr, weight.name))
    d = onnxsurgery.diff(ATTENTION / "model.onnx", model)
    (change,) = d.constants
    assert change.node.name == "/qkv/Add" and change.input_index == 0
    assert change.detail == "1 of 48 elements differ, max abs 5e-1 at [3]"


def test_cli_diff_prints_and_writes_json(tmp_path: Path) -> None:
    out = _symbolized(ATTENTION, {"x": {0: "batch", 1: "seq"}}, tmp_path)
    report = tmp_path / "diff.json"
    result = runner.invoke(
        app, ["diff", str(ATTENTION / "model.onnx"), str(out), "--report", str(report)],
        env={"COLUMNS": "80"},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "[0, 0, 16] = [batch, seq, 16]" in " ".join(result.output.split())
    assert all(len(line) <= 80 for line in result.output.splitlines())
    assert json.loads(report.read_text())["constants"][1]["old"]["text"] == "[4, 5, 16]"
    same = runner.invoke(app, ["diff", str(out), str(out)])
    assert same.exit_code == 0 and "no difference" in same.output


def test_cli_diff_of_a_file_that_is_not_a_model_is_one_line_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    result = runner.invoke(app, ["diff", str(bad), str(ATTENTION / "model.onnx")])
    assert result.exit_code == 2
    assert "Traceback" not in result.output and "bad.onnx" in result.output


def test_run_report_has_each_pass_diff(tmp_path: Path) -> None:
    report = tmp_path / "run.json"
    result = runner.invoke(
        app,
        ["run", str(ATTENTION / "model.onnx"), "-o", str(tmp_path / "o.onnx"), "-q",
         "--passes", "symbolize(x:0=batch, x:1=seq), cleanup", "--report", str(report)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    passes = json.loads(report.read_text())["passes"]
    sym = passes[0]["diff"]
    assert [c["new"]["means"] for c in sym["constants"]] == [
        "[batch, seq, 3, 2, 8]",
        "[batch, seq, 16]",
    ]
    assert passes[1]["diff"]["empty"] is True
