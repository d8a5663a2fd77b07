"""symbolize's check at the traced size tells ONNX Runtime's fusions from a plan's mistake.

ORT fuses nodes only where their shapes are static: a MatMul and its Add into one Gemm (the bias
summed into the product), an Add and its LayerNormalization into a SkipLayerNormalization. The
original, static everywhere, runs the fused kernels; the symbolized model, its shapes symbolic,
runs the nodes one by one, and the two round apart. Flaubert's shrunk encoder (hidden width
2048) came out 1.26e-5 from the original by dynamo at batch 2 (1.79e-5 at batch 1, 1.48e-5 by
TorchScript at batch 1), past the check's 1e-5, and was refused as "a planning bug of
symbolize"; with either fusion off in both models the outputs were equal. The check now runs
both models again with ORT's graph optimizations off where the traced-size outputs differ, and
passes only where they agree there within its own tolerance.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import pytest
from onnx import numpy_helper
from sweep_cases import scored_case

from onnxsurgery.errors import PassError
from onnxsurgery.passes.symbolize.check import CheckRequest, check_dynamic
from onnxsurgery.shapes.dims import Dim

WIDTH = 16


def _block(batch: str, shift: float = 0.0) -> onnx.ModelProto:
    """x @ w + bias + x, layer-normalized; the residual's terms near 1000 against a spread
    near 1, so that the order the bias is summed in shows after the normalization. ``shift``
    moves one weight: a rewrite that changes a value (a plan's mistake) where it is not 0."""
    model = onnx.parser.parse_model(f"""<ir_version: 8, opset_import: ["" : 17]>
    net (float[{batch}, 8, {WIDTH}] x) => (float[{batch}, 8, {WIDTH}] y) {{
      h = MatMul (x, w)
      hb = Add (h, bias)
      s = Add (hb, x)
      y = LayerNormalization <axis = -1> (s, gamma, beta)
    }}""")
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((WIDTH, WIDTH)) / 4).astype(np.float32)
    w[0, 0] += np.float32(shift)
    consts = {
        "w": w,
        "bias": (1000 + rng.standard_normal(WIDTH)).astype(np.float32),
        "gamma": rng.standard_normal(WIDTH).astype(np.float32),
        "beta": rng.standard_normal(WIDTH).astype(np.float32),
    }
    model.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in consts.items())
    return model


def _ask(new: onnx.ModelProto) -> CheckRequest:
    dims = {"y": [Dim.sym("batch"), Dim.const(8), Dim.const(WIDTH)]}
    return CheckRequest(_block("2"), new, {"x": {0: "batch"}}, {"batch": 2}, dims, "cpu")


def test_a_difference_of_ort_fusions_alone_passes_the_traced_size():
    result = check_dynamic(_ask(_block("batch")))
    # past the check's 1e-5 (the Gemm the static original runs sums its bias first), and
    # said so in the result
    assert result.max_abs_diff > 1e-5 and result.fusion_rounding, result
    assert "equal with its graph optimizations off" in str(result)


def test_a_small_change_of_value_is_still_refused():
    """A rewrite 1e-4 off in one weight: about what the fusions give, yet not their rounding."""
    with pytest.raises(PassError) as info:
        check_dynamic(_ask(_block("batch", shift=1e-4)))
    message = str(info.value)
    assert message.startswith(
        "check at the traced size batch=2: output 'y' differs from the original: y: "
    ), message
    assert "elements out of tolerance (atol 1e-5, rtol 1e-5), max abs" in message


def test_identical_outputs_do_not_claim_fusions():
    original = _block("2")
    same = onnx.ModelProto()
    same.CopyFrom(original)
    dims = {"y": [Dim.const(2), Dim.const(8), Dim.const(WIDTH)]}
    result = check_dynamic(CheckRequest(original, same, {}, {}, dims, "cpu"))
    assert result.max_abs_diff == 0.0 and not result.fusion_rounding


@pytest.mark.sweep_rows
@pytest.mark.parametrize(("exporter", "batch"), [("dynamo", 2), ("dynamo", 1), ("torchscript", 1)])
def test_flaubert_passes_where_only_fusions_differ(exporter, batch):
    case = scored_case("flaubert.base", exporter, batch)
    assert case["symbolize"]["status"] == "pass", case["symbolize"]
