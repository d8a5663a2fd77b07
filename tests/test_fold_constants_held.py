"""fold-constants on models over 2 GB: weights no folding reads reach onnxsim as graph inputs.

The 2 GB threshold is lowered here so that the exported torch fixtures take that path; the
folded models must still reproduce the stored torch outputs, and every weight a constant-only
node reads (Transpose(W), Mul(W, c)) must still be folded. ``tests/test_fold_constants_large.py``
(``make test-large``) runs the real thing on 2.1 GiB.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import parse
from fixture_manifest import load_manifest

import onnxsurgery
from onnxsurgery.passes.fold_constants import held_weights as held_module
from onnxsurgery.passes.fold_constants import onnxsim_child
from onnxsurgery.passes.fold_constants.held_weights import held_weights, restore_held, without_held
from onnxsurgery.validation.references import load_cases
from onnxsurgery.validation.runtime import run_model

EXPORTED = [e for e in load_manifest() if e.exported and e.name in (
    "alexnet_view", "attention_block", "lstm_packed", "qkv_split_b3", "linear"
)]
ATOL, RTOL = 1e-4, 1e-3


@pytest.fixture
def everything_large(monkeypatch):
    """Every model counts as over 2 GB, every weight as large enough to hold back."""
    monkeypatch.setattr(onnxsim_child, "LARGE_MODEL_BYTES", 1)
    monkeypatch.setattr(held_module, "HELD_MIN_BYTES", 1)


@pytest.mark.e2e
@pytest.mark.parametrize("entry", EXPORTED, ids=str)
def test_held_weights_fold_matches_torch(entry, everything_large) -> None:
    report = onnxsurgery.run(entry.model_path, passes="fold-constants", provider="cpu")
    [record] = report.passes
    assert record.error is None
    assert not any(d.level == "warning" for d in record.diagnostics), record.diagnostics
    model = report.model
    original = onnx.load(str(entry.model_path))
    held = held_weights(original)
    assert held  # each of these fixtures has weights only runtime nodes read (Linear, LSTM, Conv)
    assert "went to onnxsim as inputs" in record.diagnostics[0].message
    inputs = {i.name for i in model.graph.input}
    assert not inputs & set(held)  # every held weight is an initializer again (or gone)
    assert inputs == {i.name for i in original.graph.input}
    for case in load_cases(entry.references_dir)[:1]:  # the traced size
        got = run_model(model, case.inputs, provider="cpu", output_names=list(case.outputs))
        for name, ref in case.outputs.items():
            if np.issubdtype(ref.dtype, np.floating):
                np.testing.assert_allclose(got[name], ref, atol=ATOL, rtol=RTOL, err_msg=name)
            else:
                np.testing.assert_array_equal(got[name], ref, err_msg=name)


def _weights_model() -> onnx.ModelProto:
    return parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[2, 4] x, bool c) => (float[2, 4] y, float[4, 4] Wout) <
            float[4, 4] Wmm = {1., 0., 0., 0., 0., 1., 0., 0., 0., 0., 1., 0., 0., 0., 0., 1.},
            float[4, 4] Wt = {1., 2., 3., 4., 5., 6., 7., 8., 9., 10., 11., 12., 13., 14., 15., 16.},
            float[4, 4] Wout = {1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1.},
            float[4, 4] Wsub = {2., 2., 2., 2., 2., 2., 2., 2., 2., 2., 2., 2., 2., 2., 2., 2.},
            float[4, 4] Wunused = {3., 3., 3., 3., 3., 3., 3., 3., 3., 3., 3., 3., 3., 3., 3., 3.},
            float half = {0.5}
        > {
            a = MatMul(x, Wmm)
            t = Transpose<perm = [1, 0]>(Wt)
            ts = Mul(t, half)
            b = MatMul(a, ts)
            s = If(c) <
                then_branch = g1 () => (float[4, 4] o1) { o1 = Identity(Wsub) },
                else_branch = g2 () => (float[4, 4] o2) { o2 = Identity(Wout) }
            >
            y = MatMul(b, s)
        }
        """
    )


