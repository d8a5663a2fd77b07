"""ProphetNet's decoder: a main stream and ngram streams cut by TorchScript's ``chunk``, and the
tables its export folds at the traced length (sweep row ``prophetnet.base``, TorchScript).

- ``chunk(3)`` of the streams' ``3*tgt`` rows slices at ``q*k`` with ``q = (3*tgt + 2) // 3``:
  ``tgt`` at every size, which the plan read as a run-time unknown. The causal mask's
  ``torch.full((tgt, tgt))`` folded at 8 was then kept at 8 (nothing seemed to tie it), and the
  Add of the scores (``q x q``) and the mask refused as holding only at the traced size.
- The predicting streams' relative buckets and attention bias are ``cat`` of two tables cut to
  ``tgt`` each (columns ``[:tgt]`` and ``[M:M+tgt]`` of a table over the model's
  ``max_position_embeddings``): ``[tgt, 2*tgt]``, folded at ``[8, 16]``. Only the traced
  distances are in the file (ProphetNet's buckets past them grow logarithmically), so past the
  traced ``tgt`` no export can be repaired; under ``tgt<=traced`` each block's first ``tgt``
  columns are those of the shorter length: sliced block by block.
- The decoder's outputs are cut from the streams at a folded ``8`` that fits ``seq`` and ``tgt``
  alike (both traced at 8): the cut axis is ``3*tgt``, so ``tgt`` is read first.
"""

from __future__ import annotations

import numpy as np
import onnx.parser
import pytest
from onnx import numpy_helper
from sweep_cases import scored_case

import onnxsurgery
from onnxsurgery.errors import PassError
from onnxsurgery.passes.symbolize import Symbolize
from onnxsurgery.validation.references import Case, save_case
from onnxsurgery.validation.runtime import run_model

NEG = -1e4


def _named(model: onnx.ModelProto, consts: dict[str, np.ndarray]) -> onnx.ModelProto:
    model.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in consts.items())
    for i, node in enumerate(model.graph.node):
        node.name = f"{node.op_type}_{i}"
    return model


def _chunked(t: int = 8) -> onnx.ModelProto:
    """Three streams of ``t`` rows, chunked as TorchScript does; the first two scored against
    each other under a causal mask folded at ``t``."""
    model = onnx.parser.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
    net (float[2, 8, 4] x) => (float y) {
      h = Concat <axis = 1> (x, x, x)
      s = Shape (h)
      n = Gather <axis = 0> (s, one)
      n2 = Add (n, two)
      q = Div (n2, three)
      e1 = Mul (q, one)
      first = Slice (h, zero, e1, one)
      e2 = Mul (q, two)
      second = Slice (h, e1, e2, one)
      st = Transpose <perm = [0, 2, 1]> (second)
      sc = MatMul (first, st)
      m = Trilu <upper = 1> (full, k1)
      y = Add (sc, m)
    }""")
    consts = {
        "one": np.array([1]),
        "two": np.array([2]),
        "three": np.array([3]),
        "zero": np.array([0]),
        "k1": np.array(1),
        "full": np.full((t, t), NEG, np.float32),
    }
    return _named(model, consts)


def test_a_chunk_of_three_streams_follows_their_length():
    result = Symbolize(**{"x:1": "tgt"})(_chunked(), onnxsurgery.PassContext(provider="cpu"))
    for t in (5, 11):
        x = np.random.default_rng(t).standard_normal((2, t, 4)).astype(np.float32)
        want = x @ x.transpose(0, 2, 1) + np.triu(np.full((t, t), NEG, np.float32), 1)
        got = run_model(result.model, {"x": x}, provider="cpu")["y"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-3)


def _two_blocks() -> np.ndarray:
    """ProphetNet's predicting-stream bias at 8: a first block by ``j - i`` with a first column
    every row sees (``c - r >= 0`` masked but column 0), a second masking all but the diagonal."""
    r, c = np.arange(8)[:, None], np.arange(8)[None, :]
    left = np.where((c - r >= 0) & (c != 0), NEG, 0.0)
    right = np.where(r != c, NEG, 0.0)
    return np.concatenate([left, right], axis=1).astype(np.float32)


def _streams_bias() -> onnx.ModelProto:
    """Scores of ``t`` queries over ``2*t`` keys (a stream and its main stream) plus the bias."""
    model = onnx.parser.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
    net (float[2, 8, 4] x) => (float y) {
      k = Concat <axis = 1> (x, x)
      kt = Transpose <perm = [0, 2, 1]> (k)
      sc = MatMul (x, kt)
      y = Add (sc, bias)
    }""")
    return _named(model, {"bias": _two_blocks()})


