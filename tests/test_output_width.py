"""What the command line prints fits 80 columns and says little by default (issue 26, items 7
and 9): tables wrap rather than cut a digit or a name, a default run is a short summary (``-v``
for the detail), no warning twice, no solver symbol (``$o1``), blocker advice that fits the axis."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import onnx.numpy_helper
import onnx.parser
import pytest
from rich.console import Console
from typer.testing import CliRunner

from onnxsurgery.cli import app
from onnxsurgery.validation.arrays import OutputComparison
from onnxsurgery.validation.report import CaseResult, ValidationReport
from tests.pty_session import onnxsurgery_argv, run_in_pty

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
ALEXNET = FIXTURES / "alexnet_view" / "torchscript"
THREE_PASSES = "symbolize, concat-outputs, fold-constants"


def invoke(*args: object, columns: int = 80):
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": str(columns)})


def fits(text: str, width: int = 80) -> None:
    long = [line for line in text.splitlines() if len(line.rstrip()) > width]
    assert not long, "\n".join(long)
    assert "…" not in text, text  # rich's mark of a cell cut short


def _output(name: str, passed: bool, max_abs: float, mismatches: int) -> OutputComparison:
    return OutputComparison(
        name=name, passed=passed, atol=1e-4, rtol=1e-3, shape=(2, 128, 768, 3), size=589824,
        max_abs=max_abs, max_rel=1.23e-3, mean_abs=4.56e-6, mismatches=mismatches,
        worst_index=(1, 127, 767, 2), min_atol=max_abs if not passed else 0.0,
    )  # fmt: skip


def _wide_report() -> ValidationReport:
    """A report whose table needs about 86 columns: long case and output names, big counts."""
    cases = [
        CaseResult(
            f"test_data_set_{k}",
            [
                _output("last_hidden_state", False, 0.4771, 123456),
                _output("pooler_output_with_a_long_name", True, 7.1e-8, 0),
            ],
        )
        for k in (10, 11)
    ]
    return ValidationReport(cases, provider="CPU (asked for)", reference="refs")


def _render(renderable: object, width: int = 80) -> str:
    console = Console(width=width, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def _table_cells(text: str, column: int) -> str:
    """The cells of one column of a rich table, its folded pieces joined in order."""
    pieces = []
    for line in text.splitlines():
        cells = [c.strip() for c in re.split(r"[│┃]", line)][1:-1]
        if line.startswith("│") and cells:
            pieces.append(cells[column])
    return "".join(pieces)


# -- validation table ------------------------------------------------------------------------------


def test_validation_table_wraps_at_80_columns_and_keeps_every_digit():
    text = _render(_wide_report())
    fits(text)
    rows = text.split("────")[-1]
    for number in ("4.77e-1", "123456 (21%)", "7.1e-8", "4.78e-1"):
        assert number in rows, number  # in the table itself, not only in the lines under it
    header = next(line for line in text.splitlines() if line.startswith(" case "))
    start, stop = header.index("output"), header.index("max abs")
    outputs = "".join(line[start:stop].strip() for line in rows.splitlines()[1:13])
    cases = "".join(line[:start].strip() for line in rows.splitlines()[1:13])
    assert "test_data_set_10" in cases and "pooler_output_with_a_long_name" in outputs


def test_min_atol_only_beside_a_failing_row_or_with_verbose():
    passing = ValidationReport(
        [CaseResult("test_data_set_0", [_output("y", True, 7e-8, 0)])], provider="CPU"
    )
    assert "min atol" not in _render(passing)
    assert "min atol" in _render(passing.view(verbose=True))
    failing = _render(_wide_report())
    assert "min atol" in failing
    ok_row = next(line for line in failing.splitlines() if " ok" in line)
    assert not re.search(r"\s0\s+ok", ok_row), ok_row  # no "0" beside a passing row


# -- run: a short default --------------------------------------------------------------------------


def _run(tmp_path: Path, *extra: str):
    return invoke(
        "run", ALEXNET / "model.onnx", "-o", tmp_path / "m.onnx", "--passes", THREE_PASSES,
        "--ref", ALEXNET, "--provider", "cpu", *extra,
    )  # fmt: skip


def test_default_run_is_a_short_summary_within_80_columns(tmp_path):
    result = _run(tmp_path)
    assert result.exit_code == 0, result.output
    text = result.stdout
    fits(text)
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) <= 14, text
    for name in ("symbolize", "concat-outputs", "fold-constants"):
        rows = [line for line in lines if re.match(rf"{name} +\d+\.\d+ ", line)]
        assert len(rows) == 1, text  # one line per pass
    assert "fuse_bn" not in text  # options: -v
    assert "PASS: 3 cases, 3 outputs" in text and "worst max abs" in text
    assert "changed" in text and "yes" not in text.split()


def test_verbose_run_shows_the_detail(tmp_path):
    result = _run(tmp_path, "-v")
    assert result.exit_code == 0, result.output
    fits(result.stdout)
    assert "fuse_bn=True" in result.stdout and "min atol" in result.stdout
    assert "test_data_set_2" in result.stdout


@pytest.mark.parametrize("extra", [(), ("-v",)])
def test_no_warning_is_printed_twice(tmp_path, extra):
    result = _run(tmp_path, *extra)
    assert result.exit_code == 0, result.output
    flat = " ".join(result.stdout.split())
    assert flat.count("nothing to merge") == 1, result.stdout


def test_default_run_in_a_pseudo_terminal_fits_80_columns(tmp_path):
    screen = run_in_pty(
        onnxsurgery_argv(
            "run", str(ALEXNET / "model.onnx"), "-o", str(tmp_path / "m.onnx"),
            "--passes", THREE_PASSES, "--ref", str(ALEXNET), "--provider", "cpu",
        ),
        columns=80,
    )  # fmt: skip
    assert screen.returncode == 0, screen.text
    from tests.pty_session import final_screen

    shown = final_screen(screen.raw)
    fits(shown)
    assert len([line for line in shown.splitlines() if line.strip()]) <= 14, shown


# -- inspect ---------------------------------------------------------------------------------------


def _strided(tmp_path: Path) -> Path:
    """A Conv of stride 8 then a Reshape traced at [1, 32]: after symbolizing h and w the
    Reshape's size is ((h - 8)//8 + 1)*((w - 8)//8 + 1)*2, which the solver holds as $o1*$o2*2."""
    model = onnx.parser.parse_model(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[1, 3, 32, 32] x) => (float[1, 32] y) <int64[2] shape = {1, 32}> {
            c = Conv <kernel_shape = [8, 8], strides = [8, 8]> (x, w)
            y = Reshape (c, shape)
        }
        """
    )
    weight = np.ones((2, 3, 8, 8), np.float32)
    model.graph.initializer.append(onnx.numpy_helper.from_array(weight, "w"))
    path = tmp_path / "strided.onnx"
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("extra", [(), ("-v",)])
def test_no_solver_symbol_reaches_the_user(tmp_path, extra):
    result = invoke("inspect", _strided(tmp_path), "--plan", "symbolize(x:2=h, x:3=w)", *extra)
    assert result.exit_code == 0, result.output
    assert "$o" not in result.stdout, result.stdout
    change = _table_cells(result.stdout, -1)
    assert "[1,((h-8)//8+1)*((w-8)//8+1)*2]" in change.replace(" ", ""), result.stdout
    fits(result.stdout)


def test_long_node_names_fold_whole(tmp_path):
    """BERT's node names (/bert/encoder/layer.0/...) wrap inside their cell, never cut."""
    names = [f"/bert/encoder/layer.{k}/attention/self/Reshape_{k}" for k in range(3)]
    body = "\n".join(
        f"{'y' if k == 2 else f'r{k}'} = Reshape ({'x' if k == 0 else f'r{k - 1}'}, shape)"
        for k in range(3)
    )
    model = onnx.parser.parse_model(
        f"""
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[2, 8, 4] x) => (float[2, 8, 4] y) <int64[3] shape = {{2, 8, 4}}> {{
            {body}
        }}
        """
    )
    for node, name in zip(model.graph.node, names, strict=True):
        node.name = name
    path = tmp_path / "bert_names.onnx"
    onnx.save(model, path)
    result = invoke("inspect", path, "--plan", "symbolize(x:0=batch, x:1=seq)")
    assert result.exit_code == 0, result.output
    fits(result.stdout)
    nodes = _table_cells(result.stdout, 0)
    assert all(name in nodes for name in names), nodes


def test_a_blocker_takes_a_few_lines():
    model = FIXTURES / "pad_loop" / "dynamo" / "model.onnx"
    result = invoke("inspect", model, "--plan", "symbolize(x:0=batch, x:1=seq)")
    assert result.exit_code == 0, result.output
    fits(result.stdout)
    text = result.stdout
    block = text[text.index("blockers") : text.index("outputs:")].strip().splitlines()
    assert len(block) <= 8, text
    assert "node_cat" in block[1] and "re-export with dynamic axes for seq" in " ".join(text.split())


def test_a_channel_axis_is_not_told_to_re_export():
    """The weights fix a Conv's input channels: no export makes them vary."""
    model = ALEXNET / "model.onnx"
    result = invoke("inspect", model, "--plan", "symbolize(x:1=ch)", columns=200)
    assert result.exit_code == 0, result.output
    flat = " ".join(result.stdout.split())
    assert "the model fixes ch at 3" in flat and "leave x:1 out of the symbolized axes" in flat
    assert "re-export" not in flat
