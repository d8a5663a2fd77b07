"""Which installed distributions provide the ``onnxruntime`` package; one line when two do.

``onnxruntime``, ``onnxruntime-gpu``, ``onnxruntime-directml``, ``onnxruntime-openvino``, ... all
install the same ``onnxruntime/`` folder. With two of them in one environment (a user with
``onnxruntime`` installs ``onnxruntime-gpu`` beside it) the later install overwrites the earlier
one's files, and uninstalling either deletes files the other needs: ``import onnxruntime``
breaks. :func:`warn_if_several` says so once per process, on stderr, where ONNX Runtime is first
used (``runtime._quiet_ort``); the scan reads each distribution's ``top_level.txt`` (about 1 ms),
never imports onnxruntime, and commands that run no model never make it.
"""

from __future__ import annotations

import functools
import importlib.metadata
import re
import sys
from typing import Any

__all__ = ["runtime_distributions", "several_runtimes_message", "warn_if_several"]

PACKAGE = "onnxruntime"
#: The distribution a fix keeps when only plain ``onnxruntime`` and no variant is among them.
_PLAIN = "onnxruntime"


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _provides_package(dist: importlib.metadata.Distribution) -> bool:
    top_level = dist.read_text("top_level.txt")
    if top_level is not None:
        return PACKAGE in top_level.split()
    # no top_level.txt (not a setuptools build): judge by the name, as every ORT build is named
    name = _normalized(dist.metadata["Name"] or "")
    return name.startswith(("onnxruntime", "ort-nightly"))


def runtime_distributions() -> list[str]:
    """Names of the installed distributions that provide the ``onnxruntime`` package, each once,
    in the order ``sys.path`` finds them."""
    names: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        try:
            if _provides_package(dist):
                name = dist.metadata["Name"] or "?"
                names.setdefault(_normalized(name), name)
        except (OSError, UnicodeDecodeError):  # an unreadable dist-info is not ours to judge
            continue
    return list(names.values())


def several_runtimes_message(names: list[str]) -> str | None:
    """The one line for two or more ORT distributions in one environment, else None."""
    if len(names) < 2:
        return None
    keep = next((n for n in names if _normalized(n) != _PLAIN), names[0])
    both = "both" if len(names) == 2 else "all"
    listed = ", ".join(names[:-1]) + f" and {names[-1]}"
    return (
        f"warning: {listed} are {both} installed here and {both} write the same onnxruntime/ "
        "folder, so uninstalling one breaks `import onnxruntime`; keep one: "
        f"pip uninstall -y {' '.join(names)} && pip install {keep}"
    )


@functools.cache
def warn_if_several() -> str | None:
    """Print :func:`several_runtimes_message` on stderr, once per process; returns it. On a
    terminal the line a progress display is drawing is cleared first (it is redrawn below)."""
    message = several_runtimes_message(runtime_distributions())
    if message is not None:
        clear = "\r\x1b[2K" if _is_terminal(sys.stderr) else ""
        print(clear + message, file=sys.stderr, flush=True)
    return message


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
