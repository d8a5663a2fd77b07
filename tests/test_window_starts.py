"""A window of a fixed buffer cut from a cache length (GPT-Neo with a cache by dynamo).

GPT-Neo masks its scores with ``bias[:, :, key_length - query_length : key_length,
:key_length]``, a window of a causal buffer [1, 1, 512, 512] at the new positions. dynamo folds
the bounds to 5 and 8 (past 5, seq 3); the window's length must be ``seq`` downstream, which a
start fixed at 5, at ``past`` or at ``batch + seq`` all give: the conflict was read no way and
symbolize refused ("needs seq == 3 ... the model fixes seq at 3"). Reading the first layer's
start alone would have left the second's fixed at 5, consistent with the graph and wrong at
every other ``past``. Such a start now moves with the cache length traced at its value
(:func:`~onnxsurgery.passes.symbolize.cache_offsets.window_starts`), as a count from it does.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import onnxruntime as ort
import pytest
from sweep_cases import scored_case

import onnxsurgery
from onnxsurgery.passes.symbolize import Symbolize

BUF = 32
#: traced at batch 1, seq 4, past 5: the bounds fold to 5 and 9
AXES = {"x": {0: "batch", 1: "seq"}, "past": {0: "batch", 1: "past"}}


def windowed(layers: int) -> onnx.ModelProto:
    """``layers`` attention steps over ``present = Concat(past, Relu(x))``, each masked by its own
    window ``buf[5:9, 0:9]`` of a causal buffer (its own start constant, as dynamo gives each
    layer's Slice)."""
    body, prev = [], "x"
    for k in range(layers):
        body += [
            f"kt{k} = Transpose <perm = [0, 2, 1]> (present)",
            f"s{k} = MatMul ({prev}, kt{k})",
            f"r{k} = Slice (buf, start{k}, end, one)",
            f"w{k} = Slice (r{k}, zero, end, two)",
            f"m{k} = Where (w{k}, s{k}, neg)",
            f"p{k} = Softmax <axis = -1> (m{k})",
            f"h{k} = MatMul (p{k}, present)",
        ]
        prev = f"h{k}"
    starts = "\n".join(f"start{k} = Constant <value = int64[1] {{5}}> ()" for k in range(layers))
    m = onnx.parser.parse_model(f"""<ir_version: 8, opset_import: ["" : 17]>
    g (float[1, 4, 8] x, float[1, 5, 8] past) => (float[1, 4, 8] y, float[1, 9, 8] present) {{
      hx = Relu (x)
      present = Concat <axis = 1> (past, hx)
      {starts}
      end = Constant <value = int64[1] {{9}}> ()
      zero = Constant <value = int64[1] {{0}}> ()
      one = Constant <value = int64[1] {{1}}> ()
      two = Constant <value = int64[1] {{2}}> ()
      neg = Constant <value = float {{-1e9}}> ()
      {chr(10).join(body)}
      y = Identity ({prev})
    }}""")
    causal = np.tril(np.ones((BUF, BUF), dtype=bool))[None]
    m.graph.initializer.append(onnx.numpy_helper.from_array(causal, "buf"))
    onnx.checker.check_model(m)
    return m


def reference(x: np.ndarray, past: np.ndarray, layers: int) -> np.ndarray:
    present = np.concatenate([past, np.maximum(x, 0)], axis=1)
    p, s = past.shape[1], x.shape[1]
    mask = np.tril(np.ones((BUF, BUF), dtype=bool))[p : p + s, : p + s]
    h = x
    for _ in range(layers):
        scores = np.where(mask, h @ present.transpose(0, 2, 1), -1e9)
        e = np.exp(scores - scores.max(-1, keepdims=True))
        h = (e / e.sum(-1, keepdims=True)) @ present
    return h


@pytest.mark.parametrize("layers", [1, 2])
def test_a_window_cut_from_the_cache_length_moves_with_it(layers):
    ctx = onnxsurgery.PassContext(provider="cpu")
    result = Symbolize(dynamic_axes=AXES)(windowed(layers), ctx)
    sess = ort.InferenceSession(result.model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for b, s, p in [(1, 4, 5), (2, 3, 7), (1, 1, 9), (2, 6, 0)]:
        x = rng.standard_normal((b, s, 8)).astype(np.float32)
        past = rng.standard_normal((b, p, 8)).astype(np.float32)
        y, _ = sess.run(None, {"x": x, "past": past})
        np.testing.assert_allclose(y, reference(x, past, layers), rtol=1e-4, atol=1e-5)


@pytest.mark.sweep_rows
@pytest.mark.parametrize("batch", [2, 1])
def test_gpt_neo_with_a_cache_by_dynamo_matches_torch(batch):
    case = scored_case("gpt_neo.causal-lm-kv", "dynamo", batch)
    assert case["symbolize"]["status"] == "pass", case["symbolize"]
