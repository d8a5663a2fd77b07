"""What a node input holds in one model, in words: a constant's value, or the node that computes
it, spelled in the input symbols where it is a size (``[4, 4] -> [height/16, width/16]``).

Sizes are spelled by symbolic shape propagation (:func:`onnxsurgery.shapes.propagate`) over the
model, each input axis the model names (``dim_param``) taken as the symbol of that name, and by
:func:`onnxsurgery.shapes.spelling.dim_text`, which symbolize's own messages use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from onnxsurgery.model.dtypes import dtype_name
from onnxsurgery.model.tensors import is_placeholder
from onnxsurgery.model.weights_on_disk import tensor_array
from onnxsurgery.shapes.dims import Dim
from onnxsurgery.shapes.propagation import propagate
from onnxsurgery.shapes.solver import Solution
from onnxsurgery.shapes.spelling import dim_text

__all__ = ["Value", "Speller", "array_text"]

#: An integer constant of at most this many elements is written out; a bigger one by its type and dims.
SHOWN_ELEMENTS = 16
#: Constants of at most this many elements are read to say that all their elements are equal.
UNIFORM_ELEMENTS = 1 << 16


@dataclass
class Value:
    """One side of a changed node input: a ``constant``, a tensor a node ``computed``, a graph
    ``input``, or ``absent``; ``text`` as a user reads it, ``means`` the same spelled in the
    input symbols where that says more (a Reshape's ``[0, 0, 16]`` is ``[batch, seq, 16]``)."""

    name: str
    kind: str
    text: str
    means: str | None = None

    def __str__(self) -> str:
        return self.text if not self.means or self.means == self.text else f"{self.text} = {self.means}"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "text": self.text, "means": self.means}


def array_text(tensor: onnx.TensorProto) -> str:
    """A constant as a user reads it: its values when it is a small integer tensor (a size) or
    has at most 4 elements, else its type and dims, and its one value where all are equal."""
    dims = list(tensor.dims)
    size = int(np.prod(dims)) if dims else 1
    described = f"{dtype_name(tensor.data_type)}[{', '.join(map(str, dims))}]"
    if size > UNIFORM_ELEMENTS or is_placeholder(tensor):
        return described
    arr = tensor_array(tensor)
    flat = [f"{v:g}" if arr.dtype.kind == "f" else str(v) for v in arr.reshape(-1).tolist()]
    if arr.ndim == 0:
        return flat[0]
    if size <= 4 or (size <= SHOWN_ELEMENTS and arr.dtype.kind in "iu"):
        return "[" + ", ".join(flat) + "]"
    return f"{described}, all {flat[0]}" if flat and len(set(flat)) == 1 else described


class Speller:
    """Sizes of one model spelled in its input symbols; propagation runs on first use, once.

    When propagation cannot run on the model, :attr:`failed` says why and nothing is spelled:
    the diff still lists the change, only without the expression."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        self._analysis: Any = None
        self.failed: str | None = None

    def _run(self) -> Any:
        if self._analysis is None and self.failed is None:
            axes: dict[str, dict[int, str]] = {}
            inits = {t.name for t in self.model.graph.initializer}
            for vi in self.model.graph.input:
                if vi.name in inits:
                    continue
                for k, d in enumerate(vi.type.tensor_type.shape.dim):
                    if d.HasField("dim_param") and d.dim_param.isidentifier():
                        axes.setdefault(vi.name, {})[k] = d.dim_param
            try:
                self._analysis = propagate(self.model, axes)
            except Exception as exc:  # noqa: BLE001 - an expression is a help; say why it is missing
                self.failed = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        return self._analysis

    def spell(self, node: onnx.NodeProto, index: int) -> str | None:
        """Input ``index`` of ``node`` in the input symbols: its values where it is a small
        integer tensor (a Reshape's 0 as the dim it copies), else its shape; None if unknown."""
        a = self._run()
        info = a.tensors.get(node.input[index]) if a is not None else None
        if info is None:
            return None
        known = {n: Dim.const(x.traced) for n, x in a.atoms.items() if x.kind in ("var", "data")}
        values = info.value
        if values is None:
            if info.shape is None:
                return None
            dims = [dim_text(a, Solution(), d.subs(known)) for d in info.shape]
            return f"shape [{', '.join('?' if '$' in d else d for d in dims)}]"
        values = _reshape_copies(a, node, index, list(values))
        spelled = [dim_text(a, Solution(), d.subs(known)) for d in values]
        if any("$" in text for text in spelled):  # a size only the run knows: no spelling
            return None
        return "[" + ", ".join(spelled) + "]"


def _reshape_copies(a: Any, node: onnx.NodeProto, index: int, values: list) -> list:
    """A Reshape's shape with each 0 replaced by the input dim it copies (``allowzero=0``)."""
    if node.op_type != "Reshape" or index != 1 or not any(v == 0 for v in values):
        return values
    if any(at.name == "allowzero" and at.i for at in node.attribute):
        return values
    data = a.tensors.get(node.input[0])
    if data is None or data.shape is None:
        return values
    return [data.shape[k] if v == 0 and k < len(data.shape) else v for k, v in enumerate(values)]
