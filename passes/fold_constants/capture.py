"""What native code prints, captured to a log file instead of the terminal; the error either
folder raises when it fails (:class:`FolderFailed`, with the log's tail)."""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

__all__ = ["FolderFailed", "captured_output", "first_line", "read_log"]


class FolderFailed(Exception):
    """The folder raised, crashed, or produced no model. ``log`` holds its console output."""

    def __init__(self, message: str, *, crashed: bool = False, log: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.crashed = crashed
        self.log = list(log)


@contextlib.contextmanager
def captured_output(log_path: Path) -> Iterator[None]:
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


def read_log(path: Path, limit: int = 20) -> list[str]:
    try:
        text = path.read_text("utf-8", "replace")
    except OSError:
        return []
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    return lines[-limit:]


def first_line(text: str, limit: int = 300) -> str:
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    first = lines[0] if lines else ""
    return first if len(first) <= limit else first[: limit - 3] + "..."
