"""The oracle: a pass chain's result must compute what its input computed, or refuse cleanly.

``reference_outputs`` runs a model on ONNX Runtime (CPU): a generated model it cannot run is not
kept. ``judge`` runs a chain through ``onnxsurgery.run`` and sorts what came back into one of

    identical   the result runs and gives every original output: same name, dtype and shape,
                bitwise equal for integers and bools, within the validation tolerance for floats
                (a merged output is split back with ``onnxsurgery.split_outputs`` first)
    different   anything else a result that the chain handed back as success does
    exit 2      an OnnxSurgeryError of exit code 2 the pass raised itself (a clean refusal)
    crash       any other exception, or one the pipeline wrapped into a PassError
                ("cannot handle this graph: TypeError: ..."): a bug of ours
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort

import onnxsurgery
from onnxsurgery import OnnxSurgeryError
from onnxsurgery.merged_outputs import METADATA_KEY
from onnxsurgery.validation.arrays import compare_arrays

__all__ = ["KINDS", "Verdict", "judge", "reference_outputs", "run_on_ort"]

KINDS = ("identical", "different", "exit 2", "crash")


@dataclass
class Verdict:
    kind: str
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.kind in ("different", "crash")


def run_on_ort(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``model``'s outputs by name on ORT's CPU provider, fed the feeds it declares."""
    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    wanted = {i.name for i in session.get_inputs()}
    outputs = session.run(None, {k: v for k, v in feeds.items() if k in wanted})
    return {o.name: np.asarray(v) for o, v in zip(session.get_outputs(), outputs, strict=True)}


def reference_outputs(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray] | None:
    """What the input model computes, or None when ONNX Runtime (or the checker) refuses it."""
    try:
        onnx.checker.check_model(model)
        return run_on_ort(model, feeds)
    except Exception:  # noqa: BLE001 - a generated model ORT does not run is simply not kept
        return None


def _refusal(exc: BaseException) -> Verdict:
    text = " ".join(str(exc).split())[:300]
    if isinstance(exc, OnnxSurgeryError) and exc.exit_code == 2 and getattr(exc, "cause_type", None) is None:
        return Verdict("exit 2", text)
    return Verdict("crash", f"{type(exc).__name__}: {text}")


def judge(
    model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], chain: str, expected: Mapping[str, np.ndarray]
) -> Verdict:
    """Run ``chain`` on ``model`` and compare what the result computes with ``expected``."""
    try:
        result = onnxsurgery.run(model, passes=chain, provider="cpu").model
    except Exception as exc:  # noqa: BLE001 - sorted into exit 2 or crash
        return _refusal(exc)
    try:
        actual = run_on_ort(result, feeds)
    except Exception as exc:  # noqa: BLE001 - a result ORT cannot run computes nothing
        return Verdict("different", f"ORT cannot run the result: {' '.join(str(exc).split())[:200]}")
    return compare_outputs(result, actual, expected, merged="concat-outputs" in chain)


def compare_outputs(
    result: onnx.ModelProto, actual: dict[str, np.ndarray], expected: Mapping[str, np.ndarray], merged: bool
) -> Verdict:
    """Every expected output, by name, in ``actual`` (split back first when ``merged``)."""
    names = [o.name for o in result.graph.output]
    if merged and any(p.key == METADATA_KEY for p in result.metadata_props):
        try:
            actual.update(onnxsurgery.split_outputs(result, actual))
        except Exception as exc:  # noqa: BLE001 - a layout that does not split is a wrong result
            return Verdict("different", f"split_outputs: {type(exc).__name__}: {exc}")
    elif names != list(expected):
        return Verdict("different", f"outputs {list(expected)} became {names}")
    for name, want in expected.items():
        if name not in actual:
            return Verdict("different", f"output {name!r} is gone (outputs: {names})")
        got = actual[name]
        comparison = compare_arrays(got, want, name=name)
        if not comparison:
            return Verdict(
                "different",
                f"output {name!r}: {got.dtype}{list(got.shape)} vs {want.dtype}{list(want.shape)}, "
                f"{comparison.mismatches} mismatches, max abs {comparison.max_abs}",
            )
    return Verdict("identical")


# -- symbolize against its templates ----------------------------------------------------------

TEMPLATE_KINDS = ("pass", "refused", "ambiguous", "wrong", "crash")


def judge_template(template, traced_batch: int) -> Verdict:
    """Symbolize ``template`` built at (traced_batch, S); the result at every other size must
    equal the template built there. ``detail`` of a wrong one names the size, the output and
    the level symbolize said it verified. A result that differs where symbolize said a symbol
    is ``ambiguous`` (the trace fits another reading) is ``ambiguous``: said, not silent."""
    traced = template.build(traced_batch, template.seq)
    try:
        report = onnxsurgery.run(traced, passes=f"symbolize({template.axes})", provider="cpu")
    except Exception as exc:  # noqa: BLE001 - sorted into refused or crash
        verdict = _refusal(exc)
        return Verdict("refused" if verdict.kind == "exit 2" else "crash", verdict.detail)
    result = report.model
    claim = "; ".join(str(d) for d in report.passes[0].diagnostics if "verified" in str(d))[:200]
    wrong = "ambiguous" if "verified: ambiguous" in claim else "wrong"
    for batch, seq in template.sizes(traced_batch):
        feeds = template.feeds(batch, seq)
        want = run_on_ort(template.build(batch, seq), feeds)
        try:
            got = run_on_ort(result, feeds)
        except Exception as exc:  # noqa: BLE001 - symbolize said it generalizes: it does not
            return Verdict(wrong, f"at B={batch}, S={seq}: ORT fails: {' '.join(str(exc).split())[:160]} ({claim})")
        (expected,), (actual,) = want.values(), got.values()
        comparison = compare_arrays(actual, expected, name="y")
        if not comparison:
            return Verdict(
                wrong,
                f"at B={batch}, S={seq}: {list(actual.shape)} vs {list(expected.shape)}, "
                f"{comparison.mismatches} mismatches ({claim})",
            )
    return Verdict("pass", claim)
