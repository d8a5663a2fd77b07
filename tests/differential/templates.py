"""Metamorphic templates for symbolize: models whose shape constants are written from B and S.

A template is a list of blocks drawn from a seed; ``build(B, S)`` writes it out with every size
constant computed from B (the batch) and S (the sequence) as an exporter would have traced them.
Symbolize gets the template built at the traced size (B = 2, or the hard case B = 1); the
symbolized model run at other sizes must equal the template built at those sizes, or symbolize
must refuse. Some constants merely equal the traced batch and must stay fixed: a channel count
of 2, two heads, a literal 2 in a reshape. The blocks (each [B, S, C] -> [B, S, C] unless said):

    flat       Reshape [B*S, C] (or [-1, C]) -> Relu -> Reshape [B, S, C] (or [B, -1, C], [-1, S, C])
    heads      Reshape [B, S, 2, C/2] -> Transpose -> Transpose back -> Reshape [B, S, C]
    pairs      Reshape [B, S*C/2, 2] -> Softmax -> Reshape [B, S, C]             (the literal 2)
    expand     a [1, 1, C] bias Expanded to [B, S, C], added
    zeros      ConstantOfShape [B, S, C] of 0.5, added
    slice      Slice rows [0, B) of axis 0 (ends = the traced batch)
    gather     Gather rows [0 .. B-1] of axis 0 (indices enumerate the batch)
    positions  Range(0, S) as float, Reshape [1, S, 1], added
    mixrows    ReduceMean over the batch, Tile [B, 1, 1], subtracted (rows are not independent)
    padrow     Concat a ConstantOfShape [B, 1, C] row on axis 1, Slice back to S
    head       (last only) Reshape [B, S*C] -> MatMul W[S*C, 3] -> [B, 3]  (S stays fixed)

Drawn apart (their own random stream, so the templates above stay as they were for every seed),
about one template in four also gets, at random places:

    rowgrid    GatherND of x[b, s] through the index grid [B, S, 2] (``x[arange(B)[:, None],
               arange(S)]``): at B = 1 the batch component is all 0, one row or every row
    rowcount   how many values of the whole batch are > 0, read only as the length of an
               Expand whose sum (times 0) is added: a reduction over the batch that mixes no row
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

__all__ = ["Template", "random_template", "BLOCKS", "ROW_BLOCKS"]

SEQ_BLOCKS = ["flat", "heads", "pairs", "expand", "zeros", "slice", "gather", "positions", "mixrows", "padrow"]
BLOCKS = SEQ_BLOCKS + ["head"]


@dataclass
class Template:
    seed: int
    blocks: list[str]
    spellings: list[int]
    channels: int
    seq: int
    seq_dynamic: bool
    weights: dict[str, np.ndarray]

    @property
    def axes(self) -> str:
        return "x:0=batch, x:1=seq" if self.seq_dynamic else "x:0=batch"

    def sizes(self, traced_batch: int) -> list[tuple[int, int]]:
        """(B, S) to compare at: the traced size and others."""
        s = self.seq
        out = [(traced_batch, s)] + [(b, s) for b in (1, 2, 3, 5) if b != traced_batch]
        if self.seq_dynamic:
            out += [(3, s + 2), (traced_batch, s - 1)]
        return out

    def build(self, batch: int, seq: int) -> onnx.ModelProto:
        w = _Writer(batch, seq, self.channels)
        for block, spelling in zip(self.blocks, self.spellings, strict=True):
            WRITERS[block](w, spelling, self.weights)
        graph = helper.make_graph(
            w.nodes, f"template_{self.seed}",
            [helper.make_tensor_value_info("x", TP.FLOAT, [batch, seq, self.channels])],
            [helper.make_tensor_value_info(w.cur, TP.FLOAT, None)], w.inits,
        )  # fmt: skip
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
        return onnx.shape_inference.infer_shapes(model)

    def feeds(self, batch: int, seq: int, salt: int = 0) -> dict[str, np.ndarray]:
        g = np.random.default_rng(self.seed * 31 + batch * 7 + seq + salt)
        return {"x": g.standard_normal((batch, seq, self.channels)).astype(np.float32)}


class _Writer:
    def __init__(self, batch: int, seq: int, channels: int) -> None:
        self.B, self.S, self.C = batch, seq, channels
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.cur = "x"
        self.n = 0

    def name(self, stem: str) -> str:
        self.n += 1
        return f"{stem}_{self.n}"

    def const(self, value: np.ndarray, stem: str = "c") -> str:
        name = self.name(stem)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def ints(self, values: list[int]) -> str:
        return self.const(np.array(values, dtype=np.int64), "shape")

    def op(self, op: str, inputs: list[str], **attrs) -> str:
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=self.name(f"n_{op}"), **attrs))
        return out

    def step(self, op: str, inputs: list[str], **attrs) -> None:
        self.cur = self.op(op, inputs, **attrs)


def _flat(w: _Writer, k: int, _: dict) -> None:
    first = [[w.B * w.S, w.C], [-1, w.C]][k % 2]
    back = [[w.B, w.S, w.C], [w.B, -1, w.C], [-1, w.S, w.C]][k % 3]
    w.step("Reshape", [w.cur, w.ints(first)])
    w.step("Relu", [w.cur])
    w.step("Reshape", [w.cur, w.ints(back)])


def _heads(w: _Writer, k: int, _: dict) -> None:
    w.step("Reshape", [w.cur, w.ints([w.B, w.S, 2, w.C // 2])])
    w.step("Transpose", [w.cur], perm=[0, 2, 1, 3])
    w.step("Transpose", [w.cur], perm=[0, 2, 1, 3])
    w.step("Reshape", [w.cur, w.ints([w.B, w.S, w.C] if k % 2 else [w.B, w.S, -1])])


def _pairs(w: _Writer, k: int, _: dict) -> None:
    w.step("Reshape", [w.cur, w.ints([w.B, w.S * w.C // 2, 2])])
    w.step("Softmax", [w.cur], axis=-1)
    w.step("Reshape", [w.cur, w.ints([w.B, w.S, w.C])])


def _expand(w: _Writer, k: int, weights: dict) -> None:
    bias = w.const(weights["bias"], "bias")
    wide = w.op("Expand", [bias, w.ints([w.B, w.S, w.C])])
    w.step("Add", [w.cur, wide])


def _zeros(w: _Writer, k: int, _: dict) -> None:
    value = numpy_helper.from_array(np.array([0.5], dtype=np.float32))
    half = w.op("ConstantOfShape", [w.ints([w.B, w.S, w.C])], value=value)
    w.step("Add", [w.cur, half])


def _slice(w: _Writer, k: int, _: dict) -> None:
    w.step("Slice", [w.cur, w.ints([0]), w.ints([w.B]), w.ints([0])])


def _gather(w: _Writer, k: int, _: dict) -> None:
    w.step("Gather", [w.cur, w.ints(list(range(w.B)))], axis=0)


def _positions(w: _Writer, k: int, _: dict) -> None:
    r = w.op("Range", [w.const(np.array(0, np.int64)), w.const(np.array(w.S, np.int64)), w.const(np.array(1, np.int64))])
    f = w.op("Cast", [r], to=TP.FLOAT)
    p = w.op("Reshape", [f, w.ints([1, w.S, 1])])
    w.step("Add", [w.cur, p])


def _mixrows(w: _Writer, k: int, _: dict) -> None:
    mean = w.op("ReduceMean", [w.cur], axes=[0], keepdims=1)
    tiled = w.op("Tile", [mean, w.ints([w.B, 1, 1])])
    w.step("Sub", [w.cur, tiled])


def _padrow(w: _Writer, k: int, _: dict) -> None:
    value = numpy_helper.from_array(np.array([1.0], dtype=np.float32))
    row = w.op("ConstantOfShape", [w.ints([w.B, 1, w.C])], value=value)
    both = w.op("Concat", [w.cur, row], axis=1)
    w.step("Slice", [both, w.ints([0]), w.ints([w.S]), w.ints([1])])


def _rowgrid(w: _Writer, k: int, _: dict) -> None:
    grid = np.stack(np.meshgrid(np.arange(w.B), np.arange(w.S), indexing="ij"), axis=-1)
    w.step("GatherND", [w.cur, w.const(grid.astype(np.int64), "grid")])


def _rowcount(w: _Writer, k: int, _: dict) -> None:
    zero = w.const(np.array(0.0, dtype=np.float32), "zero")
    positive = w.op("Cast", [w.op("Greater", [w.cur, zero])], to=TP.INT64)
    count = w.op("ReduceSum", [w.op("Reshape", [positive, w.ints([-1])])], keepdims=1)
    ones = w.op("Expand", [w.const(np.array(1.0, dtype=np.float32), "one"), count])
    nothing = w.op("Mul", [w.op("ReduceSum", [ones], keepdims=0), zero])
    w.step("Add", [w.cur, nothing])


def _head(w: _Writer, k: int, weights: dict) -> None:
    w.step("Reshape", [w.cur, w.ints([w.B, w.S * w.C] if k % 2 else [w.B, -1])])
    w.step("MatMul", [w.cur, w.const(weights["head"], "w")])


WRITERS: dict[str, Callable[[_Writer, int, dict], None]] = {
    "flat": _flat, "heads": _heads, "pairs": _pairs, "expand": _expand, "zeros": _zeros,
    "slice": _slice, "gather": _gather, "positions": _positions, "mixrows": _mixrows,
    "padrow": _padrow, "head": _head, "rowgrid": _rowgrid, "rowcount": _rowcount,
}  # fmt: skip
ROW_BLOCKS = ["rowgrid", "rowcount"]


def random_template(seed: int) -> Template:
    """One template: 1-4 blocks, a channel count (2 as often as the traced batch), a sequence."""
    rng = random.Random(seed)
    channels = rng.choice([2, 2, 4, 3, 6])
    seq = rng.choice([3, 4, 5])
    seq_dynamic = rng.random() < 0.3
    pool = [b for b in SEQ_BLOCKS if channels % 2 == 0 or b not in ("heads", "pairs")]
    blocks = [rng.choice(pool) for _ in range(rng.randint(1, 4))]
    if not seq_dynamic and rng.random() < 0.35:
        blocks.append("head")
    g = np.random.default_rng(seed)
    weights = {
        "bias": g.standard_normal((1, 1, channels)).astype(np.float32),
        "head": g.standard_normal((seq * channels, 3)).astype(np.float32),
    }
    spellings = [rng.randrange(6) for _ in blocks]
    rows = random.Random(f"rows{seed}")  # apart: the draws above stay as they were
    if rows.random() < 0.25:
        body = len(blocks) - (blocks[-1:] == ["head"])
        for block in ROW_BLOCKS:
            at = rows.randint(0, body)
            blocks.insert(at, block)
            spellings.insert(at, 0)
            body += 1
    return Template(seed, blocks, spellings, channels, seq, seq_dynamic, weights)
