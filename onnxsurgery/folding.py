"""Constant folding engine: onnxsim in a forked child, onnx-graphsurgeon as the fallback.

What the ``fold-constants`` pass needs, kept here so other passes can reuse it:

- :func:`run_onnxsim` runs ``onnxsim.simplify`` on a model, by default in a forked child process,
  so that a native crash (segfault, abort) inside onnxsim, onnx-optimizer or ONNX Runtime becomes
  a :class:`FolderFailed` instead of killing the caller, and everything native code prints goes to
  a log instead of the terminal. Models near the 2 GB protobuf limit go through onnxsim's
  path-based entry point (``simplify(path, output_path=...)``) with external data.
- :func:`fold_with_graphsurgeon` is the fallback: onnx-graphsurgeon's ``fold_constants`` (never
  folding random ops) + ``cleanup`` + ``toposort``.
- :func:`~onnxsurgery.graph_equality.same_graph` (its own module) decides whether a folder changed anything that matters,
  :func:`pinned_dims` whether it turned a symbolic dim of the signature into a number, and
  :func:`op_delta` / :func:`format_bytes` write the diagnostics.
- :func:`parse_size` / :func:`parse_input_shapes` / :func:`known_optimizers` validate options.

Isolation uses ``fork``: a spawned interpreter costs ~5 s per call (``import onnxsim`` alone
takes ~4.5 s). A fork still costs 2-3.5x onnxsim's own time on models up to 100 MB (see
:data:`AUTO_ISOLATE_BYTES`), so by default (``isolate="auto"``) only models over 2 GB fork;
smaller ones run in-process, where a native crash ends the process (the pipeline's atomic save
still leaves no output file behind); ``isolate=True`` forks always. Where ``fork`` does not
exist, onnxsim runs in-process.
"""

from __future__ import annotations

import contextlib
import faulthandler
import io
import json
import os
import re
import signal
import sys
import tempfile
import traceback
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx
from onnx import numpy_helper

from onnxsurgery.graph_equality import constant_node_tensor
from onnxsurgery.model_io import LARGE_MODEL_BYTES, is_large, tensor_bytes, tensor_nbytes
from onnxsurgery.report import op_counts

__all__ = [
    "FolderFailed",
    "OnnxsimSettings",
    "FoldedModel",
    "RANDOM_OPS",
    "BATCHED_GEMM",
    "parse_size",
    "parse_input_shapes",
    "known_optimizers",
    "onnxsim_version",
    "fork_available",
    "wants_isolation",
    "AUTO_ISOLATE_BYTES",
    "run_onnxsim",
    "fold_with_graphsurgeon",
    "constants_to_initializers",
    "pinned_dims",
    "op_delta",
    "format_bytes",
]

#: Ops whose output differs between runs: folding them would freeze one draw into the model.
RANDOM_OPS = frozenset(
    {
        "RandomNormal",
        "RandomNormalLike",
        "RandomUniform",
        "RandomUniformLike",
        "Multinomial",
        "Bernoulli",
    }
)

#: onnxsim refuses tensor size thresholds at or above this (``tensor_size_threshold should be
#: less than 2GB``).
MAX_SIZE_THRESHOLD = 2**31 - 9999
#: ``isolate="auto"`` forks for models with at least this many bytes of tensors: those that go
#: to onnxsim by path. There the child writes the input file from its copy-on-write view of the
#: model, so this process never holds a second copy, and a crash late in a long run costs most.
#: Below it a fork is not worth its cost (bench/bench_fold_constants.py, 2-core machine): +25-35
#: ms on a ~12 ms fold of a small fixture (3.4x), +70-100 ms on the ~60 ms fold of a 12 MB
#: transformer (2x), +0.8-1.2 s on the 1.4 s fold of a 100 MB MLP (1.6-1.9x): first-touch page
#: faults in the child, and the result serialized back through a file.
AUTO_ISOLATE_BYTES = LARGE_MODEL_BYTES

_UNITS = {"B": 1, "KB": 2**10, "MB": 2**20, "GB": 2**30}
#: onnxsim runs this rewrite by default although it is not in its "default optimizers" list (it
#: is registered as an "other" pass and opted into in C++): MatMul+Add on a rank-3 input becomes
#: Reshape -> Gemm -> Reshape. On a symbolized model each one also needs Shape/Slice/Concat to
#: rebuild the dynamic shape: attention_block after symbolize goes 38 -> 45 nodes with it, 38 -> 29
#: without. fold-constants leaves it off unless ``batched_gemm=true``.
BATCHED_GEMM = "fuse_matmul_add_bias_into_gemm_batched"
_DEFAULT_EXTRA_OPTIMIZERS = (BATCHED_GEMM,)


