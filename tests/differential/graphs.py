"""Random valid ONNX graphs: a broad op mix at opsets 11-21, several dtypes, unusual outputs.

``random_model(seed)`` builds one model and the feeds it runs on, the same for the same seed.
The builder tracks every tensor's static shape and dtype itself, so each op is given inputs it
accepts; whether ONNX Runtime really runs the model is the campaign's filter (oracle.py).

What the graphs hold, each now and then: elementwise, comparison and logical ops, Where, Cast,
MatMul/Gemm/Einsum, Reshape/Flatten/Squeeze/Unsqueeze/Transpose, Concat/Split/Slice/Gather,
reductions (axes as attribute or input by opset), Softmax, TopK, ArgMax, CumSum, Pad, Clip,
Range, Shape -> ConstantOfShape, Expand/Tile, Constant nodes, If/Loop/Scan whose bodies read
outer-scope values, calls of a model-local function, IR 3 models listing their initializers as
inputs, symbolic input dims, outputs that are a graph input or an initializer, and stale
``value_info`` (wrong dims, or a name nothing produces).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

__all__ = ["Generated", "random_model", "OPSETS"]

OPSETS = list(range(11, 22))
FLOATS = (TP.FLOAT, TP.DOUBLE)
INTS = (TP.INT64, TP.INT32)
INPUT_TYPES = [TP.FLOAT] * 4 + [TP.DOUBLE, TP.INT64, TP.INT64, TP.INT32, TP.BOOL, TP.FLOAT16]
LOCAL_DOMAIN = "local.fuzz"


@dataclass
class Tensor:
    name: str
    dtype: int
    shape: tuple[int, ...]


@dataclass
class Generated:
    """A generated model, the feeds it runs on, and the seed that makes it again."""

    seed: int
    model: onnx.ModelProto
    feeds: dict[str, np.ndarray]
    features: set[str] = field(default_factory=set)


def _np(dtype: int) -> np.dtype:
    return np.dtype(helper.tensor_dtype_to_np_dtype(dtype))


class Builder:
    """One graph under construction: nodes, initializers, inputs, and the tensors to pick from."""

    def __init__(self, rng: random.Random, opset: int, prefix: str = "") -> None:
        self.rng = rng
        self.opset = opset
        self.prefix = prefix
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.pool: list[Tensor] = []
        self.count = 0
        self.features: set[str] = set()
        self.functions: dict[str, onnx.FunctionProto] = {}
        self.input_names: set[str] = set()

    def fresh(self, stem: str) -> str:
        self.count += 1
        return f"{self.prefix}{stem}_{self.count}"

    def const(self, value: np.ndarray, stem: str = "c", pool: bool = False) -> Tensor:
        t = Tensor(self.fresh(stem), helper.np_dtype_to_tensor_dtype(value.dtype), tuple(value.shape))
        self.inits.append(numpy_helper.from_array(value, t.name))
        if pool:
            self.pool.append(t)
        return t

    def ints(self, values: list[int]) -> str:
        return self.const(np.array(values, dtype=np.int64), "i").name

    def node(self, op: str, inputs: list[str], outs: list[tuple[int, tuple[int, ...]]], **attrs) -> list[Tensor]:
        made = [Tensor(self.fresh(op.lower()), dt, tuple(sh)) for dt, sh in outs]
        domain = attrs.pop("domain", "")
        self.nodes.append(
            helper.make_node(op, inputs, [t.name for t in made], name=self.fresh(f"n_{op}"), domain=domain, **attrs)
        )
        self.pool.extend(made)
        return made

    def pick(self, want: Callable[[Tensor], bool] = lambda t: True) -> Tensor | None:
        choices = [t for t in self.pool if want(t)]
        if not choices:
            return None
        # favour recent tensors: graphs get deep, not only wide
        weights = [1 + i for i in range(len(choices))]
        return self.rng.choices(choices, weights)[0]


# -- op makers: each adds one op (or a few) when the pool has what it needs, else returns False ---


def _unary(b: Builder) -> bool:
    x = b.pick(lambda t: t.dtype in FLOATS)
    if x is None:
        return False
    op = b.rng.choice(["Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Floor", "Ceil", "Sign", "Exp", "Round", "Erf"])
    if op == "Exp":
        (x,) = b.node("Tanh", [x.name], [(x.dtype, x.shape)])
    b.node(op, [x.name], [(x.dtype, x.shape)])
    return True


def _broadcast_partner(b: Builder, x: Tensor) -> Tensor:
    """Another tensor of x's dtype that broadcasts with it: a pool tensor of the same shape, or a
    constant of x's shape with some axes (or leading ones) dropped to 1."""
    same = [t for t in b.pool if t.dtype == x.dtype and t.shape == x.shape and t is not x]
    if same and b.rng.random() < 0.5:
        return b.rng.choice(same)
    shape = [d if b.rng.random() < 0.6 else 1 for d in x.shape]
    shape = shape[b.rng.randint(0, len(shape)) :] if shape and b.rng.random() < 0.3 else shape
    return b.const(_values(b.rng, x.dtype, tuple(shape), nonzero=True), "k")


