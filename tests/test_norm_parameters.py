"""A normalization's parameters fix its channel count (issue 30, PoolFormer).

PoolFormer's ``GroupNorm(1, C)`` exports as a Reshape to ``[N, 1, -1]``, an InstanceNormalization
with a scale and bias of length 1, and a Reshape back. Its last stage was traced at 1x1, and the
plan read the Reshape's 1 as that stage's height x width: at a larger image the
InstanceNormalization got channels = h*w against its one-element scale, and ONNX Runtime failed
(even with reference cases given, as the sweep's advice does). One scale per channel is the op's
contract: a weight's length now fixes the channel axis, and PoolFormer passes after its advice
(reference cases, for the one-point stage), as re-export does."""

from __future__ import annotations

import numpy as np
import onnx.parser
import pytest
from onnx import numpy_helper
from sweep_cases import scored_cases

import onnxsurgery
from onnxsurgery.passes.symbolize import Symbolize
from onnxsurgery.validation.runtime import run_model


def _group_norm_1(dims: str) -> onnx.ModelProto:
    model = onnx.parser.parse_model(f"""<ir_version: 8, opset_import: ["" : 17]>
    net (float[{dims}] x) => (float y) {{
      c = Conv <kernel_shape = [4, 4], strides = [4, 4]> (x, w)
      s = Shape (c)
      r = Reshape (c, groups)
      n = InstanceNormalization (r, scale, bias)
      y = Reshape (n, s)
    }}""")
    rng = np.random.default_rng(0)
    consts = {
        "w": rng.standard_normal((3, 2, 4, 4)).astype(np.float32),
        "groups": np.array([0, 1, -1]),
        "scale": np.array([1.5], np.float32),
        "bias": np.array([0.25], np.float32),
    }
    model.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in consts.items())
    for i, node in enumerate(model.graph.node):
        node.name = f"{node.op_type}_{i}"
    return model


def test_the_group_count_of_1_stays_1_where_a_stage_was_traced_at_1x1():
    axes = {"x:0": "batch", "x:2": "height", "x:3": "width"}
    result = Symbolize(**axes)(_group_norm_1("2, 2, 4, 4"), onnxsurgery.PassContext(provider="cpu"))
    source = _group_norm_1("N, 2, H, W")
    x = np.random.default_rng(1).standard_normal((3, 2, 12, 8)).astype(np.float32)
    got = run_model(result.model, {"x": x}, provider="cpu")["y"]
    np.testing.assert_allclose(got, run_model(source, {"x": x}, provider="cpu")["y"], atol=1e-5)


@pytest.mark.sweep_rows
def test_poolformer_passes_after_its_advice_by_both_exporters():
    from sweep import after_advice  # sweep_cases puts bench/ on the path

    for case in scored_cases("poolformer.base", ["torchscript", "dynamo"], [2]):
        assert after_advice(case)["+ref"], case
