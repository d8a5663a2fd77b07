"""Corpus rows that passed at the start of a round and broke in its merges (issue 30/28), each
by its mechanism in small.

- DINOv2 by TorchScript (b1 and b2): ``cls_token.expand(batch, -1, -1)`` exports its ``-1`` as
  a size read from constants (a Where over ``ConstantOfShape``), which a broadcast of ones now
  follows ahead of the token's own 1. The token count ``1 + h*w`` then decides the Reshape of
  the interpolated position table (``[1, h', w', C] -> [1, -1, C]``) only once that size keeps
  its 1, after the last hint had run: the table's grid kept 4x4 (b2: refused, "needs ?o1*?o2
  == 16"; b1: its rows read as not independent). A Reshape's input unknowns are now aligned
  again before they keep their traced size, as its output's were.
- Swin by dynamo at batch 1: the pooler's ``as_strided`` is a Gather of ``arange(32)`` as a
  ``[1, 32, 1, 1]`` grid over the flattened ``[batch*32]`` means. The tie "indices 0..n-1
  enumerate the whole axis" left the grid's 1s out, so the 32 took ``batch*32`` and the
  batch's index constant was refused as "fixed at 1 or follows batch"; where the axis holds a
  size traced at 1 and the grid a 1, the traced sizes cannot say which dim it spans, and the
  tie is left to the batch-index rule.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import onnxsurgery
from onnxsurgery.passes.symbolize import Symbolize
from onnxsurgery.validation.runtime import run_model

CPU = onnxsurgery.PassContext(provider="cpu")
RNG = np.random.default_rng(0)
C = 32  # channels: more than a size-like constant holds, so the cls token is a weight
WEIGHTS = {
    "w": RNG.standard_normal((C, 3, 8, 8)).astype(np.float32) / 8,
    "cls": RNG.standard_normal((1, 1, C)).astype(np.float32),
    "cls_pos": RNG.standard_normal((1, 1, C)).astype(np.float32),
    "table": RNG.standard_normal((1, 16, C)).astype(np.float32),
}


def embeddings(batch: int, height: int, width: int) -> onnx.ModelProto:
    """DINOv2's embeddings as TorchScript writes them at ``batch, height, width``: patches of 8;
    ``cls.expand(batch, -1, -1)`` (the ``-1``s through Where over ConstantOfShape); the
    position table, learned on a 4x4 grid (its side ``16 ** 0.5`` computed in the graph),
    resized to the image's grid and flattened with ``[1, -1, C]``, after its cls position."""
    model = onnx.parser.parse_model(f"""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[{batch}, 3, {height}, {width}] x) => (float[{batch}, N, {C}] y)
            <int64[1] zero = {{0}}, int64[1] two = {{2}}, int64[1] minus = {{-1}},
             int64[1] three = {{3}}, int64 neg = {{-1}},
             float sixteen = {{16.0}}, float half = {{0.5}}, int64[1] lead = {{1}},
             int64[1] chans = {{{C}}}, int64[2] grid = {{{height // 8}, {width // 8}}},
             int64[3] flat = {{1, -1, {C}}}> {{
            p = Conv <strides = [8, 8]> (x, w)
            ps = Shape (p)
            pb = Slice (ps, zero, two, zero)
            fs = Concat <axis = 0> (pb, minus)
            pf = Reshape (p, fs)
            tokens = Transpose <perm = [0, 2, 1]> (pf)
            wanted = Constant <value = int64[3] {{{batch}, -1, -1}}> ()
            ones = ConstantOfShape <value = int64[1] {{1}}> (three)
            negs = Mul (ones, neg)
            free = Equal (wanted, negs)
            shape = Where (free, ones, wanted)
            c = Expand (cls, shape)
            e = Concat <axis = 1> (c, tokens)
            root = Pow (sixteen, half)
            side = Cast <to = 7> (root)
            s = Unsqueeze (side, zero)
            gs = Concat <axis = 0> (lead, s, s, chans)
            g4 = Reshape (table, gs)
            gt = Transpose <perm = [0, 3, 1, 2]> (g4)
            gf = Cast <to = 1> (gt)
            gsh = Shape (gf)
            gb = Slice (gsh, zero, two, zero)
            sizes = Concat <axis = 0> (gb, grid)
            r = Resize <mode = "cubic"> (gf, , , sizes)
            rt = Transpose <perm = [0, 2, 3, 1]> (r)
            rf = Reshape (rt, flat)
            pos = Concat <axis = 1> (cls_pos, rf)
            y = Add (e, pos)
        }}""")
    for name, arr in WEIGHTS.items():
        model.graph.initializer.append(onnx.numpy_helper.from_array(arr, name))
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("batch", [1, 2])
def test_an_interpolated_position_grid_follows_the_image_beside_an_expanded_cls_token(
    batch: int,
) -> None:
    axes = {"x": {0: "batch", 2: "height", 3: "width"}}
    model = Symbolize(dynamic_axes=axes)(embeddings(batch, 32, 32), CPU).model
    for shape in ((3, 3, 40, 48), (1, 3, 24, 32)):
        x = np.random.default_rng(shape[0]).standard_normal(shape).astype(np.float32)
        want = run_model(embeddings(*shape[:1], *shape[2:]), {"x": x}, provider="cpu")["y"]
        got = run_model(model, {"x": x}, provider="cpu")["y"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def pooler() -> onnx.ModelProto:
    """Swin's pooler by dynamo at batch 1: the mean over the tokens, flattened and gathered back
    by ``as_strided`` (indices ``arange(4)`` as a ``[1, 4, 1, 1]`` grid), then viewed as the
    constant ``[1, 4]``."""
    model = onnx.parser.parse_model(
        """
        <ir_version: 8, opset_import: ["" : 18]>
        g (float[1, 6, 4] x) => (float[1, 4] y)
            <int64[1] at = {-2}, int64[2] both = {-1, -2}, int64[1] flat = {-1},
             int64[2] view = {1, 4}> {
            t = Transpose <perm = [0, 2, 1]> (x)
            u = Unsqueeze (t, at)
            mean = ReduceMean <keepdims = 1> (u, both)
            line = Reshape (mean, flat)
            strided = Gather (line, index)
            s = Squeeze (strided, at)
            y = Reshape (s, view)
        }
        """
    )
    index = np.arange(4, dtype=np.int64).reshape(1, 4, 1, 1)
    model.graph.initializer.append(onnx.numpy_helper.from_array(index, "index"))
    onnx.checker.check_model(model)
    return model


def test_a_flat_index_grid_traced_at_batch_1_grows_with_the_batch() -> None:
    model = Symbolize(**{"x:0": "batch"})(pooler(), CPU).model
    x = np.random.default_rng(0).standard_normal((3, 6, 4)).astype(np.float32)
    got = run_model(model, {"x": x}, provider="cpu")["y"]
    np.testing.assert_allclose(got, x.mean(axis=1), rtol=1e-5, atol=1e-6)
