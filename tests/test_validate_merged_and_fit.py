"""Issue 26, items 2 and 4: standalone validation of a model merged by concat-outputs (the
references of the model before the merge, ``--ref`` and ``--against``), and reference cases
that do not fit the model, worded the same on every path that runs them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from typer.testing import CliRunner

import onnxsurgery
from onnxsurgery.cli import app
from onnxsurgery.errors import PassError
from onnxsurgery.merged_outputs import read_layout
from onnxsurgery.model.signature import CaseFailure, check_inputs, model_inputs
from onnxsurgery.validation.against_model import compare_models
from onnxsurgery.validation.references import Case, save_case

cli = CliRunner()

NET = """
<ir_version: 8, opset_import: ["" : 17]>
net (float[N, 3] x) => (float[N, 2] y, float[N, 3] z)
<float[3, 2] W = {0.5, -1.0, 0.25, 2.0, 1.0, 0.0}, float[2] B = {1.0, -0.5}>
{
    m = MatMul(x, W)
    y = Add(m, B)
    z = Relu(x)
}
"""
W = np.array([[0.5, -1.0], [0.25, 2.0], [1.0, 0.0]], dtype=np.float32)
B = np.array([1.0, -0.5], dtype=np.float32)

#: traced at x [2, 5, 8]: the Reshape's target still holds the traced batch 2
TRACED = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[2, 5, 8] x) => (float[2, 40] y)
{
    s = Constant<value = int64[2] {2, 40}>()
    y = Reshape(x, s)
}
"""
FIXED = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[2, 5, 8] x) => (float[2, 5, 8] y) { y = Relu(x) }
"""


def invoke(*args):
    return cli.invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


def torch_outputs(x: np.ndarray) -> dict[str, np.ndarray]:
    return {"y": (x @ W + B).astype(np.float32), "z": np.maximum(x, 0)}


@pytest.fixture
def merged(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(original model, the model merged by concat-outputs, references of the original at
    batch 2 and 4, tensors named)."""
    original = tmp_path / "net.onnx"
    onnx.save(onnx.parser.parse_model(NET), original)
    refs = tmp_path / "refs"
    rng = np.random.default_rng(0)
    for k, n in enumerate((2, 4)):
        x = rng.standard_normal((n, 3)).astype(np.float32)
        save_case(Case(name=f"c{k}", inputs={"x": x}, outputs=torch_outputs(x)), refs, index=k)
    out = tmp_path / "net.merged.onnx"
    onnxsurgery.run(original, "concat-outputs", output=out, references=refs, provider="cpu")
    assert [o.name for o in onnx.load(out).graph.output] == ["merged"]
    return original, out, refs


# --------------------------------------------------------------------------------------------
# item 2: validate after concat-outputs


def test_validate_api_merges_the_references_as_the_model_did(merged) -> None:
    _, out, refs = merged
    report = onnxsurgery.validate(out, refs, provider="cpu")
    assert report, report.summary
    assert [[o.name for o in c.outputs] for c in report.cases] == [["merged"], ["merged"]]
    # which original outputs the merged row compares
    assert any("'merged' holds 'y', 'z' merged by concat-outputs" in n for n in report.notes)


def test_validate_cli_ref_and_against_on_a_merged_model(merged) -> None:
    original, out, refs = merged
    result = invoke("validate", out, "--ref", refs, "--provider", "cpu")
    assert result.exit_code == 0, result.output
    assert "no reference" not in result.output
    assert "holds 'y', 'z'" in " ".join(result.output.split())
    result = invoke(
        "validate", out, "--against", original, "--ref", refs / "test_data_set_0", "--provider", "cpu"
    )
    assert result.exit_code == 0, result.output
    assert "does not produce" not in result.output


def test_compare_models_merges_the_other_models_outputs(merged) -> None:
    original, out, _ = merged
    report = compare_models(out, original, shapes={"x": [3, 3]}, provider="cpu")
    assert report, report.summary
    assert [o.name for o in report.cases[0].outputs] == ["merged"]


def test_a_mismatch_in_a_merged_output_names_the_original_output(merged, tmp_path) -> None:
    _, out, _ = merged
    x = np.ones((2, 3), dtype=np.float32)
    wrong = torch_outputs(x)
    wrong["z"][1, 2] += 1.0  # merged [2, 5]: z sits at columns 2..4
    save_case(Case(name="bad", inputs={"x": x}, outputs=wrong), tmp_path / "bad", index=0)
    report = onnxsurgery.validate(out, tmp_path / "bad", provider="cpu")
    assert not report
    (comparison,) = report.cases[0].outputs
    assert comparison.worst_index == (1, 4)
    assert "worst element is 'z' at [1, 2] of the original outputs" in comparison.describe()
    result = invoke("validate", out, "--ref", tmp_path / "bad", "--provider", "cpu")
    assert result.exit_code == 1
    assert "worst element is 'z' at [1, 2]" in " ".join(result.output.split())


