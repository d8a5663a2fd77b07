"""compat: what it changes, what it refuses and why; the oracle is the original model on
onnx.reference or ORT. The backend models and the IR-14 model are in test_backend_models.py."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from onnxsurgery.errors import PassError, PassOptionError
from onnxsurgery.passes.compat import Compat, ir_requirements
from onnxsurgery.pipeline.chain import build_passes, parse_passes
from onnxsurgery.validation.runtime import ort_limits, run_model


def _model(opset: int, ir_version: int, op: str = "Relu", domain: str = "") -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"], domain=domain)],
        "m",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 3])],
    )
    imports = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = ir_version
    return model


def test_a_model_ort_loads_is_left_as_it_is():
    model = _model(13, 8)
    result = Compat()(model)
    assert not result.modified and result.model is model
    assert "nothing to change" in str(result.diagnostics[0])


def test_opset_option_converts_to_the_asked_opset_and_matches_the_original():
    model = _model(13, 8, op="Softmax")
    result = Compat(opset=17)(model)
    assert result.model.opset_import[0].version == 17
    messages = [str(d) for d in result.diagnostics]
    assert messages[0] == "opset 13 -> 17: asked for"
    assert "outputs equal the original's (onnx.reference)" in messages[-1]
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_allclose(
        run_model(result.model, {"x": x}, "cpu")["y"], run_model(model, {"x": x}, "cpu")["y"], rtol=1e-6
    )


def test_an_op_no_opset_fixes_is_a_pass_error_naming_it():
    model = _model(13, 8, op="NoSuchOp", domain="com.example")
    with pytest.raises(PassError, match=r"compat: onnxruntime .* still cannot load the model: .*NoSuchOp"):
        Compat()(model)


def test_ir_requirements_name_what_needs_a_newer_ir():
    model = _model(13, 8)
    model.graph.node[0].metadata_props.add(key="k", value="v")
    assert ir_requirements(model) == [(10, "node 'y' (Relu) has metadata_props")]
    limits = ort_limits()
    assert limits.ir_version >= 10 and limits.opset >= 17  # onnxruntime >= 1.18


@pytest.mark.parametrize("options", ["compat(opset=0)", "compat(opset=true)", "compat(check=1)"])
def test_bad_options_fail_before_any_model(options):
    with pytest.raises(PassOptionError, match="compat"):
        build_passes(parse_passes(options))
