"""The first diverging node (issue 27 item 2): ``onnxsurgery.localize``, ``validate
--localize`` and a failing ``run``, on both exporters' fixtures."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from rich.console import Console
from typer.testing import CliRunner

import onnxsurgery
from onnxsurgery.cli import app
from onnxsurgery.passes.symbolize import Symbolize
from onnxsurgery.pipeline.contract import Pass, PassResult
from onnxsurgery.validation.runtime import _probe_cuda

ROOT = Path(__file__).resolve().parents[1]
ALEXNET = ROOT / "fixtures/alexnet_view"
ATTENTION = ROOT / "fixtures/attention_block/torchscript"
runner = CliRunner()


def _perturbed(src: Path, out: Path, weight_index: int = 2) -> tuple[str, list[str]]:
    """A copy of ``src`` with one element of one initializer changed; that initializer's name
    and the names of the nodes that read it."""
    model = onnx.load(src)
    floats = [t for t in model.graph.initializer if t.data_type == onnx.TensorProto.FLOAT and len(t.dims) > 1]
    weight = floats[weight_index]
    arr = numpy_helper.to_array(weight).copy()
    arr.flat[0] += 1.0
    weight.CopyFrom(numpy_helper.from_array(arr, weight.name))
    onnx.save(model, out)
    return weight.name, [n.name for n in model.graph.node if weight.name in n.input]


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_perturbed_weight_is_found_at_the_node_that_reads_it(tmp_path: Path, exporter: str) -> None:
    fixture = ALEXNET / exporter
    bad = tmp_path / "bad.onnx"
    weight, readers = _perturbed(fixture / "model.onnx", bad)
    case = onnxsurgery.load_cases(fixture)[0]
    found = onnxsurgery.localize(bad, fixture / "model.onnx", case.inputs, provider="cpu", max_tensors=3)
    assert found and found.node in readers, (found.headline, readers)
    assert found.batches >= 2  # bounded batches: the search went past the first
    origin = {o.name: o for o in found.inputs}[weight]
    assert origin.origin == "initializer" and origin.comparison is not None
    assert origin.comparison.mismatches == 1
    assert not found.inputs_agree


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_identical_models_have_no_diverging_node(exporter: str) -> None:
    fixture = ALEXNET / exporter
    case = onnxsurgery.load_cases(fixture)[0]
    found = onnxsurgery.localize(fixture / "model.onnx", fixture / "model.onnx", case.inputs, provider="cpu")
    assert not found and found.compared > 5
    assert found.headline.startswith("no diverging node")


def _wrong_rewrite(tmp_path: Path) -> Path:
    """The attention block symbolized, then its first Reshape's shape changed from
    [0, 0, 3, 2, 8] to [0, 0, 3, 8, 2]: still a valid model, computing something else."""
    good = tmp_path / "good.onnx"
    onnxsurgery.run(ATTENTION / "model.onnx", [Symbolize(dynamic_axes={"x": {0: "batch", 1: "seq"}})], output=good)
    model = onnx.load(good)
    shape = next(t for t in model.graph.initializer if t.name == "symbolize/const[0,0,3,2,8]")
    shape.CopyFrom(numpy_helper.from_array(np.array([0, 0, 3, 8, 2], np.int64), shape.name))
    wrong = tmp_path / "wrong.onnx"
    onnx.save(model, wrong)
    return wrong


def test_wrong_rewrite_is_found_at_that_reshape(tmp_path: Path) -> None:
    wrong = _wrong_rewrite(tmp_path)
    case = onnxsurgery.load_cases(ATTENTION)[0]
    found = onnxsurgery.localize(wrong, ATTENTION / "model.onnx", case.inputs, provider="cpu")
    assert (found.op, found.node) == ("Reshape", "/Reshape")
    assert found.inputs_agree is False  # its shape input differs from the original constant
    shape_input = found.inputs[1]
    assert shape_input.origin == "initializer" and shape_input.comparison is not None


def test_validate_against_localize_prints_the_node_and_writes_json(tmp_path: Path) -> None:
    wrong = _wrong_rewrite(tmp_path)
    report = tmp_path / "v.json"
    result = runner.invoke(
        app,
        ["validate", str(wrong), "--against", str(ATTENTION / "model.onnx"), "--ref", str(ATTENTION),
         "--localize", "--provider", "cpu", "--report", str(report)],
        env={"COLUMNS": "80"},
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert "first diverging node on case test_data_set_0: Reshape '/Reshape' (node 7)" in text
    shown = [line for line in result.output.splitlines() if not line.startswith("error:")]
    assert all(len(line) <= 80 for line in shown)  # the error line is one line, on stderr
    assert json.loads(report.read_text())["localized"]["node"] == "/Reshape"


def test_localize_validation_picks_against_or_the_original(tmp_path: Path) -> None:
    """The Python form of validate --localize: with against=, the comparison's inputs; else the
    reference cases and original=, which it needs."""
    from onnxsurgery.divergence import LocalizedFailure, localize_validation

    wrong = _wrong_rewrite(tmp_path)
    original = ATTENTION / "model.onnx"
    failing = onnxsurgery.compare_models(wrong, original, feeds_or_cases=ATTENTION, provider="cpu")
    assert not failing
    shown = localize_validation(wrong, failing, against=original, feeds_or_cases=ATTENTION, provider="cpu")
    assert isinstance(shown, LocalizedFailure) and shown.report is failing
    assert shown.localized.node == "/Reshape"
    by_refs = localize_validation(wrong, failing, original=original, feeds_or_cases=ATTENTION, provider="cpu")
    assert by_refs.localized.node == "/Reshape"
    with pytest.raises(onnxsurgery.UsageError, match="needs the original model"):
        localize_validation(wrong, failing, feeds_or_cases=ATTENTION)


def test_validate_ref_localize_needs_the_original(tmp_path: Path) -> None:
    result = runner.invoke(app, ["validate", str(ATTENTION / "model.onnx"), "--ref", str(ATTENTION), "--localize"])
    assert result.exit_code == 2
    assert "--localize with --ref needs the model as exported: give --original ORIG.onnx" in result.output


def test_validate_ref_localize_against_original(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    _, readers = _perturbed(ALEXNET / "torchscript/model.onnx", bad)
    result = runner.invoke(
        app,
        ["validate", str(bad), "--ref", str(ALEXNET / "torchscript"), "--localize",
         "--original", str(ALEXNET / "torchscript/model.onnx"), "--provider", "cpu"],
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert f"'{readers[0]}'" in result.output and "first diverging node" in result.output


class _BreakWeight(Pass):
    """Test pass: adds 1 to the first element of one weight (a broken rewrite)."""

    name = "break-weight"

    def __call__(self, model: onnx.ModelProto, ctx: object) -> PassResult:
        weight = next(t for t in model.graph.initializer if len(t.dims) > 1)
        arr = numpy_helper.to_array(weight).copy()
        arr.flat[0] += 1.0
        weight.CopyFrom(numpy_helper.from_array(arr, weight.name))
        return PassResult(model, True)


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_failing_run_is_localized_against_the_input_model(tmp_path: Path, exporter: str) -> None:
    fixture = ALEXNET / exporter
    with pytest.raises(onnxsurgery.ValidationMismatch) as info:
        onnxsurgery.Pipeline([_BreakWeight()], references=fixture, provider="cpu").run(fixture / "model.onnx")
    report = info.value.pipeline_report
    weight = next(t.name for t in onnx.load(fixture / "model.onnx").graph.initializer if len(t.dims) > 1)
    readers = [n.name for n in onnx.load(fixture / "model.onnx").graph.node if weight in n.input]
    assert report.localized and report.localized.node in readers
    assert report.to_dict()["localized"]["case"] == "test_data_set_0"


# One model on two providers (CUDA against CPU): each side's provider reaches its sessions.

cuda_loads = _probe_cuda()[0]


def _two_tiny(tmp_path: Path) -> tuple[Path, Path]:
    """Graphs ``model_a`` and ``model_b``: Relu, Mul by a constant (2 in a, 3 in b), Add."""
    paths = []
    for name, c in (("a", "2.0"), ("b", "3.0")):
        text = f"""<ir_version: 8, opset_import: ["" : 17]>
        model_{name} (float[2,3] x) => (float[2,3] y) <float c = {{{c}}}> {{
          t = Relu(x)
          u = Mul(t, c)
          y = Add(u, x)
        }}"""
        paths.append(tmp_path / f"{name}.onnx")
        onnx.save(onnx.parser.parse_model(text), paths[-1])
    return paths[0], paths[1]


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> dict[str, set[str]]:
    """Graph name -> the providers (as requested: auto, cuda, cpu) its sessions were made with,
    by validation's runner and by the search."""
    from onnxsurgery.divergence import search
    from onnxsurgery.validation import case_runner, runtime

    seen: dict[str, set[str]] = {}

    def recording(model: Any, choice: Any, **kwargs: Any) -> Any:
        graph = model if isinstance(model, onnx.ModelProto) else onnx.load(model, load_external_data=False)
        seen.setdefault(graph.graph.name, set()).add(choice.requested)
        return runtime.create_session(model, choice, **kwargs)

    monkeypatch.setattr(search, "create_session", recording)
    monkeypatch.setattr(case_runner, "create_session", recording)
    return seen


