"""symbolize traced at batch 1 where a conflict has several readings (issue 30).

A conflict (an equality that holds at the traced size only) is resolved by tying kept sizes
near it to symbols, where one reading alone removes it. Traced at batch 1, every kept 1 fits
the batch, so a reading with the batch often removes the conflict as well as the right one,
and neither was taken. A reading that makes a Gather's constant indices grow with a batch the
axis they index does not carry is none: those indices pick rows of a table the batch does not
size (a position table, an unfold's window), so their count is no count of the batch's rows.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import onnxruntime as ort

import onnxsurgery
from onnxsurgery.passes.symbolize import Symbolize

HEAD = '<ir_version: 8, opset_import: ["" : 17]>'
RNG = np.random.default_rng(0)
TABLE = RNG.standard_normal((20, 4)).astype(np.float32)
KERNEL = RNG.standard_normal((4, 6)).astype(np.float32)


def _floats(a: np.ndarray) -> str:
    return ", ".join(repr(float(v)) for v in a.ravel())


def _named(model: onnx.ModelProto) -> onnx.ModelProto:
    for k, node in enumerate(model.graph.node):
        node.name = node.name or f"{node.op_type}_{k}"
    return model


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def positions(batch: int, seq: int) -> onnx.ModelProto:
    """XGLM's sinusoidal positions as dynamo exports them: the table gathered by the folded
    positions [2, 2 + seq) and viewed as [1, seq, C] (``position_ids`` is [1, seq]), added to
    the embeddings [batch, seq, C]. Traced at batch 1 the view's 1 fits the batch, the
    indices' length would then be batch*seq; it fits seq as well."""
    idx = ", ".join(str(i) for i in range(2, 2 + seq))
    return _named(
        onnx.parser.parse_model(f"""{HEAD}
agraph (float[{batch}, {seq}, 4] x) => (float[{batch}, {seq}, 4] y) {{
    table = Constant <value = float[20, 4] {{{_floats(TABLE)}}}> ()
    idx = Constant <value = int64[{seq}] {{{idx}}}> ()
    shape = Constant <value = int64[3] {{1, {seq}, 4}}> ()
    rows = Gather <axis = 0> (table, idx)
    pos = Reshape (rows, shape)
    y = Add (x, pos)
}}""")
    )


def unfold(batch: int, seq: int, c: int = 4, k: int = 3) -> onnx.ModelProto:
    """ConvBERT's span-based convolution as dynamo exports it: ``nn.Unfold((k, 1))`` over the
    padded sequence is two Gathers, a [k, seq] table of windows along time and a [1, 1] table
    of 0 along the one column, viewed as [batch, c*k, -1]; the columns split into heads with a
    folded [batch*seq*2, c/2, k] meet a kernel computed from the input. Traced at batch 1,
    either 1 of the column table or the windows' seq removes the heads' conflict."""
    win = ", ".join(str(j + i) for j in range(k) for i in range(seq))
    return _named(
        onnx.parser.parse_model(f"""{HEAD}
agraph (float[{batch}, {seq}, {c}] x) => (float[{batch}, {seq}, {c}] y) {{
    t = Transpose <perm = [0, 2, 1]> (x)
    ax = Constant <value = int64[1] {{3}}> ()
    u = Unsqueeze (t, ax)
    pads = Constant <value = int64[8] {{0, 0, 1, 0, 0, 0, 1, 0}}> ()
    p = Pad (u, pads)
    win = Constant <value = int64[{k}, {seq}] {{{win}}}> ()
    g1 = Gather <axis = 2> (p, win)
    col = Constant <value = int64[1, 1] {{0}}> ()
    g2 = Gather <axis = 4> (g1, col)
    tr = Transpose <perm = [0, 1, 2, 4, 3, 5]> (g2)
    s1 = Constant <value = int64[3] {{{batch}, {c * k}, -1}}> ()
    cols = Reshape (tr, s1)
    ct = Transpose <perm = [0, 2, 1]> (cols)
    s2 = Constant <value = int64[3] {{{batch * seq * 2}, {c // 2}, {k}}}> ()
    heads = Reshape (ct, s2)
    w = Constant <value = float[{c}, {2 * k}] {{{_floats(KERNEL)}}}> ()
    k0 = MatMul (x, w)
    s4 = Constant <value = int64[3] {{-1, {k}, 1}}> ()
    k1 = Reshape (k0, s4)
    k2 = Softmax <axis = 1> (k1)
    o = MatMul (heads, k2)
    s3 = Constant <value = int64[3] {{{batch}, {seq}, {c}}}> ()
    r = Reshape (o, s3)
    y = Add (r, x)
}}""")
    )


