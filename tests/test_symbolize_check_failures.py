"""A table folded at a multiple of the traced size, read through an index the plan would make
count (XLNet's relative positions), is refused at the Gather."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import pytest
from onnx import numpy_helper

import onnxsurgery
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
