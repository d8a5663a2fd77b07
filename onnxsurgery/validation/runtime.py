"""Running models on ONNX Runtime: provider choice, sessions, and readable errors.

``auto`` uses CUDA when a real probe session gets it and CPU otherwise, saying why in one line;
``cuda`` fails with :class:`~onnxsurgery.errors.ProviderError` when CUDA cannot load; ``cpu`` is
CPU. ``get_available_providers()`` lists CUDA wherever ``onnxruntime-gpu`` is installed, even when
its CUDA libraries are missing, so it is never trusted on its own. ONNX Runtime's own log lines
are kept off the terminal.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import re
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

import numpy as np
import onnx

from onnxsurgery.errors import ProviderError, UsageError
from onnxsurgery.lazy import lazy_module
from onnxsurgery.limits import LimitExceeded, check_sizes
from onnxsurgery.limits import current as current_limits
from onnxsurgery.model.io import (
    is_large,
    read_model_file,
    save_model,
)
from onnxsurgery.model.walk import default_opset
from onnxsurgery.validation import watchdog
from onnxsurgery.validation.mapped_weights import (
    MAPPED_BYTES,
    filled_from_disk,
    filled_from_file,
    held_bytes,
    write_mapped,
)
from onnxsurgery.validation.ort_installs import warn_if_several
from onnxsurgery.validation.session_weights import (
    SharedWeight,
    external,
    goes_by_path,
    session_weights,
    split_weights,
)

__all__ = [
    "PROVIDERS",
    "ProviderChoice",
    "resolve_provider",
    "create_session",
    "session_weights",
    "goes_by_path",
    "MAPPED_BYTES",
    "run_session",
    "run_model",
    "run_many",
    "describe_ort_error",
    "quiet_stderr",
    "OrtLimits",
    "ort_limits",
    "session_error",
    "too_new_hint",
]

PROVIDERS = ("auto", "cuda", "cpu")
_CUDA = "CUDAExecutionProvider"
_CPU = "CPUExecutionProvider"


if TYPE_CHECKING:  # mypy reads the module; a lazy module's attributes are no types to it
    import onnxruntime as ort
else:
    #: ONNX Runtime, imported when first used, not when onnxsurgery is: a chain that never runs
    #: a model (``run --passes cleanup``) never pays its import. The project's one deferred
    #: import (``validation/session_weights.py`` takes the same module); every other module
    #: imports what it needs at its top.
    ort = lazy_module("onnxruntime")


@functools.cache
def _quiet_ort() -> None:
    """Keep ONNX Runtime's own log lines (warnings included) off the terminal; before any session.
    First, one line on stderr where two ORT distributions share the install (ort_installs.py)."""
    warn_if_several()
    ort.set_default_logger_severity(3)


@dataclass(frozen=True)
class ProviderChoice:
    """The provider a session will use, and the one line that says why."""

    requested: str
    provider: str
    note: str

    @property
    def providers(self) -> list[str]:
        return [self.provider] if self.provider == _CPU else [self.provider, _CPU]

    @property
    def short(self) -> str:
        return "cuda" if self.provider == _CUDA else "cpu"


#: The file fd 2 is sent to while quiet, by process id: one per process, reused (making a
#: temporary file per ORT run slowed every validation case).
_sinks: dict[int, IO[bytes]] = {}


@contextlib.contextmanager
def quiet_stderr() -> Iterator[list[str]]:
    """Send what native code writes to fd 2 into a buffer (yielded lines) instead of the terminal."""
    captured: list[str] = []
    try:
        saved = os.dup(2)
    except OSError:  # no real fd 2 (some embedded hosts): nothing to silence
        yield captured
        return
    sink = _sinks.get(os.getpid())
    if sink is None:
        sink = _sinks[os.getpid()] = tempfile.TemporaryFile(mode="w+b")
    fd = sink.fileno()
    start = os.lseek(fd, 0, os.SEEK_END)  # past what an enclosing quiet_stderr holds
    os.dup2(fd, 2)
    try:
        yield captured
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        end = os.lseek(fd, 0, os.SEEK_END)
        if end > start:
            captured.extend(os.pread(fd, end - start, start).decode("utf-8", "replace").splitlines())
            os.ftruncate(fd, start)
            os.lseek(fd, start, os.SEEK_SET)  # an enclosing capture writes on from there


def _probe_model() -> bytes:
    node = onnx.helper.make_node("Add", ["a", "a"], ["b"])
    graph = onnx.helper.make_graph(
        [node],
        "cuda_probe",
        [onnx.helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, [1])],
        [onnx.helper.make_tensor_value_info("b", onnx.TensorProto.FLOAT, [1])],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def _cuda_reason(lines: Sequence[str]) -> str:
    for line in lines:
        m = re.search(r"(lib[\w.+-]+\.so[\w.]*): cannot open shared object file", line)
        if m:
            return f"{m.group(1)} not found"
    for line in lines:
        if "CUDA" in line or "cuda" in line:
            return re.sub(r"^.*?\] ", "", line).strip()[:160]
    return "CUDA did not load"


#: The NVIDIA driver's library, which every CUDA program loads, by platform.
_DRIVER_LIBRARY = {"linux": "libcuda.so.1", "win32": "nvcuda.dll"}


def _no_driver() -> str | None:
    """Why CUDA cannot run here before anything is tried (no NVIDIA driver), or None. A
    machine without one learns it at once, not from loading the CUDA libraries and a probe
    session."""
    import ctypes
    import sys

    library = _DRIVER_LIBRARY.get(sys.platform)
    if library is None:
        return None  # elsewhere the probe session says
    try:
        ctypes.CDLL(library)
    except OSError:
        return f"the NVIDIA driver's {library} is not found"
    return None


@functools.cache
def _probe_cuda() -> tuple[bool, str]:
    """Whether a real session gets CUDA, and if not, why. Probed once per process."""
    _quiet_ort()
    if _CUDA not in ort.get_available_providers():
        return False, f"this onnxruntime build ({ort.__version__}) has no CUDA provider"
    reason = _no_driver()
    if reason is not None:
        return False, reason
    with quiet_stderr() as lines:
        preload = getattr(ort, "preload_dlls", None)
        if preload is not None:
            printed = io.StringIO()  # preload_dlls print()s "Failed to load ..." to stdout
            with contextlib.suppress(Exception), contextlib.redirect_stdout(printed):
                preload()
            lines.extend(printed.getvalue().splitlines())
        try:
            options = ort.SessionOptions()
            options.log_severity_level = 3
            session = ort.InferenceSession(_probe_model(), options, providers=[_CUDA, _CPU])
            got = session.get_providers()
        except Exception as exc:  # a failed CUDA init is an answer, not an error
            return False, f"CUDA session failed: {str(exc).splitlines()[0][:160]}"
    if got and got[0] == _CUDA:
        return True, "CUDA loaded"
    return False, _cuda_reason(lines)


@dataclass(frozen=True)
class OrtLimits:
    """The newest IR version and ``ai.onnx`` opset the installed ONNX Runtime loads."""

    ir_version: int
    opset: int


def _probe_loads(ir_version: int, opset: int) -> str | None:
    """Load a one-Relu model at ``ir_version``/``opset`` on CPU; None if it loads, else ORT's error."""
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Relu", ["x"], ["y"])],
        "ort_limits_probe",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    model.ir_version = ir_version
    return session_error(model)


