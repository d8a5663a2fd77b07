"""ONNX shape inference with data propagation, stale intermediate value_info dropped first.

Rules:
- every intermediate ``value_info`` is dropped first: after surgery, stale entries (a batch of 4
  recorded before symbolize) would otherwise contradict inference or be trusted by runtimes;
- shapes are inferred by ``onnx.shape_inference`` in strict mode with ``data_prop``, so shape
  arithmetic (Shape -> Gather -> Concat) propagates;
- graph inputs and outputs keep their declared types.

    value_info: t1 [4, 16]  (stale)   =>   value_info: t1 [batch, 16]
"""

from __future__ import annotations

import onnx

from onnxsurgery.model.io import infer_shapes
from onnxsurgery.pipeline.contract import Diagnostic, Pass, PassContext, PassResult

__all__ = ["InferShapes"]


def _shape_text(vi: onnx.ValueInfoProto) -> str:
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        return "?"
    return "x".join(d.dim_param or (str(d.dim_value) if d.HasField("dim_value") else "?") for d in t.shape.dim)


class InferShapes(Pass):
    """Re-run ONNX shape inference (with data propagation) on a clean slate.

    Every intermediate ``value_info`` is dropped, then inferred again by ONNX's strict shape
    inference, so entries left stale by surgery (a batch of 4 recorded before symbolize) cannot
    contradict the graph; graph inputs and outputs keep their declared types.

    Options:
        data_prop (bool): Propagate values through shape arithmetic (Shape -> Gather -> Concat).

    Example:
        infer-shapes(data_prop=false)
    """

    name = "infer-shapes"
    weights_on_disk = True

    def __init__(self, *, data_prop: bool = True) -> None:
        super().__init__(data_prop=data_prop)
        if not isinstance(data_prop, bool):
            raise ValueError(f"data_prop must be true or false, got {data_prop!r}")
        self.data_prop = data_prop

    def run(self, model: onnx.ModelProto, ctx: PassContext) -> PassResult:
        stale = {vi.name: _shape_text(vi) for vi in model.graph.value_info}
        bare = onnx.ModelProto()
        bare.CopyFrom(model)
        del bare.graph.value_info[:]
        try:
            inferred = infer_shapes(bare, data_prop=self.data_prop)
        except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as exc:
            self.fail(f"shape inference failed: {str(exc).strip().splitlines()[0]}")
        fresh = {vi.name: _shape_text(vi) for vi in inferred.graph.value_info}
        changed = sorted(n for n in fresh.keys() | stale.keys() if fresh.get(n) != stale.get(n))
        if not changed:
            return PassResult(model, modified=False, diagnostics=[Diagnostic.info("shapes already up to date")])
        dropped = sorted(stale.keys() - fresh.keys())
        diagnostics = [Diagnostic.info(f"{len(fresh)} value_info entries inferred, {len(changed)} changed")]
        if dropped:
            diagnostics.append(Diagnostic.info(f"dropped {len(dropped)} stale value_info entries"))
        return PassResult(inferred, modified=True, diagnostics=diagnostics)
