"""fold-constants end to end over the exported torch fixtures (both exporters).

Alone, on the static models, the folded model must reproduce the stored torch outputs at the
traced size (the only size a static model accepts). After ``symbolize`` it must reproduce them at
every stored size: folding must not undo what symbolize did. The data-dependent fixtures
(nonzero, masked gather, unrolled loop) fold like the rest, never with a traceback.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from fixture_manifest import FixtureEntry, load_manifest

import onnxsurgery
from onnxsurgery.errors import OnnxSurgeryError
from onnxsurgery.validation.references import Case, load_cases
from onnxsurgery.validation.runtime import run_model

pytestmark = pytest.mark.e2e

EXPORTED = [e for e in load_manifest() if e.exported]
DATA_DEPENDENT = [e for e in EXPORTED if e.name in ("nonzero", "bool_mask", "pad_loop")]
# The project's default validation tolerances (onnxsurgery.validation.tolerances).
ATOL, RTOL = 1e-4, 1e-3


def _assert_case_matches(model, case: Case, where: str) -> None:
    got = run_model(model, case.inputs, provider="cpu", output_names=list(case.outputs))
    for name, ref in case.outputs.items():
        out = got[name]
        assert out.shape == ref.shape, f"{where}: {name} has shape {out.shape}, torch {ref.shape}"
        if np.issubdtype(ref.dtype, np.floating):
            np.testing.assert_allclose(out, ref, atol=ATOL, rtol=RTOL, err_msg=f"{where}: {name}")
        else:
            np.testing.assert_array_equal(out, ref, err_msg=f"{where}: {name}")


def _symbolize_options(entry: FixtureEntry) -> str:
    axes = [
        f"{inp}:{axis}={sym}"
        for inp, by_axis in entry.dynamic_axes.items()
        for axis, sym in by_axis.items()
    ]
    return f"symbolize({', '.join(axes)})"


@pytest.mark.parametrize("entry", EXPORTED, ids=str)
def test_folded_static_model_matches_torch_at_traced_size(entry: FixtureEntry) -> None:
    report = onnxsurgery.run(entry.model_path, passes="fold-constants", provider="cpu")
    [record] = report.passes
    assert record.error is None
    assert not any(d.level == "warning" for d in record.diagnostics), record.diagnostics
    [traced, *_] = load_cases(entry.references_dir)
    _assert_case_matches(report.model, traced, f"{entry.id} traced size")
    if record.modified:
        assert record.diagnostics[-1].message.startswith("constant data: ")
    else:
        assert record.nodes_after == record.nodes_before


@pytest.mark.parametrize("entry", DATA_DEPENDENT, ids=str)
def test_data_dependent_fixtures_fold_or_fail_cleanly(entry: FixtureEntry, tmp_path) -> None:
    out = tmp_path / "folded.onnx"
    try:
        onnxsurgery.run(entry.model_path, passes="fold-constants", output=out, provider="cpu")
    except OnnxSurgeryError as exc:  # a clear one-line message naming the pass
        assert str(exc).startswith("fold-constants: ") and "\n" not in str(exc)
        assert not out.exists()
    else:
        assert out.is_file()


def test_data_dependent_fixtures_are_present() -> None:
    assert {e.name for e in DATA_DEPENDENT} == {"nonzero", "bool_mask", "pad_loop"}


SYMBOLIZED = [e for e in EXPORTED if e.symbolize == "expected"]


@pytest.mark.parametrize("entry", SYMBOLIZED, ids=str)
def test_symbolized_then_folded_matches_torch_at_every_size(entry: FixtureEntry) -> None:
    if importlib.util.find_spec("onnxsurgery.passes.symbolize") is None:
        pytest.skip("onnxsurgery.passes.symbolize is not written yet (passes/symbolize.py)")
    chain = f"{_symbolize_options(entry)}, fold-constants"
    report = onnxsurgery.run(entry.model_path, passes=chain, provider="cpu")
    symbolized = {p.name: p for p in report.passes}["symbolize"]
    assert symbolized.error is None
    for vi in report.model.graph.input:
        dims = vi.type.tensor_type.shape.dim
        for axis, symbol in entry.dynamic_axes.get(vi.name, {}).items():
            assert dims[axis].dim_param, f"{vi.name} axis {axis} ({symbol}) was pinned"
    for case in load_cases(entry.references_dir):
        _assert_case_matches(report.model, case, f"{entry.id} {case.name}")


def _export_dynamic(entry: FixtureEntry, path) -> None:
    """The fixture's torch module exported by the TorchScript exporter with its dynamic_axes."""
    import contextlib
    import io
    import warnings

    from fixture_manifest import fixture_models

    torch = pytest.importorskip("torch")
    models = fixture_models()
    spec = models.SPECS[entry.name]
    module = models.build_module(spec, spec.sizes[0])
    inputs = models.make_inputs(spec, 0)
    args = tuple(torch.from_numpy(a) for a in inputs.values())
    sink = io.StringIO()
    with (
        warnings.catch_warnings(),
        contextlib.redirect_stdout(sink),
        contextlib.redirect_stderr(sink),
    ):
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            args,
            str(path),
            dynamo=False,
            opset_version=17,
            input_names=list(inputs),
            output_names=list(entry.output_names),
            dynamic_axes={k: dict(v) for k, v in entry.dynamic_axes.items()},
        )


def _matches(model, case: Case) -> bool:
    try:
        _assert_case_matches(model, case, case.name)
    except (AssertionError, Exception):
        return False
    return True


TORCHSCRIPT = [e for e in EXPORTED if e.exporter == "torchscript" and e.dynamic_axes]


@pytest.mark.parametrize("entry", TORCHSCRIPT, ids=str)
def test_folding_a_dynamic_export_keeps_every_size_it_handled(
    entry: FixtureEntry, tmp_path
) -> None:
    """Wherever torch's own dynamic-axes export reproduces torch at a size, the folded one does.

    (Some exports bake the traced size in even with dynamic_axes; those sizes fail before
    folding, and are what symbolize is for.)
    """
    path = tmp_path / "dynamic.onnx"
    _export_dynamic(entry, path)
    report = onnxsurgery.run(path, passes="fold-constants", provider="cpu")
    folded = report.model
    original = onnxsurgery.load_model(path)
    for vi_before, vi_after in zip(original.graph.input, folded.graph.input, strict=True):
        before = [d.dim_param for d in vi_before.type.tensor_type.shape.dim]
        after = [d.dim_param for d in vi_after.type.tensor_type.shape.dim]
        assert after == before, f"{vi_before.name}: dims {before} became {after}"
    handled = 0
    for case in load_cases(entry.references_dir):
        if _matches(original, case):
            handled += 1
            _assert_case_matches(folded, case, f"{entry.id} dynamic export, {case.name}")
    assert handled >= 1  # the traced size, at least
