"""End to end: every exported torch fixture validates at its traced size, and a changed
initializer is caught on exactly the outputs it reaches, with statistics numpy agrees with."""

from __future__ import annotations

import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from fixture_manifest import FixtureEntry, load_manifest
from onnx import numpy_helper

from onnxsurgery.validation.against_references import validate
from onnxsurgery.validation.references import load_cases

pytestmark = pytest.mark.e2e

EXPORTED = [e for e in load_manifest() if e.exported]
FLOATS = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE}


@pytest.mark.parametrize("entry", EXPORTED, ids=str)
def test_static_model_validates_at_traced_size(entry: FixtureEntry) -> None:
    report = validate(entry.model_path, entry.references_dir / "test_data_set_0", provider="cpu")
    assert report, report.summary
    assert [o.name for o in report.cases[0].outputs] == list(entry.output_names)
    shapes = {k: s for k, (s, _) in report.cases[0].inputs.items()}
    assert {k: shapes[k] for k in entry.traced} == entry.traced


@pytest.mark.parametrize("entry", [e for e in EXPORTED if e.static_fails_other_sizes], ids=str)
def test_static_model_rejects_other_sizes_naming_the_input(entry: FixtureEntry) -> None:
    report = validate(entry.model_path, entry.references_dir, provider="cpu")
    assert not report
    assert report.cases[0], report.cases[0].error
    for case in report.cases[1:]:
        assert case.error is not None, case.name
        assert re.fullmatch(
            r"input '[^']+' expects dims \[[^\]]*\], got \[[^\]]*\]: axis \d+ is fixed at \d+, got \d+",
            case.error,
        ), case.error


def _reaches(model: onnx.ModelProto, name: str) -> set[str]:
    """Graph outputs that depend on value ``name`` (through subgraphs that capture it, too)."""

    def uses(node: onnx.NodeProto, values: set[str]) -> bool:
        if values.intersection(node.input):
            return True
        for attr in node.attribute:
            for g in [attr.g] if attr.HasField("g") else list(attr.graphs):
                if any(uses(n, values) for n in g.node):
                    return True
        return False

    reached = {name}
    changed = True
    while changed:
        changed = False
        for node in model.graph.node:
            if uses(node, reached) and not reached.issuperset(node.output):
                reached.update(node.output)
                changed = True
    return reached.intersection(o.name for o in model.graph.output)


def _run(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    names = [o.name for o in session.get_outputs()]
    feeds = {i.name: inputs[i.name] for i in session.get_inputs()}
    return dict(zip(names, session.run(names, feeds), strict=True))


def _differs(actual: np.ndarray, expected: np.ndarray) -> bool:
    if actual.shape != expected.shape:
        return True
    if expected.dtype.kind in "biu":
        return not np.array_equal(actual, expected)
    return not np.allclose(actual, expected, atol=1e-4, rtol=1e-3, equal_nan=True)


def _break_one_initializer(
    entry: FixtureEntry, case_inputs: dict[str, np.ndarray], expected: dict[str, np.ndarray]
) -> tuple[onnx.ModelProto, str, dict[str, np.ndarray]]:
    """The biggest float initializer whose change (+0.5 everywhere) moves some output."""
    model = onnx.load(entry.model_path)
    candidates = sorted(
        (i for i, t in enumerate(model.graph.initializer) if t.data_type in FLOATS),
        key=lambda i: -int(np.prod(model.graph.initializer[i].dims)),
    )
    for i in candidates:
        broken = onnx.ModelProto()
        broken.CopyFrom(model)
        init = broken.graph.initializer[i]
        array = numpy_helper.to_array(init)
        init.CopyFrom(numpy_helper.from_array((array + 0.5).astype(array.dtype), init.name))
        try:
            actual = _run(broken, case_inputs)
        except Exception:  # noqa: BLE001 - this change makes ORT fail; try another initializer
            continue
        if any(_differs(actual[k], expected[k]) for k in expected):
            return broken, init.name, actual
    pytest.skip(f"{entry.id}: no float initializer whose change reaches an output")


@pytest.mark.parametrize("entry", EXPORTED, ids=str)
def test_changed_initializer_is_caught_on_the_outputs_it_reaches(entry: FixtureEntry) -> None:
    case = load_cases(entry.references_dir / "test_data_set_0")[0]
    broken, changed, actual = _break_one_initializer(entry, case.inputs, case.outputs)

    report = validate(broken, [case], provider="cpu")
    assert not report
    failing = {o.name for o in report.cases[0].outputs if not o}
    # numpy, by hand: which outputs moved beyond atol 1e-4 + rtol 1e-3 * |torch|
    assert failing == {k for k in case.outputs if _differs(actual[k], case.outputs[k])}
    assert failing <= _reaches(broken, changed)
    for out in report.cases[0].outputs:
        if out.name not in failing or out.problem:
            continue
        exact = case.outputs[out.name].dtype.kind in "biu"
        atol, rtol = (0.0, 0.0) if exact else (1e-4, 1e-3)
        assert (out.atol, out.rtol) == (atol, rtol)
        a = actual[out.name].astype(np.float64)
        e = case.outputs[out.name].astype(np.float64)
        finite = np.isfinite(a) & np.isfinite(e)
        diff = np.abs(a - e, where=finite, out=np.zeros_like(a))
        assert out.max_abs == pytest.approx(diff.max(), rel=1e-6)
        assert out.mean_abs == pytest.approx(diff[finite].mean(), rel=1e-6)
        # the element rule as numpy.allclose applies it to the outputs' own dtype
        close = np.isclose(
            actual[out.name], case.outputs[out.name], atol=atol, rtol=rtol, equal_nan=True
        )
        assert out.mismatches == int(np.count_nonzero(~close))
        allowed = rtol * np.abs(e, where=finite, out=np.zeros_like(e))
        excess = np.where(finite, diff - allowed, -np.inf)
        assert out.min_atol == pytest.approx(max(excess.max(), 0.0), rel=1e-6)
        assert out.worst_index == tuple(
            int(i) for i in np.unravel_index(np.argmax(excess), e.shape)
        )
    assert f"output {report.failures[0][1].name}:" in report.summary
