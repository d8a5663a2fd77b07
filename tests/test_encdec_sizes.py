"""Encoder-decoder sizes: a traced constant that reads as more than one symbol expression.

Sweep rows traced encoder ``seq`` and decoder ``tgt`` at one length (8) and ``batch`` at 2, so
a constant 8 fits ``seq`` and ``tgt`` alike and a 16 fits ``batch*tgt``. TorchScript folds BART's
default decoder mask (``ones(batch, tgt)``) into a constant, flattens it, gathers every element
back with the index grid ``arange(16).reshape(2, 1, 1, 8)`` and reshapes that to
``[batch, 1, 1, tgt]``: the element count needs the grid to be ``batch*tgt``, which only one
reading of its dims gives (``[batch, 1, 1, tgt]``; ``seq`` on the last axis would keep the
element count wrong at other sizes). :func:`decoder_mask` below is that mechanism in small.

dynamo instead builds the encoder mask once, ``[batch, 1, 8, seq]`` from a folded all-True
``[1, 1, 8, 1]``, and shares it between the encoder's self-attention (8 is ``seq``) and the
decoder's cross-attention (8 is ``tgt``): no symbol fits both, but the rows are one row
repeated, which broadcasts alike at every size (:func:`shared_mask`).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import onnxsurgery
from onnxsurgery.errors import PassError
from onnxsurgery.passes.symbolize import Symbolize
from onnxsurgery.validation.runtime import run_model

CPU = onnxsurgery.PassContext(provider="cpu")
AXES = {"x:0": "batch", "x:1": "seq", "y:0": "batch", "y:1": "tgt"}


def parse(text: str, **inits: np.ndarray) -> onnx.ModelProto:
    model = onnx.parser.parse_model(text)
    for name, arr in inits.items():
        model.graph.initializer.append(onnx.numpy_helper.from_array(arr, name))
    onnx.checker.check_model(model)
    return model


def decoder_mask(table: np.ndarray | None = None) -> onnx.ModelProto:
    """The encoder keeps ``[batch, seq]``; the decoder's mask is a folded ``table`` (default
    ``ones(2, 8)``), flattened, gathered back element by element with ``arange(16)`` as a
    ``[2, 1, 1, 8]`` grid and reshaped to ``[2, 1, 1, 8]``, then weighs the decoder input's own
    ``[batch, 1, 1, tgt]``."""
    return parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[2, 8] x, float[2, 8] y) => (float[2, 8] enc, float[2, 1, 1, 8] dec)
            <int64[1] flat_shape = {-1}, int64[4] grid = {2, 1, 1, 8}, int64[2] axes = {1, 2}> {
            enc = Add (x, x)
            flat = Flatten <axis = 2> (ones)
            picked = Gather (flat, index)
            line = Reshape (picked, flat_shape)
            mask = Reshape (line, grid)
            ymask = Unsqueeze (y, axes)
            dec = Mul (mask, ymask)
        }
        """,
        ones=np.ones((2, 8), dtype=np.float32) if table is None else table,
        index=np.arange(16).reshape(2, 1, 1, 8),
    )


def test_a_product_constant_reads_as_the_one_product_that_keeps_the_element_count():
    result = Symbolize(**AXES)(decoder_mask(), CPU)
    model = result.model
    for batch, seq, tgt in ((3, 5, 7), (1, 9, 4)):
        y = np.random.default_rng(tgt).integers(0, 2, (batch, tgt)).astype(np.float32)
        x = np.zeros((batch, seq), dtype=np.float32)
        dec = run_model(model, {"x": x, "y": y}, provider="cpu")["dec"]
        np.testing.assert_array_equal(dec, y.reshape(batch, 1, 1, tgt))


def test_a_table_that_holds_values_is_still_refused():
    """The same graph over a table of distinct values: the reading that keeps the element count
    would index past a table the graph cannot compute at other sizes; refused, never guessed."""
    table = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    with pytest.raises(PassError, match="constant 'ones' .* values follow no pattern"):
        Symbolize(**AXES)(decoder_mask(table), CPU)


