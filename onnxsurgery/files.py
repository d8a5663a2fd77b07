"""The one place onnxsurgery writes files: atomically, and never onto an input or another output.

Every file the tool writes (the model and its ``.data`` file, ``--report``, ``--keep-failed``)
goes through :func:`write_atomic`: the content is staged in a temporary folder beside the target
and renamed into place once complete, so a failed or interrupted run never leaves a partial file
or a temp file behind. :func:`check_targets` refuses, before any work starts, a target that is
one of the inputs or that two outputs share. Every way writing can fail is a
:class:`~onnxsurgery.errors.ModelSaveError` naming the file.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from onnxsurgery.errors import ModelSaveError, UsageError

__all__ = ["write_atomic", "check_targets", "same_file", "shown"]

#: User text longer than this is cut in messages (a 100,000-character pass name is not echoed).
SHOWN_CHARS = 200


def shown(text: object, limit: int = SHOWN_CHARS) -> str:
    """``repr`` of user text for a message, cut to ``limit`` characters."""
    text = str(text)
    if len(text) > limit:
        text = f"{text[:limit]}...({len(text)} characters)"
    return repr(text)


def _key(path: Path) -> str:
    try:
        return os.path.realpath(os.fspath(path))
    except (OSError, ValueError):
        return os.path.abspath(os.fspath(path))


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether two paths name one file (by resolved path, or by inode where both exist)."""
    pa, pb = Path(a), Path(b)
    if _key(pa) == _key(pb):
        return True
    try:
        return os.path.samefile(pa, pb)
    except (OSError, ValueError):
        return False


def check_targets(
    inputs: Mapping[str, str | os.PathLike | None], outputs: Mapping[str, str | os.PathLike | None]
) -> None:
    """Refuse, before any work, an output (label -> path) whose folder is missing, that is a
    folder, that is an input, or that another output also names."""
    given_in = [(label, Path(p)) for label, p in inputs.items() if p is not None]
    given_out = [(label, Path(p)) for label, p in outputs.items() if p is not None]
    for i, (label, target) in enumerate(given_out):
        try:
            folder_ok = target.parent.is_dir() and not target.is_dir()
        except (OSError, ValueError) as exc:
            raise ModelSaveError(f"{label} {target}: cannot be written: {_reason(exc)}") from None
        if not folder_ok:
            what = "is a directory" if target.parent.is_dir() else f"folder {target.parent} does not exist"
            raise ModelSaveError(f"{label} {target}: {what}; nothing was run")
        try:  # the folder must take the temporary folder write_atomic stages the file in
            os.rmdir(tempfile.mkdtemp(prefix=".onnxsurgery-probe-", dir=target.parent))
        except OSError as exc:
            raise ModelSaveError(
                f"{label} {target}: cannot write in {target.parent}: {_reason(exc)}; nothing was run"
            ) from None
        for in_label, source in given_in:
            if same_file(target, source):
                raise UsageError(
                    f"{label} {target} would overwrite the {in_label}; give another path"
                )
        for other_label, other in given_out[:i]:
            if same_file(target, other):
                raise UsageError(
                    f"{label} and {other_label} are both {target}: one would overwrite the other"
                )


def write_atomic(
    target: str | os.PathLike,
    write: Callable[[Path], None],
    *,
    what: str = "file",
    companions: tuple[str, ...] = (),
) -> Path:
    """Call ``write(staged_path)`` in a temporary folder beside ``target``, then rename the
    staged file (and each ``companions`` suffix file, e.g. ``".data"``, written beside it) into
    place. Nothing is left behind when writing fails; the error is a ModelSaveError."""
    path = Path(target)
    try:
        if path.is_dir():
            raise ModelSaveError(f"{path}: is a directory; give a file name for the {what}")
        if not path.parent.is_dir():
            raise ModelSaveError(f"{path}: folder {path.parent} does not exist")
    except (OSError, ValueError) as exc:
        raise ModelSaveError(f"{path}: cannot write the {what}: {_reason(exc)}") from None
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
    return path


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__
