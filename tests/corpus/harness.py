"""Export, reference and check the corpus: symbolize against the two baselines.

For one architecture, exporter and traced batch the harness

1. exports the wrapped torch model statically (no dynamic axes) at the traced size, cached as
   ``build/corpus/<torch-version>/<arch>/<exporter>/b<batch>/model.onnx`` (an export that fails is
   cached too, as ``export_error.txt``: a fact for the table);
2. computes torch eager outputs at the traced size and at the architecture's check sizes, cached
   as ``build/corpus/<torch-version>/<arch>/references/<sizes>.npz``;
3. makes the model dynamic by one of three methods (:data:`METHODS`):

   - ``symbolize``: this project's pass, ``Symbolize(dynamic_axes=...)`` with its own check on,
     as a user runs it (a model its check accepts but torch disagrees with is marked so);
   - ``update_model_dims``: ``onnx.tools.update_model_dims.update_inputs_outputs_dims`` with the
     same symbols on the inputs and matching ones on the outputs (the usual recipe);
   - ``re-export``: export again from torch with ``dynamic_axes`` (TorchScript) or
     ``dynamic_shapes`` (dynamo) at the same traced size, cached as ``dynamic.onnx``;

4. runs the result on ONNX Runtime (CPU) at every check size and compares each output with torch
   eager within ``atol=1e-4, rtol=1e-3``. A case passes when every size passes.

Every cached file carries a fingerprint (torch and transformers versions, the builder's source,
the signature and sizes), so a changed architecture is re-exported rather than read stale.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import io
import json
import logging
import os
import re
import signal
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from .architectures import ARCHITECTURES, Architecture, Sizes

__all__ = [
    "ATOL",
    "RTOL",
    "EXPORTERS",
    "METHODS",
    "CaseResult",
    "Export",
    "SizeResult",
    "apply_method",
    "arch_root",
    "cache_root",
    "check_sizes",
    "evaluate",
    "export_dir",
    "export_model",
    "load_symbolize",
    "reference",
    "sizes_label",
    "symbolize_model",
]

EXPORTERS = ("torchscript", "dynamo")
METHODS = ("symbolize", "update_model_dims", "re-export")
ATOL, RTOL = 1e-4, 1e-3
#: float32 rounding grows with the size of the values a model computes with, not with each
#: output element: an element near 0 of an output whose values reach 500 (a torchvision model's
#: random weights) carries the rounding of 500s. An element within this fraction of the output's
#: largest finite magnitude passes too; a wrong reading is off by the values themselves.
SCALE_RTOL = 1e-5
TORCHSCRIPT_OPSET = 17
#: Bump when the export or reference procedure changes in a way the fingerprint cannot see.
FORMAT = 2

REPO = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------------------------
# cache locations and fingerprints


def cache_root(base: Path | None = None) -> Path:
    """``build/corpus/<torch-version>/`` under the repository (``ONNXSURGERY_CORPUS_DIR`` wins),
    or ``base/<torch-version>/``."""
    import torch

    if base is None:
        env = os.environ.get("ONNXSURGERY_CORPUS_DIR")
        base = Path(env) if env else REPO / "build" / "corpus"
    root = base
    return root / re.sub(r"[^\w.+-]", "_", torch.__version__)


def arch_root(arch: Architecture) -> Path:
    """Where one architecture's exports and references are cached: ``arch.cache`` (the sweep's
    ``build/sweep/``) or :func:`cache_root`, then its name."""
    return (arch.cache or cache_root()) / arch.name


def weights_key(module: Any) -> str:
    """A digest of ``module``'s parameters and buffers, as built."""
    h = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def current_cache(arch: Architecture) -> bool:
    """Drop ``arch``'s cached exports and torch references where they were made from other
    weights than ``arch`` builds now, and record the weights it builds; whether any were
    dropped. The fingerprints cannot see every change to what a builder makes (the sweep's
    shrunk configs go through code outside the builder's source): a model exported from one
    build and checked against torch eager of another differs everywhere, a wrong model that is
    the cache's, not symbolize's. Bailing hybrid's TorchScript export was cached from an older
    build; its references at new sizes came from the current one, 3.4 apart."""
    root = arch_root(arch)
    stamp = root / "weights.key"
    key = weights_key(arch.build())
    # a cache from before the key was recorded may mix builds too: it is redone once
    stale = (not stamp.exists() and root.exists()) or (
        stamp.exists() and stamp.read_text().strip() != key
    )
    if stale:
        for made in [*root.glob("*/b*/*.stamp.json"), *root.glob("references/*.npz")]:
            made.unlink(missing_ok=True)
    root.mkdir(parents=True, exist_ok=True)
    stamp.write_text(key + "\n")
    return stale


