"""The one place onnxsurgery writes files: atomically, and never onto an input or another output.

Every file the tool writes (the model and its ``.data`` file, ``--report``, ``--keep-failed``)
goes through :func:`write_atomic`, which decides once, by what the target is, how to write it:

- a regular file, or nothing yet: staged in a temporary folder beside it and renamed into place
  once complete, so a failed or interrupted run never leaves a partial file or a temp file behind;
- a symbolic link: the same, beside the file the link names (the link stays a link; a dangling
  link whose folder exists is written through too; a link loop is refused);
- ``-`` (standard output), a character device (``/dev/null``), a FIFO or a socket: the complete
  content is written through to it, never renamed over it;
- a folder or a block device: refused.

:func:`check_targets` refuses, before any work starts, a target that cannot be written, that is
one of the inputs or that two outputs share (through links too: a link to the input is the
input). Every way writing can fail is a :class:`~onnxsurgery.errors.ModelSaveError` naming the
file.
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import stat
import sys
import tempfile
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from onnxsurgery.errors import ModelSaveError, UsageError

__all__ = ["write_atomic", "check_targets", "same_file", "shown", "is_stdout", "to_stdout", "STDOUT"]

#: User text longer than this is cut in messages (a 100,000-character pass name is not echoed).
SHOWN_CHARS = 200

#: The target name that means standard output.
STDOUT = "-"


def shown(text: object, limit: int = SHOWN_CHARS) -> str:
    """``repr`` of user text for a message, cut to ``limit`` characters."""
    text = str(text)
    if len(text) > limit:
        text = f"{text[:limit]}...({len(text)} characters)"
    return repr(text)


def is_stdout(target: str | os.PathLike | None) -> bool:
    """Whether ``target`` is ``-``, the name for standard output."""
    return target is not None and os.fspath(target) == STDOUT


def to_stdout(target: str | os.PathLike | None) -> bool:
    """Whether writing ``target`` writes this process's standard output: ``-``, or a stream that
    is it (``/dev/stdout``), ``/dev/null`` aside. What the command shows then goes to stderr."""
    if target is None:
        return False
    if is_stdout(target):
        return True
    mine = _identity(STDOUT)
    return mine is not None and mine == _identity(target) and mine != _identity(os.devnull)


def _identity(path: str | os.PathLike) -> tuple[int, int] | None:
    """(device, inode) of the file ``path`` names (``-``: standard output), or None."""
    try:
        st = os.fstat(1) if is_stdout(path) else os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def _key(path: Path) -> str:
    try:
        return os.path.realpath(os.fspath(path))
    except (OSError, ValueError):
        return os.path.abspath(os.fspath(path))


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether two paths name one file (by resolved path, or by inode where both exist; ``-`` is
    standard output)."""
    if is_stdout(a) or is_stdout(b):
        return (is_stdout(a) and is_stdout(b)) or (_identity(a) or 0) == _identity(b)
    pa, pb = Path(a), Path(b)
    if _key(pa) == _key(pb):
        return True
    try:
        return os.path.samefile(pa, pb)
    except (OSError, ValueError):
        return False


@dataclass(frozen=True)
class _Target:
    """Where the bytes for a target go: ``path`` (the end of a link), and how: ``"file"`` (temp
    file beside it + rename), ``"stream"`` (written through), ``"stdout"``."""

    path: Path
    kind: str


class _Refused(Exception):
    """Why a target cannot be written; the caller says which target."""


def _resolve(path: Path) -> _Target:
    """What writing ``path`` means (see the module docstring); _Refused when it cannot be."""
    if is_stdout(path):
        return _Target(path, "stdout")
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return _absent(path)
    except (OSError, ValueError) as exc:
        raise _Refused(f"cannot be written: {_reason(exc)}") from None
    if stat.S_ISLNK(mode):
        return _through_link(path)
    if stat.S_ISREG(mode):
        return _Target(path, "file")
    if stat.S_ISDIR(mode):
        raise _Refused("is a directory")
    if _is_stream(mode):
        return _stream(path)
    raise _Refused("is a block device or another special file, not a file onnxsurgery writes")


def _is_stream(mode: int) -> bool:
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _stream(path: Path) -> _Target:
    return _Target(path, "stdout" if _identity(path) == _identity(STDOUT) else "stream")


def _absent(path: Path) -> _Target:
    if not path.parent.is_dir():
        raise _Refused(f"folder {path.parent} does not exist")
    return _Target(path, "file")


def _through_link(link: Path) -> _Target:
    """The target a symbolic link names (resolved to its end), or _Refused for a loop."""
    try:
        mode = os.stat(link).st_mode
    except FileNotFoundError:
        mode = None  # dangling: written through when the folder it names exists
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _Refused("is a symbolic link loop; give another path") from None
        raise _Refused(f"cannot be written: {_reason(exc)}") from None
    # A stream is opened through the link (/dev/stdout -> /proc/self/fd/1 names no path that
    # realpath could follow); a link to this process's stdout writes stdout, even a file's.
    if mode is not None and (_is_stream(mode) or _identity(link) == _identity(STDOUT)):
        return _stream(link)
    real = Path(os.path.realpath(link))
    try:
        return _resolve(real)
    except _Refused as exc:
        raise _Refused(f"links to {real}: {exc}") from None


def _checked(path: Path, name: str, *, text: bool, suffix: str = "") -> _Target:
    """``path`` resolved, or a ModelSaveError starting with ``name``; binary content is refused
    where standard output is a terminal."""
    try:
        where = _resolve(path)
    except _Refused as exc:
        raise ModelSaveError(f"{name}: {exc}{suffix}") from None
    if where.kind == "stdout" and not text and _stdout_is_terminal():
        raise ModelSaveError(
            f"{name}: standard output is a terminal; redirect it (> FILE, | CMD) or give a file name{suffix}"
        )
    return where


