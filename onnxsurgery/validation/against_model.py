"""Compare two models on the same inputs: random ones drawn from the declared inputs, or stored.

    report = compare_models("model.dyn.onnx", "model.onnx", shapes={"x": [2, 3, 32, 32]}, cases=3)
    if not report:
        print(report.summary)

Model b is the reference; the report is a :class:`~onnxsurgery.validation.against_references.ValidationReport`,
built by the same case runner (:mod:`onnxsurgery.validation.case_runner`) as
:func:`~onnxsurgery.validation.against_references.validate`; random inputs come from
:mod:`onnxsurgery.validation.feeds`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from onnxsurgery.errors import ProviderError, ReferenceDataError, UsageError
from onnxsurgery.model.signature import CaseFailure, InputSpec, check_inputs
from onnxsurgery.validation.case_runner import Expected, ModelRunner, run_cases
from onnxsurgery.validation.feeds import random_inputs
from onnxsurgery.validation.references import Case, bind_cases, load_cases
from onnxsurgery.validation.report import ValidationReport
from onnxsurgery.validation.runtime import ProviderChoice, resolve_provider
from onnxsurgery.validation.tolerances import (
    DEFAULT_ATOL,
    DEFAULT_RTOL,
    Tolerances,
    check_global_tolerances,
    check_tolerances,
)

__all__ = ["compare_models", "comparison_inputs", "provider_pair", "sides_note"]


def compare_models(
    model_a: onnx.ModelProto | str | os.PathLike,
    model_b: onnx.ModelProto | str | os.PathLike,
    *,
    feeds_or_cases: str
    | os.PathLike
    | Sequence[Case]
    | Mapping[str, np.ndarray]
    | Sequence[Mapping[str, np.ndarray]]
    | None = None,
    shapes: Mapping[str, Sequence[int]] | None = None,
    seed: int = 0,
    cases: int = 1,
    provider: str | ProviderChoice = "auto",
    reference_provider: str | ProviderChoice | None = None,
    atol: float = DEFAULT_ATOL,
    rtol: float = DEFAULT_RTOL,
    tolerances: Tolerances | None = None,
    histograms: bool = False,
) -> ValidationReport:
    """Run ``model_a`` and ``model_b`` on the same inputs and compare a's outputs with b's
    (``histograms``: with each output's error histogram, as ``validate`` gives them).

    ``model_b`` is the reference. Inputs come from ``feeds_or_cases`` (a reference path or list
    of cases, whose stored outputs are not used; one feeds dict; a list of them) or, when it is
    None, ``cases`` random sets of the dtypes model a declares, at the sizes in ``shapes``
    (``{"x": [3, 3, 224, 224]}``; a symbolic dim not given there is taken from model b's
    declaration, else it is an error), floats standard normal, integers in [0, 4), drawn from
    ``numpy.random.default_rng(seed)``. Where model a was merged by concat-outputs and b is the
    model before the merge, b's outputs are merged as a's layout record says before comparing.

    ``provider`` runs model a; ``reference_provider`` runs model b (None: the same choice), so
    one model compared with itself on CUDA and on CPU shows where the providers disagree. The
    report's ``provider`` says which ran each side where they differ.
    """
    check_global_tolerances(atol, rtol)
    if not isinstance(cases, int) or isinstance(cases, bool) or cases < 1:
        raise UsageError(f"cases must be an integer >= 1, got {cases!r}")
    choice, choice_b = provider_pair(provider, reference_provider)
    runner_a = ModelRunner(model_a, choice)
    runner_a.histograms = histograms
    runner_b = ModelRunner(model_b, choice_b)
    label_b = runner_b.label if not isinstance(model_b, onnx.ModelProto) else "the other model"
    shapes = dict(shapes or {})
    unknown = [n for n in shapes if n not in {s.name for s in runner_a.specs}]
    if unknown:
        raise UsageError(
            f"--shape given for {', '.join(map(repr, unknown))}, not an input of the model "
            f"(inputs: {', '.join(s.name for s in runner_a.specs)})"
        )
    inputs = comparison_inputs(runner_a.specs, runner_b.specs, feeds_or_cases, shapes, seed, cases)
    known = set(runner_a.output_names) | set(runner_b.output_names)
    tols = check_tolerances(tolerances, known)
    runs: list[tuple[str, Mapping[str, np.ndarray], Expected]] = []
    for name, feeds in inputs:

        def expected(feeds: Mapping[str, np.ndarray] = feeds) -> Mapping[str, np.ndarray]:
            try:
                checked, _ = check_inputs(runner_b.specs, feeds)
                return _as_merged(runner_a, runner_b.run(checked))
            except CaseFailure as exc:
                raise CaseFailure(f"reference model {label_b}: {exc}", node=exc.node) from None

        runs.append((name, feeds, expected))
    report = run_cases(runner_a, runs, choice, atol, rtol, tols, label_b)
    report.provider = sides_note(choice.note, choice_b.note)
    return report


def provider_pair(
    provider: str | ProviderChoice, reference_provider: str | ProviderChoice | None
) -> tuple[ProviderChoice, ProviderChoice]:
    """The providers a model and its reference model run on (``reference_provider`` None: the
    model's). The reference side's errors name it as ``--against-provider``."""
    choice = provider if isinstance(provider, ProviderChoice) else resolve_provider(provider)
    if reference_provider is None:
        return choice, choice
    if isinstance(reference_provider, ProviderChoice):
        return choice, reference_provider
    try:
        return choice, resolve_provider(reference_provider)
    except ProviderError as exc:
        raise ProviderError(str(exc).replace("--provider", "--against-provider")) from None
    except UsageError as exc:
        raise UsageError(f"--against-provider: {exc}") from None


def sides_note(model: str, reference: str) -> str:
    """Which provider ran each side, from their choices' notes: one note where they agree."""
    return model if model == reference else f"model on {model}; reference on {reference}"


def comparison_inputs(
    specs_a: Sequence[InputSpec],
    specs_b: Sequence[InputSpec],
    feeds_or_cases: Any,
    shapes: Mapping[str, Sequence[int]],
    seed: int,
    cases: int,
) -> list[tuple[str, Mapping[str, np.ndarray]]]:
    """The named input sets :func:`compare_models` runs both models on (see its docstring);
    ``validate --against --localize`` takes the failing one from here again."""
    inputs: list[tuple[str, Mapping[str, np.ndarray]]]
    if feeds_or_cases is None:
        rng = np.random.default_rng(seed)
        inputs = [
            (f"random_{i}", random_inputs(specs_a, shapes, rng, fallback_specs=specs_b)) for i in range(cases)
        ]
    elif isinstance(feeds_or_cases, (str, os.PathLike)):
        required = [s.name for s in specs_a if not s.optional]
        loaded = bind_cases(load_cases(feeds_or_cases), required, None)
        inputs = [(c.name, c.inputs) for c in loaded]
    elif isinstance(feeds_or_cases, Mapping):
        inputs = [("feeds_0", feeds_or_cases)]
    else:
        inputs = []
        for i, item in enumerate(feeds_or_cases):
            if isinstance(item, Case):
                inputs.append((item.name, item.inputs))
            elif isinstance(item, Mapping):
                inputs.append((f"feeds_{i}", item))
            else:
                raise TypeError(
                    f"feeds_or_cases item {i} is a {type(item).__name__}, not a Case or dict"
                )
        if not inputs:
            raise ReferenceDataError("no inputs to compare the models on")
    return inputs


def _as_merged(runner_a: ModelRunner, outputs: dict[str, np.ndarray]) -> Mapping[str, np.ndarray]:
    """Model b's outputs as model a gives them: merged the way its layout record says where a
    was merged by concat-outputs and b was not (the model before the merge)."""
    if runner_a.layout is None:
        return outputs
    from onnxsurgery.merged_outputs import merge_references  # imported already: a has a layout

    try:
        return merge_references(runner_a.layout, outputs)
    except ReferenceDataError as exc:
        raise CaseFailure(f"merging its outputs as {runner_a.label} does failed: {exc}") from None