def test_each_side_runs_on_its_own_provider(tmp_path: Path, asked: dict[str, set[str]]) -> None:
    a, b = _two_tiny(tmp_path)
    report = onnxsurgery.compare_models(a, b, provider="auto", reference_provider="cpu")
    assert not report and report.provider.endswith("; reference on CPU (asked for)")
    feeds = {"x": np.ones((2, 3), np.float32)}
    found = onnxsurgery.localize(a, b, feeds, provider="auto", reference_provider="cpu")
    assert (found.op, found.index) == ("Mul", 1)
    assert asked == {"model_a": {"auto"}, "model_b": {"cpu"}}
    said = found.to_dict()
    assert said["reference_provider"] == "CPU (asked for)" and said["provider"] != said["reference_provider"]
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(found.view())
    assert f"runtime: model on {found.provider}; reference on CPU (asked for)" in console.export_text()


def test_one_model_cpu_against_cpu_has_no_diverging_node() -> None:
    fixture = ALEXNET / "torchscript"
    case = onnxsurgery.load_cases(fixture)[0]
    model = fixture / "model.onnx"
    found = onnxsurgery.localize(model, model, case.inputs, provider="cpu", reference_provider="cpu")
    assert not found and found.compared > 5
    assert found.provider == found.reference_provider == "CPU (asked for)"


