"""An ONNX Runtime failure during symbolize's check, as a :class:`~onnxsurgery.errors.PassError`
naming the model's node: ORT reports the nodes of its optimized graph (``<tensor>_nchwc``, a
Conv fused with its activation), which :func:`model_node` maps back to the node the user has."""

from __future__ import annotations

import re

import onnx

from onnxsurgery.errors import PassError
from onnxsurgery.validation.runtime import describe_ort_error

__all__ = ["model_node", "ort_failure"]


def model_node(
    model: onnx.ModelProto | None, name: str | None, op: str | None = None
) -> str | None:
    """The model's node behind a name ONNX Runtime reports: itself, or, for a node its graph
    optimizer made (``<tensor>_nchwc``), the node of type ``op`` next to that tensor."""
    if model is None or not name:
        return name
    if name in {n.name for n in model.graph.node}:
        return name
    tensors = {o for n in model.graph.node for o in n.output if o}
    tensor = max((t for t in tensors if name.startswith(t)), key=len, default=None)
    if tensor is None:
        return name
    near = [n for n in model.graph.node if tensor in n.output or tensor in n.input]
    # A fused node (Conv + its activation) is named after the activation's output: look one step
    # further upstream too.
    upstream = {i for n in near if tensor in n.output for i in n.input}
    near += [n for n in model.graph.node if upstream & set(n.output)]
    for n in near:
        if op is None or n.op_type == op:
            return n.name or n.output[0]
    return near[0].name or near[0].output[0] if near else name


def ort_failure(what: str, exc: BaseException, model: onnx.ModelProto | None = None) -> PassError:
    message, node = describe_ort_error(exc)
    m = re.search(r"running (\w+) node", str(exc))
    real = model_node(model, node, m.group(1) if m else None)
    if real and node and real != node:
        message = f"{message} (ONNX Runtime's node {node!r} is the model's {real!r})"
    return PassError(f"check {what}: ONNX Runtime failed: {message}", node=real)
