"""Symbol bounds a model records: ``seq<=8`` where symbolize sliced a table folded at the traced
length (valid up to it), one ``metadata_props`` key per symbol, read by ``inspect`` and
``validate``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import onnx

if TYPE_CHECKING:
    from onnxsurgery.model.signature import InputSpec

__all__ = ["BOUND_KEY", "record_bounds", "read_bounds", "bounds_text", "over_bound"]

#: ``onnxsurgery.symbol_bound.seq`` = ``"8"``: sizes of ``seq`` over 8 fail at run time
BOUND_KEY = "onnxsurgery.symbol_bound."


def record_bounds(model: onnx.ModelProto, bounds: Mapping[str, int]) -> None:
    """Write ``bounds`` ({symbol: upper bound}) into ``model``'s metadata_props, one key per
    symbol (any earlier bound of that symbol replaced)."""
    keys = {BOUND_KEY + s for s in bounds}
    kept = [p for p in model.metadata_props if p.key not in keys]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    for sym, bound in sorted(bounds.items()):
        model.metadata_props.add(key=BOUND_KEY + sym, value=str(bound))


def read_bounds(model: onnx.ModelProto) -> dict[str, int]:
    """The symbol bounds ``model`` records ({symbol: upper bound}); a value that is no whole
    number is left out (not ours)."""
    return {
        p.key[len(BOUND_KEY) :]: int(p.value)
        for p in model.metadata_props
        if p.key.startswith(BOUND_KEY) and p.value.isdigit()
    }


def bounds_text(bounds: Mapping[str, int]) -> str:
    """``seq <= 8, tgt <= 8``."""
    return ", ".join(f"{s} <= {b}" for s, b in sorted(bounds.items()))


def over_bound(
    specs: Sequence[InputSpec], inputs: Mapping[str, np.ndarray], bounds: Mapping[str, int]
) -> str | None:
    """Where an input's size is over a bound the model records, in words (the first such
    axis); None where every size is within."""
    for spec in specs:
        if spec.dims is None or spec.name not in inputs:
            continue
        shape = np.shape(inputs[spec.name])
        for axis, (want, got) in enumerate(zip(spec.dims, shape, strict=False)):
            if isinstance(want, str) and want in bounds and got > bounds[want]:
                return (
                    f"input {spec.name!r} axis {axis} is {want} = {got}, over the bound "
                    f"{want}<={bounds[want]} the model records ({BOUND_KEY}{want} in its "
                    f"metadata_props): symbolize made it valid up to {bounds[want]} only"
                )
    return None
