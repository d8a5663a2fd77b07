"""Package namespaces whose names import their module on first use (PEP 562 ``__getattr__``).

Python runs a package's ``__init__`` before any module in it, so a package that imports its whole
API there makes every process that uses one module of it pay for all of them: ``import
onnxsurgery`` imported onnx, numpy, rich and every module of the API for a script that needed
one function, and every command imported shapes, merged outputs and model equality
whether it ran them or not. The packages (``onnxsurgery``, ``onnxsurgery.model``,
``onnxsurgery.validation``) therefore say which module defines each name they offer; ``from
onnxsurgery import run`` imports ``onnxsurgery.pipeline.runner`` at that moment (``import
onnxsurgery`` alone imports next to nothing), and the name is then kept in the package, so later reads are plain
attribute reads (and ``monkeypatch.setattr`` on the package works as before). Modules
themselves import what they need at their top, as everywhere in the project.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterable, Mapping
from types import ModuleType
from typing import Any

__all__ = ["lazy_exports", "lazy_module"]


def lazy_exports(
    package: str, exports: Mapping[str, Iterable[str]], modules: Iterable[str] = ()
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``(__getattr__, __dir__, __all__)`` for ``package``, whose ``__init__`` calls this.

    ``exports`` maps a module to the names the package takes from it; ``modules`` names the
    package's modules that are attributes of it once imported (``onnxsurgery.model.io``): they
    are imported on first use too. ``__all__`` lists the exports in the order given."""
    where = {name: module for module, names in exports.items() for name in names}
    submodules = {name: f"{package}.{name}" for name in modules}
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        if name in where:
            value = getattr(importlib.import_module(where[name]), name)
        elif name in submodules:
            value = importlib.import_module(submodules[name])
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(where) | set(submodules))

    return __getattr__, __dir__, list(where)


def lazy_module(name: str) -> ModuleType:
    """``name`` as a module that runs its import on first attribute access (the importlib docs'
    ``LazyLoader`` recipe), registered in ``sys.modules`` so every ``import name`` shares it."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ImportError(f"No module named {name!r}")
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module
