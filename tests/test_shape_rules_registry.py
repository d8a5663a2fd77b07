"""The shape-rule registry: keyed by (domain, op), duplicates refused, custom domains dispatched."""

from __future__ import annotations

import onnx
import pytest

from onnxsurgery.shapes import propagate, solve
from onnxsurgery.shapes.rules import RULES, rule
from onnxsurgery.shapes.rules.core import out


@pytest.fixture
def scratch_rules():
    """Rules registered inside a test are removed after it."""
    before = dict(RULES)
    yield
    RULES.clear()
    RULES.update(before)


def test_every_family_registers_into_one_table():
    families = {fn.__module__.rsplit(".", 1)[-1] for fn in RULES.values()}
    assert families == {"elementwise", "tensor", "nn", "control_flow"}
    assert ("", "Reshape") in RULES and ("", "MatMul") in RULES and ("", "If") in RULES


def test_a_second_rule_for_the_same_op_is_refused_naming_both(scratch_rules):
    with pytest.raises(ValueError, match=r"ai\.onnx::Relu registered twice: .*elementwise\._unary and .*\.mine"):

        @rule("Relu")
        def mine(ctx):
            return [None]

    assert RULES[("", "Relu")].__name__ == "_unary"


def test_ai_onnx_is_the_default_domain(scratch_rules):
    with pytest.raises(ValueError, match="registered twice"):
        rule("Relu", domain="ai.onnx")(lambda ctx: [None])


def test_a_custom_domain_rule_is_used_for_that_domain_only(scratch_rules):
    @rule("Relu", domain="com.example")
    def doubled(ctx):
        info = ctx.info(0)
        return [out([d * 2 for d in info.shape], info.dtype)]

    model = onnx.parser.parse_model(
        """
        <ir_version: 8, opset_import: ["" : 17, "com.example" : 1]>
        g (float[4, 3] x) => (float[4, 3] y, float[8, 6] z) {
            y = Relu(x)
            z = com.example.Relu(x)
        }
        """
    )
    analysis = propagate(model, {"x": {0: "batch"}})
    sol = solve(analysis)
    assert [str(sol.resolve(d)) for d in analysis.tensors["y"].shape] == ["batch", "3"]
    assert [str(sol.resolve(d)) for d in analysis.tensors["z"].shape] == ["batch*2", "6"]
