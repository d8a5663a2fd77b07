"""ONNX element types: parsing ``float32``/``half``/``long``, naming, numpy dtypes both ways, and
which casts keep every value (the rule concat-outputs' ``lossy`` option guards).

The one dtype table of the project: every module that names, parses or converts an element type
goes through here."""

from __future__ import annotations

import re

import numpy as np
import onnx

__all__ = ["parse_dtype", "dtype_name", "np_dtype", "elem_type_of", "is_lossless_cast"]

_T = onnx.TensorProto
_CANONICAL: dict[int, str] = {
    _T.FLOAT: "float32",
    _T.DOUBLE: "float64",
    _T.FLOAT16: "float16",
    _T.BFLOAT16: "bfloat16",
    _T.INT8: "int8",
    _T.INT16: "int16",
    _T.INT32: "int32",
    _T.INT64: "int64",
    _T.UINT8: "uint8",
    _T.UINT16: "uint16",
    _T.UINT32: "uint32",
    _T.UINT64: "uint64",
    _T.BOOL: "bool",
    _T.COMPLEX64: "complex64",
    _T.COMPLEX128: "complex128",
    _T.STRING: "string",
}
_ALIASES: dict[str, int] = {"float": _T.FLOAT, "double": _T.DOUBLE, "half": _T.FLOAT16, "long": _T.INT64}
# (kind, bits): kind "int"/"uint" with width, "float" with significand bits (implicit bit
# included) and exponent bits.
_INT_BITS: dict[int, int] = {_T.INT8: 8, _T.INT16: 16, _T.INT32: 32, _T.INT64: 64}
_UINT_BITS: dict[int, int] = {_T.UINT8: 8, _T.UINT16: 16, _T.UINT32: 32, _T.UINT64: 64}
_FLOAT_BITS: dict[int, tuple[int, int]] = {_T.FLOAT16: (11, 5), _T.BFLOAT16: (8, 8), _T.FLOAT: (24, 8), _T.DOUBLE: (53, 11)}


def parse_dtype(text: str | int) -> int:
    """An ONNX tensor element type from a name: ``float32``, ``float``, ``FLOAT16``,
    ``tensor(int64)``, ``half``, ... or the ``TensorProto`` enum value itself."""
    if isinstance(text, bool):
        raise TypeError(f"dtype must be a type name such as float32, got {text!r}")
    if isinstance(text, int):
        if text in _T.DataType.values() and text != _T.UNDEFINED:
            return text
        raise ValueError(f"dtype {text} is not an ONNX tensor element type")
    if not isinstance(text, str):
        raise TypeError(f"dtype must be a type name such as float32, got {text!r}")
    key = text.strip().lower()
    m = re.fullmatch(r"tensor\((\w+)\)", key)
    if m:
        key = m.group(1)
    for enum, name in _CANONICAL.items():
        if key == name:
            return enum
    if key in _ALIASES:
        return _ALIASES[key]
    for name, enum in _T.DataType.items():
        if key == name.lower() and enum != _T.UNDEFINED:
            return enum
    valid = ", ".join(sorted(_CANONICAL.values()))
    raise ValueError(f"dtype {text!r} is not an ONNX tensor type; use one of {valid}")


def dtype_name(elem_type: int) -> str:
    """The name of an ONNX element type (``float32``, ``int64``, ...), as users write it."""
    if elem_type in _CANONICAL:
        return _CANONICAL[elem_type]
    try:
        return _T.DataType.Name(elem_type).lower()
    except ValueError:
        return f"type{elem_type}"


def np_dtype(elem_type: int | str) -> np.dtype:
    """The numpy dtype of an ONNX element type (bfloat16 and float8 through ml_dtypes)."""
    enum = parse_dtype(elem_type) if isinstance(elem_type, str) else elem_type
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(enum))


def elem_type_of(array: np.ndarray | np.dtype) -> int:
    """The ONNX element type of a numpy array or dtype; 0 (UNDEFINED) when ONNX has none."""
    dtype = array if isinstance(array, np.dtype) else array.dtype
    try:
        return onnx.helper.np_dtype_to_tensor_dtype(dtype)
    except (KeyError, TypeError, ValueError):
        return _T.UNDEFINED


def is_lossless_cast(src: int, dst: int) -> bool:
    """Whether every value of ``src`` survives a Cast to ``dst`` and back unchanged.

    Lossless: same type; bool to any number; an integer to a wider integer that holds its whole
    range; an integer to a float whose significand holds it (int16 to float32, int32 to
    float64); a float to a float at least as wide in significand and exponent. Everything else
    (int64 to float32 or float64, float to int, float32 to float16, anything to bool) loses
    information.
    """
    if src == dst:
        return True
    numeric = {**_INT_BITS, **_UINT_BITS, **_FLOAT_BITS}
    if src == _T.BOOL:
        return dst in numeric
    if dst not in numeric or src not in numeric:
        return False
    if src in _FLOAT_BITS:
        if dst not in _FLOAT_BITS:
            return False
        (sm, se), (dm, de) = _FLOAT_BITS[src], _FLOAT_BITS[dst]
        return dm >= sm and de >= se
    signed = src in _INT_BITS
    bits = _INT_BITS.get(src) or _UINT_BITS[src]
    if dst in _FLOAT_BITS:
        return _FLOAT_BITS[dst][0] >= bits - (1 if signed else 0)
    if dst in _INT_BITS:
        return _INT_BITS[dst] >= bits + (0 if signed else 1)
    return not signed and _UINT_BITS[dst] >= bits
