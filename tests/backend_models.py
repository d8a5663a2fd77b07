"""The ONNX backend models shipped inside the ``onnx`` wheel, and what onnxsurgery makes of them.

``onnx/backend/test/data/{pytorch-converted,pytorch-operator,simple}/*/model.onnx`` each come
with ``test_data_set_N/input_K.pb`` / ``output_K.pb`` written by other tools (often without
tensor names, often IR 3 and opset 6). The ``light/`` zoo nets ship only their expected output;
their input is what ONNX's backend runner feeds them (``Runner.generate_dummy_data``, not
random), written here as an unnamed ``input_0.pb`` the way that runner writes it. The *baseline* of a model is ONNX Runtime itself: the
model loads on ORT's CPU provider, its stored inputs bound the way ONNX's backend runner binds
them (the K-th graph input that is not an initializer), and every output matches the stored one
within onnxsurgery's default tolerances. This oracle uses only onnx, onnxruntime and numpy.

Used by ``tests/test_backend_models.py`` (a subset in ``make test``, all of them behind the
``backend`` marker) and ``bench/backend_models.py`` (the counts table).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper
from onnx.backend.test.runner import Runner
from typer.testing import CliRunner

from onnxsurgery.cli import app

DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
KINDS = ("pytorch-converted", "pytorch-operator", "simple")
ATOL, RTOL = 1e-4, 1e-3  # onnxsurgery's defaults (validation/tolerances.py)
PASSES = "cleanup, infer-shapes, fold-constants"


@dataclass(frozen=True)
class BackendModel:
    kind: str
    name: str
    directory: Path  # holds test_data_set_N/
    model: Path

    @property
    def label(self) -> str:
        return f"{self.kind}/{self.name}"


def backend_models(light_dir: str | os.PathLike | None = None) -> list[BackendModel]:
    """Every shipped model that has stored test data, in a stable order; with ``light_dir``,
    the light zoo nets too, their test data written under it."""
    found = []
    for kind in KINDS:
        for d in sorted((DATA / kind).iterdir()):
            if (d / "model.onnx").is_file() and any(d.glob("test_data_set_*")):
                found.append(BackendModel(kind, d.name, d, d / "model.onnx"))
    if light_dir is not None:
        for path in sorted((DATA / "light").glob("light_*.onnx")):
            found.append(_light_model(path, Path(light_dir)))
    return found


def _light_model(path: Path, root: Path) -> BackendModel:
    """Write the case ONNX's backend runner would feed ``light/NAME.onnx`` under ``root``."""
    model = onnx.load(path, load_external_data=False)
    case = root / path.stem / "test_data_set_0"
    case.mkdir(parents=True, exist_ok=True)
    inits = {t.name for t in model.graph.initializer}
    graph_inputs = [i for i in model.graph.input if i.name not in inits]
    for k, vi in enumerate(graph_inputs):
        value = Runner.generate_dummy_data(vi, seed=0, name=path.stem, random=False)
        (case / f"input_{k}.pb").write_bytes(numpy_helper.from_array(value).SerializeToString())
    for k in range(len(model.graph.output)):
        stored = path.with_name(f"{path.stem}_output_{k}.pb")
        (case / f"output_{k}.pb").write_bytes(stored.read_bytes())
    return BackendModel("light", path.stem, root / path.stem, path)


def _read(path: Path) -> np.ndarray:
    proto = onnx.TensorProto()
    proto.ParseFromString(path.read_bytes())
    if proto.data_type == onnx.TensorProto.UNDEFINED:
        raise ValueError(f"{path.name} is not a TensorProto")
    return numpy_helper.to_array(proto)


def _numbered(directory: Path, kind: str) -> list[Path]:
    files = list(directory.glob(f"{kind}_*.pb"))
    return sorted(files, key=lambda f: int(f.stem.split("_")[1]))


def baseline(bm: BackendModel) -> str | None:
    """None when ORT runs the model and matches every stored output; else why not."""
    try:
        model = onnx.load(bm.model)
        inits = {t.name for t in model.graph.initializer}
        in_names = [i.name for i in model.graph.input if i.name not in inits]
        out_names = [o.name for o in model.graph.output]
        options = ort.SessionOptions()
        options.log_severity_level = 3
        session = ort.InferenceSession(
            str(bm.model), options, providers=["CPUExecutionProvider"]
        )
    except Exception as exc:
        return f"ORT cannot load it: {str(exc).splitlines()[0][:160]}"
    for case in sorted(bm.directory.glob("test_data_set_*")):
        try:
            inputs = [_read(f) for f in _numbered(case, "input")]
            expected = [_read(f) for f in _numbered(case, "output")]
        except Exception as exc:
            return f"stored data does not read: {exc}"
        if len(inputs) != len(in_names) or len(expected) != len(out_names):
            return "stored data and graph disagree on counts"
        try:
            got = session.run(out_names, dict(zip(in_names, inputs, strict=True)))
        except Exception as exc:
            return f"ORT fails: {str(exc).splitlines()[0][:160]}"
        for name, g, e in zip(out_names, got, expected, strict=True):
            g, e = np.asarray(g), np.asarray(e)
            if g.shape != e.shape:
                return f"output {name}: shape {g.shape} vs stored {e.shape}"
            if e.dtype.kind in "fc":
                ok = np.allclose(g, e, atol=ATOL, rtol=RTOL, equal_nan=True)
            else:
                ok = np.array_equal(g, e)
            if not ok:
                return f"output {name} differs from the stored one"
    return None


def cli(*args: object) -> tuple[int, str]:
    """Run ``onnxsurgery ARGS`` in this process; (exit code, last line of output).

    An exception that escaped the CLI (a bug, not a user error) is exit code -1.
    """
    result = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        exc = result.exception
        return -1, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    text = (result.output or "").strip().splitlines()
    return result.exit_code, (text[-1] if text else "")


def validate_exit(bm: BackendModel) -> tuple[int, str]:
    return cli("validate", bm.model, "--ref", bm.directory, "--provider", "cpu", "-q")


def run_exit(bm: BackendModel, out_dir: str | os.PathLike) -> tuple[int, str]:
    out = Path(out_dir) / f"{bm.kind}-{bm.name}.onnx"
    code, line = cli(
        "run", bm.model, "-o", out, "--passes", PASSES, "--ref", bm.directory,
        "--provider", "cpu", "-q",
    )
    if code == 0 and not out.is_file():
        return 3, "exit 0 but no output written"
    return code, line
