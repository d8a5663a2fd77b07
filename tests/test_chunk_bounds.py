"""TorchScript's ``x.chunk(k, dim)`` with the chunk size computed at run time (issue 30: MPT
with a cache by TorchScript, refused at batch 2 and 1 where re-export passes). Each bound is
``Mul(Div(Add(Shape(x)[dim], k - 1), k), i)``; MPT's fused ``qkv.chunk(3, dim=2)`` traced at
seq 3 and batch 2 put the chunk's own 3 and 2 beside the traced sizes. The oracle is numpy's
split at other sizes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from sweep_cases import scored_case
from test_symbolize import parse

import onnxsurgery
from onnxsurgery.passes.symbolize import Symbolize
from onnxsurgery.validation.runtime import run_model

RNG = np.random.default_rng(0)
CPU = onnxsurgery.PassContext(provider="cpu")


def chunked_model(batch: int, seq: int, past: int, heads: int = 4, dim: int = 8) -> onnx.ModelProto:
    """MPT's attention with a cache, as TorchScript exports it: ``q, k, v = qkv.chunk(3, dim=2)``
    with run-time bounds, each viewed as ``[batch, seq, heads, dim]`` by a folded constant; the
    keys and values after the cache's, scores masked by ``mask [batch, total]``."""
    width = heads * dim
    total = past + seq
    parts = "".join(
        f"""
            lo{i} = Mul (c, i{i})
            hi{i} = Mul (c, i{i + 1})
            part{i} = Slice (qkv, lo{i}, hi{i}, axis)
            view{i} = Reshape (part{i}, heads)
            t{i} = Transpose <perm = [0, 2, 1, 3]> (view{i})"""
        for i in range(3)
    )
    consts = "\n".join(f"i{i} = Constant <value = int64[1] {{{i}}}> ()" for i in range(4))
    model = parse(
        f"""
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[{batch}, {seq}, {3 * width}] qkv, float[{batch}, {heads}, {past}, {dim}] pk,
             float[{batch}, {heads}, {past}, {dim}] pv, float[{batch}, {total}] mask)
            => (float[{batch}, {seq}, {width}] y) {{
            axis = Constant <value = int64[1] {{2}}> ()
            shape = Shape (qkv)
            n = Gather <axis = 0> (shape, axis)
            two = Constant <value = int64[1] {{2}}> ()
            three = Constant <value = int64[1] {{3}}> ()
            up = Add (n, two)
            c = Div (up, three)
            {consts}
            heads = Constant <value = int64[4] {{{batch}, {seq}, {heads}, {dim}}}> ()
            {parts}
            keys = Concat <axis = 2> (pk, t1)
            values = Concat <axis = 2> (pv, t2)
            kt = Transpose <perm = [0, 1, 3, 2]> (keys)
            scores = MatMul (t0, kt)
            ax = Constant <value = int64[2] {{1, 2}}> ()
            m4 = Unsqueeze (mask, ax)
            masked = Add (scores, m4)
            att = Softmax <axis = -1> (masked)
            ctx = MatMul (att, values)
            back = Transpose <perm = [0, 2, 1, 3]> (ctx)
            flat = Constant <value = int64[3] {{{batch}, {seq}, {width}}}> ()
            y = Reshape (back, flat)
        }}
        """
    )
    for i, node in enumerate(model.graph.node):
        node.name = f"/{node.op_type}_{i}"
    return model


def attention(qkv, pk, pv, mask):
    """The oracle: numpy's split and attention over the cache."""
    batch, seq, _ = qkv.shape
    heads, dim = pk.shape[1], pk.shape[3]
    q, k, v = (p.reshape(batch, seq, heads, dim).transpose(0, 2, 1, 3) for p in np.split(qkv, 3, 2))
    keys, values = np.concatenate([pk, k], 2), np.concatenate([pv, v], 2)
    s = q @ keys.transpose(0, 1, 3, 2) + mask[:, None, None, :]
    e = np.exp(s - s.max(-1, keepdims=True))
    out = (e / e.sum(-1, keepdims=True)) @ values
    return out.transpose(0, 2, 1, 3).reshape(batch, seq, heads * dim)


@pytest.mark.parametrize("batch", [2, 1])
def test_a_chunk_whose_constants_meet_the_traced_sizes_keeps_them(batch):
    """Traced at seq 3 (batch 2), the chunk's ``k = 3`` and ``k - 1 = 2`` fit the sizes too:
    read as such, the last bound was "fixed at 3 or follows seq" and the chunk's width an
    opaque division, so the keys' ``seq`` never met ``total - past`` ("needs -batch*past*32 +
    batch*total*32 == batch*seq*32"). They are the chunk's own: every size matches numpy."""
    axes = {"qkv:0": "batch", "qkv:1": "seq", "mask:0": "batch", "mask:1": "total"}
    for name in ("pk", "pv"):
        axes |= {f"{name}:0": "batch", f"{name}:2": "past"}
    out = Symbolize(**axes)(chunked_model(batch, 3, 5), CPU).model
    for b, seq, past in [(4, 5, 2), (1, 1, 9), (2, 3, 0)]:
        feeds = {
            "qkv": RNG.standard_normal((b, seq, 96)).astype(np.float32),
            "pk": RNG.standard_normal((b, 4, past, 8)).astype(np.float32),
            "pv": RNG.standard_normal((b, 4, past, 8)).astype(np.float32),
            "mask": RNG.standard_normal((b, past + seq)).astype(np.float32),
        }
        got = run_model(out, feeds, "cpu")["y"]
        np.testing.assert_allclose(got, attention(**feeds), rtol=1e-5, atol=1e-5)


@pytest.mark.sweep_rows
@pytest.mark.parametrize("batch", [2, 1])
def test_mpt_with_a_cache_by_torchscript_matches_torch(batch):
    case = scored_case("mpt.causal-lm-kv", "torchscript", batch)
    assert case["symbolize"]["status"] == "pass", case["symbolize"]
