"""symbolize on sizes that reach a Slice bound or a Resize size through shape arithmetic, on an
axis that does not carry the batch (issue 30/28: ``make test-corpus``'s WavLM and MobileViT rows).

A batch whose rows are independent is the one reading the graph rules out there: a row's values
do not depend on how many rows run with it, so no size inside a row follows the batch. The direct
Slice bound had that rule (BEiT's ``hidden[:, 1:]``); a constant reaching the bound through an
Add, a Div, a Mul (torchscript's ``chunk``) or the sizes of a Resize through a Concat was refused
as "fixed as traced or follows batch" whenever its value equalled the traced batch.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import onnxruntime as ort
import pytest

import onnxsurgery
from onnxsurgery.passes.symbolize import Symbolize, coincident
from onnxsurgery.shapes.propagation import propagate
from onnxsurgery.shapes.solver import solve

HEAD = '<ir_version: 8, opset_import: ["" : 17]>'


def _run(model: onnx.ModelProto, **feeds: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def _symbolize(model: onnx.ModelProto) -> onnx.ModelProto:
    return Symbolize(**{"x:0": "batch"})(model, onnxsurgery.PassContext(provider="cpu")).model


def chunked_gate(batch: int) -> onnx.ModelProto:
    """WavLM's gate ``sigmoid(h).chunk(2, dim=-1)`` as torchscript exports it, traced at
    ``batch``: the chunk's end is ``(dim + 1) // 2 * 1`` and the second one's ``* 2``, with
    ``dim`` (2) the Shape of the last axis; at batch 1 the Add's and the first Mul's 1, at
    batch 2 the Div's and the second Mul's 2 equal the traced batch."""
    return onnx.parser.parse_model(f"""{HEAD}
    g (float[{batch}, 3, 2] x) => (float[{batch}, 3, 1] y) {{
      s = Sigmoid (x)
      shape = Shape (s)
      last = Constant <value = int64[1] {{-1}}> ()
      zero = Constant <value = int64[1] {{0}}> ()
      dim = Gather <axis = 0> (shape, last)
      c1 = Constant <value = int64[1] {{1}}> ()
      c2 = Constant <value = int64[1] {{2}}> ()
      m1 = Constant <value = int64[1] {{1}}> ()
      m2 = Constant <value = int64[1] {{2}}> ()
      up = Add (dim, c1)
      half = Div (up, c2)
      end_a = Mul (half, m1)
      end_b = Mul (half, m2)
      a = Slice (s, zero, end_a, last)
      b = Slice (s, end_a, end_b, last)
      y = Mul (a, b)
    }}""")


@pytest.mark.parametrize("batch", [1, 2])
def test_a_chunk_bound_computed_inside_a_row_does_not_follow_the_batch(batch: int) -> None:
    """The chunk's bounds cut the last axis, of fixed length 2, of data whose rows are the
    batch: the constants stay as traced (refused before as 'fixed at N or follows batch')."""
    result = _symbolize(chunked_gate(batch))
    x = np.random.default_rng(1).standard_normal((3, 3, 2)).astype(np.float32)
    s = 1 / (1 + np.exp(-x))
    np.testing.assert_allclose(_run(result, x=x), s[..., :1] * s[..., 1:], rtol=1e-6)


def resized_grid(batch: int) -> onnx.ModelProto:
    """MobileViT's unfolding at batch ``batch``: features [batch, 4, 1, 1] resized to a patch
    grid [batch, 4, 2, 2] whose sizes are ``Concat(Shape(x)[:2], [2, 2])``."""
    return onnx.parser.parse_model(f"""{HEAD}
    g (float[{batch}, 4, 1, 1] x) => (float[{batch}, 4, 2, 2] y) {{
      shape = Shape (x)
      b = Constant <value = int64[1] {{0}}> ()
      e = Constant <value = int64[1] {{2}}> ()
      lead = Slice (shape, b, e)
      grid = Constant <value = int64[2] {{2, 2}}> ()
      sizes = Concat <axis = 0> (lead, grid)
      y = Resize <mode = "nearest"> (x, , , sizes)
    }}""")


def test_resize_sizes_on_axes_inside_a_row_do_not_follow_the_batch() -> None:
    """The grid's 2, 2 at batch 2 size the spatial axes of data whose rows are the batch: they
    stay 2, 2 (refused before as 'fixed at 2, 2 or follows batch, batch')."""
    result = _symbolize(resized_grid(2))
    x = np.random.default_rng(2).standard_normal((3, 4, 1, 1)).astype(np.float32)
    np.testing.assert_allclose(_run(result, x=x), np.broadcast_to(x, (3, 4, 2, 2)), rtol=1e-6)



def test_a_size_on_the_batch_axis_is_not_ruled_out() -> None:
    """The rule is for the axes beside the batch: of a Resize's sizes
    ``Concat([2], Shape(x)[1:2], [2, 2])`` at batch 2, the grid's 2s (spatial axes) cannot
    follow the batch, the lead 2 (it sizes the batch axis itself) still may, and so may any
    size of data that carries no batch (its rows say nothing)."""
    model = onnx.parser.parse_model(f"""{HEAD}
    g (float[2, 4, 1, 1] x, float[1, 1, 1, 1] w) => (float[2, 4, 2, 2] y, float[1, 1, 2, 2] z) {{
      b = Constant <value = int64[1] {{1}}> ()
      e = Constant <value = int64[1] {{2}}> ()
      lead = Constant <value = int64[1] {{2}}> ()
      grid = Constant <value = int64[2] {{2, 2}}> ()
      x_shape = Shape (x)
      x_mid = Slice (x_shape, b, e)
      sizes = Concat <axis = 0> (lead, x_mid, grid)
      y = Resize <mode = "nearest"> (x, , , sizes)
      tile = Constant <value = int64[2] {{2, 2}}> ()
      w_shape = Shape (w)
      w_lead = Slice (w_shape, b, e)
      w_sizes = Concat <axis = 0> (w_lead, w_lead, tile)
      z = Resize <mode = "nearest"> (w, , , w_sizes)
    }}""")
    a = propagate(model, {"x": {0: "batch"}})
    sol = solve(a)
    uses = {u.tensor: u for u in a.uses if u.kind == "size" and u.op == "Concat"}

    def within(tensor: str, element: int) -> set[str]:
        atom = uses[tensor].atoms[element]
        assert atom is not None
        return coincident._within_rows_reached(a, sol, uses[tensor], atom, {"batch"})

    assert within("grid", 0) == within("grid", 1) == {"batch"}
    assert within("lead", 0) == set()
    assert within("tile", 0) == set()