def test_a_position_table_viewed_with_a_1_at_batch_1_is_indexed_by_seq() -> None:
    """Refused before ("constant 'idx' ... fixed at 8 (as traced) or follows seq, and the graph
    fits both"): the reading with the view's 1 as the batch made the 8 indices into the
    position table batch*seq long. Now the indices follow seq alone, and the model gives the
    table's rows [2, 2 + seq) at batch 3, seq 5."""
    result = Symbolize(**{"x:0": "batch", "x:1": "seq"})(
        positions(1, 8), onnxsurgery.PassContext(provider="cpu")
    )
    said = [d.message for d in result.diagnostics]
    assert any("input 1 (idx): int64[8] -> int64[seq]" in m for m in said), said
    x = RNG.standard_normal((3, 5, 4)).astype(np.float32)
    np.testing.assert_allclose(_run(result.model, x), x + TABLE[2:7], rtol=0, atol=1e-6)


def test_an_unfold_traced_at_batch_1_reads_its_windows_as_seq() -> None:
    """Refused before ("Reshape 'Reshape_14' ... needs seq == 8"): the column table's two 1s
    (indices into an axis of length 1) each read as the batch removed the conflict as well as
    the windows' 8 read as seq. Now the windows follow seq, and the model equals the graph
    written at batch 3, seq 5."""
    result = Symbolize(**{"x:0": "batch", "x:1": "seq"})(
        unfold(1, 8), onnxsurgery.PassContext(provider="cpu")
    )
    said = [d.message for d in result.diagnostics]
    assert any("input 1 (win): int64[3, 8] -> int64[3, seq]" in m for m in said), said
    x = RNG.standard_normal((3, 5, 4)).astype(np.float32)
    np.testing.assert_allclose(_run(result.model, x), _run(unfold(3, 5), x), rtol=1e-5, atol=1e-5)


def test_indices_the_graph_already_grows_with_the_batch_block_no_other_reading() -> None:
    """A table gathered once per row (``t[zeros(batch)]``, added to [batch, 3]) has indices
    the graph itself makes batch long into an axis of 5: that is the graph's reading, not a
    probe's. The decoder mask's conflict elsewhere (its 16 is batch*tgt, test_encdec_sizes)
    is still read as before; blaming every probe for those indices refused it ('needs
    batch*tgt == 16')."""
    model = onnx.parser.parse_model(f"""{HEAD}
agraph (float[2, 8] y, float[2, 3] z, float[5, 3] t) => (float[2, 1, 1, 8] dec, float[2, 3] zz)
    <int64[1] flat_shape = {{-1}}, int64[4] grid = {{2, 1, 1, 8}}, int64[2] axes = {{1, 2}},
     float[2, 8] ones = {{{", ".join(["1.0"] * 16)}}}, int64[2] first = {{0, 0}},
     int64[2, 1, 1, 8] index = {{{", ".join(str(i) for i in range(16))}}}> {{
    rep = Gather (t, first)
    zz = Add (z, rep)
    flat = Flatten <axis = 2> (ones)
    picked = Gather (flat, index)
    line = Reshape (picked, flat_shape)
    mask = Reshape (line, grid)
    ymask = Unsqueeze (y, axes)
    dec = Mul (mask, ymask)
}}""")
    result = Symbolize(**{"y:0": "batch", "y:1": "tgt", "z:0": "batch"})(
        _named(model), onnxsurgery.PassContext(provider="cpu")
    )
    said = [d.message for d in result.diagnostics]
    assert any("(index): int64[2, 1, 1, 8] -> int64[batch, 1, 1, tgt]" in m for m in said), said
    y = RNG.integers(0, 2, (3, 7)).astype(np.float32)
    z = RNG.standard_normal((3, 3)).astype(np.float32)
    session = ort.InferenceSession(
        result.model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    dec, zz = session.run(None, {"y": y, "z": z, "t": TABLE[:5, :3]})
    np.testing.assert_array_equal(dec, y.reshape(3, 1, 1, 7))
    np.testing.assert_allclose(zz, z + TABLE[0, :3], rtol=0, atol=1e-6)
