"""Sizes a trace cannot tell from fixed values, and the one case the graph settles: an offset
over a KV cache.

A count that starts at the traced size of a symbol (``arange(seq) + past``) or a band bound
that equals one (``j - i <= past``, a causal mask over a cache) looks the same as a fixed start
or a fixed window in one trace. Where the symbol is the length of a cache axis
(:func:`cache_symbols`: the graph concatenates that input with computed values), the value is
read as moving with it (``Generator.offset``) and the check against references decides; where
it is not, :func:`band_bound_gap` and :func:`offset_gap` say why the plan cannot choose.

The graph settles one more relation over a cache: a gather whose index counts the keys
(``arange(past + seq)``, HF's ``attention_mask[batch_idx, kv_idx]``) over the whole axis of an
input of another length (the mask's ``total``) reads every element of that axis, so that length
is ``past + seq`` (:func:`cache_index_relations`): the check's sizes keep it so. So does a
Slice of such an axis from 0 to the keys' length (Doge's ``mask[..., :key_len]``, traced where
the mask was exactly that long, :func:`slice_end_relations`), and a window of a fixed buffer
cut from a cache length (:func:`window_starts`)."""

from __future__ import annotations

from collections.abc import Sequence, Set
from typing import Protocol

import numpy as np

from onnxsurgery.passes.symbolize.batch_indices import addressed, index_constants
from onnxsurgery.passes.symbolize.coincident import tie
from onnxsurgery.passes.symbolize.generators import MAX_LEAD, Generator
from onnxsurgery.shapes.analysis import ConstUse, ShapeAnalysis
from onnxsurgery.shapes.dims import Dim
from onnxsurgery.shapes.solver import Solution, solve


class Change(Protocol):
    """What the relations read of a plan's change (:class:`~.reads.Change`, whose module
    imports this one)."""

    values: list[Dim]
    use: ConstUse
    rebuild: Generator | None

__all__ = [
    "band_bound_gap", "cache_index_relations", "cache_symbols", "offset_gap",
    "slice_end_relations", "window_starts",
]  # fmt: skip


def cache_symbols(a: ShapeAnalysis) -> set[str]:
    """Symbols that are the length of a cache axis: a graph input axis along which a Concat joins
    that input with values the graph computes (``present = Concat(past, new)``). Only these may
    be read as the offset of a count or a band bound, since the graph shows they are one."""
    inputs = {i.name for i in a.model.graph.input}
    ranks = {i.name: len(i.type.tensor_type.shape.dim) for i in a.model.graph.input}
    axis_sym = {(t, ax): sym for sym, places in a.symbols.items() for t, ax in places}
    found: set[str] = set()
    for node in a.model.graph.node:
        if node.op_type != "Concat" or not any(x not in inputs for x in node.input if x):
            continue
        axis = next((int(at.i) for at in node.attribute if at.name == "axis"), 0)
        for x in node.input:
            if x in inputs and ranks.get(x):
                sym = axis_sym.get((x, axis % ranks[x]))
                if sym is not None:
                    found.add(sym)
    return found


def band_bound_gap(
    a: ShapeAnalysis, gen: Generator, dims: list[Dim], cache: set[str]
) -> tuple[str, set[str]] | None:
    """A band bound inside the traced range that equals a size the symbols give at the traced
    size (``j - i <= 5`` with ``past`` traced at 5, the offset of a causal mask over a cache):
    one trace cannot tell a fixed window from a bound that moves with that size. Where the only
    size it equals is made of cache lengths (:func:`cache_symbols`), the bound is taken to move
    with it (``gen.offset``) and the check against references decides. The other bound then
    keeps its distance to the moving one (a sliding window's width stays, only its offset moves:
    :meth:`Generator.band_bounds`), so it is not read as a size of its own. The upper bound is
    tried first: a causal mask's offset over a cache is its upper bound.

    Where the key axis is the query axis plus cache lengths (``[seq, past + seq]``), query ``i``
    sits at position ``past + i`` among the keys: a mask over relative positions (causal, a
    sliding window) has every bound counted from ``past``, whatever value it has (a window's
    lower bound ``past - w + 1`` equals no size), so both bounds move with it (``shift``)."""
    if gen.kind != "band" or gen.band is None:
        return None
    i_ax, j_ax, lo, hi, _, _ = gen.band
    excess = dims[j_ax] - dims[i_ax]
    if not excess.is_const() and excess.atoms() <= cache and gen.offset is None:
        gen.offset = ("shift", excess, a.traced(excess))
        return None
    sizes = [dims[j_ax] - dims[i_ax], dims[i_ax] - dims[j_ax]]
    sizes += [Dim.sym(x) for x in sorted(dims[i_ax].atoms() | dims[j_ax].atoms())]
    for where, bound in (("hi", hi), ("lo", lo)):
        if bound is None or bound == 0 or gen.offset is not None:
            continue
        hits = [d for d in sizes if not d.is_const() and abs(bound) == abs(a.traced(d))]
        hits = [d for k, d in enumerate(hits) if not any(d in (e, -e) for e in hits[:k])]
        cached = [d for d in hits if d.atoms() <= cache]
        if hits and len(cached) == len(hits) == 1 and gen.offset is None:
            d = cached[0]
            gen.offset = (where, d if a.traced(d) == bound else -d, int(bound))
            continue
        if hits:
            d = hits[0]
            return (
                f"the band's bound j - i {'>=' if where == 'lo' else '<='} {bound} equals {d} "
                "at the traced size: one trace cannot tell a fixed window from a bound that "
                f"moves with {d}",
                d.atoms(),
            )
    return None


