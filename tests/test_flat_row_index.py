"""CLIP's pooled token by TorchScript (issue 30: CLIP text at batch 2 and 1, where re-export
passes): ``last_hidden_state[arange(batch), argmax(ids)]`` exports as a Gather of the rows
flattened, at ``argmax + arange(batch) * seq``, with the arange folded to a constant of the
traced batch. The oracle is numpy's indexing at other sizes."""

from __future__ import annotations

import numpy as np
import onnx
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