def _values(rng: random.Random, dtype: int, shape: tuple[int, ...], nonzero: bool = False) -> np.ndarray:
    g = np.random.default_rng(rng.randrange(2**32))
    dt = _np(dtype)
    if dt.kind == "b":
        return np.asarray(g.random(shape) < 0.5)
    if dt.kind in "iu":
        v = g.integers(1 if nonzero else -4, 5, size=shape)
        return v.astype(dt)
    v = g.uniform(-2, 2, size=shape)
    if nonzero:
        v = np.where(np.abs(v) < 0.25, 0.5, v)
    return v.astype(dt)


def _binary(b: Builder) -> bool:
    x = b.pick(lambda t: t.dtype in FLOATS + INTS)
    if x is None:
        return False
    ops = ["Add", "Sub", "Mul"]
    if x.dtype in FLOATS:
        ops += ["Div", "Pow", "Max", "Min"]
    elif b.opset >= 12:
        ops += ["Max", "Min"]
    op = b.rng.choice(ops)
    y = _broadcast_partner(b, x)
    if op == "Pow":
        (x,) = b.node("Abs", [x.name], [(x.dtype, x.shape)])
    if op == "Div" and y.name not in {i.name for i in b.inits}:
        (y,) = b.node("Abs", [y.name], [(y.dtype, y.shape)])
        one = b.const(np.array(0.5, dtype=_np(y.dtype)))
        (y,) = b.node("Add", [y.name, one.name], [(y.dtype, y.shape)])
    shape = np.broadcast_shapes(x.shape, y.shape)
    b.node(op, [x.name, y.name], [(x.dtype, tuple(shape))])
    return True


def _compare(b: Builder) -> bool:
    x = b.pick(lambda t: t.dtype in FLOATS + INTS)
    if x is None:
        return False
    y = _broadcast_partner(b, x)
    op = b.rng.choice(["Greater", "Less", "Equal"] + (["GreaterOrEqual", "LessOrEqual"] if b.opset >= 12 else []))
    b.node(op, [x.name, y.name], [(TP.BOOL, tuple(np.broadcast_shapes(x.shape, y.shape)))])
    return True


def _logical(b: Builder) -> bool:
    x = b.pick(lambda t: t.dtype == TP.BOOL)
    if x is None:
        return False
    if b.rng.random() < 0.3:
        b.node("Not", [x.name], [(TP.BOOL, x.shape)])
        return True
    y = _broadcast_partner(b, x)
    b.node(b.rng.choice(["And", "Or", "Xor"]), [x.name, y.name], [(TP.BOOL, tuple(np.broadcast_shapes(x.shape, y.shape)))])
    return True


def _where(b: Builder) -> bool:
    c = b.pick(lambda t: t.dtype == TP.BOOL)
    if c is None:
        return False
    x = b.pick(lambda t: t.dtype not in (TP.BOOL, TP.FLOAT16) and _broadcasts(t.shape, c.shape))
    if x is None:
        return False
    y = _broadcast_partner(b, x)
    shape = tuple(np.broadcast_shapes(c.shape, x.shape, y.shape))
    b.node("Where", [c.name, x.name, y.name], [(x.dtype, shape)])
    return True