def _cache_lead(a: ShapeAnalysis, start: int, rows: Set[str], cache: set[str]) -> str | None:
    """The cache length a count from ``start`` moves with when ``start`` is its traced size plus
    a small fixed lead (1 .. :data:`~.generators.MAX_LEAD`: the ``padding_idx + 1`` that BART's,
    OPT's and XGLM's position tables add), where that length is the only symbol of its size; None
    where no one symbol fits. Taken as the start (the offset of the same cache count from 0),
    never as a fixed value the trace happened to hold."""
    sizes = [a.atoms[s].traced for s in a.symbols if s not in rows]
    found = [
        s
        for s in sorted(cache - set(rows))
        if 1 <= start - a.atoms[s].traced <= MAX_LEAD and sizes.count(a.atoms[s].traced) == 1
    ]
    return found[0] if len(found) == 1 else None


def offset_gap(
    a: ShapeAnalysis, gen: Generator, rows: Set[str], cache: set[str]
) -> tuple[str, set[str]] | None:
    """A count (``arange(seq) + 5``) whose start equals the traced size of a symbol that is not
    a batch (``past`` traced at 5, a position offset over a cache): one trace cannot tell a
    fixed start from one that moves with that symbol. Where that symbol is the only one of that
    size and is a cache length (:func:`cache_symbols`), the start is taken to move with it."""
    if gen.kind == "sin" and gen.shift is not None and gen.phase is None and gen.lead >= 2:
        lead = gen.lead  # a sinusoid from a fixed lead, no cache behind it: a count from it
        hits = [s for s in sorted(a.symbols) if s not in rows and a.atoms[s].traced == lead]
        if hits:
            return (
                f"its positions count from {lead}, the traced size of {hits[0]}: one trace "
                f"cannot tell a fixed start from an offset that moves with {hits[0]}",
                {hits[0]},
            )
    if gen.kind != "affine" or gen.base is None or gen.base.size == 0:
        return None
    if not any(np.any(st != 0) for st in gen.steps.values()):
        return None
    where, start = "base", gen.base.reshape(-1)[0]
    moving = [k for k, st in gen.steps.items() if np.any(st != 0)]
    if len(moving) == 1:  # positions o .. o+n-1 times a per-column step (rotary angles 5 * f)
        step = np.broadcast_to(gen.steps[moving[0]], gen.base.shape).astype(np.float64)
        base = gen.base.astype(np.float64)
        on = step != 0
        ratio = base[on] / step[on]
        if ratio.size and np.all(base[~on] == 0) and np.allclose(ratio, ratio[0], rtol=1e-5):
            r = float(np.round(ratio[0]))
            # scaled: base = start * step per column; also where every moving step is 1 but
            # columns that do not rotate hold 0 (Gemma 4's partial rotary: angles [p, 0, 0, 0,
            # p, 0, 0, 0]), which no uniform base reads (kept, its start stayed the traced past)
            if abs(r - ratio[0]) < 1e-4 and (not np.all(step[on] == 1) or not np.all(on)):
                where, start = "scaled", r
    if where == "base" and not np.all(gen.base == start):
        return None
    if abs(float(start)) < 2 or float(start) != int(start):
        return None
    hits = [s for s in sorted(a.symbols) if s not in rows and a.atoms[s].traced == abs(int(start))]
    if len(hits) == 1 and hits[0] in cache:
        d = Dim.sym(hits[0])
        gen.offset = (where, d if int(start) > 0 else -d, int(start))
        return None
    moved = _cache_lead(a, int(start), rows, cache) if not hits else None
    if moved is not None:  # past + 2: a position table offset by its padding index
        gen.offset = (where, Dim.sym(moved), a.atoms[moved].traced)
        return None
    if hits:
        sym = hits[0]
        return (
            f"it counts from {int(start)}{' steps' if where == 'scaled' else ''}, the traced size "
            f"of {sym}: one trace cannot tell a fixed start from an offset that moves with {sym}",
            {sym},
        )
    return None