# ---------------------------------------------------------------------------------------------
# options


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
                f"size {value!r} is not understood; write bytes or a number with B, KB, MB or GB "
                "(e.g. '1MB', '512KB')"
            )
        size = int(float(m.group(1)) * _UNITS[(m.group(2) or "B").upper()])
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
    if isinstance(value, Mapping):
        items = [(str(k), v) for k, v in value.items()]
    else:
        texts = [value] if isinstance(value, str) else list(value)
        items = []
        for text in texts:
            if not isinstance(text, str) or ":" not in text:
                raise ValueError(f"input shape {text!r} must read NAME:DIMS, e.g. 'x:1x3x224x224'")
            name, _, dims = text.rpartition(":")
            items.append((name.strip(), [d for d in re.split(r"[x,]", dims.strip()) if d]))
    shapes: dict[str, list[int]] = {}
    for name, dims in items:
        if not name:
            raise ValueError(f"input shape {dims!r} has no input name; write NAME:DIMS")
        try:
            parsed = [int(d) for d in dims]
        except (TypeError, ValueError):
            raise ValueError(
                f"input shape for {name!r} must be whole numbers like 1x3x224x224, got {dims!r}"
            ) from None
        if not parsed or any(d <= 0 for d in parsed):
            raise ValueError(f"input shape for {name!r} needs positive dims, got {dims!r}")
        if name in shapes:
            raise ValueError(f"input {name!r} is given two shapes")
        shapes[name] = parsed
    if not shapes:
        raise ValueError("input_shapes is empty")
    return shapes


def known_optimizers() -> list[str]:
    """onnx-optimizer pass names onnxsim runs by default (the names ``skip=[...]`` accepts)."""
    import onnxsim.onnxsim_cpp2py_export as C

    names = list(C._list_optimizers())
    names += [n for n in _DEFAULT_EXTRA_OPTIMIZERS if n not in names]
    return names


def onnxsim_version() -> str:
    from onnxsim import version

    return str(getattr(version, "version", "?")).lstrip("v")


def fork_available() -> bool:
    """Whether the folder can run in a forked child (POSIX with ``os.fork``)."""
    return hasattr(os, "fork") and sys.platform != "win32"


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


@dataclass
class FoldedModel:
    """onnxsim's result: the model, whether its own ``check_n`` check passed, where it ran."""

    model: onnx.ModelProto
    check_ok: bool
    where: str
    log: list[str] = field(default_factory=list)


