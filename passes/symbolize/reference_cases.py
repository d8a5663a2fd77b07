"""Reference cases in symbolize's check: which cases the model claims (their sizes fit its
inputs, their outputs map onto its outputs), how far the export itself is off at the traced size,
and running them on the rewritten model (:func:`run_reference_cases`); :func:`reference_mismatch`
runs them alone, for choosing between rewrites the graph cannot tell apart."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnxruntime as ort

from onnxsurgery.errors import OnnxSurgeryError, PassError, ReferenceDataError
from onnxsurgery.model.signature import CaseFailure, InputSpec, check_inputs, model_inputs
from onnxsurgery.passes.symbolize.feeds import case_sizes, check_feeds
from onnxsurgery.passes.symbolize.ort_failure import (
    PlanDecisions,
    ort_failure,
)
from onnxsurgery.validation.arrays import compare_arrays
from onnxsurgery.validation.references import Case, bind_cases
from onnxsurgery.validation.runtime import create_session, run_model, session_weights
from onnxsurgery.validation.tolerances import DEFAULT_ATOL

__all__ = [
    "Claims",
    "OutputMap",
    "claimed_cases",
    "failing_size",
    "reference_mismatch",
    "run_reference_cases",
    "size_text",
]

#: A function from a case's outputs to the model's (concat-outputs' layout).
OutputMap = Callable[[Mapping[str, np.ndarray]], Mapping[str, np.ndarray]]


def size_text(size: Mapping[str, int]) -> str:
    """``batch=2, seq=8``: where a run was."""
    return ", ".join(f"{k}={v}" for k, v in size.items())


@dataclass
class Claims:
    """The reference cases the model claims, each with its sizes and its outputs mapped onto
    the model's; per output, the export's own error (:func:`_export_error`); or why the cases
    cannot be claimed (``failure``)."""

    cases: list[tuple[Case, dict[str, int], Mapping[str, np.ndarray]]] = field(default_factory=list)
    floor: dict[str, float] = field(default_factory=dict)
    failure: PassError | None = None


def reference_mismatch(
    original: onnx.ModelProto,
    model: onnx.ModelProto,
    axes: Mapping[str, Mapping[int, str]],
    traced: Mapping[str, int],
    references: Sequence[Case],
    provider: str = "auto",
    output_map: OutputMap | None = None,
    *,
    bare: onnx.ModelProto | None = None,
) -> str | None:
    """Run ``model`` (``original`` rewritten; its weights may be placeholders of a weightless
    copy, shared from the original's session) on the reference cases alone, as
    :func:`check_dynamic` does: why the first one fails, or None. For telling apart rewrites the
    graph alone cannot choose between. ``bare``: ``weightless(original)``, if made already."""
    try:
        reference = create_session(
            original, provider, threads=1, prepack=False, bare=bare, mapped=True
        )
        claims = claimed_cases(
            reference, axes, traced, frozenset(), references, output_map, model_inputs(model)
        )
        if claims.failure is not None:
            return str(claims.failure)
        shared = session_weights(reference)
        del reference
        session = create_session(model, provider, threads=1, prepack=False, share_with=shared)
        del shared
    except OnnxSurgeryError as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - ORT raises several types
        return str(ort_failure("building a session", exc, model))
    _, failure = run_reference_cases(model, session, traced, claims)
    return None if failure is None else str(failure)


def failing_size(
    original: onnx.ModelProto,
    model: onnx.ModelProto,
    axes: Mapping[str, Mapping[int, str]],
    sizes: Sequence[Mapping[str, int]],
    provider: str = "auto",
    *,
    bare: onnx.ModelProto | None = None,
) -> tuple[dict[str, int], str] | None:
    """The first of ``sizes`` at which ONNX Runtime fails to run ``model`` (``original``
    rewritten, its weights shared from the original's session as in :func:`reference_mismatch`)
    on random inputs, and why; None where it runs at all of them (values are not compared)."""
    try:
        reference = create_session(
            original, provider, threads=1, prepack=False, bare=bare, mapped=True
        )
        shared = session_weights(reference)
        del reference
        session = create_session(model, provider, threads=1, prepack=False, share_with=shared)
        del shared
    except Exception as exc:  # noqa: BLE001 - ORT raises several types
        return dict(sizes[0]) if sizes else {}, str(exc)
    for k, size in enumerate(sizes):
        try:
            run_model(session, check_feeds(model, axes, size, seed=k))
        except Exception as exc:  # noqa: BLE001
            return dict(size), str(ort_failure("running", exc, model))
    return None


def _export_error(
    original: ort.InferenceSession,
    cases: Sequence[tuple[Case, Mapping[str, np.ndarray]]],
) -> dict[str, float]:
    """Per output, twice the smallest atol at which the original model matches the cases at its
    traced size, where the default tolerance is too tight: the export's own error, which no
    rewrite can be asked to beat."""
    floor: dict[str, float] = {}
    for case, want in cases:
        try:
            got = run_model(original, case.inputs)
        except Exception:  # noqa: BLE001 - a case the original cannot run sets no floor
            continue
        for name, ref in want.items():
            if name in got:
                cmp = compare_arrays(got[name], np.asarray(ref), name=name)
                if not cmp and cmp.min_atol is not None and np.isfinite(cmp.min_atol):
                    floor[name] = max(floor.get(name, 0.0), 2 * cmp.min_atol)
    return floor


def claimed_cases(
    original: ort.InferenceSession,
    axes: Mapping[str, Mapping[int, str]],
    base: Mapping[str, int],
    fixed: Set[str],
    references: Sequence[Case],
    output_map: OutputMap | None,
    specs: Sequence[InputSpec],
    bounds: Mapping[str, int] | None = None,
) -> Claims:
    """The reference cases the model claims (none moving a symbol in ``fixed``, none over a
    symbol's bound in ``bounds``: ``seq<=8``), each with its
    sizes and its outputs mapped onto the model's; and per output, the original model's own
    error at the traced size where the default tolerance is too tight (:func:`_export_error`).
    Each case is checked against the rewritten model's inputs (``specs``) before any runs
    (:func:`_fitting`); the first that does not fit, or whose outputs do not map, is the
    claims' ``failure``."""
    claimed = []
    for case in references:
        sizes = case_sizes(axes, case.inputs)
        if any(sizes.get(s, base[s]) != base[s] for s in fixed):
            continue
        if any(sizes.get(s, 0) > b for s, b in (bounds or {}).items()):
            continue
        fitting = _fitting(specs, case, references)
        if isinstance(fitting, PassError):
            return Claims(failure=fitting)
        try:
            want = output_map(fitting.outputs) if output_map is not None else fitting.outputs
        except (KeyError, ValueError, OnnxSurgeryError) as exc:
            return Claims(failure=PassError(
                f"check: mapping reference case {fitting.name}'s outputs onto the model's failed: {exc}"
            ))  # fmt: skip
        claimed.append((fitting, sizes, want))
    traced = [(c, w) for c, sizes, w in claimed if all(sizes.get(s, v) == v for s, v in base.items())]
    return Claims(claimed, _export_error(original, traced))


def _fitting(
    specs: Sequence[InputSpec], case: Case, references: Sequence[Case]
) -> Case | PassError:
    """``case`` with its inputs bound to the model's and checked against what the rewritten
    model declares (``specs``), as validation checks a case, before ONNX Runtime runs it; for a
    case that does not fit, a PassError in validation's words, naming the axis to symbolize
    where a fixed axis is what the references vary."""
    required = [s.name for s in specs if not s.optional]
    try:
        bound = bind_cases([case], required, None)[0]
        feeds, _ = check_inputs(specs, bound.inputs)
    except ReferenceDataError as exc:
        return PassError(f"check: {exc}")
    except CaseFailure as exc:
        hint = _unsymbolized(exc, bound, references)
        return PassError(f"check at reference case {case.name}: {exc}{hint}")
    return Case(name=case.name, inputs=feeds, outputs=case.outputs, source=case.source)


def _unsymbolized(exc: CaseFailure, case: Case, references: Sequence[Case]) -> str:
    """What to add to symbolize when ``case`` moves an axis the model keeps fixed: ``"; axis 1
    of 'x' varies in the references (8, 12) but is not symbolized: add x:1=NAME to symbolize"``."""
    name, axis = exc.input, exc.axis
    if name is None or axis is None or not isinstance(exc.declared, int):
        return ""
    seen = {int(np.shape(case.inputs[name])[axis])}
    for other in references:
        value = other.inputs.get(name)
        if value is not None and np.ndim(value) > axis:
            seen.add(int(np.shape(value)[axis]))
    add = f"add {name}:{axis}=NAME to symbolize"
    if len(seen) > 1:
        sizes = ", ".join(map(str, sorted(seen)))
        return f"; axis {axis} of {name!r} varies in the references ({sizes}) but is not symbolized: {add}"
    return (
        f"; axis {axis} of {name!r} is {seen.pop()} in the references, {exc.declared} in the "
        f"model, and is not symbolized: {add}"
    )


def run_reference_cases(
    model: onnx.ModelProto,
    session: ort.InferenceSession,
    base: Mapping[str, int],
    claims: Claims,
    decisions: PlanDecisions | None = None,
) -> tuple[dict[str, set[int]], PassError | None]:
    """Run every reference case the model claims (:func:`claimed_cases`); a mismatch fails the
    check (at the default tolerance, or the original model's own error at the traced size where
    that is larger). Returns, per symbol, the sizes other than the traced one that matching cases
    covered, and the first failure (or None): where ONNX Runtime fails, named as the plan's
    ``decisions`` that broke, where given."""
    covered: dict[str, set[int]] = {}
    for case, sizes, want in claims.cases:
        where = f"reference case {case.name} ({size_text(sizes)})"
        try:
            got = run_model(session, case.inputs)
        except Exception as exc:  # noqa: BLE001
            return covered, ort_failure(f"at {where}", exc, model, decisions)
        for name, ref in want.items():
            if name not in got:
                continue
            floor = claims.floor
            atol = max(DEFAULT_ATOL, floor.get(name, 0.0)) if name in floor else None
            cmp = compare_arrays(got[name], np.asarray(ref), atol=atol, name=name)
            if not cmp:
                return covered, PassError(
                    f"check at {where}: output {name!r} does not match the stored torch outputs: "
                    f"{cmp.describe()}"
                )
        for sym, v in sizes.items():
            if sym in base and v != base[sym]:
                covered.setdefault(sym, set()).add(v)
    return covered, None
