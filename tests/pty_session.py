"""Run a command as a person does: on a pseudo-terminal, stdin, stdout and stderr all a tty.

Every other CLI test runs the command with stderr in a pipe (``CliRunner``, ``subprocess``); the
live progress line, the hidden cursor and rich's terminal rendering only exist on a terminal, so
a crash there went unseen by all of them. :func:`run_in_pty` gives the command a real pty of a
chosen size (``TIOCSWINSZ``), reads everything it writes until it exits, and returns the exit
code with the raw bytes; :class:`Screen` answers the questions the tests ask of those bytes.
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Screen", "run_in_pty", "onnxsurgery_argv"]

ROOT = Path(__file__).resolve().parent.parent
HIDE_CURSOR = b"\x1b[?25l"
SHOW_CURSOR = b"\x1b[?25h"
_ESCAPES = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def onnxsurgery_argv(*args: str) -> list[str]:
    """The installed command, as a user types it (the venv's console script)."""
    exe = Path(sys.executable).parent / "onnxsurgery"
    return [str(exe), *args]


@dataclass
class Screen:
    """What a command wrote to its terminal, and how it ended."""

    returncode: int
    raw: bytes

    @property
    def text(self) -> str:
        """The output with escape sequences and carriage returns removed."""
        return _ESCAPES.sub(b"", self.raw).replace(b"\r", b"").decode("utf-8", "replace")

    @property
    def cursor_restored(self) -> bool:
        """Whether every hide-cursor was followed by a show-cursor (nothing left hidden)."""
        last_hide = self.raw.rfind(HIDE_CURSOR)
        return last_hide < 0 or self.raw.rfind(SHOW_CURSOR) > last_hide

    @property
    def live_display_used(self) -> bool:
        return HIDE_CURSOR in self.raw

    def shown_then_erased(self, marker: str) -> bool:
        """Whether ``marker`` was drawn by the live line and erased afterwards: it appears in the
        raw stream, and no line of the final screen still holds it."""
        if marker.encode() not in _ESCAPES.sub(b"", self.raw):
            return False
        return marker not in final_screen(self.raw)


def final_screen(raw: bytes) -> str:
    """What stays on the screen: the stream replayed line by line, honouring carriage return,
    erase-line (ESC[2K) and cursor-up (ESC[nA), the moves rich's live display uses."""
    lines: list[str] = [""]
    row = 0
    for token in re.split(rb"(\x1b\[[0-9;?]*[A-Za-z]|\r|\n)", raw):
        if not token:
            continue
        if token == b"\n":
            row += 1
            if row == len(lines):
                lines.append("")
        elif token == b"\r":
            pass  # column tracking is not needed: erase-line clears whole lines
        elif token.startswith(b"\x1b["):
            code = token[-1:]
            if code == b"A":
                n = int(token[2:-1] or b"1")
                row = max(0, row - n)
            elif code == b"K" and token[2:-1] == b"2":
                lines[row] = ""
        else:
            lines[row] += token.decode("utf-8", "replace")
    return "\n".join(lines)


def run_in_pty(
    argv: list[str],
    *,
    cwd: Path = ROOT,
    columns: int = 100,
    rows: int = 40,
    timeout: float = 300,
    env: dict[str, str] | None = None,
) -> Screen:
    """Run ``argv`` with stdin, stdout and stderr on a new pseudo-terminal of ``columns`` x
    ``rows``; the child is the session leader with the pty as its controlling terminal."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    environment = {**os.environ, **(env or {})}
    for name in ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "TERM"):
        environment.pop(name, None)
    environment["TERM"] = "xterm-256color"
    environment.update(env or {})
    proc = subprocess.Popen(
        argv, cwd=cwd, stdin=slave, stdout=slave, stderr=slave, env=environment,
        start_new_session=True, close_fds=True,
    )
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            if time.monotonic() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                raise TimeoutError(f"{argv[:3]} still running after {timeout} s")
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: every writer closed the slave side
                    data = b""
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                # drain what is left, then stop
                while select.select([master], [], [], 0.05)[0]:
                    try:
                        data = os.read(master, 65536)
                    except OSError:
                        data = b""
                    if not data:
                        break
                    chunks.append(data)
                break
    finally:
        os.close(master)
    return Screen(proc.wait(timeout=30), b"".join(chunks))
