"""What TorchScript leaves of a chunked linear attention (issue 30: Bailing hybrid and GLM-5 next
by TorchScript at batch 2, where re-export passes), in three reads symbolize did not make:

- ``attention_mask[:, -seq:]``: a Slice from the end, whose start the trace folded to ``-8``.
  Negative sizes were kept fixed (flags, never sizes), so the slice was 8 long at every size and
  met ``seq``: "needs 8 == seq". A Slice start or end of -2 or less is now minus an unknown.
- ``torch.zeros(batch, heads, k, v)``: the recurrent state, folded to a constant of the traced
  batch and read by a MatMul, whose constant second input was taken for a weight: "needs
  batch == 2". A MatMul constant with batch dims (rank over 2) is read as data now, and its
  zeros are rebuilt at the batch.
- a causal conv's output cut to ``x[:, :, :seq]`` (8, a size ``seq`` fits too), then padded to
  one chunk of 64: read as following ``seq`` (reference cases choose that reading), the pad
  went unread under ``seq<=traced``, since the bounded pad was read before the cut was tied to
  ``seq``; it is read again after.

The oracle is numpy's formula at other sizes (and the original model at the traced one).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from test_symbolize import parse

import onnxsurgery
from onnxsurgery.passes.symbolize import Symbolize
from onnxsurgery.passes.symbolize.plan import plan_symbolize
from onnxsurgery.validation.references import Case, save_case
from onnxsurgery.validation.runtime import run_model

RNG = np.random.default_rng(0)
CPU = onnxsurgery.PassContext(provider="cpu")


def test_a_slice_from_the_end_by_the_traced_length_follows_seq():
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[2, 8] mask, float[2, 8, 4] x) => (float[2, 8, 4] y) {
            starts = Constant <value = int64[1] {-8}> ()
            ends = Constant <value = int64[1] {9223372036854775807}> ()
            axes = Constant <value = int64[1] {1}> ()
            last = Slice (mask, starts, ends, axes)
            two = Constant <value = int64[1] {2}> ()
            m = Unsqueeze (last, two)
            y = Mul (x, m)
        }
        """
    )
    axes = {"mask:0": "batch", "mask:1": "seq", "x:0": "batch", "x:1": "seq"}
    out = Symbolize(**axes)(model, CPU).model
    for batch, seq in [(3, 5), (1, 8), (2, 11)]:
        mask = RNG.random((batch, seq)).astype(np.float32)
        x = RNG.standard_normal((batch, seq, 4)).astype(np.float32)
        got = run_model(out, {"mask": mask, "x": x}, "cpu")["y"]
        np.testing.assert_allclose(got, x * mask[:, -seq:, None], rtol=1e-6)


def test_a_last_token_slice_stays_one_long():
    """``x[:, -1:]`` keeps its -1 fixed: one token at every length."""
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[2, 8, 4] x) => (float[2, 1, 4] y) {
            starts = Constant <value = int64[1] {-1}> ()
            ends = Constant <value = int64[1] {9223372036854775807}> ()
            axes = Constant <value = int64[1] {1}> ()
            y = Slice (x, starts, ends, axes)
        }
        """
    )
    out = Symbolize(**{"x:0": "batch", "x:1": "seq"})(model, CPU).model
    x = RNG.standard_normal((3, 6, 4)).astype(np.float32)
    np.testing.assert_array_equal(run_model(out, {"x": x}, "cpu")["y"], x[:, -1:])


def test_a_zero_state_folded_at_the_traced_batch_follows_the_batch():
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[2, 3, 5, 4] q) => (float[2, 3, 5, 4] y) {
            s = MatMul (q, state)
            y = Add (s, q)
        }
        """,
        state=np.zeros((2, 3, 4, 4), np.float32),
    )
    out = Symbolize(**{"q:0": "batch"})(model, CPU).model
    assert not {i.name for i in out.graph.initializer} & {"state"}
    for batch in (1, 3, 5):
        q = RNG.standard_normal((batch, 3, 5, 4)).astype(np.float32)
        np.testing.assert_array_equal(run_model(out, {"q": q}, "cpu")["y"], q)


