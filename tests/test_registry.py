"""Pass discovery through entry points, as a third-party package would declare a pass."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import onnx
import pytest

from onnxsurgery import run
from onnxsurgery.errors import PluginError
from onnxsurgery.pipeline import registry

PLUGIN = '''
"""A third-party pass: renames the graph."""
import onnx
from onnxsurgery import Pass, PassResult, Diagnostic


class RenameGraph(Pass):
    """Give the graph a new name."""

    name = "rename-graph"
    in_place = True  # it renames the graph of the model it is given

    def __init__(self, *, to: str = "renamed") -> None:
        super().__init__(to=to)
        self.to = to

    def run(self, model, ctx):
        if model.graph.name == self.to:
            return PassResult(model, modified=False)
        model.graph.name = self.to
        return PassResult(model, modified=True, diagnostics=[Diagnostic.info(f"graph is now {self.to}")])
'''


def make_plugin(root: Path, entry_points: str, module: str = PLUGIN, modname: str = "surgery_plugin") -> Path:
    """Write a tiny installed distribution (module + dist-info) under root."""
    (root / f"{modname}.py").write_text(module)
    dist = root / "surgery_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: surgery-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(textwrap.dedent(entry_points))
    return root


@pytest.fixture
def plugin_path(tmp_path, monkeypatch):
    make_plugin(tmp_path, "[onnxsurgery.passes]\nrename-graph = surgery_plugin:RenameGraph\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_builtin_passes_are_discovered():
    entries = registry.discover()
    for name in ("cleanup", "infer-shapes"):
        assert entries[name].available, entries[name].error
        assert entries[name].cls.name == name
        assert "onnxsurgery" in entries[name].source


def test_third_party_plugin_is_found_and_runs(plugin_path, tiny_model):
    entries = registry.discover()
    assert entries["rename-graph"].available
    assert "surgery-plugin 0.1" in entries["rename-graph"].source
    report = run(tiny_model, passes="rename-graph(to=fresh)")
    assert report.model.graph.name == "fresh"
    assert report.passes[0].modified


def test_duplicate_name_names_both_sources(tmp_path, monkeypatch):
    make_plugin(tmp_path, "[onnxsurgery.passes]\ncleanup = surgery_plugin:RenameGraph\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    entry = registry.discover()["cleanup"]
    assert not entry.available
    assert "declared twice" in entry.error
    assert "onnxsurgery.passes.cleanup:Cleanup" in entry.error
    assert "surgery_plugin:RenameGraph" in entry.error
    with pytest.raises(PluginError, match="declared twice"):
        registry.get_pass("cleanup")


def test_broken_plugin_is_listed_not_fatal(tmp_path, monkeypatch):
    make_plugin(
        tmp_path,
        "[onnxsurgery.passes]\nbroken = broken_plugin:RenameGraph\n",
        module="raise ImportError('needs libfoo')\n",
        modname="broken_plugin",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    entries = registry.discover()
    assert entries["cleanup"].available
    assert not entries["broken"].available
    assert "ImportError: needs libfoo" in entries["broken"].error
    with pytest.raises(PluginError, match="pass 'broken' is unavailable: import failed"):
        registry.get_pass("broken")


def test_entry_point_must_name_a_pass_class(monkeypatch):
    fake = metadata.EntryPoint(name="json-dumps", value="json:dumps", group=registry.ENTRY_POINT_GROUP)
    monkeypatch.setattr(registry, "_entry_points", lambda: [fake])
    entry = registry.discover()["json-dumps"]
    assert not entry.available and "is not a subclass of Pass" in entry.error


def test_installed_script_lists_and_runs_a_plugin(plugin_path, tiny_model, tmp_path):
    """The console script, as a user runs it, with the plugin on its path."""
    script = Path(sys.executable).with_name("onnxsurgery")
    env = dict(os.environ, PYTHONPATH=str(plugin_path), COLUMNS="200")
    listed = subprocess.run([script, "passes"], capture_output=True, text=True, env=env, check=True)
    assert "rename-graph" in listed.stdout and "Give the graph a new name." in listed.stdout
    src = tmp_path / "in.onnx"
    onnx.save(tiny_model, src)
    done = subprocess.run(
        [script, "run", src, "-o", tmp_path / "out.onnx", "--passes", "rename-graph(to=x)", "-q"],
        capture_output=True, text=True, env=env,
    )
    assert done.returncode == 0, done.stderr
    assert onnx.load(tmp_path / "out.onnx").graph.name == "x"
