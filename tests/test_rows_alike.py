"""Two readings of a size that give one set of values (issue 30, PVT by TorchScript at batch 1).

PVT interpolates its position table with ``reshape(1, h, w, -1)``: at batch 1 the 1 equals the
batch, so symbolize read it fixed as traced or following the batch, the table then repeated over
the batch's rows. The original model run row by row at batch 2 and 3 matched both readings, as
did the reference case at batch 6 the refusal asked for: no reference could decide, since
repeating a row that the Add broadcasts anyway gives the same values at every batch. Where the
sizes read as a batch whose rows the graph shows independent, and every reading matches the
cases at a batch other than the traced one (a size that counted rows, a Slice, a Reshape folding
them, a sum, would show there), the sizes stay fixed as traced: PVT passes plainly by
TorchScript at batch 1, as re-export does.
"""

from __future__ import annotations

import numpy as np
import onnx.parser
import pytest
from onnx import numpy_helper
from sweep_cases import scored_case

import onnxsurgery
from onnxsurgery.passes.symbolize import Symbolize
from onnxsurgery.validation.runtime import run_model


def _table_added(batch: int) -> onnx.ModelProto:
    """A [1, 8] table viewed as ``[1, *x.shape[1:]]`` (a Concat of a 1 and a Shape) and added to
    x [batch, 2, 4]."""
    model = onnx.parser.parse_model(f"""<ir_version: 8, opset_import: ["" : 17]>
    net (float[{batch}, 2, 4] x) => (float y) {{
      shape = Shape <start = 1> (x)
      s = Concat <axis = 0> (one, shape)
      t = Reshape (table, s)
      y = Add (x, t)
    }}""")
    consts = {"one": np.array([1]), "table": np.arange(8, dtype=np.float32).reshape(1, 8)}
    model.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in consts.items())
    for i, node in enumerate(model.graph.node):
        node.name = f"{node.op_type}_{i}"
    return model


def test_a_table_of_one_row_viewed_at_batch_1_stays_one_row():
    """Refused before: fixed or following the batch, the rows by row matching both alike."""
    result = Symbolize(**{"x:0": "batch"})(_table_added(1), onnxsurgery.PassContext(provider="cpu"))
    assert any("kept fixed as traced" in str(d) for d in result.diagnostics), result.diagnostics
    x = np.random.default_rng(1).standard_normal((5, 2, 4)).astype(np.float32)
    got = run_model(result.model, {"x": x}, provider="cpu")["y"]
    np.testing.assert_allclose(got, x + np.arange(8, dtype=np.float32).reshape(1, 2, 4))


@pytest.mark.sweep_rows
def test_pvt_passes_by_torchscript_at_batch_1():
    assert scored_case("pvt.base", "torchscript", 1)["symbolize"]["status"] == "pass"
