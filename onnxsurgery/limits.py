"""Resource limits: what a hostile or broken model may cost before onnxsurgery refuses it.

Each limit has a default that no real exported model comes near, is named in the message of the
error it raises, and can be changed: ``--limit NAME=VALUE`` on the command line,
``Pipeline(limits={...})`` / ``onnxsurgery.run(..., limits={...})`` in Python, or
:func:`use_limits` around any other call.

    max_elements        elements of one tensor whose size is known before anything runs
                        (Range, ConstantOfShape, Expand with constant inputs)
    max_loop_trips      trip count of a Loop whose only exit is that count
    max_dim_terms       terms of one symbolic size in symbolize's shape algebra
    propagate_seconds   symbolize's shape propagation over the graph
    run_seconds         one ONNX Runtime run on a model being repaired or validated

:func:`check_sizes` is the static guard the loader and the pipeline apply to every model before
shape inference or ONNX Runtime could allocate what it describes.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

import onnx
from onnx import numpy_helper

from onnxsurgery.errors import LimitExceeded, UsageError
from onnxsurgery.model.walk import subgraphs

__all__ = ["Limits", "current", "use_limits", "parse_limit", "check_sizes", "LimitExceeded"]


@dataclass(frozen=True)
class Limits:
    max_elements: int = 2**31
    max_loop_trips: int = 10**7
    max_dim_terms: int = 256
    propagate_seconds: float = 20.0
    run_seconds: float = 60.0

    def hint(self, name: str) -> str:
        return f"the limit {name}={getattr(self, name)}; raise it with --limit {name}=N"

    def updated(self, values: Mapping[str, Any] | None) -> Limits:
        if not values:
            return self
        known = {f.name: f.type for f in fields(self)}
        changes: dict[str, Any] = {}
        for key, value in values.items():
            if key not in known:
                raise UsageError(f"unknown limit {key!r}; limits: {', '.join(known)}")
            kind = float if key.endswith("seconds") else int
            try:
                number = kind(value)
            except (TypeError, ValueError, OverflowError):
                raise UsageError(f"limit {key} must be a number, got {str(value)[:40]!r}") from None
            if not (isinstance(number, int) or math.isfinite(number)) or number <= 0:
                raise UsageError(f"limit {key} must be a positive number, got {str(value)[:40]!r}")
            changes[key] = number
        return replace(self, **changes)


_current = [Limits()]


def current() -> Limits:
    """The limits in force."""
    return _current[-1]


@contextlib.contextmanager
def use_limits(limits: Limits | Mapping[str, Any] | None) -> Iterator[Limits]:
    """Run a block under other limits (a Limits, or a mapping of the ones to change)."""
    chosen = limits if isinstance(limits, Limits) else current().updated(limits)
    _current.append(chosen)
    try:
        yield chosen
    finally:
        _current.pop()


def parse_limit(text: str) -> tuple[str, str]:
    """``"run_seconds=30"`` -> ``("run_seconds", "30")`` (checked by :meth:`Limits.updated`)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip() or not value.strip():
        raise UsageError(f"--limit expects NAME=VALUE, got {text[:60]!r}")
    return key.strip(), value.strip()


def _constants(graph: onnx.GraphProto, outer: Mapping[str, onnx.TensorProto]) -> dict[str, Any]:
    found: dict[str, Any] = dict(outer)
    for t in graph.initializer:
        found[t.name] = t
    for node in graph.node:
        if node.op_type == "Constant" and node.output and len(node.attribute) == 1:
            if node.attribute[0].name == "value":
                found[node.output[0]] = node.attribute[0].t
    return found


def _small_value(consts: Mapping[str, onnx.TensorProto], name: str) -> Any:
    tensor = consts.get(name)
    if tensor is None or math.prod(tensor.dims) > 64 or tensor.data_location == onnx.TensorProto.EXTERNAL:
        return None
    try:
        return numpy_helper.to_array(tensor)
    except Exception:  # an unreadable constant is the checker's business, not this guard's
        return None


def _static_count(node: onnx.NodeProto, consts: Mapping[str, onnx.TensorProto]) -> int | None:
    """Elements ``node`` outputs when its size comes from constants alone."""
    if node.op_type == "Range" and len(node.input) == 3:
        start, limit, delta = (_small_value(consts, n) for n in node.input)
        if start is None or limit is None or delta is None:
            return None
        if start.size != 1 or limit.size != 1 or delta.size != 1:
            return None
        s, lim, d = (float(v.reshape(-1)[0]) for v in (start, limit, delta))
        if d == 0 or not all(map(math.isfinite, (s, lim, d))):
            return None
        return max(0, math.ceil((lim - s) / d))
    if node.op_type in ("ConstantOfShape", "Expand"):
        shape = _small_value(consts, node.input[1] if node.op_type == "Expand" else node.input[0])
        if shape is None or shape.ndim != 1:
            return None
        return math.prod(max(int(v), 1) for v in shape.tolist())
    return None


def _loop_trips(node: onnx.NodeProto, consts: Mapping[str, onnx.TensorProto]) -> int | None:
    """A Loop's constant trip count when nothing else can end it (its condition is absent or a
    constant true, and the body passes it through unchanged)."""
    if node.op_type != "Loop" or not node.input or not node.input[0]:
        return None
    count = _small_value(consts, node.input[0])
    if count is None or count.size != 1:
        return None
    if len(node.input) > 1 and node.input[1]:
        cond = _small_value(consts, node.input[1])
        if cond is None or not bool(cond.reshape(-1)[0]):
            return None
    body = next((a.g for a in node.attribute if a.name == "body"), None)
    if body is None or len(body.input) < 2 or not body.output:
        return None
    cond_in, cond_out = body.input[1].name, body.output[0].name
    if cond_out != cond_in:
        producer = next((n for n in body.node if cond_out in n.output), None)
        if producer is None or producer.op_type != "Identity" or list(producer.input) != [cond_in]:
            return None
    return int(count.reshape(-1)[0])


def check_sizes(model: onnx.ModelProto, limits: Limits | None = None) -> None:
    """Raise LimitExceeded when a node's output size or a Loop's trip count, known from
    constants alone, is over the limits: before shape inference's data propagation or ONNX
    Runtime would try to build it."""
    limits = limits or current()

    def visit(graph: onnx.GraphProto, outer: Mapping[str, onnx.TensorProto]) -> None:
        consts = _constants(graph, outer)
        for node in graph.node:
            count = _static_count(node, consts)
            label = f"{node.op_type} node {node.name!r}" if node.name else f"an unnamed {node.op_type} node"
            if count is not None and count > limits.max_elements:
                raise LimitExceeded(
                    f"{label} would make a tensor of {count} elements, over {limits.hint('max_elements')}"
                )
            trips = _loop_trips(node, consts)
            if trips is not None and trips > limits.max_loop_trips:
                raise LimitExceeded(
                    f"{label} runs {trips} iterations with no other exit, over {limits.hint('max_loop_trips')}"
                )
            for sub in subgraphs(node):
                visit(sub, consts)

    visit(model.graph, {})
