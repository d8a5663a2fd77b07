"""localize(): the first node whose output differs between two models that should agree.

    found = localize("model.dyn.onnx", "model.onnx", case.inputs)
    print(found.headline)   # first diverging node: Reshape '/Reshape' (node 7)

Intermediate tensors are exposed as outputs of each model in batches (at most ``max_tensors``
per batch, fewer once a batch has shown how big they are, so about ``max_bytes`` of both
models' tensors are held at once); each batch runs on ONNX Runtime through the validation
runtime (:func:`~onnxsurgery.validation.runtime.create_session`, the weights of the first
batch's session shared by the next) and every tensor of it is compared with its counterpart by
:func:`~onnxsurgery.validation.arrays.compare_arrays` at the validation tolerances. Nodes are
walked in topological order and the search stops at the first batch holding a difference:
every input of the first diverging node that a node computes was compared before it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import onnx

from onnxsurgery.divergence.result import InputOrigin, Localization
from onnxsurgery.errors import ReferenceDataError
from onnxsurgery.graphdiff.matching import Matching, constants_of, match_models
from onnxsurgery.model.io import read_model_file
from onnxsurgery.model.signature import CaseFailure, check_inputs, model_inputs
from onnxsurgery.model.weights_on_disk import tensor_array
from onnxsurgery.validation.against_model import provider_pair
from onnxsurgery.validation.arrays import OutputComparison, compare_arrays
from onnxsurgery.validation.runtime import (
    ProviderChoice,
    create_session,
    describe_ort_error,
    run_session,
    session_weights,
)
from onnxsurgery.validation.tolerances import DEFAULT_ATOL, DEFAULT_RTOL, tolerance_for

__all__ = ["MAX_BYTES", "MAX_TENSORS", "localize"]

#: Tensors exposed per batch, at most.
MAX_TENSORS = 32
#: Bytes of intermediate tensors (both models together) a batch aims to stay under.
MAX_BYTES = 256 << 20


def _load(model: onnx.ModelProto | str | os.PathLike) -> tuple[onnx.ModelProto, str | None]:
    if isinstance(model, onnx.ModelProto):
        return model, None
    return read_model_file(model, weights_on_disk=True).model, str(model)


def localize(
    model: onnx.ModelProto | str | os.PathLike,
    reference: onnx.ModelProto | str | os.PathLike,
    feeds: Mapping[str, np.ndarray],
    *,
    provider: str | ProviderChoice = "auto",
    reference_provider: str | ProviderChoice | None = None,
    atol: float = DEFAULT_ATOL,
    rtol: float = DEFAULT_RTOL,
    case: str | None = None,
    max_tensors: int = MAX_TENSORS,
    max_bytes: int = MAX_BYTES,
) -> Localization:
    """Find the first node of ``model`` whose output differs from its counterpart in
    ``reference`` on ``feeds`` (one set of inputs, fed to both). Tensors are matched by name,
    or by position where a pass renamed them (:mod:`onnxsurgery.graphdiff.matching`); those
    without a counterpart are listed, not compared. Floating tensors compare at ``atol`` /
    ``rtol``, others exactly. ``case`` names the inputs in the result. ``provider`` runs
    ``model``, ``reference_provider`` runs ``reference`` (None: the same choice): one model
    against itself on ``"cuda"`` and ``"cpu"`` finds where CUDA departs from CPU. Raises
    ReferenceDataError when either model does not accept ``feeds``."""
    choices = provider_pair(provider, reference_provider)
    a, label_a = _load(model)
    b, label_b = _load(reference)
    feeds_a = _fit(a, feeds, label_a or "the model")
    feeds_b = _fit(b, feeds, label_b or "the reference model")
    m = match_models(a, b)
    result = Localization(label_a, label_b, case, provider=choices[0].note, reference_provider=choices[1].note)
    order = [t for node in a.graph.node for t in node.output if t]
    result.unmatched = [t for t in order if t not in m.tensors]
    compared: dict[str, OutputComparison] = {}
    runs = _Runs(a, b, feeds_a, feeds_b, choices)
    first = _search([t for t in order if t in m.tensors], m, runs, compared, (atol, rtol),
                    max_tensors, max_bytes)  # fmt: skip
    result.compared, result.batches = len(compared), runs.batches
    if first is not None:
        _describe(result, a, b, m, first, compared)
    return result


def _fit(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], label: str) -> dict[str, np.ndarray]:
    try:
        return check_inputs(model_inputs(model), feeds)[0]
    except CaseFailure as exc:
        raise ReferenceDataError(f"{label} does not take these inputs: {exc}") from None


class _Runs:
    """Both models, run with chosen intermediate tensors exposed as outputs."""

    def __init__(
        self, a: onnx.ModelProto, b: onnx.ModelProto, feeds_a: Any, feeds_b: Any,
        choices: tuple[ProviderChoice, ProviderChoice],
    ) -> None:  # fmt: skip
        self.models = (a, b)
        self.feeds = (feeds_a, feeds_b)
        self.choices = choices
        self.shared: list[Any] = [{}, {}]
        self.batches = 0

    def run(self, side: int, names: list[str]) -> dict[str, Any]:
        model = self.models[side]
        with _exposed(model, names):
            try:
                session = create_session(model, self.choices[side], spin=False, share_with=self.shared[side])
                values = run_session(session, names, self.feeds[side])
            except Exception as exc:  # ORT refusing or failing: the user's model, said in one line
                message, node = describe_ort_error(exc)
                which = "the model" if side == 0 else "the reference model"
                at = f" (node {node!r})" if node and node not in message else ""
                raise ReferenceDataError(
                    f"localizing: ONNX Runtime failed on {which} with intermediate outputs: {message}{at}"
                ) from None
        if not self.shared[side]:
            self.shared[side] = session_weights(session)
        return dict(zip(names, values, strict=True))


@contextlib.contextmanager
def _exposed(model: onnx.ModelProto, names: list[str]) -> Iterator[None]:
    """``model`` with ``names`` as its only graph outputs while the block runs (a temporary
    edit of its output list; the weights are not copied), its own outputs put back after."""
    saved = [onnx.ValueInfoProto().FromString(o.SerializeToString()) for o in model.graph.output]
    del model.graph.output[:]
    model.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names)
    try:
        yield
    finally:
        del model.graph.output[:]
        model.graph.output.extend(saved)


def _search(
    order: list[str],
    m: Matching,
    runs: _Runs,
    compared: dict[str, OutputComparison],
    tols: tuple[float, float],
    max_tensors: int,
    max_bytes: int,
) -> str | None:
    """Compare ``order``'s tensors batch by batch; the first that differs, or None."""
    pos, size = 0, max(1, max_tensors)
    while pos < len(order):
        batch = order[pos : pos + size]
        got_a = runs.run(0, batch)
        got_b = runs.run(1, [m.tensors[t] for t in batch])
        runs.batches += 1
        held = 0
        for t in batch:
            x, y = got_a.pop(t), got_b.pop(m.tensors[t])
            if not (isinstance(x, np.ndarray) and isinstance(y, np.ndarray)):
                continue  # a sequence or map: not a tensor to compare
            held += x.nbytes + y.nbytes
            atol, rtol = tolerance_for(t, y, *tols, {})
            compared[t] = compare_arrays(x, y, atol=atol, rtol=rtol, name=t)
        first = next((t for t in batch if t in compared and not compared[t]), None)
        if first is not None:
            return first
        pos += len(batch)
        per_tensor = max(1, held // max(1, len(batch)))
        size = max(1, min(max_tensors, max_bytes // per_tensor))
    return None


def _describe(
    result: Localization,
    a: onnx.ModelProto,
    b: onnx.ModelProto,
    m: Matching,
    tensor: str,
    compared: dict[str, OutputComparison],
) -> None:
    """Fill in the diverging node: its outputs' errors and each input's origin and error."""
    index, node = next((i, n) for i, n in enumerate(a.graph.node) if tensor in n.output)
    result.found, result.node, result.op, result.index = True, node.name, node.op_type, index
    result.outputs = [compared[t] for t in node.output if t in compared]
    producers = {t: n for n in a.graph.node for t in n.output}
    consts_a, consts_b = constants_of(a.graph), constants_of(b.graph)
    inits = {t.name for t in a.graph.initializer}
    graph_inputs = {i.name for i in a.graph.input if i.name not in inits}
    other_node = b.graph.node[m.nodes[index]] if index in m.nodes else None
    counterpart = other_node.input if other_node is not None else []
    result.neighbourhood = {"after": _sketch(node), "before": _sketch(other_node) if other_node is not None else None}
    for j, name in enumerate(node.input):
        if not name:
            continue
        if name in graph_inputs:
            fed = "fed the same values" if name in m.tensors else "no counterpart in the reference"
            result.inputs.append(InputOrigin(name, "graph input", note=fed))
        elif name in consts_a:
            origin = InputOrigin(name, "initializer" if name in inits else "constant")
            # by name or value, else the matched node's input at that position (renamed)
            other = m.tensors.get(name) or (counterpart[j] if j < len(counterpart) else None)
            if other is None or other not in consts_b:
                origin.note = "no counterpart in the reference"
            else:
                expected = tensor_array(consts_b[other])
                origin.comparison = compare_arrays(  # constants are equal or not
                    tensor_array(consts_a[name]), expected, atol=0.0, rtol=0.0, name=name
                )
            result.inputs.append(origin)
        else:
            producer = producers.get(name)
            said = f"{producer.op_type} {producer.name!r}" if producer is not None else None
            result.inputs.append(
                InputOrigin(name, "node", said, compared.get(name), "no counterpart: not compared")
            )
    result.inputs_agree = all(
        bool(o.comparison) if o.comparison is not None else o.note == "fed the same values"
        for o in result.inputs
    )


def _sketch(node: onnx.NodeProto) -> dict[str, Any]:
    return {"name": node.name, "op": node.op_type, "inputs": list(node.input), "outputs": list(node.output)}