def cache_index_relations(
    a: ShapeAnalysis, sol: Solution, changes: Sequence[Change], rows: Set[str], cache: set[str]
) -> dict[str, Dim]:
    """``{total: past + seq}`` where a gather reads a whole axis with a count over a cache.

    A constant index the plan rebuilds as ``Range(past + seq)`` (a count from 0 in steps of 1,
    its length a sum over a cache length, never one symbol alone) addresses a data axis sized by
    a symbol ``total`` that is not a batch, not part of the count, and traced at the count's
    length: the index reads every element of that axis, so the graph needs ``total`` to be the
    count's length (a shorter axis fails on ONNX Runtime, as it would in torch). One candidate
    only; the relation goes to the check, which then never runs ``past`` apart from ``total``.
    """
    graph = a.model.graph
    producers = {o: (i, n) for i, n in enumerate(graph.node) for o in n.output}
    by_use = {(c.use.node_index, c.use.input_index): c for c in changes if not c.use.graph}
    uses = {(c.use.node_index, c.use.input_index): c.use for c in changes if not c.use.graph}
    found: dict[str, Dim] = {}
    for index, node in enumerate(graph.node):
        if node.op_type not in ("Gather", "GatherND") or len(node.input) < 2:
            continue
        direct = [uses[(index, 1)]] if (index, 1) in uses else []
        reads = [by_use[(u.node_index, u.input_index)] for u in direct]
        reads += [
            by_use[(u.node_index, u.input_index)]
            for u in index_constants(node.input[1], producers, uses)
        ]
        for component, dim in addressed(a, sol, node):
            for change in reads:
                for count in _counts(change, component, cache):
                    free = dim.atoms() - set(rows) - count.atoms() - set(found)
                    hits = [s for s in sorted(free) if a.atoms[s].traced == a.traced(count)]
                    if len(hits) == 1 and hits[0] not in sol.relations:
                        found[hits[0]] = count
    return found


def _counts(change: Change, component: int, cache: set[str]) -> list[Dim]:
    """The lengths over a cache that ``change`` counts from 0 in steps of 1 along an axis, in
    index ``component`` (-1: the index itself)."""
    gen = change.rebuild
    if gen is None or gen.kind != "affine" or gen.base is None or gen.offset is not None:
        return []
    last = gen.base.ndim - 1
    if component >= 0 and (gen.base.ndim == 0 or gen.base.shape[last] <= component):
        return []
    pick = (lambda x: x[..., component]) if component >= 0 else (lambda x: x)
    if np.any(pick(gen.base) != 0):
        return []
    counts = []
    for k, step in gen.steps.items():
        length = change.values[k] if k < len(change.values) else None
        if length is None or length.is_const() or not length.atoms() & cache:
            continue
        if len(length.atoms()) == 1 and length == Dim.sym(min(length.atoms())):
            continue  # one symbol alone: two names for one size are the user's to give
        if component >= 0 and k == last:
            continue
        if np.all(pick(np.broadcast_to(step, gen.base.shape)) == 1):
            counts.append(length)
    return counts


