"""Two ONNX Runtime distributions in one environment (issue 26.10).

``onnxruntime`` and ``onnxruntime-gpu`` (or ``-directml``, ``-openvino``, ...) both install the
``onnxruntime/`` folder: the later install overwrites the other's files and uninstalling either
breaks ``import onnxruntime``. Where ONNX Runtime is first used, one warning line on stderr names
them and the fix. The installs here are fake ``*.dist-info`` folders, never real packages.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
from pathlib import Path

import onnx
import pytest
from pty_session import onnxsurgery_argv

from onnxsurgery.validation import ort_installs


def fake_dist(site: Path, name: str, *, top_level: str | None = "onnxruntime") -> None:
    info = site / f"{name.replace('-', '_')}-1.20.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.20.0\n")
    if top_level is not None:
        (info / "top_level.txt").write_text(f"{top_level}\n")


@pytest.fixture
def only_site(tmp_path, monkeypatch) -> Path:
    """A site folder whose distributions are the only ones ort_installs sees."""
    site = tmp_path / "site"
    site.mkdir()
    every = importlib.metadata.distributions
    monkeypatch.setattr(ort_installs.importlib.metadata, "distributions", lambda: every(path=[str(site)]))
    return site


def test_two_runtimes_are_found_and_named_with_the_fix(only_site):
    fake_dist(only_site, "onnxruntime")
    fake_dist(only_site, "onnxruntime-gpu")
    fake_dist(only_site, "numpy", top_level="numpy")
    names = ort_installs.runtime_distributions()
    assert sorted(names) == ["onnxruntime", "onnxruntime-gpu"]
    message = ort_installs.several_runtimes_message(["onnxruntime", "onnxruntime-gpu"])
    assert message == (
        "warning: onnxruntime and onnxruntime-gpu are both installed here and both write the same "
        "onnxruntime/ folder, so uninstalling one breaks `import onnxruntime`; keep one: "
        "pip uninstall -y onnxruntime onnxruntime-gpu && pip install onnxruntime-gpu"
    )


def test_a_variant_without_top_level_txt_counts_by_its_name(only_site):
    fake_dist(only_site, "onnxruntime-openvino", top_level=None)
    fake_dist(only_site, "onnxruntime-directml")
    fake_dist(only_site, "rich", top_level=None)
    assert sorted(ort_installs.runtime_distributions()) == ["onnxruntime-directml", "onnxruntime-openvino"]


def test_one_runtime_says_nothing(only_site):
    fake_dist(only_site, "onnxruntime-gpu")
    assert ort_installs.runtime_distributions() == ["onnxruntime-gpu"]
    assert ort_installs.several_runtimes_message(["onnxruntime-gpu"]) is None


def test_three_runtimes_keep_the_first_variant():
    message = ort_installs.several_runtimes_message(["onnxruntime", "onnxruntime-directml", "onnxruntime-gpu"])
    assert message is not None
    assert message.startswith("warning: onnxruntime, onnxruntime-directml and onnxruntime-gpu are all installed")
    assert message.endswith(
        "pip uninstall -y onnxruntime onnxruntime-directml onnxruntime-gpu && pip install onnxruntime-directml"
    )


@pytest.fixture
def beside_the_real_one(tmp_path) -> dict[str, str]:
    """An environment where a fake onnxruntime-directml sits before the installed runtime."""
    site = tmp_path / "site"
    fake_dist(site, "onnxruntime-directml")
    return {**os.environ, "PYTHONPATH": str(site)}


def run_cli(*args, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(onnxsurgery_argv(*map(str, args)), cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def test_the_command_says_it_once_where_onnxruntime_is_used(tiny_model, tmp_path, beside_the_real_one):
    model = tmp_path / "m.onnx"
    onnx.save(tiny_model, model)
    done = run_cli("validate", model, "--against", model, "--provider", "cpu", "-q",
                   env=beside_the_real_one, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr  # one line, though two sessions ran
    assert lines[0].startswith("warning: onnxruntime-directml and "), lines[0]
    assert "pip uninstall -y onnxruntime-directml " in lines[0] and "&& pip install onnxruntime-directml" in lines[0]


def test_a_command_that_runs_no_model_does_not_look(tiny_model, tmp_path, beside_the_real_one):
    model = tmp_path / "m.onnx"
    onnx.save(tiny_model, model)
    done = run_cli("run", model, "-o", tmp_path / "o.onnx", "--passes", "cleanup", "-q",
                   env=beside_the_real_one, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0 and done.stderr == "", done.stderr


def test_the_project_environment_has_one_runtime():
    # the check itself, on this environment: one ORT distribution, so no warning in any test run
    assert len(ort_installs.runtime_distributions()) == 1, ort_installs.runtime_distributions()