def test_held_are_the_weights_only_runtime_nodes_read(monkeypatch) -> None:
    monkeypatch.setattr(held_module, "HELD_MIN_BYTES", 1)
    model = _weights_model()
    # Wt: Transpose reads only constants (folded); Wout: an output and read in a body;
    # Wsub: read in a body; Wunused: read by nothing (onnxsim drops it; it never comes back).
    assert held_weights(model) == ["Wmm", "Wunused"]


def test_without_and_restore_held_round_trip(monkeypatch) -> None:
    monkeypatch.setattr(held_module, "HELD_MIN_BYTES", 1)
    model = _weights_model()
    held = held_weights(model)
    bare = without_held(model, held)
    assert [i.name for i in bare.graph.input] == ["x", "c", "Wmm", "Wunused"]
    assert [t.name for t in bare.graph.initializer] == ["Wt", "Wout", "Wsub", "half"]
    assert bare.graph.input[2].type.tensor_type.shape.dim[0].dim_value == 4
    onnx.checker.check_model(bare)
    folded = onnx.ModelProto()
    folded.CopyFrom(bare)
    folded.graph.node[0].input[1] = "Wmm"  # a node still reads Wmm; nothing reads Wunused
    assert restore_held(folded, model, held) == 1
    assert [i.name for i in folded.graph.input] == ["x", "c"]
    assert [t.name for t in folded.graph.initializer][-1] == "Wmm"
    onnx.checker.check_model(folded)
    feeds = {"x": np.arange(8, dtype=np.float32).reshape(2, 4), "c": np.array(True)}
    expected = run_model(model, feeds, provider="cpu")
    got = run_model(folded, feeds, provider="cpu")
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name])


@pytest.mark.e2e
def test_hold_weights_false_gives_onnxsim_every_weight(everything_large) -> None:
    [entry] = [e for e in EXPORTED if e.id == "attention_block-torchscript"]
    report = onnxsurgery.run(
        entry.model_path, passes="fold-constants(hold_weights=false)", provider="cpu"
    )
    [record] = report.passes
    assert record.error is None
    assert "went to onnxsim as inputs" not in record.diagnostics[0].message
    [case, *_] = load_cases(entry.references_dir)
    got = run_model(report.model, case.inputs, provider="cpu", output_names=list(case.outputs))
    for name, ref in case.outputs.items():
        np.testing.assert_allclose(got[name], ref, atol=ATOL, rtol=RTOL, err_msg=name)


def test_hold_weights_must_be_a_bool() -> None:
    with pytest.raises(onnxsurgery.PassOptionError, match="hold_weights must be true or false"):
        onnxsurgery.create_pass("fold-constants", {"hold_weights": "sometimes"})


@pytest.mark.e2e
def test_called_directly_the_input_is_left_as_it_was(everything_large) -> None:
    """Outside the pipeline (``owns_input`` false) the held weights come back as copies and the
    model given to the pass is untouched; in the pipeline they stay where they are."""
    from onnxsurgery.passes.fold_constants import FoldConstants

    [entry] = [e for e in EXPORTED if e.id == "alexnet_view-torchscript"]
    model = onnx.load(str(entry.model_path))
    before = model.SerializeToString()
    result = FoldConstants()(model)
    assert model.SerializeToString() == before
    assert result.model is not model
    assert "went to onnxsim as inputs, " in result.diagnostics[0].message  # "..., N came back"
    piped = onnxsurgery.run(entry.model_path, passes="fold-constants", provider="cpu").model
    assert piped.graph.node == result.model.graph.node
    assert {t.name: t.raw_data for t in piped.graph.initializer} == {
        t.name: t.raw_data for t in result.model.graph.initializer
    }