def session_error(model: onnx.ModelProto) -> str | None:
    """None when ONNX Runtime's CPU provider loads ``model``; else ORT's message, one line."""
    try:
        create_session(model, ProviderChoice("cpu", _CPU, "CPU"), threads=1, spin=False)
    except Exception as exc:  # ORT refusing the model is the answer asked for
        return describe_ort_error(exc)[0]
    return None


@functools.cache
def ort_limits() -> OrtLimits:
    """Ask the installed ONNX Runtime (once per process) which IR version and opset it loads.

    ORT names its maximum in the refusal ("max supported IR version: 13", "official support
    for domain ai.onnx is till opset 26"); when a message does not, versions are tried downward.
    """
    newest_ir = int(onnx.IR_VERSION)  # an enum member in onnx's stubs
    newest_opset = onnx.defs.onnx_opset_version()
    safe_opset = 13  # every ORT this project supports (>= 1.18) loads Relu at opset 13
    error = _probe_loads(newest_ir, safe_opset)
    ir_version = newest_ir
    if error is not None:
        m = re.search(r"max supported IR version: (\d+)", error)
        ir_version = int(m.group(1)) if m else newest_ir - 1
        while ir_version > 3 and _probe_loads(ir_version, safe_opset) is not None:
            ir_version -= 1
    error = _probe_loads(ir_version, newest_opset)
    opset = newest_opset
    if error is not None:
        m = re.search(r"domain ai\.onnx is till opset (\d+)", error)
        opset = int(m.group(1)) if m else newest_opset - 1
        while opset > safe_opset and _probe_loads(ir_version, opset) is not None:
            opset -= 1
    return OrtLimits(ir_version, opset)


