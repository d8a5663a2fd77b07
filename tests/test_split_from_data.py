"""A Split whose sizes are computed from the data (issue 30: dynamo's MoE dispatch splits the
sorted tokens by how many each expert got, ``split_with_sizes`` of a ``bincount``). The sizes
are only known at run time; the analysis once read such a Split as equal chunks and required
the axis to divide evenly. The oracle is numpy at batches never traced."""

from __future__ import annotations

import numpy as np
import pytest
from test_symbolize import parse

import onnxsurgery
from onnxsurgery.passes.symbolize import Symbolize
from onnxsurgery.validation.references import Case, save_case
from onnxsurgery.validation.runtime import run_model

CPU = onnxsurgery.PassContext(provider="cpu")


def routed(batch: int) -> object:
    """An MoE's dispatch and combine in one: rows sorted by their first column (a TopK over
    the whole axis, K folded at the traced batch), split into those below 0 and the rest (sizes counted from the data), each
    part scaled by its own weight, scattered back to where each row came from: ``[batch, 4]``,
    each row its own."""
    return parse(
        f"""
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[{batch}, 4] x) => (float[{batch}, 4] y) {{
            zero = Constant <value = int64[1] {{0}}> ()
            one = Constant <value = int64[1] {{1}}> ()
            first = Slice (x, zero, one, one)
            col = Squeeze (first, one)
            n = Constant <value = int64[1] {{{batch}}}> ()
            keys, order = TopK <largest = 0> (col, n)
            rows = Gather <axis = 0> (x, order)
            fzero = Constant <value = float {{0.0}}> ()
            neg = Less (col, fzero)
            negi = Cast <to = 7> (neg)
            below = ReduceSum <keepdims = 1> (negi)
            shape = Shape (x)
            total = Gather <axis = 0> (shape, zero)
            rest = Sub (total, below)
            sizes = Concat <axis = 0> (below, rest)
            low, high = Split <axis = 0> (rows, sizes)
            a = Constant <value = float {{-2.0}}> ()
            b = Constant <value = float {{3.0}}> ()
            low2 = Mul (low, a)
            high2 = Mul (high, b)
            joined = Concat <axis = 0> (low2, high2)
            xshape = Shape (x)
            empty = ConstantOfShape (xshape)
            back = Unsqueeze (order, one)
            y = ScatterND (empty, back, joined)
        }}
        """
    )


def oracle(x: np.ndarray) -> np.ndarray:
    return np.where(x[:, :1] < 0, -2.0, 3.0).astype(np.float32) * x


@pytest.mark.parametrize("batch", [2, 4])
def test_a_split_sized_by_the_data_is_read_at_run_time(batch, tmp_path):
    """The sort's K, the traced batch, may be a top-k's fixed k or the whole axis: a reference
    case at another batch decides it (the sort); the Split then follows the data."""
    x = np.random.default_rng(9).standard_normal((batch + 3, 4)).astype(np.float32)
    save_case(Case("case0", {"x": x}, {"y": oracle(x)}), tmp_path / "refs", index=0)
    ctx = onnxsurgery.PassContext(provider="cpu", references=tmp_path / "refs")
    result = Symbolize(**{"x:0": "batch"})(routed(batch), ctx)
    for b, seed in ((3, 1), (5, 2), (7, 3), (1, 4)):
        x = np.random.default_rng(seed).standard_normal((b, 4)).astype(np.float32)
        got = run_model(result.model, {"x": x}, "cpu")["y"]
        np.testing.assert_allclose(got, oracle(x), rtol=1e-6)
