"""symbolize on CANINE's molecules repeated back to characters, traced at batch 1.

CANINE downsamples ``seq`` characters to ``n`` molecules (one of them its CLS) and repeats them
back: ``repeat_interleave(molecules[:, 1:], 4)`` then the last molecule ``seq % 4 + 4`` times,
``seq`` in all. Exported statically at batch 1, seq 8 (``n`` = 2), the first ``repeat_interleave``
is ``Reshape([1, -1, C])`` of ``[batch, n - 1, 4, C]``, whose ``n - 1`` is 1 (the slice start 1
fixed, ``n - 1`` rows left) and whose ``batch`` is 1 too. Reading that Reshape, the batch pair
(one dim on both sides) was given back to the middle, so ``n - 1`` merged into the batch and was
hinted 1 for good: the Slice start read as ``n - 1`` and the remainder as ``seq - 4``; the model
came back exit 0, verified ``runs``, and wrong at seq 13 (CANINE by dynamo, bench/sweep.py).
The middle joins the Reshape's own ``-1`` now (``4*(n - 1)``), as it does at batch 2.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import onnxruntime as ort
import pytest
from sweep_cases import scored_case

import onnxsurgery
from onnxsurgery.passes.symbolize import Symbolize
from onnxsurgery.passes.symbolize.plan import plan_symbolize

HEAD = '<ir_version: 8, opset_import: ["" : 17]>'
BIG = 9223372036854775807


def molecules_repeated(batch: int, seq: int) -> onnx.ModelProto:
    """``y = cat([x, repeat(molecules)], -1)``: molecules by a max pool of 4 (``(seq - 4)//4 + 1``), the
    first dropped and each other repeated 4 times, the last ``seq % 4 + 4`` times, as CANINE's
    ``_repeat_molecules`` exported by dynamo at ``batch``, ``seq`` (every size a constant)."""
    rest = seq % 4 + 4
    m = onnx.parser.parse_model(f"""{HEAD}
    g (float[{batch}, {seq}, 8] x) => (float[{batch}, {seq}, 16] y) {{
      xt = Transpose <perm = [0, 2, 1]> (x)
      p = MaxPool <kernel_shape = [4], strides = [4]> (xt)
      mol = Transpose <perm = [0, 2, 1]> (p)
      one = Constant <value = int64[1] {{1}}> ()
      minus = Constant <value = int64[1] {{-1}}> ()
      big = Constant <value = int64[1] {{{BIG}}}> ()
      body = Slice (mol, one, big, one)
      ax = Constant <value = int64[1] {{2}}> ()
      bu = Unsqueeze (body, ax)
      times = Constant <value = int64[4] {{1, 1, 4, 1}}> ()
      be = Expand (bu, times)
      flat = Constant <value = int64[3] {{{batch}, -1, 8}}> ()
      br = Reshape (be, flat)
      last = Slice (mol, minus, big, one)
      lu = Unsqueeze (last, ax)
      rest = Constant <value = int64[4] {{1, 1, {rest}, 1}}> ()
      le = Expand (lu, rest)
      lr = Reshape (le, flat)
      rep = Concat <axis = 1> (br, lr)
      y = Concat <axis = -1> (x, rep)
    }}""")
    onnx.checker.check_model(m)
    assert [
        d.dim_value
        for d in onnx.shape_inference.infer_shapes(m).graph.output[0].type.tensor_type.shape.dim
    ] == [batch, seq, 16]
    return m


AXES = {"x:0": "batch", "x:1": "seq"}


def test_the_slice_start_stays_fixed_and_the_remainder_follows_the_molecules() -> None:
    plan = plan_symbolize(molecules_repeated(1, 8), {"x": {0: "batch", 1: "seq"}})
    assert not plan.blockers
    changes = {c.input: c.new for c in plan.changes}
    assert "one" not in changes  # the slice start 1: was read as ((seq - 4)//4 + 1) - 1
    assert changes["rest"] == "[1, 1, -((seq - 4)//4 + 1)*4 + seq + 4, 1]"  # was seq - 4
    assert changes["flat"] == "[batch, -1, 8]"


@pytest.mark.parametrize("traced", [1, 2])
def test_the_molecules_repeated_back_match_the_model_written_at_other_sizes(traced: int) -> None:
    result = Symbolize(**AXES)(
        molecules_repeated(traced, 8), onnxsurgery.PassContext(provider="cpu")
    )
    rng = np.random.default_rng(0)
    for batch, seq in ((3, 13), (2, 16), (1, 5), (2, 10)):
        x = rng.standard_normal((batch, seq, 8)).astype(np.float32)
        runs = [
            ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
            for m in (result.model, molecules_repeated(batch, seq))
        ]
        got, want = (s.run(None, {"x": x})[0] for s in runs)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=f"{batch}, {seq}")


def test_a_hinted_start_whose_fixed_value_fits_once_the_minus_one_is_free_is_ambiguous(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reading before the fix, forced: the Reshape's middle ``n - 1`` merged into the batch
    (ends matched 0 and 2). The start 1 hinted as ``n - 1`` breaks the graph fixed alone (the
    ``-1`` hinted 4 with it needs ``n - 1 == 1``); with that ``-1`` free as well it fits, so
    ``seq`` is reported ``ambiguous`` (it was verified ``runs``)."""
    from onnxsurgery.shapes.reshape_reading import ReshapeReading

    ends = ReshapeReading._ends_of_ones

    def merged_into_the_batch(self, src, dst, *args, **kwargs):
        most = ends(self, src, dst, *args, **kwargs)
        return (0, 2) if (len(src), len(dst), most) == (4, 3, (1, 1)) else most

    monkeypatch.setattr(ReshapeReading, "_ends_of_ones", merged_into_the_batch)
    plan = plan_symbolize(molecules_repeated(1, 8), {"x": {0: "batch", 1: "seq"}})
    assert {c.input: c.new for c in plan.changes}["one"] == "[((seq - 4)//4 + 1) - 1]"
    assert list(plan.ambiguous) == ["seq"]
    [said] = plan.ambiguous["seq"]
    assert "fixed 1 (as traced) fits the graph too once the other sizes Reshape" in said, said
    assert "((seq - 4)//4 + 1) - 1 chosen" in said, said


@pytest.mark.sweep_rows
def test_canine_by_dynamo_at_batch_1_matches_torch_through_the_sweep_worker() -> None:
    """The real model (transformers' CANINE, cached under build/sweep/), as the sweep scores
    it: was wrong at seq 13 (max abs err 3.66), exit 0."""
    case = scored_case("canine.base", "dynamo", 1)
    assert case["static"]["status"] == "ok", case
    assert case["symbolize"]["status"] == "pass", case["symbolize"]
