"""The case runner both kinds of validation share: one session per model, each case's inputs
checked against the model's signature, every output compared with its expected value.

:func:`~onnxsurgery.validation.against_references.validate` feeds it stored torch cases;
:func:`~onnxsurgery.validation.against_model.compare_models` feeds it inputs whose expected
outputs another model computes.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import onnx

from onnxsurgery.errors import ModelLoadError
from onnxsurgery.model.bounds import over_bound, read_bounds
from onnxsurgery.model.io import read_model_file
from onnxsurgery.model.signature import CaseFailure, check_inputs, model_inputs
from onnxsurgery.validation.arrays import OutputComparison, compare_arrays
from onnxsurgery.validation.report import CaseResult, ValidationReport
from onnxsurgery.validation.runtime import (
    ProviderChoice,
    create_session,
    describe_ort_error,
    run_session,
    too_new_hint,
)
from onnxsurgery.validation.tolerances import tolerance_for

__all__ = ["Expected", "ModelRunner", "Run", "collect_notes", "run_case", "run_cases"]

#: A case's reference outputs, or a function computing them when the case runs.
Expected = Mapping[str, np.ndarray] | Callable[[], Mapping[str, np.ndarray]]


class ModelRunner:
    """One model, one session, reused over every case."""

    def __init__(
        self, model: onnx.ModelProto | str | os.PathLike, choice: ProviderChoice, session: Any = None
    ) -> None:
        """``session``: one already built over exactly ``model`` on ``choice``, used as it is."""
        # a path: its graph, weights left where they lie (ORT reads them from the file itself)
        proto = model if isinstance(model, onnx.ModelProto) else read_model_file(
            model, weights_on_disk=True
        ).model
        self.label = str(model) if not isinstance(model, onnx.ModelProto) else "model"
        self.specs = model_inputs(proto)
        #: symbol bounds the model records (``seq<=8``): a case over one does not run
        self.bounds = read_bounds(proto)
        self.output_names = [o.name for o in proto.graph.output]
        #: concat-outputs' layout record (a merged_outputs.Layout), or None
        self.layout: Any = _layout_of(proto, self.label)
        #: count each output's errors into a histogram (an HTML report draws them)
        self.histograms = False
        try:
            self.session = session if session is not None else create_session(
                proto if isinstance(model, onnx.ModelProto) else model, choice, spin=False
            )
        except Exception as exc:  # ORT rejecting the model is the user's model, not our bug
            message, node = describe_ort_error(exc)
            where = f" (node {node!r})" if node and node not in message else ""
            hint = too_new_hint(proto)
            if hint is None and "Could not find an implementation" in message:
                hint = (
                    "ONNX Runtime has no kernel for that op at the model's opset; "
                    "`onnxsurgery run MODEL --passes compat` converts the opset"
                )
            raise ModelLoadError(
                f"{self.label}: ONNX Runtime cannot load the model: {message}{where}"
                + (f"; {hint}" if hint else "")
            ) from None
        self.choice = choice

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            values = run_session(self.session, self.output_names, feeds)
        except Exception as exc:  # any ORT failure on this case is this case's failure
            message, node = describe_ort_error(exc)
            where = f" (node {node!r})" if node and node not in message else ""
            raise CaseFailure(f"ONNX Runtime failed: {message}{where}", node=node) from None
        return dict(zip(self.output_names, values, strict=True))


def _layout_of(proto: onnx.ModelProto, label: str) -> Any:
    """The model's concat-outputs layout record, or None. merged_outputs is imported only for a
    model with metadata at all (one as exported has none; tests/test_import_cost.py)."""
    if not proto.metadata_props:
        return None
    from onnxsurgery.merged_outputs import find_layout

    return find_layout({p.key: p.value for p in proto.metadata_props}, label)


def _merged_part(runner: ModelRunner, comparison: OutputComparison) -> OutputComparison:
    """A failing comparison of a merged output, saying which original output its worst element
    belongs to (from the layout record)."""
    layout = runner.layout
    if layout is None or comparison.name != layout.name or comparison:
        return comparison
    if comparison.worst_index is None or comparison.shape is None:
        return comparison
    from onnxsurgery.merged_outputs import locate  # imported already: the runner has a layout

    where = locate(layout, comparison.shape, comparison.worst_index)
    if where is None:
        return comparison
    said = f"worst element is {where} of the original outputs"
    problem = f"{said}; {comparison.problem}" if comparison.problem else said
    return dataclasses.replace(comparison, problem=problem)


def _merged_note(layout: Any) -> str:
    """The note a report carries for a merged model: which original outputs its merged output
    holds, so a row for it says what it compares."""
    return (
        f"output {layout.name!r} holds {', '.join(map(repr, layout.part_names))} merged by "
        "concat-outputs (its layout record); what it is compared with is merged the same way"
    )


def run_case(
    runner: ModelRunner,
    name: str,
    inputs: Mapping[str, np.ndarray],
    expected: Expected,
    *,
    atol: float,
    rtol: float,
    tolerances: Mapping[str, tuple[float | None, float | None]],
) -> CaseResult:
    result = CaseResult(
        name=name,
        inputs={k: (list(np.shape(v)), str(np.asarray(v).dtype)) for k, v in inputs.items()},
    )
    try:
        feeds, result.notes = check_inputs(runner.specs, inputs)
        over = over_bound(runner.specs, inputs, runner.bounds) if runner.bounds else None
        if over is not None:
            raise CaseFailure(over)
        if callable(expected):
            expected = expected()
        t0 = time.perf_counter()
        actual = runner.run(feeds)
        result.inference_seconds = time.perf_counter() - t0
    except CaseFailure as exc:
        result.error, result.node = str(exc), exc.node
        return result
    t0 = time.perf_counter()
    produced = runner.output_names
    if runner.layout is not None:
        result.notes.append(_merged_note(runner.layout))
    for out_name in produced:
        if out_name not in expected:
            result.outputs.append(
                OutputComparison.missing(
                    out_name,
                    f"model output with no reference (the case has {', '.join(expected) or 'none'})",
                )
            )
            continue
        ref = np.asarray(expected[out_name])
        a, r = tolerance_for(out_name, ref, atol, rtol, tolerances)
        compared = compare_arrays(
            actual[out_name], ref, atol=a, rtol=r, name=out_name, histogram=runner.histograms
        )
        result.outputs.append(_merged_part(runner, compared))
    for ref_name in expected:
        if ref_name not in actual:
            result.outputs.append(
                OutputComparison.missing(
                    ref_name,
                    f"reference output the model does not produce (model outputs: {', '.join(produced)})",
                )
            )
    result.compare_seconds = time.perf_counter() - t0
    return result


#: One case for :func:`run_cases`: ``(name, inputs, expected)``, or a function returning that
#: when the case's turn comes (a case read from disk then, and let go once compared).
Run = tuple[str, Mapping[str, np.ndarray], Expected] | Callable[[], tuple[str, Mapping[str, np.ndarray], Expected]]


def run_cases(
    runner: ModelRunner,
    runs: Iterable[Run],
    choice: ProviderChoice,
    atol: float,
    rtol: float,
    tolerances: dict[str, tuple[float | None, float | None]],
    reference: str | None,
    progress: Callable[[str, int | None, int | None], None] | None = None,
) -> ValidationReport:
    """Run every ``(name, inputs, expected)`` on ``runner`` and gather the report;
    ``progress(stage, done, total)`` hears before each case."""
    runs = list(runs)
    results = []
    for k, run in enumerate(runs):
        if progress is not None:
            progress(f"case {k + 1}/{len(runs)}", k, len(runs))
        name, inputs, expected = run() if callable(run) else run
        results.append(
            run_case(runner, name, inputs, expected, atol=atol, rtol=rtol, tolerances=tolerances)
        )
        del inputs, expected  # before the next case is read: its memory is this one's
    return ValidationReport(
        cases=results,
        provider=choice.note,
        atol=float(atol),
        rtol=float(rtol),
        tolerances=tolerances,
        reference=reference,
        notes=collect_notes(results),
    )


def collect_notes(cases: Iterable[CaseResult]) -> list[str]:
    seen: dict[str, list[str]] = {}
    for c in cases:
        for note in c.notes:
            seen.setdefault(note, []).append(c.name)
    return [
        f"{note} ({len(names)} case{'s' if len(names) != 1 else ''})"
        for note, names in seen.items()
    ]
