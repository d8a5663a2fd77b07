"""symbolize on Reshapes whose split meets equal traced sizes (issue 30).

A Reshape keeps row-major order: splitting ``[batch*4, h*w, C]`` into ``[batch, 4, h, w, C]``
keeps ``batch`` before the 4 and ``h`` before ``w``, and merging ``[batch, 4, h, w]`` into
``[batch*4, h*w]`` keeps the 4 beside the batch. Traced where ``h`` or ``w`` is 4 too, the sizes
alone let a symbol jump into the 4's place (TimeSformer, traced at ``h = w = frames = 4``).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import onnxruntime as ort
import pytest

import onnxsurgery
from onnxsurgery.passes.symbolize import Symbolize

HEAD = '<ir_version: 8, opset_import: ["" : 17]>'
FRAMES = 4


def divided_space_time(batch: int, h: int, w: int, *, gate: bool = False) -> onnx.ModelProto:
    """TimeSformer's spatial attention as TorchScript writes it at ``batch``, ``h``, ``w``:
    the patches ``[batch, h, w, F, C]`` (frames inner) are permuted frame-major and flattened
    to ``[batch*F, h*w, C]`` (the frames attend over space: a softmax over the patches here),
    viewed back as ``[batch, F, h, w, C]``, permuted patch-major and flattened to
    ``[batch, h*w*F, C]``. Every target is a constant. ``gate``: the view back is added to a
    per-sample gate ``[batch, 1, 1, 1, 1]``, which settles its first dim as the batch before
    its middle is split."""
    f, c = FRAMES, 8
    z_in = f", float[{batch}, 1, 1, 1, 1] z" if gate else ""
    add = "b2 = Add (b, z)" if gate else "b2 = Identity (b)"
    m = onnx.parser.parse_model(f"""{HEAD}
    g (float[{batch}, {h}, {w}, {f}, {c}] x{z_in}) => (float[{batch}, {h * w * f}, {c}] y) {{
      at = Transpose <perm = [0, 3, 1, 2, 4]> (x)
      s2 = Constant <value = int64[3] {{{batch * f}, {h * w}, {c}}}> ()
      sp = Reshape (at, s2)
      mixed = Softmax <axis = 1> (sp)
      s3 = Constant <value = int64[5] {{{batch}, {f}, {h}, {w}, {c}}}> ()
      b = Reshape (mixed, s3)
      {add}
      bt = Transpose <perm = [0, 2, 3, 1, 4]> (b2)
      s4 = Constant <value = int64[3] {{{batch}, {h * w * f}, {c}}}> ()
      y = Reshape (bt, s4)
    }}""")
    onnx.checker.check_model(m)
    return m


@pytest.mark.parametrize("gate", [False, True])
@pytest.mark.parametrize("h, w", [(4, 4), (3, 4), (4, 3)])
def test_a_reshape_keeps_a_fixed_size_in_its_place_among_symbols_of_its_size(
    h: int, w: int, gate: bool
) -> None:
    """Traced at ``h = 4`` the merge ``[batch, 4, h, w] -> [8, 4*w]`` was planned
    ``[batch*h, w*4]`` (the batch took the next factor that divides 8, ``h``, over the 4 before
    it); traced at ``w = 4``, the split back ``[batch*4, h*w, C] -> [batch, 4, h, w, C]`` was
    planned ``[batch, w, h, 4, C]`` (the first 4 of the target took the symbol of that size),
    and with the batch settled first (``gate``) the split was left at its traced sizes. Either
    way the model came back verified but mixing frames and patches at other sizes, or was
    refused. Now the merge walks the input's factors in order, constants in their place, and
    the split gives ``h`` and ``w`` only the dims whose stride they fit (the second dim spans
    the frames, outside ``h*w``): the symbolized model equals the one written at
    ``batch 3, h 3, w 5``."""
    axes = {"x:0": "batch", "x:1": "h", "x:2": "w"} | ({"z:0": "batch"} if gate else {})
    result = Symbolize(**axes)(
        divided_space_time(2, h, w, gate=gate), onnxsurgery.PassContext(provider="cpu")
    )
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((3, 3, 5, FRAMES, 8)).astype(np.float32)}
    if gate:
        feeds["z"] = rng.standard_normal((3, 1, 1, 1, 1)).astype(np.float32)
    runs = [
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        for m in (result.model, divided_space_time(3, 3, 5, gate=gate))
    ]
    got, want = (s.run(None, feeds)[0] for s in runs)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def merged_time_view(batch: int, h: int, w: int) -> onnx.ModelProto:
    """TimeSformer's temporal attention as dynamo writes it: the tokens ``[batch, h*w*F, C]``
    (patch-major, frames inner) viewed as ``[batch*h*w, F, C]`` in one Reshape (the frames
    attend over time: a softmax over them here) and viewed back. Every target is a constant;
    the tokens come from the patches ``[batch, h, w, F, C]`` by a first view."""
    f, c = FRAMES, 8
    m = onnx.parser.parse_model(f"""{HEAD}
    g (float[{batch}, {h}, {w}, {f}, {c}] x) => (float[{batch}, {h * w * f}, {c}] y) {{
      s1 = Constant <value = int64[3] {{{batch}, {h * w * f}, {c}}}> ()
      tokens = Reshape (x, s1)
      s2 = Constant <value = int64[3] {{{batch * h * w}, {f}, {c}}}> ()
      frames = Reshape (tokens, s2)
      mixed = Softmax <axis = 1> (frames)
      y = Reshape (mixed, s1)
    }}""")
    onnx.checker.check_model(m)
    return m


@pytest.mark.parametrize("h, w", [(4, 4), (4, 3), (3, 4)])
def test_a_view_keeps_the_frames_last_where_a_symbol_has_their_traced_size(h: int, w: int) -> None:
    """``[batch, h*w*4, C] -> [batch*h*w, 4, C]`` traced where ``h`` (or ``h`` and ``w``) is
    4: the second dim took ``h`` by its size and the first ``batch*w*4``, so the softmax ran
    over ``h`` instead of the frames, verified but wrong at other sizes (dynamo's TimeSformer
    at ``h = w = 4``). The input's factors in row-major order, ``batch, h, w, 4``, give
    ``[batch*h*w, 4, C]``; the symbolized model equals the one written at ``batch 3, h 3,
    w 5``."""
    result = Symbolize(**{"x:0": "batch", "x:1": "h", "x:2": "w"})(
        merged_time_view(2, h, w), onnxsurgery.PassContext(provider="cpu")
    )
    feeds = {"x": np.random.default_rng(0).standard_normal((3, 3, 5, FRAMES, 8)).astype(np.float32)}
    runs = [
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        for m in (result.model, merged_time_view(3, 3, 5))
    ]
    got, want = (s.run(None, feeds)[0] for s in runs)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def frames_at_batch_1(batch: int, h: int, w: int) -> onnx.ModelProto:
    """TimeSformer's patch embedding and spatial attention as TorchScript writes them: the
    frames' feature maps ``[batch, F, C, h, w]`` flattened to ``[batch*F, C, h*w]`` (one
    view), transposed to tokens, a class token padded in front (``h*w + 1`` tokens), split
    into 2 heads of 4 (a softmax over the tokens here), merged, the class token dropped and
    the tokens viewed as ``[batch, F, h*w, C]``. Every target is a constant."""
    f, c, n = FRAMES, 8, h * w
    m = onnx.parser.parse_model(f"""{HEAD}
    g (float[{batch}, {f}, {c}, {h}, {w}] x) => (float[{batch}, {f}, {n}, {c}] y) {{
      s1 = Constant <value = int64[3] {{{batch * f}, {c}, {n}}}> ()
      maps = Reshape (x, s1)
      tokens = Transpose <perm = [0, 2, 1]> (maps)
      pads = Constant <value = int64[6] {{0, 1, 0, 0, 0, 0}}> ()
      padded = Pad (tokens, pads)
      s2 = Constant <value = int64[4] {{{batch * f}, {n + 1}, 2, 4}}> ()
      heads = Reshape (padded, s2)
      mixed = Softmax <axis = 1> (heads)
      s3 = Constant <value = int64[3] {{{batch * f}, {n + 1}, {c}}}> ()
      merged = Reshape (mixed, s3)
      starts = Constant <value = int64[1] {{1}}> ()
      ends = Constant <value = int64[1] {{9223372036854775807}}> ()
      axes = Constant <value = int64[1] {{1}}> ()
      patches = Slice (merged, starts, ends, axes)
      s4 = Constant <value = int64[4] {{{batch}, {f}, {n}, {c}}}> ()
      y = Reshape (patches, s4)
    }}""")
    onnx.checker.check_model(m)
    return m


def test_a_batch_traced_at_1_keeps_its_place_beside_the_frames() -> None:
    """Traced at batch 1 and ``h = w = F = 4``: ``[batch, 4, C, h, w] -> [4, C, 16]`` gave
    its first dim ``h`` (the size of ``batch*4`` at batch 1) and ``[batch*4, h*w + 1, C] ->
    [4, 17, 2, 4]`` matched no dim (a product holding a dim traced at 1 is matched by size
    with no single dim, not even itself), so the model was refused, as TimeSformer at batch 1
    was. The input's factors in row-major order give ``[batch*4, C, h*w]`` with the constant
    C in its place, and a dim that is the same product on both sides is that dim: the
    symbolized model equals the one written at ``batch 3, h 3, w 5``."""
    result = Symbolize(**{"x:0": "batch", "x:3": "h", "x:4": "w"})(
        frames_at_batch_1(1, 4, 4), onnxsurgery.PassContext(provider="cpu")
    )
    feeds = {"x": np.random.default_rng(0).standard_normal((3, FRAMES, 8, 3, 5)).astype(np.float32)}
    runs = [
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        for m in (result.model, frames_at_batch_1(3, 3, 5))
    ]
    got, want = (s.run(None, feeds)[0] for s in runs)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def unfold_attention(batch: int, seq: int) -> onnx.ModelProto:
    """ConvBERT's span-based dynamic convolution as TorchScript writes it at ``batch``, ``seq``
    (head size 8, 2 heads, kernel 9): ``nn.Unfold`` over the keys ``[batch, C, seq, 1]`` padded
    by 4 on each side gathers window rows ``Range(0, seq + 8 - 8) + [[0], ..., [8]]`` and the
    one column ``[[0]]``, viewed as ``[batch, C*9, -1]`` (the -1 is the window count), then
    ``[batch, -1, C, 9]`` and ``[-1, 8, 9]``, whose rows meet a per-position kernel
    ``[batch*seq*2, 9, 1]`` (a softmax over the window) in a MatMul. The 8s that size the
    Range (``2*pad`` and ``k - 1``) equal ``seq``'s traced size, and so does the head size."""
    c, k = 16, 9
    w = ", ".join(str(v) for v in (np.arange(c * 18) % 7 - 3).tolist())
    v = ", ".join(str(v) for v in (np.arange(8 * 2) % 5 - 2).tolist())
    rows = ", ".join(str(i) for i in range(k))
    m = onnx.parser.parse_model(f"""{HEAD}
    g (float[{batch}, {seq}, {c}] x) => (float[{batch * seq * 2}, 1, 2] y)
      <float[{c}, 18] w = {{{w}}}, float[8, 2] v = {{{v}}}> {{
      kern = MatMul (x, w)
      s3 = Constant <value = int64[3] {{-1, {k}, 1}}> ()
      k3 = Reshape (kern, s3)
      soft = Softmax <axis = 1> (k3)
      c4 = Constant <value = int64[3] {{{batch}, -1, {c}}}> ()
      x4 = Reshape (x, c4)
      xt = Transpose <perm = [0, 2, 1]> (x4)
      sh = Shape (xt)
      i0 = Constant <value = int64 {{0}}> ()
      i1 = Constant <value = int64 {{1}}> ()
      i2 = Constant <value = int64 {{2}}> ()
      bdim = Gather <axis = 0> (sh, i0)
      cdim = Gather <axis = 0> (sh, i1)
      sdim = Gather <axis = 0> (sh, i2)
      pads = Constant <value = int64 {{{k - 1}}}> ()
      padded = Add (sdim, pads)
      span = Constant <value = int64 {{{k - 1}}}> ()
      count = Sub (padded, span)
      r = Range (i0, count, i1)
      ax0 = Constant <value = int64[1] {{0}}> ()
      ru = Unsqueeze (r, ax0)
      offsets = Constant <value = int64[{k}, 1] {{{rows}}}> ()
      idx = Add (ru, offsets)
      ax3 = Constant <value = int64[1] {{3}}> ()
      xu = Unsqueeze (xt, ax3)
      p = Constant <value = int64[8] {{0, 0, {k // 2}, 0, 0, 0, {k // 2}, 0}}> ()
      xp = Pad (xu, p)
      g4 = Gather <axis = 2> (xp, idx)
      col = Constant <value = int64[1, 1] {{0}}> ()
      g5 = Gather <axis = 4> (g4, col)
      unfolded = Transpose <perm = [0, 1, 2, 4, 3, 5]> (g5)
      nine = Constant <value = int64 {{{k}}}> ()
      c9 = Mul (cdim, nine)
      bu = Unsqueeze (bdim, ax0)
      cu = Unsqueeze (c9, ax0)
      minus = Constant <value = int64[1] {{-1}}> ()
      s5 = Concat <axis = 0> (bu, cu, minus)
      h5 = Reshape (unfolded, s5)
      t = Transpose <perm = [0, 2, 1]> (h5)
      s6 = Constant <value = int64[4] {{{batch}, -1, {c}, {k}}}> ()
      h6 = Reshape (t, s6)
      s7 = Constant <value = int64[3] {{-1, 8, {k}}}> ()
      h7 = Reshape (h6, s7)
      mm = MatMul (h7, soft)
      mt = Transpose <perm = [0, 2, 1]> (mm)
      y = MatMul (mt, v)
    }}""")
    for i, node in enumerate(m.graph.node):
        node.name = f"{node.op_type}_{i}"
    onnx.checker.check_model(m)
    return m


@pytest.mark.parametrize("batch", [2, 1])
def test_an_unknown_of_a_reshapes_input_is_left_to_the_constraints_that_decide_it(
    batch: int,
) -> None:
    """Traced at ``seq = 8`` (ConvBERT by TorchScript, at batch 2 and 1), the split of
    ``[batch, $q, 16] -> [batch*seq*2, 8]`` cancelled ``batch`` and gave the window count
    ``$q`` (an unknown of the Reshape's input) ``seq`` by its size, before the Range's
    constants were kept: tying the padding to ``seq`` then fitted the graph too (``k - 1``
    followed it), and the model was refused as ambiguous, 'the value is fixed at 8 (as traced)
    or follows seq'. Only a Reshape's output unknowns are split so; the symbolized model equals
    the one written at ``batch 3, seq 5``."""
    result = Symbolize(**{"x:0": "batch", "x:1": "seq"})(
        unfold_attention(batch, 8), onnxsurgery.PassContext(provider="cpu")
    )
    feeds = {"x": np.random.default_rng(0).standard_normal((3, 5, 16)).astype(np.float32)}
    runs = [
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        for m in (result.model, unfold_attention(3, 5))
    ]
    got, want = (s.run(None, feeds)[0] for s in runs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
