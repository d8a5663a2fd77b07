"""Deadlines for runs that can only be stopped from outside (ONNX Runtime's ``RunOptions.terminate``).

One daemon thread watches every armed deadline. Arming a run starts no thread and, in steady
state, wakes none: the watcher sleeps until the earliest deadline it knows of, or a minute at
most, and a run armed with a later deadline than that waits for the next
wake-up. A ``threading.Timer`` per run slowed every validation case on a busy machine
(starting a thread blocks until the OS schedules it)::

    token = arm(seconds, lambda: setattr(options, "terminate", True))
    try:
        session.run(names, feeds, options)
    finally:
        disarm(token)

``fire`` runs on the watcher thread, so it must be quick and must not raise.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Callable

__all__ = ["arm", "disarm"]

#: How long the watcher sleeps when nothing is armed.
IDLE_SECONDS = 60.0

_lock = threading.Lock()
_wake = threading.Event()
_armed: dict[int, tuple[float, Callable[[], None]]] = {}
_tokens = itertools.count()
_thread: threading.Thread | None = None
_next_wake = math.inf  # when the watcher wakes by itself next (monotonic seconds)


def arm(seconds: float, fire: Callable[[], None]) -> int:
    """Call ``fire()`` once ``seconds`` have passed, unless :func:`disarm` comes first."""
    global _thread
    deadline = time.monotonic() + seconds
    with _lock:
        token = next(_tokens)
        _armed[token] = (deadline, fire)
        if _thread is None or not _thread.is_alive():  # first use, or a forked child
            _thread = threading.Thread(target=_watch, name="onnxsurgery-watchdog", daemon=True)
            _thread.start()
        elif deadline < _next_wake:
            _wake.set()
    return token


def disarm(token: int) -> None:
    """Forget a deadline (its run ended); the watcher is not woken for it."""
    with _lock:
        _armed.pop(token, None)


def _watch() -> None:
    global _next_wake
    while True:
        due = []
        with _lock:
            now = time.monotonic()
            for token, (deadline, fire) in list(_armed.items()):
                if deadline <= now:
                    due.append(fire)
                    del _armed[token]
            _next_wake = min([now + IDLE_SECONDS, *(d for d, _ in _armed.values())])
            _wake.clear()
        for fire in due:
            fire()
        _wake.wait(max(_next_wake - now, 0.0))
