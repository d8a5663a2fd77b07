"""onnxsim, run in a forked child process where a native crash becomes an error.

- :func:`run_onnxsim` runs ``onnxsim.simplify`` on a model, by default in a forked child process,
  so that a native crash (segfault, abort) inside onnxsim, onnx-optimizer or ONNX Runtime becomes
  a :class:`FolderFailed` instead of killing the caller, and everything native code prints goes to
  a log instead of the terminal. On models over 2 GB, the weights no folding reads reach onnxsim
  as graph inputs (:mod:`~onnxsurgery.passes.fold_constants.held_weights`) and come back after;
  what still holds :data:`BY_PATH_BYTES` or more goes through onnxsim's path-based entry point
  (``simplify(path, output_path=...)``) with external data.
Isolation uses ``fork``: a spawned interpreter would import onnxsim again on every call (see
``onnxsim_import.py``) and read the model from a file. A fork still costs more than onnxsim's own
time on models up to 100 MB (see
:data:`AUTO_ISOLATE_BYTES`), so by default (``isolate="auto"``) only models over 2 GB fork;
smaller ones run in-process, where a native crash ends the process (the pipeline's atomic save
still leaves no output file behind); ``isolate=True`` forks always. Where ``fork`` does not
exist, onnxsim runs in-process.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import signal
import sys
import tempfile
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx
from onnx import numpy_helper

from onnxsurgery.model.io import LARGE_MODEL_BYTES, is_large, tensor_bytes, tensor_nbytes
from onnxsurgery.passes.fold_constants.capture import (
    FolderFailed,
    captured_output,
    first_line,
    read_log,
)
from onnxsurgery.passes.fold_constants.changes import format_bytes
from onnxsurgery.passes.fold_constants.held_weights import held_weights, restore_held, without_held
from onnxsurgery.passes.fold_constants.onnxsim_import import import_onnxsim
from onnxsurgery.passes.fold_constants.options import OnnxsimSettings

__all__ = [
    "AUTO_ISOLATE_BYTES",
    "FoldedModel",
    "FolderFailed",
    "fork_available",
    "run_onnxsim",
    "wants_isolation",
    "weights_to_hold",
]

#: ``isolate="auto"`` forks for models with at least this many bytes of tensors: those that go
#: to onnxsim by path. There the child writes the input file from its copy-on-write view of the
#: model, so this process never holds a second copy, and a crash late in a long run costs most.
#: Below it a fork is not worth its cost (measured by bench/bench_fold_constants.py): first-touch
#: page faults in the child, and the result serialized back through a file.
AUTO_ISOLATE_BYTES = LARGE_MODEL_BYTES

#: Models given to onnxsim with at least this many bytes of tensors go by path (written with
#: external data, tensor by tensor). In memory, onnxsim holds the model's bytes, its parsed
#: copy, its result's bytes and the checker's parse of them at once, and then parses the result
#: again: a 1.5 GB model passed in-process peaked at 6.1x its size, every copy a whole model.
#: Below it the file round trip costs more time than the copies cost memory.
BY_PATH_BYTES = 1 << 30


def fork_available() -> bool:
    """Whether the folder can run in a forked child (POSIX with ``os.fork``)."""
    return hasattr(os, "fork") and sys.platform != "win32"

@dataclass
class FoldedModel:
    """onnxsim's result: the model, whether its own ``check_n`` check passed, where it ran."""

    model: onnx.ModelProto
    check_ok: bool
    where: str
    log: list[str] = field(default_factory=list)
    #: Held weights still graph inputs of ``model`` (``run_onnxsim(restore=False)``).
    held: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# running onnxsim


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
    onnxsim = import_onnxsim()
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
                "message": first_line(str(exc)) or type(exc).__name__,
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
    log = read_log(workdir / "native.log")
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