def _broadcasts(*shapes: tuple[int, ...]) -> bool:
    try:
        np.broadcast_shapes(*shapes)
    except ValueError:
        return False
    return True


def _cast(b: Builder) -> bool:
    x = b.pick()
    if x is None:
        return False
    to = b.rng.choice([TP.FLOAT, TP.DOUBLE, TP.INT64, TP.INT32, TP.BOOL, TP.FLOAT, TP.INT8, TP.UINT8])
    if x.dtype in FLOATS + (TP.FLOAT16,) and to in (TP.INT8, TP.UINT8, TP.INT32, TP.INT64):
        (x,) = b.node("Floor", [x.name] if x.dtype != TP.FLOAT16 else [x.name], [(x.dtype, x.shape)])
        if to == TP.UINT8:  # out-of-range float -> uint8 is undefined: keep it in range
            (x,) = b.node("Abs", [x.name], [(x.dtype, x.shape)])
    b.node("Cast", [x.name], [(to, x.shape)], to=to)
    return True


def _matmul(b: Builder) -> bool:
    x = b.pick(lambda t: t.dtype in FLOATS and 1 <= len(t.shape) <= 3)
    if x is None:
        return False
    k = x.shape[-1]
    n = b.rng.randint(1, 4)
    if len(x.shape) == 2 and b.rng.random() < 0.4:
        w = b.const(_values(b.rng, x.dtype, (n, k)), "w")
        bias = b.const(_values(b.rng, x.dtype, (n,)), "bias")
        b.node("Gemm", [x.name, w.name, bias.name], [(x.dtype, (x.shape[0], n))], transB=1, alpha=0.5)
        return True
    if b.opset >= 12 and len(x.shape) == 2 and b.rng.random() < 0.3:
        w = b.const(_values(b.rng, x.dtype, (k, n)), "w")
        b.node("Einsum", [x.name, w.name], [(x.dtype, (x.shape[0], n))], equation="ij,jk->ik")
        return True
    w = b.const(_values(b.rng, x.dtype, (k, n)), "w")
    b.node("MatMul", [x.name, w.name], [(x.dtype, x.shape[:-1] + (n,))])
    return True


def _transpose(b: Builder) -> bool:
    x = b.pick(lambda t: len(t.shape) >= 2)
    if x is None:
        return False
    perm = list(range(len(x.shape)))
    b.rng.shuffle(perm)
    b.node("Transpose", [x.name], [(x.dtype, tuple(x.shape[p] for p in perm))], perm=perm)
    return True


