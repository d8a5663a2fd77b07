"""The progress line: on a terminal it shows the pass, its stage and the elapsed time; nothing
of it reaches pipes, ``-q`` runs, the printed result or the ``--report`` JSON."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from onnxsurgery import terminal as cli_terminal
from onnxsurgery.cli import app

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "attention_block" / "torchscript"
CHAIN = "symbolize(x:0=batch, x:1=seq), fold-constants"
STAGES = (
    "load: reading model.onnx",
    "symbolize: planning",
    "symbolize: checking on ONNX Runtime",
    "fold-constants: onnxsim",
    "validate: case 1/4",
    "validate: case 4/4",
    "write: ",
)
ELAPSED = re.compile(r"\d:\d\d:\d\d")


def run(tmp_path: Path, monkeypatch, *, terminal: bool, quiet: bool = False) -> tuple[str, str, Path]:
    """Run the chain with --ref and --report; (what stderr's console got, stdout, report path)."""
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=terminal, width=160, highlight=False)
    monkeypatch.setattr(cli_terminal, "err", console)
    report = tmp_path / "report.json"
    args = [
        "run", str(FIXTURE / "model.onnx"), "-o", str(tmp_path / "out.onnx"), "--passes", CHAIN,
        "--ref", str(FIXTURE), "--provider", "cpu", "--report", str(report),
    ] + (["-q"] if quiet else [])
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return buffer.getvalue(), result.output, report


def test_a_terminal_sees_each_pass_its_stage_and_the_elapsed_time(tmp_path, monkeypatch):
    shown, printed, report = run(tmp_path, monkeypatch, terminal=True)
    for stage in STAGES:
        assert stage in shown, stage
    assert ELAPSED.search(shown)
    # Not in the result printed on stdout, nor in the report.
    text = report.read_text()
    json.loads(text)
    for stage in ("planning", "case 1/4", "reading model.onnx"):
        assert stage not in printed
        assert stage not in text


@pytest.mark.parametrize("terminal, quiet", [(False, False), (True, True)], ids=["pipe", "quiet"])
def test_pipes_and_quiet_runs_get_no_progress(tmp_path, monkeypatch, terminal, quiet):
    shown, _, _ = run(tmp_path, monkeypatch, terminal=terminal, quiet=quiet)
    assert not any(stage in shown for stage in STAGES)
    assert not ELAPSED.search(shown)


def test_the_validate_command_counts_cases_on_a_terminal(monkeypatch):
    # The static model runs only the case at its traced size: a mismatch (exit 1), yet every
    # case is counted on the way.
    buffer = io.StringIO()
    monkeypatch.setattr(cli_terminal, "err", Console(file=buffer, force_terminal=True, width=160))
    result = CliRunner().invoke(
        app, ["validate", str(FIXTURE / "model.onnx"), "--ref", str(FIXTURE), "--provider", "cpu"]
    )
    assert result.exit_code == 1, result.output
    assert "validate: case 1/4" in buffer.getvalue()
    assert "validate: case 4/4" in buffer.getvalue()
