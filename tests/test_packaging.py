"""pyproject.toml lists every package of the tree, so a built wheel holds every module."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

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


def test_the_wheel_holds_every_module_and_the_py_typed_marker(tmp_path):
    # Built from a copy of the tree (setuptools builds in the source directory): every module,
    # passes/ as onnxsurgery/passes, and py.typed (PEP 561: type checkers read the hints).
    pytest.importorskip("setuptools", minversion="77")  # pyproject's build requirement
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for top in ("onnxsurgery", "passes"):
        shutil.copytree(ROOT / top, src / top, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path / "dist"), str(src)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
    assert "onnxsurgery/py.typed" in names
    modules = {f"onnxsurgery/{p.relative_to(ROOT / 'onnxsurgery')}" for p in (ROOT / "onnxsurgery").rglob("*.py")}
    modules |= {f"onnxsurgery/passes/{p.relative_to(ROOT / 'passes')}" for p in (ROOT / "passes").rglob("*.py")}
    assert modules <= names, sorted(modules - names)
