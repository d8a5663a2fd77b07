"""Inputs for symbolize's check, shaped by the graph and never by input names.

:func:`check_feeds` gives integers that index a gather the range of its data axis (token ids
over the vocabulary) and other integers 0/1 (masks), as every feed the graph shapes
(:func:`onnxsurgery.validation.feeds.graph_int_array`, shared with ``reference record``), one
per-row length vector along the batch, takes inputs read as sizes
(:func:`~onnxsurgery.validation.feeds.shape_inputs`) from the references (or all ones where the
graph shows ones are valid), and never feeds an initializer that old models also list as an
input; :func:`unsized_axes` names the dynamic axes no symbol sizes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set

import numpy as np
import onnx

from onnxsurgery.errors import PassError
from onnxsurgery.model.signature import InputSpec, model_inputs
from onnxsurgery.validation.feeds import graph_int_array, index_range, random_array, shape_inputs
from onnxsurgery.validation.references import Case

__all__ = ["case_sizes", "check_feeds", "shape_inputs", "unsized_axes"]


def case_sizes(
    axes: Mapping[str, Mapping[int, str]], inputs: Mapping[str, np.ndarray]
) -> dict[str, int]:
    """Each symbol's size in a case, read off the input axes it names."""
    out: dict[str, int] = {}
    for name, spec in axes.items():
        arr = inputs.get(name)
        if arr is None:
            continue
        for axis, sym in spec.items():
            if -arr.ndim <= axis < arr.ndim:
                out.setdefault(sym, int(arr.shape[axis]))
    return out


#: Size inputs all ones may fill (no change): an Expand target, Tile repeats.
_ONES_OK = {("Expand", 1), ("Tile", 1)}


def _given_value(
    name: str,
    size: Mapping[str, int],
    axes: Mapping[str, Mapping[int, str]],
    references: Sequence[Case],
) -> np.ndarray | None:
    """The value of input ``name`` in a reference case at ``size`` (else at any size when every
    case holds the same value)."""
    values = [(c, c.inputs[name]) for c in references if name in c.inputs]
    for case, value in values:
        sizes = case_sizes(axes, case.inputs)
        if all(size.get(k) == v for k, v in sizes.items()):
            return value
    if values and all(np.array_equal(values[0][1], v) for _, v in values):
        return values[0][1]
    return None


def check_feeds(
    model: onnx.ModelProto,
    axes: Mapping[str, Mapping[int, str]],
    size: Mapping[str, int],
    seed: int,
    rows: Set[str] = frozenset(),
    references: Sequence[Case] = (),
) -> dict[str, np.ndarray]:
    """Random inputs at ``size``, shaped by the graph, never by input names: floats, bools and
    strings from the one random-feed helper; integers that index a gather cover its data axis
    (token ids over the whole vocabulary); a vector of integers along a batch (one per row:
    lengths) lies in [1, the smallest other symbolic size], reaching it once; other integers
    are 0/1 with the first position 1 (a valid attention mask, a valid index). Integers read
    as sizes are never made up: taken from a reference case at this size, else all ones where
    that is valid (an Expand target, Tile repeats); otherwise the check cannot run and says so.
    Initializers listed as graph inputs (IR < 4) are never fed: the model's own values stay."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    as_sizes = shape_inputs(model)
    others = [size[s] for spec in axes.values() for s in spec.values() if s in size and s not in rows]
    types = {vi.name: vi.type for vi in model.graph.input}
    for spec in model_inputs(model):
        if spec.optional:  # an initializer: the model's own value stays
            continue
        kind = types[spec.name].WhichOneof("value")
        if kind != "tensor_type":
            kind = (kind or "value of no type").removesuffix("_type").replace("_", " ")
            raise PassError(
                f"check: input {spec.name!r} is a {kind}, not a tensor; the "
                "check makes up no values for it: run symbolize with check=false"
            )
        axis_symbols = axes.get(spec.name, {})
        dims = _dims(spec, axis_symbols, size)
        dtype = spec.dtype if spec.dtype is not None else np.dtype(np.float32)
        if spec.name in as_sizes:
            feeds[spec.name] = _size_feed(spec.name, as_sizes[spec.name], dims, dtype, size, axes, references)
        elif dtype.kind not in "iu":
            feeds[spec.name] = random_array(dtype, dims, rng)
        elif len(dims) == 1 and axis_symbols.get(0) in rows and others and index_range(model, spec.name) is None:
            arr = random_array(dtype, dims, rng, int_range=(1, min(others) + 1))
            if arr.size:
                arr[rng.integers(0, arr.size)] = min(others)
            feeds[spec.name] = arr
        else:
            feeds[spec.name] = graph_int_array(model, spec.name, dtype, dims, rng)
    return {name: np.asarray(arr) for name, arr in feeds.items()}


def _dims(spec: InputSpec, axis_symbols: Mapping[int, str], size: Mapping[str, int]) -> list[int]:
    """The shape of ``spec``'s feed at ``size``: a named axis at its symbol's size, a fixed dim
    as declared, another dynamic one at its own symbol's size, else 2."""
    declared = spec.dims or ()
    dims = []
    for k, d in enumerate(declared):
        ax_sym = axis_symbols.get(k) or axis_symbols.get(k - len(declared))
        if ax_sym is not None:
            dims.append(size[ax_sym])
        elif isinstance(d, int):
            dims.append(d)
        else:
            dims.append(size.get(d or "", 2))
    return dims


def _size_feed(
    name: str,
    slots: Sequence[tuple[str, str, int]],
    dims: list[int],
    dtype: np.dtype,
    size: Mapping[str, int],
    axes: Mapping[str, Mapping[int, str]],
    references: Sequence[Case],
) -> np.ndarray:
    """The feed of input ``name``, read as a size at ``slots`` ((node, op, input index) each):
    from a reference case at this size, else all ones where that is valid (an Expand target,
    Tile repeats); never made up."""
    given = _given_value(name, size, axes, references)
    if given is not None:
        return given
    if all((op, k) in _ONES_OK for _, op, k in slots):
        return np.ones(dims, dtype=dtype)
    node, op, k = next(x for x in slots if (x[1], x[2]) not in _ONES_OK)
    where = ", ".join(f"{s}={v}" for s, v in size.items())
    raise PassError(
        f"check at {where}: input {name!r} is read as a size (input {k} of {op} "
        f"{node!r}) and no reference case gives its value here; the check does not make "
        "sizes up: pass --ref with cases at these sizes, or check=false",
        node=node,
    )


def unsized_axes(
    model: onnx.ModelProto, axes: Mapping[str, Mapping[int, str]], size: Mapping[str, int]
) -> list[str]:
    """The input axes :func:`check_feeds` gives a made-up 2: dynamic in the model, named by no symbol."""
    out = []
    for spec in model_inputs(model):
        named = axes.get(spec.name, {})
        for k, d in enumerate(spec.dims or ()):
            rank = len(spec.dims or ())
            if not spec.optional and not isinstance(d, int) and k not in named and (
                k - rank not in named and (d or "") not in size
            ):
                out.append(f"axis {k} of input {spec.name!r}")
    return out
