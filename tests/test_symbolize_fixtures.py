"""symbolize on every exported fixture: symbolizable ones match torch at every stored size, the
others fail with a blocker that names the node."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from fixture_manifest import load_manifest

import onnxsurgery
from onnxsurgery.errors import PassError
from onnxsurgery.model.handle import ModelHandle
from onnxsurgery.passes.symbolize import Symbolize
from onnxsurgery.validation.references import load_cases
from onnxsurgery.validation.runtime import create_session, run_model

pytestmark = pytest.mark.e2e

ENTRIES = [e for e in load_manifest() if e.exported]
EXPECTED = [e for e in ENTRIES if e.symbolize == "expected"]
BLOCKED = [e for e in ENTRIES if e.symbolize == "blocked"]
ATOL, RTOL = 1e-4, 1e-3


@pytest.mark.parametrize("entry", EXPECTED, ids=str)
def test_symbolized_fixture_matches_torch_at_every_size(entry):
    model = onnx.load(entry.model_path)
    result = Symbolize(dynamic_axes=entry.dynamic_axes)(
        model, onnxsurgery.PassContext(provider="cpu")
    )
    out = result.model
    for vi in out.graph.input:
        for axis, sym in entry.dynamic_axes.get(vi.name, {}).items():
            assert vi.type.tensor_type.shape.dim[axis].dim_param == sym
    session = create_session(out, "cpu")
    cases = load_cases(entry.references_dir)
    assert len(cases) >= 3
    for case in cases:
        got = run_model(session, case.inputs)
        for name, ref in case.outputs.items():
            assert got[name].shape == ref.shape, f"{case.name}: {name}"
            if ref.dtype.kind == "f":
                np.testing.assert_allclose(got[name], ref, atol=ATOL, rtol=RTOL, err_msg=case.name)
            else:
                np.testing.assert_array_equal(got[name], ref, err_msg=case.name)


@pytest.mark.parametrize("entry", BLOCKED, ids=str)
def test_blocked_fixture_fails_with_a_blocker_naming_the_node(entry):
    model = onnx.load(entry.model_path)
    with pytest.raises(PassError) as info:
        Symbolize(dynamic_axes=entry.dynamic_axes, check=False)(model)
    error = info.value
    assert "blocker" in str(error)
    assert error.node, str(error)
    assert f"'{error.node}'" in str(error)
    assert "re-export" in str(error) or "data-dependent" in str(error)


@pytest.mark.parametrize(
    "entry", [e for e in BLOCKED if any(set(a.values()) - {"batch"} for a in e.dynamic_axes.values())], ids=str
)
def test_blocked_fixture_symbolizes_on_batch_alone(entry):
    """What blocks these fixtures is the sequence axis; the batch alone generalizes."""
    model = onnx.load(entry.model_path)
    axes = {
        name: {a: s for a, s in spec.items() if s == "batch"}
        for name, spec in entry.dynamic_axes.items()
    }
    axes = {k: v for k, v in axes.items() if v}
    result = Symbolize(dynamic_axes=axes)(model, onnxsurgery.PassContext(provider="cpu"))
    session = create_session(result.model, "cpu")
    traced_seq = {n: s[1] for n, s in entry.traced.items() if len(s) > 1}
    checked = 0
    for case in load_cases(entry.references_dir):
        if any(case.inputs[n].shape[1] != traced_seq[n] for n in traced_seq if n in case.inputs):
            continue  # another seq: outside what batch-only symbolization claims
        checked += 1
        got = run_model(session, case.inputs)
        for name, ref in case.outputs.items():
            np.testing.assert_allclose(got[name], ref, atol=ATOL, rtol=RTOL, err_msg=case.name)
    assert checked >= 2  # the traced size and at least one other batch


@pytest.mark.parametrize("entry", EXPECTED, ids=str)
def test_symbolize_on_an_input_it_owns_writes_the_same_bytes_without_copying_weights(
    entry, monkeypatch
):
    """Where the caller drops the input (the pipeline: its handle owns the model) and the model
    reaches MAPPED_BYTES (lowered here to every size), the handle turns the input itself into
    symbolize's result, weights left in place: byte for byte what the copying path makes."""
    import onnxsurgery.model.handle as handle_module

    def owned_run(model):
        ctx = onnxsurgery.PassContext(provider="cpu", handle=ModelHandle(model, owned=True))
        return Symbolize(dynamic_axes=entry.dynamic_axes)(model, ctx).model

    copied = owned_run(onnx.load(entry.model_path))
    monkeypatch.setattr(handle_module, "MAPPED_BYTES", 0)
    model = onnx.load(entry.model_path)
    weights = {t.name: t for t in model.graph.initializer if len(t.raw_data) >= 1024}
    owned = owned_run(model)
    assert owned.SerializeToString() == copied.SerializeToString()
    if weights:  # adopted: the input itself, its weight messages the ones it had
        assert owned is model
        kept = {t.name: t for t in owned.graph.initializer if t.name in weights}
        assert kept and all(kept[n] is weights[n] for n in kept)
