"""cleanup and infer-shapes on tiny graphs: one case that changes, one that must not."""

from __future__ import annotations

import numpy as np
import onnx
from conftest import parse

from onnxsurgery import PassContext
from onnxsurgery.passes.cleanup import Cleanup
from onnxsurgery.passes.infer_shapes import InferShapes
from onnxsurgery.validation.runtime import run_model


def test_cleanup_removes_dead_nodes_inputs_and_initializers():
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[4, 3] x, float[2] unused) => (float[4, 3] y) <float[3] w = {1.0, 2.0, 3.0}, float[1] orphan = {7.0}> {
            dead = Neg(x)
            y = Mul(x, w)
        }
        """
    )
    result = Cleanup()(model, PassContext())
    assert result.modified
    graph = result.model.graph
    assert [n.op_type for n in graph.node] == ["Mul"]
    assert [i.name for i in graph.input] == ["x"]
    assert [i.name for i in graph.initializer] == ["w"]
    messages = " ".join(str(d) for d in result.diagnostics)
    assert "removed 1 dead node(s)" in messages and "unused input(s) unused" in messages
    assert "1 unused initializer(s)" in messages
    x = np.random.default_rng(0).standard_normal((4, 3), dtype=np.float32)
    np.testing.assert_allclose(run_model(result.model, {"x": x}, "cpu")["y"], x * [1, 2, 3], rtol=1e-6)


def test_cleanup_keeps_inputs_when_asked(tiny_model):
    result = Cleanup(inputs=False)(tiny_model)
    assert [i.name for i in result.model.graph.input] == ["x", "unused"]
    assert len(result.model.graph.node) == 1


def test_cleanup_sorts_an_unsorted_graph():
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[4] x) => (float[4] y) {
            r = Relu(x)
            y = Neg(r)
        }
        """
    )
    model.graph.node.reverse()
    result = Cleanup()(model)
    assert result.modified
    assert [n.op_type for n in result.model.graph.node] == ["Relu", "Neg"]
    onnx.checker.check_model(result.model)


def test_cleanup_leaves_a_clean_model_alone(clean_model):
    result = Cleanup()(clean_model)
    assert not result.modified
    assert result.model == clean_model


def test_cleanup_keeps_model_level_fields(tiny_model):
    tiny_model.producer_name = "pytorch"
    tiny_model.metadata_props.add(key="k", value="v")
    result = Cleanup()(tiny_model)
    assert result.model.producer_name == "pytorch"
    assert [(p.key, p.value) for p in result.model.metadata_props] == [("k", "v")]


def test_infer_shapes_replaces_stale_value_info():
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[batch, 3] x) => (float[batch, 6] y) <float[4, 3] r> {
            r = Relu(x)
            y = Concat<axis = 1>(r, x)
        }
        """
    )
    result = InferShapes()(model)
    assert result.modified
    (vi,) = result.model.graph.value_info
    dims = [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]
    assert vi.name == "r" and dims == ["batch", 3]


def test_infer_shapes_propagates_shape_arithmetic():
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[batch, 3, 4] x) => (float[batch, 12] y) {
            s = Shape<end = 1>(x)
            tail = Constant<value = int64[1] {12}>()
            shape = Concat<axis = 0>(s, tail)
            t = Reshape(x, shape)
            y = Relu(t)
        }
        """
    )
    def shapes(m):
        return {vi.name: [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim] for vi in m.graph.value_info}

    # Data propagation carries Shape -> Concat values into Reshape: t is [batch, 12].
    assert shapes(InferShapes()(model).model)["t"] == ["batch", 12]
    assert shapes(InferShapes(data_prop=False)(model).model)["t"] != ["batch", 12]


def test_infer_shapes_leaves_inferred_model_alone(clean_model):
    result = InferShapes()(clean_model)
    assert not result.modified
