"""How the shape solver decides its unknowns, and in which order (issue 30).

Each test reproduces, on a tiny inline graph, the mechanism of an exported model the solver (or
the coincidence readings that follow it) decided wrongly: GPT-J's position index, SegFormer's
attention over a grid traced at one pixel, CvT's cls token, CodeGen's qkv split. Values at
other sizes are checked against numpy or against the same graph with its sizes computed at run
time.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from test_symbolize import parse

import onnxsurgery
from onnxsurgery.passes.symbolize import Symbolize
from onnxsurgery.shapes.dims import Dim
from onnxsurgery.shapes.propagation import propagate
from onnxsurgery.shapes.solver import solve
from onnxsurgery.validation.runtime import run_model

CPU = onnxsurgery.PassContext(provider="cpu")
RNG = np.random.default_rng(0)
TABLE = RNG.standard_normal((32, 4)).astype(np.float32)


def rotary_by_position_index(batch: int, seq: int) -> onnx.ModelProto:
    """GPT-J's rotary factor as TorchScript traces it: the position index ``[[0 .. seq-1]]``
    is a constant (shape ``[1, seq]``), gathered from a sin table, tiled along the rotary dim
    by a repeat of 1 on the position axis (``repeat_interleave``), and multiplied with the
    queries ``x.view(batch, seq, -1, 8)``. The Mul makes ``index_dim * repeat == seq``."""
    positions = ", ".join(str(i) for i in range(seq))
    return parse(
        f"""
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[{batch}, {seq}, 16] x) => (float[{batch}, {seq}, 2, 8] y)
            <int64[1, {seq}] pos = {{{positions}}}, int64[4] heads = {{{batch}, {seq}, -1, 8}},
             int64[4] repeats = {{1, 1, 1, 2}}, int64[1] two = {{2}}> {{
          q = Reshape (x, heads)
          g = Gather (table, pos)
          u = Unsqueeze (g, two)
          t = Tile (u, repeats)
          y = Mul (q, t)
        }}
        """,
        table=TABLE,
    )


def rotary_in_numpy(x: np.ndarray) -> np.ndarray:
    b, s, _ = x.shape
    sin = np.tile(TABLE[np.arange(s)][None, :, None, :], (1, 1, 1, 2))
    return x.reshape(b, s, -1, 8) * sin


def test_a_position_index_times_a_repeat_of_one_takes_seq_before_data_dims_keep_theirs() -> None:
    """``$d*$v == seq`` (the index's length times Tile's repeat, against the queries' ``seq``):
    keeping the data dim at its traced 6 first left ``6*$v == seq``, which no repeat solves,
    and the Mul became a conflict "needs 6 == seq"."""
    a = propagate(rotary_by_position_index(3, 6), {"x": {0: "batch", 1: "seq"}})
    sol = solve(a)
    assert sol.conflicts == []
    (use,) = [u for u in a.uses if u.tensor == "pos"]
    assert [sol.resolve(Dim.sym(str(x))) for x in use.atoms] == [Dim.const(1), Dim.sym("seq")]


def test_a_rotary_position_index_follows_seq_end_to_end() -> None:
    """The symbolized model generates the index at every length and matches numpy."""
    result = Symbolize(**{"x:0": "batch", "x:1": "seq"})(rotary_by_position_index(3, 6), CPU)
    for b, s in ((3, 6), (2, 9), (1, 4)):
        x = RNG.standard_normal((b, s, 16)).astype(np.float32)
        (got,) = run_model(result.model, {"x": x}, provider="cpu").values()
        np.testing.assert_allclose(got, rotary_in_numpy(x), rtol=1e-6, atol=1e-6)


def reduced_attention(
    channels: int, targets: dict[str, list[int]], x: str, queries: str = "q"
) -> onnx.ModelProto:
    """SegFormer's efficient self-attention around a stride-8 conv (8x8 kernel) traced down to
    one pixel: ``tokens`` flattens the image, ``reduce`` the conv's output into the keys and
    values; ``split_q``/``split_kv`` are ``view(*shape[:-1], -1, head)``, ``merge`` puts the
    heads back, ``proj`` projects. The queries (``q``: every pixel; ``kv``: the reduced grid,
    SegFormer's last stage) attend over the reduced grid."""
    text = f"""
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[{x}] x) => (float[N, S, {channels}] y) {{
          t = Reshape (x, tokens)
          q = Transpose <perm = [0, 2, 1]> (t)
          r = Conv <kernel_shape = [8, 8], strides = [8, 8]> (x, w)
          rf = Reshape (r, reduce)
          kv = Transpose <perm = [0, 2, 1]> (rf)
          qh = Reshape ({queries}, split_q)
          qt = Transpose <perm = [0, 2, 1, 3]> (qh)
          kh = Reshape (kv, split_kv)
          kt = Transpose <perm = [0, 2, 3, 1]> (kh)
          vh = Reshape (kv, split_kv)
          vt = Transpose <perm = [0, 2, 1, 3]> (vh)
          s = MatMul (qt, kt)
          p = Softmax <axis = -1> (s)
          o = MatMul (p, vt)
          ot = Transpose <perm = [0, 2, 1, 3]> (o)
          m = Reshape (ot, merge)
          y = MatMul (m, proj)
        }}
    """
    rng = np.random.default_rng(2)
    arrays = {k: np.array(v, dtype=np.int64) for k, v in targets.items()}
    return parse(
        text,
        w=rng.standard_normal((channels, channels, 8, 8)).astype(np.float32) / 8,
        proj=rng.standard_normal((channels, channels)).astype(np.float32),
        **arrays,
    )


def check_at_other_sizes(traced: onnx.ModelProto, dynamic: onnx.ModelProto, channels: int) -> None:
    result = Symbolize(**{"x:0": "batch", "x:2": "height", "x:3": "width"})(traced, CPU)
    for shape in ((2, channels, 8, 8), (3, channels, 16, 24), (1, channels, 24, 8)):
        x = RNG.standard_normal(shape).astype(np.float32)
        (got,) = run_model(result.model, {"x": x}, provider="cpu").values()
        (want,) = run_model(dynamic, {"x": x}, provider="cpu").values()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_key_split_beside_a_query_of_one_head_keeps_the_reduced_grid_whole() -> None:
    """One head (8 channels of 8): the keys' ``[b, h*w, 8] -> [2, 1, -1, 8]`` holds two 1s,
    the token count and the heads. Splitting ``h*w`` over them gave the heads dim ``w``; the
    MatMul with the queries (one head, the constant 1) broadcast it away in the analysis, so
    nothing contradicted it, and ONNX Runtime failed at the output projection at any other
    width ("a planning bug of symbolize"). The dim a broadcast dropped for a constant 1 is 1."""
    sizes = {"tokens": [2, 8, -1], "reduce": [2, 8, -1], "merge": [2, 64, -1]}
    traced = reduced_attention(
        8, sizes | {"split_q": [2, 64, -1, 8], "split_kv": [2, 1, -1, 8]}, "2, 8, 8, 8"
    )
    free = {"tokens": [0, 8, -1], "reduce": [0, 8, -1], "merge": [0, 0, -1]}
    dynamic = reduced_attention(
        8, free | {"split_q": [0, 0, -1, 8], "split_kv": [0, 0, -1, 8]}, "N, 8, H, W"
    )
    check_at_other_sizes(traced, dynamic, 8)


def test_tokens_traced_at_one_pixel_stay_whole_beside_the_heads() -> None:
    """Eight heads of 2 over a grid that is one pixel at the traced size (SegFormer's last
    stage): ``[b, h*w, 16] -> [2, 1, -1, 2]``. The split gave the 1 ``h`` and the -1 ``w*8``
    (a width merged into the heads), a model ONNX Runtime runs and that computes attention
    over the wrong axes at any other size: the symbols traced at 1 stay with the 1."""
    sizes = {"tokens": [2, 16, -1], "reduce": [2, 16, -1], "merge": [2, 1, -1]}
    split = {"split_q": [2, 1, -1, 2], "split_kv": [2, 1, -1, 2]}
    x = "2, 16, 8, 8"
    traced = reduced_attention(16, sizes | split, x, "kv")
    free = {"tokens": [0, 16, -1], "reduce": [0, 16, -1], "merge": [0, 0, -1]}
    both = {"split_q": [0, 0, -1, 2], "split_kv": [0, 0, -1, 2]}
    dynamic = reduced_attention(16, free | both, "N, 16, H, W", "kv")
    check_at_other_sizes(traced, dynamic, 16)


def cls_token_stage(
    batch: int, sizes: dict[str, list[int]], x: str, dynamic: bool
) -> onnx.ModelProto:
    """CvT's stage with a cls token: the image's tokens ``[b, h*w, 4]`` get the cls token
    (a ``[1, 1, 4]`` weight expanded to the batch) in front; ``x[:, 0:1]`` takes it off again,
    ``x[:, 1:end]`` the tokens, which go back on the grid for a 3x3 conv and are flattened.
    Traced, the slice's end is the traced ``1 + h*w`` and the sizes are constants; ``dynamic``
    computes them from the input's shape (what torch does at any size)."""
    if dynamic:
        shapes = """
          s = Shape (x)
          b = Slice (s, zero, one)
          hw = Slice (s, two, four)
          expand = Concat <axis = 0> (b, one, one)
          grid = Concat <axis = 0> (b, four_c, hw)
        """
    else:
        shapes = ""
    text = f"""
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[{x}] x) => (float[N, 1, 4] head, float[N, T, 4] y) {{
          {shapes}
          f = Reshape (x, flat)
          tok = Transpose <perm = [0, 2, 1]> (f)
          c = Expand (cls, expand)
          cat = Concat <axis = 1> (c, tok)
          head = Slice (cat, zero, one, one)
          body = Slice (cat, one, end, one)
          bt = Transpose <perm = [0, 2, 1]> (body)
          g = Reshape (bt, grid)
          v = Conv <kernel_shape = [3, 3], pads = [1, 1, 1, 1]> (g, w)
          vf = Reshape (v, flat)
          vt = Transpose <perm = [0, 2, 1]> (vf)
          y = Concat <axis = 1> (head, vt)
        }}
    """
    rng = np.random.default_rng(3)
    consts = {"zero": [0], "one": [1], "two": [2], "four": [4], "four_c": [4]} | sizes
    if not dynamic:
        consts["expand"] = [batch, 1, 1]
    return parse(
        text,
        cls=rng.standard_normal((1, 1, 4)).astype(np.float32),
        w=rng.standard_normal((4, 4, 3, 3)).astype(np.float32),
        **{k: np.array(v, dtype=np.int64) for k, v in consts.items() if k in text},
    )


@pytest.mark.parametrize("batch", [2, 1])
def test_a_slice_to_the_end_of_a_cls_token_axis_follows_the_tokens(batch: int) -> None:
    """The hint "a Slice end equal to its axis is the whole axis" meets ``end == $d + $v``: the
    cls token's data dim and the token count, two unknowns, so it was skipped; keeping the data
    dim at 1 made it solvable, but hints were not tried again, the end stayed at the traced 17
    and the tokens at the constant 16 (CvT: "Reshape keeps the element count: needs
    ?q69*?q70*batch*384 + batch*384 == batch*1920"; here the grid's Reshape failed on ONNX
    Runtime at any other size).
    Hints are tried again once data dims are decided. At batch 1 the cls token's ``x[:, 0:1]``
    (a 1 on the token axis) is not the batch: it stays 1 (it was read as ``batch``, a model
    whose cls output had ``batch`` tokens)."""
    fixed = {"flat": [batch, 4, 16], "grid": [batch, 4, 4, 4], "end": [17]}
    traced = cls_token_stage(batch, fixed, f"{batch}, 4, 4, 4", dynamic=False)
    free = {"flat": [0, 4, -1], "end": [1 << 62]}
    dynamic = cls_token_stage(batch, free, "N, 4, H, W", dynamic=True)
    result = Symbolize(**{"x:0": "batch", "x:2": "height", "x:3": "width"})(traced, CPU)
    for shape in ((3, 4, 4, 4), (2, 4, 8, 12), (1, 4, 6, 2)):
        x = RNG.standard_normal(shape).astype(np.float32)
        got = run_model(result.model, {"x": x}, provider="cpu")
        want = run_model(dynamic, {"x": x}, provider="cpu")
        for name in ("head", "y"):
            np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4)


def test_split_sizes_of_a_feature_axis_that_equal_seq_stay_fixed() -> None:
    """CodeGen's fused qkv ``[b, seq, 24]`` split as ``[8, 8, 8]`` traced at seq 8: the sizes
    add up to the fixed 24, so one read as ``seq`` would leave another ``16 - seq``, which is
    no size; they were a "fixed or follows seq" blocker, now they stay fixed."""
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[2, 6, 18] x) => (float[2, 6, 18] y) <int64[3] sizes = {6, 6, 6}> {
          a, b, c = Split <axis = 2> (x, sizes)
          y = Concat <axis = 2> (c, a, b)
        }
        """
    )
    result = Symbolize(**{"x:0": "batch", "x:1": "seq"})(model, CPU)
    x = RNG.standard_normal((3, 11, 18)).astype(np.float32)
    (got,) = run_model(result.model, {"x": x}, provider="cpu").values()
    np.testing.assert_array_equal(got, np.concatenate([x[..., 12:], x[..., :12]], axis=2))
