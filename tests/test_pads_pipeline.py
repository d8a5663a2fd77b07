"""TorchScript's pads for a Pad of rank 5 or more (issue 30, LongT5's local attention): torch's
pad list (last dim first, pairs) becomes the ONNX pads at run time through Reshape [-1, 2], a
reversing Slice, a Transpose and a Reshape [-1]: 10 or more elements, all constant. Propagation
folded constant computations of up to 8 elements only, so the Pad's pads, its output shape and
every size after it were lost: a Reshape target after it kept its traced batch and length, and
symbolize refused (LongT5 then trailed re-export). Folded, the Pad's shape is known and the
target follows the symbols; checked against numpy at other sizes.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from test_symbolize import parse

import onnxsurgery
from onnxsurgery.passes.symbolize import Symbolize

OPSET = '<ir_version: 8, opset_import: ["" : 17]>'
CPU = onnxsurgery.PassContext(provider="cpu")


def padded_view(rank: int) -> onnx.ModelProto:
    """``F.pad(x, (1, 1) on axis 2).view(batch, seq, -1)`` for ``x[2, 6, 2, ...]`` of
    ``rank`` dims, as TorchScript exports it: the pads from torch's pad list at run time, the
    view's target constant ``[2, 6, 16]`` (traced at batch 2, seq 6)."""
    tail = [2] * (rank - 2)
    flat = 2 * 2 ** (rank - 3) * 2  # axis 2 padded from 2 to 4, times the other trailing dims
    pairs = [0] * (2 * rank)
    pairs[2 * (rank - 1 - 2)] = pairs[2 * (rank - 1 - 2) + 1] = 1  # torch's order: last dim first
    dims = ", ".join(str(d) for d in [2, 6, *tail])
    model = parse(
        f"""{OPSET} net (float[{dims}] x) => (float[2, 6, {flat}] y) {{
            r = Reshape (pairs, pair)
            f = Slice (r, last, before_first, zero, back)
            t = Transpose <perm = [1, 0]> (f)
            v = Reshape (t, flat)
            pads = Cast <to = 7> (v)
            xp = Pad (x, pads)
            y = Reshape (xp, shape)
        }}""",
        pairs=np.array(pairs, np.int64),
        pair=np.array([-1, 2], np.int64),
        last=np.array([-1], np.int64),
        before_first=np.array([-(2**63) + 1], np.int64),
        zero=np.array([0], np.int64),
        back=np.array([-1], np.int64),
        flat=np.array([-1], np.int64),
        shape=np.array([2, 6, flat], np.int64),
    )
    for i, node in enumerate(model.graph.node):
        node.name = f"/{node.op_type}_{i}"
    return model


def expected(x: np.ndarray) -> np.ndarray:
    """What torch computes (numpy): axis 2 padded by one zero on each side, viewed."""
    widths = [(0, 0)] * x.ndim
    widths[2] = (1, 1)
    return np.pad(x, widths).reshape(x.shape[0], x.shape[1], -1)


@pytest.mark.parametrize("rank", [4, 5, 6])
def test_a_rank_5_pad_built_by_torchscript_keeps_its_shape(rank) -> None:
    """Rank 4 (8 pads) was folded before; ranks 5 and 6 (10 and 12 pads) were refused: the
    view's 2 and 6 read as traced, nothing after the Pad saying they follow batch and seq."""
    model = padded_view(rank)
    out = Symbolize(**{"x:0": "batch", "x:1": "seq"})(model, CPU).model
    session = ort.InferenceSession(out.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(rank)
    for batch, seq in ((3, 5), (1, 9), (2, 6)):
        x = rng.standard_normal((batch, seq, *[2] * (rank - 2))).astype(np.float32)
        np.testing.assert_array_equal(session.run(None, {"x": x})[0], expected(x))