def too_new_hint(model: onnx.ModelProto) -> str | None:
    """One line when ``model`` is newer than the installed ORT loads (IR or opset), naming the
    ``compat`` pass; None otherwise."""
    limits = ort_limits()
    opset = default_opset(model)
    parts = []
    if model.ir_version > limits.ir_version:
        parts.append(f"IR version {model.ir_version} (ORT takes <= {limits.ir_version})")
    if opset > limits.opset:
        parts.append(f"opset {opset} (ORT takes <= {limits.opset})")
    if not parts:
        return None
    return (
        f"the model's {' and '.join(parts)} {'are' if len(parts) > 1 else 'is'} newer than "
        f"onnxruntime {ort.__version__} "
        "accepts; `onnxsurgery run MODEL --passes compat` lowers it where nothing needs the newer one"
    )


def resolve_provider(requested: str = "auto") -> ProviderChoice:
    """Decide which ONNX Runtime provider to use for ``auto``, ``cuda`` or ``cpu``."""
    requested = (requested or "auto").lower()
    if requested not in PROVIDERS:
        raise UsageError(f"provider {requested!r} is not one of {', '.join(PROVIDERS)}")
    if requested == "cpu":
        return ProviderChoice("cpu", _CPU, "CPU (asked for)")
    ok, reason = _probe_cuda()
    if ok:
        return ProviderChoice(requested, _CUDA, "CUDA (probe session loaded it)")
    if requested == "cuda":
        raise ProviderError(
            f"--provider cuda: CUDA cannot load here ({reason}); install onnxsurgery[cuda] "
            "for pip-installed CUDA libraries, or use --provider cpu"
        )
    return ProviderChoice("auto", _CPU, f"CPU (CUDA unavailable: {reason})")


def create_session(
    model: onnx.ModelProto | str | os.PathLike,
    provider: str | ProviderChoice = "auto",
    *,
    threads: int | None = None,
    spin: bool = True,
    prepack: bool = False,
    share_with: ort.InferenceSession | Mapping[str, SharedWeight] | None = None,
    bare: onnx.ModelProto | None = None,
    mapped: bool = False,
    optimize: bool = True,
) -> ort.InferenceSession:
    """An InferenceSession for ``model`` (a ModelProto or a path) on the chosen provider.

    ``spin=False`` stops ORT's worker threads from busy-waiting after each run, so numpy work
    between runs (validation's comparisons) gets the CPU.

    ``prepack=False`` (the default) keeps ORT from making a packed copy of every MatMul/Gemm
    weight: a session run a few times (a check, a validation) is built faster, in less memory,
    and every session made here computes alike (a packed weight rounds otherwise), so the
    run's validation on symbolize's check session says what one of its own would.
    ``prepack=True`` for a session run many times.

    ``share_with``: another session made here, or its :func:`session_weights` (kept after the
    session is gone); each weight of ``model`` with the name, type, shape and bytes of one of
    its weights is handed to ORT as that same buffer, not a second copy (a rewritten model
    beside its original shares nearly all its weights). A placeholder weight of a weightless
    copy (``model.io.weightless``) takes the shared weight of its name, type and shape.

    ``bare``: ``weightless(model)``, where the caller has made it already (it is left as it
    is): making another reads every weight's bytes once more.

    A model of 2 GB and more, or one of :data:`MAPPED_BYTES` and more with ``mapped=True`` (a
    session that outlives none of the caller's copies of the weights, such as the check's), runs
    on weights ORT maps from a data file written once, which a session sharing them maps too.

    ``optimize=False`` turns ONNX Runtime's graph optimizations off: each node runs its own
    kernel, none fused with its neighbours (ORT fuses a MatMul and its Add into a Gemm, an Add
    and its LayerNormalization into a SkipLayerNormalization, only where the shapes are static),
    so two graphs that compute alike round alike (symbolize's check, :mod:`passes.symbolize.check`).

    Raises whatever ONNX Runtime raises when the model is invalid; callers translate it with
    :func:`describe_ort_error` into their own error.
    """
    choice = provider if isinstance(provider, ProviderChoice) else resolve_provider(provider)
    if isinstance(model, onnx.ModelProto):
        check_sizes(model)  # before ORT could try to build what the graph describes
    _quiet_ort()
    options = _session_options(threads, spin, prepack, not prepack and _casts_weights(model, choice))
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    shared = share_with if isinstance(share_with, Mapping) else session_weights(share_with)
    with quiet_stderr():
        if not isinstance(model, onnx.ModelProto):
            return ort.InferenceSession(str(model), options, providers=choice.providers)
        if not filled_from_disk(model, shared) and (
            is_large(model)
            or filled_from_file(model, shared)
            or (mapped and held_bytes(model) >= MAPPED_BYTES)
        ):
            return _session_over_file(model, shared, options, choice.providers, bare)
        return _session_over_weights(model, shared, options, choice.providers, bare)