def test_validate_against_provider_localizes_and_says_which_ran_each_side(
    tmp_path: Path, asked: dict[str, set[str]]
) -> None:
    a, b = _two_tiny(tmp_path)
    report = tmp_path / "v.json"
    result = runner.invoke(
        app,
        ["validate", str(a), "--against", str(b), "--provider", "auto", "--against-provider", "cpu",
         "--localize", "--report", str(report)],
        env={"COLUMNS": "200"},
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "first diverging node on case random_0: Mul '(unnamed, node 1)' (node 1)" in result.output
    assert result.output.count("; reference on CPU (asked for)") == 1  # the report's runtime line
    assert asked == {"model_a": {"auto"}, "model_b": {"cpu"}}
    written = json.loads(report.read_text())
    assert written["provider"].endswith("; reference on CPU (asked for)")
    assert written["localized"]["reference_provider"] == "CPU (asked for)"


def test_validate_same_model_cpu_against_cpu_passes(tmp_path: Path) -> None:
    a, _ = _two_tiny(tmp_path)
    result = runner.invoke(
        app, ["validate", str(a), "--against", str(a), "--provider", "cpu", "--against-provider", "cpu", "--localize"]
    )
    assert result.exit_code == 0, result.output
    assert "runtime: CPU (asked for)" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--against-provider", "cpu", "--ref", str(ALEXNET / "torchscript")],
         "error: --against-provider is for --against OTHER.onnx: the provider that model runs on"),
        (["--against", "A", "--against-provider", "xpu"],
         "error: --against-provider: provider 'xpu' is not one of auto, cuda, cpu"),
    ],
)  # fmt: skip
def test_against_provider_refusals(tmp_path: Path, args: list[str], message: str) -> None:
    a, _ = _two_tiny(tmp_path)
    args = [str(a) if x == "A" else x for x in args]
    result = runner.invoke(app, ["validate", str(a), *args], env={"COLUMNS": "200"})
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [message]


@pytest.mark.skipif(cuda_loads, reason="CUDA loads on this machine")
@pytest.mark.parametrize(
    ("option", "other"), [("--provider", "--against-provider"), ("--against-provider", "--provider")]
)
def test_cuda_side_fails_cleanly_without_cuda(tmp_path: Path, option: str, other: str) -> None:
    a, _ = _two_tiny(tmp_path)
    result = runner.invoke(
        app, ["validate", str(a), "--against", str(a), option, "cuda", other, "cpu", "--localize"],
        env={"COLUMNS": "400"},
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"error: {option} cuda: CUDA cannot load here (")
    assert line.endswith(f"or use {option} cpu")


@pytest.mark.skipif(not cuda_loads, reason="no CUDA here")
def test_cuda_against_cpu_agrees_or_names_a_node() -> None:
    fixture = ALEXNET / "torchscript"
    model = fixture / "model.onnx"
    case = onnxsurgery.load_cases(fixture)[0]
    found = onnxsurgery.localize(model, model, case.inputs, provider="cuda", reference_provider="cpu")
    assert found.reason is None and found.compared > 5
    assert found.provider is not None and found.provider.startswith("CUDA")
    assert found.reference_provider == "CPU (asked for)"
    if found:
        assert found.node in {n.name for n in onnx.load(model).graph.node}
    result = runner.invoke(
        app, ["validate", str(model), "--against", str(model), "--ref", str(fixture),
              "--provider", "cuda", "--against-provider", "cpu", "--localize"],
    )  # fmt: skip
    assert result.exit_code in (0, 1), result.output
    assert "reference on CPU (asked for)" in " ".join(result.output.split())
    if result.exit_code == 1:
        assert "diverging node" in result.output
