"""Per-op shape rules, by op family; importing this package registers every one of them.

    core.py          the registry (keyed by domain and op, duplicates refused), NodeCtx, dispatch
                     (:func:`run_node`), constant folding of small nodes, ONNX-inference fallback
    elementwise.py   unary, Cast/Identity/Neg, binary arithmetic and comparison, Where, Scatter
    tensor.py        shape vectors and layout: Shape, Reshape, Concat, Slice, Gather, Expand, ...
    nn.py            MatMul, Gemm, Conv, pooling, normalization, RNNs, Resize, Einsum
    control_flow.py  If and Loop subgraphs

A new op's rule goes into its family's module with ``@rule("OpType")`` (``domain=`` for a custom
domain).
"""

from __future__ import annotations

from onnxsurgery.shapes.rules import control_flow, elementwise, nn, tensor  # noqa: F401  (registers)
from onnxsurgery.shapes.rules.core import RULES, NodeCtx, rule, run_node

__all__ = ["RULES", "NodeCtx", "rule", "run_node"]
