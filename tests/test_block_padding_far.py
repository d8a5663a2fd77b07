"""Block padding read under a bound where the split is far from the pad, or the pad is computed
at run time (PEGASUS-X's and LongT5's encoders, issue 30; the sweep's rows pegasus_x.base and
longt5.base, where re-export passed and symbolize refused even with ``seq<=traced``).

- PEGASUS-X pads the hidden states to a multiple of its block once, then each layer splits the
  padded length into blocks per head: LayerNorm, projection, per-head Reshape, Transpose, and
  only then the Reshape into blocks, five nodes on. Traced at batch 2 the pad's split was not
  found, so its amount was never read under the bound (at batch 1 a per-head ``[1, 512, H, d]``
  passed for one block by chance).
- TorchScript's ``F.pad`` with amounts computed at run time (PEGASUS-X's global tokens, LongT5's
  later layers) fills the pads out to ``2 * rank`` (``ConstantOfShape(Sub(6, Shape(pads)[0]))``),
  pairs them with a Reshape to ``[-1, 2]``, reverses and transposes them: the 6 read as a size,
  the pairs' values were lost there and every shape after the Pad with them.
- LongT5's later layers pad by ``(-seq) % 128`` computed at run time: within ``seq<=traced``
  that remainder is ``128 - seq`` at every size, as the pad the export baked is.
- The decoder's cross-attention mask gathers a flattened ``[batch, seq]`` mask at
  ``arange(seq) + arange(batch) * seq``, the rows a Range: the columns, folded at the traced
  seq, follow the stride as they do where the rows are a constant.

Each symbolized graph is checked against numpy (what torch computes) at sizes within the bound.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from test_symbolize import parse

import onnxsurgery
from onnxsurgery.errors import PassError
from onnxsurgery.passes.symbolize import Symbolize
from onnxsurgery.passes.symbolize.plan import plan_symbolize

OPSET = '<ir_version: 8, opset_import: ["" : 17]>'
CPU = onnxsurgery.PassContext(provider="cpu")
OVER = "a size over the bound fails here"
H, D = 2, 3  # heads, width per head
F = H * D
BLOCK = 128
W = np.random.default_rng(7).standard_normal((F, F)).astype(np.float32)


def _named(model: onnx.ModelProto) -> onnx.ModelProto:
    for i, node in enumerate(model.graph.node):
        node.name = f"/{node.op_type}_{i}"
    return model


def _run(model: onnx.ModelProto, **feeds: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def _x(batch: int, seq: int) -> np.ndarray:
    return (
        np.random.default_rng(seq + 10 * batch).standard_normal((batch, seq, F)).astype(np.float32)
    )


def head_block_sums(x: np.ndarray) -> np.ndarray:
    """What torch computes: seq padded to a multiple of the block, projected, split per head,
    then into blocks; the sum of each block, ``[batch, heads, blocks, d]``."""
    b, s, _ = x.shape
    padded = np.pad(x, ((0, 0), (0, -s % BLOCK), (0, 0))) @ W
    heads = padded.reshape(b, -1, H, D).transpose(0, 2, 1, 3)
    return heads.reshape(b, H, -1, BLOCK, D).sum(axis=3)


def split_far_from_the_pad(traced: int = 8) -> onnx.ModelProto:
    """:func:`head_block_sums` as dynamo exports it at batch 2: a constant pad baked at
    ``traced``, and the Reshape into blocks five nodes after it."""
    count = -(-traced // BLOCK)
    return _named(
        parse(
            f"""{OPSET} net (float[2, {traced}, {F}] x) => (float[2, {H}, {count}, {D}] y) {{
                xp = Pad (x, pads)
                n = Mul (xp, one)
                p = MatMul (n, w)
                h = Reshape (p, heads)
                t = Transpose <perm = [0, 2, 1, 3]> (h)
                blocks = Reshape (t, split)
                y = ReduceSum <keepdims = 0> (blocks, three)
            }}""",
            pads=np.array([0, 0, 0, 0, -traced % BLOCK, 0], np.int64),
            one=np.array(1.0, np.float32),
            w=W,
            heads=np.array([2, count * BLOCK, H, D], np.int64),
            split=np.array([2, H, count, BLOCK, D], np.int64),
            three=np.array([3], np.int64),
        )
    )


def test_a_split_five_nodes_after_the_pad_is_read_under_the_bound() -> None:
    """Traced at batch 2 and seq 8, ``seq<=traced``: right at every size within the bound, a
    size over it fails at the guard; refused before, the split out of the pad's reach."""
    out = Symbolize(**{"x:0": "batch", "x:1": "seq<=traced"})(split_far_from_the_pad(), CPU).model
    for batch, seq in ((1, 1), (2, 5), (3, 8)):
        x = _x(batch, seq)
        np.testing.assert_allclose(_run(out, x=x), head_block_sums(x), rtol=1e-5, atol=1e-5)
    with pytest.raises(Exception, match=rf"seq<=8 \({OVER}\)"):
        _run(out, x=_x(2, 9))


