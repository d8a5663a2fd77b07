"""symbolize where a constant's size equals the batch's traced size and the graph fits both
readings, fixed as traced or following the batch (issue 30).

Without reference cases, a batch whose rows the graph shows independent has an oracle of its
own: the original model run on each traced-many rows alone. At two larger batches with
distinct rows, the reading that alone gives those rows is taken; where both do (or neither),
symbolize still refuses, saying why.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import onnxruntime as ort
import pytest

import onnxsurgery
from onnxsurgery.errors import PassError
from onnxsurgery.passes.symbolize import Symbolize

HEAD = '<ir_version: 8, opset_import: ["" : 17]>'


def windows(batch: int) -> onnx.ModelProto:
    """``x.unfold(1, 2, 2).mean(-1)`` as dynamo exports it at batch 2 (Granite Speech's
    pooling): a Gather along time with a constant [4, 2] grid of windows, whose 2 (the window)
    equals the traced batch; nothing in the graph says which it is."""
    return onnx.parser.parse_model(f"""{HEAD}
agraph (float[{batch}, 8, 4] x) => (float[{batch}, 4, 4] y) {{
    idx = Constant <value = int64[4, 2] {{0, 1, 2, 3, 4, 5, 6, 7}}> ()
    g = Gather <axis = 1> (x, idx)
    y = ReduceMean <axes = [2], keepdims = 0> (g)
}}""")


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _named(model: onnx.ModelProto) -> onnx.ModelProto:
    for k, node in enumerate(model.graph.node):
        node.name = node.name or f"{node.op_type}_{k}"
    return model


def test_a_window_the_size_of_the_batch_is_decided_by_the_rows_of_the_original() -> None:
    """Traced at batch 2, the windows' 2 fits the batch too: symbolize refused ("the graph fits
    both"). Following the batch, a row's windows would change with how many rows run with it;
    the original model run on each pair of rows alone at batch 4 and 6 shows the windows stay
    2 wide, and the model equals the graph written at batch 5."""
    result = Symbolize(**{"x:0": "batch"})(
        _named(windows(2)), onnxsurgery.PassContext(provider="cpu")
    )
    said = [d.message for d in result.diagnostics]
    assert any(
        "the sizes fixed as traced match the original model run row by row at batch=4 and 6, "
        "the sizes following their symbols not" in m
        for m in said
    ), said
    assert any("verified: rows" in m for m in said), said
    x = np.random.default_rng(0).standard_normal((5, 8, 4)).astype(np.float32)
    np.testing.assert_allclose(_run(result.model, x), _run(windows(5), x), rtol=1e-6, atol=1e-6)


def test_without_the_check_the_rows_decide_nothing() -> None:
    """check=false runs nothing on ONNX Runtime: the coincident size stays a blocker."""
    with pytest.raises(PassError, match="the graph fits both"):
        Symbolize(**{"x:0": "batch"}, check=False)(
            _named(windows(2)), onnxsurgery.PassContext(provider="cpu")
        )


def test_a_symbol_not_shown_a_batch_gets_no_row_oracle() -> None:
    """rows= (no symbol has independent rows): the original's rows are no oracle, and the
    coincident size stays a blocker."""
    with pytest.raises(PassError, match="the graph fits both"):
        Symbolize(**{"x:0": "batch"}, rows="")(
            _named(windows(2)), onnxsurgery.PassContext(provider="cpu")
        )


def rotary(batch: int, join: str = "Mul") -> onnx.ModelProto:
    """CodeGen's and GPT-J's rotary table as TorchScript exports them at batch 1: position ids
    [1, 4] gather the table, whose rows are tiled (``repeat_interleave``: the Tile's 1 makes
    the batch dim a product) and then meet x [batch, 4, 2, 4] in a ``join`` (Mul: a broadcast;
    Concat on axis 0: none)."""
    table = ", ".join(str((i % 7) / 10) for i in range(24))
    attrs = " <axis = 0>" if join == "Concat" else ""
    out = 2 * batch if join == "Concat" else batch
    return _named(
        onnx.parser.parse_model(f"""{HEAD}
