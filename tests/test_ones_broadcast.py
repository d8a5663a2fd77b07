"""A broadcast whose every operand is 1 at the traced size (issue 30, SwiftFormer).

SwiftFormer's last stage was traced at a 1x1 grid. Its attention sums the tokens into a global
query ``[batch, 1, C]``, tiles it by ``key.shape[1]`` (a repeat of 1 at the trace) and multiplies
it with the keys ``[batch, h*w, C]``, then views the tokens back as ``[batch, h, w, C]`` and adds
them to the grid. Shape propagation wrote the product following the first operand, the tile's
repeat, which the solver then kept at 1: at a 2x2 grid ONNX Runtime got the keys' 4 tokens, and
the Reshape back, read as ``[batch, 1, 1, C]``, failed (even with the reference cases the
refusal asked for, at height and width 33). Now a broadcast that followed a dim the solution made
the constant 1 while another operand varies is propagated again following that one; and at batch
1, where the Reshape back splits ``h*w`` over two dims all traced at 1, the split must match the
grid the Add meets (``[batch, 1, h*w, C]`` fit the element count, not the Add). SwiftFormer
passes by both exporters at both batches after its advice, as re-export does.
"""

from __future__ import annotations

import numpy as np
import onnx.parser
import pytest
from onnx import numpy_helper
from sweep_cases import scored_cases

import onnxsurgery
from onnxsurgery.passes.symbolize import Symbolize
from onnxsurgery.validation.runtime import run_model


def _global_query(dims: str, tokens: list[int], grid: list[int]) -> onnx.ModelProto:
    """x [batch, 4, h, w] pooled to a grid [batch, 4, h/2, w/2] -> tokens [batch, h*w/4, 4]; the global query (their sum) expanded by
    ones and tiled by a repeat of 1 (TorchScript's ``repeat``), multiplied with them, viewed back
    to the grid and added to it."""
    model = onnx.parser.parse_model(f"""<ir_version: 8, opset_import: ["" : 17]>
    net (float[{dims}] x) => (float y) {{
      p = MaxPool <kernel_shape = [2, 2], strides = [2, 2]> (x)
      t = Transpose <perm = [0, 2, 3, 1]> (p)
      k = Reshape (t, tokens)
      q = ReduceSum <keepdims = 1> (k, axis1)
      e = Expand (q, ones)
      r = Tile (e, repeats)
      m = Mul (r, k)
      g = Reshape (m, grid)
      b = Transpose <perm = [0, 3, 1, 2]> (g)
      y = Add (b, p)
    }}""")
    consts = {
        "tokens": np.array(tokens),
        "axis1": np.array([1]),
        "ones": np.array([1, 1, 1]),
        "repeats": np.array([1, 1, 1]),
        "grid": np.array(grid),
    }
    model.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in consts.items())
    for i, node in enumerate(model.graph.node):
        node.name = f"{node.op_type}_{i}"
    return model


@pytest.mark.parametrize("batch", [2, 1])
def test_a_product_of_a_repeat_of_1_and_the_tokens_follows_the_tokens(batch: int) -> None:
    """Traced at a 1x1 grid (2x2 pixels): symbolized, it runs at a 3x2 grid as the model does
    (ONNX Runtime failed at the Reshape back to the grid before, at either batch)."""
    axes = {"x:0": "batch", "x:2": "height", "x:3": "width"}
    static = _global_query(f"{batch}, 4, 2, 2", [batch, 1, 4], [batch, 1, 1, 4])
    result = Symbolize(**axes)(static, onnxsurgery.PassContext(provider="cpu"))
    x = np.random.default_rng(1).standard_normal((3, 4, 6, 4)).astype(np.float32)
    p = x.reshape(3, 4, 3, 2, 2, 2).max(axis=(3, 5))
    k = p.transpose(0, 2, 3, 1).reshape(3, 6, 4)
    want = (k.sum(1, keepdims=True) * k).reshape(3, 3, 2, 4).transpose(0, 3, 1, 2) + p
    got = run_model(result.model, {"x": x}, provider="cpu")["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.sweep_rows
def test_swiftformer_passes_after_its_advice_by_both_exporters_at_both_batches():
    cases = scored_cases("swiftformer.base", ["torchscript", "dynamo"], [2, 1])
    from sweep import after_advice  # scored_cases puts bench/ on the path

    for case in cases:
        assert after_advice(case)["+ref"], case
