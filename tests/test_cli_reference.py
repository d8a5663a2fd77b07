"""onnxsurgery reference record/show: references for models users bring."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from onnxsurgery.cli import app
from onnxsurgery.validation.references import load_cases

runner = CliRunner()

NET = """
import torch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(8, 3)

    def forward(self, x, ids):
        return self.lin(x).view(x.shape[0], -1), ids * 2

def make():
    return Net()
"""


@pytest.fixture
def user_model(tmp_path):
    (tmp_path / "usernet.py").write_text(NET)
    namespace: dict = {}
    exec(NET, namespace)
    net = namespace["Net"]().eval()
    path = tmp_path / "usernet.onnx"
    torch.onnx.export(
        net, (torch.randn(4, 8), torch.zeros(4, 2, dtype=torch.int64)), path,
        dynamo=False, input_names=["x", "ids"], output_names=["y", "twice"],
    )
    return tmp_path, net


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


@pytest.mark.parametrize("attr", ["Net", "make"])
def test_record_then_show_then_validate(user_model, attr):
    root, net = user_model
    out = root / "ref"
    result = invoke(
        "reference", "record", f"{root / 'usernet.py'}:{attr}", "-m", root / "usernet.onnx", "-o", out,
        "--case", "x:4x8; ids:4x2", "--case", "x:2x8;ids:2x2",
    )
    assert result.exit_code == 0, result.output
    assert "wrote" in result.stdout and "test_data_set_1" in result.stdout
    cases = load_cases(out)
    assert [c.inputs["x"].shape for c in cases] == [(4, 8), (2, 8)]
    assert cases[1].inputs["ids"].dtype == np.int64
    with torch.no_grad():
        y, twice = net(torch.from_numpy(cases[1].inputs["x"].copy()), torch.from_numpy(cases[1].inputs["ids"].copy()))
    np.testing.assert_array_equal(cases[1].outputs["y"], y.numpy())
    np.testing.assert_array_equal(cases[1].outputs["twice"], twice.numpy())
    shown = invoke("reference", "show", out)
    assert shown.exit_code == 0 and "x float32[2x8]" in shown.stdout and "twice int64[2x2]" in shown.stdout
    # the references prove symbolize: batch 4 and batch 2 both match
    ran = invoke("run", root / "usernet.onnx", "-o", root / "dyn.onnx", "--passes", "symbolize", "--ref", out, "-q")
    assert ran.exit_code == 0, ran.output


def test_default_case_uses_declared_sizes(user_model):
    root, _ = user_model
    result = invoke("reference", "record", f"{root / 'usernet.py'}:Net", "-m", root / "usernet.onnx", "-o", root / "r")
    assert result.exit_code == 0, result.output
    assert load_cases(root / "r")[0].inputs["x"].shape == (4, 8)


@pytest.mark.parametrize(
    ("module", "case", "fragment"),
    [
        ("usernet.py:Nope", None, "has no attribute 'Nope'"),
        ("missing.py:Net", None, "no such file"),
        ("no_colon", None, "expected MODULE:ATTR"),
        ("usernet.py:Net", "z:4x8", "no input named"),
        ("usernet.py:Net", "x:4xa", "dims must be integers"),
    ],
)
def test_record_errors_are_one_line(user_model, module, case, fragment):
    root, _ = user_model
    args = ["reference", "record", str(root / module) if ":" in module else module, "-m", root / "usernet.onnx", "-o", root / "r"]
    if case:
        args += ["--case", case]
    result = invoke(*args)
    assert result.exit_code == 2
    assert fragment in result.stderr and "Traceback" not in result.output


def test_show_missing(tmp_path):
    result = invoke("reference", "show", tmp_path / "none")
    assert result.exit_code == 2 and "error:" in result.stderr
