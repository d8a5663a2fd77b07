"""symbolize on real architectures (tests/corpus/): static exports that match torch at other sizes.

``make test`` runs the smoke subset (marker ``smoke``: the four architectures the issue names,
RoBERTa, Llama, Whisper encoder and ViT, with both exporters); ``-m corpus`` runs all of it (slow
on a cold cache: ~300 exports; later runs read ``build/corpus/``). A case is one architecture, exporter, traced batch and axis set (``all``: every
symbolic axis, batch and sequence/resolution; ``batch``: batch alone). The static export is
symbolized with the pass's defaults (its own check on) and checked on ONNX Runtime CPU against
torch eager at the traced size and at other sizes (atol 1e-4, rtol 1e-3).

Three tables keep the suite honest; a key is (arch, exporter or None, traced batch or None, axis
set or None), None matching any:

- :data:`EXPECTED_BLOCKERS`: the static graph holds values that exist only at the traced size;
  symbolize must refuse, with a message that names the node.
- :data:`KNOWN_FAILURES`: symbolize should pass and does not yet (strict xfail: a case that
  starts passing must come off the list).
- :data:`BLOCKER_MESSAGE_GAPS`: refusals whose message does not yet name a node of the model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

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

Key = tuple[str, str | None, int | None, str | None]

#: Cases where no tool can rebuild the dynamic model from the static graph alone.
EXPECTED_BLOCKERS: dict[Key, str] = {
    ("t5_encoder", "dynamo", None, "all"): (
        "the dynamo exporter folds the relative-position bias to a float [1, heads, 8, 8] "
        "constant; bias values for distances >= 8 (log buckets) are not in the graph"
    ),
    ("t5", "dynamo", None, "all"): (
        "relative-position biases folded at the traced lengths (encoder and decoder)"
    ),
    ("wavlm", "dynamo", None, "all"): (
        "the gated relative-position bias is folded to a float [batch*heads, 19, 19] constant "
        "at the traced frame count; other frame counts need bias values not in the graph"
    ),
    ("dinov2", "dynamo", None, "all"): (
        "traced at the configured resolution, DINOv2 skips position-embedding interpolation in "
        "Python: the graph adds the [1, 17, 32] table directly and has no resize to generalize"
    ),
    ("mobilenet_v2", None, None, "all"): (
        "TensorFlow 'same' padding is computed in Python from the traced height/width; the baked "
        "pads are wrong at other parities (re-exporting fails the same way)"
    ),
}

#: What an expected blocker says: a constant whose values exist only at the traced size, a size
#: that holds only there, or a loop unrolled at trace time.
BLOCKER_REASON = (
    r"follow no pattern|do not pin that down|one point cannot tell|holds only at the traced size|"
    r"loop unrolled at trace time|a relative-position bias .* folded for distances|"
    r"TensorFlow 'same' padding at the traced size"
)

#: Expected refusals that come from the check, not the planner: the pattern their message
#: must match (the planned-blocker wording and BLOCKER_REASON apply to every other entry).
CHECK_REFUSALS: dict[Key, str] = {}

#: Cases symbolize should handle and does not yet (what breaks, for whoever fixes it).
KNOWN_FAILURES: dict[Key, str] = {}

#: Refusals whose message names no node of the model (e.g. an ONNX Runtime-internal node name).
BLOCKER_MESSAGE_GAPS: dict[Key, str] = {}

#: (arch, exporter) whose static export fails on this torch: a fact about the exporter.
EXPORT_FAILURES: dict[tuple[str, str], str] = {}


def lookup(table: Mapping[Key, str], arch: str, exporter: str, batch: int, axes: str) -> str | None:
    """The entry of ``table`` matching the case, None fields matching anything."""
    for (a, e, b, x), reason in table.items():
        if a == arch and e in (None, exporter) and b in (None, batch) and x in (None, axes):
            return reason
    return None


def _all_cases() -> list[tuple[str, str, int, str]]:
    return [
        (name, exporter, traced["batch"], axes)
        for name, arch in ARCHITECTURES.items()
        for exporter in EXPORTERS
        for traced in arch.traced
        for axes in arch.axis_sets
    ]


#: The architectures the issue names: run by every ``make test`` (both exporters, batch 1 and 2).
SMOKE = {"roberta", "llama", "whisper_encoder", "vit"}


def _params(cases: list[tuple[str, str, int, str]], xfail: Mapping[Key, str] | None) -> list:
    params = []
    for case in cases:
        reason = lookup(xfail, *case) if xfail is not None else None
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        if case[0] in SMOKE:
            marks.append(pytest.mark.smoke)
        params.append(pytest.param(*case, marks=marks, id="-".join(map(str, case))))
    return params


MUST_PASS = [c for c in _all_cases() if not lookup(EXPECTED_BLOCKERS, *c)]
MUST_BLOCK = [c for c in _all_cases() if lookup(EXPECTED_BLOCKERS, *c)]
BLOCKING = [c for c in _all_cases() if lookup(EXPECTED_BLOCKERS, *c) or lookup(KNOWN_FAILURES, *c)]


def _require_symbolize() -> None:
    symbolize, why = load_symbolize()
    assert symbolize is not None, f"symbolize pass {why}"


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


@pytest.mark.parametrize(("name", "exporter", "batch", "axes"), _params(MUST_PASS, KNOWN_FAILURES))
def test_symbolize_matches_torch_at_other_sizes(
    name: str, exporter: str, batch: int, axes: str
) -> None:
    _require_symbolize()
    _static(name, exporter, batch)
    result = evaluate(name, exporter, batch, "symbolize", axes=axes)
    failed = [f"{s.sizes}: {s.message}" for s in result.sizes if not s.ok]
    assert result.ok, f"{result.key}: {result.reason}\n" + "\n".join(failed) + f"\n{result.detail}"


@pytest.mark.parametrize(("name", "exporter", "batch", "axes"), _params(MUST_BLOCK, None))
def test_symbolize_refuses_what_cannot_generalize(
    name: str, exporter: str, batch: int, axes: str
) -> None:
    """Where the static graph cannot be generalized, symbolize refuses instead of lying."""
    from onnxsurgery.errors import PassError

    _require_symbolize()
    model = _static(name, exporter, batch)
    with pytest.raises(PassError) as info:
        symbolize_model(model, ARCHITECTURES[name].dynamic_axes_for(axes))
    # The refusal must be the planned one: a blocker found in the graph (or, for the entries of
    # CHECK_REFUSALS, the check failing the way they say), naming a node of this model, for a
    # reason of the kind the table gives.
    exc = info.value
    text = "\n".join([str(exc), *exc.details])
    assert exc.node in {n.name for n in model.graph.node}, f"names {exc.node!r}: {text[:300]}"
    from_check = lookup(CHECK_REFUSALS, name, exporter, batch, axes)
    if from_check is not None:
        assert re.search(from_check, text), f"not the expected check failure: {text[:500]}"
        return
    assert "blocker(s) keep the model from being symbolized" in text, text[:500]
    assert re.search(BLOCKER_REASON, text), f"not a traced-size table/size: {text[:500]}"


@pytest.mark.parametrize(
    ("name", "exporter", "batch", "axes"), _params(BLOCKING, BLOCKER_MESSAGE_GAPS)
)
def test_symbolize_blocker_names_the_node(name: str, exporter: str, batch: int, axes: str) -> None:
    """Where symbolize refuses a real model, its error names a node of that model and why."""
    from onnxsurgery.errors import PassError

    _require_symbolize()
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


CACHE_CASES = [
    (name, exporter, traced["batch"])
    for name, arch in ARCHITECTURES.items()
    if "past" in arch.symbols
    for exporter in EXPORTERS
    for traced in arch.traced
]


@pytest.mark.parametrize(("name", "exporter", "batch"), CACHE_CASES)
def test_cache_decoders_tie_total_to_past_plus_seq(name: str, exporter: str, batch: int) -> None:
    """On a decoder with a KV cache the mask's length is a symbol of its own (``total``), as a
    user names it: symbolize must find ``total = past + seq`` in the graph and say so, never
    leave the two free (its check would then feed a mask of the wrong length)."""
    _require_symbolize()
    symbolize, _ = load_symbolize()
    model = _static(name, exporter, batch)
    result = symbolize(dynamic_axes=ARCHITECTURES[name].dynamic_axes_for("all"))(model)
    assert {s: str(v) for s, v in result.report.relations.items()} == {"total": "past + seq"}


@pytest.mark.smoke
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


@pytest.mark.smoke
def test_tables_name_real_cases() -> None:
    """Every table entry matches at least one corpus case (no stale or misspelt entries)."""
    cases = _all_cases()
    for table in (EXPECTED_BLOCKERS, KNOWN_FAILURES, BLOCKER_MESSAGE_GAPS, CHECK_REFUSALS):
        for key in table:
            assert any(lookup({key: "x"}, *c) for c in cases), f"no corpus case matches {key}"