def sizes_label(sizes: Sizes) -> str:
    """``batch3_seq5``: a size set as a file-name-safe label."""
    return "_".join(f"{k}{v}" for k, v in sizes.items())


def _fingerprint(arch: Architecture, *extra: Any) -> str:
    import importlib.metadata as md

    import torch

    try:  # the sweep's torchvision rows run in a venv without it
        transformers = md.version("transformers")
    except md.PackageNotFoundError:
        transformers = "-"
    parts = [
        FORMAT,
        torch.__version__,
        transformers,
        onnx.__version__,
        inspect.getsource(arch.builder),
        repr(arch.inputs),
        repr(arch.outputs),
        *map(repr, extra),
    ]
    return hashlib.sha256("\n".join(map(str, parts)).encode()).hexdigest()[:16]


# --------------------------------------------------------------------------------------------
# exporting


@dataclass
class Export:
    """One export: the model file, or the exporter's error; how long it took; whether cached."""

    path: Path | None
    error: str | None
    seconds: float
    cached: bool

    @property
    def ok(self) -> bool:
        return self.path is not None


@contextlib.contextmanager
def _silenced() -> Iterator[None]:
    """Keep the exporters' console output (Python and native) off the terminal."""
    names = ("torch", "torch.onnx", "torch.export", "onnxscript", "onnx_ir", "transformers")
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    sink = io.StringIO()
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    sys.stderr.flush()
    sys.stdout.flush()
    saved = os.dup(2)
    try:
        with (
            tempfile.TemporaryFile() as scratch,
            warnings.catch_warnings(),
            contextlib.redirect_stdout(sink),
            contextlib.redirect_stderr(sink),
        ):
            warnings.simplefilter("ignore")
            os.dup2(scratch.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved, 2)
    finally:
        os.close(saved)
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _error_text(exc: BaseException) -> tuple[str, str]:
    """(one-line summary, fuller text) of an exporter exception."""
    lines = [ln.rstrip() for ln in _ANSI.sub("", str(exc)).splitlines() if ln.strip()]
    first = lines[0].strip() if lines else ""
    # torch.onnx's TorchExportError puts the real reason under "## Exception summary".
    if "## Exception summary" in lines:
        at = lines.index("## Exception summary")
        if at + 1 < len(lines):
            first = f"{first} {lines[at + 1].strip()}"
    summary = f"{type(exc).__name__}: {first}"[:300]
    return summary, "\n".join([summary, *lines[:40], "", traceback.format_exc()[-4000:]])


def _dynamic_shapes(arch: Architecture, axes: str) -> tuple[dict[int, str] | None, ...]:
    """Positional ``dynamic_shapes`` for the dynamo exporter, named like the dynamic axes."""
    chosen = arch.dynamic_axes_for(axes)
    return tuple(chosen.get(name) or None for name in arch.input_names)


