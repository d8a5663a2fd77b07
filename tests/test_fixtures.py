"""The committed fixtures: every manifest entry's files exist and load, each static export matches
torch at its traced size and does at the other sizes what the manifest says, and the stored
references are what a fresh torch eager run computes."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from fixture_manifest import (
    FIXTURES_DIR,
    FixtureEntry,
    fixture_generate,
    fixture_models,
    load_manifest,
)

from onnxsurgery.validation.recording import record
from onnxsurgery.validation.references import Case, load_cases

ATOL, RTOL = 1e-4, 1e-3
ENTRIES = load_manifest()
EXPORTED = [e for e in ENTRIES if e.exported]
OUTCOMES = {"error", "wrong_shape", "wrong_values", "ok"}


@cache
def _cases(references_dir: Path) -> list[Case]:
    return load_cases(references_dir)


@cache
def _model(path: Path) -> onnx.ModelProto:
    return onnx.load(str(path))


def _assert_matches(outputs: list[np.ndarray], case: Case, where: str) -> None:
    assert len(outputs) == len(case.outputs), where
    for got, (name, want) in zip(outputs, case.outputs.items(), strict=True):
        assert got.shape == want.shape, f"{where} {name}: shape {got.shape} != {want.shape}"
        assert got.dtype == want.dtype, f"{where} {name}: dtype {got.dtype} != {want.dtype}"
        np.testing.assert_allclose(got, want, atol=ATOL, rtol=RTOL, err_msg=f"{where} {name}")


# --------------------------------------------------------------------------------------------
# the manifest itself


def test_manifest_has_every_model_with_both_exporters() -> None:
    specs = fixture_models().SPECS
    ids = [e.id for e in ENTRIES]
    assert len(ids) == len(set(ids))
    assert ids == [f"{name}-{exporter}" for name in specs for exporter in ("torchscript", "dynamo")]


def test_manifest_entries_are_consistent() -> None:
    for e in ENTRIES:
        assert e.symbolize in ("expected", "blocked"), e.id
        assert (e.blocked_reason is not None) == (e.symbolize == "blocked"), e.id
        assert e.concat in ("expected", "blocked", "n/a"), e.id
        assert (e.concat_reason is not None) == (e.concat == "blocked"), e.id
        assert e.multi_output == (len(e.output_names) > 1), e.id
        assert (e.export_error is None) == e.exported, e.id
        assert list(e.traced) == list(e.input_names), e.id
        assert set(e.dynamic_axes) <= set(e.input_names), e.id
        for name, axes in e.dynamic_axes.items():
            assert all(0 <= axis < len(e.traced[name]) for axis in axes), e.id
        if e.exported:
            assert e.static_fails_other_sizes == any(o != "ok" for o in e.static_other_sizes)
            assert set(e.static_other_sizes) <= OUTCOMES, e.id
            assert len(e.static_other_sizes) == len(e.case_sizes) - 1, e.id


def test_fixtures_are_small() -> None:
    total = sum(f.stat().st_size for f in FIXTURES_DIR.rglob("*") if f.is_file())
    assert total < 10 * 2**20, f"fixtures/ is {total / 2**20:.1f} MiB"


# --------------------------------------------------------------------------------------------
# files exist and load


@pytest.mark.parametrize("entry", ENTRIES, ids=str)
def test_references_load(entry: FixtureEntry) -> None:
    cases = _cases(entry.references_dir)
    assert [c.name for c in cases] == [f"test_data_set_{i}" for i in range(len(entry.case_sizes))]
    for case in cases:
        assert list(case.inputs) == list(entry.input_names), case.name
        assert list(case.outputs) == list(entry.output_names), case.name
        for name, array in case.outputs.items():
            assert array.size > 0, f"{case.name} {name} is empty (degenerate input?)"
    traced = {name: list(a.shape) for name, a in cases[0].inputs.items()}
    assert traced == entry.traced
    for case in cases[1:]:  # every other size differs from the traced one on a dynamic axis
        assert any(
            case.inputs[name].shape[axis] != entry.traced[name][axis]
            for name, axes in entry.dynamic_axes.items()
            for axis in axes
        ), case.name


@pytest.mark.parametrize("entry", ENTRIES, ids=str)
def test_model_file_or_export_error(entry: FixtureEntry) -> None:
    if not entry.exported:
        assert not entry.model_path.exists()
        text = entry.error_path.read_text()
        assert text.splitlines()[0] == entry.export_error.split(":")[0]  # the exception type
        return
    assert not entry.error_path.exists()
    assert not entry.model_path.with_name("model.onnx.data").exists()
    model = _model(entry.model_path)
    onnx.checker.check_model(model, full_check=True)
    assert [v.name for v in model.graph.input] == list(entry.input_names)
    assert [v.name for v in model.graph.output] == list(entry.output_names)
    for value in model.graph.input:  # exported statically: every input dim is the traced value
        dims = [
            d.dim_value if d.HasField("dim_value") else d.dim_param
            for d in value.type.tensor_type.shape.dim
        ]
        assert dims == entry.traced[value.name], value.name


# --------------------------------------------------------------------------------------------
# static exports on ONNX Runtime


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


@pytest.mark.parametrize("entry", EXPORTED, ids=str)
def test_static_export_matches_torch_at_traced_size(entry: FixtureEntry) -> None:
    case = _cases(entry.references_dir)[0]
    outputs = _session(_model(entry.model_path)).run(None, case.inputs)
    _assert_matches(outputs, case, f"{entry.id} {case.name}")


@pytest.mark.parametrize("entry", EXPORTED, ids=str)
def test_static_export_rejects_other_sizes(entry: FixtureEntry) -> None:
    session = _session(_model(entry.model_path))
    quiet = ort.RunOptions()
    quiet.log_severity_level = 4
    for case in _cases(entry.references_dir)[1:]:
        with pytest.raises(Exception, match="[Ii]nvalid dimensions"):
            session.run(None, case.inputs, quiet)


@pytest.mark.parametrize("entry", EXPORTED, ids=str)
def test_static_graph_at_other_sizes_is_as_documented(entry: FixtureEntry) -> None:
    """With only the I/O declarations relaxed, the graph does what the manifest records."""
    generate = fixture_generate()
    model = _model(entry.model_path)
    got = tuple(
        generate.static_outcome(model, entry.dynamic_axes, case)
        for case in _cases(entry.references_dir)[1:]
    )
    assert got == entry.static_other_sizes


def test_documented_static_facts() -> None:
    """The facts the fixtures exist to show, spelled out (a regeneration must keep them)."""
    by_id = {e.id: e for e in ENTRIES}
    fails = {i for i, e in by_id.items() if e.exported and e.static_fails_other_sizes}
    # A Python-int view bakes the batch into a Reshape in both exporters.
    assert {"alexnet_view-torchscript", "alexnet_view-dynamo"} <= fails
    # torch.flatten survives the torchscript exporter (Flatten op) but not dynamo (Reshape [4,64]).
    assert "alexnet_flatten-torchscript" not in fails
    assert "alexnet_flatten-dynamo" in fails
    # Static export constant-folds shape arithmetic, even x.shape-based views.
    for name in (
        "view_from_shape",
        "attention_block",
        "zero_state_gru",
        "batch_eq_channels",
        "batch1_conv1d",
        "rnn_last_hidden",
    ):
        assert {f"{name}-torchscript", f"{name}-dynamo"} <= fails, name
    # Nothing size-dependent in these graphs.
    for name in ("linear", "multi_output", "nonzero", "bool_mask"):
        assert not {f"{name}-torchscript", f"{name}-dynamo"} & fails, name
    assert by_id["pad_loop-torchscript"].symbolize == "blocked"
    assert "wrong_shape" in by_id["pad_loop-torchscript"].static_other_sizes
    assert not by_id["lstm_packed-dynamo"].exported
    # torch.export unrolls nn.RNN over the traced seq: another seq gives silently wrong values.
    rnn = by_id["rnn_last_hidden-dynamo"]
    assert rnn.symbolize == "blocked"
    assert (
        rnn.static_other_sizes[rnn.case_sizes[1:].index({"batch": 2, "seq": 9})] == "wrong_values"
    )


# --------------------------------------------------------------------------------------------
# references are reproducible


@pytest.mark.parametrize("name", sorted({e.name for e in ENTRIES}))
def test_both_exporters_share_references(name: str) -> None:
    dirs = [e.references_dir for e in ENTRIES if e.name == name]
    first, *others = (_cases(d) for d in dirs)
    for cases in others:
        for a, b in zip(first, cases, strict=True):
            for key in ("inputs", "outputs"):
                x, y = getattr(a, key), getattr(b, key)
                assert list(x) == list(y)
                for k in x:
                    np.testing.assert_array_equal(x[k], y[k])


@pytest.mark.parametrize("name", ["alexnet_view", "lstm_packed", "zero_state_gru", "bool_mask"])
def test_references_match_fresh_torch_run(name: str) -> None:
    models = fixture_models()
    spec = models.SPECS[name]
    entry = next(e for e in ENTRIES if e.name == name)
    stored = _cases(entry.references_dir)
    assert len(stored) == len(spec.sizes)
    for index, sizes in enumerate(spec.sizes):
        inputs = models.make_inputs(spec, index)
        for k, array in inputs.items():  # inputs are regenerated bit for bit
            np.testing.assert_array_equal(array, stored[index].inputs[k])
        module = models.build_module(spec, sizes)
        fresh = record(module, inputs, None, output_names=spec.output_names)
        for k, want in stored[index].outputs.items():
            np.testing.assert_allclose(
                fresh.outputs[k],
                want,
                atol=1e-5,
                rtol=1e-4,
                err_msg=f"{name} case {index} {k} at {sizes}",
            )