def _stdout_is_terminal() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def check_targets(
    inputs: Mapping[str, str | os.PathLike | None],
    outputs: Mapping[str, str | os.PathLike | None],
    *,
    text: Collection[str] = (),
) -> None:
    """Refuse, before any work, an output (label -> path) that cannot be written (a missing
    folder, a folder, a link loop; binary content for a terminal: every label but those in
    ``text``), that is an input, or that another output also names."""
    given_in = [(label, Path(p)) for label, p in inputs.items() if p is not None]
    given_out = [(label, Path(p)) for label, p in outputs.items() if p is not None]
    for i, (label, target) in enumerate(given_out):
        name = f"{label} {target}"
        where = _checked(target, name, text=label in text, suffix="; nothing was run")
        if where.kind == "file":  # the folder must take the temporary folder write_atomic stages in
            try:
                os.rmdir(tempfile.mkdtemp(prefix=".onnxsurgery-probe-", dir=where.path.parent))
            except OSError as exc:
                raise ModelSaveError(
                    f"{name}: cannot write in {where.path.parent}: {_reason(exc)}; nothing was run"
                ) from None
        for in_label, source in given_in:
            if same_file(target, source):
                raise UsageError(f"{name} would overwrite the {in_label}; give another path")
        for other_label, other in given_out[:i]:
            if same_file(target, other) and not _shareable(where, other):
                if where.kind == "stdout":
                    raise UsageError(f"{label} and {other_label} both go to standard output; give one a file name")
                raise UsageError(f"{label} and {other_label} are both {target}: one would overwrite the other")


def _shareable(where: _Target, other: Path) -> bool:
    """Whether two outputs may name one target: a character device (``/dev/null``) takes both,
    standard output does not."""
    if where.kind != "stream" or is_stdout(other):
        return False
    try:
        return stat.S_ISCHR(os.stat(where.path).st_mode)
    except (OSError, ValueError):
        return False


def write_atomic(
    target: str | os.PathLike,
    write: Callable[[Path], None],
    *,
    what: str = "file",
    companions: tuple[str, ...] = (),
    text: bool = False,
) -> Path:
    """Call ``write(staged_path)`` on a staged file, then put it where ``target`` says (see the
    module docstring): renamed into place (with each ``companions`` suffix file, e.g. ``".data"``,
    written beside it) for a file or a link's file, copied into a stream. ``text``: the content
    may go to a terminal (binary content for one is refused). Returns the file written (a link's
    end), or ``target`` for a stream. Nothing is left behind when writing fails; the error is a
    ModelSaveError."""
    path = Path(target)
    where = _checked(path, str(path), text=text)
    if where.kind == "file":
        _replace(where.path, write, what, companions)
        return where.path
    _write_through(path, where, write, what, companions)
    return path


def _replace(path: Path, write: Callable[[Path], None], what: str, companions: tuple[str, ...]) -> None:
    """Stage in a temporary folder beside ``path``, then rename into place."""
    try:
        tmp_dir = Path(tempfile.mkdtemp(prefix=".onnxsurgery-tmp-", dir=path.parent))
    except (OSError, ValueError) as exc:
        raise ModelSaveError(f"{path}: cannot write the {what} in {path.parent}: {_reason(exc)}") from None
    try:
        staged = tmp_dir / path.name  # the name a model's external-data location is built from
        write(staged)
        # On disk before anything moves: the renames come last, one right after the other (a
        # companion no longer waits in place, beside the old file, for the main file's flush).
        for suffix in companions:  # the data a model names reaches the disk before the model
            extra = tmp_dir / (path.name + suffix)
            if extra.exists():
                with open(extra, "rb") as fh:
                    os.fsync(fh.fileno())
        with open(staged, "rb") as fh:
            os.fsync(fh.fileno())
        for suffix in companions:
            extra = tmp_dir / (path.name + suffix)
            if extra.exists():
                os.replace(extra, path.parent / (path.name + suffix))
        os.replace(staged, path)
    except (OSError, ValueError) as exc:
        raise ModelSaveError(f"{path}: cannot write the {what}: {_reason(exc)}") from None
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)


def _write_through(
    path: Path, where: _Target, write: Callable[[Path], None], what: str, companions: tuple[str, ...]
) -> None:
    """Stage in a private temporary folder, then copy the complete content into the stream: a
    failed write sends the reader nothing, and nothing is created or renamed beside the stream."""
    tmp_dir = Path(tempfile.mkdtemp(prefix="onnxsurgery-"))
    try:
        staged = tmp_dir / (path.name or "stdout")
        write(staged)
        for suffix in companions:
            if (tmp_dir / (staged.name + suffix)).exists():
                raise ModelSaveError(
                    f"{path}: the {what} keeps its weights in a {suffix} file beside it, which a "
                    "stream cannot take; give a file name"
                )
        with open(staged, "rb") as src:
            _send(src, where)
    except (OSError, ValueError) as exc:
        raise ModelSaveError(f"{path}: cannot write the {what}: {_reason(exc)}") from None
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)


def _send(src: BinaryIO, where: _Target) -> None:
    """Copy ``src`` into standard output, a socket, or a device or FIFO (opened, never created)."""
    if where.kind == "stdout":
        sys.stdout.flush()
        shutil.copyfileobj(src, sys.stdout.buffer)
        sys.stdout.buffer.flush()
    elif stat.S_ISSOCK(os.stat(where.path).st_mode):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(os.fspath(where.path))
            sock.sendfile(src)
    else:
        with open(os.open(where.path, os.O_WRONLY | os.O_NOCTTY), "wb") as sink:
            shutil.copyfileobj(src, sink)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__
