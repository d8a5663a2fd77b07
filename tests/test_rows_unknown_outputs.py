"""symbolize's rows check on outputs whose dims the plan does not know (issue 30, CLIP's text
model by dynamo traced at batch 1): the pooled output is a GatherND of the last hidden state at
each row's end token, its indices a Concat of ``arange(batch)`` (folded to ``[[0]]`` at batch 1)
and the argmax of the ids. GatherND's shape fell back to ONNX shape inference, so the check did
not know the pooled output's batch axis and compared no row of it: every row read row 0, and
batch came out verified ``rows``. The axis is now read off the runs themselves (1 in the run of
one row, longer in the batch's); the row reading row 0 is caught. And the ``[[0]]`` is read
as what it is, the enumeration of the rows, with GatherND's shape from its own rule."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from test_symbolize import parse

import onnxsurgery
from onnxsurgery.errors import PassError
from onnxsurgery.passes.symbolize import Symbolize

CPU = onnxsurgery.PassContext(provider="cpu")


def pooled(batch: int):
    model = parse(
        f"""<ir_version: 8, opset_import: ["" : 17]>
        net (float[{batch}, 4, 3] x, int64[{batch}, 4] ids) => (float[{batch}, 3] y, float[{batch}, 4, 3] z) {{
            am = ArgMax <axis = 1, keepdims = 0> (ids)
            one = Constant <value = int64[1] {{1}}> ()
            amu = Unsqueeze (am, one)
            ind = Concat <axis = 1> (row, amu)
            y = GatherND (x, ind)
            z = Relu (x)
        }}""",
        row=np.arange(batch, dtype=np.int64).reshape(batch, 1),
    )
    for i, node in enumerate(model.graph.node):
        node.name = f"/{node.op_type}_{i}"
    return model


def assert_each_row_pools_its_own(model, rows: int, seed: int) -> None:
    """What torch computes: each row's hidden state at its own end token (the ids' argmax)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, 4, 3)).astype(np.float32)
    ids = rng.integers(0, 100, (rows, 4))
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    y = got.run(["y"], {"x": x, "ids": ids})[0]
    np.testing.assert_allclose(y, x[np.arange(rows), ids.argmax(1)], atol=1e-6)


def test_a_pooled_output_of_unknown_dims_is_checked_row_by_row(monkeypatch):
    # the enumeration is read now (below); with it not read, the rows check must catch the
    # row reading row 0 on the output whose dims the plan does not know
    from onnxsurgery.passes.symbolize import batch_indices, plan

    monkeypatch.setattr(plan, "find_batch_indices", lambda *args: [])
    monkeypatch.setattr(batch_indices, "find_batch_indices", lambda *args: [])
    with pytest.raises(PassError, match=r"rows are not independent: row \d of output 'y'"):
        Symbolize(**{"x:0": "batch", "ids:0": "batch"})(pooled(1), CPU)


def test_the_batch_index_concatenated_beside_a_per_row_index_counts_the_rows():
    # at batch 1 arange(batch) is [[0]], tied to the batch by the Concat beside the argmax:
    # still the enumeration of the rows (a Range), and GatherND's shape has its rule
    result = Symbolize(**{"x:0": "batch", "ids:0": "batch"})(pooled(1), CPU)
    said = " ".join(d.message for d in result.diagnostics)
    assert "(Range on axis 0)" in said and "no symbolic rule for GatherND" not in said
    assert_each_row_pools_its_own(result.model, rows=3, seed=0)


@pytest.mark.parametrize("batch", [2, 3])
def test_traced_at_a_larger_batch_its_rows_still_pass(batch):
    # the rows check reads the pooled output's axis and finds each row its own
    out = Symbolize(**{"x:0": "batch", "ids:0": "batch"})(pooled(batch), CPU).model
    assert_each_row_pools_its_own(out, rows=5, seed=1)