def test_unbounded_the_far_split_is_refused_advising_the_bound() -> None:
    """Without a bound the pad is still a blocker (a fixed pad gives the same graph), and its
    refusal now names the bound that lets it through."""
    with pytest.raises(PassError, match=r"bound seq \(like seq<=traced"):
        Symbolize(**{"x:0": "batch", "x:1": "seq"})(split_far_from_the_pad(), CPU)


def runtime_pad(traced: int = 8) -> onnx.ModelProto:
    """A Pad by ``(-seq) % 128`` computed at run time, its pads built as TorchScript's
    ``F.pad`` builds them (filled out to ``2 * rank``, paired by a Reshape to ``[-1, 2]``,
    reversed, transposed, flattened), then a Reshape into blocks whose count the export baked
    at 1 (LongT5's later layers at batch 2)."""
    return _named(
        parse(
            f"""{OPSET} net (float[2, {traced}, {F}] x) => (float[2, 1, {F}] y) {{
                s = Shape (x)
                n = Gather <axis = 0> (s, one)
                neg = Neg (n)
                r = Mod (neg, blk)
                ru = Unsqueeze (r, zero)
                amounts = Concat <axis = 0> (zeros2, ru, zeros1)
                al = Shape (amounts)
                ln = Gather <axis = 0> (al, zero_s)
                fill = Sub (six, ln)
                fu = Unsqueeze (fill, zero)
                rest = ConstantOfShape <value = int64[1] {{0}}> (fu)
                full = Concat <axis = 0> (amounts, rest)
                pairs = Reshape (full, pair)
                rev = Slice (pairs, minus1, lowest, zero, minus1)
                tr = Transpose <perm = [1, 0]> (rev)
                flat = Reshape (tr, minus1)
                pads = Cast <to = 7> (flat)
                xp = Pad (x, pads)
                blocks = Reshape (xp, split)
                y = ReduceSum <keepdims = 0> (blocks, two)
            }}""",
            one=np.array(1, np.int64),
            zero=np.array([0], np.int64),
            zero_s=np.array(0, np.int64),
            blk=np.array(BLOCK, np.int64),
            zeros2=np.array([0, 0], np.int64),
            zeros1=np.array([0], np.int64),
            six=np.array(6, np.int64),
            pair=np.array([-1, 2], np.int64),
            minus1=np.array([-1], np.int64),
            lowest=np.array([-(2**63) + 1], np.int64),
            split=np.array([2, 1, BLOCK, F], np.int64),
            two=np.array([2], np.int64),
        )
    )


def block_sums(x: np.ndarray) -> np.ndarray:
    padded = np.pad(x, ((0, 0), (0, -x.shape[1] % BLOCK), (0, 0)))
    return padded.reshape(x.shape[0], -1, BLOCK, x.shape[2]).sum(axis=2)


def test_the_pads_torchscript_computes_at_run_time_are_read() -> None:
    """The rank's 6 is no size, and the pairs keep their values through the Reshape, Slice and
    Transpose: the Pad's output reads ``seq`` plus the remainder, no rule falls back to ONNX's
    inference (it did from the Reshape to ``[-1, 2]`` on)."""
    plan = plan_symbolize(runtime_pad(), {"x": {0: "batch", 1: "seq"}})
    a, sol = plan.analysis, plan.solution
    fell_back = [n for n in plan.notes if "could not read its inputs" in n]
    assert not fell_back, fell_back
    padded = sol.resolve(a.tensors["xp"].shape[1])
    assert "seq" in {str(x) for x in padded.atoms()}, padded


