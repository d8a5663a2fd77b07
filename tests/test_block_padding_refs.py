"""Reference cases and a length padded to a multiple of a block (issue 30, LongT5 by TorchScript):
the guard a reading "padded to a multiple of the block" must pass before it may be built.

LongT5 is traced at seq 8 with blocks of 128: one block. TorchScript keeps the block count as a
run-time ``Shape -> Gather -> Div(128)`` and the Reshape's target as a Concat of it and the
constant 128, but bakes the pad ``(-seq) % 128`` = 120. The sweep's reference case (seq 7) and
its checks all stay within one block, so they cannot see the count: a reading chosen by them is
only right if the rest of the plan lets the count follow the size. It does not today: with the
pad computed from the size by hand, the solver reads ``padded / 128`` traced ``128 / 128`` as the
padded length over itself (the Div's 128 and the Reshape's 128 both become the padded length,
the count 1), and symbolize, given a case at seq 7, reports seq verified while seq 130 gives one
block of 256 instead of two of 128. The solver no longer reads a constant block as the length
it divides when the count is traced at 1 (``_Solver._block_of_one``): symbolize refuses at the
Div, or the count follows the length.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from test_symbolize import parse

import onnxsurgery
from onnxsurgery.errors import PassError
from onnxsurgery.passes.symbolize import Symbolize
from onnxsurgery.validation.references import Case, save_case

OPSET = '<ir_version: 8, opset_import: ["" : 17]>'
F, BLOCK, TRACED = 3, 128, 8
AXES = {"x:0": "batch", "x:1": "seq"}


def block_sums(x: np.ndarray) -> np.ndarray:
    """What torch computes: seq padded to a multiple of the block, the sum of each block."""
    padded = np.pad(x, ((0, 0), (0, -x.shape[1] % BLOCK), (0, 0)))
    return padded.reshape(x.shape[0], -1, BLOCK, x.shape[2]).sum(axis=2)


def torchscript_blocks(*, pad_from_size: bool) -> onnx.ModelProto:
    """:func:`block_sums` as TorchScript exports it at batch 2 and seq 8: the count read at run
    time from the padded length (``Div`` by the block), the Reshape's target a Concat of it; the
    pad's amount the traced one (120), or (``pad_from_size``) ``Mod(-seq, block)`` of the size."""
    if pad_from_size:
        amount = """
            len = Gather <axis = 0> (sx, one)
            neg = Neg (len)
            amt = Mod (neg, blk)
            pads = Concat <axis = 0> (lead, amt, tail)"""
    else:
        amount = """
            pads = Identity (baked)"""
    model = parse(
        f"""{OPSET} net (float[2, {TRACED}, {F}] x) => (float[2, 1, {F}] y) {{
            sx = Shape (x){amount}
            xp = Pad (x, pads)
            sp = Shape (xp)
            b = Gather <axis = 0> (sp, zero)
            plen = Gather (sp, one1)
            n = Div (plen, blk)
            f = Gather <axis = 0> (sp, two)
            shape = Concat <axis = 0> (b, n, blk, f)
            blocks = Reshape (xp, shape)
            y = ReduceSum <keepdims = 0> (blocks, two)
        }}""",
        one=np.array([1], np.int64),
        one1=np.array(1, np.int64),
        zero=np.array([0], np.int64),
        two=np.array([2], np.int64),
        blk=np.array([BLOCK], np.int64),
        lead=np.zeros(4, np.int64),
        tail=np.zeros(1, np.int64),
        baked=np.array([0, 0, 0, 0, -TRACED % BLOCK, 0], np.int64),
    )
    for i, node in enumerate(model.graph.node):
        node.name = f"/{node.op_type}_{i}"  # an exporter names every node
    return model


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _symbolize_with_a_case_at_seq_7(model: onnx.ModelProto, tmp_path: Path) -> onnx.ModelProto:
    """``model`` symbolized (batch, seq) with one reference case at batch 3, seq 7 (one block,
    as the sweep's), the model it returns (PassError where it refuses)."""
    x = np.random.default_rng(0).standard_normal((3, 7, F)).astype(np.float32)
    save_case(Case("given", {"x": x}, {"y": block_sums(x)}), tmp_path)
    ctx = onnxsurgery.PassContext(provider="cpu", references=tmp_path)
    return Symbolize(**AXES)(model, ctx).model


def _assert_right_past_one_block(model: onnx.ModelProto) -> None:
    """``model`` gives what torch gives at lengths of two and three blocks."""
    rng = np.random.default_rng(1)
    for batch, seq in ((1, 130), (2, 300)):
        x = rng.standard_normal((batch, seq, F)).astype(np.float32)
        got, want = _run(model, x), block_sums(x)
        assert got.shape == want.shape, f"seq {seq}: {got.shape} != {want.shape}"
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_the_graph_as_torchscript_gives_it_matches_torch_at_its_traced_size() -> None:
    """The tiny graph is LongT5's mechanism: at seq 8 the baked pad is right (one block)."""
    x = np.random.default_rng(2).standard_normal((2, TRACED, F)).astype(np.float32)
    for pad_from_size in (False, True):
        got = _run(torchscript_blocks(pad_from_size=pad_from_size), x)
        np.testing.assert_allclose(got, block_sums(x), rtol=1e-5, atol=1e-5)


def test_a_pad_baked_at_one_block_is_refused_or_right_past_one_block(tmp_path) -> None:
    """The pad baked at 120 and a case at seq 7, within the one traced block: whatever
    symbolize makes of the pad (refused today, at the block padding), a model it returns must
    be right at two and three blocks, which no case it was given shows."""
    model = torchscript_blocks(pad_from_size=False)
    try:
        out = _symbolize_with_a_case_at_seq_7(model, tmp_path)
    except PassError as exc:
        assert "Pad" in str(exc)
        return
    _assert_right_past_one_block(out)


def test_a_block_count_traced_at_1_follows_the_padded_length_or_is_refused(tmp_path) -> None:
    """The pad computed from the size (what a reading 'padded to a multiple of the block'
    would write): the Reshape's constant 128 must not be read as the padded length (traced 128)
    only because the count ``padded / 128`` is 1 at the traced size. The count then follows the
    length, or symbolize refuses at the Div (it cannot prove ``padded`` a multiple of 128);
    never a model whose count stays 1 past one block."""
    model = torchscript_blocks(pad_from_size=True)
    try:
        out = _symbolize_with_a_case_at_seq_7(model, tmp_path)
    except PassError as exc:
        assert "Div" in str(exc)
        return
    _assert_right_past_one_block(out)