def test_a_weight_of_a_matmul_stays_a_weight():
    """A plain ``[K, N]`` weight keeps its sizes (and its initializer)."""
    w = RNG.standard_normal((4, 2)).astype(np.float32)
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[2, 5, 4] x) => (float[2, 5, 2] y) {
            y = MatMul (x, w)
        }
        """,
        w=w,
    )
    out = Symbolize(**{"x:0": "batch", "x:1": "seq"})(model, CPU).model
    x = RNG.standard_normal((3, 7, 4)).astype(np.float32)
    np.testing.assert_allclose(run_model(out, {"x": x}, "cpu")["y"], x @ w, rtol=1e-5)
    assert "w" in {i.name for i in out.graph.initializer}


def exporter_named(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every node named, as an exporter names them."""
    for i, node in enumerate(model.graph.node):
        node.name = f"/{node.op_type}_{i}"
    return model


def causal_chunk_model() -> onnx.ModelProto:
    """x [1, 8, 4] padded by 3 in front (a causal conv's reach), cut back to ``[:8]`` (a size
    ``seq`` fits too), padded by 56 to one chunk of 64, split into chunks, summed along them,
    cut to x's own length (read at run time) and added to x: :func:`causal_chunk_sums`."""
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[1, 8, 4] x) => (float[1, 8, 4] y) {
            front = Constant <value = int64[6] {0, 3, 0, 0, 0, 0}> ()
            conv = Pad (x, front)
            zero = Constant <value = int64[1] {0}> ()
            eight = Constant <value = int64[1] {8}> ()
            one = Constant <value = int64[1] {1}> ()
            cut = Slice (conv, zero, eight, one)
            tail = Constant <value = int64[6] {0, 0, 0, 0, 56, 0}> ()
            padded = Pad (cut, tail)
            chunks = Constant <value = int64[4] {1, 1, 64, 4}> ()
            split = Reshape (padded, chunks)
            two = Constant <value = int64 {2}> ()
            summed = CumSum (split, two)
            flat = Constant <value = int64[3] {1, 64, 4}> ()
            back = Reshape (summed, flat)
            sx = Shape (x)
            two1 = Constant <value = int64[1] {2}> ()
            length = Slice (sx, one, two1)
            first = Slice (back, zero, length, one)
            y = Add (first, x)
        }
        """
    )
    return exporter_named(model)


def causal_chunk_sums(x: np.ndarray) -> np.ndarray:
    """What torch computes: the running sums of x delayed by 3, plus x."""
    seq = x.shape[1]
    delayed = np.pad(x, ((0, 0), (3, 0), (0, 0)))[:, :seq]
    return np.cumsum(delayed, axis=1) + x


def test_a_cut_read_as_seq_pads_to_one_chunk_within_the_bound():
    model = causal_chunk_model()
    axes = {"x": {1: "seq"}}
    following = plan_symbolize(model, axes, generalize=True, bounds={"seq": None})
    assert not following.blockers, [b.why for b in following.blockers]
    assert following.bounds == {"seq": 8}


def test_a_reading_that_fails_on_ort_where_the_other_runs_is_dropped(tmp_path):
    """The cut fixed at 8 and the cut following seq both match a case at seq 7 (the sums are
    causal: the row the fixed cut keeps is cut off at the end), so the case cannot choose; the
    fixed cut fails on ONNX Runtime at seq 2 (7 rows, short of the 64 a chunk needs), where the
    other runs: that one is taken, and it matches numpy at every length within the bound."""
    x = RNG.standard_normal((1, 7, 4)).astype(np.float32)
    save_case(Case("given", {"x": x}, {"y": causal_chunk_sums(x)}), tmp_path)
    ctx = onnxsurgery.PassContext(provider="cpu", references=tmp_path)
    result = Symbolize(**{"x:1": "seq<=traced"})(causal_chunk_model(), ctx)
    said = " ".join(d.message for d in result.diagnostics)
    assert "fails on ONNX Runtime at seq=2" in said, said
    for seq in range(1, 9):
        x = RNG.standard_normal((1, seq, 4)).astype(np.float32)
        got = run_model(result.model, {"x": x}, "cpu")["y"]
        np.testing.assert_allclose(got, causal_chunk_sums(x), rtol=1e-5, atol=1e-5)



def test_references_that_decide_nothing_say_why_and_what_to_do(tmp_path):
    """Without the bound, the reading that follows seq is blocked itself (the one-chunk pad),
    so the case at seq 7 decides nothing; the refusal used to repeat "pass reference cases",
    which had been done (GLM-5 next by TorchScript). It now says why, with that reading's
    advice, the bound, which a rerun follows to a model that matches numpy."""
    x = RNG.standard_normal((1, 7, 4)).astype(np.float32)
    save_case(Case("given", {"x": x}, {"y": causal_chunk_sums(x)}), tmp_path)
    ctx = onnxsurgery.PassContext(provider="cpu", references=tmp_path)
    with pytest.raises(onnxsurgery.OnnxSurgeryError) as refused:
        Symbolize(**{"x:1": "seq"})(causal_chunk_model(), ctx)
    said = str(refused.value)
    assert "the reference cases given decide nothing while the reading with" in said, said
    assert "bound seq (like seq<=traced" in said, said
    result = Symbolize(**{"x:1": "seq<=traced"})(causal_chunk_model(), ctx)
    x = RNG.standard_normal((1, 5, 4)).astype(np.float32)
    got = run_model(result.model, {"x": x}, "cpu")["y"]
    np.testing.assert_allclose(got, causal_chunk_sums(x), rtol=1e-5, atol=1e-5)


def runtime_chunk_model() -> onnx.ModelProto:
    """x [1, 8, 4] padded to one chunk of 64 by an amount TorchScript leaves to run time,
    ``(64 - n % 64) % 64`` (Bailing's later layers), split into the chunk, summed along it and cut
    back to x's length: the running sums of x; and the sum of the chunk's first 8 rows (a cut
    inside the chunk, 8 long as seq was traced)."""
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[1, 8, 4] x) => (float[1, 8, 4] y, float[1, 1, 4] head) {
            sx = Shape (x)
            one = Constant <value = int64[1] {1}> ()
            two1 = Constant <value = int64[1] {2}> ()
            zero = Constant <value = int64[1] {0}> ()
            length = Slice (sx, one, two1)
            block = Constant <value = int64[1] {64}> ()
            r = Mod (length, block)
            left = Sub (block, r)
            amount = Mod (left, block)
            lead = Constant <value = int64[4] {0, 0, 0, 0}> ()
            tail = Constant <value = int64[1] {0}> ()
            pads = Concat <axis = 0> (lead, amount, tail)
            padded = Pad (x, pads)
            chunks = Constant <value = int64[4] {1, 1, 64, 4}> ()
            split = Reshape (padded, chunks)
            two = Constant <value = int64 {2}> ()
            summed = CumSum (split, two)
            flat = Constant <value = int64[3] {1, 64, 4}> ()
            back = Reshape (summed, flat)
            y = Slice (back, zero, length, one)
            eight = Constant <value = int64[1] {8}> ()
            rows = Slice (split, zero, eight, two1)
            head = ReduceSum <keepdims = 0> (rows, two1)
        }
        """
    )
    return exporter_named(model)


def test_a_pad_to_one_chunk_left_to_run_time_reads_within_the_bound():
    """``(64 - n % 64) % 64`` shrinks as n grows: it was no remainder the bound could read, the
    chunk's length stayed unknown, and a cut inside the chunk met seq as a size it fits too.
    Within seq<=8 it is ``64 - seq``: the chunk is 64 at every size."""
    out = Symbolize(**{"x:1": "seq<=traced"})(runtime_chunk_model(), CPU).model
    for seq in range(1, 9):
        x = RNG.standard_normal((1, seq, 4)).astype(np.float32)
        got = run_model(out, {"x": x}, "cpu")
        np.testing.assert_allclose(got["y"], np.cumsum(x, axis=1), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got["head"], x.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-5)
