"""A failing validation localized against the original model: on the failing case where the
original takes its inputs, else on the first case it takes (the traced size, for a model
exported statically). ``validate --ref DIR --localize --original ORIG.onnx`` and a failing
``run`` use it."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from onnxsurgery.divergence.result import Localization
from onnxsurgery.divergence.search import localize
from onnxsurgery.errors import OnnxSurgeryError, UsageError
from onnxsurgery.model.signature import CaseFailure, check_inputs, model_inputs
from onnxsurgery.validation.against_model import comparison_inputs
from onnxsurgery.validation.references import Case, bind_cases, load_cases
from onnxsurgery.validation.runtime import ProviderChoice
from onnxsurgery.validation.tolerances import DEFAULT_ATOL, DEFAULT_RTOL

if TYPE_CHECKING:
    from rich.console import Group

__all__ = [
    "LocalizedFailure",
    "localize_comparison",
    "localize_failure",
    "localize_references",
    "localize_validation",
]

#: A case, or ``(name, inputs)``: what compare_models runs both models on.
Named = Case | tuple[str, Mapping[str, np.ndarray]]


def _label(model: onnx.ModelProto | str | os.PathLike) -> str | None:
    return None if isinstance(model, onnx.ModelProto) else str(model)


def localize_failure(
    model: onnx.ModelProto | str | os.PathLike,
    original: onnx.ModelProto | str | os.PathLike,
    cases: Iterable[Named],
    failing: Iterable[str],
    *,
    provider: str | ProviderChoice = "auto",
    reference_provider: str | ProviderChoice | None = None,
    atol: float = DEFAULT_ATOL,
    rtol: float = DEFAULT_RTOL,
    fallback: bool = True,
) -> Localization:
    """:func:`~onnxsurgery.divergence.search.localize` ``model`` against ``original`` on the
    first of the ``failing`` case names the original takes, else (with ``fallback``) on the
    first case it takes; ``provider`` runs ``model``, ``reference_provider`` (None: the same)
    runs ``original``. Never raises for the user's data: what kept it from localizing is the
    result's ``reason``."""
    failing = list(failing)
    try:
        specs = (
            model_inputs(original)
            if isinstance(original, onnx.ModelProto)
            else model_inputs(onnx.load(os.fspath(original), load_external_data=False))
        )
        chosen: Case | None = None
        first: Case | None = None
        for named in cases:
            one = named if isinstance(named, Case) else Case(named[0], dict(named[1]), {})
            if not _takes(specs, one):
                continue
            if one.name in failing:
                chosen = one
                break
            first = first or one
        case = chosen or (first if fallback else None)
        if case is None:
            which = "cases'" if fallback else "failing cases'"
            return Localization(_label(model), _label(original), None, reason=(
                f"the original model takes none of the {which} inputs (a static export takes "
                "its traced size only)"))  # fmt: skip
        found = localize(
            model, original, case.inputs, provider=provider, reference_provider=reference_provider,
            atol=atol, rtol=rtol, case=case.name,
        )  # fmt: skip
    except OnnxSurgeryError as exc:
        return Localization(_label(model), _label(original), None, reason=str(exc))
    except Exception as exc:  # noqa: BLE001 - localizing adds to a failure; it must not hide it
        return Localization(_label(model), _label(original), None,
                            reason=f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}")  # fmt: skip
    if chosen is None and failing:
        found.notes.append(
            f"case {failing[0]} fails, but the original model does not take its inputs; "
            f"compared on case {case.name}, which it takes"
        )
    return found


def _failing(report: Any) -> list[str]:
    return [c.name for c in report.cases if not c]


def localize_references(
    model: str | os.PathLike,
    original: str | os.PathLike,
    references: str | os.PathLike,
    report: Any,
    *,
    provider: str | ProviderChoice = "auto",
    reference_provider: str | ProviderChoice | None = None,
    atol: float = DEFAULT_ATOL,
    rtol: float = DEFAULT_RTOL,
) -> Localization:
    """``validate MODEL --ref DIR --localize --original ORIG``: the failing validation
    ``report`` of ``model`` localized against ``original`` on the reference cases' inputs."""
    specs = model_inputs(onnx.load(os.fspath(model), load_external_data=False))
    cases = bind_cases(load_cases(references), [s.name for s in specs if not s.optional], None)
    return localize_failure(
        model, original, cases, _failing(report), provider=provider, reference_provider=reference_provider,
        atol=atol, rtol=rtol,
    )  # fmt: skip


def localize_comparison(
    model: str | os.PathLike,
    against: str | os.PathLike,
    report: Any,
    *,
    feeds_or_cases: Any = None,
    shapes: Mapping[str, Sequence[int]] | None = None,
    seed: int = 0,
    cases: int = 1,
    provider: str | ProviderChoice = "auto",
    reference_provider: str | ProviderChoice | None = None,
    atol: float = DEFAULT_ATOL,
    rtol: float = DEFAULT_RTOL,
) -> Localization:
    """``validate MODEL --against OTHER --localize``: the failing comparison ``report`` (from
    :func:`~onnxsurgery.validation.compare_models` with the same inputs arguments) localized
    on the first failing input set."""
    specs_a = model_inputs(onnx.load(os.fspath(model), load_external_data=False))
    specs_b = model_inputs(onnx.load(os.fspath(against), load_external_data=False))
    inputs = comparison_inputs(specs_a, specs_b, feeds_or_cases, dict(shapes or {}), seed, cases)
    return localize_failure(
        model, against, inputs, _failing(report), provider=provider, reference_provider=reference_provider,
        atol=atol, rtol=rtol,
    )  # fmt: skip


def localize_validation(
    model: str | os.PathLike,
    report: Any,
    *,
    against: str | os.PathLike | None = None,
    original: str | os.PathLike | None = None,
    feeds_or_cases: Any = None,
    shapes: Mapping[str, Sequence[int]] | None = None,
    seed: int = 0,
    cases: int = 1,
    provider: str | ProviderChoice = "auto",
    reference_provider: str | ProviderChoice | None = None,
    atol: float = DEFAULT_ATOL,
    rtol: float = DEFAULT_RTOL,
) -> LocalizedFailure:
    """``validate --localize``: the failing ``report`` with where ``model`` diverges, from
    ``against`` on the same inputs (:func:`localize_comparison`), else from ``original`` on the
    reference cases ``feeds_or_cases`` (:func:`localize_references`)."""
    if against is not None:
        found = localize_comparison(
            model, against, report, feeds_or_cases=feeds_or_cases, shapes=shapes, seed=seed,
            cases=cases, provider=provider, reference_provider=reference_provider, atol=atol, rtol=rtol,
        )  # fmt: skip
    else:
        if original is None or feeds_or_cases is None:
            raise UsageError("localizing against references needs the original model and the references")
        found = localize_references(
            model, original, feeds_or_cases, report, provider=provider,
            reference_provider=reference_provider, atol=atol, rtol=rtol,
        )  # fmt: skip
    return LocalizedFailure(report, found)


def _takes(specs: Any, case: Case) -> bool:
    try:
        check_inputs(specs, case.inputs)
    except CaseFailure:
        return False
    return True


@dataclass
class LocalizedFailure:
    """A failing validation report with where it diverges: what ``validate --localize`` shows
    and writes (the report's JSON with ``"localized"`` added)."""

    report: Any
    localized: Localization

    def view(self, verbose: bool = False) -> Group:
        from rich.console import Group

        return Group(self.report.view(verbose), self.localized.view(verbose, runtime=False))

    def to_dict(self) -> dict[str, Any]:
        return {**self.report.to_dict(), "localized": self.localized.to_dict()}
