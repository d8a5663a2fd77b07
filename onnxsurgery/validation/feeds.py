"""Random inputs for a model: the one place feeds are made up when no stored case gives them.

Floats are standard normal, integers drawn from a small non-negative range (so embedding ids and
gather indices stay in range), bools fair coins. :func:`random_inputs` resolves each input's
dims from given shapes, the symbols they bind, and another model's declaration.

Where the graph is at hand, integers are shaped by it, never by input names
(:func:`graph_int_array`): an input that indexes a Gather covers the table's rows (token ids over
the vocabulary, token type ids over their table), any other is 0/1 with the first position 1 (a
valid attention mask, a valid index); :func:`shape_inputs` finds integer inputs read as sizes,
which no random value fits. Symbolize's check and ``reference record`` both draw from here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence, Set

import numpy as np
import onnx

from onnxsurgery.errors import UsageError
from onnxsurgery.limits import LimitExceeded
from onnxsurgery.limits import current as current_limits
from onnxsurgery.model.signature import InputSpec
from onnxsurgery.shapes.rules import op_traits

__all__ = [
    "RANDOM_INT_RANGE",
    "random_array",
    "random_inputs",
    "graph_int_array",
    "index_range",
    "shape_inputs",
    "parse_value_range",
    "ranged_array",
]

#: Range of random integer inputs for ``compare_models``: small and non-negative, so indices
#: (embedding ids, gather indices) stay in range for any table of at least 4 rows.
RANDOM_INT_RANGE = (0, 4)


def random_inputs(
    specs: Sequence[InputSpec],
    shapes: Mapping[str, Sequence[int]],
    rng: np.random.Generator,
    *,
    fallback_specs: Sequence[InputSpec] = (),
) -> dict[str, np.ndarray]:
    """Random feeds for every required input in ``specs``.

    An input's dims come from ``shapes`` (``{"x": [2, 3, 32, 32]}``); a symbolic dim not given
    there takes the size the given shapes bind its symbol to, else the fixed size the same input
    declares in ``fallback_specs`` (another model's signature), else it is a UsageError naming
    the input and axis.
    """
    others = {s.name: s for s in fallback_specs}
    symbols = _bound_symbols(specs, shapes)
    feeds: dict[str, np.ndarray] = {}
    for spec in specs:
        if spec.optional:
            continue
        if spec.dtype is None:
            raise UsageError(
                f"input {spec.name!r} is not a tensor of a known dtype; give --ref cases"
            )
        if spec.name in shapes:
            dims = [int(d) for d in shapes[spec.name]]
        elif spec.dims is None:
            raise UsageError(
                f"input {spec.name!r} declares no shape; give --shape {spec.name}:DIMS"
            )
        else:
            dims = _feed_dims(spec, symbols, others.get(spec.name))
        feeds[spec.name] = random_array(spec.dtype, dims, rng)
    return feeds


def _bound_symbols(specs: Sequence[InputSpec], shapes: Mapping[str, Sequence[int]]) -> dict[str, int]:
    """The sizes the given shapes bind symbols to, so one --shape fixes 'batch' for every input
    (the first input that binds a symbol wins)."""
    symbols: dict[str, int] = {}
    for spec in specs:
        if (
            spec.name in shapes
            and spec.dims is not None
            and len(spec.dims) == len(shapes[spec.name])
        ):
            for want, got in zip(spec.dims, shapes[spec.name], strict=True):
                if isinstance(want, str):
                    symbols.setdefault(want, int(got))
    return symbols


def _feed_dims(spec: InputSpec, symbols: Mapping[str, int], fallback: InputSpec | None) -> list[int]:
    """``spec``'s dims with each symbol sized: by ``symbols``, else by the fixed size ``fallback``
    (the same input of another model) declares; else a UsageError naming the input and axis."""
    assert spec.dims is not None
    dims: list[int] = []
    for axis, d in enumerate(spec.dims):
        if isinstance(d, int):
            dims.append(d)
            continue
        if isinstance(d, str) and d in symbols:
            dims.append(symbols[d])
            continue
        given = (
            fallback.dims[axis]
            if fallback is not None
            and fallback.dims is not None
            and len(fallback.dims) == len(spec.dims)
            else None
        )
        if isinstance(given, int):
            dims.append(given)
            continue
        label = f"symbolic ({d!r})" if d else "of unknown size"
        raise UsageError(
            f"input {spec.name!r} axis {axis} is {label}; give its size with "
            f"--shape {spec.name}:{'x'.join('N' if not isinstance(x, int) else str(x) for x in spec.dims)}"
        )
    return dims


def random_array(
    dtype: np.dtype,
    dims: Sequence[int],
    rng: np.random.Generator,
    *,
    int_range: tuple[int, int] = RANDOM_INT_RANGE,
    float_range: tuple[float, float] | None = None,
) -> np.ndarray:
    """Random values of ``dtype``: floats standard normal (uniform in ``float_range`` when
    given), integers in ``int_range`` (low inclusive, high exclusive), bools, strings (short
    words)."""
    dtype = np.dtype(dtype)
    count = math.prod(int(d) for d in dims)
    if count > current_limits().max_elements or any(int(d) < 0 for d in dims):
        raise LimitExceeded(
            f"a random input of dims {list(dims)} ({count} elements) is over "
            f"{current_limits().hint('max_elements')}"
        )
    if dtype.kind == "b":
        return rng.random(dims) < 0.5
    if dtype.kind in "iu":
        return rng.integers(*int_range, size=dims, dtype=dtype)
    if dtype.kind == "f" and float_range is not None:
        return rng.uniform(*float_range, size=dims).astype(dtype)
    if dtype.kind == "f":
        return rng.standard_normal(dims, dtype=np.float32).astype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(dims) + 1j * rng.standard_normal(dims)).astype(dtype)
    if dtype.kind in "OUS":  # strings: short lowercase words
        letters = rng.integers(ord("a"), ord("z") + 1, size=(*dims, 4))
        words: np.ndarray | list[str] = np.apply_along_axis(lambda c: "".join(map(chr, c)), -1, letters) if letters.size else []
        return np.asarray(words, dtype=object).reshape(dims)
    raise UsageError(f"cannot make random inputs of dtype {dtype}; give --ref cases")


#: Ops an integer input may pass through on its way to the gather it indexes.
_INDEX_PATH = {"Cast", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Identity", "Expand"}


def _uses(
    model: onnx.ModelProto, name: str, through: Set[str]
) -> list[tuple[onnx.NodeProto, int]]:
    """Every (node, input index) that reads ``name``, or what ops in ``through`` make of it
    (followed from their first input to their outputs)."""
    found: list[tuple[onnx.NodeProto, int]] = []
    stack, seen = [name], set()
    while stack:
        tensor = stack.pop()
        if tensor in seen:
            continue
        seen.add(tensor)
        for node in model.graph.node:
            for k, inp in enumerate(node.input):
                if inp != tensor:
                    continue
                found.append((node, k))
                if k == 0 and node.op_type in through:
                    stack.extend(node.output)
    return found


def index_range(model: onnx.ModelProto, name: str) -> int | None:
    """The size of the data axis that input ``name`` indexes (Gather/GatherElements indices,
    directly or through reshaping ops), from an initializer's or a declared static shape."""
    shapes: dict[str, list[int | None]] = {t.name: list(t.dims) for t in model.graph.initializer}
    for vi in list(model.graph.input) + list(model.graph.value_info):
        dims = [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]
        shapes.setdefault(vi.name, dims)
    sizes = []
    for node, k in _uses(model, name, _INDEX_PATH):
        if node.op_type in ("Gather", "GatherElements") and k == 1:
            data = shapes.get(node.input[0])
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
            size = data[axis] if data and -len(data) <= axis < len(data) else None
            if size:
                sizes.append(int(size))
    return min(sizes) if sizes else None


def shape_inputs(model: onnx.ModelProto) -> dict[str, list[tuple[str, str, int]]]:
    """Integer graph inputs read as sizes (an Expand target, a Reshape shape), directly or
    through Cast/Identity: input -> [(node, op, input index)]."""
    inits = {t.name for t in model.graph.initializer}
    out: dict[str, list[tuple[str, str, int]]] = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        for node, k in _uses(model, vi.name, {"Cast", "Identity"}):
            if k in op_traits(node.domain, node.op_type).size_inputs:
                out.setdefault(vi.name, []).append((node.name or node.output[0], node.op_type, k))
    return out


def graph_int_array(
    model: onnx.ModelProto, name: str, dtype: np.dtype, dims: Sequence[int], rng: np.random.Generator
) -> np.ndarray:
    """Random integers for input ``name`` as the graph uses them: indices of a Gather lie in
    [0, rows of its table) (token ids over the whole vocabulary); any other integer input is
    0/1 with the first position 1 (an attention mask that attends to at least one token per
    row, a valid index into anything)."""
    top = index_range(model, name)
    if top is not None:
        return random_array(dtype, dims, rng, int_range=(0, top))
    arr = random_array(dtype, dims, rng, int_range=(0, 2))
    if arr.ndim and arr.size:
        arr[..., 0] = 1
    return arr


def parse_value_range(text: str) -> tuple[str, tuple[float, float]]:
    """``"ids:0,30521"`` (or Polygraphy's ``"ids:[0,30521]"``) -> ``("ids", (0.0, 30521.0))``:
    the values ``--val-range`` gives one input's random values, both ends included."""
    name, sep, bounds = text.strip().rpartition(":")
    parts = bounds.strip().removeprefix("[").removesuffix("]").split(",")
    try:
        low, high = (float(p) for p in parts)
    except ValueError:
        low = high = math.nan
    if not sep or not name.strip() or not (math.isfinite(low) and math.isfinite(high) and low <= high):
        raise UsageError(
            f"--val-range {text!r} must read NAME:LOW,HIGH with LOW <= HIGH, like ids:0,30521 or ids:[0,30521]"
        )
    return name.strip(), (low, high)


def ranged_array(
    dtype: np.dtype, dims: Sequence[int], rng: np.random.Generator, value_range: tuple[float, float], name: str
) -> np.ndarray:
    """Random values of input ``name`` in ``value_range`` (``--val-range``; both ends included
    for integers, floats uniform)."""
    dtype = np.dtype(dtype)
    low, high = value_range
    if dtype.kind in "iu":
        low_int, high_int = math.ceil(low), math.floor(high)
        info = np.iinfo(dtype)
        if low_int > high_int:
            raise UsageError(f"--val-range {name}:{low:g},{high:g} holds no whole number for {dtype} input {name!r}")
        if not info.min <= low_int <= high_int <= info.max:
            raise UsageError(
                f"--val-range {name}:{low:g},{high:g} is outside what {dtype} input {name!r} holds "
                f"({info.min}..{info.max})"
            )
        return random_array(dtype, dims, rng, int_range=(low_int, high_int + 1))
    if dtype.kind == "f":
        return random_array(dtype, dims, rng, float_range=(low, high))
    raise UsageError(f"--val-range {name}: input {name!r} is {dtype}; a range applies to integers and floats")
