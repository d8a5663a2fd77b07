"""diff(): what changed from one model to another, from the two graphs alone (no run needed).

    changes = diff("model.onnx", "model.dyn.onnx")
    for c in changes.constants:
        print(c)   # Reshape '/Reshape' input 1: [4, 5, 16] -> [0, 0, 16] = [batch, seq, 16]

Nodes and tensors are matched by :mod:`onnxsurgery.graphdiff.matching`; a changed input is
spelled by :mod:`onnxsurgery.graphdiff.values`.
"""

from __future__ import annotations

import os
from collections import Counter

import onnx

from onnxsurgery.graphdiff.matching import Matching, constants_of, match_models
from onnxsurgery.graphdiff.result import InputChange, IOChange, ModelDiff, NodeRef, OpChange
from onnxsurgery.graphdiff.values import Speller, Value, array_text
from onnxsurgery.model.dtypes import dtype_name
from onnxsurgery.model.equality import tensor_key
from onnxsurgery.model.io import read_model_file
from onnxsurgery.model.signature import dims_of
from onnxsurgery.model.tensors import is_placeholder
from onnxsurgery.model.weights_on_disk import tensor_array

__all__ = ["diff"]

#: Integer constants: sizes, whose new value is spelled in the input symbols.
_INT_TYPES = frozenset(
    getattr(onnx.TensorProto, t) for t in ("INT64", "INT32", "INT16", "INT8", "UINT8")
)


def _load(model: onnx.ModelProto | str | os.PathLike) -> tuple[onnx.ModelProto, str | None]:
    if isinstance(model, onnx.ModelProto):
        return model, None
    # weights stay in their file: only a changed weight's bytes are read, to say how it changed
    return read_model_file(model, weights_on_disk=True).model, str(model)


def diff(
    a: onnx.ModelProto | str | os.PathLike, b: onnx.ModelProto | str | os.PathLike
) -> ModelDiff:
    """What changed from model ``a`` to model ``b``: nodes added, removed and rewired, by op;
    each node input whose constant was rewritten or replaced by a computation (old value, and
    the new one spelled in ``b``'s input symbols); graph inputs and outputs with their types
    and dims before and after. Empty (falsy) for two models that compute the same thing the
    same way. Paths or ModelProtos; raises ModelLoadError for a file that is not a model."""
    model_a, label_a = _load(a)
    model_b, label_b = _load(b)
    m = match_models(model_a, model_b)
    ga, gb = model_a.graph, model_b.graph
    result = ModelDiff(label_a, label_b, len(ga.node), len(gb.node))
    result.removed = [_ref(ga, i) for i in range(len(ga.node)) if i not in m.nodes]
    result.added = [_ref(gb, k) for k in m.unmatched_b(model_b)]
    result.rewired = [_ref(ga, i) for i in m.rewired]
    result.ops = _ops(ga, gb, result)
    speller = Speller(model_b)
    result.constants = _inputs_changed(model_a, model_b, m, speller)
    result.inputs = _io("input", _declared(ga, inputs=True), _declared(gb, inputs=True))
    result.outputs = _io("output", _declared(ga, inputs=False), _declared(gb, inputs=False))
    if speller.failed and result.constants:
        result.notes.append(f"sizes not spelled in input symbols: propagation failed ({speller.failed})")
    return result


def _ref(graph: onnx.GraphProto, index: int) -> NodeRef:
    node = graph.node[index]
    return NodeRef(node.name, node.op_type, index)


def _ops(ga: onnx.GraphProto, gb: onnx.GraphProto, d: ModelDiff) -> list[OpChange]:
    before = Counter(n.op_type for n in ga.node)
    after = Counter(n.op_type for n in gb.node)
    added = Counter(r.op for r in d.added)
    removed = Counter(r.op for r in d.removed)
    rewired = Counter(r.op for r in d.rewired)
    ops = sorted(set(added) | set(removed) | set(rewired))
    return [
        OpChange(op, before[op], after[op], added[op], removed[op], rewired[op]) for op in ops
    ]


def _inputs_changed(
    a: onnx.ModelProto, b: onnx.ModelProto, m: Matching, speller: Speller
) -> list[InputChange]:
    """Every input of a matched node that is a constant on either side and differs."""
    consts_a, consts_b = constants_of(a.graph), constants_of(b.graph)
    changes = []
    for i, k in m.nodes.items():
        na, nb = a.graph.node[i], b.graph.node[k]
        for j, (x, y) in enumerate(zip(na.input, nb.input, strict=False)):
            if x in consts_a and y in consts_b:
                if _same_constant(consts_a[x], consts_b[y]):
                    continue
            elif (x not in consts_a and y not in consts_b) or m.tensors.get(x) == y:
                continue  # computed on both sides: a rewiring, listed as such
            old = _value(a.graph, x, consts_a)
            new = _value(b.graph, y, consts_b)
            if y not in consts_b or consts_b[y].data_type in _INT_TYPES:
                new.means = speller.spell(nb, j)
            detail = _how_differs(consts_a[x], consts_b[y]) if old.text == new.text else None
            changes.append(InputChange(_ref(a.graph, i), j, old, new, detail))
    return changes


def _same_constant(old: onnx.TensorProto, new: onnx.TensorProto) -> bool:
    """Equal constants; a weight without its data (a weightless copy's placeholder: the
    pipeline keeps the model before each pass that way) is taken as equal to one of the same
    type and dims: what the pass did to a weight's values is not known then."""
    if is_placeholder(old) or is_placeholder(new):
        return old.data_type == new.data_type and list(old.dims) == list(new.dims)
    return tensor_key(old) == tensor_key(new)


def _value(graph: onnx.GraphProto, name: str, consts: dict[str, onnx.TensorProto]) -> Value:
    if name in consts:
        return Value(name, "constant", array_text(consts[name]))
    for node in graph.node:
        if name in node.output:
            return Value(name, "computed", f"{node.op_type} {node.name!r}")
    if any(vi.name == name for vi in graph.input):
        return Value(name, "input", f"input {name!r}")
    return Value(name, "absent", "nothing")


def _how_differs(old: onnx.TensorProto, new: onnx.TensorProto) -> str:
    """How two constants of the same type and dims differ, element by element."""
    from onnxsurgery.validation.arrays import compare_arrays, format_number

    c = compare_arrays(tensor_array(new), tensor_array(old), atol=0, rtol=0, name=new.name)
    where = f" at {list(c.worst_index)}" if c.worst_index is not None else ""
    return f"{c.mismatches} of {c.size} elements differ, max abs {format_number(c.max_abs)}{where}"


def _declared(graph: onnx.GraphProto, *, inputs: bool) -> dict[str, str]:
    inits = {t.name for t in graph.initializer}
    values = graph.input if inputs else graph.output
    out = {}
    for vi in values:
        if vi.name in inits:
            continue
        dims = dims_of(vi)
        shape = "?" if dims is None else ", ".join("?" if d is None else str(d) for d in dims)
        elem = vi.type.tensor_type.elem_type
        out[vi.name] = f"{dtype_name(elem) if elem else '?'}[{shape}]"
    return out


def _io(kind: str, before: dict[str, str], after: dict[str, str]) -> list[IOChange]:
    names = list(before) + [n for n in after if n not in before]
    return [IOChange(kind, n, before.get(n), after.get(n)) for n in names]