class FolderFailed(Exception):
    """The folder raised, crashed, or produced no model. ``log`` holds its console output."""

    def __init__(self, message: str, *, crashed: bool = False, log: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.crashed = crashed
        self.log = list(log)


# ---------------------------------------------------------------------------------------------
# running onnxsim


@contextlib.contextmanager
def _captured_output(log_path: Path) -> Iterator[None]:
    """Send fd 1/2 and sys.stdout/sys.stderr into ``log_path`` for the duration (in-process)."""
    with open(log_path, "ab") as sink:
        saved = []
        try:
            for fd in (1, 2):
                try:
                    saved.append((fd, os.dup(fd)))
                    os.dup2(sink.fileno(), fd)
                except OSError:  # no such fd in this host: nothing to silence there
                    continue
            buffer = io.StringIO()
            with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
                try:
                    yield
                finally:
                    sink.write(buffer.getvalue().encode("utf-8", "replace"))
        finally:
            for fd, copy in saved:
                os.dup2(copy, fd)
                os.close(copy)


def _save_for_onnxsim(model: onnx.ModelProto, path: Path) -> None:
    """Write a (large) model we own with its initializers of 1 KB or more in ``<name>.data``.

    Moves those tensors' bytes out of ``model``. Each tensor's bytes are read once (``raw_data``
    is a copy each time it is read; ``onnx.save_model`` reads it up to three times).
    """
    location = path.name + ".data"
    with open(path.parent / location, "wb") as data:
        for tensor in model.graph.initializer:
            if tensor.data_location == onnx.TensorProto.EXTERNAL or tensor_nbytes(tensor) < 1024:
                continue
            if tensor.HasField("raw_data"):
                payload = tensor.raw_data
            elif tensor.data_type == onnx.TensorProto.STRING:
                continue  # strings cannot live in external data
            else:
                payload = numpy_helper.to_array(tensor).tobytes()
            offset = data.tell()
            data.write(payload)
            del payload
            name, dims, dtype, doc = (
                tensor.name,
                list(tensor.dims),
                tensor.data_type,
                tensor.doc_string,
            )
            tensor.Clear()
            tensor.name, tensor.data_type, tensor.doc_string = name, dtype, doc
            tensor.dims.extend(dims)
            tensor.data_location = onnx.TensorProto.EXTERNAL
            for key, value in (
                ("location", location),
                ("offset", offset),
                ("length", data.tell() - offset),
            ):
                tensor.external_data.add(key=key, value=str(value))
    path.write_bytes(model.SerializeToString())


def _simplify(
    model: onnx.ModelProto, settings: OnnxsimSettings, workdir: Path, *, owned: bool, large: bool
) -> tuple[onnx.ModelProto | None, bool]:
    """Run onnxsim; return ``(folded model, its check verdict)``.

    The model is ``None`` when onnxsim wrote it to ``workdir/folded.onnx`` (models over 2 GB go
    by path). ``owned``: ``model`` may be mutated (a forked child's copy, seen by no one else);
    otherwise it is left as it was.
    """
    import onnxsim

    kwargs = settings.kwargs()
    # onnxsim re-infers every shape; a stale static value_info (recorded before symbolize) would
    # otherwise win over an inferred symbolic dim and let a Shape op fold into a constant.
    if large:
        if not owned:
            copy = onnx.ModelProto()
            copy.CopyFrom(model)
            model = copy
        del model.graph.value_info[:]
        in_path = workdir / "input.onnx"
        _save_for_onnxsim(model, in_path)
        del model
        out_path = workdir / "folded.onnx"
        _, check_ok = onnxsim.simplify(str(in_path), output_path=str(out_path), **kwargs)
        return None, bool(check_ok)
    if owned:
        del model.graph.value_info[:]
        folded, check_ok = onnxsim.simplify(model, **kwargs)
        return folded, bool(check_ok)
    saved = onnx.GraphProto()
    saved.value_info.extend(model.graph.value_info)
    del model.graph.value_info[:]
    try:
        folded, check_ok = onnxsim.simplify(model, **kwargs)
    finally:
        model.graph.value_info.extend(saved.value_info)
    return folded, bool(check_ok)


def _simplify_to_file(
    model: onnx.ModelProto, settings: OnnxsimSettings, workdir: Path, *, large: bool
) -> bool:
    """In a forked child: run onnxsim, leave its result in ``workdir/folded.onnx``."""
    folded, check_ok = _simplify(model, settings, workdir, owned=True, large=large)
    if folded is not None:
        out_path = workdir / "folded.onnx"
        if is_large(folded):  # folding grew it past 2 GB (e.g. a folded Tile)
            _save_for_onnxsim(folded, out_path)
        else:
            out_path.write_bytes(folded.SerializeToString())
    return check_ok


def _read_log(path: Path, limit: int = 20) -> list[str]:
    try:
        text = path.read_text("utf-8", "replace")
    except OSError:
        return []
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    return lines[-limit:]


def _first_line(text: str, limit: int = 300) -> str:
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    first = lines[0] if lines else ""
    return first if len(first) <= limit else first[: limit - 3] + "..."


def _child_main(job: Callable[[], bool], workdir: Path) -> None:  # pragma: no cover - in child
    """Body of the forked child: run ``job`` with output logged, report in status.json, exit."""
    code = 1
    try:
        log_fd = os.open(workdir / "native.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        stream = open(log_fd, "w", buffering=1, closefd=False, encoding="utf-8", errors="replace")
        sys.stdout = sys.stderr = stream
        # A crash's Python traceback goes to the log too (not to a terminal fd the host set up).
        faulthandler.enable(file=stream, all_threads=False)
        try:
            check_ok = job()
            status: dict[str, Any] = {"ok": True, "check_ok": check_ok}
            code = 0
        except BaseException as exc:  # everything becomes a report to the parent
            status = {
                "ok": False,
                "type": type(exc).__name__,
                "message": _first_line(str(exc)) or type(exc).__name__,
                "traceback": traceback.format_exc(limit=8),
            }
        (workdir / "status.json").write_text(json.dumps(status))
        stream.flush()
    finally:
        os._exit(code)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _run_forked(job: Callable[[], bool], workdir: Path) -> bool:
    """Run ``job`` in a forked child; its return value comes back, its failure as FolderFailed."""
    sys.stdout.flush()
    sys.stderr.flush()
    with warnings.catch_warnings():
        # Python >= 3.12 warns when a process with threads forks (ONNX Runtime's pools). The
        # child only runs onnxsim and leaves with os._exit, never touching those threads' locks.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        _child_main(job, workdir)
    try:
        _, status = os.waitpid(pid, 0)
    except BaseException:  # Ctrl-C or similar while waiting: do not leave the child running
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        raise
    code = os.waitstatus_to_exitcode(status)
    log = _read_log(workdir / "native.log")
    status_path = workdir / "status.json"
    report = json.loads(status_path.read_text()) if status_path.is_file() else None
    if code < 0:
        raise FolderFailed(
            f"onnxsim crashed the process it ran in ({_signal_name(-code)})", crashed=True, log=log
        )
    if report is None:
        raise FolderFailed(
            f"onnxsim's process exited with code {code} without a result", crashed=True, log=log
        )
    if not report["ok"]:
        raise FolderFailed(f"{report['type']}: {report['message']}", log=log)
    return bool(report["check_ok"])


def wants_isolation(model: onnx.ModelProto, isolate: bool | str) -> bool:
    """``isolate`` resolved for ``model``: ``"auto"`` forks for models with at least
    :data:`AUTO_ISOLATE_BYTES` of tensors (those over 2 GB)."""
    if isolate == "auto":
        return tensor_bytes(model) >= AUTO_ISOLATE_BYTES
    return bool(isolate)


def run_onnxsim(
    model: onnx.ModelProto, settings: OnnxsimSettings, *, isolate: bool | str = "auto"
) -> FoldedModel:
    """Run ``onnxsim.simplify`` on ``model`` (never modified) and return its result.

    ``isolate=True`` runs it in a forked child (where ``fork`` exists): a crash there raises
    :class:`FolderFailed` with ``crashed=True`` instead of ending this process; ``"auto"`` does
    so for models of :data:`AUTO_ISOLATE_BYTES` or more. Whatever onnxsim or native code prints
    is kept in ``FoldedModel.log`` / ``FolderFailed.log``, never shown. Raises
    :class:`FolderFailed` when onnxsim raises.
    """
    import onnxsim  # noqa: F401  (imported here once, so a forked child starts with it loaded)

    nbytes = tensor_bytes(model)
    large = nbytes >= LARGE_MODEL_BYTES
    forked = fork_available() and (
        nbytes >= AUTO_ISOLATE_BYTES if isolate == "auto" else bool(isolate)
    )
    where = "forked child process" if forked else "in-process"
    with tempfile.TemporaryDirectory(prefix="onnxsurgery-fold-") as tmp:
        workdir = Path(tmp)
        folded = None
        if forked:
            check_ok = _run_forked(
                lambda: _simplify_to_file(model, settings, workdir, large=large), workdir
            )
        else:
            try:
                with _captured_output(workdir / "native.log"):
                    folded, check_ok = _simplify(model, settings, workdir, owned=False, large=large)
            except Exception as exc:
                raise FolderFailed(
                    f"{type(exc).__name__}: {_first_line(str(exc)) or type(exc).__name__}",
                    log=_read_log(workdir / "native.log"),
                ) from exc
        if folded is None:
            out_path = workdir / "folded.onnx"
            if not out_path.is_file():
                raise FolderFailed("onnxsim returned without writing a model")
            try:
                folded = onnx.load(str(out_path), load_external_data=True)
            except Exception as exc:
                raise FolderFailed(
                    f"onnxsim's output cannot be read back: {_first_line(str(exc))}"
                ) from exc
        return FoldedModel(folded, check_ok, where, _read_log(workdir / "native.log"))


# ---------------------------------------------------------------------------------------------
# the fallback


def fold_with_graphsurgeon(
    model: onnx.ModelProto, *, size_threshold: int | None = None
) -> onnx.ModelProto:
    """onnx-graphsurgeon ``fold_constants`` + ``cleanup`` + ``toposort``; random ops never fold.

    Shapes are inferred first (symbolic dims stay symbolic) so static ``Shape`` ops fold. Raises
    :class:`FolderFailed` when graphsurgeon cannot import, fold or export the graph.
    """
    import onnx_graphsurgeon as gs

    from onnxsurgery.model_io import infer_shapes

    with tempfile.TemporaryDirectory(prefix="onnxsurgery-gsfold-") as tmp:
        log_path = Path(tmp) / "native.log"
        try:
            with _captured_output(log_path):
                try:
                    inferred = infer_shapes(model, data_prop=True)
                except Exception:  # folding still works, only static Shape ops stay unfolded
                    inferred = model
                graph = gs.import_onnx(inferred)
                graph.toposort(recurse_subgraphs=True)
                graph.fold_constants(
                    partitioning="basic",
                    size_threshold=size_threshold,
                    should_exclude_node=lambda node: node.op in RANDOM_OPS,
                )
                graph.cleanup(recurse_subgraphs=True)
                graph.toposort(recurse_subgraphs=True)
                exported = gs.export_onnx(graph, do_type_check=False)
        except Exception as exc:
            raise FolderFailed(
                f"{type(exc).__name__}: {_first_line(str(exc)) or type(exc).__name__}",
                log=_read_log(log_path),
            ) from exc
    out = onnx.ModelProto()
    out.CopyFrom(model)
    out.graph.CopyFrom(exported.graph)
    # value_info graphsurgeon wrote back came from our inference; drop it like onnxsim's
    # callers would re-infer anyway, so no intermediate shape goes stale.
    del out.graph.value_info[:]
    return out


def constants_to_initializers(model: onnx.ModelProto) -> int:
    """Turn the main graph's ``Constant`` nodes into initializers, in place; return how many.

    onnxsim writes folded values as Constant nodes. As initializers they go to the external data
    file when the model is saved with one (Constant attributes stay inline in the ``.onnx``
    file, which a multi-GB folded weight would push past 2 GB). A Constant whose output is a
    graph output stays a node.
    """
    outputs = {vi.name for vi in model.graph.output}
    existing = {t.name for t in model.graph.initializer}
    keep, moved = [], 0
    for node in model.graph.node:
        tensor = constant_node_tensor(node)
        name = node.output[0] if len(node.output) == 1 else ""
        if tensor is None or not name or name in outputs or name in existing:
            keep.append(node)
            continue
        init = model.graph.initializer.add()
        init.CopyFrom(tensor)
        init.name = name
        moved += 1
    if moved:
        del model.graph.node[:]
        model.graph.node.extend(keep)
    return moved


# ---------------------------------------------------------------------------------------------
# comparing models


def _dims(vi: onnx.ValueInfoProto) -> list[onnx.TensorShapeProto.Dimension]:
    t = vi.type.tensor_type
    return list(t.shape.dim) if t.HasField("shape") else []


def pinned_dims(
    before: onnx.ModelProto,
    after: onnx.ModelProto,
    *,
    kind: str = "input",
    ignore: Iterable[str] = (),
) -> list[str]:
    """Symbolic dims of the graph's inputs (``kind="output"``: outputs) in ``before`` that are
    numbers in ``after``, as ``"input 'x' axis 0 ('batch') became 4"``."""
    skip = set(ignore)
    problems = []
    pairs = {
        "input": (before.graph.input, after.graph.input),
        "output": (before.graph.output, after.graph.output),
    }
    if kind not in pairs:
        raise ValueError(f"kind must be 'input' or 'output', got {kind!r}")
    for old_list, new_list in [pairs[kind]]:
        new_by_name = {vi.name: vi for vi in new_list}
        for vi in old_list:
            if vi.name in skip or vi.name not in new_by_name:
                continue
            new_dims = _dims(new_by_name[vi.name])
            for axis, dim in enumerate(_dims(vi)):
                if not dim.dim_param or axis >= len(new_dims):
                    continue
                if new_dims[axis].HasField("dim_value"):
                    problems.append(
                        f"{kind} {vi.name!r} axis {axis} ({dim.dim_param!r}) became {new_dims[axis].dim_value}"
                    )
    return problems


def op_delta(before: onnx.ModelProto, after: onnx.ModelProto) -> str:
    """Op counts that changed, biggest change first: ``"Shape -3, Gather -3, Gemm +1"``."""
    old, new = op_counts(before.graph), op_counts(after.graph)
    changes = [(op, new[op] - old[op]) for op in old.keys() | new.keys() if new[op] != old[op]]
    changes.sort(key=lambda item: (-abs(item[1]), item[0]))
    return ", ".join(f"{op} {delta:+d}" for op, delta in changes)


def format_bytes(n: int) -> str:
    """Bytes for people: ``512 B``, ``1.5 KB``, ``12.3 MB``, ``2.10 GB``."""
    if n < 1024:
        return f"{n} B"
    for unit, scale in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if n >= scale:
            value = n / scale
            return f"{value:.2f} {unit}" if unit == "GB" else f"{value:.1f} {unit}"
    return f"{n} B"
