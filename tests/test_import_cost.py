"""What a run that never executes a model imports: not ONNX Runtime, not pydantic, not the
parts of the API it does not use, and, printing nothing (``-q``), not rich.

``onnxruntime`` (~0.1 s) is imported on first use (``validation/runtime.py``), and typer before
0.29 parses options without pydantic (~85 ms): together a third of a ``run --passes cleanup``
on a 50 MB model beyond ``onnx.load`` + ``onnx.save`` (bench/bench_pipeline.py, chains). The
packages' namespaces import a module when one of its names is first used (``lazy.py``), so a
chain without symbolize or concat-outputs never imports shapes or merged outputs.
"""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

SCRIPT = """
import sys
from onnxsurgery.cli import main
sys.argv = ["onnxsurgery", "run", sys.argv[1], "-o", sys.argv[2], "-q", "--passes", "cleanup"]
try:
    main()
except SystemExit as exc:
    assert exc.code == 0, exc.code
ort = sys.modules.get("onnxruntime")
print("onnxruntime", "absent" if ort is None else type(ort).__name__)
print("pydantic", "pydantic" in sys.modules)
print("unused", sorted(m for m in NOT_USED if m in sys.modules))
print("click", "click" in sys.modules)
print("rich", sorted(m for m in sys.modules if m == "rich" or m.startswith("rich."))[:3])
"""

#: Modules a `run --passes cleanup` has no use for: the package namespaces and the CLI imported them.
NOT_USED = (
    "onnxsurgery.shapes",
    "onnxsurgery.merged_outputs",
    "onnxsurgery.model.equality",
    "onnxsurgery.model.summary",
    "onnxsurgery.validation.against_model",
    "onnxsurgery.validation.recording",
)


def test_quiet_cleanup_run_imports_neither_onnxruntime_nor_pydantic_nor_rich(tmp_path, tiny_model) -> None:
    import onnx

    src = tmp_path / "m.onnx"
    onnx.save(tiny_model, src)
    out = subprocess.run(
        [sys.executable, "-c", f"NOT_USED = {NOT_USED!r}\n{SCRIPT}", str(src), str(tmp_path / "out.onnx")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    # click only where typer itself brings it (typer 0.28 has its own copy; ~6 ms)
    typer_click = subprocess.run(
        [sys.executable, "-c", "import sys, typer; print('click' in sys.modules)"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    assert out == [
        "onnxruntime _LazyModule", "pydantic False", "unused []", f"click {typer_click}", "rich []"
    ], out  # fmt: skip
    assert (tmp_path / "out.onnx").is_file()


def test_onnxruntime_loads_on_first_use() -> None:
    from onnxsurgery.validation.runtime import ort

    assert ort.InferenceSession.__name__ == "InferenceSession"
    assert type(sys.modules["onnxruntime"]).__name__ == "module"


LAZY_PACKAGES = ("onnxsurgery", "onnxsurgery.model", "onnxsurgery.validation")


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_lazy_namespace_offers_what_its_modules_define(package: str) -> None:
    """Every name of ``__all__`` is the object its module defines, ``dir`` lists it, and a
    ``from package import *`` gets them all; in a fresh interpreter, so that nothing is loaded yet."""
    script = f"""
import importlib, pathlib, sys
pkg = importlib.import_module({package!r})
folder = pathlib.Path(pkg.__file__).parent
files = {{p.stem for p in folder.glob("*.py") if p.stem != "__init__"}}
files |= {{p.parent.name for p in folder.glob("*/__init__.py")}}
assert files <= set(dir(pkg)), files - set(dir(pkg))  # every module is reachable as an attribute
names = list(pkg.__all__)
assert names and len(set(names)) == len(names), names
loaded_before = {{m for m in sys.modules if m.startswith("onnxsurgery.")}}
for name in names:
    value = getattr(pkg, name)
    home = getattr(value, "__module__", None)
    if isinstance(value, type) or callable(value):
        assert getattr(sys.modules[home], name) is value, (name, home)
assert set(names) <= set(dir(pkg))
star = {{}}
exec(f"from {package} import *", star)
assert set(names) <= set(star), set(names) - set(star)
print(len(names), len({{m for m in sys.modules if m.startswith("onnxsurgery.")}} - loaded_before) > 0)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    count, loaded_on_use = out.stdout.split()
    assert int(count) > 5 and loaded_on_use == "True"


def test_lazy_namespace_refuses_unknown_names_and_loads_submodules() -> None:
    import onnxsurgery

    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        onnxsurgery.no_such_name  # noqa: B018
    with pytest.raises(ImportError, match="nothing_here"):
        exec("from onnxsurgery import nothing_here", {})
    assert onnxsurgery.model.io is importlib.import_module("onnxsurgery.model.io")
    assert onnxsurgery.validation.tolerances.DEFAULT_ATOL == onnxsurgery.DEFAULT_ATOL


@pytest.mark.parametrize("entry, frozen", [("script", True), ("main", False)])
def test_only_the_executable_freezes_objects_for_shutdown(entry: str, frozen: bool) -> None:
    """The ``onnxsurgery`` executable (``cli.script``) freezes the objects its imports made, so
    that Python's shutdown does not collect over them (~60 ms of a cleanup run on a 50 MB
    model); ``main``, which tests call in-process, leaves the collector alone."""
    script = f"""
import gc, sys
from onnxsurgery.cli import {entry}
sys.argv = ["onnxsurgery", "--version"]
try:
    {entry}()
except SystemExit as exc:
    print(exc.code, gc.get_freeze_count() > 1000)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines()[-1] == f"0 {frozen}", out.stdout


def test_the_installed_executable_is_the_script_entry() -> None:
    from importlib.metadata import entry_points

    (ep,) = [e for e in entry_points(group="console_scripts") if e.name == "onnxsurgery"]
    assert ep.value == "onnxsurgery.cli:script"


def test_importing_the_package_imports_none_of_its_api() -> None:
    """``import onnxsurgery`` costs ~3 ms, not the ~0.2 s of importing every module (onnx,
    numpy, rich and all): a script that only needs ``onnxsurgery.__version__`` or one function
    pays for that function's module."""
    script = """
import sys
import onnxsurgery
print(sorted(m for m in sys.modules if m.startswith("onnxsurgery")))
print([m for m in ("onnx", "numpy", "rich", "typer") if m in sys.modules])
print(onnxsurgery.__version__ != "")
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == [
        "['onnxsurgery', 'onnxsurgery.errors', 'onnxsurgery.lazy']",
        "[]",
        "True",
    ], out.stdout


def test_the_executable_ends_quietly_after_fold_constants(tmp_path) -> None:
    """The executable's freeze keeps only what the imports made before the command: onnxsim's
    nanobind executor, made by the pass, is collected at shutdown. Frozen at exit instead, it
    outlived its module and every fold-constants run ended with "nanobind: leaked 1
    instances!" on stderr."""
    from pathlib import Path

    model = Path(__file__).resolve().parents[1] / "fixtures" / "attention_block" / "torchscript" / "model.onnx"
    script = f"""
import sys
from onnxsurgery.cli import script
sys.argv = ["onnxsurgery", "run", {str(model)!r}, "-o", {str(tmp_path / "out.onnx")!r}, "-q",
            "--passes", "fold-constants"]
script()
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stderr == "", out.stderr