def _reshape(b: Builder) -> bool:
    x = b.pick(lambda t: len(t.shape) >= 1)
    if x is None:
        return False
    size = int(np.prod(x.shape))
    roll = b.rng.random()
    if roll < 0.25 and len(x.shape) >= 2:
        axis = b.rng.randint(1, len(x.shape) - 1) if len(x.shape) > 2 else 1
        out = (int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:])))
        b.node("Flatten", [x.name], [(x.dtype, out)], axis=axis)
        return True
    divisors = [d for d in range(1, size + 1) if size % d == 0]
    first = b.rng.choice(divisors)
    target = [first, size // first]
    spelled = list(target)
    if b.rng.random() < 0.4:
        spelled[b.rng.randrange(2)] = -1
    elif b.rng.random() < 0.3 and x.shape and x.shape[0] == target[0]:
        spelled[0] = 0
    b.node("Reshape", [x.name, b.ints(spelled)], [(x.dtype, tuple(target))])
    return True


def _unsqueeze_squeeze(b: Builder) -> bool:
    x = b.pick(lambda t: len(t.shape) <= 3)
    if x is None:
        return False
    ones = [i for i, d in enumerate(x.shape) if d == 1]
    if ones and b.rng.random() < 0.5:
        axis = b.rng.choice(ones)
        out = x.shape[:axis] + x.shape[axis + 1 :]
        op, axes = "Squeeze", [axis]
    else:
        axis = b.rng.randint(0, len(x.shape))
        out = x.shape[:axis] + (1,) + x.shape[axis:]
        op, axes = "Unsqueeze", [axis]
    if b.opset >= 13:
        b.node(op, [x.name, b.ints(axes)], [(x.dtype, out)])
    else:
        b.node(op, [x.name], [(x.dtype, out)], axes=axes)
    return True


def _concat(b: Builder) -> bool:
    x = b.pick(lambda t: len(t.shape) >= 1)
    if x is None:
        return False
    axis = b.rng.randrange(len(x.shape))
    partners = [
        t for t in b.pool
        if t.dtype == x.dtype and len(t.shape) == len(x.shape)
        and all(a == c for i, (a, c) in enumerate(zip(t.shape, x.shape, strict=True)) if i != axis)
    ]  # fmt: skip
    y = b.rng.choice(partners)
    out = list(x.shape)
    out[axis] += y.shape[axis]
    b.node("Concat", [x.name, y.name], [(x.dtype, tuple(out))], axis=axis - len(out) if b.rng.random() < 0.3 else axis)
    return True


def _split(b: Builder) -> bool:
    x = b.pick(lambda t: any(d >= 2 for d in t.shape))
    if x is None:
        return False
    axis = b.rng.choice([i for i, d in enumerate(x.shape) if d >= 2])
    first = b.rng.randint(1, x.shape[axis] - 1)
    sizes = [first, x.shape[axis] - first]
    outs = [(x.dtype, x.shape[:axis] + (s,) + x.shape[axis + 1 :]) for s in sizes]
    if b.opset >= 18 and sizes[0] == sizes[1] and b.rng.random() < 0.5:
        b.node("Split", [x.name], outs, axis=axis, num_outputs=2)
    elif b.opset >= 13:
        b.node("Split", [x.name, b.ints(sizes)], outs, axis=axis)
    else:
        b.node("Split", [x.name], outs, axis=axis, split=sizes)
    return True


def _slice(b: Builder) -> bool:
    x = b.pick(lambda t: any(d >= 2 for d in t.shape))
    if x is None:
        return False
    axis = b.rng.choice([i for i, d in enumerate(x.shape) if d >= 2])
    n = x.shape[axis]
    start = b.rng.randint(0, n - 1)
    end = b.rng.choice([n, n + 5, 2**62, b.rng.randint(start + 1, n)])
    step = b.rng.choice([1, 1, 2])
    count = len(range(start, min(end, n), step))
    inputs = [x.name, b.ints([start]), b.ints([end]), b.ints([axis - len(x.shape) if b.rng.random() < 0.3 else axis])]
    if step != 1 or b.rng.random() < 0.3:
        inputs.append(b.ints([step]))
    b.node("Slice", inputs, [(x.dtype, x.shape[:axis] + (count,) + x.shape[axis + 1 :])])
    return True


def _gather(b: Builder) -> bool:
    x = b.pick(lambda t: len(t.shape) >= 1)
    if x is None:
        return False
    axis = b.rng.randrange(len(x.shape))
    n = x.shape[axis]
    idx_shape = b.rng.choice([(), (2,), (1, 2)])
    g = np.random.default_rng(b.rng.randrange(2**32))
    idx = g.integers(-n, n, size=idx_shape).astype(b.rng.choice([np.int64, np.int32]))
    i = b.const(idx, "idx")
    b.node("Gather", [x.name, i.name], [(x.dtype, x.shape[:axis] + idx_shape + x.shape[axis + 1 :])], axis=axis)
    return True


def _reduce(b: Builder) -> bool:
    x = b.pick(lambda t: t.dtype in FLOATS + INTS and len(t.shape) >= 1)
    if x is None:
        return False
    op = b.rng.choice(["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"])
    if op == "ReduceMean" and x.dtype not in FLOATS:
        op = "ReduceSum"
    axis = b.rng.randrange(len(x.shape))
    keep = b.rng.choice([0, 1])
    out = x.shape[:axis] + ((1,) if keep else ()) + x.shape[axis + 1 :]
    axes_input = (op == "ReduceSum" and b.opset >= 13) or b.opset >= 18
    if axes_input:
        b.node(op, [x.name, b.ints([axis])], [(x.dtype, out)], keepdims=keep)
    else:
        b.node(op, [x.name], [(x.dtype, out)], axes=[axis], keepdims=keep)
    return True


def _softmax_topk_argmax(b: Builder) -> bool:
    x = b.pick(lambda t: t.dtype in FLOATS and len(t.shape) >= 1)
    if x is None:
        return False
    axis = b.rng.randrange(len(x.shape))
    roll = b.rng.random()
    if roll < 0.4:
        # before opset 13 softmax flattens from axis: the last axis reads the same either way
        b.node(b.rng.choice(["Softmax", "LogSoftmax"]), [x.name], [(x.dtype, x.shape)], axis=-1)
    elif roll < 0.7:
        keep = b.rng.choice([0, 1])
        out = x.shape[:axis] + ((1,) if keep else ()) + x.shape[axis + 1 :]
        b.node(b.rng.choice(["ArgMax", "ArgMin"]), [x.name], [(TP.INT64, out)], axis=axis, keepdims=keep)
    else:
        k = b.rng.randint(1, x.shape[axis])
        out = x.shape[:axis] + (k,) + x.shape[axis + 1 :]
        b.node("TopK", [x.name, b.ints([k])], [(x.dtype, out), (TP.INT64, out)], axis=axis)
    return True


def _cumsum_pad_clip(b: Builder) -> bool:
    x = b.pick(lambda t: t.dtype in (TP.FLOAT, TP.DOUBLE, TP.INT64, TP.INT32) and len(t.shape) >= 1)
    if x is None:
        return False
    roll = b.rng.random()
    if roll < 0.33:
        axis = b.const(np.array(b.rng.randrange(len(x.shape)), dtype=np.int64))
        b.node("CumSum", [x.name, axis.name], [(x.dtype, x.shape)], reverse=b.rng.choice([0, 1]))
    elif roll < 0.66:
        pads = [b.rng.randint(0, 2) for _ in range(2 * len(x.shape))]
        out = tuple(d + pads[i] + pads[i + len(x.shape)] for i, d in enumerate(x.shape))
        value = b.const(np.array(1, dtype=_np(x.dtype)))
        b.node("Pad", [x.name, b.ints(pads), value.name], [(x.dtype, out)], mode="constant")
    else:
        if x.dtype not in FLOATS and b.opset < 12:
            return False
        lo = b.const(np.array(-1, dtype=_np(x.dtype)))
        hi = b.const(np.array(1, dtype=_np(x.dtype)))
        b.node("Clip", [x.name, lo.name, hi.name], [(x.dtype, x.shape)])
    return True


def _shapes(b: Builder) -> bool:
    """Shape -> ConstantOfShape, Expand, Tile, Range, Size: sizes as data."""
    x = b.pick(lambda t: 1 <= len(t.shape) <= 3)
    if x is None:
        return False
    roll = b.rng.random()
    if roll < 0.3:
        kwargs = {}
        shape = x.shape
        if b.opset >= 15 and b.rng.random() < 0.5:
            kwargs = {"start": 0, "end": len(x.shape) - 1 if len(x.shape) > 1 else 1}
            shape = x.shape[: kwargs["end"]]
        (s,) = b.node("Shape", [x.name], [(TP.INT64, (len(shape),))], **kwargs)
        value = numpy_helper.from_array(np.array([b.rng.choice([0.0, 1.5])], dtype=np.float32))
        b.node("ConstantOfShape", [s.name], [(TP.FLOAT, shape)], value=value)
    elif roll < 0.5:
        target = (2,) + x.shape if b.rng.random() < 0.5 else x.shape
        b.node("Expand", [x.name, b.ints(list(target))], [(x.dtype, target)])
    elif roll < 0.7:
        reps = [b.rng.randint(1, 2) for _ in x.shape]
        b.node("Tile", [x.name, b.ints(reps)], [(x.dtype, tuple(d * r for d, r in zip(x.shape, reps, strict=True)))])
    elif roll < 0.85:
        (n,) = b.node("Size", [x.name], [(TP.INT64, ())])
        start = b.const(np.array(0, dtype=np.int64))
        step = b.const(np.array(1, dtype=np.int64))
        b.node("Range", [start.name, n.name, step.name], [(TP.INT64, (int(np.prod(x.shape)),))])
    else:
        b.node("Identity", [x.name], [(x.dtype, x.shape)])
    return True


def _constant_node(b: Builder) -> bool:
    x = b.pick(lambda t: t.dtype in FLOATS + INTS)
    if x is None:
        return False
    value = numpy_helper.from_array(_values(b.rng, x.dtype, x.shape[-1:]))
    (c,) = b.node("Constant", [], [(x.dtype, x.shape[-1:])], value=value)
    b.node("Add", [x.name, c.name], [(x.dtype, x.shape)])
    return True


def _int_ops(b: Builder) -> bool:
    x = b.pick(lambda t: t.dtype in INTS)
    if x is None:
        return False
    d = b.const(np.array(b.rng.choice([2, 3, -3]), dtype=_np(x.dtype)))
    b.node(b.rng.choice(["Mod", "Div"]), [x.name, d.name], [(x.dtype, x.shape)])
    return True


def _branch(b: Builder, name: str, x: Tensor, op: str, other: Tensor) -> onnx.GraphProto:
    """A subgraph of no inputs computing op(x, other), both read from the outer scope."""
    out = f"{name}_out"
    node = helper.make_node(op, [x.name, other.name], [out], name=f"{name}_node")
    y = helper.make_tensor_value_info(out, x.dtype, list(x.shape))
    return helper.make_graph([node], name, [], [y])


def _if(b: Builder) -> bool:
    x = b.pick(lambda t: t.dtype in FLOATS + INTS)
    c = b.pick(lambda t: t.dtype == TP.BOOL)
    if x is None:
        return False
    if c is None or b.rng.random() < 0.3:
        cond = b.const(np.array(b.rng.random() < 0.5), "cond").name  # a constant condition folds
    else:
        (f,) = b.node("Cast", [c.name], [(TP.FLOAT, c.shape)], to=TP.FLOAT)
        (s,) = b.node("ReduceMax", [f.name], [(TP.FLOAT, ())], keepdims=0)
        zero = b.const(np.array(0.5, dtype=np.float32))
        (cb,) = b.node("Greater", [s.name, zero.name], [(TP.BOOL, ())])
        cond = cb.name
    other = _broadcast_same(b, x)
    then_g = _branch(b, b.fresh("then"), x, "Add", other)
    else_g = _branch(b, b.fresh("else"), x, "Mul", other)
    b.node("If", [cond], [(x.dtype, x.shape)], then_branch=then_g, else_branch=else_g)
    b.features.add("if")
    return True


def _broadcast_same(b: Builder, x: Tensor) -> Tensor:
    """A tensor of x's dtype and exact shape (a constant when the pool has none)."""
    same = [t for t in b.pool if t.dtype == x.dtype and t.shape == x.shape]
    if same and b.rng.random() < 0.6:
        return b.rng.choice(same)
    return b.const(_values(b.rng, x.dtype, x.shape), "k")


def _loop(b: Builder) -> bool:
    x = b.pick(lambda t: t.dtype in FLOATS + INTS and len(t.shape) <= 2)
    if x is None:
        return False
    outer = _broadcast_same(b, x)
    trips = b.rng.randint(1, 3)
    p = b.fresh("body")
    body = helper.make_graph(
        [
            helper.make_node("Identity", [f"{p}_cond"], [f"{p}_cond_out"]),
            helper.make_node("Add", [f"{p}_s", outer.name], [f"{p}_s_out"]),
            helper.make_node("Identity", [f"{p}_s"], [f"{p}_scan"]),
        ],
        p,
        [
            helper.make_tensor_value_info(f"{p}_i", TP.INT64, []),
            helper.make_tensor_value_info(f"{p}_cond", TP.BOOL, []),
            helper.make_tensor_value_info(f"{p}_s", x.dtype, list(x.shape)),
        ],
        [
            helper.make_tensor_value_info(f"{p}_cond_out", TP.BOOL, []),
            helper.make_tensor_value_info(f"{p}_s_out", x.dtype, list(x.shape)),
            helper.make_tensor_value_info(f"{p}_scan", x.dtype, list(x.shape)),
        ],
    )
    m = b.const(np.array(trips, dtype=np.int64), "trips")
    cond = b.const(np.array(True), "keep_going")
    b.node("Loop", [m.name, cond.name, x.name], [(x.dtype, x.shape), (x.dtype, (trips,) + x.shape)], body=body)
    b.features.add("loop")
    return True


def _scan(b: Builder) -> bool:
    x = b.pick(lambda t: t.dtype in FLOATS and 2 <= len(t.shape) <= 3)
    if x is None:
        return False
    row = x.shape[1:]
    state = b.const(_values(b.rng, x.dtype, row), "s0")
    outer = b.const(_values(b.rng, x.dtype, row), "k")
    p = b.fresh("scan")
    body = helper.make_graph(
        [
            helper.make_node("Add", [f"{p}_s", f"{p}_x"], [f"{p}_sum"]),
            helper.make_node("Mul", [f"{p}_sum", outer.name], [f"{p}_s_out"]),
            helper.make_node("Sub", [f"{p}_x", outer.name], [f"{p}_y"]),
        ],
        p,
        [helper.make_tensor_value_info(f"{p}_s", x.dtype, list(row)), helper.make_tensor_value_info(f"{p}_x", x.dtype, list(row))],
        [helper.make_tensor_value_info(f"{p}_s_out", x.dtype, list(row)), helper.make_tensor_value_info(f"{p}_y", x.dtype, list(row))],
    )
    b.node("Scan", [state.name, x.name], [(x.dtype, row), (x.dtype, x.shape)], body=body, num_scan_inputs=1)
    b.features.add("scan")
    return True


def _function_call(b: Builder) -> bool:
    x = b.pick(lambda t: t.dtype in FLOATS)
    if x is None:
        return False
    y = _broadcast_same(b, x)
    if "AddMul" not in b.functions:
        b.functions["AddMul"] = helper.make_function(
            LOCAL_DOMAIN, "AddMul", ["a", "b"], ["y"],
            [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Mul", ["s", "a"], ["y"])],
            [helper.make_opsetid("", b.opset)],
        )  # fmt: skip
    b.node("AddMul", [x.name, y.name], [(x.dtype, x.shape)], domain=LOCAL_DOMAIN)
    b.features.add("function")
    return True


OPS: list[tuple[Callable[[Builder], bool], float]] = [
    (_unary, 3), (_binary, 4), (_compare, 1.5), (_logical, 1), (_where, 1), (_cast, 1.5),
    (_matmul, 2), (_transpose, 1), (_reshape, 2), (_unsqueeze_squeeze, 1), (_concat, 1.5),
    (_split, 1), (_slice, 1.5), (_gather, 1), (_reduce, 1.5), (_softmax_topk_argmax, 1),
    (_cumsum_pad_clip, 1), (_shapes, 1.5), (_constant_node, 0.7), (_int_ops, 0.7),
    (_if, 0.7), (_loop, 0.6), (_scan, 0.5), (_function_call, 0.4),
]  # fmt: skip


def _ir_for(opset: int) -> int:
    return {11: 6, 12: 7, 13: 7, 14: 7, 15: 8, 16: 8, 17: 8, 18: 8, 19: 9, 20: 9}.get(opset, 10)


def _inputs(b: Builder, g: np.random.Generator) -> tuple[list[onnx.ValueInfoProto], dict[str, np.ndarray]]:
    infos, feeds = [], {}
    batch = b.rng.randint(1, 3)
    for k in range(b.rng.randint(1, 3)):
        dtype = b.rng.choice(INPUT_TYPES)
        shape = (batch,) + tuple(b.rng.randint(1, 4) for _ in range(b.rng.randint(0, 2)))
        if b.rng.random() < 0.15:
            shape = shape[1:]
        t = Tensor(f"in{k}", dtype, shape)
        dims: list[int | str] = list(shape)
        if dims and b.rng.random() < 0.2:
            dims[0] = "N"  # a symbolic dim; the graph's constants are for the size fed here
        infos.append(helper.make_tensor_value_info(t.name, dtype, dims))
        b.pool.append(t)
        b.input_names.add(t.name)
        feeds[t.name] = _values(random.Random(int(g.integers(2**32))), dtype, shape)
    return infos, feeds


def _outputs(b: Builder, graph_inputs: list[onnx.ValueInfoProto]) -> list[Tensor]:
    """The last few tensors made, sometimes with an input or an initializer as an output too."""
    made = [t for t in b.pool if t.name not in b.input_names]
    outs = made[-b.rng.randint(1, 3) :]
    extra = b.rng.random()
    if extra < 0.12:
        outs.append(b.rng.choice([t for t in b.pool if t.name in b.input_names]))
    elif extra < 0.24 and b.inits:
        init = b.rng.choice(b.inits)
        outs.append(Tensor(init.name, init.data_type, tuple(init.dims)))
    seen: dict[str, Tensor] = {}
    for t in outs:
        seen.setdefault(t.name, t)
    return list(seen.values())


def _stale_value_info(b: Builder, graph: onnx.GraphProto, outputs: set[str]) -> None:
    inner = [t for t in b.pool if t.name not in outputs and t.name not in b.input_names]
    inner = [t for t in inner if t.name not in {i.name for i in b.inits}]
    for t in b.rng.sample(inner, min(len(inner), b.rng.randint(1, 3))):
        wrong = [d + b.rng.choice([1, 2]) for d in t.shape] or [3]
        dims: list[int | str] = list(wrong) if b.rng.random() < 0.6 else [f"stale_{i}" for i in range(len(t.shape))]
        graph.value_info.append(helper.make_tensor_value_info(t.name, t.dtype, dims))
    if b.rng.random() < 0.3:
        graph.value_info.append(helper.make_tensor_value_info("gone_tensor", TP.FLOAT, [7]))
    b.features.add("stale_value_info")


def random_model(seed: int) -> Generated:
    """One random model and its feeds: the same for the same seed."""
    rng = random.Random(seed)
    g = np.random.default_rng(seed)
    opset = rng.choice(OPSETS)
    b = Builder(rng, opset)
    inputs, feeds = _inputs(b, g)
    makers, weights = zip(*OPS, strict=True)
    for _ in range(rng.randint(2, 9)):
        for _attempt in range(4):
            if rng.choices(makers, weights)[0](b):
                break
    if len(b.pool) == len(inputs):
        _unary(b) or _cast(b)
    outs = _outputs(b, inputs)
    outputs = [helper.make_tensor_value_info(t.name, t.dtype, list(t.shape)) for t in outs]
    ir = _ir_for(opset)
    if not b.functions and rng.random() < 0.12:
        ir = 3  # initializers listed as graph inputs too
        b.features.add("ir3")
    graph_inputs = list(inputs)
    if ir < 4:
        graph_inputs += [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in b.inits]
    graph = helper.make_graph(b.nodes, f"fuzz_{seed}", graph_inputs, outputs, b.inits)
    if rng.random() < 0.35:
        _stale_value_info(b, graph, {t.name for t in outs})
    opsets = [helper.make_opsetid("", opset)]
    if b.functions:
        opsets.append(helper.make_opsetid(LOCAL_DOMAIN, 1))
    model = helper.make_model(graph, opset_imports=opsets, ir_version=ir, functions=list(b.functions.values()))
    features = set(b.features) | {f"opset{opset}"}
    if any(t.name in b.input_names for t in outs):
        features.add("input_as_output")
    if any(t.name in {i.name for i in b.inits} for t in outs):
        features.add("initializer_as_output")
    return Generated(seed, model, feeds, features)
