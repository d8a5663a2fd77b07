"""onnxsurgery reference record: the inputs it makes and the cases it refuses (issue 26, items 5-6).

Every test runs the command as a user does (typer's CliRunner) on small torch modules written
to tmp_path and exported in the test: bad input is exit 2 with one line, never a traceback.
"""

from __future__ import annotations

import sys

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper
from typer.testing import CliRunner

from onnxsurgery.cli import app
from onnxsurgery.errors import UsageError
from onnxsurgery.model.signature import parse_shape_spec
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

class Fresh(Net):
    # what users write: the class the model came from, built with fresh random weights
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 3)
"""

BERT = """
import torch

class TinyBert(torch.nn.Module):
    # BERT's inputs: token ids over a vocabulary of 50, an attention mask, token types (2)
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.words = torch.nn.Embedding(50, 8)
        self.types = torch.nn.Embedding(2, 8)
        self.qkv = torch.nn.Linear(8, 24)

    def forward(self, input_ids, attention_mask, token_type_ids):
        h = self.words(input_ids) + self.types(token_type_ids)
        q, k, v = self.qkv(h).chunk(3, dim=-1)
        bias = (1.0 - attention_mask[:, None, :].to(h.dtype)) * -10000.0
        scores = torch.softmax(q @ k.transpose(1, 2) / 8**0.5 + bias, dim=-1)
        return scores @ v
