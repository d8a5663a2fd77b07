"""Blockers the analysis shows as a whole rather than at one constant: shape constraints that
hold only at the traced size (the solver's conflicts, :func:`conflict_blockers`), and loops
Python ran at trace time, one slice per index or a chain of identical appends along a symbolic
axis (:func:`unrolled_loops`). :func:`~onnxsurgery.passes.symbolize.plan.plan_symbolize` adds
them to the blockers it finds at constants."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import onnx

from onnxsurgery.passes.symbolize.blockers import Blocker
from onnxsurgery.passes.symbolize.wording import (
    fix_text,
    fixed_text,
    sym_tuple,
    symbol_hint,
    why_text,
)
from onnxsurgery.shapes.analysis import ShapeAnalysis
from onnxsurgery.shapes.dims import Dim
from onnxsurgery.shapes.solver import Solution

__all__ = ["conflict_blockers", "unrolled_loops"]


def conflict_blockers(plan_a: ShapeAnalysis, sol: Solution) -> list[Blocker]:
    blockers = []
    traced = plan_a.traced_values()
    for conflict in sol.conflicts:
        c = conflict.constraint
        lhs = sol.resolve(c.lhs) if c.lhs is not None else conflict.residual
        rhs = sol.resolve(c.rhs) if c.rhs is not None else Dim.const(0)
        lhs, rhs = _cancel(lhs, rhs)
        atoms = lhs.atoms() | rhs.atoms()
        syms = symbol_hint(plan_a.symbols, atoms)
        try:
            tv = f"{lhs} = {lhs.evaluate(traced)}, {rhs} = {rhs.evaluate(traced)}"
        except KeyError:
            tv = f"{lhs}, {rhs}"
        pair = {str(lhs), str(rhs)}
        twins = pair <= set(plan_a.symbols) and len(pair) == 2
        if twins:  # one order, so "seq == tgt" and "tgt == seq" are one kind of blocker
            lhs, rhs = sorted((lhs, rhs), key=str)
        why = why_text("traced-size-constraint", why=c.why, lhs=_pretty(lhs), rhs=_pretty(rhs))
        if twins:
            x, y = sorted(pair)
            if plan_a.atoms[x].traced == plan_a.atoms[y].traced:
                why += why_text("shared-tensor", traced=plan_a.atoms[x].traced)
        fixed = _fixed_size(lhs, rhs, plan_a)
        fix = fix_text(plan_a, syms) if fixed is None else fixed_text(plan_a, syms, fixed)
        kind = "traced-size-constraint" if fixed is None else "size-baked-into-weight"
        blockers.append(Blocker(c.node, c.op, None, tv, why, fix, sym_tuple(syms), kind))
    return blockers


def _fixed_size(lhs: Dim, rhs: Dim, plan_a: ShapeAnalysis) -> int | None:
    """The size the model pins an input axis to, where a constraint reads ``symbol == N`` (a
    weight's channels, a Gemm's features: no export makes that vary); else None."""
    for sym, const in ((lhs, rhs), (rhs, lhs)):
        if const.is_const() and len(sym.atoms()) == 1 and str(sym) in plan_a.symbols:
            return const.value
    return None


def _cancel(lhs: Dim, rhs: Dim) -> tuple[Dim, Dim]:
    """Divide both sides by their common monomial factor: ``batch*12 == batch*seq*3`` is
    ``4 == seq``, which names the symbol that cannot vary."""
    if not (lhs.is_monomial() and rhs.is_monomial()) or lhs.value == 0 or rhs.value == 0:
        return lhs, rhs
    ((lm, lc),) = lhs.terms.items()
    ((rm, rc),) = rhs.terms.items()
    common = list(lm)
    shared = []
    for atom in rm:
        if atom in common:
            common.remove(atom)
            shared.append(atom)
    g = math.gcd(lc, rc)
    factor = Dim({tuple(shared): g})
    a, b = lhs.exact_div(factor), rhs.exact_div(factor)
    return (a, b) if a is not None and b is not None else (lhs, rhs)


def _pretty(d: Dim) -> str:
    text = str(d)
    return text.replace("$", "?")


def unrolled_loops(a: ShapeAnalysis, sol: Solution) -> list[Blocker]:
    """Loops Python ran at trace time: one slice per index of a symbolic axis, or a chain of
    identical appends along a symbolic axis."""
    graph = a.model.graph
    consumers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            if name:
                consumers[name].append(node)
    blockers: list[Blocker] = []
    for tensor, nodes in consumers.items():
        info = a.tensors.get(tensor)
        if info is None or info.shape is None:
            continue
        shape = [sol.resolve(d) for d in info.shape]
        picks: dict[int, set[int]] = defaultdict(set)
        first: dict[int, onnx.NodeProto] = {}
        for node in nodes:
            hit = _single_index(a, node, tensor, len(shape))
            if hit is not None:
                picks[hit[0]].add(hit[1])
                first.setdefault(hit[0], node)
        for axis, idx in picks.items():
            d = shape[axis]
            syms = {x for x in d.atoms() if x in a.symbols}
            n = a.traced(d)
            if syms and n >= 2 and set(range(n)) <= {i % n for i in idx}:
                node = first[axis]
                blockers.append(
                    Blocker(
                        node.name,
                        node.op_type,
                        tensor,
                        f"{d} = {n}",
                        why_text("unrolled-slices", count=n, axis=axis, dim=d, tensor=tensor),
                        fix_text(a, ", ".join(sorted(syms))),
                        tuple(sorted(syms)),
                        "unrolled-loop",
                    )
                )
    blockers.extend(_append_chains(a, sol))
    return blockers


def _single_index(
    a: ShapeAnalysis, node: onnx.NodeProto, tensor: str, rank: int
) -> tuple[int, int] | None:
    if not node.input or node.input[0] != tensor:
        return None
    attrs = {x.name: onnx.helper.get_attribute_value(x) for x in node.attribute}
    if node.op_type == "Gather" and len(node.input) > 1:
        idx = a.consts.get(node.input[1])
        if idx is None or idx.size != 1:
            return None
        axis = attrs.get("axis", 0)
        return (axis + rank if axis < 0 else axis, int(idx.reshape(-1)[0]))
    if node.op_type == "Slice" and len(node.input) >= 3:
        st, en = a.consts.get(node.input[1]), a.consts.get(node.input[2])
        axes = a.consts.get(node.input[3]) if len(node.input) > 3 and node.input[3] else None
        if st is None or en is None or st.size != 1 or en.size != 1:
            return None
        s, e = int(st.reshape(-1)[0]), int(en.reshape(-1)[0])
        if e - s != 1 or s < 0:
            return None
        axis = int(axes.reshape(-1)[0]) if axes is not None and axes.size == 1 else 0
        return (axis + rank if axis < 0 else axis, s)
    return None


def _append_chains(a: ShapeAnalysis, sol: Solution) -> list[Blocker]:
    graph = a.model.graph
    produced: dict[str, onnx.NodeProto] = {o: n for n in graph.node for o in n.output}
    blockers = []
    seen: set[str] = set()
    for node in reversed(graph.node):
        if node.op_type != "Concat" or len(node.input) != 2 or node.output[0] in seen:
            continue
        chain = [node]
        cur = node
        while True:
            prev = produced.get(cur.input[0])
            if prev is None or not _same_append(a, prev, cur):
                break
            chain.append(prev)
            cur = prev
        for n in chain:
            seen.add(n.output[0])
        if len(chain) < 2:
            continue
        info = a.tensors.get(node.output[0])
        if info is None or info.shape is None:
            continue
        axis = onnx.helper.get_attribute_value(next(x for x in node.attribute if x.name == "axis"))
        axis = axis + len(info.shape) if axis < 0 else axis
        d = sol.resolve(info.shape[axis])
        syms = {x for x in d.atoms() if x in a.symbols}
        if not syms:
            continue
        first = chain[-1]
        blockers.append(
            Blocker(
                first.name,
                "Concat",
                first.input[1],
                f"{len(chain)} copies",
                why_text("unrolled-appends", count=len(chain), axis=axis, dim=d),
                fix_text(a, ", ".join(sorted(syms))),
                symbols=sym_tuple(", ".join(sorted(syms))),
                kind="unrolled-loop",
            )
        )
    return blockers


def _same_append(a: ShapeAnalysis, prev: onnx.NodeProto, cur: onnx.NodeProto) -> bool:
    if prev.op_type != "Concat" or len(prev.input) != 2:
        return False
    if [x.SerializeToString() for x in prev.attribute] != [
        x.SerializeToString() for x in cur.attribute
    ]:
        return False
    if prev.input[1] == cur.input[1]:
        return True
    x, y = a.consts.get(prev.input[1]), a.consts.get(cur.input[1])
    return x is not None and y is not None and x.shape == y.shape and np.array_equal(x, y)
