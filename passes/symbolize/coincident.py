"""Sizes whose traced value fits two readings: fixed as traced, or following a symbol.

A constant the solver *kept* at its traced value (nothing in the graph forced it) may equal a
symbol's traced size by coincidence (an output resized to a fixed 64x64) or because the export
baked the symbol in (``F.interpolate(x, size=input.shape[-2:])`` traced at 64x64, where nothing
downstream forces the 64). Shapes cannot tell these apart; a wrong guess gives wrong values at
other sizes, not an error. :func:`find_coincidences` lists every such size that a tie to the
symbol leaves consistent (if tying it breaks a constraint, the graph has shown it fixed):
symbolize refuses them by name unless the user keeps them (``keep=NODE``) or reference cases at
another size choose a reading. One reading the graph does decide: a size equal to a batch whose
rows are independent (no node mixes them) counts its rows, since a fixed count would resample
or cut rows that nothing else mixes; such a size follows the batch (an index constant's length
does not: :mod:`.batch_indices` decides those, where the values show an enumeration).

The other direction: a size the solver tied to a symbol by a *hint* (a Reshape keeping its
leading dims, a Slice bound equal to its axis) where the fixed traced value fits as well.
:func:`ambiguous_hints` lists those (symbols whose rows are independent aside: a fixed count of
rows would mix them, which the check's row evidence refutes); their symbols are reported
``ambiguous`` until reference cases at another size confirm the choice.

    x[2,3,64,64] ... Concat(Shape(x)[:2], [64, 64]) -> Resize(sizes)     64 == height == width
"""

from __future__ import annotations

import itertools
from collections.abc import Set
from dataclasses import dataclass

import onnx

from onnxsurgery.shapes.analysis import Constraint, ConstUse, ShapeAnalysis
from onnxsurgery.shapes.dims import Dim
from onnxsurgery.shapes.solver import Solution, solve

__all__ = [
    "SIZE_SETTERS",
    "Coincidence",
    "Ambiguity",
    "find_coincidences",
    "ambiguous_hints",
    "tie",
]

#: Ops whose inputs set an output's size: where a size read ends up being used.
SIZE_SETTERS = (
    "Resize", "Reshape", "Expand", "Tile", "ConstantOfShape", "Range", "Slice", "Pad", "Split",
    "TopK", "Upsample",
)  # fmt: skip
_INDICES = ("Gather", "GatherElements")  # a data constant whose length sets the output's


@dataclass
class Coincidence:
    """Element or axis ``index`` of constant read ``use`` (unknown ``atom``) kept at ``value``,
    which ``reading`` (a symbol expression) fits too; ``sets``: the op and node it sizes."""

    atom: str
    use: ConstUse
    index: int
    value: int
    reading: Dim
    sets: tuple[str, str]
    #: the reading is a batch whose rows are independent: the graph decides it (module docstring)
    rows: bool = False

    def nodes(self) -> set[str]:
        """The names ``keep=`` may give for it: the node reading it, the node it sizes."""
        return {self.use.node, self.sets[1]}


@dataclass
class Ambiguity:
    """A size tied to ``chosen`` by a hint at ``op`` ``node`` where the fixed ``value`` fits."""

    node: str
    op: str
    input_index: int
    value: int
    chosen: Dim

    def __str__(self) -> str:
        return (
            f"{self.op} {self.node!r} input {self.input_index}: {self.chosen} chosen, the fixed "
            f"{self.value} (as traced) fits the graph too"
        )


def _expressions(a: ShapeAnalysis, value: int) -> list[Dim]:
    """Symbol expressions whose traced value is ``value``: a symbol, a product or sum of two
    (products only of symbols traced above 1, which would repeat a lone symbol)."""
    traced = {s: a.atoms[s].traced for s in a.symbols if s not in a.dynamic}
    found = [Dim.sym(s) for s, t in traced.items() if t == value]
    big = [s for s, t in traced.items() if t > 1]
    for s1, s2 in itertools.combinations(big, 2):
        if traced[s1] * traced[s2] == value:
            found.append(Dim.sym(s1) * Dim.sym(s2))
        if traced[s1] + traced[s2] == value:
            found.append(Dim.sym(s1) + Dim.sym(s2))
    return found


def tie(a: ShapeAnalysis, atom: str, value: Dim, node: str, op: str, why: str) -> Constraint:
    """The hard constraint ``atom == value``, appended to ``a``."""
    c = Constraint(Dim.sym(atom) - value, node, op, why, False, Dim.sym(atom), value)
    a.constraints.append(c)
    return c


def _fits(a: ShapeAnalysis, atom: str, value: Dim, conflicts: int) -> bool:
    """Whether tying ``atom`` to ``value`` leaves the graph as consistent as it was."""
    tie(a, atom, value, "", "", "probe")
    try:
        return len(solve(a).conflicts) <= conflicts
    finally:
        a.constraints.pop()


def _kept(a: ShapeAnalysis, sol: Solution, use: ConstUse) -> list[tuple[int, str]]:
    """(index, atom) of the sizes in ``use`` the solver kept at their traced value."""
    if use.kind == "data" and not (use.op in _INDICES and use.input_index == 1):
        return []
    return [(i, x) for i, x in enumerate(use.atoms) if x is not None and sol.how.get(x) == "kept"]