def _export(
    arch: Architecture, exporter: str, traced: Sizes, path: Path, dynamic: str | None
) -> None:
    import torch

    module = arch.build()
    args = tuple(torch.from_numpy(a) for a in arch.make_inputs(traced).values())
    path.parent.mkdir(parents=True, exist_ok=True)
    with _silenced():
        if exporter == "torchscript":
            dynamic_axes = None
            if dynamic:
                dynamic_axes = {
                    **arch.dynamic_axes_for(dynamic),
                    **arch.output_dynamic_axes_for(dynamic),
                }
            torch.onnx.export(
                module,
                args,
                str(path),
                dynamo=False,
                opset_version=TORCHSCRIPT_OPSET,
                input_names=arch.input_names,
                output_names=arch.output_names,
                dynamic_axes=dynamic_axes,
            )
        elif exporter == "dynamo":
            program = torch.onnx.export(
                module,
                args,
                dynamo=True,
                verbose=False,
                input_names=arch.input_names,
                output_names=arch.output_names,
                dynamic_shapes=_dynamic_shapes(arch, dynamic) if dynamic else None,
            )
            program.save(str(path), external_data=False)
        else:
            raise ValueError(f"unknown exporter {exporter!r}")


def export_dir(arch: Architecture, exporter: str, traced: Sizes) -> Path:
    return arch_root(arch) / exporter / f"b{traced['batch']}"


def export_model(
    arch: Architecture,
    exporter: str,
    traced: Sizes,
    *,
    dynamic: str | None = None,
    rebuild: bool = False,
) -> Export:
    """The static model, or with ``dynamic="all"``/``"batch"`` the re-export with those axes
    dynamic; from the cache when its fingerprint is current."""
    folder = export_dir(arch, exporter, traced)
    stem = {None: "model", "all": "dynamic", "batch": "dynamic-batch"}[dynamic]
    path = folder / f"{stem}.onnx"
    error_path = folder / f"{stem}.export_error.txt"
    stamp_path = folder / f"{stem}.stamp.json"
    fingerprint = _fingerprint(arch, exporter, dict(traced), dynamic, TORCHSCRIPT_OPSET)
    if not rebuild and stamp_path.exists():
        stamp = json.loads(stamp_path.read_text())
        if stamp.get("fingerprint") == fingerprint:
            if stamp.get("error") is None and path.exists():
                return Export(path, None, stamp["seconds"], cached=True)
            if stamp.get("error") is not None:
                return Export(None, stamp["error"], stamp["seconds"], cached=True)
    for stale in (path, error_path, stamp_path, path.with_name(path.name + ".data")):
        stale.unlink(missing_ok=True)
    start = time.perf_counter()
    error = None
    try:
        _export(arch, exporter, traced, path, dynamic)
        if path.with_name(path.name + ".data").exists():
            raise RuntimeError(f"{path} was written with external data")
    except Exception as exc:  # an exporter failure is a fact for the table, not ours
        summary, body = _error_text(exc)
        error = summary
        path.unlink(missing_ok=True)
        error_path.parent.mkdir(parents=True, exist_ok=True)
        error_path.write_text(body + "\n")
    seconds = time.perf_counter() - start
    stamp_path.parent.mkdir(parents=True, exist_ok=True)
    stamp_path.write_text(
        json.dumps({"fingerprint": fingerprint, "error": error, "seconds": round(seconds, 2)})
    )
    return Export(None if error else path, error, seconds, cached=False)


# --------------------------------------------------------------------------------------------
# torch eager references


def reference(
    arch: Architecture, sizes: Sizes, *, rebuild: bool = False, module: Any = None
) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
    """(inputs, torch eager outputs in order) at ``sizes``, cached as an npz."""
    path = arch_root(arch) / "references" / f"{sizes_label(sizes)}.npz"
    fingerprint = _fingerprint(arch, dict(sizes))
    if not rebuild and path.exists():
        with np.load(path) as data:
            if str(data["fingerprint"]) == fingerprint:
                inputs = {n: data[f"in.{n}"] for n in arch.input_names}
                outputs = [data[f"out.{i}"] for i in range(len(arch.outputs))]
                return inputs, outputs
    import torch

    inputs = arch.make_inputs(sizes)
    module = module if module is not None else arch.build()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = module(*(torch.from_numpy(a) for a in inputs.values()))
    outputs = [t.detach().numpy() for t in result]
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {f"in.{n}": a for n, a in inputs.items()}
    arrays.update({f"out.{i}": a for i, a in enumerate(outputs)})
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, fingerprint=np.array(fingerprint), **arrays)
    tmp.replace(path)
    return inputs, outputs