"""


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


@pytest.fixture
def net(tmp_path):
    (tmp_path / "usernet.py").write_text(NET)
    namespace: dict = {}
    exec(NET, namespace)
    torch.onnx.export(
        namespace["Net"]().eval(), (torch.randn(4, 8), torch.zeros(4, 2, dtype=torch.int64)),
        tmp_path / "usernet.onnx", dynamo=False, input_names=["x", "ids"], output_names=["y", "twice"],
    )  # fmt: skip
    return tmp_path


@pytest.fixture
def bert(tmp_path):
    (tmp_path / "bert.py").write_text(BERT)
    namespace: dict = {}
    exec(BERT, namespace)
    ids = torch.zeros(2, 16, dtype=torch.int64)
    torch.onnx.export(
        namespace["TinyBert"]().eval(), (ids, torch.ones_like(ids), ids), tmp_path / "bert.onnx", dynamo=False,
        input_names=["input_ids", "attention_mask", "token_type_ids"], output_names=["hidden"],
    )  # fmt: skip
    return tmp_path


def record(root, *args, module="usernet.py:Net", model="usernet.onnx", out="refs"):
    return invoke("reference", "record", f"{root / module}", "-m", root / model, "-o", root / out, *args)


def one_line_error(result, code=2):
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


# --- item 6: shape syntax people already type ----------------------------------------------


@pytest.mark.parametrize("dims", ["1x3x224x224", "1,3,224,224", "[1,3,224,224]", "[1, 3, 224, 224]"])
def test_every_spelling_of_dims_reads_the_same(dims):
    assert parse_shape_spec(f"x:{dims}") == ("x", [1, 3, 224, 224])
    assert parse_shape_spec(f"input:0:{dims}") == ("input:0", [1, 3, 224, 224])


def test_a_bracketed_scalar():
    assert parse_shape_spec("x:[]") == ("x", [])


def test_case_takes_polygraphy_and_onnxsim_spellings(net):
    result = record(net, "--case", "x:[4,8]; ids:[4,2]", "--case", "x:2,8;ids:2,2")
    assert result.exit_code == 0, result.output
    assert [c.inputs["x"].shape for c in load_cases(net / "refs")] == [(4, 8), (2, 8)]


def test_a_bad_case_names_the_case_flag_and_the_spellings(net):
    line = one_line_error(record(net, "--case", "x:[4,a]"))
    assert "--case 'x:[4,a]'" in line and "--shape" not in line
    assert "x:1x3x224x224, x:1,3,224,224 or x:[1,3,224,224]" in line


# --- item 5: what reference record refuses -------------------------------------------------


def test_a_case_of_the_wrong_rank_is_refused_before_torch_runs(net):
    line = one_line_error(record(net, "--case", "x:4x8x1; ids:4x2"))
    assert "input 'x' has 2 dims in the model (exported at x:4x8), got 3 (x:4x8x1)" in line
    assert "your module raised" not in line


def test_an_error_in_the_module_is_exit_2_naming_it(net):
    line = one_line_error(record(net, "--case", "x:4x9; ids:4x2"))
    assert "your module raised RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x9 and 8x3)" in line
    assert "the model was exported at x:4x8, ids:4x2" in line
    assert not (net / "refs").exists()


def test_without_torch_it_says_how_to_install_it(net, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ModuleNotFoundError
    line = one_line_error(record(net))
    assert line == "error: reference record needs torch: pip install 'onnxsurgery[torch]'"


def test_fresh_weights_are_refused_before_anything_is_written(net):
    line = one_line_error(record(net, "--case", "x:2x8; ids:2x2", module="usernet.py:Fresh"))
    assert "the ONNX model does not match the module at its traced size (x:4x8, ids:4x2): output y:" in line
    assert "the module's weights differ from the exported model's" in line
    assert not (net / "refs").exists()
    # --no-check records them anyway (a user who knows why they differ)
    assert record(net, "--no-check", module="usernet.py:Fresh").exit_code == 0


def test_the_check_runs_at_the_traced_size_when_no_case_is_there(net):
    result = record(net, "--case", "x:2x8; ids:2x2")
    assert result.exit_code == 0, result.output
    assert "checked: the ONNX model on ONNX Runtime matches the module at the traced size (x:4x8, ids:4x2)" in result.stdout
    assert [c.inputs["x"].shape for c in load_cases(net / "refs")] == [(2, 8)]  # the check's case is not stored


def test_recording_into_a_folder_with_cases_says_so(net):
    first = record(net, "--case", "x:4x8;ids:4x2", "--case", "x:2x8;ids:2x2")
    assert first.exit_code == 0 and "note:" not in first.stdout
    again = record(net, "--case", "x:3x8;ids:3x2", "--case", "x:5x8;ids:5x2")
    assert again.exit_code == 0, again.output
    assert (
        f"note: {net / 'refs'} held 2 cases (test_data_set_0..1); the new ones are test_data_set_2..3 "
        "(--overwrite replaces the old ones)"
    ) in again.stdout
    assert [c.inputs["x"].shape[0] for c in load_cases(net / "refs")] == [4, 2, 3, 5]
    over = record(net, "--overwrite", "--case", "x:6x8;ids:6x2")
    assert over.exit_code == 0, over.output
    assert "held 4 cases (test_data_set_0..3); --overwrite replaced them with test_data_set_0" in over.stdout
    assert [c.inputs["x"].shape[0] for c in load_cases(net / "refs")] == [6]


def test_cases_go_to_a_folder_never_a_stream_or_a_file(net, monkeypatch):
    monkeypatch.chdir(net)
    dash = invoke("reference", "record", "usernet.py:Net", "-m", "usernet.onnx", "-o", "-", "--case", "x:4x8;ids:4x2")
    one_line_error(dash)
    assert "cases are test_data_set_N folders, not a stream" in dash.stderr
    assert not (net / "-").exists()
    (net / "file").write_text("keep")
    one_line_error(record(net, "--case", "x:4x8;ids:4x2", out="file"))
    assert (net / "file").read_text() == "keep"


# --- item 5: the inputs it makes ------------------------------------------------------------


def test_bert_inputs_are_ids_over_the_vocabulary_and_a_mask(bert):
    result = record(bert, module="bert.py:TinyBert", model="bert.onnx")
    assert result.exit_code == 0, result.output
    (case,) = load_cases(bert / "refs")
    ids, mask, types = (case.inputs[n] for n in ("input_ids", "attention_mask", "token_type_ids"))
    assert ids.min() >= 0 and ids.max() < 50 and len(np.unique(ids)) > 4  # not [0, 4): the vocabulary
    assert set(np.unique(mask)) <= {0, 1} and (mask[:, 0] == 1).all()  # a mask: 0/1, a token per row
    assert set(np.unique(types)) <= {0, 1}  # the token type table has 2 rows


def test_val_range_sets_an_inputs_values(bert):
    result = record(bert, "--val-range", "input_ids:40,42", "--val-range", "token_type_ids:[1,1]",
                    module="bert.py:TinyBert", model="bert.onnx")  # fmt: skip
    assert result.exit_code == 0, result.output
    (case,) = load_cases(bert / "refs")
    assert set(np.unique(case.inputs["input_ids"])) == {40, 41, 42}  # both ends included
    assert (case.inputs["token_type_ids"] == 1).all()


def test_val_range_of_floats(net):
    assert record(net, "--val-range", "x:2.5,3").exit_code == 0
    x = load_cases(net / "refs")[0].inputs["x"]
    assert x.dtype == np.float32 and x.min() >= 2.5 and x.max() <= 3


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("ids", "--val-range 'ids' must read NAME:LOW,HIGH"),
        ("ids:3,1", "with LOW <= HIGH"),
        ("ids:0.2,0.7", "--val-range ids:0.2,0.7 holds no whole number for int64 input 'ids'"),
        ("ids:0,1e30", "is outside what int64 input 'ids' holds (-9223372036854775808..9223372036854775807)"),
        ("nope:0,1", "no input named; inputs: ['x', 'ids']"),
    ],
)
def test_bad_val_range(net, spec, fragment):
    assert fragment in one_line_error(record(net, "--val-range", spec))


def test_input_values_from_npy_and_pb_files(net):
    ids = np.arange(8, dtype=np.int64).reshape(4, 2)
    np.save(net / "ids.npy", ids)
    x = np.full((4, 8), 0.5, dtype=np.float32)
    (net / "x.pb").write_bytes(numpy_helper.from_array(x, name="x").SerializeToString())
    result = record(net, "--input", f"ids={net / 'ids.npy'}", "--input", f"x={net / 'x.pb'}")
    assert result.exit_code == 0, result.output
    (case,) = load_cases(net / "refs")
    np.testing.assert_array_equal(case.inputs["ids"], ids)
    np.testing.assert_array_equal(case.inputs["x"], x)
    np.testing.assert_array_equal(case.outputs["twice"], ids * 2)


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("ids=missing.npy", "--input ids: no such file"),
        ("ids", "must read NAME=FILE with a .npy or .pb file"),
        ("ids=int32.npy", "input 'ids': the given values are int32, the model declares int64"),
        ("ids=rank3.npy", "--input ids: input 'ids' has 2 dims in the model (exported at ids:4x2), got 3"),
    ],
)
def test_bad_input_files(net, spec, fragment, monkeypatch):
    monkeypatch.chdir(net)
    np.save(net / "int32.npy", np.zeros((4, 2), dtype=np.int32))
    np.save(net / "rank3.npy", np.zeros((4, 2, 1), dtype=np.int64))
    assert fragment in one_line_error(record(net, "--input", spec))


def test_an_input_read_as_a_size_is_not_made_up(tmp_path):
    (tmp_path / "reshaper.py").write_text(
        "import torch\n"
        "class Net(torch.nn.Module):\n"
        "    def forward(self, x, shape):\n"
        "        return x.reshape(shape.tolist())\n"
    )
    model = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[2, 6] x, int64[2] shape) => (float[3, 4] y) { y = Reshape(x, shape) }
    """)
    onnx.save(model, tmp_path / "reshaper.onnx")
    line = one_line_error(record(tmp_path, module="reshaper.py:Net", model="reshaper.onnx"))
    assert "input 'shape' is read as a size (input 1 of Reshape 'y')" in line
    assert "--input shape=FILE.npy" in line
    np.save(tmp_path / "shape.npy", np.array([3, 4]))
    ok = record(tmp_path, "--input", f"shape={tmp_path / 'shape.npy'}", module="reshaper.py:Net", model="reshaper.onnx")
    assert ok.exit_code == 0, ok.output


@pytest.mark.parametrize("text", ["x:[4,a]", "x"])
def test_a_bad_spec_names_its_flag_and_every_spelling(text):
    with pytest.raises(UsageError, match="^--case ") as caught:
        parse_shape_spec(text, flag="--case")
    assert "1x3x224x224, x:1,3,224,224 or x:[1,3,224,224]" in str(caught.value)
