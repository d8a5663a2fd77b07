"""Conflicts read the other way: kept sizes that must follow a symbol, or a constant's one row.

A conflict (an equality that holds only at the traced size) may come from such a kept size
read the wrong way: :func:`conflict_readings` ties the kept sizes near it to the one reading
that makes it hold (a 16 that must be ``batch*tgt``, not ``batch*seq``), and only where one
reading alone does; :func:`broadcast_readings` reads a constant's repeated rows as its one row
where it broadcasts against two symbols traced alike (a mask shared by encoder and decoder).

Both probe a reading by solving the graph again with it tied (:func:`~.coincident.tie`); a
reading is taken only where it alone removes the conflict and adds none.
"""

from __future__ import annotations

import itertools
from collections.abc import Set

import numpy as np

from onnxsurgery.passes.symbolize.coincident import expressions, tie
from onnxsurgery.shapes.analysis import Constraint, ShapeAnalysis
from onnxsurgery.shapes.dims import Dim
from onnxsurgery.shapes.solver import Solution, solve

__all__ = ["broadcast_readings", "conflict_readings"]

#: At most this many joint readings are listed for one conflict, and at most this many probes
#: (each one solves the graph again) are spent on the readings of all conflicts together.
_MAX_READINGS = 256
_MAX_PROBES = 64


def _conflict_atoms(a: ShapeAnalysis, sol: Solution, c: Constraint) -> list[str]:
    """The sizes the solver kept at their traced value (nothing forced them) in ``c``, or in a
    hard constraint that decided one of ``c``'s other unknowns (a Reshape's -1 dim, worked out
    from the element count of what it reshapes); only those a symbol expression fits."""
    unknown = ("var", "data", "derived")
    near = {x for x in c.expr.atoms() if a.atoms[x].kind in unknown}
    decided = {x for x in near if sol.how.get(x) != "kept"}
    for k in a.constraints:
        if not k.soft and k is not c and k.expr.atoms() & decided:
            near |= {x for x in k.expr.atoms() if a.atoms[x].kind in unknown}
    kept = (x for x in near if a.atoms[x].kind != "derived" and sol.how.get(x) == "kept")
    return sorted(x for x in kept if expressions(a, a.atoms[x].traced))


def _resolves(
    a: ShapeAnalysis,
    ties: dict[str, Dim],
    c: Constraint,
    before: set[int],
    rows: tuple[Set[str], set[str]],
) -> bool:
    """Whether tying every atom of ``ties`` at once removes ``c`` from the conflicts (``before``:
    their constraints' ids), adds none, and gives no index dims but those already so (``rows``:
    the batches, and those dims) a batch the axis they index does not carry
    (:func:`_batch_indexed`)."""
    batches, already = rows
    for atom, value in ties.items():
        tie(a, atom, value, "", "", "probe")
    try:
        probe = solve(a)
        now = {id(k.constraint) for k in probe.conflicts}
        grown = _batch_indexed(a, probe, batches) - already if batches else set()
        return id(c) not in now and now < before and not grown
    finally:
        del a.constraints[-len(ties) :]


def _batch_indexed(a: ShapeAnalysis, sol: Solution, rows: Set[str]) -> set[str]:
    """The dims of Gathers' constant indices whose length holds a batch of ``rows`` that the
    axis they index does not hold. Indices into an axis that is no batch's pick rows of a
    table the batch does not size (a position table, an unfold's window offsets), so their
    count is no count of the batch's rows: following the batch, the indices would grow with
    it where no row of theirs belongs to a row of the batch. Traced at batch 1, XGLM's
    position table gathered by [2..9] and viewed as [1, 8, 32] read its 1 as the batch (the
    8 indices then batch*seq long) as readily as its 8 as seq; ConvBERT's unfold gathers its
    window's one column with a [1, 1] table of 0, whose 1s read as the batch too."""
    found: set[str] = set()
    for use in a.uses:
        if use.op != "Gather" or use.input_index != 1 or use.kind != "data" or use.graph:
            continue
        node = a.model.graph.node[use.node_index]
        data = a.tensors.get(node.input[0])
        if data is None or data.shape is None:
            continue
        axis = next((x.i for x in node.attribute if x.name == "axis"), 0)
        if not -len(data.shape) <= axis < len(data.shape):
            continue
        indexed = sol.resolve(data.shape[axis]).atoms()
        found |= {
            atom
            for atom in use.atoms
            if atom is not None and (sol.resolve(Dim.sym(atom)).atoms() & set(rows)) - indexed
        }
    return found


