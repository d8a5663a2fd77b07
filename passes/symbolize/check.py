"""Run a symbolized model at several sizes on ONNX Runtime and check it stays right.

:func:`check_dynamic` feeds random inputs (of each input's dtype; integers in a safe range) to

1. the original and the rewritten model at the traced size: outputs must agree within 1e-5;
2. the rewritten model at two other sizes per symbol: it must run, and every output dim that the
   plan expresses in the symbols must come out as that expression evaluated at the size.

Failures raise :class:`~onnxsurgery.errors.PassError` with the ONNX Runtime error translated
into the node that broke (:func:`~onnxsurgery.validation.runtime.describe_ort_error`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Set
from dataclasses import dataclass, field

import numpy as np
import onnx

from onnxsurgery.errors import PassError
from onnxsurgery.model.signature import model_inputs
from onnxsurgery.shapes.dims import Dim
from onnxsurgery.validation.feeds import random_array
from onnxsurgery.validation.runtime import create_session, describe_ort_error, run_model

__all__ = ["CheckResult", "check_dynamic", "check_sizes", "model_node"]



@dataclass
class CheckResult:
    """The sizes checked, and the largest difference from the original at the traced size."""

    sizes: list[dict[str, int]] = field(default_factory=list)
    max_abs_diff: float = 0.0
    rows_checked: bool = False

    def __str__(self) -> str:
        text = "; ".join(", ".join(f"{k}={v}" for k, v in s.items()) for s in self.sizes)
        rows = "; batch rows independent" if self.rows_checked else ""
        return f"ran at {text}; traced-size outputs within {self.max_abs_diff:.2g} of the original{rows}"


def check_sizes(
    traced: Mapping[str, int],
    fixed: Set[str] = frozenset(),
    steps: Mapping[str, int] | None = None,
) -> list[dict[str, int]]:
    """The traced size, then two other values for each symbol not in ``fixed`` (others traced).

    The other values are ``traced + step`` and ``traced - step`` (or ``+ 2*step`` when that is
    too small); ``steps`` defaults to 1, and is larger for symbols that strided convolutions or
    pools divide, so the sizes keep the traced size's remainder (a padding computed for an even
    height is baked into the graph).
    """
    sizes = [dict(traced)]
    for sym, v in traced.items():
        if sym in fixed:
            continue
        step = (steps or {}).get(sym, 1)
        others = [v + step, v - step if v - step >= 2 else v + 2 * step]
        for o in others:
            s = dict(traced)
            s[sym] = o
            sizes.append(s)
    return sizes


def _feeds(
    model: onnx.ModelProto,
    axes: Mapping[str, Mapping[int, str]],
    size: Mapping[str, int],
    seed: int,
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shapes: dict[str, list[int]] = {}
    dtypes: dict[str, np.dtype] = {}
    for spec in model_inputs(model):
        if spec.optional:  # an initializer: the model's own value stays
            continue
        axis_symbols = axes.get(spec.name, {})
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
        shapes[spec.name] = dims
        dtypes[spec.name] = spec.dtype if spec.dtype is not None else np.dtype(np.float32)
    # Lengths are at most the smallest symbolic non-batch size of the other inputs.
    seq_like = [
        size[s] for name, spec in axes.items() for a, s in spec.items() if a != 0 and s in size
    ]
    feeds: dict[str, np.ndarray] = {}
    for name, dims in shapes.items():
        dtype = dtypes[name]
        lname = name.lower()
        if dtype.kind not in "iu":  # floats, bools: the one random-feed helper's defaults
            feeds[name] = random_array(dtype, dims, rng)
        elif "mask" in lname:  # 0/1 per position, every row attending to its first position
            arr = random_array(dtype, dims, rng, int_range=(0, 2))
            if arr.ndim:
                arr[..., 0] = 1
            feeds[name] = arr
        elif "len" in lname and len(dims) == 1:
            top = min(seq_like) if seq_like else max(1, min((d for d in dims if d > 1), default=1))
            arr = random_array(dtype, dims, rng, int_range=(1, top + 1))
            if arr.size:
                arr[rng.integers(0, arr.size)] = top
            feeds[name] = arr
        else:
            top = max(1, min((d for d in dims if d > 0), default=1))
            feeds[name] = random_array(dtype, dims, rng, int_range=(0, top))
    return {name: np.asarray(arr) for name, arr in feeds.items()}


def model_node(
    model: onnx.ModelProto | None, name: str | None, op: str | None = None
) -> str | None:
    """The model's node behind a name ONNX Runtime reports: itself, or, for a node its graph
    optimizer made (``<tensor>_nchwc``), the node of type ``op`` next to that tensor."""
    if model is None or not name:
        return name
    if name in {n.name for n in model.graph.node}:
        return name
    tensors = {o for n in model.graph.node for o in n.output if o}
    tensor = max((t for t in tensors if name.startswith(t)), key=len, default=None)
    if tensor is None:
        return name
    near = [n for n in model.graph.node if tensor in n.output or tensor in n.input]
    # A fused node (Conv + its activation) is named after the activation's output: look one step
    # further upstream too.
    upstream = {i for n in near if tensor in n.output for i in n.input}
    near += [n for n in model.graph.node if upstream & set(n.output)]
    for n in near:
        if op is None or n.op_type == op:
            return n.name or n.output[0]
    return near[0].name or near[0].output[0] if near else name


def _fail(what: str, exc: BaseException, model: onnx.ModelProto | None = None) -> PassError:
    message, node = describe_ort_error(exc)
    m = re.search(r"running (\w+) node", str(exc))
    real = model_node(model, node, m.group(1) if m else None)
    if real and node and real != node:
        message = f"{message} (ONNX Runtime's node {node!r} is the model's {real!r})"
    return PassError(f"check {what}: ONNX Runtime failed: {message}", node=real)


def check_dynamic(
    original: onnx.ModelProto,
    model: onnx.ModelProto,
    axes: Mapping[str, Mapping[int, str]],
    traced: Mapping[str, int],
    output_dims: Mapping[str, list[Dim] | None],
    provider: str = "auto",
    *,
    dynamic: Set[str] = frozenset(),
    fixed: Set[str] = frozenset(),
    batch_rows: Set[str] = frozenset(),
    steps: Mapping[str, int] | None = None,
    atol: float = 1e-5,
    rtol: float = 1e-5,
) -> CheckResult:
    """Check ``model`` (symbolized ``original``) at the traced size and two others per symbol.

    ``traced`` maps each symbol to its traced size; symbols in ``dynamic`` had no traced size (their
    axes were dynamic already) and are checked at 2; symbols in ``fixed`` (kept from being
    generalized by a blocker, with ``strict=False``) stay at their traced size. For symbols in
    ``batch_rows`` (batches, whose rows are independent) each row's outputs must also equal a run
    of that row alone: a constant that still carries the traced batch (a mask or an index read at
    row 0) shows up there even when every shape is right. ``output_dims`` gives each output's symbolic
    dims (None where unknown).
    """
    base = {s: (2 if s in dynamic else v) for s, v in traced.items()}
    result = CheckResult()
    where = ", ".join(f"{k}={v}" for k, v in base.items())
    feeds = _feeds(model, axes, base, 0)
    try:
        expected = run_model(original, feeds, provider)
    except Exception as exc:  # noqa: BLE001 - ORT raises several types
        raise _fail(f"of the original model at the traced size {where}", exc) from None
    try:
        session = create_session(model, provider)
    except Exception as exc:  # noqa: BLE001
        raise _fail("loading the rewritten model", exc) from None
    try:
        got = run_model(session, feeds)
    except Exception as exc:  # noqa: BLE001
        raise _fail(f"at the traced size {where}", exc, model) from None
    for name, ref in expected.items():
        out = got.get(name)
        if out is None or out.shape != ref.shape:
            raise PassError(
                f"check at the traced size {where}: output {name!r} has shape "
                f"{None if out is None else list(out.shape)}, the original {list(ref.shape)}"
            )
        if ref.dtype.kind in "fc":
            diff = np.abs(out.astype(np.float64) - ref.astype(np.float64))
            bad = ~(diff <= atol + rtol * np.abs(ref.astype(np.float64))) & ~(
                np.isnan(out) & np.isnan(ref)
            )
            if np.any(bad):
                raise PassError(
                    f"check at the traced size {where}: output {name!r} differs from the original "
                    f"by up to {float(np.nanmax(diff)):.3g} (tolerance {atol:g})"
                )
            if diff.size:
                result.max_abs_diff = max(result.max_abs_diff, float(np.nanmax(diff)))
        elif not np.array_equal(out, ref):
            raise PassError(
                f"check at the traced size {where}: output {name!r} differs from the original"
            )
    result.sizes.append(base)
    for k, size in enumerate(check_sizes(base, fixed, steps)[1:], start=1):
        text = ", ".join(f"{s}={v}" for s, v in size.items())
        inputs = _feeds(model, axes, size, k)
        try:
            outs = run_model(session, inputs)
        except Exception as exc:  # noqa: BLE001
            raise _fail(f"at {text}", exc, model) from None
        for sym in batch_rows:
            if size[sym] >= 2 and size[sym] != base[sym]:
                _check_rows(model, session, axes, output_dims, sym, inputs, outs, text, atol, rtol)
                result.rows_checked = True
        for name, dims in output_dims.items():
            if dims is None or name not in outs:
                continue
            shape = outs[name].shape
            want = []
            for d in dims:
                try:
                    want.append(d.evaluate(size) if d is not None else None)
                except KeyError:
                    want.append(None)
            ok = len(shape) == len(want) and all(
                w is None or w == g for w, g in zip(want, shape, strict=False)
            )
            if not ok:
                shown = ", ".join("?" if w is None else str(w) for w in want)
                raise PassError(
                    f"check at {text}: output {name!r} has shape {list(shape)}, expected [{shown}] "
                    "from the symbols"
                )
        result.sizes.append(size)
    return result


def _check_rows(
    model: onnx.ModelProto,
    session,
    axes: Mapping[str, Mapping[int, str]],
    output_dims: Mapping[str, list[Dim | None] | None],
    sym: str,
    inputs: Mapping[str, np.ndarray],
    outs: Mapping[str, np.ndarray],
    text: str,
    atol: float,
    rtol: float,
) -> None:
    """Each row of a batch run must equal running that row alone (rows are independent)."""
    in_axis = {name: a for name, spec in axes.items() for a, s in spec.items() if s == sym}
    out_axis = {}
    for name, dims in output_dims.items():
        if dims is not None and name in outs:
            hits = [i for i, d in enumerate(dims) if d is not None and d == Dim.sym(sym)]
            if len(hits) == 1:
                out_axis[name] = hits[0]
    if not out_axis or not in_axis:
        return
    n = next(inputs[name].shape[a] for name, a in in_axis.items() if name in inputs)
    for row in (0, n - 1):
        alone = {
            name: (np.take(arr, [row], axis=in_axis[name]) if name in in_axis else arr)
            for name, arr in inputs.items()
        }
        try:
            single = run_model(session, alone)
        except Exception as exc:  # noqa: BLE001
            raise _fail(f"of {sym} row {row} alone ({text})", exc, model) from None
        for name, axis in out_axis.items():
            want = np.take(outs[name], [row], axis=axis)
            got = single[name]
            if got.shape != want.shape:
                continue
            close = (
                np.allclose(got, want, atol=atol * 10, rtol=rtol * 10, equal_nan=True)
                if want.dtype.kind in "fc"
                else np.array_equal(got, want)
            )
            if not close:
                raise PassError(
                    f"check at {text}: {sym} rows are not independent: row {row} of output "
                    f"{name!r} differs from running that row alone; a constant still carries the "
                    f"traced {sym} (a mask or an index that reads one row)"
                )
