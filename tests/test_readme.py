"""The README's Python example runs as written, against a bundled fixture."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

import onnxsurgery

README = Path(__file__).resolve().parent.parent / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_readme_python_example_runs(tmp_path, monkeypatch):
    (block,) = _python_blocks()
    root = README.parent
    monkeypatch.chdir(root)
    code = block.replace('"build/', f'"{tmp_path}/')
    namespace: dict = {}
    exec(compile(code, str(README), "exec"), namespace)  # noqa: S102 - the README's own code
    assert namespace["report"].validation and namespace["report"].passes[0].modified
    case, parts = namespace["case"], namespace["parts"]
    assert set(parts) == set(case.outputs) == {"a", "b"}
    for name, expected in case.outputs.items():
        np.testing.assert_allclose(parts[name], expected, atol=1e-4, rtol=1e-3)


def test_every_name_the_readme_calls_on_the_package_exists():
    text = README.read_text()
    called = set(re.findall(r"onnxsurgery\.([a-z_]+)\(", text))
    assert called, "the README shows no onnxsurgery.<function>() call"
    missing = sorted(n for n in called if not hasattr(onnxsurgery, n))
    assert not missing, f"README calls onnxsurgery.{missing}, which the package does not export"
    assert set(onnxsurgery.__all__) <= set(dir(onnxsurgery))
