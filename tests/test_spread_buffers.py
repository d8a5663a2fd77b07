"""A buffer of one repeated value (zeros to scatter into) folded at the traced batch, whose
length only a later view tells (issue 30: TAPAS's segment reductions by dynamo, "needs batch ==
2" at b2 where re-export passes). Its values say nothing of its length, so its dims are decided
after the size constants whose readings carry it. The oracle is numpy at batches never traced."""

from __future__ import annotations

import numpy as np
import pytest
from test_symbolize import parse

import onnxsurgery
from onnxsurgery.passes.symbolize import Symbolize
from onnxsurgery.validation.runtime import run_model

CPU = onnxsurgery.PassContext(provider="cpu")
SEGMENTS = 4


def segment_sums(batch: int) -> object:
    """``y[b, s] = sum_j x[b, j] where seg[b, j] == s``, as TAPAS reduces by segment: the
    segment ids offset by ``b * 4`` and flattened, scattered (add) into zeros of ``batch * 4``
    folded at the traced batch, viewed ``[batch, 4]`` by a folded shape."""
    return parse(
        f"""
        <ir_version: 8, opset_import: ["" : 18]>
        net (float[{batch}, 3] x, int64[{batch}, 3] seg) => (float[{batch}, {SEGMENTS}] y) {{
            shape = Shape (x)
            zero = Constant <value = int64 {{0}}> ()
            one = Constant <value = int64 {{1}}> ()
            rows = Gather <axis = 0> (shape, zero)
            ids = Range (zero, rows, one)
            width = Constant <value = int64 {{{SEGMENTS}}}> ()
            base = Mul (ids, width)
            col = Constant <value = int64[1] {{1}}> ()
            start = Unsqueeze (base, col)
            flat_ids = Add (seg, start)
            minus = Constant <value = int64[1] {{-1}}> ()
            index = Reshape (flat_ids, minus)
            values = Reshape (x, minus)
            summed = ScatterElements <reduction = "add"> (zeros, index, values)
            view = Constant <value = int64[2] {{{batch}, {SEGMENTS}}}> ()
            y = Reshape (summed, view)
        }}
        """,
        zeros=np.zeros(batch * SEGMENTS, np.float32),
    )


def oracle(x: np.ndarray, seg: np.ndarray) -> np.ndarray:
    y = np.zeros((x.shape[0], SEGMENTS), np.float32)
    for b in range(x.shape[0]):
        np.add.at(y[b], seg[b], x[b])
    return y


@pytest.mark.parametrize("batch", [2, 3])
def test_zeros_to_scatter_into_follow_the_batch_their_view_reads(batch):
    result = Symbolize(**{"x:0": "batch", "seg:0": "batch"})(segment_sums(batch), CPU)
    for b in (1, 4, 5):
        rng = np.random.default_rng(b)
        x = rng.standard_normal((b, 3)).astype(np.float32)
        seg = rng.integers(0, SEGMENTS, (b, 3)).astype(np.int64)
        got = run_model(result.model, {"x": x, "seg": seg}, "cpu")["y"]
        np.testing.assert_allclose(got, oracle(x, seg), rtol=1e-5, atol=1e-6)
