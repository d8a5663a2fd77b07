"""symbolize on a model traced at batch 1 whose Reshape targets hold a 1 (issue 30).

At batch 1 a Reshape target's 1 may be the batch or a genuine 1 (an unsqueeze); the traced sizes
cannot tell them apart, the Reshape's row-major order can: an output dim of 1 that comes after
dims holding the inner input dims cannot hold the outermost input dim.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import onnxruntime as ort

import onnxsurgery
from onnxsurgery.passes.symbolize import Symbolize

HEAD = '<ir_version: 8, opset_import: ["" : 17]>'
SEQ = 4


def dynamic_kernel(batch: int, seq: int) -> onnx.ModelProto:
    """ConvBERT's span-based dynamic convolution at ``batch``, ``seq``: a kernel per token and
    head, ``reshape(kernel, [-1, 9, 1])`` of ``[batch, seq, 18]`` (2 heads of 9 taps), softmax
    over the taps, applied by a MatMul to the unfolded values ``reshape(v, [-1, 8, 9])`` of
    ``[batch, seq, 144]``, merged back by a Reshape ``[batch, -1, 16]`` written from the batch.
    Traced at batch 1, ``[-1, 9, 1]`` reads ``[16, 9, 1]`` and its 1 equals the batch."""
    m = onnx.parser.parse_model(f"""{HEAD}
    g (float[{batch}, {seq}, 18] k, float[{batch}, {seq}, 144] v) => (float[{batch}, {seq}, 16] y) {{
      ks = Constant <value = int64[3] {{-1, 9, 1}}> ()
      kr = Reshape (k, ks)
      kp = Softmax <axis = 1> (kr)
      vs = Constant <value = int64[3] {{-1, 8, 9}}> ()
      vr = Reshape (v, vs)
      o = MatMul (vr, kp)
      ys = Constant <value = int64[3] {{{batch}, -1, 16}}> ()
      y = Reshape (o, ys)
    }}""")
    onnx.checker.check_model(m)
    return m


def test_a_trailing_1_of_a_reshape_is_no_batch_traced_at_1() -> None:
    """``[batch, seq, 18] -> [-1, 9, 1]`` traced at batch 1: the split handed the batch to the
    trailing 1 (its traced size equals the batch's) and ``seq*2`` to the ``-1``, so the values'
    ``-1`` (tied to it by the MatMul) needed ``1 == batch`` and symbolize refused, as it did
    ConvBERT by TorchScript at batch 1. The batch goes to the ``-1`` now, and the symbolized
    model equals the one written at batch 3."""
    result = Symbolize(**{"k:0": "batch", "k:1": "seq", "v:0": "batch", "v:1": "seq"})(
        dynamic_kernel(1, SEQ), onnxsurgery.PassContext(provider="cpu")
    )
    rng = np.random.default_rng(0)
    feeds = {
        "k": rng.standard_normal((3, 5, 18)).astype(np.float32),
        "v": rng.standard_normal((3, 5, 144)).astype(np.float32),
    }
    runs = [
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        for m in (result.model, dynamic_kernel(3, 5))
    ]
    got, want = (s.run(None, feeds)[0] for s in runs)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
