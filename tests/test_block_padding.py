"""A length padded to a multiple of a block at the traced size (issue 30, LongT5's local
attention): a constant Pad of ``(-seq) % block`` the export baked, then a Reshape into blocks.
Kept, the padded length reads ``seq + p`` and the blocks come out wrong at other sizes (wrong
values, verified only at level "runs"); symbolize refuses it, naming the Pad, the block and the
traced size, in the form dynamo leaves (a constant amount) and the one TorchScript leaves
(``Mod(-seq, block)`` with the traced seq folded in); with a bound on seq, one block is read as
``block - seq`` (tests/test_block_padding_bound.py), more blocks stay refused."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from test_graph_blockers import deciding, sites
from test_symbolize import parse
from typer.testing import CliRunner

import onnxsurgery
from onnxsurgery.cli import app
from onnxsurgery.errors import PassError
from onnxsurgery.passes.symbolize import Symbolize
from onnxsurgery.passes.symbolize import graph_blockers as gb
from onnxsurgery.passes.symbolize.block_padding import BlockPadding

OPSET = '<ir_version: 8, opset_import: ["" : 17]>'
CPU = onnxsurgery.PassContext(provider="cpu")
F = 3
SEQ = {"x:0": "batch", "x:1": "seq"}
SEQ_BOUND = {"x:0": "batch", "x:1": "seq<=traced"}


def block_means(x: np.ndarray, block: int) -> np.ndarray:
    """What torch computes: pad seq to a multiple of ``block``, the mean of each block."""
    padded = np.pad(x, ((0, 0), (0, -x.shape[1] % block), (0, 0)))
    return padded.reshape(x.shape[0], -1, block, x.shape[2]).mean(axis=2)


def padded_blocks(seq: int, block: int, *, torchscript: bool = False) -> onnx.ModelProto:
    """``block_means`` exported at batch 2 and ``seq``: the Pad's amount a constant (dynamo), or
    ``Mod(-seq, block)`` of constants (TorchScript), either the traced seq's."""
    pad = -seq % block
    count = (seq + pad) // block
    if torchscript:
        amount = """
            m = Mod (neg, blk)
            u = Unsqueeze (m, zero)
            pads = Concat <axis = 0> (lead, u, tail)"""
        inits = {
            "neg": np.array(-seq, np.int64), "blk": np.array(block, np.int64),
            "zero": np.array([0], np.int64), "lead": np.zeros(4, np.int64),
            "tail": np.zeros(1, np.int64),
        }  # fmt: skip
    else:
        amount = ""
        inits = {"pads": np.array([0, 0, 0, 0, pad, 0], np.int64)}
    return parse(
        f"""{OPSET} net (float[2, {seq}, {F}] x) => (float[2, {count}, {F}] y) {{{amount}
            xp = Pad (x, pads)
            blocks = Reshape (xp, shape)
            y = ReduceMean <axes = [2], keepdims = 0> (blocks)
        }}""",
        shape=np.array([2, count, block, F], np.int64),
        **inits,
    )


def concat_blocks(seq: int, block: int, piece: str) -> onnx.ModelProto:
    """:func:`block_means` padded by a Concat (``torch.cat([x, x.new_zeros(2, pad, F)], 1)``):
    a zeros constant, a ConstantOfShape of the traced pad, or (``token``) a constant of several
    values (a learned token appended: no padding)."""
    pad = -seq % block
    count = (seq + pad) // block
    inits: dict[str, np.ndarray] = {"shape": np.array([2, count, block, F], np.int64)}
    if piece == "constant-of-shape":
        make = "z = ConstantOfShape <value = float[1] {0.0}> (zshape)"
        inits["zshape"] = np.array([2, pad, F], np.int64)
    else:
        make = "z = Identity (zc)"
        values = np.arange(2 * pad * F) + 1.0 if piece == "token" else np.zeros(2 * pad * F)
        inits["zc"] = values.reshape(2, pad, F).astype(np.float32)
    return parse(
        f"""{OPSET} net (float[2, {seq}, {F}] x) => (float[2, {count}, {F}] y) {{
            {make}
            xp = Concat <axis = 1> (x, z)
            blocks = Reshape (xp, shape)
            y = ReduceMean <axes = [2], keepdims = 0> (blocks)
        }}""",
        **inits,
    )


def agrees_with_numpy(model: onnx.ModelProto, block: int, sizes: list[tuple[int, int]]) -> bool:
    """Whether ``model`` gives :func:`block_means` at each (batch, seq) of ``sizes``."""
    run = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for batch, seq in sizes:
        x = rng.standard_normal((batch, seq, F)).astype(np.float32)
        y, want = run.run(None, {"x": x})[0], block_means(x, block)
        if y.shape != want.shape or not np.allclose(y, want, atol=1e-6):
            return False
    return True


