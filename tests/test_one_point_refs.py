"""A learned row of one pixel traced at a one-pixel stage: reference cases decide it.

ConvNeXt V2's GRN scales and shifts its last stage by learned ``[1, 1, 1, C]`` parameters that
broadcast over height and width. Traced at the smallest image, that stage is 1x1, and one point
cannot tell one row repeated from a table of that length (a table sliced to the stage's size and
folded by the exporter is the same constant), so symbolize refuses (``one-point``). Of the two
readings only the broadcast extends (a table of length 1 cannot be rebuilt), so reference cases
at a size where the stage is 2 or more decide it: the graph as it is is kept where it alone
matches every case, and the refusal says so (``--ref``). Cases that hold the stage at 1 decide
nothing; a table whose rows differ matches no reading and stays refused.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import pytest
from onnx import numpy_helper

import onnxsurgery
from onnxsurgery.errors import PassError
from onnxsurgery.passes.symbolize import Symbolize
from onnxsurgery.validation.references import Case, save_case
from onnxsurgery.validation.runtime import run_model

HEAD = '<ir_version: 8, opset_import: ["" : 17]>'
AXES = {"x:0": "batch", "x:2": "height", "x:3": "width"}
C = 2
RNG = np.random.default_rng(0)
W0 = RNG.standard_normal((C, 1, 4, 4)).astype(np.float32)
W1 = RNG.standard_normal((C, C, 4, 4)).astype(np.float32)
GAMMA = RNG.standard_normal((1, 4, 4, C)).astype(np.float32) + 2  # rows differ
BETA = RNG.standard_normal((1, 4, 4, C)).astype(np.float32)


def _model(dims: str, *, table: bool = False) -> onnx.ModelProto:
    """Two 4x4 stride-4 Convs (16x16 -> 1x1), channels last, scaled by gamma and shifted by
    beta. ``table``: the source of a table read at the stage's size (gamma, beta [1, 4, 4, C]
    sliced to it); else they are its first row [1, 1, 1, C], broadcast (what the export of
    either at 16x16 holds)."""
    scale = (
        """s = Shape (t)
      hw = Slice (s, one, three)
      g = Slice (gamma, zeros, hw, axes)
      b = Slice (beta, zeros, hw, axes)"""
        if table
        else "g = Identity (gamma)\n      b = Identity (beta)"
    )
    model = onnx.parser.parse_model(f"""{HEAD}
    net (float[{dims}] x) => (float y) {{
      a = Conv <kernel_shape = [4, 4], strides = [4, 4]> (x, w0)
      c = Conv <kernel_shape = [4, 4], strides = [4, 4]> (a, w1)
      t = Transpose <perm = [0, 2, 3, 1]> (c)
      {scale}
      m = Mul (t, g)
      y = Add (m, b)
    }}""")
    gamma, beta = (GAMMA, BETA) if table else (GAMMA[:, :1, :1], BETA[:, :1, :1])
    consts = {"w0": W0, "w1": W1, "gamma": gamma, "beta": beta}
    if table:
        consts |= {"one": np.array([1]), "three": np.array([3]), "zeros": np.array([0, 0])}
        consts["axes"] = np.array([1, 2])
    model.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in consts.items())
    for i, node in enumerate(model.graph.node):
        node.name = f"{node.op_type}_{i}"  # an exporter names every node
    return model


TRACED = _model("2, 1, 16, 16")


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return next(iter(run_model(model, {"x": x}, provider="cpu").values()))


def _refs(tmp_path, source: onnx.ModelProto, *sizes: tuple[int, int, int]):
    """One reference case of ``source`` at each (batch, height, width)."""
    for k, (n, h, w) in enumerate(sizes):
        x = np.random.default_rng(k + 1).standard_normal((n, 1, h, w)).astype(np.float32)
        save_case(Case(f"case{k}", {"x": x}, {"y": _run(source, x)}), tmp_path)
    return onnxsurgery.PassContext(provider="cpu", references=tmp_path)


def test_a_one_pixel_stage_refusal_advises_reference_cases_where_both_sizes_reach_2() -> None:
    """Without cases: refused, as before; the fix names --ref (the sweep follows that advice)
    and the sizes where every stage the constant meets is 2 or more, height and width alike."""
    with pytest.raises(PassError, match="one point cannot tell") as info:
        Symbolize(**AXES)(TRACED, onnxsurgery.PassContext(provider="cpu"))
    text = str(info.value)
    assert "or pass reference cases (--ref) at another size, where " in text
    assert "are 2 or more (height 32 or more, width 32 or more)" in text


def test_reference_cases_where_the_stage_grows_keep_the_one_row_broadcast(tmp_path) -> None:
    """Cases of the broadcasting source at 32x32 (the stage 2x2): the graph as it is matches
    them, a table of length 1 has no rewrite, so the one row is kept broadcasting; the model
    then equals the source at sizes no case used."""
    source = _model("N, 1, H, W")
    ctx = _refs(tmp_path, source, (3, 32, 36))
    result = Symbolize(**AXES)(TRACED, ctx)
    said = " ".join(str(d) for d in result.diagnostics)
    assert "one row repeated (a broadcast) matches the reference cases" in said
    assert "height (traced 16, verified: references)" in said
    x = np.random.default_rng(9).standard_normal((2, 1, 48, 64)).astype(np.float32)
    np.testing.assert_allclose(_run(result.model, x), _run(source, x), rtol=1e-5, atol=1e-5)


def test_a_table_read_at_the_stage_size_matches_no_reading_and_stays_refused(tmp_path) -> None:
    """The same traced graph, but its source reads a table at the stage's size: the cases at
    32x32 differ from one row repeated, a table has no rewrite, so it stays refused (never the
    broadcast, which would be a wrong model)."""
    ctx = _refs(tmp_path, _model("N, 1, H, W", table=True), (3, 32, 36))
    with pytest.raises(PassError, match="one point cannot tell") as info:
        Symbolize(**AXES)(TRACED, ctx)
    text = str(info.value)
    assert "the reference cases given match no reading" in text
    assert "a table of that length: cannot be rewritten" in text


def test_cases_that_hold_a_stage_at_1_decide_nothing(tmp_path) -> None:
    """A case at 32x20 grows the height's stage to 2 but keeps the width's at 1: along the width
    it cannot tell one row from a table either, so the blocker stays, saying which size the
    cases left at 1 (even though the broadcast matches them)."""
    ctx = _refs(tmp_path, _model("N, 1, H, W"), (3, 32, 20))
    with pytest.raises(PassError, match="one point cannot tell") as info:
        Symbolize(**AXES)(TRACED, ctx)
    text = str(info.value)
    assert "the reference cases given hold ((((width - 4)//4 + 1) - 4)//4 + 1) at 1 only" in text
