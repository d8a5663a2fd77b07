"""Help as a first-time user reads it: `onnxsurgery -h`, each command's -h, `passes`, `passes NAME`.

rich draws 80 columns in pipes and CI, so every check runs at 80 (and once at 200, where a hard
line break in a docstring shows as a short line).
"""

from __future__ import annotations

import onnx
import pytest
from typer.testing import CliRunner

from onnxsurgery import create_pass
from onnxsurgery.cli import app
from onnxsurgery.errors import PassOptionError

runner = CliRunner()


def invoke(*args, columns: int = 80):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": str(columns)})


def test_mistyped_pass_gets_did_you_mean_in_python_and_cli(tmp_path, tiny_model):
    with pytest.raises(PassOptionError, match=r"unknown pass 'symbolise'; did you mean 'symbolize'\?"):
        create_pass("symbolise")
    path = tmp_path / "m.onnx"
    onnx.save(tiny_model, path)
    result = invoke("run", path, "--passes", "cleanup, symbolise(x:0=batch)")
    assert result.exit_code == 2
    assert "did you mean 'symbolize'?" in result.output
    assert len(result.output.strip().splitlines()) == 1
