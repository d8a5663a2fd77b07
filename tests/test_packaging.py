"""pyproject.toml lists every package of the tree, so a built wheel holds every module."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _tree_packages() -> set[str]:
    found = set()
    for top, dotted in (("onnxsurgery", "onnxsurgery"), ("passes", "onnxsurgery.passes")):
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / top).parts
            found.add(".".join((dotted, *rel)))
    return found


def test_pyproject_lists_every_package():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    assert listed == _tree_packages()
