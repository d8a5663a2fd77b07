"""A strided stack traced down to a one-pixel stage, then flattened: ``[b, c, h, w] -> [b, c, 1]``.

CvT's key/value projection (a stride-2 conv) leaves its last stage 1x1 at the traced size, and
``view(b, c, -1)`` is exported with the traced 1. Matching the Reshape's ends one to one paired
that 1 with ``h`` and hinted ``w`` to 1 for good: the check then failed at any other width
("a planning bug of symbolize"). The 1 is ``h*w``: a dim left on one side only, 1 at the traced
size but no constant, is merged, not dropped.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from test_symbolize import parse

import onnxsurgery
from onnxsurgery.errors import PassError
from onnxsurgery.passes.symbolize import Symbolize
from onnxsurgery.passes.symbolize.plan import plan_symbolize
from onnxsurgery.shapes.analysis import Atom, ShapeAnalysis
from onnxsurgery.shapes.dims import Dim
from onnxsurgery.shapes.solver import solve
from onnxsurgery.validation.runtime import run_model

CPU = onnxsurgery.PassContext(provider="cpu")
SPATIAL = {"x:0": "batch", "x:2": "height", "x:3": "width"}


def flattened_stage(
    shape: str, sizes: tuple[list[int], list[int], list[int]], out: str
) -> onnx.ModelProto:
    """Two 4x4 stride-4 convs (a one-pixel stage at 16x16), flattened by the Reshape constant
    ``flat`` and projected: ``[b, 2, h, w] -> [b, 2, h*w] -> [b, h*w, 2] @ [2, 3]``. Between
    them CvT's tokens: the first stage flattened to a sequence and put back on its grid by
    Reshape constants (``seq``, ``grid``), so the last stage's sizes are the solver's unknowns,
    not divisions of the input's."""
    text = f"""
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[{shape}] x) => (float[{out}] y) {{
          a = Conv <kernel_shape = [4, 4], strides = [4, 4]> (x, w0)
          s = Reshape (a, seq)
          g = Reshape (s, grid)
          b = Conv <kernel_shape = [4, 4], strides = [4, 4]> (g, w1)
          f = Reshape (b, flat)
          t = Transpose <perm = [0, 2, 1]> (f)
          y = MatMul (t, p)
        }}
    """
    rng = np.random.default_rng(0)
    return parse(
        text,
        w0=rng.standard_normal((2, 1, 4, 4)).astype(np.float32),
        w1=rng.standard_normal((2, 2, 4, 4)).astype(np.float32),
        p=rng.standard_normal((2, 3)).astype(np.float32),
        seq=np.array(sizes[0], dtype=np.int64),
        grid=np.array(sizes[1], dtype=np.int64),
        flat=np.array(sizes[2], dtype=np.int64),
    )


def test_a_flatten_merges_the_one_pixel_stage_instead_of_fixing_it() -> None:
    """The solver's view of CvT's flatten: ``[batch, 384, h, w] -> [2, 384, 1]`` with ``h``, ``w``
    a stride-2 conv's output (1 at the traced size), decided only once an upstream grid is
    (a later hint). Matching the ends one to one made the 1 ``h`` and fixed ``w`` at 1."""
    a = ShapeAnalysis(onnx.ModelProto(), {"batch": [("x", 0)], "gh": [("x", 2)], "gw": [("x", 3)]})
    for sym, traced, axis in (("batch", 2, 0), ("gh", 4, 2), ("gw", 4, 3)):
        a.atoms[sym] = Atom(sym, "sym", traced, [("x", axis)])
    node = onnx.helper.make_node("Reshape", ["b", "flat"], ["f"], name="flatten")
    grid_h, grid_w = a.new_atom("var", 4), a.new_atom("var", 4)
    h, w = a.new_atom("derived", 1), a.new_atom("derived", 1)
    a.pending_floors += [
        (str(h), grid_h - 4, Dim.const(4), 1),
        (str(w), grid_w - 4, Dim.const(4), 1),
    ]
    flat = [a.new_atom("var", t) for t in (2, 384, 1)]
    batch = Dim.sym("batch")
    a.equal(
        flat[0] * flat[1] * flat[2], batch * 384 * h * w, node, "Reshape keeps the element count"
    )
    a.align([batch, Dim.const(384), h, w], flat, node)
    a.suggest(grid_h, Dim.sym("gh"), node, "the grid")
    a.suggest(grid_w, Dim.sym("gw"), node, "the grid")
    sol = solve(a)
    assert [sol.resolve(d) for d in flat] == [batch, Dim.const(384), h * w]
    assert sol.resolve(w) == w and sol.resolve(h) == h  # run-time sizes, not fixed at 1


