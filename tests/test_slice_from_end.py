"""A Slice start of minus its whole axis counts that axis from its end (issue 30, Flaubert).

Flaubert (as XLM) cuts ``input_ids[:, -slen:]`` and ``position_ids[:, -slen:]``, ``slen`` a
Python int: TorchScript folds it into a Slice start of -8 at seq 8. A negative element was always
read as a flag, kept as traced, so the plan took the last 8 tokens at every length: its
positions stayed ``[batch, 8]`` (``Expand [2, 8] -> [batch, 8]``) and at seq 7 ONNX Runtime
failed adding them to 7 tokens ("invalid expand shape", reported as a planning bug of
symbolize); past 8 the model would have dropped tokens. A Slice bound of -2 or less is now minus
an unknown, hinted to the axis where it spans the whole axis, as a positive bound equal to the
axis is (``-seq``; the fixed -8 fitting as well, seq is reported ``ambiguous``)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import pytest
from onnx import numpy_helper
from sweep_cases import scored_case

import onnxsurgery
from onnxsurgery.passes.symbolize import Symbolize
from onnxsurgery.validation.runtime import run_model

HEAD = '<ir_version: 8, opset_import: ["" : 17]>'
END = 2**63 - 1


def _slice_from_end() -> onnx.ModelProto:
    model = onnx.parser.parse_model(f"""{HEAD}
    net (float[2, 8] x) => (float[2, 8] y) {{
      y = Slice (x, start, end, axis)
    }}""")
    consts = {"start": np.array([-8]), "end": np.array([END]), "axis": np.array([1])}
    model.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in consts.items())
    return model


def _positions() -> onnx.ModelProto:
    """Flaubert's embeddings as TorchScript exports them at batch 2, seq 8: the tokens' and a
    folded ``arange(8)`` of positions, each cut to their last ``slen``."""
    model = onnx.parser.parse_model(f"""{HEAD}
    net (int64[2, 8] ids) => (float[2, 8, 4] y) {{
      positions = Expand (arange, grid)
      p = Slice (positions, start, end, axis)
      t = Slice (ids, start, end, axis)
      e = Gather (tokens, t)
      q = Gather (table, p)
      s = Shape (e)
      qe = Expand (q, s)
      y = Add (e, qe)
    }}""")
    rng = np.random.default_rng(0)
    consts = {
        "arange": np.arange(8).reshape(1, 8),
        "grid": np.array([2, 8]),
        "start": np.array([-8]),
        "end": np.array([END]),
        "axis": np.array([1]),
        "tokens": rng.standard_normal((11, 4)).astype(np.float32),
        "table": rng.standard_normal((32, 4)).astype(np.float32),
    }
    model.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in consts.items())
    for i, node in enumerate(model.graph.node):
        node.name = f"{node.op_type}_{i}"
    return model


def _symbolize(model: onnx.ModelProto, name: str) -> onnxsurgery.PassResult:
    axes = {f"{name}:0": "batch", f"{name}:1": "seq"}
    return Symbolize(**axes)(model, onnxsurgery.PassContext(provider="cpu"))


def test_a_slice_from_minus_the_whole_axis_keeps_every_entry():
    result = _symbolize(_slice_from_end(), "x")
    x = np.random.default_rng(1).standard_normal((3, 13)).astype(np.float32)
    np.testing.assert_array_equal(run_model(result.model, {"x": x}, provider="cpu")["y"], x)


def test_positions_cut_from_the_end_follow_the_length():
    model = _positions()
    result = _symbolize(model, "ids")
    consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    rng = np.random.default_rng(2)
    for shape in ((3, 5), (2, 13)):
        ids = rng.integers(0, 11, shape)
        want = consts["tokens"][ids] + consts["table"][np.arange(shape[1])]
        got = run_model(result.model, {"ids": ids}, provider="cpu")["y"]
        np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.sweep_rows
def test_flaubert_by_torchscript_at_batch_2_passes():
    case = scored_case("flaubert.base", "torchscript", 2)
    assert case["symbolize"]["status"] == "pass", case["symbolize"]
