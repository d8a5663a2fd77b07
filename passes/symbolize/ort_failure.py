"""A failure in symbolize's check, as a :class:`~onnxsurgery.errors.PassError` naming the model's
node and the plan's decision that broke.

ONNX Runtime reports the nodes of its optimized graph (``<tensor>_nchwc``, a Conv fused with its
activation), which :func:`model_node` maps back to the node the user has. Where the rewritten
model fails, at a node or in an output's values, :func:`broken_decision` and
:func:`wrong_values` walk back from there to the plan's changes (:class:`PlanDecisions`) and say
which rewrite it was, in the input symbols, with the constants upstream that kept a traced size:
the check caught a planning bug, and the message says so, not only what ONNX Runtime said (that
stays in the error's report, ``--report``)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import onnx

from onnxsurgery.errors import PassError
from onnxsurgery.model.dtypes import dtype_name, elem_type_of
from onnxsurgery.passes.symbolize.indexed_tables import folded_table, upstream_nodes
from onnxsurgery.passes.symbolize.reads import Change
from onnxsurgery.passes.symbolize.wording import fmt_values, plan_fix_text, plan_words
from onnxsurgery.validation.runtime import describe_ort_error

__all__ = ["PlanDecisions", "broken_decision", "model_node", "ort_failure", "wrong_values"]


@dataclass(frozen=True)
class PlanDecisions:
    """What the check needs to name the plan's decision that broke: its changes, each symbol's
    traced size, and the input axes each symbol names."""

    changes: Sequence[Change]
    traced: Mapping[str, int]
    axes: Mapping[str, Mapping[int, str]]


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


#: how ONNX Runtime (or the allocator under it) says a run ran out of memory
_OUT_OF_MEMORY = re.compile(r"Failed to allocate memory|bad_alloc|out of memory|MemoryError", re.I)


def ort_failure(
    what: str,
    exc: BaseException,
    model: onnx.ModelProto | None = None,
    decisions: PlanDecisions | None = None,
) -> PassError:
    """The check's error for ONNX Runtime failing ``what`` (``at seq=9``). With the plan's
    ``decisions`` (``model`` is then the rewritten model), a failure at a node the plan's changes
    reach is said as that decision (:func:`broken_decision`)."""
    message, node = describe_ort_error(exc)
    m = re.search(r"running (\w+) node", str(exc))
    real = model_node(model, node, m.group(1) if m else None)
    if _OUT_OF_MEMORY.search(str(exc)):
        # the machine's limit, not the plan's: never blamed on a rewrite
        report = {"check": what, "onnx_runtime": message}
        return PassError(
            f"check {what}: ONNX Runtime ran out of memory"
            + (f" at {real!r}" if real else "")
            + f" ({message.split('Status Message: ')[-1]}): the check could not run there, "
            "which says nothing of the plan; run it again with more memory free (a process "
            "memory limit, ulimit -v, counts address space, which ONNX Runtime's arena "
            "reserves beyond what it uses)",
            node=real,
            report=report,
        )
    if model is not None and decisions is not None and real:
        blamed = broken_decision(what, real, message, model, decisions)
        if blamed is not None:
            return blamed
    if real and node and real != node:
        message = f"{message} (ONNX Runtime's node {node!r} is the model's {real!r})"
    report = {"check": what, "onnx_runtime": message}
    return PassError(f"check {what}: ONNX Runtime failed: {message}", node=real, report=report)


def broken_decision(
    what: str, node: str, message: str, model: onnx.ModelProto, decisions: PlanDecisions
) -> PassError | None:
    """The plan's decision that broke where ONNX Runtime failed at ``node`` of the rewritten
    ``model``: the change on that node or the nearest upstream of it, the constants upstream
    that kept a traced size, and what to do; None where no change of the plan reaches it."""
    nodes = upstream_nodes(model.graph, [n for n in model.graph.node if n.name == node])
    found = _changes_among(decisions.changes, nodes)
    if not found:
        return None
    op = nodes[0].op_type
    reason = message.split("Status Message: ")[-1]
    text = plan_words(
        "run", what=what, op=op, node=node, rewrites=_rewrites(found, node),
        kept=_kept(model, nodes, decisions), reason=reason,
        fix=plan_fix_text(decisions.axes, _symbols(found, decisions)),
    )  # fmt: skip
    return PassError(text, node=node, report={"check": what, "onnx_runtime": message})


def wrong_values(
    error: PassError, outputs: Iterable[str], model: onnx.ModelProto, decisions: PlanDecisions
) -> PassError:
    """``error`` (outputs wrong or misshapen at some size) with the plan's changes those
    ``outputs`` depend on, named as the decisions that may have broken them."""
    names = set(outputs)
    nodes = upstream_nodes(model.graph, [n for n in model.graph.node if names & set(n.output)])
    found = _changes_among(decisions.changes, nodes)
    if not found:
        return error
    text = plan_words(
        "values", error=error.args[0], count=len(found), rewrites=_rewrites(found, None),
        kept=_kept(model, nodes, decisions),
        fix=plan_fix_text(decisions.axes, _symbols(found, decisions)),
    )  # fmt: skip
    return PassError(text, node=error.node or found[0].node, report={"check": error.args[0]})


def _changes_among(changes: Sequence[Change], nodes: list[onnx.NodeProto]) -> list[Change]:
    """The plan's changes on ``nodes`` of the main graph, in the order of ``nodes``; data
    changes (a constant regenerated: the plan's guess) before sizes at the same node."""
    place = {n.name: k for k, n in enumerate(nodes) if n.name}
    mine = [c for c in changes if not c.graph and c.node in place]
    return sorted(mine, key=lambda c: (place[c.node], c.kind != "data"))


def _rewrites(found: list[Change], node: str | None, shown: int = 2) -> str:
    """The first ``shown`` changes as a blocker says where it is: ``Op 'node' (input 't'): old
    -> new``, those on ``node`` itself said as its input; the rest counted."""
    parts = []
    for c in found[:shown]:
        where = (
            f"its input {c.input!r}" if c.node == node else f"{c.op} {c.node!r} (input {c.input!r})"
        )
        parts.append(f"{where}: {c.old} -> {c.new}")
    more = len(found) - shown
    return "; ".join(parts) + (f"; and {more} more rewrite(s) upstream" if more > 0 else "")


def _kept(model: onnx.ModelProto, nodes: list[onnx.NodeProto], decisions: PlanDecisions) -> str:
    """The nearest table upstream that kept a length equal to a traced size or a small multiple
    of one (:func:`~.indexed_tables.folded_table`), as ``; upstream, ...``; or ''."""
    found = folded_table(nodes, decisions.traced)
    if found is None:
        return ""
    tensor, array, axis, hit = found
    shape = f"{dtype_name(elem_type_of(array))}{fmt_values(list(array.shape))}"
    return plan_words(
        "kept", tensor=tensor, shape=shape, axis=axis, length=array.shape[axis], hit=hit
    )


def _symbols(found: list[Change], decisions: PlanDecisions) -> list[str]:
    """The symbols the nearest change's new values name, in the order the plan has them."""
    named = set().union(*(v.atoms() for v in found[0].values))
    return [s for s in decisions.traced if s in named] or list(decisions.traced)
