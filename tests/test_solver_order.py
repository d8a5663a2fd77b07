"""The order in which the shape solver decides its unknowns (issue 30).

Each test reproduces, on a tiny inline graph, the mechanism of an exported model that the solver
decided in the wrong order, and checks the symbolized model's values at other sizes against
numpy.
"""

from __future__ import annotations

import numpy as np
import onnx
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
