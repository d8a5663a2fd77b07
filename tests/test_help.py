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
from onnxsurgery.pipeline import Pass, discover
from onnxsurgery.pipeline.pass_help import describe, doc_problems

runner = CliRunner()
BUILTIN = [name for name, e in discover().items() if e.source.startswith("onnxsurgery.passes.")]


def invoke(*args, columns: int = 80):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": str(columns)})


@pytest.mark.parametrize("name", BUILTIN)
def test_every_builtin_pass_documents_exactly_its_options(name):
    cls = discover()[name].cls
    assert doc_problems(cls) == []
    described = describe(cls)
    assert described.summary and described.details, "one line and a short paragraph"
    assert all(o.text for o in described.options), "one sentence per option"
    assert len(described.details) < 600, "algorithm notes belong in the module docstring"


def test_doc_problems_names_a_missing_an_extra_and_a_wrong_default():
    class Drifted(Pass):
        """Do nothing.

        Options:
            a (int, default 2): One.
            gone (bool): Two.
        """

        name = "drifted"

        def __init__(self, *, a: int = 1, b: bool = True) -> None:
            super().__init__(a=a, b=b)

    problems = doc_problems(Drifted)
    assert "option 'b' has no entry under Options:" in problems
    assert "entry 'gone' documents no option" in problems
    assert any("'a'" in p and "default" in p for p in problems)


def test_mistyped_pass_gets_did_you_mean_in_python_and_cli(tmp_path, tiny_model):
    with pytest.raises(PassOptionError, match=r"unknown pass 'symbolise'; did you mean 'symbolize'\?"):
        create_pass("symbolise")
    path = tmp_path / "m.onnx"
    onnx.save(tiny_model, path)
    result = invoke("run", path, "--passes", "cleanup, symbolise(x:0=batch)")
    assert result.exit_code == 2
    assert "did you mean 'symbolize'?" in result.output
    assert len(result.output.strip().splitlines()) == 1