agraph (float[{batch}, 4, 2, 4] x) => (float[{out}, 4, 2, 4] y) {{
    pos = Constant <value = int64[1, 4] {{0, 1, 2, 3}}> ()
    table = Constant <value = float[6, 4] {{{table}}}> ()
    g = Gather <axis = 0> (table, pos)
    axes = Constant <value = int64[1] {{2}}> ()
    u = Unsqueeze (g, axes)
    reps = Constant <value = int64[4] {{1, 1, 2, 1}}> ()
    t = Tile (u, reps)
    y = {join}{attrs} (x, t)
}}""")
    )


def test_a_tiled_row_of_position_ids_broadcasts_over_a_batch_traced_at_1() -> None:
    """The index constant's 1 reaches the Mul as a factor of ``1 * repeats``, which the
    broadcast records did not follow: symbolize refused ("the graph fits both"), though the one
    row broadcasts over the batch as GPT-2's does. Now it stays 1, and the model equals the
    graph written at batch 3."""
    result = Symbolize(**{"x:0": "batch"})(rotary(1), onnxsurgery.PassContext(provider="cpu"))
    assert any("verified: rows" in d.message for d in result.diagnostics)
    x = np.random.default_rng(1).standard_normal((3, 4, 2, 4)).astype(np.float32)
    np.testing.assert_allclose(_run(result.model, x), _run(rotary(3), x), rtol=1e-6, atol=1e-6)


def test_a_row_that_meets_the_batch_in_no_broadcast_is_still_refused() -> None:
    """Concatenated with x along the batch, the tiled row meets no batch in a broadcast:
    whether it is one row or the batch's rows, the graph cannot say, and symbolize refuses."""
    with pytest.raises(PassError, match="the graph fits both"):
        Symbolize(**{"x:0": "batch"})(rotary(1, "Concat"), onnxsurgery.PassContext(provider="cpu"))


def causal_attention(batch: int, show_band: bool = False) -> onnx.ModelProto:
    """GPT-Neo's attention as TorchScript exports it at ``batch``: heads split by Reshapes of
    constants written from ``batch``, the scores masked by a causal band [1, 1, 4, 4] that
    comes first in a Where, and the heads merged back by a Reshape [batch, 4, 4]. At batch 1
    every operand of the Where is 1 on axis 0, and its output followed the band's 1
    (``show_band``: the band is an output of the graph too)."""
    band = ", ".join(str(int(j <= i)) for i in range(4) for j in range(4))
    shown = ", bool[1, 1, 4, 4] band" if show_band else ""
    return _named(
        onnx.parser.parse_model(f"""{HEAD}
agraph (float[{batch}, 4, 4] x) => (float[{batch}, 4, 4] y{shown}) {{
    qs = Constant <value = int64[4] {{{batch}, 4, 2, 2}}> ()
    r = Reshape (x, qs)
    q = Transpose <perm = [0, 2, 1, 3]> (r)
    k = Transpose <perm = [0, 2, 3, 1]> (r)
    scores = MatMul (q, k)
    band = Constant <value = bool[1, 1, 4, 4] {{{band}}}> ()
    low = Constant <value = float {{-1000000000.0}}> ()
    w = Where (band, scores, low)
    p = Softmax <axis = -1> (w)
    o = MatMul (p, q)
    t = Transpose <perm = [0, 2, 1, 3]> (o)
    ys = Constant <value = int64[3] {{{batch}, 4, 4}}> ()
    y = Reshape (t, ys)
}}""")
    )


def test_a_band_a_broadcast_followed_reads_as_the_batch_its_sibling_became() -> None:
    """The Where's output followed the band's 1 (kept at 1), while the scores' 1 it dropped
    became the batch (the Reshape splitting the heads): the Reshape merging them stayed
    [1, 4, 4], and the check failed on ONNX Runtime at batch 2. Now the band's 1 reads as the
    batch too (its one row repeated), and the model equals the graph written at batch 3."""
    result = Symbolize(**{"x:0": "batch"})(
        causal_attention(1), onnxsurgery.PassContext(provider="cpu")
    )
    assert any("verified: rows" in d.message for d in result.diagnostics)
    x = np.random.default_rng(3).standard_normal((3, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(
        _run(result.model, x), _run(causal_attention(3), x), rtol=1e-5, atol=1e-6
    )


def test_a_band_that_is_also_an_output_keeps_its_one_row() -> None:
    """Where the band is also an output of the graph, repeating its row over the batch would
    show there: it is left at 1. The rewrite failed the check before (the Where's output
    followed the band's 1); now the Where follows the scores' batch, which the solve showed
    varies (its one row broadcast, as ONNX Runtime does), and the model equals the graph
    written at batch 3, its band output one row as there."""
    result = Symbolize(**{"x:0": "batch"})(
        causal_attention(1, show_band=True), onnxsurgery.PassContext(provider="cpu")
    )
    x = np.random.default_rng(3).standard_normal((3, 4, 4)).astype(np.float32)
    session = ort.InferenceSession(result.model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = ort.InferenceSession(
        causal_attention(3, show_band=True).SerializeToString(), providers=["CPUExecutionProvider"]
    ).run(None, {"x": x})
    got = session.run(None, {"x": x})
    assert got[1].shape == (1, 1, 4, 4)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
