"""``onnxsurgery validate``: exit codes 0/1/2 and the lines that must and must not appear."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from typer.testing import CliRunner

from onnxsurgery.cli import app
from onnxsurgery.validation.references import Case, save_case
from onnxsurgery.validation.runtime import _probe_cuda

runner = CliRunner()

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
X2 = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 4.0]], dtype=np.float32)
X5 = np.array([[1, 2, 3], [0.5, -1, 4], [0, 0, 0], [-2, 0.25, 1], [8, -4, 0.5]], dtype=np.float32)


def invoke(*args, columns: int = 200):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": str(columns)})


def save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


@pytest.fixture
def good(tmp_path) -> Path:
    return save(onnx.parser.parse_model(NET), tmp_path / "good.onnx")


@pytest.fixture
def broken(tmp_path) -> Path:
    """W[1, 0] + 0.125: output y off by 0.125 * x[:, 1]; z untouched."""
    model = onnx.parser.parse_model(NET)
    init = next(t for t in model.graph.initializer if t.name == "W")
    array = numpy_helper.to_array(init).copy()
    array[1, 0] += 0.125
    init.CopyFrom(numpy_helper.from_array(array, "W"))
    return save(model, tmp_path / "broken.onnx")


@pytest.fixture
def static(tmp_path) -> Path:
    text = NET.replace("float[N, 3] x", "float[2, 3] x").replace("[N,", "[2,")
    return save(onnx.parser.parse_model(text), tmp_path / "static.onnx")


@pytest.fixture
def ref(tmp_path) -> Path:
    for i, x in enumerate((X2, X5)):
        save_case(
            Case("c", {"x": x}, {"y": x @ W + B, "z": np.maximum(x, 0)}), tmp_path / "ref", index=i
        )
    return tmp_path / "ref"


def no_traceback(result) -> None:
    assert "Traceback" not in result.output, result.output


# -- --ref -----------------------------------------------------------------------------------------


def test_pass_exits_0_with_table_and_runtime_line(good, ref) -> None:
    result = invoke("validate", good, "--ref", ref, "--provider", "cpu")
    assert result.exit_code == 0, result.output
    assert "PASS: 2 cases, 4 outputs: all match (atol 1e-4, rtol 1e-3)" in result.stdout
    assert "tolerance: atol 1e-4, rtol 1e-3 (fp32 defaults)" in result.stdout
    assert "runtime: CPU (asked for)" in result.stdout
    assert "FAIL" not in result.stdout and result.stderr == ""


def test_mismatch_exits_1_naming_the_output(broken, ref) -> None:
    result = invoke("validate", broken, "--ref", ref, "--provider", "cpu")
    assert result.exit_code == 1
    no_traceback(result)
    rows = [
        line.split() for line in result.stdout.splitlines() if line.startswith(" test_data_set_")
    ]
    assert rows[0][:2] == ["test_data_set_1", "y"] and rows[0][-1] == "FAIL"  # worst first
    assert [r[-1] for r in rows[2:]] == ["ok", "ok"]
    assert "test_data_set_1 y: 4/10 elements out of tolerance" in result.stdout
    assert result.stderr.startswith(
        f"error: validation against {ref} failed: 2 cases, 4 outputs: 2 mismatches"
    )
    assert len(result.stderr.strip().splitlines()) == 1


def test_report_json_has_every_case_and_output(broken, ref, tmp_path) -> None:
    report = tmp_path / "report.json"
    result = invoke("validate", broken, "--ref", ref, "--provider", "cpu", "--report", report, "-q")
    assert result.exit_code == 1 and result.stdout == ""
    data = json.loads(report.read_text())
    assert data["passed"] is False and data["provider"] == "CPU (asked for)"
    assert [c["name"] for c in data["cases"]] == ["test_data_set_0", "test_data_set_1"]
    y = data["cases"][1]["outputs"][0]
    assert (y["name"], y["max_abs"], y["worst_index"], y["mismatches"]) == ("y", 0.5, [4, 0], 4)
    assert data["cases"][1]["outputs"][1]["passed"] is True


def test_quiet_pass_prints_nothing(good, ref) -> None:
    result = invoke("validate", good, "--ref", ref, "--provider", "cpu", "-q")
    assert result.exit_code == 0 and result.output == ""


def test_per_output_tolerance(broken, ref) -> None:
    assert (
        invoke("validate", broken, "--ref", ref, "--provider", "cpu", "--tol", "y=0.5").exit_code
        == 0
    )
    assert (
        invoke("validate", broken, "--ref", ref, "--provider", "cpu", "--tol", "z=0.5").exit_code
        == 1
    )
    assert (
        invoke("validate", broken, "--ref", ref, "--provider", "cpu", "--atol", "0.6").exit_code
        == 0
    )


def test_size_the_model_does_not_accept_exits_1(static, ref) -> None:
    result = invoke("validate", static, "--ref", ref, "--provider", "cpu", columns=80)
    assert result.exit_code == 1
    assert "did not run" in result.stdout
    assert "input 'x' expects dims [2, 3], got [5, 3]: axis 0 is fixed at 2, got 5" in result.stderr
    assert all(len(line) <= 80 for line in result.stdout.splitlines())


# -- --against -------------------------------------------------------------------------------------


def test_against_on_random_inputs(good, broken) -> None:
    result = invoke(
        "validate", good, "--against", good, "--shape", "x:4x3", "--cases", "3", "--provider", "cpu"
    )
    assert result.exit_code == 0, result.output
    assert "PASS: 3 cases, 6 outputs" in result.stdout and "random_2" in result.stdout
    result = invoke(
        "validate",
        broken,
        "--against",
        good,
        "--shape",
        "x:4x3",
        "--seed",
        "3",
        "--provider",
        "cpu",
    )
    assert result.exit_code == 1
    assert (
        f"error: validation against {good} failed: 1 case, 2 outputs: 1 mismatch (case random_0 output y:"
        in result.stderr
    )


def test_against_on_stored_inputs(good, broken, ref) -> None:
    result = invoke("validate", broken, "--against", good, "--ref", ref, "--provider", "cpu")
    assert result.exit_code == 1
    assert "test_data_set_1 y: 4/10 elements out of tolerance" in result.stdout


def test_against_takes_sizes_from_a_static_model(good, static) -> None:
    assert invoke("validate", good, "--against", static, "--provider", "cpu").exit_code == 0


def test_against_needs_a_size_for_symbolic_dims(good) -> None:
    result = invoke("validate", good, "--against", good, "--provider", "cpu")
    assert result.exit_code == 2
    assert "input 'x' axis 0 is symbolic ('N'); give its size with --shape x:Nx3" in result.stderr
    no_traceback(result)


# -- usage errors: exit 2, one line, no traceback ---------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "nothing to validate against: give --ref PATH or --against OTHER.onnx"),
        (
            ("--ref", "{ref}", "--shape", "x:2x3"),
            "--shape, --seed and --cases are for random inputs",
        ),
        (("--ref", "{ref}", "--tol", "y"), "--tol 'y': expected NAME=ATOL[,RTOL]"),
        (("--ref", "{ref}", "--tol", "nope=1"), "tolerance given for output 'nope'"),
        (("--ref", "{ref}", "--atol", "-1"), "atol must be a number >= 0"),
        (("--ref", "{ref}/missing"), "does not exist"),
        (("--against", "{ref}/none.onnx"), "no such file"),
        (("--against", "{model}", "--shape", "x:2xa"), "--shape 'x:2xa': dims must be integers"),
        (("--ref", "{ref}", "--provider", "tpu"), "provider 'tpu' is not one of auto, cuda, cpu"),
    ],
)
def test_usage_errors_exit_2(good, ref, args, message) -> None:
    args = [a.format(ref=ref, model=good) for a in args]
    if "--provider" not in args:
        args += ["--provider", "cpu"]
    result = invoke("validate", good, *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert result.stderr.startswith("error: ") and len(result.stderr.strip().splitlines()) == 1
    no_traceback(result)


@pytest.mark.parametrize(
    ("ref", "against", "original", "localize", "random", "message"),
    [
        ("r", None, "o.onnx", False, False, "--original is for --ref with --localize"),
        (None, "a.onnx", "o.onnx", True, False, "--original is for --ref with --localize"),
        ("r", None, None, True, False, "--localize with --ref needs the model as exported"),
        (None, None, None, False, False, "nothing to validate against"),
        ("r", None, None, False, True, "are for random inputs with --against"),
        ("r", "a.onnx", None, False, True, "are for random inputs; --ref gives stored inputs"),
    ],
)
def test_option_combinations_validate_cannot_act_on(ref, against, original, localize, random, message) -> None:
    """Every refusal of _check_validate_usage, each checked before anything is read."""
    from onnxsurgery.cli.validate import _check_validate_usage
    from onnxsurgery.errors import UsageError

    paths = [None if p is None else Path(p) for p in (ref, against, original)]
    with pytest.raises(UsageError, match=re.escape(message)):
        _check_validate_usage(*paths, localize, random=random)
    _check_validate_usage(Path("r"), Path("a.onnx"), None, True, random=False)  # fine: --ref inputs for --against
    _check_validate_usage(None, Path("a.onnx"), None, False, random=True)


def test_unreadable_model_exits_2(ref, tmp_path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    result = invoke("validate", bad, "--ref", ref)
    assert result.exit_code == 2 and "not an ONNX model" in result.stderr
    no_traceback(result)


@pytest.mark.skipif(_probe_cuda()[0], reason="CUDA loads on this machine")
def test_provider_cuda_fails_clearly_without_cuda(good, ref) -> None:
    result = invoke("validate", good, "--ref", ref, "--provider", "cuda")
    assert result.exit_code == 2
    assert (
        "--provider cuda: CUDA cannot load here" in result.stderr
        and "--provider cpu" in result.stderr
    )
    no_traceback(result)


@pytest.mark.skipif(_probe_cuda()[0], reason="CUDA loads on this machine")
def test_provider_auto_says_why_it_runs_on_cpu(good, ref) -> None:
    result = invoke("validate", good, "--ref", ref)
    assert result.exit_code == 0
    lines = [line for line in result.stdout.splitlines() if line.startswith("runtime: ")]
    assert len(lines) == 1 and lines[0].startswith("runtime: CPU (CUDA unavailable: ")
    assert "Failed to load" not in result.output  # onnxruntime's own noise stays off the terminal


def test_help_lists_validate() -> None:
    result = invoke("validate", "-h")
    assert result.exit_code == 0
    for option in ("--ref", "--against", "--shape", "--seed", "--cases", "--tol", "--report"):
        assert option in result.stdout