def weights_to_hold(model: onnx.ModelProto, hold_weights: bool = True) -> list[str]:
    """The weights :func:`run_onnxsim` gives onnxsim as graph inputs: over 2 GB, those no
    folding reads (``held_weights.py``); none below, or with ``hold_weights`` false."""
    if hold_weights and tensor_bytes(model) >= LARGE_MODEL_BYTES:
        return held_weights(model)
    return []


def run_onnxsim(
    model: onnx.ModelProto,
    settings: OnnxsimSettings,
    *,
    isolate: bool | str = "auto",
    hold_weights: bool = True,
    restore: bool = True,
) -> FoldedModel:
    """Run ``onnxsim.simplify`` on ``model`` (never modified) and return its result.

    ``isolate=True`` runs it in a forked child (where ``fork`` exists): a crash there raises
    :class:`FolderFailed` with ``crashed=True`` instead of ending this process; ``"auto"`` does
    so for models of :data:`AUTO_ISOLATE_BYTES` or more. Whatever onnxsim or native code prints
    is kept in ``FoldedModel.log`` / ``FolderFailed.log``, never shown. Raises
    :class:`FolderFailed` when onnxsim raises. ``hold_weights``: on a model over 2 GB, the
    weights no folding reads go to onnxsim as graph inputs (``held_weights.py``); they come
    back as initializers (copies), or with ``restore=False`` stay inputs, named in
    ``FoldedModel.held``, for the caller to give back (``held_weights.adopt_held``).
    """
    import_onnxsim()  # here, so that a forked child starts with onnxsim loaded

    nbytes = tensor_bytes(model)
    forked = fork_available() and (
        nbytes >= AUTO_ISOLATE_BYTES if isolate == "auto" else bool(isolate)
    )
    held = weights_to_hold(model, hold_weights)
    given = without_held(model, held) if held else model
    given_bytes = tensor_bytes(given) if held else nbytes
    large = given_bytes >= BY_PATH_BYTES
    where = "forked child process" if forked else "in-process"
    with tempfile.TemporaryDirectory(prefix="onnxsurgery-fold-") as tmp:
        workdir = Path(tmp)
        folded, check_ok = _fold(given, settings, workdir, forked=forked, owned=given is not model, large=large)
        if held:
            where += (
                f"; {len(held)} weight(s) no folding reads ({format_bytes(nbytes - given_bytes)}) "
                "went to onnxsim as inputs"
            )
            if restore:
                back = restore_held(folded, model, held)
                where += f", {back} came back"
        return FoldedModel(
            folded,
            check_ok,
            where,
            read_log(workdir / "native.log"),
            held=[] if restore else held,
        )


def _fold(
    given: onnx.ModelProto,
    settings: OnnxsimSettings,
    workdir: Path,
    *,
    forked: bool,
    owned: bool,
    large: bool,
) -> tuple[onnx.ModelProto, bool]:
    """onnxsim's result for ``given`` and whether its own check passed, from a forked child (by
    file, in ``workdir``) or in-process with native output logged; any failure as FolderFailed."""
    if forked:
        check_ok = _run_forked(lambda: _simplify_to_file(given, settings, workdir, large=large), workdir)
        return _read_folded(workdir), check_ok
    try:
        with captured_output(workdir / "native.log"):
            folded, check_ok = _simplify(given, settings, workdir, owned=owned, large=large)
    except Exception as exc:
        raise FolderFailed(
            f"{type(exc).__name__}: {first_line(str(exc)) or type(exc).__name__}",
            log=read_log(workdir / "native.log"),
        ) from exc
    return folded if folded is not None else _read_folded(workdir), check_ok


def _read_folded(workdir: Path) -> onnx.ModelProto:
    """The model onnxsim wrote to ``workdir/folded.onnx``, with its external data."""
    out_path = workdir / "folded.onnx"
    if not out_path.is_file():
        raise FolderFailed("onnxsim returned without writing a model")
    try:
        return onnx.load(str(out_path), load_external_data=True)
    except Exception as exc:
        raise FolderFailed(f"onnxsim's output cannot be read back: {first_line(str(exc))}") from exc


# ---------------------------------------------------------------------------------------------