def conflict_readings(
    a: ShapeAnalysis, sol: Solution, rows: Set[str] = frozenset()
) -> dict[str, Dim]:
    """Kept sizes read as symbol expressions where that is the one reading that makes a conflict
    hold at every size: a constant 16 in a Reshape that must keep ``batch*tgt`` elements,
    traced at batch 2 and tgt 8, is ``batch*tgt``, its 8 is ``tgt`` (not ``seq``, traced at 8
    too, which would leave the element count wrong at other sizes). Every combination of the
    kept sizes in the conflict (each fixed or one expression its traced value fits) is tried;
    only the fewest ties that remove the conflict are taken, and only when one combination
    alone does (two that both do are two readings the graph cannot tell apart: the conflict
    stays); a reading that makes an index table grow with a batch of ``rows`` its indexed axis
    does not carry is none (:func:`_batch_indexed`). Each try solves the graph again: at most
    :data:`_MAX_PROBES` in all, after which nothing more is read. The ties are appended to ``a``."""
    ties: dict[str, Dim] = {}
    budget = [_MAX_PROBES]
    current = sol
    for conflict in sol.conflicts:
        c = conflict.constraint
        if all(k.constraint is not c for k in current.conflicts):
            continue  # an earlier reading settled it
        found = _readings(a, current, c, budget, rows)
        if len(found) == 1:
            for atom, value in found[0].items():
                tie(a, atom, value, c.node, c.op, "the one reading that holds at every size")
            ties.update(found[0])
            current = solve(a)
    return ties


def _readings(
    a: ShapeAnalysis, sol: Solution, c: Constraint, budget: list[int], rows: Set[str]
) -> list[dict[str, Dim]]:
    """The fewest ties of ``c``'s kept sizes that remove it (:func:`conflict_readings`); none
    where there are too many combinations or the probes run out before the search ends."""
    atoms = _conflict_atoms(a, sol, c)
    options = [[None, *expressions(a, a.atoms[x].traced)] for x in atoms]
    combos = list(itertools.islice(itertools.product(*options), _MAX_READINGS + 1))
    if not atoms or len(combos) > _MAX_READINGS:
        return []
    found: list[dict[str, Dim]] = []
    already = _batch_indexed(a, sol, rows) if rows else set()
    for combo in sorted(combos, key=lambda t: sum(v is not None for v in t))[1:]:
        pick = {x: v for x, v in zip(atoms, combo, strict=True) if v is not None}
        if found and len(pick) > len(found[0]):
            break
        if budget[0] <= 0:
            return []
        budget[0] -= 1
        if _resolves(a, pick, c, {id(k.constraint) for k in sol.conflicts}, (rows, already)):
            found.append(pick)
    return found


def _uniform_dims(a: ShapeAnalysis) -> list[str]:
    """Dims of data constants whose values repeat along them (a mask that is all True along
    the query axis), traced above 1: a broadcast of one row, which size 1 holds as well."""
    found = []
    for use in a.uses:
        arr = use.array
        if use.kind != "data" or use.graph or arr.ndim != len(use.atoms):
            continue
        for k, atom in enumerate(use.atoms):
            if atom is not None and arr.shape[k] > 1 and np.array_equal(
                arr, np.broadcast_to(np.take(arr, [0], axis=k), arr.shape)
            ):
                found.append(atom)
    return found


def _in_outputs(a: ShapeAnalysis, sol: Solution, atom: str) -> bool:
    """Whether a graph output's shape holds ``atom``: there a 1 would change what it returns."""
    for out in a.model.graph.output:
        info = a.tensors.get(out.name)
        if info is None or info.shape is None:
            return True
        if any(atom in d.atoms() or atom in sol.resolve(d).atoms() for d in info.shape):
            return True
    return False


def broadcast_readings(a: ShapeAnalysis, sol: Solution) -> list[str]:
    """Dims of repeated rows read as 1 where that alone makes conflicts hold at every size.

    dynamo shares one encoder mask between the encoder's self-attention and the decoder's
    cross-attention when ``seq`` and ``tgt`` are traced alike: a constant all True along the
    query axis, 8 long, broadcast against ``seq`` in one and ``tgt`` in the other, which no
    symbol fits both of. Its values repeat along that axis, so one row broadcasts to the same
    values wherever the graph broadcasts it: read as 1 (the broadcasts that met it are
    dropped, their other side free again), where that leaves fewer conflicts and no new one,
    and no output carries the dim. The analysis is edited in place; the atoms read as 1 are
    returned."""
    done: list[str] = []
    for atom in _uniform_dims(a)[:_MAX_PROBES]:
        if not sol.conflicts:
            break
        met = [c for c in a.constraints if c.broadcast and atom in c.expr.atoms()]
        if len(met) < 2 or _in_outputs(a, sol, atom):
            continue
        before = {id(k.constraint) for k in sol.conflicts}
        kept = [c for c in a.constraints if not (c.broadcast and atom in c.expr.atoms())]
        saved, traced = a.constraints, a.atoms[atom].traced
        a.constraints, a.atoms[atom].traced = kept, 1  # the row the graph broadcasts
        tie(a, atom, Dim.const(1), met[0].node, met[0].op, "one row broadcast")
        now = solve(a)
        if len(now.conflicts) < len(before) and {id(k.constraint) for k in now.conflicts} <= before:
            sol, done = now, [*done, atom]
        else:
            a.constraints, a.atoms[atom].traced = saved, traced
    return done
