"""Per-op shape rules, by op family; importing this package registers every one of them.

    core.py          the registry (keyed by domain and op, duplicates refused), NodeCtx, dispatch
                     (:func:`run_node`), constant folding of small nodes, ONNX-inference fallback
    traits.py        :class:`OpTraits`, what passes know of an op beside its rule (which inputs
                     are sizes, which axes mix rows, whether it broadcasts, may be folded), keyed
                     like the rules; :func:`op_traits` is every pass's one query of them
    elementwise.py   unary, Cast/Identity/Neg, binary arithmetic and comparison, Where, Scatter
    chunks.py        TorchScript's run-time chunk bounds, whose constants are the chunk's own
    tensor.py        shape vectors and layout: Shape, Reshape, Concat, Slice, Gather, Expand, ...
    nn.py            MatMul, Gemm, Conv, pooling, normalization, RNNs, Resize, Einsum
    control_flow.py  If and Loop subgraphs

A new op is one declaration in its family's module: ``@rule("OpType", size_inputs=(1,), ...)``
(``domain=`` for a custom domain; the keywords are the fields of :class:`OpTraits`), or
``traits("OpType", ...)`` for an op without a rule or one sharing a rule with ops that differ.
"""

from __future__ import annotations

from onnxsurgery.shapes.rules import control_flow, elementwise, nn, tensor  # noqa: F401  (registers)
from onnxsurgery.shapes.rules.core import RULES, NodeCtx, rule, run_node
from onnxsurgery.shapes.rules.traits import ALL, TRAITS, MixAxis, OpTraits, op_traits, traits

__all__ = [
    "ALL", "MixAxis", "NodeCtx", "OpTraits", "RULES", "TRAITS", "op_traits", "rule", "run_node",
    "traits",
]  # fmt: skip