def test_unnamed_reference_outputs_bind_to_the_outputs_before_the_merge(merged, tmp_path) -> None:
    _, out, _ = merged
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    case = tmp_path / "unnamed" / "test_data_set_0"
    case.mkdir(parents=True)
    tensors = {"input_0": x, **{f"output_{k}": v for k, v in enumerate(torch_outputs(x).values())}}
    for file, value in tensors.items():  # no tensor names: bound by position, as ONNX reads them
        (case / f"{file}.pb").write_bytes(numpy_helper.from_array(value).SerializeToString())
    report = onnxsurgery.validate(out, tmp_path / "unnamed", provider="cpu")
    assert report, report.summary


def test_references_of_the_merged_model_itself_compare_as_they_are(merged, tmp_path) -> None:
    _, out, refs = merged
    x = np.ones((2, 3), dtype=np.float32)
    want = torch_outputs(x)
    merged_value = np.concatenate([want["y"], want["z"]], axis=1)
    save_case(Case(name="m", inputs={"x": x}, outputs={"merged": merged_value}), tmp_path / "m", index=0)
    assert onnxsurgery.validate(out, tmp_path / "m", provider="cpu")


def test_locate_maps_a_merged_index_to_its_original_output(merged) -> None:
    from onnxsurgery.merged_outputs import locate

    _, out, _ = merged
    layout = read_layout(out)
    assert locate(layout, (4, 5), (3, 1)) == "'y' at [3, 1]"
    assert locate(layout, (4, 5), (0, 2)) == "'z' at [0, 0]"
    assert locate(layout, (4, 5), (0, 9)) is None


# --------------------------------------------------------------------------------------------
# item 4: references that do not fit


def test_a_case_without_the_models_input_is_worded_as_bind_cases_words_it() -> None:
    specs = model_inputs(onnx.parser.parse_model(FIXED))
    with pytest.raises(CaseFailure) as info:
        check_inputs(specs, {"z": np.zeros((2, 5, 8), np.float32)})
    assert str(info.value) == (
        "case gives no value for model input 'x' (the case has z; the model's inputs are x)"
    )


def write_cases(folder: Path, shapes: list[tuple[int, ...]], *, name: str = "x") -> Path:
    rng = np.random.default_rng(1)
    for k, shape in enumerate(shapes):
        x = rng.standard_normal(shape).astype(np.float32)
        y = x.reshape(shape[0], -1) if len(shape) == 3 and shape[1:] == (5, 8) else x
        save_case(Case(name=f"c{k}", inputs={name: x}, outputs={"y": y}), folder, index=k)
    return folder


@pytest.mark.parametrize("passes", ["cleanup", "validate", "symbolize(x:0=batch)"])
def test_a_case_from_another_model_gives_one_line_on_every_path(tmp_path, passes) -> None:
    model = tmp_path / "traced.onnx"
    onnx.save(onnx.parser.parse_model(TRACED), model)
    refs = write_cases(tmp_path / "other", [(2, 5, 8)], name="z")
    result = invoke("run", model, "-o", tmp_path / "o.onnx", "--passes", passes, "--ref", refs, "--provider", "cpu")
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert "gives no value for model input 'x' (the case has z; the model's inputs are x)" in said
    assert "Required inputs" not in said


@pytest.mark.parametrize("passes", ["cleanup", "validate"])
def test_a_case_at_a_fixed_size_fails_before_onnx_runtime_runs(tmp_path, passes) -> None:
    model = tmp_path / "fixed.onnx"
    onnx.save(onnx.parser.parse_model(FIXED), model)
    refs = write_cases(tmp_path / "b3", [(3, 5, 8)])
    result = invoke("run", model, "-o", tmp_path / "o.onnx", "--passes", passes, "--ref", refs, "--provider", "cpu")
    assert result.exit_code == 1, result.output
    said = " ".join(result.output.split())
    assert "input 'x' expects dims [2, 5, 8], got [3, 5, 8]: axis 0 is fixed at 2, got 3" in said


def test_symbolize_names_the_axis_the_references_vary(tmp_path) -> None:
    model = tmp_path / "traced.onnx"
    onnx.save(onnx.parser.parse_model(TRACED), model)
    refs = write_cases(tmp_path / "vary", [(2, 5, 8), (3, 7, 8)])
    result = invoke(
        "run", model, "-o", tmp_path / "o.onnx", "--passes", "symbolize(x:0=batch)", "--ref", refs,
        "--provider", "cpu",
    )
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert (
        "check at reference case test_data_set_1: input 'x' expects dims [batch, 5, 8], got "
        "[3, 7, 8]: axis 1 is fixed at 5, got 7; axis 1 of 'x' varies in the references (5, 7) "
        "but is not symbolized: add x:1=NAME to symbolize"
    ) in said
    assert "Got invalid dimensions" not in said
    assert not (tmp_path / "o.onnx").exists()


def test_symbolize_names_the_axis_every_reference_sets_elsewhere(tmp_path) -> None:
    model = onnx.parser.parse_model(TRACED)
    refs = write_cases(tmp_path / "seven", [(3, 7, 8)])
    with pytest.raises(PassError) as info:
        onnxsurgery.run(model, "symbolize(x:0=batch)", references=refs, provider="cpu")
    assert str(info.value).endswith(
        "axis 1 of 'x' is 7 in the references, 5 in the model, and is not symbolized: "
        "add x:1=NAME to symbolize"
    )