def test_two_tables_cut_side_by_side_are_sliced_block_by_block_under_a_bound():
    ctx = onnxsurgery.PassContext(provider="cpu")
    result = Symbolize(**{"x:1": "tgt<=traced"})(_streams_bias(), ctx)
    table = _two_blocks()
    for t in (3, 5, 8):
        x = np.random.default_rng(t).standard_normal((2, t, 4)).astype(np.float32)
        bias = np.concatenate([table[:t, :t], table[:t, 8 : 8 + t]], axis=1)
        want = x @ np.concatenate([x, x], 1).transpose(0, 2, 1) + bias
        got = run_model(result.model, {"x": x}, provider="cpu")["y"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-3)


def test_two_tables_cut_side_by_side_are_refused_past_the_traced_length():
    with pytest.raises(PassError, match="tgt"):
        Symbolize(**{"x:1": "tgt"})(_streams_bias(), onnxsurgery.PassContext(provider="cpu"))


@pytest.mark.sweep_rows
def test_prophetnet_passes_under_its_bound_by_torchscript():
    """Refused past the traced tgt (the buckets past distance 7 are not in the file), passed
    with tgt<=traced. Needs exports from the builder as it is: a cached row exported by another
    build but stamped with this build's weights.key (a cache older than the stamp is trusted and
    stamped on its first run) scores every size new to the row wrong, re-export included."""
    for batch in (2, 1):
        case = scored_case("prophetnet.base", "torchscript", batch)
        from sweep import after_advice  # sweep_cases puts bench/ on the path

        assert "bound" in case["symbolize"]["advice"], case
        assert after_advice(case)["+bound"], case


def _main_stream() -> onnx.ModelProto:
    """The main stream cut from three streams of ``tgt`` rows at a folded 8, beside an input of
    ``seq`` rows also traced at 8."""
    model = onnx.parser.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
    net (float[2, 8] x, float[2, 8, 4] d) => (float y, float z) {
      y = Relu (x)
      h = Concat <axis = 1> (d, d, d)
      z = Slice (h, zero, eight, one)
    }""")
    return _named(model, {"zero": np.array([0]), "eight": np.array([8]), "one": np.array([1])})


def _main_stream_case(seq: int, tgt: int) -> Case:
    rng = np.random.default_rng(seq * 10 + tgt)
    x = rng.standard_normal((2, seq)).astype(np.float32)
    d = rng.standard_normal((2, tgt, 4)).astype(np.float32)
    return Case(f"s{seq}t{tgt}", {"x": x, "d": d}, {"y": np.maximum(x, 0), "z": d})


def test_a_cut_of_three_streams_reads_as_their_length_sooner_than_another_one(tmp_path):
    """8 fits seq and tgt; a case at seq 7, tgt 5 refutes fixed and seq, and tgt is tried."""
    save_case(_main_stream_case(7, 5), tmp_path / "refs", index=0)
    ctx = onnxsurgery.PassContext(provider="cpu", references=tmp_path / "refs")
    result = Symbolize(**{"x:1": "seq", "d:1": "tgt"})(_main_stream(), ctx)
    for seq, tgt in ((3, 6), (9, 2)):
        case = _main_stream_case(seq, tgt)
        got = run_model(result.model, case.inputs, provider="cpu")
        np.testing.assert_array_equal(got["z"], case.outputs["z"])