def test_the_traced_model_is_right_where_it_was_traced():
    """The model the tests symbolize is torch's at its traced size."""
    assert agrees_with_numpy(padded_blocks(3, 4), 4, [(2, 3)])
    assert agrees_with_numpy(padded_blocks(5, 4, torchscript=True), 4, [(2, 5)])


@pytest.mark.parametrize("torchscript", [False, True], ids=["dynamo", "torchscript"])
@pytest.mark.parametrize("axes", [SEQ, SEQ_BOUND], ids=["unbounded", "seq<=traced"])
@pytest.mark.parametrize("seq", [3, 6])
def test_symbolize_never_returns_blocks_that_differ_from_numpy(seq, axes, torchscript):
    """Refused, or right at every size (the old code returned, verified only at level "runs",
    one block of seq + 1 at seq 3, and at seq 6 the pad of 2 read as the batch, seq tied to
    batch*3)."""
    try:
        model = Symbolize(**axes)(padded_blocks(seq, 4, torchscript=torchscript), CPU).model
    except PassError as refused:
        assert "a pad to a multiple of 4" in str(refused)
        return
    sizes = [(3, n) for n in range(1, seq + 1)]
    assert agrees_with_numpy(model, 4, sizes + ([] if axes is SEQ_BOUND else [(3, 9)]))


@pytest.mark.parametrize("torchscript", [False, True], ids=["dynamo", "torchscript"])
def test_one_block_is_refused_naming_the_pad_block_and_traced_size(torchscript):
    """seq 3 padded by 1 to one block of 4: kept, seq 2 pads to 3 and the mean is over 3, not 4
    (the old code returned it at level "runs"). With ``seq<=traced`` it is read as ``4 - seq``
    (:mod:`~onnxsurgery.passes.symbolize.one_block`): right at every size within the bound."""
    with pytest.raises(PassError) as caught:
        Symbolize(**SEQ)(padded_blocks(3, 4, torchscript=torchscript), CPU)
    text = str(caught.value)
    assert "1 blocker(s)" in text and "Pad '' (input 'pads'): pads axis 1 (seq) by 1 to 4" in text
    assert "splits into 1 block(s) of 4: a pad to a multiple of 4 ((-seq) % 4 in torch" in text
    assert "baked at seq = 3, where seq = 4 needs 0, or a fixed pad of 1" in text
    assert "the padded length reads seq + 1" in text
    assert "[traced: axis 1 (seq) = 3 padded (0, 1) to 1 x 4]" in text
    assert "bound seq (like seq<=traced among the axes symbolize names)" in text
    model = Symbolize(**SEQ_BOUND)(padded_blocks(3, 4, torchscript=torchscript), CPU).model
    assert agrees_with_numpy(model, 4, [(b, n) for b in (1, 3) for n in (1, 2, 3)])


@pytest.mark.parametrize("piece", ["zeros", "constant-of-shape"])
@pytest.mark.parametrize("axes", [SEQ, SEQ_BOUND], ids=["unbounded", "seq<=traced"])
def test_a_concat_of_zeros_is_refused_as_a_pad(piece, axes):
    """The same padding as a Concat of zeros: the old code returned one block of seq + 1,
    verified only at level "runs"; refused now, naming the Concat and its zeros."""
    model = concat_blocks(3, 4, piece)
    assert agrees_with_numpy(model, 4, [(2, 3)])
    with pytest.raises(PassError) as caught:
        Symbolize(**axes)(model, CPU)
    text = str(caught.value)
    assert "Concat '' (input 'z'): pads axis 1 (seq) by 1 to 4, which Reshape ''" in text
    assert "splits into 1 block(s) of 4: a pad to a multiple of 4" in text


def test_a_pad_computed_from_the_size_is_no_site():
    """Pads computed at run time (``(-Shape(x)[1]) % 4``, as a dynamic export leaves them) are
    no amount the trace baked: not a site of the rule."""
    model = parse(
        f"""{OPSET} net (float[2, 3, {F}] x) => (float[2, 1, {F}] y) {{
            s = Shape <start = 1, end = 2> (x)
            n = Neg (s)
            m = Mod (n, blk)
            pads = Concat <axis = 0> (lead, m, tail)
            xp = Pad (x, pads)
            blocks = Reshape (xp, shape)
            y = ReduceMean <axes = [2], keepdims = 0> (blocks)
        }}""",
        blk=np.array([4], np.int64), lead=np.zeros(4, np.int64), tail=np.zeros(1, np.int64),
        shape=np.array([2, -1, 4, F], np.int64),
    )
    assert agrees_with_numpy(model, 4, [(2, 3)])
    assert sites(model, {"x": {0: "batch", 1: "seq"}}, BlockPadding()) == []


