"""A failed symbolize check is a planning bug, said as one: the message names the plan's decision
that broke (the node, the rewrite old -> new in the input symbols, the size it ran at), whether
ONNX Runtime failed on the rewritten model or its outputs came out wrong; ONNX Runtime's own
message stays in the report. And a table folded at a multiple of the traced size, read through
an index the plan would make count (XLNet's relative positions), is refused at the Gather."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import pytest
from onnx import numpy_helper
from typer.testing import CliRunner

import onnxsurgery
from onnxsurgery.cli import app
from onnxsurgery.errors import PassError
from onnxsurgery.passes.symbolize import Symbolize

HEAD = '<ir_version: 8, opset_import: ["" : 17]>'


def gather_model(indices: list[int], rows: int, constant_table: bool = False) -> onnx.ModelProto:
    """y = x + table[indices] at seq 8: ``indices`` count along seq, so the plan rewrites them
    to count at every size; ``table`` (``rows`` rows) stays as it is, an initializer or (with
    ``constant_table``) a Constant node, as a trace folds one."""
    table = (np.arange(rows * 4, dtype=np.float32).reshape(rows, 4) / 10).round(1)
    folded = ""
    if constant_table:
        values = ", ".join(f"{v:.1f}" for v in table.ravel())
        folded = f"t = Constant <value = float[{rows}, 4] {{{values}}}> ()"
    idx = ", ".join(map(str, indices))
    m = onnx.parser.parse_model(f"""{HEAD}
    g (float[1, 8, 4] x) => (float[1, 8, 4] y) {{
      idx = Constant <value = int64[8] {{{idx}}}> ()
      {folded}
      rows = Gather <axis = 0> (t, idx)
      y = Add (x, rows)
    }}""")
    if not constant_table:
        m.graph.initializer.append(numpy_helper.from_array(table, "t"))
    for node in m.graph.node:  # named as exporters name them, so ONNX Runtime names them too
        node.name = f"/m/{node.output[0]}"
    onnx.checker.check_model(m)
    return m


def symbolize(model: onnx.ModelProto, references=None, **options) -> PassError:
    ctx = onnxsurgery.PassContext(provider="cpu", references=references)
    with pytest.raises(PassError) as info:
        Symbolize(**{"x:1": "seq"}, **options)(model, ctx)
    return info.value


def write_case(root, k: int, x: np.ndarray, y: np.ndarray) -> None:
    case = root / f"test_data_set_{k}"
    case.mkdir(parents=True)
    (case / "input_0.pb").write_bytes(numpy_helper.from_array(x, "x").SerializeToString())
    (case / "output_0.pb").write_bytes(numpy_helper.from_array(y, "y").SerializeToString())


def test_a_run_failure_names_the_rewrite_that_broke():
    """arange(8) into an 8-row table: the plan makes the index count to seq, the table stays;
    at seq=9 ONNX Runtime fails on the Gather, and the message says which rewrite did it."""
    error = symbolize(gather_model(list(range(8)), 8))
    text = str(error)
    assert text.startswith("check at seq=9: the plan's rewrite broke Gather '/m/rows'"), text
    assert "its input 'idx': int64[8] -> int64[seq] (Range on axis 0)" in text
    assert "ONNX Runtime failed there: indices element out of data bounds, idx=8" in text
    assert "a planning bug of symbolize" in text and "leave x:1 out" in text
    assert "\n" not in text
    assert error.node == "/m/rows"
    # ONNX Runtime's own words stay in the report (--report)
    assert "Non-zero status code returned while running Gather node" in error.report["onnx_runtime"]
    assert error.report["check"] == "at seq=9"


def test_wrong_values_name_the_rewrite_they_depend_on(tmp_path):
    """Positions 7..0 (torch: seq-1..0) read as a count from a fixed 7: at seq=12 the index runs
    to -4 and Gather wraps it round; the outputs are wrong, not an error, and the reference case
    shows it: the message names the rewrite the wrong output depends on."""
    rows = 32
    table = (np.arange(rows * 4, dtype=np.float32).reshape(rows, 4) / 10).round(1)
    for k, seq in enumerate((8, 12)):
        x = np.random.default_rng(k).standard_normal((1, seq, 4)).astype(np.float32)
        write_case(tmp_path / "refs", k, x, x + table[np.arange(seq)[::-1]])
    error = symbolize(gather_model(list(range(7, -1, -1)), rows), references=tmp_path / "refs")
    text = str(error)
    assert text.startswith(
        "check at reference case test_data_set_1 (seq=12): output 'y' does not match"
    ), text
    assert (
        "the plan's rewrite(s) these outputs depend on (1): Gather '/m/rows' (input 'idx'): "
        "int64[8] -> int64[seq] (Range on axis 0)" in text
    )
    assert "a planning bug of symbolize" in text and "\n" not in text


def test_a_table_folded_at_twice_the_traced_size_is_refused_at_the_gather():
    """A folded 16-row table (2 x traced seq) read by arange(8): the plan would make the index
    count and keep the table, wrong past seq 16: a blocker names the Gather and the table."""
    error = symbolize(gather_model(list(range(8)), 16, constant_table=True))
    text = str(error)
    assert "Gather '/m/rows' (input 'idx'): its constant indices count along seq" in text, text
    assert "constant 't' float32[16, 4] whose 16 entries on axis 0 are 2 x traced seq" in text
    assert error.node == "/m/rows"


def test_a_folded_table_of_no_traced_length_is_no_blocker():
    """The same with 12 rows (no multiple of the traced 8): nothing ties it to seq, the index is
    rewritten and the check runs (seq 7 and 9 fit in 12 rows)."""
    result = Symbolize(**{"x:1": "seq"})(
        gather_model(list(range(8)), 12, constant_table=True), onnxsurgery.PassContext(provider="cpu")
    )
    assert result.modified
    assert any("int64[8] -> int64[seq]" in d.message for d in result.diagnostics)


def test_the_cli_says_the_decision_in_one_line_exit_2(tmp_path):
    path = tmp_path / "model.onnx"
    onnx.save(gather_model(list(range(8)), 8), path)
    got = CliRunner().invoke(
        app, ["run", str(path), "-o", str(tmp_path / "out.onnx"), "--passes", "symbolize(x:1=seq)"],
        env={"COLUMNS": "300"},
    )  # fmt: skip
    assert got.exit_code == 2, got.output
    lines = [line for line in got.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "the plan's rewrite broke Gather '/m/rows'" in lines[0], got.output
    assert "Traceback" not in got.output
    assert not (tmp_path / "out.onnx").exists()


@pytest.mark.e2e
@pytest.mark.parametrize("batch", [1, 2])
def test_xlnet_torchscript_is_refused_at_its_relative_shift_gather(batch, tmp_path):
    """transformers' XLNetModel (tiny config) exported by TorchScript at seq 8: symbolize(*:0=
    batch, *:1=seq) used to exit 0 and fail on ONNX Runtime from seq 16 on; now it is refused,
    naming the Gather and the 2 x seq table. Kept at its traced seq (strict=false), it matches
    torch at other batches."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.XLNetConfig(vocab_size=64, d_model=32, n_layer=2, n_head=4, d_inner=64)
    net = transformers.XLNetModel(cfg).eval()

    class Wrapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = net

        def forward(self, input_ids, attention_mask):  # noqa: ANN001
            return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    def feeds(b: int) -> tuple:
        ids = torch.randint(3, 64, (b, 8))
        return ids, torch.ones_like(ids)

    wrapped = Wrapped().eval()
    path = tmp_path / "xlnet.onnx"
    torch.onnx.export(
        wrapped, feeds(batch), str(path), input_names=["input_ids", "attention_mask"],
        output_names=["y"], dynamo=False, opset_version=17,
    )  # fmt: skip
    model = onnx.load(path)
    ctx = onnxsurgery.PassContext(provider="cpu")
    with pytest.raises(PassError) as info:
        Symbolize(**{"*:0": "batch", "*:1": "seq"})(model, ctx)
    text = str(info.value)
    assert "Gather nodes (/m/layer.0/rel_attn/Gather, /m/layer.1/rel_attn/Gather)" in text, text
    assert "whose 16 entries on axis 0 are 2 x traced seq" in text
    result = Symbolize(**{"*:0": "batch", "*:1": "seq"}, strict=False)(model, ctx)
    ids, mask = feeds(3)
    with torch.no_grad():
        want = wrapped.eval()(ids, mask).numpy()
    got = onnxsurgery.validation.runtime.run_model(
        onnxsurgery.validation.runtime.create_session(result.model, "cpu"),
        {"input_ids": ids.numpy(), "attention_mask": mask.numpy()},
    )["y"]
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-3)


