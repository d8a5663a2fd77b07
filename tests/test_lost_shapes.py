"""symbolize where shape propagation loses a tensor's shape, traced at batch 1 (issue 30).

ONNX's own inference cannot broadcast a ``1`` with an unknown dim (at batch 2, the 2 decides),
so traced at batch 1 a residual Add behind an op no rule follows loses its whole shape. The nodes
after it fall back on ONNX's static sizes; those are traced sizes, and may be symbols.
"""

from __future__ import annotations

import onnx
import onnx.parser
import pytest

import onnxsurgery
from onnxsurgery.errors import PassError
from onnxsurgery.passes.symbolize import Symbolize

HEAD = '<ir_version: 8, opset_import: ["" : 17]>'


def lost_residual(batch: int, seq: int) -> onnx.ModelProto:
    """LongT5's block padding in little: ``x`` padded by an amount read from its values (0 at
    run time; no rule follows it), added back to ``x`` (the residual Add), viewed by a constant
    target written at the traced size, projected, and added to ``x`` again."""
    weights = ", ".join(str(float(i % 5) / 5) for i in range(16))
    m = onnx.parser.parse_model(f"""{HEAD}
    g (float[{batch}, {seq}, 4] x) => (float[{batch}, {seq}, 4] y) {{
      n = ReduceSum <keepdims = 0> (x)
      zero = Constant <value = float {{0}}> ()
      n0 = Mul (n, zero)
      k = Cast <to = 7> (n0)
      ax0 = Constant <value = int64[1] {{0}}> ()
      k1 = Unsqueeze (k, ax0)
      z5 = Constant <value = int64[5] {{0, 0, 0, 0, 0}}> ()
      pads = Concat <axis = 0> (z5, k1)
      p = Pad (x, pads)
      a = Add (x, p)
      s = Constant <value = int64[3] {{{batch}, {seq}, 4}}> ()
      r = Reshape (a, s)
      w = Constant <value = float[4, 4] {{{weights}}}> ()
      o = MatMul (r, w)
      y = Add (x, o)
    }}""")
    onnx.checker.check_model(m)
    return m


def test_a_tensor_behind_a_lost_shape_does_not_fix_a_symbol_at_its_traced_size() -> None:
    """Traced at batch 1 the residual Add's shape is lost, and the MatMul after the view read
    ONNX's ``[1, 8, 4]`` as fixed sizes: the last Add then 'fixed seq at 8' and the refusal
    told the user to leave seq out (LongT5 by TorchScript at batch 1: 'the model fixes tgt at
    8', where the batch-2 export gets as far as its block padding). The sizes there are read
    as unknowns now, and the one refusal left is the view's constant target, which the graph
    really cannot decide (it fits a fixed 8 and seq alike)."""
    with pytest.raises(PassError) as info:
        Symbolize(**{"x:0": "batch", "x:1": "seq"})(
            lost_residual(1, 8), onnxsurgery.PassContext(provider="cpu")
        )
    text = str(info.value)
    assert "fixes seq at 8" not in text, text
    assert "1 blocker(s)" in text and "constant 's' sets the size of Reshape" in text, text
    assert "or follows seq" in text, text
