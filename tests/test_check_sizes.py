"""The sizes symbolize's check runs at: inputs the model takes, every division's remainder kept.

A stack of strided convolutions (ConvNeXt: a 4x4 stem, then 2x2 stride-2 downsamplings; SegFormer:
a sequence-reduction conv as wide as its stage) divides a size again and again. A check size
taken 8 below the traced one left a later stage with fewer pixels than its kernel: no input of
the model at all (torch refuses it as ONNX Runtime does), yet the check blamed the plan for it.
"""

from __future__ import annotations

import numpy as np
import onnx
from test_symbolize import parse

import onnxsurgery
from onnxsurgery.passes.symbolize import Symbolize
from onnxsurgery.passes.symbolize.plan import plan_symbolize
from onnxsurgery.passes.symbolize.sizes import Divisions, check_sizes, size_steps
from onnxsurgery.validation.runtime import run_model

CPU = onnxsurgery.PassContext(provider="cpu")
SPATIAL = {"x:0": "batch", "x:2": "height", "x:3": "width"}
RNG = np.random.default_rng(0)


def _w(out: int, inp: int, k: int) -> np.ndarray:
    """Conv weights, the same for the same shape (a model built twice holds the same ones)."""
    return np.random.default_rng(k).standard_normal((out, inp, k, k)).astype(np.float32)


def stride_stack(shape: str = "1, 1, 64, 64", out: str = "1, 2, 1, 1") -> onnx.ModelProto:
    """A 4x4 stride-4 stem and four 2x2 stride-2 convs (64 in all), traced at 64: the last
    stage is one pixel, so at 56 a 2x2 conv meets a stage of one pixel."""
    return parse(
        f"""
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[{shape}] x) => (float[{out}] y) {{
          a = Conv <kernel_shape = [4, 4], strides = [4, 4]> (x, w0)
          b = Conv <kernel_shape = [2, 2], strides = [2, 2]> (a, w1)
          c = Conv <kernel_shape = [2, 2], strides = [2, 2]> (b, w2)
          d = Conv <kernel_shape = [2, 2], strides = [2, 2]> (c, w3)
          y = Conv <kernel_shape = [2, 2], strides = [2, 2]> (d, w4)
        }}
        """,
        w0=_w(2, 1, 4), w1=_w(2, 2, 2), w2=_w(2, 2, 2), w3=_w(2, 2, 2), w4=_w(2, 2, 2),
    )  # fmt: skip


def padded_stack() -> onnx.ModelProto:
    """SegFormer's overlapping patch embeddings (7x7 stride 4 pad 3, then 3x3 stride 2 pad 1) and
    a sequence-reduction conv as wide as the second stage (4x4 stride 4), traced at 32: 8, 4, 1."""
    return parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[1, 1, 32, 32] x) => (float[1, 2, 1, 1] y) {
          a = Conv <kernel_shape = [7, 7], strides = [4, 4], pads = [3, 3, 3, 3]> (x, w0)
          b = Conv <kernel_shape = [3, 3], strides = [2, 2], pads = [1, 1, 1, 1]> (a, w1)
          y = Conv <kernel_shape = [4, 4], strides = [4, 4]> (b, w2)
        }
        """,
        w0=_w(2, 1, 7), w1=_w(2, 2, 3), w2=_w(2, 2, 4),
    )  # fmt: skip


def _checked_heights(result: onnxsurgery.PassResult) -> set[int]:
    text = next(d.message for d in result.diagnostics if d.message.startswith("check: ran at"))
    return {int(h) for h in __import__("re").findall(r"height=(\d+)", text)}


def test_stride_stack_is_checked_at_sizes_it_takes() -> None:
    """The check ran at 56 (8 below 64) and failed at the 2x2 conv of a one-pixel stage; now its
    sizes keep all five remainders (step 64) and skip 0 (no input): 128 and 192."""
    result = Symbolize(**SPATIAL)(stride_stack(), CPU)
    assert _checked_heights(result) == {64, 128, 192}
    dynamic = stride_stack("N, 1, H, W", "N, 2, h, w")  # the same weights, nothing traced
    x = RNG.standard_normal((2, 1, 192, 128)).astype(np.float32)
    (got,) = run_model(result.model, {"x": x}, provider="cpu").values()
    (want,) = run_model(dynamic, {"x": x}, provider="cpu").values()
    assert got.shape == (2, 2, 3, 2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_sizes_keep_each_remainder_and_stay_in_the_domain() -> None:
    """With padding, a division's remainder moves with the size: the step keeps all three
    (32: 4 for the stem, 8 for the second conv, 32 for the reduction), and 32 - 32 = 0 is no
    input, so the other size is 96."""
    plan = plan_symbolize(padded_stack(), {"x": {0: "batch", 2: "height", 3: "width"}})
    divisions = Divisions.of(plan.analysis, plan.solution)
    steps = size_steps(plan.symbols, divisions, {"height": 8, "width": 8})
    assert steps["height"] == steps["width"] == 32
    assert "batch" not in steps
    assert divisions.accepts({"batch": 1, "height": 32, "width": 32})
    assert not divisions.accepts({"batch": 1, "height": 24, "width": 32})  # 6 -> 3 -> 0
    assert divisions.keeps_remainders(plan.symbols, {**plan.symbols, "height": 64})
    assert not divisions.keeps_remainders(plan.symbols, {**plan.symbols, "height": 40})
    sizes = check_sizes(plan.symbols, {"batch"}, steps, None, divisions=divisions)
    assert sorted(s["height"] for s in sizes) == [32, 32, 32, 64, 96]


def test_padded_stack_symbolizes_and_matches_at_the_checked_sizes() -> None:
    """The model SegFormer's stages reduce to symbolizes, checked at sizes it takes."""
    result = Symbolize(**SPATIAL)(padded_stack(), CPU)
    assert _checked_heights(result) == {32, 64, 96}


def test_without_divisions_the_sizes_are_as_before() -> None:
    """A symbol no strided op divides: one up, one down (two up where one down is below 2)."""
    sizes = check_sizes({"batch": 1, "seq": 5}, steps=None, divisions=Divisions())
    assert [(s["batch"], s["seq"]) for s in sizes] == [(1, 5), (2, 5), (3, 5), (1, 6), (1, 4)]
