"""Shared pytest fixtures: tiny models written in ONNX text syntax."""

from __future__ import annotations

import onnx
import pytest


def parse(text: str) -> onnx.ModelProto:
    """A model from ONNX text syntax, checked."""
    model = onnx.parser.parse_model(text)
    onnx.checker.check_model(model)
    return model


@pytest.fixture
def tiny_model() -> onnx.ModelProto:
    """Relu of x plus a dead Neg branch and an unused input: cleanup has work to do."""
    return parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        tiny (float[4, 3] x, float[2] unused) => (float[4, 3] y) {
            dead = Neg(x)
            y = Relu(x)
        }
        """
    )


@pytest.fixture
def clean_model() -> onnx.ModelProto:
    """A model with nothing to clean, shapes already inferred."""
    return parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        clean (float[4, 3] x) => (float[4, 3] y) <float[4, 3] r> {
            r = Relu(x)
            y = Neg(r)
        }
        """
    )
