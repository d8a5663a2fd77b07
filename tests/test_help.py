"""Help as a first-time user reads it: `onnxsurgery -h`, each command's -h, `passes`, `passes NAME`.

rich draws 80 columns in pipes and CI, so every check runs at 80 (and once at 200, where a hard
line break in a docstring shows as a short line).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from typer.testing import CliRunner

from onnxsurgery import create_pass
from onnxsurgery.cli import app
from onnxsurgery.errors import PassOptionError
from onnxsurgery.pipeline import Pass, discover
from onnxsurgery.pipeline.pass_help import describe, doc_problems
from onnxsurgery.validation.references import Case, save_case
from tests.pty_session import onnxsurgery_argv, run_in_pty

runner = CliRunner()
COMMANDS = [[], ["run"], ["passes"], ["inspect"], ["validate"], ["diff"], ["reference"], ["reference", "record"], ["reference", "show"]]
BUILTIN = [name for name, e in discover().items() if e.source.startswith("onnxsurgery.passes.")]


def invoke(*args, columns: int = 80):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": str(columns)})


def assert_fits(text: str, width: int = 80) -> None:
    too_wide = [line for line in text.splitlines() if len(line.rstrip()) > width]
    assert not too_wide, too_wide
    assert "…" not in text


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


def test_an_undocumented_plugin_pass_still_shows_its_options():
    class Plain(Pass):
        """Give the graph a new name."""

        name = "plain"

        def __init__(self, to: str = "renamed", **extra) -> None:  # no annotations import: a real class
            super().__init__(to=to, **extra)

    Plain.__init__.__annotations__["to"] = str  # as a module without `from __future__` has it
    described = describe(Plain)
    assert [(o.name, o.kind, o.default) for o in described.options] == [("to", "str", "renamed")]
    assert described.examples == ["plain"]


def test_passes_table_fits_80_columns_and_cuts_nothing():
    result = invoke("passes")
    assert result.exit_code == 0
    assert_fits(result.stdout)
    words = set(result.stdout.replace(",", " ").split())
    for name in BUILTIN:
        assert name in words
        for option in describe(discover()[name].cls).options:
            assert option.name in words, (name, option.name)
    assert "=..." not in result.stdout and "axes=" not in result.stdout


@pytest.mark.parametrize("name", ["symbolize", "fold-constants"])
def test_passes_name_describes_every_option(name):
    result = invoke("passes", name)
    assert result.exit_code == 0, result.output
    assert_fits(result.stdout)
    text = " ".join(result.stdout.split())
    for option in describe(discover()[name].cls).options:
        assert f"{option.name} " in text
        assert " ".join(f"{option.text} [default: {option.default}]".split()) in text
        assert f"[default: {option.default}]" in result.stdout, "a default is never cut in two"
    assert f'onnxsurgery run model.onnx --passes "{name}' in text
    examples = result.stdout.split("\nExamples\n")[1].split("\n\n")[0].splitlines()
    assert examples and all(line.startswith("  ") for line in examples), "wrapped examples stay indented"


def test_passes_name_of_an_unknown_pass_suggests_one():
    result = invoke("passes", "symbolise")
    assert result.exit_code == 2
    assert "unknown pass 'symbolise'; did you mean 'symbolize'?" in result.output
    assert "Traceback" not in result.output


def test_mistyped_pass_gets_did_you_mean_in_python_and_cli(tmp_path, tiny_model):
    with pytest.raises(PassOptionError, match=r"unknown pass 'symbolise'; did you mean 'symbolize'\?"):
        create_pass("symbolise")
    path = tmp_path / "m.onnx"
    onnx.save(tiny_model, path)
    result = invoke("run", path, "--passes", "cleanup, symbolise(x:0=batch)")
    assert result.exit_code == 2
    assert "did you mean 'symbolize'?" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_usage_writes_arguments_as_metavars():
    assert "Usage: onnxsurgery run [OPTIONS] MODEL" in invoke("run", "-h").stdout
    assert "Usage: onnxsurgery validate [OPTIONS] MODEL" in invoke("validate", "-h").stdout
    assert "Usage: onnxsurgery passes [OPTIONS] [NAME]" in invoke("passes", "-h").stdout
    for command in COMMANDS:
        assert "{" not in invoke(*command, "-h").stdout.split("\n\n")[0]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "root")
def test_help_has_no_hard_line_breaks_and_fits(command):
    assert_fits(invoke(*command, "-h").stdout)
    wide = invoke(*command, "-h", columns=200).stdout
    lines = [line.strip(" │") for line in wide.splitlines()]
    lines = [line for line in lines if not line.startswith(("onnxsurgery ", "--case"))]  # examples
    for line, following in zip(lines, lines[1:], strict=False):
        broken = line and following and line[-1].isalnum() and following[0].islower()
        assert not broken, f"sentence broken after {line!r}"


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "root")
def test_every_command_help_has_examples(command):
    lines = [line.rstrip() for line in invoke(*command, "-h").stdout.splitlines()]
    assert " Examples:" in lines, lines
    example = lines[lines.index(" Examples:") + 1]
    assert example.startswith("   onnxsurgery ") and " ".join(command) in example


def test_defaults_read_alike_and_human():
    run_help = " ".join(invoke("run", "-h", columns=200).stdout.split())
    validate_help = " ".join(invoke("validate", "-h", columns=200).stdout.split())
    for text in (run_help, validate_help):
        assert "Absolute tolerance of floating outputs. [default: 0.0001]" in text
        assert "Relative tolerance of floating outputs. [default: 0.001]" in text
        assert "(default" not in text and "e+0" not in text
        assert "--tol" in text
    assert "max_elements=2147483648" in run_help and "max_loop_trips=10000000" in run_help


def test_bare_command_prints_help_and_exits_0():
    script = Path(sys.executable).with_name("onnxsurgery")
    for argv in ([script], [script, "reference"]):
        done = subprocess.run(argv, capture_output=True, text=True, env={"COLUMNS": "80", "PATH": ""})
        assert done.returncode == 0
        assert "Usage: onnxsurgery" in done.stdout and "Examples:" in done.stdout
        assert done.stderr == ""


def test_help_on_a_terminal_is_the_same_at_80_columns():
    for args in (["-h"], ["run", "-h"], ["passes"], ["passes", "symbolize"]):
        screen = run_in_pty(onnxsurgery_argv(*args), columns=80)
        assert screen.returncode == 0
        assert_fits(screen.text)
        assert "error:" not in screen.text


@pytest.fixture
def refs_off_by_a_hundredth(tmp_path, tiny_model) -> tuple[Path, Path]:
    """tiny_model and one reference case whose y is off by 0.01 everywhere."""
    path = tmp_path / "m.onnx"
    onnx.save(tiny_model, path)
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    case = Case("c", {"x": x, "unused": np.zeros(2, np.float32)}, {"y": np.maximum(x, 0) + 0.01})
    save_case(case, tmp_path / "refs")
    return path, tmp_path / "refs"


def test_run_tol_loosens_one_output_like_validate(refs_off_by_a_hundredth, tmp_path):
    model, refs = refs_off_by_a_hundredth
    base = ["run", model, "-o", tmp_path / "out.onnx", "--passes", "infer-shapes", "--ref", refs, "-q"]
    assert invoke(*base).exit_code == 1
    assert invoke("validate", model, "--ref", refs, "-q").exit_code == 1
    assert invoke(*base, "--tol", "y=0.02").exit_code == 0
    assert invoke("validate", model, "--ref", refs, "--tol", "y=0.02", "-q").exit_code == 0
    assert invoke(*base, "--tol", "y=0.001").exit_code == 1