def test_a_flattened_one_pixel_stage_follows_height_times_width() -> None:
    """End to end on a graph of that shape: the flatten is spelled in the input symbols (a
    product already equal on both sides is not split again: ``$q10 = $q10``, a hint to itself,
    left the stage's size an unknown no symbol reaches), and the model matches at 32x48."""
    plan = plan_symbolize(
        flattened_stage("2, 1, 16, 16", ([2, 2, 16], [2, 2, 4, 4], [2, 2, 1]), "2, 1, 3"),
        {"x": {0: "batch", 2: "height", 3: "width"}},
    )
    (flat,) = [str(c) for c in plan.changes if "(flat)" in str(c)]
    assert "$" not in flat and "height, width" in flat
    traced = flattened_stage("2, 1, 16, 16", ([2, 2, 16], [2, 2, 4, 4], [2, 2, 1]), "2, 1, 3")
    # what torch computes at any size, with the same weights: nothing traced
    dynamic = flattened_stage("N, 1, H, W", ([0, 2, -1], [0, 2, 8, 12], [0, 2, -1]), "N, S, 3")
    result = Symbolize(**SPATIAL)(traced, CPU)
    x = np.random.default_rng(1).standard_normal((3, 1, 32, 48)).astype(np.float32)
    (got,) = run_model(result.model, {"x": x}, provider="cpu").values()
    (want,) = run_model(dynamic, {"x": x}, provider="cpu").values()
    assert got.shape == (3, 6, 3)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_weight_meeting_a_one_pixel_stage_is_worded_in_the_input_symbols() -> None:
    """ConvNeXt V2's GRN weight ``[1, 1, 1, C]`` meets its last stage traced at 1x1: one point
    cannot tell a broadcast from a table (a refusal). The stage's size is the solver's ``$o``
    atom; the message spells it in the input symbols and says what to export (height 48: its
    stages are 12, then 3), where it read ``$o37`` and "export at a size of  of 3 or more"."""
    rng = np.random.default_rng(0)
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[1, 1, 16, 16] x) => (float[1, 2, 1, 1] y) {
          a = Conv <kernel_shape = [4, 4], strides = [4, 4]> (x, w0)
          b = Conv <kernel_shape = [4, 4], strides = [4, 4]> (a, w1)
          y = Mul (b, gamma)
        }
        """,
        w0=rng.standard_normal((2, 1, 4, 4)).astype(np.float32),
        w1=rng.standard_normal((2, 2, 4, 4)).astype(np.float32),
        gamma=rng.standard_normal((1, 1, 1, 1)).astype(np.float32) + 2,
    )
    with pytest.raises(PassError, match="one point cannot tell") as info:
        Symbolize(**SPATIAL)(model, CPU)
    text = str(info.value)
    assert "$" not in text
    assert "where it meets ((((height - 4)//4 + 1) - 4)//4 + 1) traced at 1" in text
    assert (
        "export at a size where ((((height - 4)//4 + 1) - 4)//4 + 1) is 3 or more "
        "(height 48 or more) so the values show their pattern" in text
    )
