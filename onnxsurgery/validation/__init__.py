"""Checking a model on ONNX Runtime: against stored torch references, or against another model.

    runtime.py             providers (auto/cuda/cpu, probed with a real session), sessions, ORT errors
    ort_installs.py        the distributions that provide onnxruntime; one line when two do
    session_weights.py     the weights a session gets without copies, and what a later one shares
    mapped_weights.py      weights ORT maps from a file (one written once, or the model's own)
    watchdog.py            the run time limit: one watcher thread for every run's deadline
    references.py          reference cases: the ONNX test-data layout and .npz, read and written
    recording.py           recording cases from a torch module; importing the user's module
    feeds.py               the one random-input maker
    tolerances.py          default tolerances, exact dtypes, per-output overrides, ``--tol`` text
    arrays.py              one output against its reference: pass/fail and how it is worded
    array_stats.py         the chunked pass that gathers a comparison's statistics
    report.py              ValidationReport and CaseResult: tables and JSON
    case_runner.py         one session, every case: the runner both comparisons share
    against_references.py  validate(): a model against stored cases
    against_model.py       compare_models(): a model against another model
"""

from __future__ import annotations

from onnxsurgery.lazy import lazy_exports

# Each name imports its module when first used (see onnxsurgery/lazy.py).
__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "onnxsurgery.validation.against_model": ("compare_models",),
        "onnxsurgery.validation.against_references": ("validate",),
        "onnxsurgery.validation.arrays": ("OutputComparison", "compare_arrays"),
        "onnxsurgery.validation.feeds": ("random_array", "random_inputs"),
        "onnxsurgery.validation.recording": ("load_module", "record", "record_model_cases"),
        "onnxsurgery.validation.references": ("Case", "load_cases", "save_case", "save_npz"),
        "onnxsurgery.validation.report": ("CaseResult", "ValidationReport"),
        "onnxsurgery.validation.runtime": (
            "PROVIDERS",
            "ProviderChoice",
            "create_session",
            "resolve_provider",
        ),
        "onnxsurgery.validation.tolerances": (
            "DEFAULT_ATOL",
            "DEFAULT_RTOL",
            "parse_tolerance_spec",
        ),
    },
    modules=(
        "array_stats",
        "against_model",
        "against_references",
        "arrays",
        "case_runner",
        "feeds",
        "mapped_weights",
        "ort_installs",
        "recording",
        "references",
        "report",
        "runtime",
        "session_weights",
        "tolerances",
        "watchdog",
    ),
)