#: Weight types ORT's CPU provider has no kernels for in most ops: it casts them to float32.
_CAST_ON_CPU = (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)


def _casts_weights(model: onnx.ModelProto | str | os.PathLike, choice: ProviderChoice) -> bool:
    """Whether ``model`` (a ModelProto, or a path: its graph read, its weights left on disk)
    runs on the CPU provider with weights of a type it casts to float32 (:data:`_CAST_ON_CPU`)."""
    if choice.provider != _CPU:
        return False
    if not isinstance(model, onnx.ModelProto):
        try:
            model = read_model_file(model, check=False, weights_on_disk=True).model
        except Exception:  # noqa: BLE001 - ORT's own error says what is wrong with the file
            return False
    return any(t.data_type in _CAST_ON_CPU for t in model.graph.initializer)


def _session_options(
    threads: int | None, spin: bool, prepack: bool, cast_as_run: bool = False
) -> ort.SessionOptions:
    """ORT's session options for :func:`create_session`'s ``threads``, ``spin`` and
    ``prepack``, its own log kept to errors.

    ``cast_as_run`` (a session run a few times over float16 weights on CPU): ORT inserts a Cast
    to float32 before every op without a float16 kernel; above basic optimizations it folds the
    Casts of weights into a float32 copy of each (the session then holds twice the model), and
    its default order runs the Casts of every weight first. Basic optimizations, Casts run next
    to the op that reads them, no arena to keep what they made: a TinyLlama-1.1B fp16 check
    session peaks at 1.15x the model instead of 2.2x, and is built in a third of the time."""
    options = ort.SessionOptions()
    if cast_as_run:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.execution_order = ort.ExecutionOrder.PRIORITY_BASED
        options.enable_cpu_mem_arena = False
    options.log_severity_level = 3
    if threads:
        options.intra_op_num_threads = threads
    if not spin:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if not prepack:
        options.add_session_config_entry("session.disable_prepacking", "1")
    return options


def _session_over_weights(
    model: onnx.ModelProto,
    shared: Mapping[str, SharedWeight],
    options: ort.SessionOptions,
    providers: list[str],
    made: onnx.ModelProto | None = None,
) -> ort.InferenceSession:
    """A session that parses ``model`` without its weights and takes them as OrtValues, or maps
    them from the file they were loaded from (:func:`split_weights`); by path, weights and all,
    where what it would parse is still over 2 GB."""
    bare, weights, arrays, folder = split_weights(model, shared, made)
    if folder is not None:  # weights ORT maps from the file the model was loaded from
        options.add_session_config_entry(
            "session.model_external_initializers_file_folder_path", folder
        )
    if is_large(bare, left_out=external):
        with tempfile.TemporaryDirectory(prefix="onnxsurgery-session-") as tmp:
            path = save_model(model, Path(tmp) / "model.onnx", external_data=True)
            return ort.InferenceSession(str(path), options, providers=providers)
    options.add_external_initializers(list(weights), list(weights.values()))
    session = ort.InferenceSession(bare.SerializeToString(), options, providers=providers)
    # ORT reads these buffers in place for the session's life: keep them with it.
    session._onnxsurgery_weights = weights
    session._onnxsurgery_arrays = arrays
    return session


def _session_over_file(
    model: onnx.ModelProto,
    shared: Mapping[str, SharedWeight],
    options: ort.SessionOptions,
    providers: list[str],
    made: onnx.ModelProto | None = None,
) -> ort.InferenceSession:
    """A session over ``model`` with its weights in a data file ORT maps into memory instead of
    copying (:func:`~onnxsurgery.validation.mapped_weights.write_mapped`)."""
    path, folder, weights = write_mapped(model, shared, made)
    session = ort.InferenceSession(str(path), options, providers=providers)
    # The folder goes with the last session or mapping that holds it (ORT keeps its mapping).
    session._onnxsurgery_arrays = weights
    del folder
    return session


def run_model(
    model: onnx.ModelProto | ort.InferenceSession,
    feeds: Mapping[str, np.ndarray],
    provider: str | ProviderChoice = "auto",
    output_names: Sequence[str] | None = None,
) -> dict[str, np.ndarray]:
    """Run once and return outputs by name."""
    session = model if isinstance(model, ort.InferenceSession) else create_session(model, provider)
    names = list(output_names) if output_names else [o.name for o in session.get_outputs()]
    values = run_session(session, names, feeds)
    return dict(zip(names, values, strict=True))


