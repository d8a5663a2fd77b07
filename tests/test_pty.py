"""The command line as a person runs it: on a real pseudo-terminal, not in a pipe.

A terminal is where the progress line, the hidden cursor and rich's live display exist; every
other CLI test runs with stderr in a pipe and never reaches them (``run`` and ``validate`` once
exited 3 on every terminal while the whole suite passed). Each test here asserts the exit code,
that the progress line was drawn and then erased, and that the cursor is visible again.
"""

from __future__ import annotations

import shutil
import subprocess
import textwrap

import pytest
from pty_session import ROOT, onnxsurgery_argv, run_in_pty

pytestmark = pytest.mark.e2e

FIXTURE = ROOT / "fixtures" / "alexnet_view" / "torchscript"
MERGED = ROOT / "fixtures" / "multi_output_mismatch" / "torchscript"


def _ok(screen, *, progress: str | None) -> None:
    assert "internal error" not in screen.text, screen.text
    assert "Traceback" not in screen.text, screen.text
    assert screen.returncode == 0, screen.text
    assert screen.cursor_restored, screen.raw[-400:]
    if progress is not None:
        assert screen.live_display_used, screen.text
        assert screen.shown_then_erased(progress), screen.text


def test_run_on_a_terminal_shows_and_clears_its_progress_line(tmp_path):
    screen = run_in_pty(onnxsurgery_argv(
        "run", str(FIXTURE / "model.onnx"), "-o", str(tmp_path / "m.onnx"),
        "--passes", "symbolize, fold-constants", "--ref", str(FIXTURE), "--provider", "cpu",
    ))
    _ok(screen, progress="symbolize: planning")
    assert (tmp_path / "m.onnx").is_file()


def test_a_failing_run_on_a_terminal_restores_the_cursor(tmp_path):
    # fixed at batch 4, validated against cases at 2 and 5: a mismatch (exit 1), mid-display
    screen = run_in_pty(onnxsurgery_argv(
        "run", str(FIXTURE / "model.onnx"), "-o", str(tmp_path / "m.onnx"),
        "--passes", "cleanup", "--ref", str(FIXTURE), "--provider", "cpu",
    ))
    assert screen.returncode == 1, screen.text
    assert screen.cursor_restored
    assert "internal error" not in screen.text
    assert not (tmp_path / "m.onnx").exists()


def test_validate_on_a_terminal_counts_its_cases(tmp_path):
    screen = run_in_pty(onnxsurgery_argv(
        "validate", str(FIXTURE / "model.onnx"), "--ref", str(FIXTURE / "test_data_set_0"),
        "--provider", "cpu",
    ))
    _ok(screen, progress="validate: case 1/1")


def test_inspect_on_a_terminal(tmp_path):
    screen = run_in_pty(onnxsurgery_argv("inspect", str(FIXTURE / "model.onnx")))
    _ok(screen, progress=None)
    assert "Reshape" in screen.text


def test_the_readme_sequence_on_a_terminal(tmp_path):
    """run with concat-outputs and --ref, then validate the merged model with the same refs."""
    out = tmp_path / "model.dyn.onnx"
    screen = run_in_pty(onnxsurgery_argv(
        "run", str(MERGED / "model.onnx"), "-o", str(out),
        "--passes", "symbolize(x:0=batch), concat-outputs(flatten=1), fold-constants",
        "--ref", str(MERGED), "--report", str(tmp_path / "run.json"), "--provider", "cpu",
    ))
    _ok(screen, progress="symbolize: planning")
    screen = run_in_pty(onnxsurgery_argv("validate", str(out), "--ref", str(MERGED), "--provider", "cpu"))
    _ok(screen, progress="validate: case 1/")
    screen = run_in_pty(onnxsurgery_argv(
        "validate", str(out), "--against", str(MERGED / "model.onnx"),
        "--ref", str(MERGED / "test_data_set_0"), "--provider", "cpu",
    ))
    _ok(screen, progress=None)


NET = textwrap.dedent(
    """
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.lin = torch.nn.Linear(8, 3)

        def forward(self, x):
            return self.lin(x)
    """
)


def test_reference_record_on_a_terminal(tmp_path):
    import torch

    (tmp_path / "usernet.py").write_text(NET)
    namespace: dict = {}
    exec(NET, namespace)
    torch.onnx.export(
        namespace["Net"]().eval(), (torch.randn(4, 8),), tmp_path / "usernet.onnx",
        dynamo=False, input_names=["x"], output_names=["y"],
    )
    screen = run_in_pty(onnxsurgery_argv(
        "reference", "record", f"{tmp_path / 'usernet.py'}:Net", "-m", str(tmp_path / "usernet.onnx"),
        "-o", str(tmp_path / "refs"), "--case", "x:4x8", "--case", "x:2x8",
    ))
    _ok(screen, progress=None)
    assert sorted(p.name for p in (tmp_path / "refs").iterdir()) == ["test_data_set_0", "test_data_set_1"]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_demo_on_a_terminal(tmp_path):
    # The demo as the README has a new user run it, in a copy of the repository's files (its
    # build/ folder is the copy's own); the .venv is this one's, reached through a link.
    copy = tmp_path / "repo"
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    for name in files:
        source = ROOT / name
        if source.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    (copy / ".venv").symlink_to(ROOT / ".venv")
    screen = run_in_pty(["make", "demo"], cwd=copy, timeout=600)
    _ok(screen, progress="symbolize: planning")
    assert (copy / "build" / "demo" / "model.dyn.onnx").is_file()
    assert "PASS" in screen.text
