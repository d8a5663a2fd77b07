"""Encoder-decoder sizes: a traced constant that reads as more than one symbol expression.

Sweep rows traced encoder ``seq`` and decoder ``tgt`` at one length (8) and ``batch`` at 2, so
a constant 8 fits ``seq`` and ``tgt`` alike and a 16 fits ``batch*tgt``. TorchScript folds BART's
default decoder mask (``ones(batch, tgt)``) into a constant, flattens it, gathers every element
back with the index grid ``arange(16).reshape(2, 1, 1, 8)`` and reshapes that to
``[batch, 1, 1, tgt]``: the element count needs the grid to be ``batch*tgt``, which only one
reading of its dims gives (``[batch, 1, 1, tgt]``; ``seq`` on the last axis would keep the
element count wrong at other sizes). :class:`DecoderMask` below is that mechanism in small.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import onnxsurgery
from onnxsurgery.errors import PassError
from onnxsurgery.passes.symbolize import Symbolize
from onnxsurgery.validation.runtime import run_model

CPU = onnxsurgery.PassContext(provider="cpu")
AXES = {"x:0": "batch", "x:1": "seq", "y:0": "batch", "y:1": "tgt"}


def parse(text: str, **inits: np.ndarray) -> onnx.ModelProto:
    model = onnx.parser.parse_model(text)
    for name, arr in inits.items():
        model.graph.initializer.append(onnx.numpy_helper.from_array(arr, name))
    onnx.checker.check_model(model)
    return model


def decoder_mask(table: np.ndarray | None = None) -> onnx.ModelProto:
    """The encoder keeps ``[batch, seq]``; the decoder's mask is a folded ``table`` (default
    ``ones(2, 8)``), flattened, gathered back element by element with ``arange(16)`` as a
    ``[2, 1, 1, 8]`` grid and reshaped to ``[2, 1, 1, 8]``, then weighs the decoder input's own
    ``[batch, 1, 1, tgt]``."""
    return parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[2, 8] x, float[2, 8] y) => (float[2, 8] enc, float[2, 1, 1, 8] dec)
            <int64[1] flat_shape = {-1}, int64[4] grid = {2, 1, 1, 8}, int64[2] axes = {1, 2}> {
            enc = Add (x, x)
            flat = Flatten <axis = 2> (ones)
            picked = Gather (flat, index)
            line = Reshape (picked, flat_shape)
            mask = Reshape (line, grid)
            ymask = Unsqueeze (y, axes)
            dec = Mul (mask, ymask)
        }
        """,
        ones=np.ones((2, 8), dtype=np.float32) if table is None else table,
        index=np.arange(16).reshape(2, 1, 1, 8),
    )


def test_a_product_constant_reads_as_the_one_product_that_keeps_the_element_count():
    result = Symbolize(**AXES)(decoder_mask(), CPU)
    model = result.model
    for batch, seq, tgt in ((3, 5, 7), (1, 9, 4)):
        y = np.random.default_rng(tgt).integers(0, 2, (batch, tgt)).astype(np.float32)
        x = np.zeros((batch, seq), dtype=np.float32)
        dec = run_model(model, {"x": x, "y": y}, provider="cpu")["dec"]
        np.testing.assert_array_equal(dec, y.reshape(batch, 1, 1, tgt))


def test_a_table_that_holds_values_is_still_refused():
    """The same graph over a table of distinct values: the reading that keeps the element count
    would index past a table the graph cannot compute at other sizes; refused, never guessed."""
    table = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    with pytest.raises(PassError, match="constant 'ones' .* values follow no pattern"):
        Symbolize(**AXES)(decoder_mask(table), CPU)