# --------------------------------------------------------------------------------------------
# the three methods


def load_symbolize() -> tuple[Any, str | None]:
    """(the Symbolize class, None) or (None, why it is not available)."""
    try:
        from onnxsurgery.passes.symbolize import Symbolize
    except Exception as exc:  # the pass is being written alongside this corpus
        return (
            None,
            f"not available: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
        )
    return Symbolize, None


def symbolize_model(
    model: onnx.ModelProto,
    dynamic_axes: Mapping[str, Mapping[int, str]],
    *,
    check: bool = True,
) -> onnx.ModelProto:
    """Run the symbolize pass as a user would: with its own ORT check on (the default)."""
    symbolize, why = load_symbolize()
    if symbolize is None:
        raise RuntimeError(why)
    axes = {k: dict(v) for k, v in dynamic_axes.items()}
    return symbolize(dynamic_axes=axes, check=check)(model).model


def _update_model_dims(arch: Architecture, model: onnx.ModelProto, axes: str) -> onnx.ModelProto:
    from onnx.tools import update_model_dims

    def dims(value_info: onnx.ValueInfoProto, template: Sequence[int | str]) -> list[int | str]:
        shape = value_info.type.tensor_type.shape.dim
        out: list[int | str] = []
        for axis, d in enumerate(shape):
            wanted = template[axis] if axis < len(template) else None
            if isinstance(wanted, str):
                out.append(wanted)
            elif d.HasField("dim_value"):
                out.append(d.dim_value)
            else:
                out.append(d.dim_param or -1)
        return out

    def template(chosen: dict[int, str]) -> list[int | str]:
        return [chosen.get(i, 0) for i in range(max(chosen, default=-1) + 1)]

    ins = arch.dynamic_axes_for(axes)
    outs = arch.output_dynamic_axes_for(axes)
    input_dims = {vi.name: dims(vi, template(ins.get(vi.name, {}))) for vi in model.graph.input}
    output_dims = {}
    for i, vi in enumerate(model.graph.output):
        name = arch.outputs[i].name if i < len(arch.outputs) else vi.name
        output_dims[vi.name] = dims(vi, template(outs.get(name, {})))
    return update_model_dims.update_inputs_outputs_dims(model, input_dims, output_dims)


class _Timeout(Exception):
    pass


@contextlib.contextmanager
def _time_limit(seconds: float | None) -> Iterator[None]:
    """Raise :class:`_Timeout` after ``seconds`` (main thread only; otherwise no limit)."""
    import threading

    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return

    def _alarm(signum: int, frame: Any) -> None:
        raise _Timeout(f"took longer than {seconds:g} s")

    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _short(exc: BaseException) -> str:
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {first}"[:300]


