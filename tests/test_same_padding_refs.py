"""TensorFlow 'same' padding traced at batch 1: the Pads' amounts of 1 are no batch.

MobileNetV2 with ``tf_padding`` pads each strided convolution by (0, 1) on height and width at
an even length, and each stride-1 depthwise convolution by (1, 1). Traced at batch 1, every
such 1 equals the batch, and a batch whose rows are independent decides a size equal to it
(it counts its rows): the pads became ``batch`` (``2 - batch`` at the ends where a residual Add
fixes the total). A row's values do not depend on how many rows run with it, so no Pad amount on
an axis that does not carry the batch follows it. Read as the batch, the Pads refused the model
with only the batch symbolized (the padded lengths followed the batch, so the strided ones
looked like 'same' padding on a symbolic axis), and with every axis symbolized they shifted a
residual branch, so that neither reading of the strided Pads matched a reference case.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import onnxruntime as ort
from onnx import numpy_helper

import onnxsurgery
from onnxsurgery.passes.symbolize import Symbolize
from onnxsurgery.validation.references import Case, save_case

HEAD = '<ir_version: 8, opset_import: ["" : 17]>'
C = 2
W1 = ((np.arange(C * C * 9, dtype=np.float32).reshape(C, C, 3, 3) % 5) / 10 - 0.2).astype(np.float32)
W2 = ((np.arange(C * C * 9, dtype=np.float32).reshape(C, C, 3, 3) % 7) / 10 - 0.3).astype(np.float32)


def _model(dims: str, *, same: bool) -> onnx.ModelProto:
    """A residual block padded (1, 1) before a stride-1 Conv, then a stride-2 Conv padded as
    'same' pads an even length: by a Pad of (0, 1) (as traced), or by ``auto_pad`` (the source,
    which computes it from the size)."""
    tail = (
        'y = Conv <kernel_shape = [3, 3], strides = [2, 2], auto_pad = "SAME_UPPER"> (r, w2)'
        if same
        else "q = Pad (r, p2)\n      y = Conv <kernel_shape = [3, 3], strides = [2, 2]> (q, w2)"
    )
    model = onnx.parser.parse_model(f"""{HEAD}
    g (float[{dims}] x) => (float y) {{
      p1 = Constant <value = int64[8] {{0, 0, 1, 1, 0, 0, 1, 1}}> ()
      p2 = Constant <value = int64[8] {{0, 0, 0, 0, 0, 0, 1, 1}}> ()
      a = Pad (x, p1)
      b = Conv <kernel_shape = [3, 3]> (a, w1)
      r = Add (b, x)
      {tail}
    }}""")
    model.graph.initializer.extend([numpy_helper.from_array(W1, "w1"), numpy_helper.from_array(W2, "w2")])
    for i, node in enumerate(model.graph.node):
        node.name = f"{node.op_type}_{i}"  # an exporter names every node
    return model


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def test_pads_on_height_and_width_at_batch_1_stay_fixed_with_the_batch_symbolized() -> None:
    """Only the batch symbolized: the heights and widths stay 8, so the fixed Pads are right at
    every batch; they read as the batch, and the strided one was refused as 'same' padding."""
    model = _model(f"1, {C}, 8, 8", same=False)
    result = Symbolize(**{"x:0": "batch"})(model, onnxsurgery.PassContext(provider="cpu"))
    x = np.random.default_rng(0).standard_normal((3, C, 8, 8)).astype(np.float32)
    rows = np.concatenate([_run(model, x[i : i + 1]) for i in range(3)])
    np.testing.assert_allclose(_run(result.model, x), rows, rtol=1e-5, atol=1e-6)


def test_one_reference_at_another_parity_decides_same_padding_at_batch_1(tmp_path) -> None:
    """Every axis symbolized, traced at batch 1 and 8x8, one reference case at batch 2 and 7x9
    (odd: 'same' pads (1, 1) there): the reference chooses 'same' padding for the strided Conv,
    and the stride-1 Pad stays (1, 1); read as (batch, 2 - batch), it shifted the residual
    branch at batch 2 and no reading matched the reference."""
    source = _model(f"N, {C}, H, W", same=True)
    x = np.random.default_rng(1).standard_normal((2, C, 7, 9)).astype(np.float32)
    save_case(Case("given", {"x": x}, {"y": _run(source, x)}), tmp_path)
    ctx = onnxsurgery.PassContext(provider="cpu", references=tmp_path)
    axes = {"x:0": "batch", "x:2": "height", "x:3": "width"}
    result = Symbolize(**axes)(_model(f"1, {C}, 8, 8", same=False), ctx)
    x = np.random.default_rng(2).standard_normal((3, C, 9, 6)).astype(np.float32)
    np.testing.assert_allclose(_run(result.model, x), _run(source, x), rtol=1e-5, atol=1e-6)