def slice_end_relations(
    a: ShapeAnalysis,
    sol: Solution,
    changes: Sequence[Change],
    rows: Set[str],
    cache: set[str],
    known: Set[str] = frozenset(),
) -> dict[str, Dim]:
    """``{total: past + seq}`` where a Slice from 0 cuts an axis sized by a symbol ``total`` (not
    a batch, not in the end) to an end the plan reads as a sum over a cache length, traced at
    that axis's length: the slice took the whole axis at the trace, and the values past it
    (``mask[..., :key_len]`` over keys ``past + seq``) are read against the keys downstream, so
    a shorter axis fails on ONNX Runtime where torch would fail too. The check then never runs
    ``total`` apart from the keys (Doge by TorchScript ran ``total`` 8 against 9 keys and called
    the plan wrong). ``known``: symbols already related, left alone."""
    found: dict[str, Dim] = {}
    graph = a.model.graph
    for change in changes:
        use = change.use
        if use.graph or use.op != "Slice" or use.input_index != 2 or len(change.values) != 1:
            continue
        end = change.values[0]
        if end.is_const() or not end.atoms() & cache or end.is_atom():
            continue
        node = graph.node[use.node_index]
        starts = a.const(node.input[1])
        if starts is None or np.any(np.asarray(starts) != 0) or np.asarray(starts).size != 1:
            continue
        steps = a.const(node.input[4]) if len(node.input) > 4 and node.input[4] else None
        if steps is not None and np.any(np.asarray(steps) != 1):
            continue
        axes = a.const(node.input[3]) if len(node.input) > 3 and node.input[3] else None
        data = a.tensors.get(node.input[0])
        if data is None or data.shape is None:
            continue
        axis = int(np.asarray(axes).reshape(-1)[0]) if axes is not None else 0
        dim = sol.resolve(data.shape[axis % len(data.shape)])
        free = dim.atoms() - set(rows) - end.atoms() - set(found) - set(known)
        hits = [x for x in sorted(free) if x in a.symbols and a.atoms[x].traced == a.traced(end)]
        if len(hits) == 1 and dim == Dim.sym(hits[0]) and hits[0] not in sol.relations:
            found[hits[0]] = end
    return found



def window_starts(a: ShapeAnalysis, sol: Solution) -> dict[str, Dim]:
    """Slice starts the solver kept at the traced length of a cache, read as that length where
    the window's length moves: the start is in a conflict, or the window's end follows a symbol.

    GPT-Neo cuts its causal buffer ``bias[:, :, key_length - query_length : key_length]``, the
    rows of the new positions; dynamo folds the bounds to 5 and 8 (past 5, seq 3), and the
    window's length must be ``seq`` downstream. A start fixed at 5 (the end then ``5 + seq``),
    one at ``past`` and one at ``batch + seq`` all make that hold: a conflict the graph cannot
    read one way (:func:`~.conflict_readings.conflict_readings` takes none), and once one
    layer's is read, the next layer's window holds with its start kept at 5 (wrong at any other
    ``past``, and no check without torch would see it). The positions a cache's new tokens read
    start at its length, as a count from it does (:func:`offset_gap`), so such a start is read
    as moving with the one cache length traced at its value (:func:`cache_symbols`), and the
    check against references decides. Each tie is probed: taken only where it adds no
    conflict. The ties are appended to ``a``."""
    cache = cache_symbols(a)
    if not cache:
        return {}
    ends = {
        u.node_index: u.atoms
        for u in a.uses
        if not u.graph and u.op == "Slice" and u.input_index == 2 and u.kind == "size"
    }
    found: dict[str, Dim] = {}
    current = sol
    for use in a.uses:
        if use.graph or use.op != "Slice" or use.input_index != 1 or use.kind != "size":
            continue
        for element, atom in enumerate(use.atoms):
            if atom is None or current.how.get(atom) != "kept":
                continue
            traced = a.atoms[atom].traced
            hits = [s for s in sorted(cache) if a.atoms[s].traced == traced]
            if traced < 1 or len(hits) != 1:
                continue
            near = {x for k in current.conflicts for x in k.constraint.expr.atoms()}
            ends_here = ends.get(use.node_index, [])
            end = ends_here[element] if element < len(ends_here) else None
            moving = end is not None and not current.resolve(Dim.sym(end)).is_const()
            if atom not in near and not moving:
                continue
            before = {id(k.constraint) for k in current.conflicts}
            c = tie(a, atom, Dim.sym(hits[0]), use.node, use.op, f"a window from {hits[0]}")
            probe = solve(a)
            now = {id(k.constraint) for k in probe.conflicts}
            if now <= before and (now < before or atom not in near):
                found[atom] = Dim.sym(hits[0])
                current = probe
            else:
                a.constraints.remove(c)
    return found