def apply_method(
    method: str,
    arch: Architecture,
    exporter: str,
    traced: Sizes,
    *,
    axes: str = "all",
    rebuild: bool = False,
    timeout: float | None = 300,
) -> tuple[onnx.ModelProto | None, str | None, str]:
    """(dynamic model or None, why not, long detail) for one method on one static export."""
    if method == "re-export":
        exp = export_model(arch, exporter, traced, dynamic=axes, rebuild=rebuild)
        if not exp.ok:
            return None, f"export failed: {exp.error}", exp.error or ""
        return onnx.load(str(exp.path)), None, ""
    static = export_model(arch, exporter, traced, rebuild=rebuild)
    if not static.ok:
        return None, "n/a: static export failed", static.error or ""
    model = onnx.load(str(static.path))
    if method == "update_model_dims":
        try:
            return _update_model_dims(arch, model, axes), None, ""
        except Exception as exc:
            return None, f"update_model_dims raised {_short(exc)}", traceback.format_exc()
    if method == "symbolize":
        symbolize, why = load_symbolize()
        if symbolize is None:
            return None, why, why or ""
        from onnxsurgery.errors import PassError

        try:
            with _time_limit(timeout):
                return symbolize_model(model, arch.dynamic_axes_for(axes)), None, ""
        except PassError as exc:
            return None, f"blocked: {str(exc).splitlines()[0]}"[:300], _pass_error_text(exc)
        except _Timeout as exc:
            return None, f"symbolize {exc}", ""
        except Exception as exc:
            tb = traceback.format_exc().splitlines()
            return None, f"crashed: {_short(exc)}", "\n".join(tb[-12:])
    raise ValueError(f"unknown method {method!r}; expected one of {', '.join(METHODS)}")


def _pass_error_text(exc: BaseException) -> str:
    details = getattr(exc, "details", None) or []
    node = getattr(exc, "node", None)
    return "\n".join([str(exc), *(f"  {d}" for d in details), f"node: {node}"])


# --------------------------------------------------------------------------------------------
# checking on ONNX Runtime


@dataclass
class SizeResult:
    """One size: passed, or the first line of why not."""

    sizes: dict[str, int]
    ok: bool
    message: str
    max_abs_err: float | None = None


