"""The diff of two models: what a pass (or anything else) changed, from the two graphs alone.

    matching.py  which node and tensor of one model is which of the other (name, then signature)
    values.py    a node input's value in words, sizes spelled in the input symbols
    result.py    ModelDiff and its parts: dataclasses with to_dict()/to_json() and view()
    compute.py   diff(): nodes added/removed/rewired by op, rewritten constants, inputs/outputs

``onnxsurgery.diff(a, b)`` and ``onnxsurgery diff A.onnx B.onnx`` are :func:`diff`. The search
for the first diverging node (:mod:`onnxsurgery.divergence`) matches tensors the same way.
"""

from __future__ import annotations

from onnxsurgery.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "onnxsurgery.graphdiff.compute": ("diff",),
        "onnxsurgery.graphdiff.matching": ("Matching", "match_models", "constants_of"),
        "onnxsurgery.graphdiff.result": ("ModelDiff", "InputChange", "IOChange", "NodeRef", "OpChange"),
        "onnxsurgery.graphdiff.values": ("Value",),
    },
    modules=("compute", "matching", "result", "values"),
)
