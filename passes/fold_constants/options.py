"""fold-constants' options: the table that checks them, onnxsim's settings, size and input-shape parsing,
optimizer names."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from onnxsurgery.model.signature import parse_shape_spec
from onnxsurgery.passes.fold_constants.onnxsim_import import import_onnxsim

__all__ = [
    "BATCHED_GEMM",
    "MAX_CHECK_RUNS",
    "MAX_SIZE_THRESHOLD",
    "OPTION_CHECKS",
    "OnnxsimSettings",
    "known_optimizers",
    "onnxsim_version",
    "parse_input_shapes",
    "parse_size",
    "read_options",
]

#: fold-constants' ``check=N`` runs onnxsim's own comparison N times; beyond this many runs it
#: is a typo (each run is a full inference), refused before anything runs.
MAX_CHECK_RUNS = 1000

#: onnxsim refuses tensor size thresholds at or above this (``tensor_size_threshold should be
#: less than 2GB``).
MAX_SIZE_THRESHOLD = 2**31 - 9999
_UNITS = {"B": 1, "KB": 2**10, "MB": 2**20, "GB": 2**30}
#: onnxsim runs this rewrite by default although it is not in its "default optimizers" list (it
#: is registered as an "other" pass and opted into in C++): MatMul+Add on a rank-3 input becomes
#: Reshape -> Gemm -> Reshape. On a symbolized model each one also needs Shape/Slice/Concat to
#: rebuild the dynamic shape, so the graph grows where it should shrink. fold-constants leaves it off unless ``batched_gemm=true``.
BATCHED_GEMM = "fuse_matmul_add_bias_into_gemm_batched"
_DEFAULT_EXTRA_OPTIMIZERS = (BATCHED_GEMM,)


# ---------------------------------------------------------------------------------------------
# options


def _flag(option: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{option} must be true or false, got {value!r}")
    return value


def _isolate(option: str, value: Any) -> bool | str:
    if not isinstance(value, bool) and value != "auto":
        raise ValueError(f"{option} must be true, false or auto, got {value!r}")
    return value


def _runs(option: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_CHECK_RUNS:
        raise ValueError(
            f"{option} must be a number of random-input runs from 0 to {MAX_CHECK_RUNS}, "
            f"got {str(value)[:40]}"
        )
    return value


def _optimizer_names(option: str, value: Any) -> tuple[str, ...]:
    names = tuple([value] if isinstance(value, str) else value or ())
    if names:
        known = known_optimizers()
        unknown = [s for s in names if s not in known]
        if unknown:
            raise ValueError(
                f"{option}: unknown onnx-optimizer pass(es) {', '.join(map(repr, unknown))}; "
                f"onnxsim runs: {', '.join(known)}"
            )
    return names


def parse_size(value: int | str) -> int:
    """``"1MB"``, ``"512KB"``, ``"1.5GB"``, ``"100B"``, ``"4096"`` or an int -> bytes (binary units)."""
    if isinstance(value, bool):
        raise TypeError(f"size must be bytes (int) or a text like '1MB', got {value!r}")
    if isinstance(value, int):
        size = value
    elif isinstance(value, str):
        m = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([KMG]?B)?\s*", value, re.IGNORECASE)
        if not m:
            raise ValueError(
                f"size {value[:40]!r} is not understood; write bytes or a number with B, KB, MB or GB "
                "(e.g. '1MB', '512KB')"
            )
        number = float(m.group(1))
        if not math.isfinite(number) or number >= MAX_SIZE_THRESHOLD:
            raise ValueError(f"size {value[:40]!r} must be under 2 GB (onnxsim's limit)")
        size = int(number * _UNITS[(m.group(2) or "B").upper()])
    else:
        raise TypeError(f"size must be bytes (int) or a text like '1MB', got {value!r}")
    if size <= 0:
        raise ValueError(f"size must be positive, got {value!r}")
    if size >= MAX_SIZE_THRESHOLD:
        raise ValueError(f"size {value!r} must be under 2 GB (onnxsim's limit)")
    return size


def parse_input_shapes(
    value: str | Sequence[str] | Mapping[str, Sequence[int]],
) -> dict[str, list[int]]:
    """``"x:1x3x224x224"``, ``["x:1x3", "y:2,4"]`` or ``{"x": [1, 3]}`` -> ``{"x": [1, 3, ...]}``."""
    if isinstance(value, Mapping):  # {"x": [1, 3]} reads as "x:1x3": one parser checks both forms
        texts = [f"{name}:{'x'.join(map(str, dims))}" for name, dims in value.items()]
    else:
        texts = [value] if isinstance(value, str) else list(value)
    items = [parse_shape_spec(t, flag="input_shapes", positive=True, error=ValueError) for t in texts]
    shapes: dict[str, list[int]] = {}
    for name, dims in items:
        if name in shapes:
            raise ValueError(f"input {name!r} is given two shapes")
        shapes[name] = dims
    if not shapes:
        raise ValueError("input_shapes is empty")
    return shapes


def known_optimizers() -> list[str]:
    """onnx-optimizer pass names onnxsim runs by default (the names ``skip=[...]`` accepts)."""
    names = list(import_onnxsim().onnxsim_cpp2py_export._list_optimizers())
    names += [n for n in _DEFAULT_EXTRA_OPTIMIZERS if n not in names]
    return names


def onnxsim_version() -> str:
    return str(getattr(import_onnxsim().version, "version", "?")).lstrip("v")


@dataclass(frozen=True)
class OnnxsimSettings:
    """What ``onnxsim.simplify`` is called with. Everything not listed keeps onnxsim's default,
    except ``certify=False`` (a Z3 proof attempt is the pipeline's validation's job) and
    ``batched_gemm``: onnxsim's MatMul+Add -> Reshape/Gemm/Reshape rewrite of rank-3 inputs
    (:data:`BATCHED_GEMM`) runs only when asked for."""

    fuse_bn: bool = True
    size_threshold: int | None = None
    skip: tuple[str, ...] = ()
    check: int = 0
    input_shapes: dict[str, list[int]] | None = None
    batched_gemm: bool = False

    def kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"check_n": self.check, "certify": False}
        if not self.fuse_bn:
            kw["skip_fuse_bn"] = True
        skipped = list(self.skip)
        if not self.batched_gemm and BATCHED_GEMM not in skipped:
            skipped.append(BATCHED_GEMM)
        if skipped:
            kw["skipped_optimizers"] = skipped
        if self.size_threshold is not None:
            kw["tensor_size_threshold"] = f"{self.size_threshold}B"
        if self.input_shapes:
            kw["overwrite_input_shapes"] = {k: list(v) for k, v in self.input_shapes.items()}
            if self.check:
                kw["test_input_shapes"] = {k: list(v) for k, v in self.input_shapes.items()}
        return kw


def _unless_none(parse: Callable[[Any], Any]) -> Callable[[str, Any], Any]:
    return lambda option, value: None if value is None else parse(value)


#: Each option of fold-constants and its check, which returns the value the pass keeps, in the
#: order they are checked (the first wrong one is the error).
OPTION_CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "fuse_bn": _flag,
    "fallback": _flag,
    "batched_gemm": _flag,
    "hold_weights": _flag,
    "isolate": _isolate,
    "check": _runs,
    "skip": _optimizer_names,
    "size_threshold": _unless_none(parse_size),
    "input_shapes": _unless_none(parse_input_shapes),
}


def read_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Check fold-constants' options through :data:`OPTION_CHECKS`: the values the pass keeps,
    or ValueError/TypeError naming the first wrong option."""
    values: dict[str, Any] = {}
    for option, check in OPTION_CHECKS.items():
        values[option] = check(option, options[option])
        if option == "skip" and values["batched_gemm"] and BATCHED_GEMM in values["skip"]:
            raise ValueError(f"batched_gemm=true contradicts skip=[{BATCHED_GEMM}]")
    return values
