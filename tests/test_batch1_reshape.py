"""symbolize on a model traced at batch 1 whose Reshape targets hold a 1 (issue 30).

At batch 1 a Reshape target's 1 may be the batch or a genuine 1 (an unsqueeze); the traced sizes
cannot tell them apart, the Reshape's row-major order can: an output dim of 1 that comes after
dims holding the inner input dims cannot hold the outermost input dim.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import onnxruntime as ort

import onnxsurgery
from onnxsurgery.passes.symbolize import Symbolize

HEAD = '<ir_version: 8, opset_import: ["" : 17]>'
SEQ = 4


def dynamic_kernel(batch: int, seq: int) -> onnx.ModelProto:
    """ConvBERT's span-based dynamic convolution at ``batch``, ``seq``: a kernel per token and
    head, ``reshape(kernel, [-1, 9, 1])`` of ``[batch, seq, 18]`` (2 heads of 9 taps), softmax
    over the taps, applied by a MatMul to the unfolded values ``reshape(v, [-1, 8, 9])`` of
    ``[batch, seq, 144]``, merged back by a Reshape ``[batch, -1, 16]`` written from the batch.
    Traced at batch 1, ``[-1, 9, 1]`` reads ``[16, 9, 1]`` and its 1 equals the batch."""
    m = onnx.parser.parse_model(f"""{HEAD}
    g (float[{batch}, {seq}, 18] k, float[{batch}, {seq}, 144] v) => (float[{batch}, {seq}, 16] y) {{
      ks = Constant <value = int64[3] {{-1, 9, 1}}> ()
      kr = Reshape (k, ks)
      kp = Softmax <axis = 1> (kr)
      vs = Constant <value = int64[3] {{-1, 8, 9}}> ()
      vr = Reshape (v, vs)
      o = MatMul (vr, kp)
      ys = Constant <value = int64[3] {{{batch}, -1, 16}}> ()
      y = Reshape (o, ys)
    }}""")
    onnx.checker.check_model(m)
    return m


def test_a_trailing_1_of_a_reshape_is_no_batch_traced_at_1() -> None:
    """``[batch, seq, 18] -> [-1, 9, 1]`` traced at batch 1: the split handed the batch to the
    trailing 1 (its traced size equals the batch's) and ``seq*2`` to the ``-1``, so the values'
    ``-1`` (tied to it by the MatMul) needed ``1 == batch`` and symbolize refused, as it did
    ConvBERT by TorchScript at batch 1. The batch goes to the ``-1`` now, and the symbolized
    model equals the one written at batch 3."""
    result = Symbolize(**{"k:0": "batch", "k:1": "seq", "v:0": "batch", "v:1": "seq"})(
        dynamic_kernel(1, SEQ), onnxsurgery.PassContext(provider="cpu")
    )
    rng = np.random.default_rng(0)
    feeds = {
        "k": rng.standard_normal((3, 5, 18)).astype(np.float32),
        "v": rng.standard_normal((3, 5, 144)).astype(np.float32),
    }
    runs = [
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        for m in (result.model, dynamic_kernel(3, 5))
    ]
    got, want = (s.run(None, feeds)[0] for s in runs)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def _compare_at_batch_3(model: onnx.ModelProto, axes: dict[str, str], written: onnx.ModelProto) -> None:
    """Symbolize ``model`` (traced at batch 1) and compare it with ``written`` at batch 3."""
    result = Symbolize(**axes)(model, onnxsurgery.PassContext(provider="cpu"))
    x = np.random.default_rng(1).standard_normal(
        [d.dim_value for d in written.graph.input[0].type.tensor_type.shape.dim]
    ).astype(np.float32)
    runs = [
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        for m in (result.model, written)
    ]
    got, want = (s.run(None, {"x": x})[0] for s in runs)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def time_major_rows(batch: int) -> onnx.ModelProto:
    """A time-major input ``[t, batch, 32]``, padded in time (so the time dim's size is a sum of
    unknowns), split into heads by a Reshape ``[8, batch, 16, 2]``, made batch-major by a
    Transpose and viewed as rows ``[batch*8, 16, 2]`` for a MatMul, then viewed back as
    ``[batch, 8, 16, 3]`` (RF-DETR's deformable attention, by dynamo at batch 1, views its
    ``[batch, heads, q, 4, 2]`` sampling grid as ``[batch*heads, q, 4, 2]`` so)."""
    m = onnx.parser.parse_model(f"""{HEAD}
    g (float[6, {batch}, 32] x) => (float[{batch}, 8, 16, 3] y) {{
      pads = Constant <value = int64[6] {{2, 0, 0, 0, 0, 0}}> ()
      p = Pad (x, pads)
      heads = Constant <value = int64[4] {{8, {batch}, 16, 2}}> ()
      h = Reshape (p, heads)
      t = Transpose <perm = [1, 0, 2, 3]> (h)
      rows = Constant <value = int64[3] {{{batch * 8}, 16, 2}}> ()
      r = Reshape (t, rows)
      w = Constant <value = float[2, 3] {{1, 2, 3, 4, 5, 6}}> ()
      o = MatMul (r, w)
      back = Constant <value = int64[4] {{{batch}, 8, 16, 3}}> ()
      y = Reshape (o, back)
    }}""")
    onnx.checker.check_model(m)
    return m


def test_a_batch_left_alone_by_a_reshape_joins_its_one_neighbour() -> None:
    """``[batch, 8, 16, 2] -> [8, 16, 2]`` traced at batch 1, the batch dim still an unknown
    (the heads' Reshape is decided later): every output dim matched an input dim of its size
    from the end, leaving the batch's 1 to match nothing; it was hinted to 1 for good, and the
    heads' Reshape took the batch into the heads (``[8, 1, batch*16, 2]``): a wrong model
    (``[1, 8, batch*16, 3]`` at batch 3). A Reshape keeps the row-major order, so an input dim
    before every matched one can only join the output's first dim (``[batch*8, 16, 2]``; a
    genuine 1 merges there just as well)."""
    _compare_at_batch_3(time_major_rows(1), {"x:1": "batch"}, time_major_rows(3))


def heads_after_time(batch: int) -> onnx.ModelProto:
    """Granite Speech's relative-position attention at ``batch``: ``[batch, t, 16]`` padded in
    time, split ``[batch, 8, 4, -1]``, permuted to ``[8, batch, 4, 4]`` and viewed as
    ``[8, -1, 4]`` (``-1`` = ``batch*heads``) for a MatMul per time step, then viewed back as
    ``[8, batch, 4, 2]``. At batch 1 the ``-1`` reads 4, the heads' size, and the batch sits
    between two matched dims."""
    m = onnx.parser.parse_model(f"""{HEAD}
    g (float[{batch}, 6, 16] x) => (float[8, {batch}, 4, 2] y) {{
      pads = Constant <value = int64[6] {{0, 1, 0, 0, 1, 0}}> ()
      p = Pad (x, pads)
      heads = Constant <value = int64[4] {{{batch}, 8, 4, -1}}> ()
      h = Reshape (p, heads)
      t = Transpose <perm = [1, 0, 2, 3]> (h)
      rows = Constant <value = int64[3] {{8, -1, 4}}> ()
      r = Reshape (t, rows)
      w = Constant <value = float[4, 2] {{1, 2, 3, 4, 5, 6, 7, 8}}> ()
      o = MatMul (r, w)
      back = Constant <value = int64[4] {{8, {batch}, 4, 2}}> ()
      y = Reshape (o, back)
    }}""")
    onnx.checker.check_model(m)
    return m


def test_a_batch_between_matched_dims_joins_the_reshapes_minus_1() -> None:
    """``[8, batch, 4, 4] -> [8, -1, 4]`` traced at batch 1, the time dim an unknown (a padded
    length): the ``-1`` matched the heads (4 = 4) and the batch was left alone between the
    matched dims, so the element count needed ``1 == batch`` (Granite Speech by dynamo at
    batch 1). With a matched dim on each side, it joins the one the model wrote as ``-1``, the
    dim left to the element count."""
    _compare_at_batch_3(heads_after_time(1), {"x:0": "batch"}, heads_after_time(3))


def attention(batch: int) -> onnx.ModelProto:
    """XGLM's attention (2 heads of 4, 3 tokens) written at ``batch`` as torch's code runs it:
    queries, keys and values viewed as ``[batch*2, 3, 4]`` for two ``bmm``s, the scores viewed
    back as ``[batch, 2, 3, 3]`` between them (a mask would be added there). Written at batch 1
    it is what dynamo exports: the queries' view and the scores' view are dropped, and the
    first MatMul broadcasts ``[1, 2, 3, 4] @ [2, 4, 3]``, which holds at batch 1 alone."""
    heads = f"""hs = Constant <value = int64[4] {{{batch}, 3, 2, 4}}> ()
      rows = Constant <value = int64[3] {{{batch * 2}, 3, 4}}> ()
      qh = Reshape (x, hs)
      q4 = Transpose <perm = [0, 2, 1, 3]> (qh)
      k4 = Transpose <perm = [0, 2, 1, 3]> (qh)
      k = Reshape (k4, rows)
      kt = Transpose <perm = [0, 2, 1]> (k)
      v = Reshape (k4, rows)"""
    if batch == 1:
        scores = "s4 = MatMul (q4, kt)"
    else:
        scores = f"""q = Reshape (q4, rows)
      s3 = MatMul (q, kt)
      sh = Constant <value = int64[4] {{{batch}, 2, 3, 3}}> ()
      s4 = Reshape (s3, sh)"""
    m = onnx.parser.parse_model(f"""{HEAD}
    g (float[{batch}, 3, 8] x) => (float[{batch}, 3, 8] y) {{
      {heads}
      {scores}
      ss = Constant <value = int64[3] {{{batch * 2}, 3, 3}}> ()
      s = Reshape (s4, ss)
      p = Softmax <axis = -1> (s)
      o = MatMul (p, v)
      oh = Constant <value = int64[4] {{{batch}, 2, 3, 4}}> ()
      o4 = Reshape (o, oh)
      ot = Transpose <perm = [0, 2, 1, 3]> (o4)
      ys = Constant <value = int64[3] {{{batch}, 3, 8}}> ()
      y = Reshape (ot, ys)
    }}""")
    onnx.checker.check_model(m)
    return m


def test_a_bmm_dynamo_folded_at_batch_1_gets_its_keys_unfolded() -> None:
    """XGLM by dynamo at batch 1 (TorchScript keeps the views and passed): the keys
    ``[batch*2, 4, 3]`` meet the queries ``[batch, 2, 3, 4]`` in a broadcast that holds only at
    batch 1, so the keys' Reshape needed ``1 == batch``. The keys' first dim folds the queries'
    batch dims: it is ``batch*2``, and the rewrite views the keys as ``[batch, 2, 4, 3]`` before
    the MatMul; the model equals the one written at batch 3."""
    _compare_at_batch_3(attention(1), {"x:0": "batch"}, attention(3))


def shared_table(batch: int) -> onnx.ModelProto:
    """Queries ``[batch, 2, 3, 4]`` against a table shared by the batch, a weight viewed as
    ``[2, 4, 3]`` (one per head): the broadcast holds at every batch."""
    m = onnx.parser.parse_model(f"""{HEAD}
    g (float[{batch}, 3, 8] x) => (float[{batch}, 2, 3, 3] y) {{
      hs = Constant <value = int64[4] {{{batch}, 3, 2, 4}}> ()
      qh = Reshape (x, hs)
      q4 = Transpose <perm = [0, 2, 1, 3]> (qh)
      ws = Constant <value = int64[3] {{2, 4, 3}}> ()
      k = Reshape (w, ws)
      y = MatMul (q4, k)
    }}""")
    table = (np.arange(24, dtype=np.float32) / 10).reshape(24)
    m.graph.initializer.append(onnx.numpy_helper.from_array(table, "w"))
    onnx.checker.check_model(m)
    return m


def test_a_table_shared_by_the_batch_is_read_as_a_broadcast() -> None:
    """The same MatMul shape with B a weight: B's first dim cannot hold the batch (the weight's
    element count needs ``1 == batch`` then), so the plan reads the MatMul as the broadcast it
    is; the model equals the one written at batch 3, with nothing unfolded."""
    _compare_at_batch_3(shared_table(1), {"x:0": "batch"}, shared_table(3))
    result = Symbolize(**{"x:0": "batch"})(shared_table(1), onnxsurgery.PassContext(provider="cpu"))
    assert not [n for n in result.model.graph.node if "unfolded" in n.name]


def test_a_matmul_whose_leading_1_stays_1_is_not_unfolded() -> None:
    """Where A's extra leading dim is a 1 that stays 1 (no batch there), B is left as it is:
    nothing is inserted before the MatMul."""
    m = onnx.parser.parse_model(f"""{HEAD}
    g (float[3, 2, 4] x) => (float[1, 2, 3, 3] y) {{
      hs = Constant <value = int64[4] {{1, 3, 2, 4}}> ()
      q = Reshape (x, hs)
      q4 = Transpose <perm = [0, 2, 1, 3]> (q)
      kt = Transpose <perm = [1, 2, 0]> (x)
      y = MatMul (q4, kt)
    }}""")
    result = Symbolize(**{"x:0": "seq"})(m, onnxsurgery.PassContext(provider="cpu"))
    assert [n.op_type for n in result.model.graph.node if n.op_type == "Reshape"] == ["Reshape"]