def test_a_token_appended_is_no_padding():
    """A Concat of a piece of several values (a learned token) is no padding: not a site."""
    rule = BlockPadding()
    assert sites(concat_blocks(3, 4, "token"), {"x": {0: "batch", 1: "seq"}}, rule) == []
    (zeros,) = sites(concat_blocks(3, 4, "zeros"), {"x": {0: "batch", 1: "seq"}}, rule)
    assert (zeros.before, zeros.amounts) == ([(0, 0), (0, 1), (0, 0)], "z")


def test_several_blocks_are_refused():
    """seq 5 padded by 3 to two blocks of 4 (the old code refused it too, for a Reshape whose
    element count holds only at the traced size, without saying why)."""
    with pytest.raises(PassError, match=r"pads axis 1 \(seq\) by 3 to 8, which Reshape '' splits "
                       r"into 2 block\(s\) of 4"):  # fmt: skip
        Symbolize(**SEQ)(padded_blocks(5, 4), CPU)


def test_the_cli_says_it_in_one_line_with_exit_2(tmp_path):
    src = tmp_path / "m.onnx"
    onnx.save(padded_blocks(3, 4), src)
    result = CliRunner().invoke(
        app, ["run", str(src), "-o", str(tmp_path / "o.onnx"), "--provider", "cpu",
              "--passes", "symbolize(x:0=batch, x:1=seq)"],  # fmt: skip
    )
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert "Traceback" not in result.output and not (tmp_path / "o.onnx").exists()
    assert any("a pad to a multiple of 4" in line and "seq<=traced" in line for line in lines)


def fixed_pad_then(op: str) -> onnx.ModelProto:
    """seq 3 padded by 1 (a fixed pad: a token appended), then averaged, or reshaped to blocks of
    1 (no longer than the pad)."""
    then = (
        "y = ReduceMean <axes = [1], keepdims = 0> (xp)"
        if op == "mean"
        else "y = Reshape (xp, shape)"
    )
    out = f"float[2, {F}]" if op == "mean" else f"float[2, 4, 1, {F}]"
    return parse(
        f"""{OPSET} net (float[2, 3, {F}] x) => ({out} y) {{
            xp = Pad (x, pads)
            {then}
        }}""",
        pads=np.array([0, 0, 0, 0, 1, 0], np.int64),
        shape=np.array([2, 4, 1, F], np.int64),
    )


def test_the_rule_applies_only_to_a_pad_split_into_longer_blocks():
    rule = BlockPadding()
    (site,) = sites(padded_blocks(3, 4), {"x": {0: "batch", 1: "seq"}}, rule)
    assert rule.check(site) is None and deciding(rule, site) is BlockPadding
    blocker = rule.produce(site)
    assert (blocker.kind, blocker.op, blocker.input, blocker.symbols) == (
        "block-padding", "Pad", "pads", ("seq",),
    )  # fmt: skip
    assert "re-export with dynamic axes for seq" in blocker.fix and "leave x:1 out" in blocker.fix
    assert any(isinstance(r, BlockPadding) for r in gb.GRAPH_RULES)
    for op in ("mean", "unit-blocks"):
        (fixed,) = sites(fixed_pad_then(op), {"x": {0: "batch", 1: "seq"}}, rule)
        assert rule.check(fixed) == (
            "no symbolic axis it pads is split into blocks longer than the pad"
        )
    (static,) = sites(padded_blocks(3, 4), {"x": {0: "batch"}}, rule)
    assert rule.check(static) is not None


def test_a_fixed_pad_is_still_symbolized_and_right():
    """A fixed pad nothing splits into blocks is no block padding: symbolized as before."""
    model = Symbolize(**SEQ)(fixed_pad_then("mean"), CPU).model
    run = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal((3, 6, F)).astype(np.float32)
    assert np.allclose(run.run(None, {"x": x})[0], np.pad(x, ((0, 0), (0, 1), (0, 0))).mean(axis=1), atol=1e-5)


def test_a_torch_module_padding_to_blocks_exported_by_torchscript_is_refused(tmp_path):
    """The mechanism from torch itself: ``F.pad`` by ``(-seq) % 4`` then blocks of 4, exported
    by TorchScript at seq 3 (the trace folds the amount to 1); the old code returned it with
    the padded length read as seq + 1."""
    torch = pytest.importorskip("torch")

    class BlockMeans(torch.nn.Module):
        def forward(self, x):
            x = torch.nn.functional.pad(x, (0, 0, 0, (-x.shape[1]) % 4))
            return x.reshape(x.shape[0], -1, 4, x.shape[2]).mean(2)

    path = tmp_path / "blocks.onnx"
    x = torch.randn(2, 3, F)
    torch.onnx.export(BlockMeans(), (x,), path, dynamo=False, input_names=["x"])
    model = onnx.load(path)
    assert agrees_with_numpy(model, 4, [(2, 3)])
    with pytest.raises(PassError) as caught:
        Symbolize(**SEQ)(model, CPU)
    text = str(caught.value)
    assert "pads axis 1 (seq) by 1 to 4" in text and "1 block(s) of 4" in text
