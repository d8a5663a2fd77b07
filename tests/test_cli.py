"""The onnxsurgery command, through typer's CliRunner and once as the installed script."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from typer.testing import CliRunner

from onnxsurgery.cli import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def model_file(tiny_model, tmp_path) -> Path:
    path = tmp_path / "model.onnx"
    onnx.save(tiny_model, path)
    return path


def test_version():
    result = invoke("--version")
    assert result.exit_code == 0
    assert result.stdout.startswith("onnxsurgery ")


def test_help_lists_commands():
    result = invoke("-h")
    assert result.exit_code == 0
    for command in ("run", "passes", "inspect"):
        assert command in result.stdout


def test_passes_lists_the_registry():
    result = invoke("passes")
    assert result.exit_code == 0
    assert "cleanup" in result.stdout and "Remove dead nodes" in result.stdout
    assert "infer-shapes" in result.stdout
    data = json.loads(invoke("passes", "--json").stdout)
    cleanup = next(d for d in data if d["name"] == "cleanup")
    assert cleanup["available"] and cleanup["options"] == ["inputs=True"]


def test_run_writes_default_output_and_report(model_file, tmp_path):
    result = invoke("run", model_file, "--passes", "cleanup, infer-shapes", "--report", tmp_path / "r.json")
    assert result.exit_code == 0, result.output
    out = tmp_path / "model.surgery.onnx"
    assert out.exists() and f"wrote {out}" in result.stdout.replace("\n", "")
    report = json.loads((tmp_path / "r.json").read_text())
    assert [p["name"] for p in report["passes"]] == ["cleanup", "infer-shapes"]
    assert report["ok"] is True and report["passes"][0]["nodes_after"] == 1


def test_run_twice_is_byte_identical(model_file, tmp_path):
    for name in ("a.onnx", "b.onnx"):
        assert invoke("run", model_file, "-o", tmp_path / name, "--passes", "cleanup, infer-shapes", "-q").exit_code == 0
    assert sha(tmp_path / "a.onnx") == sha(tmp_path / "b.onnx")


def test_run_recipe(model_file, tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text('[[pass]]\nname = "cleanup"\n')
    result = invoke("run", model_file, "-o", tmp_path / "o.onnx", "--recipe", recipe, "-q")
    assert result.exit_code == 0 and result.stdout == ""
    assert len(onnx.load(tmp_path / "o.onnx").graph.node) == 1


def bad_inputs(tmp_path: Path, tiny_model) -> dict[str, tuple[Path, str]]:
    (tmp_path / "empty.onnx").write_bytes(b"")
    (tmp_path / "random.onnx").write_bytes(np.random.default_rng(1).bytes(2048))
    data = tiny_model.SerializeToString()
    (tmp_path / "truncated.onnx").write_bytes(data[: len(data) // 2])
    broken = onnx.ModelProto()
    broken.CopyFrom(tiny_model)
    broken.graph.node[1].input[0] = "ghost"
    (tmp_path / "checker.onnx").write_bytes(broken.SerializeToString())
    (tmp_path / "adir.onnx").mkdir()
    return {
        "missing": (tmp_path / "missing.onnx", "no such file"),
        "directory": (tmp_path / "adir.onnx", "is a directory"),
        "empty": (tmp_path / "empty.onnx", "is empty"),
        "random": (tmp_path / "random.onnx", "not an ONNX model"),
        "truncated": (tmp_path / "truncated.onnx", "not an ONNX model"),
        "checker": (tmp_path / "checker.onnx", "fails the ONNX checker"),
    }


@pytest.mark.parametrize("case", ["missing", "directory", "empty", "random", "truncated", "checker"])
def test_bad_input_is_one_line_and_exit_2(case, tmp_path, tiny_model):
    path, fragment = bad_inputs(tmp_path, tiny_model)[case]
    before = sha(path) if path.is_file() else None
    out = tmp_path / "out.onnx"
    result = invoke("run", path, "-o", out, "--passes", "cleanup")
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], result.stderr
    assert "Traceback" not in result.output
    assert not out.exists()
    if before is not None:
        assert sha(path) == before


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--passes", "cleanup(nope=1)"], "unknown option 'nope'"),
        (["--passes", "no-such-pass"], "unknown pass 'no-such-pass'; available passes: "),
        (["--passes", "cleanup("], "expected an option name"),
        ([], "no passes given"),
        (["--passes", "cleanup", "--recipe", "r.toml"], "either --passes or --recipe"),
        (["--passes", "cleanup", "--provider", "tpu"], "provider 'tpu' is not one of auto, cuda, cpu"),
    ],
)
def test_usage_errors_exit_2(model_file, tmp_path, args, fragment):
    result = invoke("run", model_file, "-o", tmp_path / "o.onnx", *args)
    assert result.exit_code == 2
    assert fragment in result.stderr and "Traceback" not in result.output
    assert not (tmp_path / "o.onnx").exists()


def test_output_equal_to_input_is_refused(model_file):
    before = sha(model_file)
    result = invoke("run", model_file, "-o", model_file, "--passes", "cleanup")
    assert result.exit_code == 2 and "would overwrite the input" in result.stderr
    assert sha(model_file) == before


def test_inspect(model_file):
    result = invoke("inspect", model_file)
    assert result.exit_code == 0
    assert "[4, 3]" in result.stdout and "Relu" in result.stdout
    data = json.loads(invoke("inspect", model_file, "--json").stdout)
    assert data["inputs"] == [{"name": "x", "dtype": "float32", "dims": [4, 3]}, {"name": "unused", "dtype": "float32", "dims": [2]}]
    assert data["op_counts"] == {"Neg": 1, "Relu": 1} and data["nodes"] == 2


def test_inspect_bad_file(tmp_path):
    result = invoke("inspect", tmp_path / "nope.onnx")
    assert result.exit_code == 2 and "no such file" in result.stderr


def test_installed_script_help():
    script = Path(sys.executable).with_name("onnxsurgery")
    done = subprocess.run([script, "--help"], capture_output=True, text=True, check=True)
    assert "Usage: onnxsurgery" in done.stdout and "run" in done.stdout


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_inspect_previews_symbolize_on_a_static_model():
    result = invoke("inspect", FIXTURES / "alexnet_view" / "dynamo" / "model.onnx")
    assert result.exit_code == 0, result.output
    assert "symbolize: batch (traced 4)" in result.stdout
    assert "[4, -1]" in result.stdout and "[batch, -1]" in result.stdout
    assert "logits [batch, 10]" in result.stdout


def test_inspect_plan_shows_blockers_and_writes_nothing(tmp_path):
    model = FIXTURES / "pad_loop" / "dynamo" / "model.onnx"
    before = sha(model)
    result = invoke("inspect", model, "--plan", "symbolize(x:0=batch, x:1=seq)", "--json")
    assert result.exit_code == 0, result.output
    (plan,) = json.loads(result.stdout)["analysis"]
    (blocker,) = plan["blockers"]
    assert blocker["node"] == "node_cat" and "unrolled" in blocker["why"]
    assert sha(model) == before
    assert sorted(p.name for p in model.parent.iterdir() if p.suffix == ".onnx") == ["model.onnx"]


def test_inspect_plan_errors(model_file):
    assert "offers no preview" in invoke("inspect", model_file, "--plan", "cleanup").stderr
    result = invoke("inspect", model_file, "--plan", "symbolize(nope:0=batch)")
    assert result.exit_code == 2 and "no graph input 'nope'; the model's inputs are x, unused" in result.stderr
    assert "symbolize:" not in invoke("inspect", model_file, "--no-plan").stdout


@pytest.mark.parametrize(
    ("recipe", "fixture"),
    [("dynamic-batch.toml", "alexnet_view"), ("merge-outputs.toml", "multi_output_mismatch")],
)
def test_shipped_recipes_repair_their_fixture(recipe, fixture, tmp_path):
    recipes = Path(__file__).resolve().parents[1] / "passes" / "recipes"
    ref = FIXTURES / fixture / "torchscript"
    result = invoke("run", ref / "model.onnx", "-o", tmp_path / "o.onnx", "--recipe", recipes / recipe, "--ref", ref, "-q")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "o.onnx").exists()
