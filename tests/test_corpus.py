"""symbolize on real architectures (tests/corpus/): every static export matches torch at other sizes.

Selected with ``-m corpus`` (slow: the first run exports every model, later runs read the cache
under ``build/corpus/``). Each case is one architecture, exporter and traced batch: the static
export is symbolized on the architecture's dynamic axes and checked on ONNX Runtime CPU against
torch eager at the traced size and at other batch/sequence sizes (atol 1e-4, rtol 1e-3).
:data:`KNOWN_FAILURES` lists the cases that cannot pass yet, with why; they are strict xfails, so
one that starts passing must be taken off the list.
"""

from __future__ import annotations

import re

import onnx
import pytest

pytest.importorskip("transformers")

from corpus.architectures import ARCHITECTURES  # noqa: E402
from corpus.harness import (  # noqa: E402
    EXPORTERS,
    evaluate,
    export_model,
    load_symbolize,
    symbolize_model,
)

pytestmark = pytest.mark.corpus

#: (arch, exporter, traced batch or None for both, axes "all"/"batch" or None for both) -> why
#: symbolize cannot pass there yet.
KNOWN_FAILURES: dict[tuple[str, str, int | None, str | None], str] = {}

#: (arch, exporter) whose static export fails on torch 2.13: a fact about the exporter.
EXPORT_FAILURES: dict[tuple[str, str], str] = {}


def _known(arch: str, exporter: str, batch: int, axes: str) -> str | None:
    for b in (batch, None):
        for a in (axes, None):
            reason = KNOWN_FAILURES.get((arch, exporter, b, a))
            if reason:
                return reason
    return None


def _cases(with_known: bool = True) -> list:
    params = []
    for name, arch in ARCHITECTURES.items():
        for exporter in EXPORTERS:
            for traced in arch.traced:
                batch = traced["batch"]
                for axes in arch.axis_sets:
                    marks = []
                    reason = _known(name, exporter, batch, axes)
                    if reason and with_known:
                        marks.append(pytest.mark.xfail(strict=True, reason=reason))
                    case_id = f"{name}-{exporter}-b{batch}-{axes}"
                    params.append(
                        pytest.param(name, exporter, batch, axes, marks=marks, id=case_id)
                    )
    return params


@pytest.fixture(autouse=True)
def _only_when_selected(request: pytest.FixtureRequest) -> None:
    """The corpus exports ~100 models on a cold cache: run it only when asked (-m corpus)."""
    if "corpus" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("real-architecture corpus: run with -m corpus")


def _static(name: str, exporter: str, batch: int) -> onnx.ModelProto:
    arch = ARCHITECTURES[name]
    traced = next(t for t in arch.traced if t["batch"] == batch)
    exp = export_model(arch, exporter, traced)
    if not exp.ok:
        if (name, exporter) in EXPORT_FAILURES:
            pytest.skip(f"{exporter} cannot export {name}: {EXPORT_FAILURES[name, exporter]}")
        pytest.fail(
            f"static {exporter} export of {name} failed (not in EXPORT_FAILURES): {exp.error}"
        )
    return onnx.load(str(exp.path))


@pytest.mark.parametrize(("name", "exporter", "batch", "axes"), _cases())
def test_symbolize_matches_torch_at_other_sizes(
    name: str, exporter: str, batch: int, axes: str
) -> None:
    symbolize, why = load_symbolize()
    assert symbolize is not None, f"symbolize pass {why}"
    _static(name, exporter, batch)
    result = evaluate(name, exporter, batch, "symbolize", axes=axes)
    failed = [f"{s.sizes}: {s.message}" for s in result.sizes if not s.ok]
    assert result.ok, f"{result.key}: {result.reason}\n" + "\n".join(failed) + f"\n{result.detail}"


@pytest.mark.parametrize(("name", "exporter", "batch", "axes"), _cases(with_known=False))
def test_symbolize_blocker_names_the_node(name: str, exporter: str, batch: int, axes: str) -> None:
    """Where symbolize refuses a real model, its error names a node of that model and why."""
    from onnxsurgery.errors import PassError

    symbolize, why = load_symbolize()
    assert symbolize is not None, f"symbolize pass {why}"
    model = _static(name, exporter, batch)
    try:
        symbolize_model(model, ARCHITECTURES[name].dynamic_axes_for(axes))
    except PassError as exc:
        ops = {n.name: n.op_type for n in model.graph.node if n.name}
        text = "\n".join([str(exc), *exc.details])
        # "Reshape 'node_view_1': ..." -- every "<Op> '<name>'" pair must be a real node.
        pairs = [(op, n) for op, n in re.findall(r"\b([A-Z]\w*) '([^']+)'", text) if n in ops]
        assert exc.node or pairs, f"blocker names no node of the model: {text[:500]}"
        if exc.node:
            assert exc.node in ops, f"blocker names {exc.node!r}, not a node of the model"
        for op, node in pairs:
            assert ops[node] == op, f"blocker calls {node!r} a {op}, it is a {ops[node]}"
        assert len(text) > len(exc.node or "") + 40, f"blocker gives no reason: {text}"
    else:
        pytest.skip("symbolize did not block here (nothing to check)")


def test_corpus_is_wide() -> None:
    """The corpus covers the families the issue names, and every case has sizes beyond the traced."""
    assert {"roberta", "llama", "whisper_encoder", "vit"} <= set(ARCHITECTURES)
    assert len(ARCHITECTURES) >= 8
    for arch in ARCHITECTURES.values():
        assert {t["batch"] for t in arch.traced} == {1, 2}, arch.name
        assert arch.dynamic_axes, arch.name
        for check in arch.checks:
            assert check not in arch.traced, arch.name
            assert set(check) == set(arch.symbols), arch.name
