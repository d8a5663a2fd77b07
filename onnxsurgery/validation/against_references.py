"""Validation: run a model on ONNX Runtime over stored torch cases and compare every output.

    report = validate("model.onnx", "fixtures/net/torchscript")     # a folder of test_data_set_N
    if not report:
        print(report.summary)   # 3 cases, 3 outputs: 1 mismatch (case test_data_set_2 output ...)

Two models against each other (:func:`~onnxsurgery.validation.against_model.compare_models`)
share the case runner (:mod:`onnxsurgery.validation.case_runner`).

One session serves every case. Before a case runs, its inputs are checked against the model's
declared inputs (a missing input, a dtype or a size the model does not accept fails that case
with a message naming the input, the expected and the got dims); an ONNX Runtime failure while
running a case fails that case with ORT's message and node. Every output is compared with
:func:`onnxsurgery.validation.arrays.compare_arrays` at the tolerances of
:mod:`onnxsurgery.validation.tolerances`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from onnxsurgery.errors import ReferenceDataError, UsageError
from onnxsurgery.model.signature import CaseFailure
from onnxsurgery.validation.case_runner import Expected, ModelRunner, run_cases
from onnxsurgery.validation.references import (
    Case,
    CaseStream,
    bind_cases,
    case_loaders,
    load_cases,
)
from onnxsurgery.validation.report import ValidationReport
from onnxsurgery.validation.runtime import ProviderChoice, resolve_provider
from onnxsurgery.validation.tolerances import (
    DEFAULT_ATOL,
    DEFAULT_RTOL,
    Tolerances,
    check_global_tolerances,
    check_tolerances,
)

__all__ = ["validate"]

OutputMapFn = Callable[[Mapping[str, np.ndarray]], Mapping[str, np.ndarray]]



# --------------------------------------------------------------------------------------------
# running


def _as_cases(references: str | os.PathLike | Sequence[Case]) -> tuple[list[Case], str | None]:
    if references is None:
        raise UsageError("no reference cases: give ref=PATH to the validate pass, or --ref PATH")
    if isinstance(references, (str, os.PathLike)):
        return load_cases(references), os.fspath(references)
    cases = list(references)
    if not cases:
        raise ReferenceDataError("no reference cases to validate against")
    for c in cases:
        if not isinstance(c, Case):
            raise TypeError(f"references must be a path or a list of Case, got {type(c).__name__}")
    return cases, None


def validate(
    model: onnx.ModelProto | str | os.PathLike,
    references: str | os.PathLike | Sequence[Case],
    *,
    provider: str | ProviderChoice = "auto",
    atol: float = DEFAULT_ATOL,
    rtol: float = DEFAULT_RTOL,
    tolerances: Tolerances | None = None,
    output_map: OutputMapFn | None = None,
    label: str | None = None,
    progress: Callable[[str, int | None, int | None], None] | None = None,
    histograms: bool = False,
    session: Any = None,
) -> ValidationReport:
    """Run ``model`` on every reference case and compare each output with torch's.

    ``references`` is a path :func:`onnxsurgery.validation.references.load_cases` reads (one
    case at a time, as each runs), a :class:`~onnxsurgery.validation.references.CaseStream`
    (read the same way: the pipeline's cases) or a list of
    :class:`~onnxsurgery.validation.references.Case`. ``atol``/``rtol`` apply to floating outputs;
    ``tolerances`` maps an output name to ``(atol, rtol)`` (``None`` keeps the default) and is
    the only way to loosen bool/int outputs, which are otherwise compared exactly.
    ``output_map`` maps each case's reference outputs onto the model's current outputs (the
    pipeline passes ``PassContext.map_outputs``; its cases come already bound to the input
    model's outputs, so only inputs are bound here then). Tensors stored without a name are
    bound by position (:func:`~onnxsurgery.validation.references.bind_cases`). A model merged
    by concat-outputs (its layout record in ``metadata_props``) is compared with references of
    the model before the merge as the pipeline compares it after the pass: a case's outputs
    (after ``output_map``) are merged the same way
    (:func:`~onnxsurgery.merged_outputs.merge_references`); unnamed ones bind to the outputs
    before the merge; a case holding the merged output already is compared as it is. ``label`` names
    the references in the report when they are given as cases. Raises ProviderError when the
    provider cannot run, ModelLoadError when ONNX Runtime cannot load the model,
    ReferenceDataError when the references cannot be read or bound to the model; everything
    about a single case goes into the report. ``progress(stage, done, total)`` hears before
    each case (the CLI's progress line). ``histograms`` adds each output's error histogram
    (what ``--report FILE.html`` draws). ``session``: an ONNX Runtime session built already
    over exactly ``model`` on ``provider`` (symbolize's check's), run instead of a new one.
    """
    check_global_tolerances(atol, rtol)
    loaders, cases, reference = _reference_source(references)
    choice = provider if isinstance(provider, ProviderChoice) else resolve_provider(provider)
    runner = ModelRunner(model, choice, session)
    runner.histograms = histograms
    required = [s.name for s in runner.specs if not s.optional]
    outputs: Sequence[str] | None = runner.output_names if output_map is None else None
    if runner.layout is not None:  # merged by concat-outputs: as the pipeline maps after it
        outputs, output_map = _onto_merged(runner, outputs, output_map)
    reference = reference if reference is not None else label
    if loaders is not None and set(tolerances or {}) <= set(runner.output_names):
        # each case is read when it runs, so one case is held at a time (the tolerances name
        # model outputs only: no case's own output names are needed to check them)
        tols = check_tolerances(tolerances, runner.output_names)
        lazy = [functools.partial(_bound_run, load, required, outputs, output_map) for load in loaders]
        return run_cases(runner, lazy, choice, atol, rtol, tols, reference, progress)
    if loaders is not None:
        cases = [load() for load in loaders]
    cases = bind_cases(cases, required, outputs)
    known = set(runner.output_names) | {n for c in cases for n in c.outputs}
    tols = check_tolerances(tolerances, known)
    runs = [_run_of(case, output_map) for case in cases]
    return run_cases(runner, runs, choice, atol, rtol, tols, reference, progress)


def _reference_source(
    references: str | os.PathLike | Sequence[Case],
) -> tuple[list[Callable[[], Case]] | None, list[Case], str | None]:
    """Where validate reads cases: loaders that read each case as it runs (a path, or the
    pipeline's CaseStream), else the cases given; and the path that names them in the report."""
    if isinstance(references, (str, os.PathLike)):
        return case_loaders(references), [], os.fspath(references)
    if isinstance(references, CaseStream):  # read from disk as each case runs, like a path
        return references.loaders(), [], None
    cases, reference = _as_cases(references)
    return None, cases, reference


def _onto_merged(
    runner: ModelRunner, outputs: Sequence[str] | None, output_map: OutputMapFn | None
) -> tuple[Sequence[str] | None, OutputMapFn]:
    """For a model merged by concat-outputs: the names a case's unnamed outputs bind to (the
    outputs before the merge) and the map that merges a case's outputs as the model does
    (:func:`~onnxsurgery.merged_outputs.merge_references`, after ``output_map``)."""
    from onnxsurgery.merged_outputs import merge_references, original_names

    layout = runner.layout
    if outputs is not None:
        outputs = original_names(layout, list(outputs))
    first = output_map

    def merged(case_outputs: Mapping[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        return merge_references(layout, first(case_outputs) if first is not None else case_outputs)

    return outputs, merged


def _bound_run(
    load: Callable[[], Case],
    required: Sequence[str],
    outputs: Sequence[str] | None,
    output_map: OutputMapFn | None,
) -> tuple[str, Mapping[str, np.ndarray], Expected]:
    return _run_of(bind_cases([load()], required, outputs)[0], output_map)


def _run_of(
    case: Case, output_map: OutputMapFn | None
) -> tuple[str, Mapping[str, np.ndarray], Expected]:
    """A case as the case runner takes it: name, inputs, and its expected outputs (mapped onto
    the model's outputs when the case runs, if ``output_map`` is given)."""
    if output_map is None:
        return case.name, case.inputs, case.outputs

    def expected() -> Mapping[str, np.ndarray]:
        try:
            return output_map(case.outputs)
        except (KeyError, ValueError, UsageError, ReferenceDataError) as exc:
            raise CaseFailure(f"mapping reference outputs onto the model's failed: {exc}") from None

    return case.name, case.inputs, expected
