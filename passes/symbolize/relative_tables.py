"""Sinusoidal tables over relative positions, folded at the traced length.

A relative-position attention (ESPnet's and wav2vec2-conformer's ``RelPositionalEncoding``,
Transformer-XL's ``pos_seq = arange(T - 1, -1, -1)``, XLNet's ``arange(T, -T, -1)``) builds a
sinusoid over the distances ``j - i`` and reads it through a shift (pad, reshape, slice) that
keeps the diagonals. A static export folds the table at the traced length: rows for the
distances ``T-1 .. -(T-1)`` (``2T - 1`` rows), ``T-1 .. 0`` (``T``) or ``T .. -(T-1)`` (``2T``).
Nothing downstream fixes that length: the shift runs on a table of any length and the final
slice to ``T`` columns is read as following ``T``. Kept as traced, the model runs at every
length and gives wrong values at each but the traced one (wav2vec2-conformer: 3.5e-3 of the
output's scale at 3 frames, traced at 4).

The values decide it. The table is a sinusoid (:func:`~.trig_tables.sinusoid`) whose
distance 0 sits at row ``c``, not at row 0 (an absolute table starts there): distances run
from ``c`` down (or up) through 0. Where the table's length and ``c`` fit one of the forms above
for a size ``E`` the graph computes near the table (the frame count its attention runs over,
traced at ``c + 1`` or ``c``) and tying its length to that form breaks no constraint, the
length follows ``E`` and the table is rebuilt at run time from distances
``start .. start + length - 1``, ``start = -c`` in terms of ``E`` (:class:`RelativeTable`).

    Constant [1, 7, 32] (distances 3 .. -3, traced at 4 frames)
        -> Sin((Range(2*frames - 1) + 1 - frames) * freq + phase)
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass

import numpy as np

from onnxsurgery.passes.symbolize.coincident import fits, tie
from onnxsurgery.passes.symbolize.trig_tables import sinusoid
from onnxsurgery.shapes.analysis import ConstUse, ShapeAnalysis
from onnxsurgery.shapes.dims import Dim
from onnxsurgery.shapes.solver import Solution, solve

__all__ = ["RelativeTable", "relative_tables"]

#: the largest table looked at (elements): a relative table is a few rows of the model's width
MAX_ELEMENTS = 1 << 20
#: ops that pick rows of their data by index: a table read so keeps its length
_INDEXED = ("Gather", "GatherElements", "GatherND")
#: how far downstream of the table (nodes, breadth first) the size it follows is looked for
REACH = 64


@dataclass
class RelativeTable:
    """Axis ``axis`` of ``use`` (its unknown ``atom``) follows ``length``; row ``i`` holds the
    distance ``start + i`` (``start`` traced at ``traced_start``)."""

    use: ConstUse
    axis: int
    atom: str
    length: Dim
    start: Dim
    traced_start: int


def _centers(arr: np.ndarray, axis: int) -> list[int]:
    """Rows past the first where every value is 0 or the table's amplitude (sin 0 and cos 0):
    where distance 0 may sit."""
    x = np.moveaxis(arr, axis, 0).reshape(arr.shape[axis], -1).astype(np.float64)
    amp = float(np.max(np.abs(x))) if x.size else 0.0
    if amp == 0.0:
        return []
    tol = 1e-5 * amp
    zero = np.abs(x) <= tol
    peak = np.abs(np.abs(x) - amp) <= tol
    rows = np.all(zero | peak, axis=1) & np.any(zero, axis=1) & np.any(peak, axis=1)
    return [int(r) for r in np.flatnonzero(rows) if r >= 1]


def _forms(n: int, c: int) -> list[tuple[int, object]]:
    """(traced E, (length, start) as functions of E) for a table of ``n`` rows whose distance 0
    sits at row ``c``: ``2E-1`` rows from ``E-1`` (symmetric), ``2E`` from ``E``, ``E`` from
    ``E-1`` (Transformer-XL's one side)."""
    forms: list[tuple[int, object]] = []
    if n == 2 * c + 1:
        forms.append((c + 1, lambda e: (e * 2 - 1, 1 - e)))
    if n == 2 * c:
        forms.append((c, lambda e: (e * 2, -e)))
    if n == c + 1:
        forms.append((n, lambda e: (e, 1 - e)))
    return forms


def _nearby_sizes(a: ShapeAnalysis, sol: Solution, use: ConstUse, rows: Set[str]) -> list[Dim]:
    """The symbolic sizes of the tensors downstream of ``use``'s reader, nearest first (not a
    batch's alone)."""
    if use.graph:
        return []
    consumers: dict[str, list[int]] = {}
    nodes = a.model.graph.node
    for i, n in enumerate(nodes):
        for x in n.input:
            consumers.setdefault(x, []).append(i)
    found: list[Dim] = []
    frontier, seen = [use.node_index], {use.node_index}
    while frontier and len(seen) <= REACH:
        i = frontier.pop(0)
        for out in nodes[i].output:
            info = a.tensors.get(out)
            for d in info.shape if info is not None and info.shape else []:
                r = sol.resolve(d)
                if not r.is_const() and not r.atoms() <= set(rows) and r not in found:
                    found.append(r)
            for j in consumers.get(out, []):
                if j not in seen:
                    seen.add(j)
                    frontier.append(j)
    return found


def relative_tables(
    a: ShapeAnalysis, sol: Solution, rows: Set[str]
) -> tuple[list[RelativeTable], int]:
    """Every relative sinusoid kept at its traced length (module docstring), its length tied
    in ``a`` to the size it follows, and every window sliced from a longer one around its
    distance 0 (:func:`_windows`), its bounds tied: (the tables, how many windows). The
    caller solves again where either is any."""
    found: list[RelativeTable] = []
    conflicts = len(sol.conflicts)
    windows = _windows(a, sol, rows, conflicts)
    for use in a.uses:
        arr = use.array
        if use.kind != "data" or arr.dtype.kind != "f" or not 0 < arr.size <= MAX_ELEMENTS:
            continue
        if use.op in _INDEXED:
            continue  # rows picked by indices (a clipped distance): a fixed table's own length
        for axis, atom in enumerate(use.atoms):
            n = arr.shape[axis]
            if atom is None or n < 3 or sol.how.get(atom) != "kept":
                continue
            table = _reading(a, sol, use, axis, atom, rows, conflicts)
            if table is not None:
                tie(a, atom, table.length, use.node, use.op, "a relative-position table's length")
                found.append(table)
                break
    return found, windows


def _reading(
    a: ShapeAnalysis,
    sol: Solution,
    use: ConstUse,
    axis: int,
    atom: str,
    rows: Set[str],
    conflicts: int,
) -> RelativeTable | None:
    arr, n = use.array, use.array.shape[axis]
    sizes: list[Dim] | None = None
    for c in _centers(arr, axis):
        gen = sinusoid(arr, [axis], start=-c)
        if gen is None or gen.lead != 0:
            continue
        for traced, form in _forms(n, c):
            if sizes is None:
                sizes = _nearby_sizes(a, sol, use, rows)
            for e in sizes:
                if a.traced(e) != traced:
                    continue
                length, start = form(e)  # type: ignore[operator]
                if fits(a, atom, length, conflicts):
                    return RelativeTable(use, axis, atom, length, start, -c)
    return None


def _windows(a: ShapeAnalysis, sol: Solution, rows: Set[str], conflicts: int) -> int:
    """A Slice of a whole relative sinusoid held in the file (dynamo keeps the buffer, ``pe``
    of ``2 * max_len - 1`` rows, and slices ``pe[:, C - T + 1 : C + T]`` around its distance 0
    at row ``C``): both bounds kept at their traced values keep the window at the traced
    length. Where the window is symmetric about ``C`` (``c`` rows either side, or ``c`` before
    and ``c - 1`` after) and a size ``E`` near it was traced at ``c + 1`` (or ``c``), the
    bounds are tied to ``C + 1 - E .. C + E`` (``C - E .. C + E``). How many were tied."""
    tied = 0
    nodes = a.model.graph.node
    by_node: dict[int, dict[int, ConstUse]] = {}
    for use in a.uses:
        if use.op == "Slice" and not use.graph and use.kind == "size" and use.input_index in (1, 2):
            by_node.setdefault(use.node_index, {})[use.input_index] = use
    for index, bounds in by_node.items():
        if len(bounds) != 2 or any(
            len(u.atoms) != 1 or u.atoms[0] is None for u in bounds.values()
        ):
            continue
        starts, ends = bounds[1], bounds[2]
        s_atom, e_atom = starts.atoms[0], ends.atoms[0]
        assert s_atom is not None and e_atom is not None
        if sol.how.get(s_atom) != "kept" or sol.how.get(e_atom) != "kept":
            continue
        node = nodes[index]
        table = a.const(node.input[0])
        if table is None or table.dtype.kind != "f" or not 0 < table.size <= MAX_ELEMENTS:
            continue
        axes = a.const(node.input[3]) if len(node.input) > 3 and node.input[3] else None
        steps = a.const(node.input[4]) if len(node.input) > 4 and node.input[4] else None
        if steps is not None and int(np.asarray(steps).reshape(-1)[0]) != 1:
            continue
        axis = int(np.asarray(axes).reshape(-1)[0]) if axes is not None else 0
        axis %= table.ndim
        lo = int(starts.array.reshape(-1)[0])
        hi = int(ends.array.reshape(-1)[0])
        n = table.shape[axis]
        if not 0 <= lo < hi <= n:
            continue
        center = next(
            (
                c
                for c in _centers(table, axis)
                if lo < c < hi - 1 and (c - lo in (hi - 1 - c, hi - c))
            ),
            None,
        )
        if center is None:
            continue
        # the window's rows only: the buffer's far rows carry float32 angles' rounding (511
        # radians at 2e-8 each), and they are sliced from the file, never rebuilt
        window = np.take(table, np.arange(lo, hi), axis=axis)
        gen = sinusoid(window, [axis], start=lo - center)
        if gen is None or gen.lead != 0:
            continue
        c = center - lo
        traced = c + 1 if hi - 1 - center == c else c  # c after it, or c - 1
        shift = 1 if hi - 1 - center == c else 0
        use = starts
        for e in _nearby_sizes(a, sol, use, rows):
            if a.traced(e) != traced:
                continue
            start = Dim.const(center + shift) - e
            end = e + center
            tie(a, s_atom, start, node.name, node.op_type, "a relative-position window's start")
            tie(a, e_atom, end, node.name, node.op_type, "a relative-position window's end")
            if len(solve(a).conflicts) <= conflicts:
                tied += 1
                break
            a.constraints.pop()
            a.constraints.pop()
    return tied