def _sliced_axis(a: ShapeAnalysis, sol: Solution, use: ConstUse, index: int) -> Dim | None:
    """The length of the axis a Slice start or end or a Split size (element ``index`` of
    ``use``) cuts; None for any other read."""
    split = use.op == "Split" and use.input_index == 1
    if not split and (use.op != "Slice" or use.input_index not in (1, 2)) or use.graph:
        return None
    node = a.model.graph.node[use.node_index]
    data = a.tensors.get(node.input[0])
    if data is None or data.shape is None:
        return None
    if split:
        axis = next((x.i for x in node.attribute if x.name == "axis"), 0)
        return sol.resolve(data.shape[axis]) if -len(data.shape) <= axis < len(data.shape) else None
    axes_arr = a.consts.get(node.input[3]) if len(node.input) > 3 and node.input[3] else None
    axes = list(range(len(data.shape))) if axes_arr is None else axes_arr.reshape(-1).tolist()
    if index >= len(axes):
        return None
    return sol.resolve(data.shape[int(axes[index])])


def _slice_over_fixed_axis(a: ShapeAnalysis, sol: Solution, use: ConstUse, index: int) -> bool:
    """A Slice start or end, or a Split size, on an axis of fixed length: the graph fixes it
    (the sizes of a fixed axis add up to its length: one read as ``seq`` leaves another
    ``16 - seq``, which is no size)."""
    axis = _sliced_axis(a, sol, use, index)
    return axis is not None and axis.is_const()


def _rows_elsewhere(
    a: ShapeAnalysis, sol: Solution, use: ConstUse, index: int, reading: Dim, rows: Set[str]
) -> bool:
    """A Slice bound on an axis without the batch read as that batch: a batch whose rows are
    independent sizes no other axis (CvT traced at batch 1 takes its cls token with
    ``x[:, 0:1]``: a 1 on the token axis, not the batch)."""
    axis = _sliced_axis(a, sol, use, index)
    return (
        axis is not None
        and bool(reading.atoms() & rows)
        and not (reading.atoms() & axis.atoms())
        and not a.unknowns(axis) - sol.opaque
    )


def _broadcast_one(use: ConstUse, value: int, sets: tuple[str, str]) -> bool:
    """A 1 in an Expand shape or in Tile's repeats keeps the input's extent (no change): where
    nothing in the graph ties it to a symbol traced at 1, broadcasting downstream carries that
    symbol, so it is read as the no-op it is, not as the batch (RoBERTa traced at batch 1
    expands its position ids with [1, 1], an LSTM its zero state through a Concat of [1, ...];
    reading those as the batch broke the check or refused the model)."""
    return value == 1 and sets[0] in ("Expand", "Tile")


def _sized(model: onnx.ModelProto, use: ConstUse) -> tuple[str, str] | None:
    """The op and node whose size ``use`` sets: the reader itself, or the first size-setting op
    its output reaches through shape arithmetic (a Concat building a Resize's sizes); None where
    it reaches none (a comparison, a value)."""
    if use.op in SIZE_SETTERS or use.kind == "data":  # data: a gather's indices (_kept)
        return use.op, use.node
    if use.graph:
        return None  # a subgraph's reads are left to its own check
    node = model.graph.node[use.node_index]
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for n in model.graph.node:
        for x in n.input:
            consumers.setdefault(x, []).append(n)
    frontier = list(node.output)
    seen: set[str] = set()
    while frontier:
        for n in consumers.get(frontier.pop(0), []):
            if n.name in seen:
                continue
            seen.add(n.name)
            if n.op_type in SIZE_SETTERS:
                return n.op_type, n.name
            frontier.extend(n.output)
    return None


def find_coincidences(a: ShapeAnalysis, sol: Solution, rows: Set[str]) -> list[Coincidence]:
    """Every kept size whose value a symbol expression fits without breaking a constraint
    (a batch in ``rows`` first; else the k-th of a read's kept elements takes the k-th fitting
    expression: [64, 64] reads as [height, width])."""
    found: list[Coincidence] = []
    conflicts = len(sol.conflicts)
    for use in a.uses:
        taken: dict[int, int] = {}
        kept = _kept(a, sol, use)
        sets = _sized(a.model, use) if kept else None
        if sets is None:
            continue
        for index, atom in kept:
            value = a.atoms[atom].traced
            if _slice_over_fixed_axis(a, sol, use, index) or _broadcast_one(use, value, sets):
                continue
            fitting = [
                e
                for e in _expressions(a, value)
                if not _rows_elsewhere(a, sol, use, index, e, rows) and _fits(a, atom, e, conflicts)
            ]
            if not fitting:
                continue
            batch = [
                e
                for e in fitting
                if e.is_atom() and e.atoms() <= rows and use.kind == "size" and use.op == sets[0]
            ]
            k = taken.get(value, 0)
            taken[value] = k + int(not batch)
            reading = batch[0] if batch else fitting[k % len(fitting)]
            found.append(Coincidence(atom, use, index, value, reading, sets, bool(batch)))
    return found


def ambiguous_hints(a: ShapeAnalysis, sol: Solution, rows: Set[str]) -> list[Ambiguity]:
    """Sizes a hint tied to symbols (none of them a batch whose rows are independent) where
    their fixed traced value fits the graph too: one per symbol, which is what makes it
    ``ambiguous``. Each probe solves the whole graph again, so the reads are tried from the
    outputs back (a size nothing downstream forces sits near them: a decoder's last Reshape)
    and a symbol found ambiguous is not probed again (24 layers: 1 solve, not 73)."""
    found = []
    conflicts = len(sol.conflicts)
    settled: set[str] = set()
    for use in reversed(a.uses):
        if use.kind != "size":
            continue
        for atom in use.atoms:
            if atom is None or sol.how.get(atom) != "hint":
                continue
            chosen = sol.resolve(Dim.sym(atom))
            syms = (chosen.atoms() & a.symbols.keys()) - rows
            if chosen.is_const() or not syms or syms <= settled:
                continue
            value = a.atoms[atom].traced
            if _fits(a, atom, Dim.const(value), conflicts):
                found.append(Ambiguity(use.node, use.op, use.input_index, value, chosen))
                settled |= syms
    return found
