"""CLIP's pooled token by TorchScript (issue 30: CLIP text at batch 2 and 1, where re-export
passes): ``last_hidden_state[arange(batch), argmax(ids)]`` exports as a Gather of the rows
flattened, at ``argmax + arange(batch) * seq``, with the arange folded to a constant of the
traced batch. The oracle is numpy's indexing at other sizes.

The same flat index reads TorchScript's padding mask in Gemma 4 unified and GIT with a cache
(``padding_mask[batch_idx, kv_idx]``): there the rows it flattens are a constant too, ``[batch,
seq]`` of -1s padded to ``total``, so both the rows and what they count were folded at the
traced batch."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from sweep_cases import scored_case
from test_symbolize import parse

import onnxsurgery
from onnxsurgery.passes.symbolize import Symbolize
from onnxsurgery.validation.runtime import run_model

RNG = np.random.default_rng(0)
CPU = onnxsurgery.PassContext(provider="cpu")



def pooled_token_model(batch: int) -> onnx.ModelProto:
    """CLIP's pooled token as TorchScript exports it at ``batch``: the hidden states flattened to
    rows, indexed at ``argmax(ids) + arange(batch) * seq``, the arange folded to a constant."""
    rows = np.arange(batch, dtype=np.int64)
    model = parse(
        f"""
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[{batch}, 8, 4] h, int64[{batch}, 8] ids) => (float[{batch}, 4] y) {{
            flat = Constant <value = int64[2] {{-1, 4}}> ()
            rows2d = Reshape (h, flat)
            top = ArgMax <axis = -1, keepdims = 0> (ids)
            sh = Shape (h)
            one = Constant <value = int64[1] {{1}}> ()
            two = Constant <value = int64[1] {{2}}> ()
            seq = Slice (sh, one, two)
            starts = Mul (rows, seq)
            index = Add (top, starts)
            y = Gather <axis = 0> (rows2d, index)
        }}
        """,
        rows=rows,
    )
    for i, node in enumerate(model.graph.node):
        node.name = f"/{node.op_type}_{i}"
    return model


def test_a_flat_index_over_rows_follows_the_batch():
    """The constant ``arange(batch)`` times ``seq`` was read as sizes (a count of 2, or a 0 at
    batch 1), not as rows: "needs batch == 2" at batch 2; at batch 1 every row read row 0's
    token, which the rows check caught. Its length is an unknown now, tied to the batch."""
    for traced in (2, 1):
        axes = {"h:0": "batch", "h:1": "seq", "ids:0": "batch", "ids:1": "seq"}
        out = Symbolize(**axes)(pooled_token_model(traced), CPU).model
        for batch, seq in [(3, 5), (1, 9), (4, 8)]:
            h = RNG.standard_normal((batch, seq, 4)).astype(np.float32)
            ids = RNG.integers(0, 100, (batch, seq)).astype(np.int64)
            got = run_model(out, {"h": h, "ids": ids}, "cpu")["y"]
            np.testing.assert_array_equal(got, h[np.arange(batch), ids.argmax(-1)])


def padded_mask_model(batch: int, seq: int = 3, total: int = 8) -> onnx.ModelProto:
    """A ``[batch, seq]`` constant of -1s padded to ``total`` (TorchScript's group ids in the
    padding mask), flattened and read at ``cols + arange(batch) * Shape(x)[1]``, the arange a
    ``[batch, 1, 1, 1]`` constant; added to the ids so that the rows meet the batch."""
    fill = np.full((batch, seq), -1.0, np.float32)
    rows = np.arange(batch, dtype=np.int64).reshape(batch, 1, 1, 1)
    cols = np.arange(total - seq, total, dtype=np.int64).reshape(1, 1, seq, 1)
    model = parse(
        f"""
        <ir_version: 8, opset_import: ["" : 17]>
        net (int64[{batch}, {seq}] ids, float[{batch}, {total}] mask)
            => (float[{batch}, 1, {seq}, 1] y) {{
            sm = Shape (mask)
            si = Shape (ids)
            one = Constant <value = int64[1] {{1}}> ()
            two = Constant <value = int64[1] {{2}}> ()
            t = Slice (sm, one, two)
            s = Slice (si, one, two)
            p = Sub (t, s)
            z3 = Constant <value = int64[3] {{0, 0, 0}}> ()
            pads = Concat <axis = 0> (z3, p)
            neg = Constant <value = float {{-1.0}}> ()
            x = Pad <mode = "constant"> (fill, pads, neg)
            f = Flatten <axis = 2> (x)
            sx = Shape (x)
            w = Gather <axis = 0> (sx, one)
            m = Mul (rows, w)
            idx = Add (cols, m)
            g = Gather <axis = 0> (f, idx)
            four = Constant <value = int64[1] {{4}}> ()
            gs = Squeeze (g, four)
            ax = Constant <value = int64[2] {{1, 3}}> ()
            idu = Unsqueeze (ids, ax)
            idf = Cast <to = 1> (idu)
            y = Add (gs, idf)
        }}
        """,
        fill=fill,
        rows=rows,
        cols=cols,
    )
    for i, node in enumerate(model.graph.node):
        node.name = f"/{node.op_type}_{i}"
    return model


def test_the_rows_a_flat_index_counts_follow_the_batch_with_it():
    """The rows constant followed the batch (it meets the ids), but the constant it indexes
    stayed ``[2, 3]``: at batch 3 ONNX Runtime failed, "indices element out of data bounds,
    idx=21", called a planning bug. The rows count what ``Shape(x)[1]`` strides over, so
    ``x``'s axis 0 follows them."""
    for traced in (2, 1):
        out = Symbolize(**{"ids:0": "batch", "mask:0": "batch"})(
            padded_mask_model(traced), CPU
        ).model
        for batch in (3, 1, 5):
            ids = RNG.integers(0, 50, (batch, 3))
            mask = np.ones((batch, 8), np.float32)
            got = run_model(out, {"ids": ids, "mask": mask}, "cpu")["y"]
            np.testing.assert_array_equal(got, (ids - 1.0)[:, None, :, None])


@pytest.mark.sweep_rows
def test_gemma4_unified_with_a_cache_by_torchscript_at_batch_2():
    """The sweep row: refused with the check's planning bug at batch 3; now it matches torch
    eager at every held-out size."""
    case = scored_case("gemma4_unified.causal-lm-kv", "torchscript", 2)
    assert case["symbolize"]["status"] == "pass", case