@dataclass
class CaseResult:
    """One (architecture, exporter, traced batch, method): pass when every size passes.

    ``status``: ``pass``, ``fail`` (the method produced a model that crashed or mismatched, or the
    method itself refused / failed), or ``n/a`` (nothing to work on: the static export failed).
    """

    arch: str
    exporter: str
    batch: int
    axes: str
    method: str
    status: str
    reason: str
    detail: str = ""
    sizes: list[SizeResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "pass"

    @property
    def key(self) -> str:
        return f"{self.arch}/{self.exporter}/b{self.batch}/{self.axes}/{self.method}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _session(model: onnx.ModelProto) -> Any:
    from onnxsurgery.validation.runtime import create_session

    return create_session(model, "cpu", threads=1)


def _ort_message(exc: BaseException) -> str:
    from onnxsurgery.validation.runtime import describe_ort_error

    message, node = describe_ort_error(exc)
    m = re.search(
        r"while running (\w+) node\. Name:'([^']*)' Status Message: (?:\S+:\d+ [^)]*\) )?(.*)",
        message,
    )
    if m:
        op, name, rest = m.groups()
        rest = re.sub(r"^\S+\.(?:h|cc):\d+ ", "", rest)
        return f"{op} {name}: {rest}"[:300]
    if node and node not in message:
        message = f"node {node}: {message}"
    return message[:300]


def check_sizes(
    model: onnx.ModelProto,
    arch: Architecture,
    sizes_list: Sequence[Sizes],
    *,
    rebuild: bool = False,
) -> list[SizeResult]:
    """Run ``model`` on ORT CPU at each size and compare every output with torch eager."""
    try:
        session = _session(model)
    except Exception as exc:
        msg = f"ORT load: {_ort_message(exc)}"
        return [SizeResult(dict(s), False, msg) for s in sizes_list]
    out_names = [o.name for o in session.get_outputs()]
    in_names = [i.name for i in session.get_inputs()]
    results = []
    for sizes in sizes_list:
        inputs, expected = reference(arch, sizes, rebuild=rebuild)
        feeds = {n: inputs[n] for n in in_names if n in inputs}
        missing = [n for n in in_names if n not in inputs]
        if missing:
            results.append(SizeResult(dict(sizes), False, f"model wants inputs {missing}"))
            continue
        try:
            from onnxsurgery.validation.runtime import quiet_stderr

            with quiet_stderr():
                got = session.run(out_names, feeds)
        except Exception as exc:
            results.append(SizeResult(dict(sizes), False, f"ORT: {_ort_message(exc)}"))
            continue
        if len(got) != len(expected):
            results.append(
                SizeResult(dict(sizes), False, f"{len(got)} outputs, torch has {len(expected)}")
            )
            continue
        worst = 0.0
        problem = ""
        for name, g, e in zip(out_names, got, expected, strict=True):
            problem, max_err = mismatch(name, g, e)
            worst = max(worst, max_err)
            if problem:
                break
        results.append(SizeResult(dict(sizes), not problem, problem or "ok", worst))
    return results


def mismatch(name: str, got: np.ndarray, expected: np.ndarray) -> tuple[str, float]:
    """(what is wrong with output ``name`` against torch's, "" if nothing; its max abs err):
    each element within ``ATOL + RTOL * |torch|``, or within :data:`SCALE_RTOL` of the
    output's largest finite magnitude."""
    if tuple(got.shape) != tuple(expected.shape):
        return f"{name}: shape {list(got.shape)} != torch {list(expected.shape)}", 0.0
    g64, e64 = got.astype(np.float64), expected.astype(np.float64)
    err = np.abs(g64 - e64)
    err = np.where(np.isnan(g64) & np.isnan(e64), 0.0, err)
    err = np.where(np.isnan(err), np.inf, err)
    max_err = float(err.max()) if err.size else 0.0
    scale = _scale(e64)
    allowed = np.maximum(ATOL + RTOL * np.abs(np.nan_to_num(e64)), SCALE_RTOL * scale)
    if np.any(err > allowed):
        return f"{name}: max abs err {max_err:.3g} (output scale {scale:.3g})", max_err
    return "", max_err


def _scale(values: np.ndarray) -> float:
    """The largest finite magnitude of ``values`` (0 for none)."""
    finite = np.abs(values[np.isfinite(values)])
    return float(finite.max()) if finite.size else 0.0


def evaluate(
    arch: Architecture | str,
    exporter: str,
    batch: int,
    method: str,
    *,
    axes: str = "all",
    rebuild: bool = False,
    keep_dir: Path | None = None,
    timeout: float | None = 300,
) -> CaseResult:
    """Apply ``method`` to the static export at traced ``batch`` and check it at every size.

    ``axes``: ``all`` makes every symbolic axis dynamic (batch and sequence, ...); ``batch`` only
    the batch axis, the others staying at their traced size. The sizes checked are the traced
    size (a method must not break what already worked) and the architecture's check sizes. With
    ``keep_dir`` the method's model is saved there.
    """
    arch = ARCHITECTURES[arch] if isinstance(arch, str) else arch
    traced = next(t for t in arch.traced if t["batch"] == batch)
    start = time.perf_counter()
    model, why, detail = apply_method(
        method, arch, exporter, traced, axes=axes, rebuild=rebuild, timeout=timeout
    )
    if model is None:
        status = "n/a" if why and why.startswith("n/a") else "fail"
        return CaseResult(
            arch.name, exporter, batch, axes, method, status, why or "", detail,
            seconds=time.perf_counter() - start,
        )  # fmt: skip
    if keep_dir is not None:
        keep_dir.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(Exception):
            onnx.save(model, str(keep_dir / f"{method}-{axes}.onnx"))
    sizes = check_sizes(model, arch, arch.sizes_for(traced, axes), rebuild=rebuild)
    failed = [s for s in sizes if not s.ok]
    if failed:
        first = failed[0]
        reason = f"{sizes_label(first.sizes)}: {first.message}"
        if len(failed) > 1:
            reason += f" (+{len(failed) - 1} more sizes)"
        status = "fail"
        if method == "symbolize":
            # The pass ran its own check and accepted this model: a silently wrong result.
            reason = f"{reason} [its own check passed]"
    else:
        reason = f"{len(sizes)} sizes ok"
        status = "pass"
    return CaseResult(
        arch.name, exporter, batch, axes, method, status, reason, detail, sizes,
        time.perf_counter() - start,
    )  # fmt: skip
