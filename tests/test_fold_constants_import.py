"""fold-constants imports onnxsim without torch where only onnxsim's PPQ bridge would use it.

Each check runs in a fresh interpreter: whether torch gets imported depends on what the process
imported before. Fake ``onnxsim``/``torch`` packages on ``sys.path`` stand in for the real ones
where a test needs an onnxsim that behaves otherwise.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import onnx.parser
from onnx import numpy_helper

from onnxsurgery.passes.fold_constants.onnxsim_import import PPQ_BRIDGE, _NoTorchForBridge

# A weight read through constant arithmetic and shape arithmetic on it (folded), a MatMul on the
# input (kept) and a Reshape to the shape it already has (dropped).
MODEL = """
<ir_version: 8, opset_import: ["" : 17]>
m (float[N,4] x) => (float[N,4] y) <float[4,4] w = {1,0,0,0, 0,1,0,0, 0,0,1,0, 0,0,0,1}> {
  two = Constant <value = float {2}> ()
  w2 = Mul (w, two)
  s = Shape (w2)
  shp = Slice (s, zero, two64)
  y0 = MatMul (x, w2)
  y = Reshape (y0, shp2)
  zero = Constant <value = int64[1] {0}> ()
  two64 = Constant <value = int64[1] {2}> ()
  m1 = Constant <value = int64[1] {-1}> ()
  shp2 = Concat <axis = 0> (m1, four)
  four = Constant <value = int64[1] {4}> ()
}
"""

FOLD = """
import sys
from onnxsurgery.cli import main
if sys.argv[3] == "torch-first":
    import torch
sys.argv = ["onnxsurgery", "run", sys.argv[1], "-o", sys.argv[2], "-q", "--passes", "fold-constants"]
try:
    main()
except SystemExit as exc:
    assert exc.code == 0, exc.code
print("torch" in sys.modules)
print(sys.modules["onnxsim"].ppq_integration.unavailable_reason())
print([f.active for f in sys.meta_path if type(f).__name__ == "_NoTorchForBridge"])
"""


def _python(code: str, *args: str, path: Path | None = None) -> list[str]:
    env = dict(os.environ)
    if path is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(path), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.splitlines()


def _sorted_model(text: str) -> onnx.ModelProto:
    model = onnx.parser.parse_model(text)
    # ONNX text lists nodes in any order; the checker wants them sorted.
    produced = {i.name for i in model.graph.input} | {t.name for t in model.graph.initializer}
    nodes, pending = [], list(model.graph.node)
    while pending:
        ready = [n for n in pending if all(i in produced for i in n.input if i)]
        for node in ready:
            nodes.append(node)
            produced.update(node.output)
            pending.remove(node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def test_a_fold_imports_no_torch_and_writes_what_onnxsim_with_torch_writes(tmp_path) -> None:
    src = tmp_path / "m.onnx"
    onnx.save(_sorted_model(MODEL), src)
    plain, with_torch = tmp_path / "plain.onnx", tmp_path / "torch.onnx"
    lines = _python(FOLD, str(src), str(plain), "plain")
    assert lines == [
        "False",
        f"ModuleNotFoundError: torch is not imported for {PPQ_BRIDGE}: ppq is not installed",
        "[False]",  # one finder, inactive once onnxsim is imported
    ]
    lines = _python(FOLD, str(src), str(with_torch), "torch-first")
    assert lines[0] == "True" and lines[1].startswith("ModuleNotFoundError: No module named 'ppq'")
    folded = onnx.load(plain)
    assert [n.op_type for n in folded.graph.node] == ["MatMul"]
    (weight,) = folded.graph.initializer
    np.testing.assert_array_equal(numpy_helper.to_array(weight), 2 * np.eye(4, dtype=np.float32))
    assert plain.read_bytes() == with_torch.read_bytes()


def test_only_the_bridge_is_refused_torch() -> None:
    finder = _NoTorchForBridge()
    finder.active = True
    assert finder.find_spec("torch", None) is None  # this module's own import of torch
    assert finder.find_spec("numpy", None) is None
    scope = {"__name__": PPQ_BRIDGE, "finder": finder}
    exec(
        textwrap.dedent(
            """
            try:
                finder.find_spec("torch", None)
            except ModuleNotFoundError as exc:
                refused = exc.name
            else:
                refused = None
            other = finder.find_spec("onnx", None)
            """
        ),
        scope,
    )
    assert scope["refused"] == "torch" and scope["other"] is None
    finder.active = False
    exec("refused = finder.find_spec('torch', None)", scope)
    assert scope["refused"] is None


def _fake_packages(root: Path, bridge: str) -> Path:
    (root / "torch").mkdir(parents=True)
    (root / "torch" / "__init__.py").write_text("LOADED = True\n")
    (root / "onnxsim").mkdir()
    (root / "onnxsim" / "__init__.py").write_text("from onnxsim import ppq_integration\n")
    (root / "onnxsim" / "ppq_integration.py").write_text(textwrap.dedent(bridge))
    return root


IMPORT = """
import sys
from onnxsurgery.passes.fold_constants.onnxsim_import import import_onnxsim
onnxsim = import_onnxsim()
print(onnxsim.__file__.startswith(sys.argv[1]), "torch" in sys.modules, onnxsim.ppq_integration.STATE)
"""


def test_an_onnxsim_that_needs_torch_outside_the_bridge_is_imported_as_it_is(tmp_path) -> None:
    root = _fake_packages(
        tmp_path,
        """
        import torch  # unguarded: this onnxsim cannot load without torch
        STATE = "with torch"
        """,
    )
    assert _python(IMPORT, str(root), path=root) == ["True True with torch"]


def test_a_bridge_that_tolerates_no_torch_gets_none(tmp_path) -> None:
    root = _fake_packages(
        tmp_path,
        """
        try:
            import torch
            STATE = "with torch"
        except Exception as exc:
            STATE = type(exc).__name__
        """,
    )
    assert _python(IMPORT, str(root), path=root) == ["True False ModuleNotFoundError"]