def test_a_remainder_computed_at_run_time_is_block_minus_seq_within_the_bound() -> None:
    """``(-seq) % 128`` within ``seq<=traced`` is ``128 - seq``: the baked count of 1 holds at
    every size the bound allows, and the model is right there."""
    out = Symbolize(**{"x:0": "batch", "x:1": "seq<=traced"})(runtime_pad(), CPU).model
    for batch, seq in ((1, 1), (3, 5), (2, 8)):
        x = _x(batch, seq)
        np.testing.assert_allclose(_run(out, x=x), block_sums(x), rtol=1e-5, atol=1e-5)


def test_unbounded_a_remainder_is_no_size_the_plan_decides() -> None:
    """Without the bound the count baked at 1 holds only up to one block: refused, advising
    the bound (it read the block as the padded length before, one block of 256 at seq 130
    where torch makes two of 128, and passed)."""
    with pytest.raises(
        PassError,
        match=r"holds only at the traced size.*bound seq .*"
        r"the remainder \(-seq\) % 128 the graph computes is then -seq \+ 128",
    ):
        Symbolize(**{"x:0": "batch", "x:1": "seq"})(runtime_pad(), CPU)


def cross_mask(batch: int = 2, seq: int = 8) -> onnx.ModelProto:
    """A ``[batch, seq]`` mask read through a Flatten at ``arange(seq) + arange(batch) * seq``
    (TorchScript's cross-attention mask in PEGASUS-X's decoder): the columns a constant folded
    at the traced seq, the rows a Range over the batch."""
    return _named(
        parse(
            f"""{OPSET} net (int64[{batch}, {seq}] m) => (int64[{batch}, 1, {seq}] y) {{
                mf = Flatten <axis = 2> (m)
                s = Shape (m)
                b = Gather <axis = 0> (s, zero_s)
                rows = Range (zero_s, b, one_s)
                ru = Unsqueeze (rows, axes12)
                st = Gather <axis = 0> (s, one)
                off = Mul (ru, st)
                idx = Add (cols, off)
                g = Gather <axis = 0> (mf, idx)
                y = Squeeze (g, last)
            }}""",
            zero_s=np.array(0, np.int64),
            one_s=np.array(1, np.int64),
            one=np.array([1], np.int64),
            axes12=np.array([1, 2], np.int64),
            cols=np.arange(seq, dtype=np.int64).reshape(1, 1, seq),
            last=np.array([3], np.int64),
        )
    )


def test_flat_index_columns_follow_the_stride_where_the_rows_are_a_range() -> None:
    """The columns ``0 .. 7`` span the stride (seq): at seq 5 and 11 each row reads its own
    entries, as torch does."""
    out = Symbolize(**{"m:0": "batch", "m:1": "seq"})(cross_mask(), CPU).model
    for batch, seq in ((1, 5), (3, 11), (2, 8)):
        m = np.arange(batch * seq, dtype=np.int64).reshape(batch, seq)
        np.testing.assert_array_equal(_run(out, m=m), m[:, None, :])


def test_a_count_the_graph_computes_follows_a_pad_it_computes() -> None:
    """The pad ``(-seq) % 128`` and the count ``padded / 128`` both computed at run time
    (TorchScript's form where the length comes from a shape): the remainder is ``128*count -
    seq`` at every size, so the Reshape holds and the model is right at two and three blocks,
    unbounded; refused at the Div before."""
    from test_block_padding_refs import AXES, _assert_right_past_one_block, torchscript_blocks

    out = Symbolize(**AXES)(torchscript_blocks(pad_from_size=True), CPU).model
    _assert_right_past_one_block(out)
    x = _x(3, 7)[:, :, :3]
    np.testing.assert_allclose(_run(out, x=x), block_sums(x), rtol=1e-5, atol=1e-5)
