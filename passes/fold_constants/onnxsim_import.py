"""onnxsim, imported without the torch import it makes for a bridge that cannot load here.

``import onnxsim`` (0.8.1) runs ``onnxsim.ppq_integration``, which tries ``import torch`` and
then ``import ppq`` and records any failure as "PPQ unavailable". Where ppq is not installed
that bridge is unusable whatever torch does, yet the torch import is most of ``import
onnxsim``'s time and memory. While :func:`import_onnxsim` imports onnxsim, a finder refuses ``torch`` to imports
made from that one module (found by the importing frames' module names), so the bridge records
itself unavailable as it would anyway; the finder stays in ``sys.meta_path``, inactive, after. torch stays importable for everything else, in every
thread, during the import and after it; where torch is already imported or ppq is installed,
onnxsim is imported as it is.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from types import FrameType, ModuleType

__all__ = ["PPQ_BRIDGE", "import_onnxsim"]

#: The onnxsim module whose ``import torch`` only serves the PPQ bridge.
PPQ_BRIDGE = "onnxsim.ppq_integration"


class _NoTorchForBridge(importlib.abc.MetaPathFinder):
    """While ``active``, refuses ``torch`` to imports made (directly or not) by
    :data:`PPQ_BRIDGE`'s module code; finds nothing, refuses nothing otherwise."""

    def __init__(self) -> None:
        self.active = False

    def find_spec(self, fullname, path, target=None):
        if self.active and fullname == "torch" and _imported_from(PPQ_BRIDGE):
            raise ModuleNotFoundError(
                f"torch is not imported for {PPQ_BRIDGE}: ppq is not installed", name="torch"
            )
        return None


_FINDER = _NoTorchForBridge()


def _imported_from(module: str) -> bool:
    """Whether a frame of this thread's stack runs ``module``'s code."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__") == module:
            return True
        frame = frame.f_back
    return False


def import_onnxsim() -> ModuleType:
    """``onnxsim``, imported (once per process) without torch where only the PPQ bridge wants it."""
    loaded = sys.modules.get("onnxsim")
    if loaded is not None:
        return loaded
    if "torch" in sys.modules or importlib.util.find_spec("ppq") is not None:
        return importlib.import_module("onnxsim")
    if _FINDER not in sys.meta_path:
        # Put in once and left (inactive): removing a finder while another thread's import walks
        # sys.meta_path could make that import skip the next finder; adding one cannot.
        sys.meta_path.insert(0, _FINDER)
    _FINDER.active = True
    try:
        return importlib.import_module("onnxsim")
    except ImportError:
        # An onnxsim that needs torch outside the bridge: forget the partial import, import as is.
        for name in [n for n in sys.modules if n == "onnxsim" or n.startswith("onnxsim.")]:
            del sys.modules[name]
    finally:
        _FINDER.active = False
    return importlib.import_module("onnxsim")