def test_running_out_of_memory_at_a_check_size_is_no_planning_bug():
    """GLM-5 next by TorchScript under the sweep's 8 GB address-space limit: ONNX Runtime's
    arena failed to allocate 384 MiB at batch 3, and the check blamed the rewrite upstream
    ("a planning bug of symbolize"); without the limit the same run passes. Running out of
    memory says nothing of the plan, and the message says so."""
    from onnxsurgery.passes.symbolize.ort_failure import PlanDecisions, ort_failure
    from onnxsurgery.passes.symbolize.plan import plan_symbolize

    model = gather_model(list(range(8)), 8)
    plan = plan_symbolize(model, {"x": {1: "seq"}})
    assert plan.changes  # the indices, upstream of the Add that failed
    ort = (
        "[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Non-zero status code returned while "
        "running Add node. Name:'/m/y' Status Message: /onnxruntime_src/onnxruntime/core/"
        "framework/bfc_arena.cc:360 void* onnxruntime::BFCArena::AllocateRawInternal(size_t, "
        "bool, onnxruntime::Stream*) Failed to allocate memory for requested buffer of size "
        "402653184"
    )
    decisions = PlanDecisions(changes=plan.changes, traced={"seq": 8}, axes={"x": {1: "seq"}})
    error = ort_failure("at seq=9", RuntimeError(ort), model, decisions)
    assert "ran out of memory at '/m/y'" in str(error), str(error)
    assert "says nothing of the plan" in str(error)
    assert "planning bug" not in str(error)
