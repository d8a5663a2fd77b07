"""Where two models that should agree part ways: the first diverging node.

    search.py    localize(): intermediate tensors exposed in batches, compared in topological order
    original.py  localize_failure(): a failing validation localized against the original model
    result.py    Localization and InputOrigin: dataclasses with to_dict()/to_json() and view()

Tensors are matched as the diff of two models matches them (:mod:`onnxsurgery.graphdiff`);
sessions, runs and comparisons are validation's (:mod:`onnxsurgery.validation`).
"""

from __future__ import annotations

from onnxsurgery.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "onnxsurgery.divergence.search": ("localize", "MAX_TENSORS", "MAX_BYTES"),
        "onnxsurgery.divergence.original": (
            "localize_failure",
            "localize_comparison",
            "localize_references",
            "localize_validation",
            "LocalizedFailure",
        ),
        "onnxsurgery.divergence.result": ("Localization", "InputOrigin"),
    },
    modules=("original", "result", "search"),
)
