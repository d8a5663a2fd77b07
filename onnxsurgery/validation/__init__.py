"""Checking a model on ONNX Runtime: against stored torch references, or against another model.

    runtime.py             providers (auto/cuda/cpu, probed with a real session), sessions, ORT errors
    watchdog.py            the run time limit: one watcher thread for every run's deadline
    references.py          reference cases: the ONNX test-data layout and .npz, read and written
    recording.py           recording cases from a torch module; importing the user's module
    feeds.py               the one random-input maker
    tolerances.py          default tolerances, exact dtypes, per-output overrides, ``--tol`` text
    arrays.py              one output against its reference: statistics, NaN/Inf, pass/fail
    report.py              ValidationReport and CaseResult: tables and JSON
    case_runner.py         one session, every case: the runner both comparisons share
    against_references.py  validate(): a model against stored cases
    against_model.py       compare_models(): a model against another model
"""

from __future__ import annotations

from onnxsurgery.validation.against_model import compare_models
from onnxsurgery.validation.against_references import validate
from onnxsurgery.validation.arrays import OutputComparison, compare_arrays
from onnxsurgery.validation.feeds import random_array, random_inputs
from onnxsurgery.validation.recording import load_module, record, record_model_cases
from onnxsurgery.validation.references import Case, load_cases, save_case, save_npz
from onnxsurgery.validation.report import CaseResult, ValidationReport
from onnxsurgery.validation.runtime import (
    PROVIDERS,
    ProviderChoice,
    create_session,
    resolve_provider,
)
from onnxsurgery.validation.tolerances import DEFAULT_ATOL, DEFAULT_RTOL, parse_tolerance_spec

__all__ = [
    "DEFAULT_ATOL",
    "DEFAULT_RTOL",
    "PROVIDERS",
    "Case",
    "CaseResult",
    "OutputComparison",
    "ProviderChoice",
    "ValidationReport",
    "compare_arrays",
    "compare_models",
    "create_session",
    "load_cases",
    "load_module",
    "parse_tolerance_spec",
    "random_array",
    "random_inputs",
    "record",
    "record_model_cases",
    "resolve_provider",
    "save_case",
    "save_npz",
    "validate",
]
