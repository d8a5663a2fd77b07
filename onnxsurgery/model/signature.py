"""What a model accepts: its declared inputs (dtype, dims) and whether a case's feeds fit them.

Used wherever feeds meet a model: validation checks reference cases before running them,
``compare_models`` and ``reference record`` make random inputs from the declared signature.
:func:`parse_shape_spec` is the one ``NAME:DIMS`` parser (``--shape``, ``--case``,
fold-constants' ``input_shapes``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from onnxsurgery.errors import UsageError
from onnxsurgery.model.dtypes import np_dtype

__all__ = [
    "InputSpec",
    "dims_of",
    "CaseFailure",
    "fixed_size",
    "model_inputs",
    "check_inputs",
    "no_value_text",
    "parse_shape_spec",
]


def fixed_size(dim: onnx.TensorShapeProto.Dimension) -> int | None:
    """A declared dim's size, or None where it is dynamic: a name, nothing, or a negative
    ``dim_value`` (``-1`` from Paddle and older exporters means "any size", never a size)."""
    if dim.HasField("dim_value") and dim.dim_value >= 0:
        return dim.dim_value
    return None


@dataclass(frozen=True)
class InputSpec:
    """One declared graph input: dtype and dims (int fixed, str symbolic, None unknown)."""

    name: str
    dtype: np.dtype | None
    dims: tuple[int | str | None, ...] | None
    optional: bool = False  # backed by an initializer: a case may override it, need not

    def dims_text(self) -> str:
        if self.dims is None:
            return "(any shape)"
        return "[" + ", ".join("?" if d is None else str(d) for d in self.dims) + "]"


def dims_of(vi: onnx.ValueInfoProto) -> list[int | str | None] | None:
    """Dims of a value: ints, symbol names, or None for unknown; None when rank is unknown."""
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        return None
    out: list[int | str | None] = []
    for d in t.shape.dim:
        if d.HasField("dim_value"):
            out.append(d.dim_value)
        elif d.HasField("dim_param"):
            out.append(d.dim_param)
        else:
            out.append(None)
    return out


def model_inputs(model: onnx.ModelProto) -> list[InputSpec]:
    """The inputs a model declares, initializer-backed ones marked optional."""
    initializers = {t.name for t in model.graph.initializer}
    specs = []
    for vi in model.graph.input:
        dtype = dims = None
        if vi.type.HasField("tensor_type"):
            tt = vi.type.tensor_type
            if tt.elem_type:
                try:
                    dtype = np_dtype(tt.elem_type)
                except (KeyError, TypeError, ValueError):
                    dtype = None
            if tt.HasField("shape"):
                dims = tuple(_dim(d) for d in tt.shape.dim)
        specs.append(InputSpec(vi.name, dtype, dims, optional=vi.name in initializers))
    return specs


def _dim(d: onnx.TensorShapeProto.Dimension) -> int | str | None:
    """A declared dim as this module reads it: a number, a symbol, or None when unknown.

    Exporters write unknown dims in ways ORT reads as dynamic: a negative ``dim_value`` (-1,
    paddle2onnx) or the ``dim_param`` ``"?"``, which is no symbol shared between axes.
    """
    size = fixed_size(d)
    if size is not None or d.HasField("dim_value"):
        return size
    return d.dim_param if d.dim_param not in ("", "?") else None


def _dims(shape: Iterable[int]) -> str:
    return "[" + ", ".join(str(int(d)) for d in shape) + "]"


class CaseFailure(Exception):
    """A case that cannot be compared: bad inputs, or ONNX Runtime failed on it. ``input`` and
    ``axis`` say where a case does not fit the model's declared inputs (``axis`` is None for a
    missing input, a dtype or a rank), ``declared`` what the model declares on that axis (a
    fixed size or a symbol), for callers that say what to change."""

    def __init__(
        self,
        message: str,
        node: str | None = None,
        *,
        input: str | None = None,
        axis: int | None = None,
        declared: int | str | None = None,
    ) -> None:
        super().__init__(message)
        self.node = node
        self.input = input
        self.axis = axis
        self.declared = declared


def no_value_text(subject: str, missing: Sequence[str], has: Iterable[str], declared: Sequence[str]) -> str:
    """The one wording of a case that lacks a required input: ``"case gives no value for model
    input 'x' (the case has z; the model's inputs are x)"``; ``subject`` names the case."""
    return (
        f"{subject} gives no value for model input {', '.join(map(repr, missing))} (the case has "
        f"{', '.join(has) or 'none'}; the model's inputs are {', '.join(declared)})"
    )


def check_inputs(
    specs: Sequence[InputSpec], inputs: Mapping[str, np.ndarray]
) -> tuple[dict[str, np.ndarray], list[str]]:
    """The feeds for one case and notes on ignored inputs; raises CaseFailure when unfit."""
    declared = {s.name: s for s in specs}
    missing = [s.name for s in specs if not s.optional and s.name not in inputs]
    if missing:
        required = [s.name for s in specs if not s.optional]
        raise CaseFailure(no_value_text("case", missing, inputs, required), input=missing[0])
    feeds: dict[str, np.ndarray] = {}
    notes: list[str] = []
    symbols: dict[str, tuple[int, str]] = {}
    for name, value in inputs.items():
        spec = declared.get(name)
        if spec is None:
            notes.append(f"reference input {name!r} is not a model input; ignored")
            continue
        if spec.optional:  # IR < 4: a weight listed as an input; its initializer is the value
            notes.append(f"reference input {name!r} is an initializer of the model; not fed")
            continue
        array = np.asarray(value)
        if spec.dtype is not None and array.dtype != spec.dtype:
            raise CaseFailure(
                f"input {name!r}: dtype {array.dtype}, the model declares {spec.dtype}",
                input=name,
            )
        _check_dims(spec, array.shape, symbols)
        feeds[name] = array
    return feeds, notes


def _check_dims(spec: InputSpec, shape: tuple[int, ...], symbols: dict[str, tuple[int, str]]) -> None:
    """Raise CaseFailure where ``shape`` does not fit ``spec``'s dims (``symbols``: each symbol's
    size as the case's earlier inputs set it, and where)."""
    if spec.dims is None:
        return
    name = spec.name
    where = f"input {name!r} expects dims {spec.dims_text()}, got {_dims(shape)}"
    if len(spec.dims) != len(shape):
        raise CaseFailure(f"{where} (rank {len(spec.dims)}, got rank {len(shape)})", input=name)
    for axis, (want, got) in enumerate(zip(spec.dims, shape, strict=True)):
        if isinstance(want, int) and want != got:
            raise CaseFailure(
                f"{where}: axis {axis} is fixed at {want}, got {got}",
                input=name,
                axis=axis,
                declared=want,
            )
        if isinstance(want, str):
            seen = symbols.setdefault(want, (int(got), f"{name!r} axis {axis}"))
            if seen[0] != got:
                raise CaseFailure(
                    f"{where}: axis {axis} is {want!r} = {got}, but {seen[1]} "
                    f"set {want!r} = {seen[0]}",
                    input=name,
                    axis=axis,
                    declared=want,
                )


#: The spellings of NAME:DIMS every parser error shows (ours, onnxsim/onnxslim's, Polygraphy's).
_SPELLINGS = "like {name}:1x3x224x224, {name}:1,3,224,224 or {name}:[1,3,224,224]"


def parse_shape_spec(
    text: str,
    *,
    flag: str = "--shape",
    positive: bool = False,
    error: type[Exception] = UsageError,
) -> tuple[str, list[int]]:
    """``"x:3x3x224x224"`` -> ``("x", [3, 3, 224, 224])``; ``"x:"`` (or ``"x:scalar"``) is a scalar.

    The name is everything before the last ``:`` (ONNX names may hold colons); dims are
    separated by ``x`` or ``,`` and may be wrapped in brackets: ``x:1,3,224,224`` (onnxsim,
    onnxslim) and ``x:[1,3,224,224]`` (Polygraphy) read the same. ``positive`` refuses zero dims
    and scalars. Errors are raised as ``error`` with ``flag`` (the option the text came from)
    and the accepted spellings in the message.
    """
    if not isinstance(text, str):
        raise error(f"{flag} {text!r} must read NAME:DIMS, {_SPELLINGS.format(name='x')}")
    name, sep, dims_text = text.strip().rpartition(":")
    name = name.strip()
    if not sep or not name:
        raise error(f"{flag} {text!r} must read NAME:DIMS, {_SPELLINGS.format(name='x')}")
    like = _SPELLINGS.format(name=name)
    dims_text = dims_text.strip()
    if dims_text.startswith("[") and dims_text.endswith("]"):
        dims_text = dims_text[1:-1].strip()
    if not dims_text or dims_text == "scalar":
        if positive:
            raise error(f"{flag} {text!r} needs positive dims, {like}")
        return name, []
    try:
        dims = [int(p) for p in dims_text.replace(",", "x").split("x")]
    except ValueError:
        raise error(f"{flag} {text!r}: dims must be integers (whole numbers), {like}") from None
    if positive and any(d <= 0 for d in dims):
        raise error(f"{flag} {text!r} needs positive dims, {like}")
    if any(d < 0 for d in dims):
        raise error(f"{flag} {text!r}: dims must be >= 0")
    return name, dims
