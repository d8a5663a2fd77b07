"""Input dims declared without a size are no traced size (issue 30, PaddleOCR's recognizer).

PP-OCRv4's text recognizer (the ``rapidocr-onnxruntime`` wheel's ``ch_PP-OCRv4_rec_infer.onnx``)
declares its input ``[N, 3, ?, W]`` and pools the height 48 down to 1 before a Squeeze. symbolize
stands such a dim in at 1, which pools to 0, and ``run --passes symbolize`` refused the model
with "needs 1 == ?o177, which holds only at the traced size [traced: ... = 0]": a conflict made
of the stand-in alone. A conflict that names no symbol, only sizes stemming from dims declared
without one, is no blocker: the model goes through as the no-op it is (its batch already
dynamic) and still runs."""

from __future__ import annotations

import numpy as np
import onnx.parser
from onnx import numpy_helper

import onnxsurgery
from onnxsurgery.validation.runtime import run_model


def recognizer_like() -> onnx.ModelProto:
    """``[N, 2, ?, W]`` pooled by 3 along the height, then squeezed there (height 3 to 5)."""
    model = onnx.parser.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
    net (float[N, 2, ?, W] x) => (float[N, 2, W] y) {
      p = AveragePool <kernel_shape = [3, 1], strides = [3, 1]> (x)
      y = Squeeze (p, axes)
    }""")
    model.graph.initializer.append(numpy_helper.from_array(np.array([2]), "axes"))
    return model


def test_a_model_with_a_height_declared_without_a_size_goes_through_symbolize() -> None:
    model = recognizer_like()
    report = onnxsurgery.run(model, "symbolize", provider="cpu")
    said = " ".join(str(d) for d in report.passes[0].diagnostics)
    assert "batch (already dynamic, verified: runs)" in said
    x = np.random.default_rng(0).standard_normal((2, 2, 4, 7)).astype(np.float32)
    got = run_model(report.model, {"x": x}, provider="cpu")["y"]
    np.testing.assert_array_equal(got, run_model(model, {"x": x}, provider="cpu")["y"])


def test_symbolize_alone_names_the_dims_the_model_already_names() -> None:
    """silero-vad declares ``input [batch, sequence]`` and ``state [2, batch, 128]``: the
    state's axis 0 is its two directions. ``symbolize`` alone named axis 0 of every input
    ``batch`` and refused over the LSTM's directions; it now takes the model's own names."""
    from onnxsurgery.passes.symbolize.plan import default_axes

    model = onnx.parser.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
    net (float[batch, sequence] input, float[2, batch, 128] state) => (float[batch, sequence] y) {
      y = Identity (input)
    }""")
    assert default_axes(model) == {
        "input": {0: "batch", 1: "sequence"},
        "state": {1: "batch"},
    }
    plain = onnx.parser.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
    net (float[2, 3] x) => (float[2, 3] y) { y = Identity (x) }""")
    assert default_axes(plain) == {"x": {0: "batch"}}