def shared_mask(ones: np.ndarray | None = None) -> onnx.ModelProto:
    """dynamo's BART in small: the encoder mask ``[batch, 1, 8, seq]``, a folded all-True
    ``[1, 1, 8, 1]`` And the attention mask, is built once and added to the encoder's
    ``[batch, 1, seq, seq]`` scores and to the decoder's cross-attention ``[batch, 1, tgt, seq]``
    (traced alike, so the exporter shared it); the decoder's queries are a Reshape to
    ``[2, 8, 1, 4]``."""
    return parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[2, 8, 4] x, float[2, 8] am, float[2, 8, 4] y)
            => (float[2, 1, 8, 8] enc, float[2, 1, 8, 8] dec)
            <int64[2] ax12 = {1, 2}, int64[1] ax1 = {1}, int64[4] heads = {2, 8, 1, 4},
             float zero = {0.0}, float neg = {-1000.0}> {
            amb = Cast <to = 9> (am)
            m4 = Unsqueeze (amb, ax12)
            mask = And (ones, m4)
            fm = Where (mask, zero, neg)
            xt = Transpose <perm = [0, 2, 1]> (x)
            es = MatMul (x, xt)
            es4 = Unsqueeze (es, ax1)
            enc = Add (es4, fm)
            yq = Reshape (y, heads)
            yt = Transpose <perm = [0, 2, 1, 3]> (yq)
            xk = Unsqueeze (xt, ax1)
            ds = MatMul (yt, xk)
            dec = Add (ds, fm)
        }
        """,
        ones=np.ones((1, 1, 8, 1), dtype=bool) if ones is None else ones,
    )


def shared_mask_reference(x: np.ndarray, am: np.ndarray, y: np.ndarray) -> tuple:
    fm = np.where(am[:, None, None, :] > 0, 0.0, -1000.0).astype(np.float32)
    enc = (x @ x.transpose(0, 2, 1))[:, None] + fm
    dec = (y[:, None] @ x.transpose(0, 2, 1)[:, None]) + fm
    return enc, dec


SHARED = {"x:0": "batch", "x:1": "seq", "am:0": "batch", "am:1": "seq", "y:0": "batch", "y:1": "tgt"}


def test_a_mask_shared_by_encoder_and_decoder_broadcasts_one_row():
    result = Symbolize(**SHARED)(shared_mask(), CPU)
    rng = np.random.default_rng(1)
    for batch, seq, tgt in ((3, 5, 7), (1, 9, 4), (2, 8, 8)):
        x = rng.standard_normal((batch, seq, 4)).astype(np.float32)
        y = rng.standard_normal((batch, tgt, 4)).astype(np.float32)
        am = rng.integers(0, 2, (batch, seq)).astype(np.float32)
        got = run_model(result.model, {"x": x, "am": am, "y": y}, provider="cpu")
        enc, dec = shared_mask_reference(x, am, y)
        np.testing.assert_allclose(got["enc"], enc, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got["dec"], dec, rtol=1e-5, atol=1e-5)


def test_a_shared_mask_whose_rows_differ_is_still_refused():
    """Rows that differ along the query axis are no broadcast of one: seq == tgt stays needed."""
    ones = np.ones((1, 1, 8, 1), dtype=bool)
    ones[0, 0, 3, 0] = False
    with pytest.raises(PassError, match="needs seq == tgt"):
        Symbolize(**SHARED)(shared_mask(ones), CPU)


@pytest.mark.e2e
def test_an_unfolded_window_grid_reads_its_length_from_the_reshape_after_it(tmp_path):
    """ConvBERT's span convolution: dynamo gathers the padded sequence with a [9, 8] window grid
    (``k + s``), whose 8 nothing ties to ``seq`` but the element count of a Reshape two steps
    on, through a ``-1`` worked out from it; refused 'needs seq == 8' before."""
    torch = pytest.importorskip("torch")
    nn, F = torch.nn, torch.nn.functional

    class SpanConv(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.value = nn.Linear(16, 16)
            self.kernel = nn.Linear(16, 2 * 9)

        def forward(self, x):  # noqa: ANN001
            b = x.shape[0]
            v = self.value(x).transpose(1, 2).contiguous().unsqueeze(-1)
            u = F.unfold(v, kernel_size=[9, 1], padding=[4, 0])
            u = torch.reshape(u.transpose(1, 2).reshape(b, -1, 16, 9), [-1, 8, 9])
            k = torch.softmax(torch.reshape(self.kernel(x), [-1, 9, 1]), dim=1)
            return torch.reshape(torch.matmul(u, k), [b, -1, 16])

    module, path = SpanConv().eval(), tmp_path / "span.onnx"
    torch.onnx.export(module, (torch.randn(2, 8, 16),), str(path), input_names=["x"], dynamo=True)
    result = Symbolize(**{"x:0": "batch", "x:1": "seq"})(onnx.load(path), CPU)
    for batch, seq in ((3, 5), (1, 13)):
        x = np.random.default_rng(seq).standard_normal((batch, seq, 16)).astype(np.float32)
        (got,) = run_model(result.model, {"x": x}, provider="cpu").values()
        with torch.no_grad():
            want = module(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_the_shared_mask_is_cut_to_its_one_row_by_its_own_rule():
    """The rule that decides the all-True constant: ``one-row``, rebuilt as a [1, 1, 1, 1]."""
    from test_symbolize_rules import deciding, reads

    read = reads(shared_mask(), _axes(SHARED))["ones"]
    rule = deciding(read)
    change = rule.produce(read)
    assert rule.kind == "one-row"
    assert change is not None and change.new == "bool[1, 1, 1, 1] (one row)"
    assert change.rebuild is not None and change.rebuild.base_array.shape == (1, 1, 1, 1)


def _axes(spec: dict[str, str]) -> dict[str, dict[int, str]]:
    out: dict[str, dict[int, str]] = {}
    for key, name in spec.items():
        tensor, axis = key.split(":")
        out.setdefault(tensor, {})[int(axis)] = name
    return out
