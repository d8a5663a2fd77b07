"""A length padded to one block, read under a bound (issue 30, LongT5's local attention):
with ``seq<=traced`` the pad the export baked at the traced size (``(-seq) % block``, 120 at
seq 8 and blocks of 128) is ``block - seq`` at every size the bound allows, so symbolize writes
it so instead of refusing; a size over the bound fails on ONNX Runtime, naming the bound.

Both forms LongT5 takes: TorchScript keeps the block count a run-time ``Div`` of the padded
length (the conflict it refused at), dynamo a constant Reshape target. Each is checked against
what torch computes (:func:`block_sums`, numpy) at every size within the bound, and past it.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from test_symbolize import parse

import onnxsurgery
from onnxsurgery.errors import PassError
from onnxsurgery.model.bounds import read_bounds
from onnxsurgery.passes.symbolize import Symbolize
from onnxsurgery.passes.symbolize.plan import plan_symbolize

OPSET = '<ir_version: 8, opset_import: ["" : 17]>'
F = 3
CPU = onnxsurgery.PassContext(provider="cpu")
OVER = "a size over the bound fails here"


def block_sums(x: np.ndarray, block: int) -> np.ndarray:
    """What torch computes: seq padded to a multiple of ``block``, the sum of each block."""
    padded = np.pad(x, ((0, 0), (0, -x.shape[1] % block), (0, 0)))
    return padded.reshape(x.shape[0], -1, block, x.shape[2]).sum(axis=2)


def _named(model: onnx.ModelProto) -> onnx.ModelProto:
    for i, node in enumerate(model.graph.node):
        node.name = f"/{node.op_type}_{i}"  # an exporter names every node
    return model


def torchscript_form(traced: int, block: int) -> onnx.ModelProto:
    """:func:`block_sums` as TorchScript exports it at batch 2: the pad baked at ``traced``,
    the count a Div of the padded length, the Reshape's target a Concat of it."""
    count = -(-traced // block)
    return _named(
        parse(
            f"""{OPSET} net (float[2, {traced}, {F}] x) => (float[2, {count}, {F}] y) {{
                pads = Identity (baked)
                xp = Pad (x, pads)
                sp = Shape (xp)
                b = Gather <axis = 0> (sp, zero)
                plen = Gather (sp, one)
                n = Div (plen, blk)
                f = Gather <axis = 0> (sp, two)
                shape = Concat <axis = 0> (b, n, blk, f)
                blocks = Reshape (xp, shape)
                y = ReduceSum <keepdims = 0> (blocks, two)
            }}""",
            one=np.array(1, np.int64),
            zero=np.array([0], np.int64),
            two=np.array([2], np.int64),
            blk=np.array([block], np.int64),
            baked=np.array([0, 0, 0, 0, -traced % block, 0], np.int64),
        )
    )


def dynamo_form(traced: int, block: int) -> onnx.ModelProto:
    """:func:`block_sums` as dynamo exports it at batch 2: a constant pad and a constant
    Reshape target ``[2, count, block, F]``."""
    count = -(-traced // block)
    return _named(
        parse(
            f"""{OPSET} net (float[2, {traced}, {F}] x) => (float[2, {count}, {F}] y) {{
                xp = Pad (x, pads)
                blocks = Reshape (xp, shape)
                y = ReduceSum <keepdims = 0> (blocks, two)
            }}""",
            pads=np.array([0, 0, 0, 0, -traced % block, 0], np.int64),
            shape=np.array([2, count, block, F], np.int64),
            two=np.array([2], np.int64),
        )
    )


FORMS = {"torchscript": torchscript_form, "dynamo": dynamo_form}


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _x(batch: int, seq: int) -> np.ndarray:
    return np.random.default_rng(seq).standard_normal((batch, seq, F)).astype(np.float32)


def _symbolize(model: onnx.ModelProto, seq: str) -> onnx.ModelProto:
    return Symbolize(**{"x:0": "batch", "x:1": seq})(model, CPU).model


@pytest.mark.parametrize("form", FORMS)
def test_a_pad_to_one_block_is_right_at_every_size_within_the_bound(form) -> None:
    """Traced at seq 8, blocks of 128, ``seq<=traced``: seq 1..8 (and other batches) give what
    torch gives; refused before (the pad could be fixed or follow the size)."""
    out = _symbolize(FORMS[form](8, 128), "seq<=traced")
    assert read_bounds(out) == {"seq": 8}
    for batch in (1, 2, 3):
        for seq in range(1, 9):
            x = _x(batch, seq)
            got = _run(out, x)
            np.testing.assert_allclose(got, block_sums(x, 128), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("form", FORMS)
def test_a_size_over_the_bound_fails_naming_it(form) -> None:
    """Over the bound: one past it, and past one block (where ``128 - seq`` would crop), ONNX
    Runtime fails at the guard named after the bound, never wrong values."""
    out = _symbolize(FORMS[form](8, 128), "seq<=traced")
    for seq in (9, 130):
        with pytest.raises(Exception, match=rf"seq<=8 \({OVER}\)"):
            _run(out, _x(2, seq))


@pytest.mark.parametrize("form", FORMS)
def test_a_bound_over_the_traced_size_within_one_block(form) -> None:
    """``seq<=100`` (traced 8, blocks of 128): every size to 100 is still one block."""
    out = _symbolize(FORMS[form](8, 128), "seq<=100")
    for seq in (1, 57, 100):
        x = _x(2, seq)
        np.testing.assert_allclose(_run(out, x), block_sums(x, 128), rtol=1e-5, atol=1e-5)
    with pytest.raises(Exception, match=rf"seq<=100 \({OVER}\)"):
        _run(out, _x(2, 101))


@pytest.mark.parametrize("form", FORMS)
def test_a_bound_past_one_block_is_refused(form) -> None:
    """``seq<=200`` with blocks of 128: a size over 128 pads to two blocks, which ``128 - seq``
    does not give; refused, saying so."""
    with pytest.raises(PassError, match=r"within seq<=200 it stays so: .*over one block of 128"):
        _symbolize(FORMS[form](8, 128), "seq<=200")


@pytest.mark.parametrize("form", FORMS)
def test_a_pad_to_two_blocks_stays_refused_under_the_bound(form) -> None:
    """Traced at seq 200 (two blocks of 128, pad 56): a size of 128 or less pads to one block,
    so no pad read from the size fits every size within ``seq<=traced``; refused, naming why."""
    with pytest.raises(PassError, match=r"a size of 128 or less pads to fewer blocks"):
        _symbolize(FORMS[form](200, 128), "seq<=traced")


@pytest.mark.parametrize("form", FORMS)
def test_without_a_bound_the_refusal_advises_it(form) -> None:
    """Unbounded, the pad stays refused (the graph cannot tell it from a fixed one), and the
    refusal says the bound lets it through; in TorchScript's form the Div's conflict too."""
    model = FORMS[form](8, 128)
    with pytest.raises(PassError, match=r"bound seq \(like seq<=traced"):
        _symbolize(model, "seq")
    plan = plan_symbolize(model, {"x": {0: "batch", 1: "seq"}})
    advised = {b.op for b in plan.blockers if "seq<=traced" in b.fix}
    assert advised == ({"Pad", "Div", "Reshape"} if form == "torchscript" else {"Pad"})


def concat_form(traced: int, block: int) -> onnx.ModelProto:
    """:func:`block_sums` with the pad a Concat of zeros (``torch.cat([x, x.new_zeros(...)])``),
    their shape a constant baked at ``traced``; a constant Reshape target."""
    count = -(-traced // block)
    return _named(
        parse(
            f"""{OPSET} net (float[2, {traced}, {F}] x) => (float[2, {count}, {F}] y) {{
                z = ConstantOfShape <value = float[1] {{0}}> (zshape)
                xp = Concat <axis = 1> (x, z)
                blocks = Reshape (xp, shape)
                y = ReduceSum <keepdims = 0> (blocks, two)
            }}""",
            zshape=np.array([2, -traced % block, F], np.int64),
            shape=np.array([2, count, block, F], np.int64),
            two=np.array([2], np.int64),
        )
    )


def test_zeros_concatenated_to_one_block_are_read_under_the_bound_too() -> None:
    """The Concat form: the zeros' length becomes ``128 - seq`` within the bound, guarded."""
    out = _symbolize(concat_form(8, 128), "seq<=traced")
    for batch, seq in ((1, 1), (3, 5), (2, 8)):
        x = _x(batch, seq)
        np.testing.assert_allclose(_run(out, x), block_sums(x, 128), rtol=1e-5, atol=1e-5)
    with pytest.raises(Exception, match=rf"seq<=8 \({OVER}\)"):
        _run(out, _x(2, 9))