def run_session(
    session: ort.InferenceSession, names: Sequence[str], feeds: Mapping[str, np.ndarray]
) -> list[np.ndarray]:
    """``session.run`` under the ``run_seconds`` limit: a timer sets ORT's terminate flag, and
    a run stopped that way raises LimitExceeded naming the limit."""
    with quiet_stderr():
        return _run_timed(session, names, feeds)


def run_many(
    session: ort.InferenceSession,
    feeds: Sequence[Mapping[str, np.ndarray]],
    workers: int | None = None,
) -> list[dict[str, np.ndarray] | Exception]:
    """Run ``session`` once on each of ``feeds``, up to ``workers`` runs at a time, and return
    in order each run's outputs by name or the exception it raised (for the caller to judge in
    its own order). Each run is the run :func:`run_model` makes, under the ``run_seconds`` limit:
    ORT runs a session from several threads at once, each run computing what it computes alone,
    so only the wall time changes (the check's runs at other sizes on 2 cores). Feeds given
    more than once (the same arrays, or equal ones) run once, and share that run's outputs.
    ``workers`` defaults to the CPU count, at most 4."""
    names = [o.name for o in session.get_outputs()]
    workers = workers or min(4, os.cpu_count() or 1)
    unique, where = _distinct(feeds)
    if len(unique) < len(feeds):
        done = run_many(session, unique, workers)
        return [done[k] for k in where]

    def one(inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray] | Exception:
        try:
            return dict(zip(names, _run_timed(session, names, inputs), strict=True))
        except Exception as exc:  # noqa: BLE001 - handed back, judged by the caller
            return exc

    # One redirection of fd 2 around every run: quiet_stderr swaps a process-wide descriptor,
    # which threads entering and leaving it each on their own would restore out of order
    # (fd 2 left on the sink, or one thread's lines cut by another's).
    with quiet_stderr():
        if workers <= 1 or len(feeds) <= 1:
            return [one(f) for f in feeds]
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(one, feeds))


def _distinct(
    feeds: Sequence[Mapping[str, np.ndarray]],
) -> tuple[list[Mapping[str, np.ndarray]], list[int]]:
    """The distinct feeds, in order, and where each of ``feeds`` is among them."""
    unique: list[Mapping[str, np.ndarray]] = []
    where = []
    for feed in feeds:
        k = next(
            (
                k
                for k, seen in enumerate(unique)
                if seen.keys() == feed.keys()
                and all(
                    seen[n].shape == a.shape and seen[n].dtype == a.dtype and np.array_equal(seen[n], a)
                    for n, a in feed.items()
                )
            ),
            len(unique),
        )
        if k == len(unique):
            unique.append(feed)
        where.append(k)
    return unique, where


def _run_timed(
    session: ort.InferenceSession, names: Sequence[str], feeds: Mapping[str, np.ndarray]
) -> list[np.ndarray]:
    """``session.run`` under the ``run_seconds`` limit (see :func:`run_session`), fd 2 as it is."""
    budget = current_limits().run_seconds
    options = ort.RunOptions()
    deadline = watchdog.arm(budget, lambda: setattr(options, "terminate", True))
    try:
        return session.run(list(names), dict(feeds), options)
    except Exception:
        if options.terminate:
            raise LimitExceeded(
                f"ONNX Runtime stopped after {budget:g} s, {current_limits().hint('run_seconds')}"
            ) from None
        raise
    finally:
        watchdog.disarm(deadline)


_NODE_PATTERNS = (
    re.compile(r"[Nn]ode \(([^)]*)\)\s*[Oo]p(?:Type)? \(([^)]*)\)"),
    re.compile(r"Non-zero status code returned while running (\w+) node\. Name:'([^']*)'"),
    re.compile(r"[Nn]ode:\s*([^\s]+)\s+[Oo]utput:"),
)


def describe_ort_error(exc: BaseException) -> tuple[str, str | None]:
    """Turn an ONNX Runtime exception into ``(one-line message, node name or None)``."""
    text = str(exc).strip()
    node = None
    for pattern in _NODE_PATTERNS:
        m = pattern.search(text)
        if m:
            node = m.group(2) if pattern is _NODE_PATTERNS[1] else m.group(1)
            break
    message = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", text).splitlines()[0]
    message = re.sub(r"\s+", " ", message)[:400]
    return message, node
