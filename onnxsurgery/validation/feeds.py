"""Random inputs for a model: the one place feeds are made up when no stored case gives them.

Floats are standard normal, integers drawn from a small non-negative range (so embedding ids and
gather indices stay in range), bools fair coins. :func:`random_inputs` resolves each input's
dims from given shapes, the symbols they bind, and another model's declaration.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from onnxsurgery.errors import UsageError
from onnxsurgery.limits import LimitExceeded
from onnxsurgery.limits import current as current_limits
from onnxsurgery.model.signature import InputSpec

__all__ = ["RANDOM_INT_RANGE", "random_array", "random_inputs"]

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
    symbols: dict[str, int] = {}
    # symbols bound by the given shapes first, so one --shape fixes 'batch' for every input
    for spec in specs:
        if (
            spec.name in shapes
            and spec.dims is not None
            and len(spec.dims) == len(shapes[spec.name])
        ):
            for want, got in zip(spec.dims, shapes[spec.name], strict=True):
                if isinstance(want, str):
                    symbols.setdefault(want, int(got))
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
            dims = []
            fallback = others.get(spec.name)
            for axis, d in enumerate(spec.dims):
                if isinstance(d, int):
                    dims.append(d)
                    continue
                if isinstance(d, str) and d in symbols:
                    dims.append(symbols[d])
                    continue
                if (
                    fallback is not None
                    and fallback.dims is not None
                    and len(fallback.dims) == len(spec.dims)
                    and isinstance(fallback.dims[axis], int)
                ):
                    dims.append(fallback.dims[axis])
                    continue
                label = f"symbolic ({d!r})" if d else "of unknown size"
                raise UsageError(
                    f"input {spec.name!r} axis {axis} is {label}; give its size with "
                    f"--shape {spec.name}:{'x'.join('N' if not isinstance(x, int) else str(x) for x in spec.dims)}"
                )
        feeds[spec.name] = random_array(spec.dtype, dims, rng)
    return feeds


def random_array(
    dtype: np.dtype,
    dims: Sequence[int],
    rng: np.random.Generator,
    *,
    int_range: tuple[int, int] = RANDOM_INT_RANGE,
) -> np.ndarray:
    """Random values of ``dtype``: floats standard normal, integers in ``int_range`` (low
    inclusive, high exclusive), bools, strings (short words)."""
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
    if dtype.kind == "f":
        return rng.standard_normal(dims, dtype=np.float32).astype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(dims) + 1j * rng.standard_normal(dims)).astype(dtype)
    if dtype.kind in "OUS":  # strings: short lowercase words
        letters = rng.integers(ord("a"), ord("z") + 1, size=(*dims, 4))
        words = np.apply_along_axis(lambda c: "".join(map(chr, c)), -1, letters) if letters.size else []
        return np.asarray(words, dtype=object).reshape(dims)
    raise UsageError(f"cannot make random inputs of dtype {dtype}; give --ref cases")
