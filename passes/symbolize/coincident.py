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

A conflict read the other way round (a kept size that must follow a symbol) is
:mod:`.conflict_readings`'s.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence, Set
from dataclasses import dataclass

import onnx

from onnxsurgery.passes.symbolize.graph_edits import outer_names
from onnxsurgery.shapes.analysis import Constraint, ConstUse, ShapeAnalysis
from onnxsurgery.shapes.dims import Dim
from onnxsurgery.shapes.rules import op_traits
from onnxsurgery.shapes.solver import Solution, solve
from onnxsurgery.shapes.spelling import dim_text

__all__ = [
    "SIZE_SETTERS",
    "Coincidence",
    "Ambiguity",
    "find_coincidences",
    "ambiguous_hints",
    "expressions",
    "fits",
    "tie",
]

#: Ops whose inputs set an output's size: where a size read ends up being used.
SIZE_SETTERS = (
    "Resize", "Reshape", "Expand", "Tile", "ConstantOfShape", "Range", "Slice", "Pad", "Split",
    "TopK", "Upsample",
)  # fmt: skip
#: the nodes reading each tensor (:func:`consumers_of`)
Consumers = dict[str, list[onnx.NodeProto]]
#: a data constant whose length sets the output's (a GatherND grid on its outermost axis, where
#: ``arange(batch)[:, None, None]`` puts a batch: at batch 1 its component is 0, one row for
#: every row or the batch's rows; its other size-1 axes broadcast)
_INDICES = ("Gather", "GatherElements", "GatherND")


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
    """A size tied to ``chosen`` by a hint at ``op`` ``node`` where the fixed ``value`` fits
    (``released``: with the other hints of that op and node released too, where one hint
    read several sizes); ``symbols``: those ``chosen`` follows."""

    node: str
    op: str
    input_index: int
    value: int
    chosen: Dim
    symbols: frozenset[str] = frozenset()
    released: tuple[str, str] | None = None
    #: ``chosen`` in the input symbols (:func:`~onnxsurgery.shapes.spelling.dim_text`)
    text: str = ""

    def __str__(self) -> str:
        also = (
            f" once the other sizes {self.released[0]} {self.released[1]!r} hinted are free"
            if self.released
            else ""
        )
        return (
            f"{self.op} {self.node!r} input {self.input_index}: {self.text or self.chosen} "
            f"chosen, the fixed "
            f"{self.value} (as traced) fits the graph too{also}"
        )


def expressions(a: ShapeAnalysis, value: int) -> list[Dim]:
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


def fits(
    a: ShapeAnalysis,
    atom: str,
    value: Dim,
    conflicts: int,
    also: Sequence[tuple[str, Dim]] = (),
) -> bool:
    """Whether tying ``atom`` to ``value`` (and each atom of ``also`` to its value, at once)
    leaves the graph as consistent as it was."""
    ties = [(atom, value), *also]
    for x, v in ties:
        tie(a, x, v, "", "", "probe")
    try:
        return len(solve(a).conflicts) <= conflicts
    finally:
        del a.constraints[-len(ties) :]


def _kept(a: ShapeAnalysis, sol: Solution, use: ConstUse) -> list[tuple[int, str]]:
    """(index, atom) of the sizes in ``use`` the solver kept at their traced value."""
    if use.kind == "data" and not (use.op in _INDICES and use.input_index == 1):
        return []
    atoms = use.atoms[:1] if use.kind == "data" and use.op == "GatherND" else use.atoms
    return [(i, x) for i, x in enumerate(atoms) if x is not None and sol.how.get(x) == "kept"]


def _sliced_axis(a: ShapeAnalysis, sol: Solution, use: ConstUse, index: int) -> Dim | None:
    """The length of the axis a Slice start or end or a Split size (element ``index`` of
    ``use``) cuts; None for any other read."""
    split = use.op == "Split" and use.input_index == 1
    if not split and (use.op != "Slice" or use.input_index not in (1, 2)) or use.graph:
        return None
    node = a.model.graph.node[use.node_index]
    if not split:
        return _axis_sized(a, sol, node, use.input_index, index)
    return _attribute_axis(a, sol, node, 0)


def _attribute_axis(
    a: ShapeAnalysis, sol: Solution, node: onnx.NodeProto, default: int
) -> Dim | None:
    """The length of the axis of ``node``'s data that its ``axis`` attribute (``default`` where
    it has none) names: a Split's, a TopK's; None where that shape is unknown."""
    data = a.tensors.get(node.input[0])
    if data is None or data.shape is None:
        return None
    axis = next((x.i for x in node.attribute if x.name == "axis"), default)
    return sol.resolve(data.shape[axis]) if -len(data.shape) <= axis < len(data.shape) else None


def _axis_sized(
    a: ShapeAnalysis, sol: Solution, node: onnx.NodeProto, input_index: int, element: int
) -> Dim | None:
    """The length of the data axis that element ``element`` of input ``input_index`` of a Slice
    (a start, end or step: the axis its ``axes`` names) or a Resize (a scale or size: the axis
    of that position, or that the ``axes`` attribute names) sizes; None for any other input."""
    inputs = {"Slice": (1, 2, 4), "Resize": (2, 3)}.get(node.op_type, ())
    data = a.tensors.get(node.input[0])
    if input_index not in inputs or data is None or data.shape is None:
        return None
    if node.op_type == "Slice":
        arr = a.consts.get(node.input[3]) if len(node.input) > 3 and node.input[3] else None
        axes = None if arr is None else arr.reshape(-1).tolist()
    else:
        axes = next((list(x.ints) for x in node.attribute if x.name == "axes"), None)
    axes = list(range(len(data.shape))) if axes is None else axes
    if element >= len(axes) or not -len(data.shape) <= int(axes[element]) < len(data.shape):
        return None
    return sol.resolve(data.shape[int(axes[element])])


def _topk_axis(a: ShapeAnalysis, sol: Solution, use: ConstUse) -> Dim | None:
    """The length of the axis a TopK's ``K`` (``use``) ranks; None for any other read. A K
    equal to it is a sort at every size as well (``torch.sort``, ``argsort``: dynamo writes
    them as TopK with K the traced length of the axis), so that length is a reading of the K
    even where no two symbols multiply to it (JetMoE sorts its ``batch*seq*top_k`` routed
    tokens: 16 at batch 1, a product with a literal)."""
    if use.op != "TopK" or use.input_index != 1 or use.graph:
        return None
    return _attribute_axis(a, sol, a.model.graph.node[use.node_index], -1)


def _computed_from_constants(model: onnx.ModelProto) -> set[str]:
    """The main graph's tensors that no graph input reaches: constants, and what nodes compute
    from constants alone (a mask built by filling zeros, as Swin's shifted windows)."""
    reached = {i.name for i in model.graph.input}
    free: set[str] = set()
    for node in model.graph.node:
        outer = outer_names(node)
        if any(x in reached for x in outer):
            reached.update(node.output)
        else:
            free.update(node.output)
    return free


def _input_free(a: ShapeAnalysis, use: ConstUse, free: Set[str]) -> bool:
    """Whether what ``use`` sizes is made from constants alone: a ConstantOfShape's fill, or
    the data a Reshape rearranges where only constants compute it (``free``). No size of it
    counts the rows of a batch, which no constant holds, so the rows rule does not read it as
    one; the coincidence is decided as the others are (by cases, or the original model run row
    by row: an RNN's zero state added to the rows still follows the batch). Swin3D's
    shifted-window mask, filled in zeros of [frames, 14, 14] with 2 frames at batch 2, read
    them as the batch, and ONNX Runtime mixed the rows at batch 3."""
    if use.graph:
        return False
    node = a.model.graph.node[use.node_index]
    if node.op_type == "ConstantOfShape":
        return True
    return node.op_type == "Reshape" and node.input[0] in free


def _slice_over_fixed_axis(a: ShapeAnalysis, sol: Solution, use: ConstUse, index: int) -> bool:
    """A Slice start or end, or a Split size, on an axis of fixed length: the graph fixes it
    (the sizes of a fixed axis add up to its length: one read as ``seq`` leaves another
    ``16 - seq``, which is no size)."""
    axis = _sliced_axis(a, sol, use, index)
    return axis is not None and axis.is_const()


def _padded_axis(a: ShapeAnalysis, sol: Solution, use: ConstUse, index: int) -> Dim | None:
    """The length of the axis a Pad amount (element ``index`` of its ``pads``: the begins,
    then the ends, over ``axes`` where given) pads; None for any other read."""
    if use.op != "Pad" or use.input_index != 1 or use.graph:
        return None
    node = a.model.graph.node[use.node_index]
    data = a.tensors.get(node.input[0])
    if data is None or data.shape is None:
        return None
    axes_arr = a.consts.get(node.input[3]) if len(node.input) > 3 and node.input[3] else None
    axes = list(range(len(data.shape))) if axes_arr is None else axes_arr.reshape(-1).tolist()
    if len(use.atoms) != 2 * len(axes):
        return None
    axis = int(axes[index % len(axes)])
    return sol.resolve(data.shape[axis]) if -len(data.shape) <= axis < len(data.shape) else None


def _within_rows(a: ShapeAnalysis, sol: Solution, use: ConstUse, index: int, rows: Set[str]) -> Set[str]:
    """The batches (rows independent) a Slice bound or a Pad amount on another axis cannot
    follow: a row's values do not depend on how many rows run with it, so no size inside a row
    follows the batch (BEiT's ``hidden[:, 1:]`` at batch 1, whose 1 read as the batch;
    MobileNetV2's TensorFlow 'same' Pads of (0, 1) on height and width at batch 1)."""
    axis = _sliced_axis(a, sol, use, index)
    if axis is None:
        axis = _padded_axis(a, sol, use, index)
    return set() if axis is None else set(rows) - axis.atoms()


def _broadcast_one(use: ConstUse, value: int, sets: tuple[str, str]) -> bool:
    """A 1 in an Expand shape or in Tile's repeats keeps the input's extent (no change): where
    nothing in the graph ties it to a symbol traced at 1, broadcasting downstream carries that
    symbol, so it is read as the no-op it is, not as the batch (RoBERTa traced at batch 1
    expands its position ids with [1, 1], an LSTM its zero state through a Concat of [1, ...];
    reading those as the batch broke the check or refused the model)."""
    return value == 1 and sets[0] in ("Expand", "Tile")


def _broadcast_row(
    a: ShapeAnalysis, sol: Solution, atom: str, value: int, rows: Set[str]
) -> bool:
    """A 1 that met a batch (rows independent) traced at 1 in a broadcast (``one_point``), or
    an unknown the solver made that batch (``dropped_ones``: GPT-2's token embeddings are
    [batch, seq] only once its ``view(-1, seq)`` is solved): the one row broadcasts over the
    batch, which is what following it would repeat (CLIP's and GPT-2's ``position_ids`` buffer
    [1, N] gathered and added to [batch, N, C] by TorchScript, which dynamo folds into a
    [1, N, C] constant)."""
    met = a.one_point.get(atom)
    if met is None and atom in a.dropped_ones:
        met = sol.resolve(a.dropped_ones[atom])
    return value == 1 and met is not None and bool(met.atoms()) and met.atoms() <= rows


def _met_in_broadcast(
    a: ShapeAnalysis, sol: Solution, atom: str, value: int, rows: Set[str]
) -> bool:
    """:func:`_broadcast_row` for a 1 that reaches the broadcast as a factor of a dim whose
    other factors are 1 too (a Tile or a Reshape by 1 of the row, which the broadcast records
    do not follow): at some broadcasting node that dim meets a batch of ``rows`` traced at 1
    on the same axis. CodeGen's and GPT-J's ``position_ids`` [1, seq] gather the rotary table,
    whose rows are tiled (``repeat_interleave``) and multiplied with [batch, seq, heads, d]."""
    if value != 1:
        return False
    one = Dim.const(1)
    for node in a.model.graph.node:
        if not op_traits(node.domain, node.op_type).broadcasts:
            continue
        infos = [a.tensors.get(x) for x in node.input if x]
        shapes = [i.shape for i in infos if i is not None and i.shape is not None]
        for k in range(1, max((len(s) for s in shapes), default=0) + 1):
            dims = [s[-k] for s in shapes if len(s) >= k]
            if not any(atom in d.atoms() and sol.resolve(d) == one for d in dims):
                continue
            met = [sol.resolve(d) for d in dims if atom not in d.atoms()]
            if any(m.is_atom() and m.atoms() <= rows for m in met):
                return True
    return False


def _sized(
    model: onnx.ModelProto, use: ConstUse, consumers: Consumers | None = None
) -> tuple[str, str] | None:
    """The op and node whose size ``use`` sets: the reader itself, or the first size-setting op
    its output reaches through shape arithmetic (a Concat building a Resize's sizes); None where
    it reaches none (a comparison, a value)."""
    if use.op in SIZE_SETTERS or use.kind == "data":  # data: a gather's indices (_kept)
        return use.op, use.node
    reached = _reached(model, use, consumers)
    return (reached[0].op_type, reached[0].name) if reached else None


def consumers_of(model: onnx.ModelProto) -> Consumers:
    """The nodes of the main graph reading each tensor, in graph order."""
    consumers: Consumers = {}
    for n in model.graph.node:
        for x in n.input:
            consumers.setdefault(x, []).append(n)
    return consumers


def _reached(
    model: onnx.ModelProto, use: ConstUse, consumers: Consumers | None = None
) -> list[onnx.NodeProto]:
    """Every size-setting node the output of ``use``'s reader reaches through shape arithmetic
    (not through a size setter), nearest first; none for a read in a subgraph. ``consumers``:
    :func:`consumers_of` the model, where the caller reads many uses of it."""
    if use.graph:
        return []  # a subgraph's reads are left to its own check
    node = model.graph.node[use.node_index]
    if consumers is None:
        consumers = consumers_of(model)
    frontier = list(node.output)
    seen: set[str] = set()
    found: list[onnx.NodeProto] = []
    while frontier:
        for n in consumers.get(frontier.pop(0), []):
            if n.name in seen:
                continue
            seen.add(n.name)
            if n.op_type in SIZE_SETTERS:
                found.append(n)
            else:
                frontier.extend(n.output)
    return found


def _involves(a: ShapeAnalysis, d: Dim, atom: str) -> bool:
    """Whether ``atom`` is in ``d``, or in a run-time division an opaque atom of ``d`` stands
    for (torchscript's chunk end ``(dim + 1) // 2``)."""
    todo, seen = set(d.atoms()), set()
    while todo:
        x = todo.pop()
        if x == atom:
            return True
        seen.add(x)
        parts = a.value_divs.get(x) or a.floor_parts.get(x, ())[:2]
        todo |= {y for p in parts for y in p.atoms()} - seen
    return False


def _rows_beside(
    a: ShapeAnalysis, sol: Solution, node: onnx.NodeProto, atom: str, rows: Set[str]
) -> set[str]:
    """The batches of ``rows`` that ``node``'s data carries beside the axes that the positions
    of its inputs holding ``atom`` size; none where one such position is no Slice bound or
    Resize size (:func:`_axis_sized`) or the inputs' values are unknown."""
    data = a.tensors.get(node.input[0])
    if data is None or data.shape is None:
        return set()
    sized: list[Dim] = []
    for k, name in enumerate(node.input):
        info = a.tensors.get(name) if name else None
        for j, d in enumerate((info.value if info is not None else None) or []):
            if _involves(a, d, atom):
                axis = _axis_sized(a, sol, node, k, j)
                if axis is None:
                    return set()
                sized.append(axis)
    carried = {x for d in data.shape for x in sol.resolve(d).atoms()} & set(rows)
    return carried - {x for d in sized for x in d.atoms()} if sized else set()


def _within_rows_reached(
    a: ShapeAnalysis,
    sol: Solution,
    use: ConstUse,
    atom: str,
    rows: Set[str],
    consumers: Consumers | None = None,
) -> set[str]:
    """:func:`_within_rows` for a size that reaches its Slice bounds or Resize sizes through
    shape arithmetic: the batches every node it sizes carries on another axis than the one it
    sizes. WavLM's ``chunk(2, dim=-1)`` by torchscript ends at ``(dim + 1) // 2 * 1`` with
    ``dim`` 2, whose 1 at batch 1 and 2 at batch 2 read as the batch; MobileViT resizes
    [batch, C, 1, 1] to a patch grid [batch, C, 2, 2] at batch 2: a row's values do not
    depend on how many rows run with it, so neither follows the batch."""
    if use.op in SIZE_SETTERS or use.kind != "size":
        return set()
    reached = _reached(a.model, use, consumers)
    within = set(rows) if reached else set()
    for node in reached:
        within &= _rows_beside(a, sol, node, atom, rows)
    return within


def find_coincidences(a: ShapeAnalysis, sol: Solution, rows: Set[str]) -> list[Coincidence]:
    """Every kept size whose value a symbol expression fits without breaking a constraint
    (a batch in ``rows`` first; else the k-th of a read's kept elements takes the k-th fitting
    expression: [64, 64] reads as [height, width])."""
    found: list[Coincidence] = []
    conflicts = len(sol.conflicts)
    consumers = consumers_of(a.model)  # one map for every read (17k nodes: 1k reads)
    fixed_data = _computed_from_constants(a.model)
    for use in a.uses:
        taken: dict[int, int] = {}
        kept = _kept(a, sol, use)
        sets = _sized(a.model, use, consumers) if kept else None
        if sets is None:
            continue
        for index, atom in kept:
            value = a.atoms[atom].traced
            if _slice_over_fixed_axis(a, sol, use, index) or _broadcast_one(use, value, sets):
                continue
            ranked = _topk_axis(a, sol, use)
            if ranked is not None and ranked.is_const():
                continue  # a top-k of a fixed axis (a MoE's experts): k can grow with nothing
            if use.kind == "data" and (
                _broadcast_row(a, sol, atom, value, rows)
                or _met_in_broadcast(a, sol, atom, value, rows)
            ):
                continue
            within = _within_rows(a, sol, use, index, rows)
            within |= _within_rows_reached(a, sol, use, atom, rows, consumers)
            candidates = expressions(a, value)
            if ranked is not None and ranked.atoms() and a.traced(ranked) == value:
                candidates = [ranked, *(e for e in candidates if e != ranked)]
            fitting = [
                e
                for e in candidates
                if not e.atoms() & within and fits(a, atom, e, conflicts)
            ]
            if not fitting and ranked is not None:
                fitting = _sorts_together(a, sol, use, index, ranked, conflicts)
            if not fitting:
                continue
            axis = _sliced_axis(a, sol, use, index)
            if axis is not None and len(fitting) > 1:
                # a Slice bound or Split size reads first as a symbol its axis grows with: ``8``
                # cutting an axis of ``3*tgt`` is ``tgt`` sooner than ``seq`` (both traced at 8)
                fitting.sort(key=lambda e: not e.atoms() <= axis.atoms())
            batch = [
                e
                for e in fitting
                if e.is_atom() and e.atoms() <= rows and use.kind == "size" and use.op == sets[0]
            ]
            if batch and _input_free(a, use, fixed_data):
                batch = []  # a constant made or rearranged has no rows of a batch to count
            k = taken.get(value, 0)
            taken[value] = k + int(not batch)
            reading = batch[0] if batch else fitting[k % len(fitting)]
            found.append(Coincidence(atom, use, index, value, reading, sets, bool(batch)))
    seen = {c.atom for c in found}
    found += [
        c for c in _broadcast_partners(a, sol, rows, conflicts, consumers) if c.atom not in seen
    ]
    return found


def _sorts_together(
    a: ShapeAnalysis, sol: Solution, use: ConstUse, index: int, axis: Dim, conflicts: int
) -> list[Dim]:
    """``[axis]`` where the sort reading of a TopK's K (:func:`_topk_axis`) fits once every
    other TopK reading the same constant as K, kept at the same value, sorts its own axis too;
    else none. Layers sort alike: JetMoE's four share one K constant, and a layer whose K
    alone follows its tokens meets the next layer's, still fixed, where their attention
    shapes meet (one Reshape constant for every layer's queries)."""
    atom = use.atoms[index]
    if atom is None:
        return []
    value = a.atoms[atom].traced
    also = []
    for other in a.uses:
        if other is use or other.tensor != use.tensor or other.op != "TopK" or other.graph:
            continue
        x = other.atoms[index] if index < len(other.atoms) else None
        ranked = _topk_axis(a, sol, other)
        if x is None or sol.how.get(x) != "kept" or ranked is None or not ranked.atoms():
            continue
        if a.traced(ranked) == value:
            also.append((x, ranked))
    return [axis] if also and fits(a, atom, axis, conflicts, also) else []


#: Ops a constant may pass through on its way to a broadcast, keeping its axes.
_PASSING = ("Cast", "Identity", "Slice")


def _only_broadcast(model: onnx.ModelProto, tensor: str, axis: int, rank: int) -> bool:
    """Whether every node reading axis ``axis`` of ``tensor`` (of rank ``rank``) broadcasts it
    (a Where, an Add; a MatMul's batch axes), or passes it on (:data:`_PASSING`: a band cut
    from a buffer) only to nodes that do: a row repeated there gives what the one row gave,
    and nothing else sees the repeat."""
    todo, seen = [tensor], set()
    outputs = {o.name for o in model.graph.output}
    while todo:
        name = todo.pop()
        if name in outputs:
            return False  # its rows would show
        readers = [n for n in model.graph.node if name in n.input]
        for node in readers:
            if node.name in seen:
                continue
            seen.add(node.name)
            if node.op_type in _PASSING and node.input[0] == name:
                todo.extend(node.output)
            elif node.op_type == "MatMul":
                if axis >= rank - 2:
                    return False
            elif not op_traits(node.domain, node.op_type).broadcasts:
                return False
    return True


def _broadcast_partners(
    a: ShapeAnalysis, sol: Solution, rows: Set[str], conflicts: int, consumers: Consumers
) -> list[Coincidence]:
    """Dims a broadcast followed (every operand traced at 1) that the solver kept at 1 where
    one it dropped for them (``dropped_ones``) became a batch of ``rows``: at that batch the
    broadcast's output is the batch, not 1, so the kept dim reads as the batch too (its rows
    repeat the one row, which is what broadcasting it gives). GPT-Neo's causal band
    [1, 1, seq, seq] meets the scores [batch, heads, seq, seq] in a Where first, and the
    heads merged back by a Reshape [1, seq, C] followed the band's 1, while the Reshapes
    splitting the heads followed the batch: ONNX Runtime failed at batch 2."""
    found: list[Coincidence] = []
    one = Dim.const(1)
    for dropped, kept in a.dropped_ones.items():
        atom = next(iter(kept.atoms())) if kept.is_atom() else None
        if atom is None or sol.how.get(atom) != "kept" or sol.resolve(kept) != one:
            continue
        reading = sol.resolve(Dim.sym(dropped))
        if not reading.is_atom() or not reading.atoms() <= rows:
            continue
        for use in a.uses:
            if atom not in use.atoms or use.kind != "data" or use.graph:
                continue
            axis = use.atoms.index(atom)
            if not _only_broadcast(a.model, use.tensor, axis, use.array.ndim):
                continue
            if fits(a, atom, reading, conflicts):
                sets = _sized(a.model, use, consumers) or (use.op, use.node)
                found.append(Coincidence(atom, use, axis, 1, reading, sets, True))
                break
    return found


def ambiguous_hints(a: ShapeAnalysis, sol: Solution, rows: Set[str]) -> list[Ambiguity]:
    """Sizes a hint tied to symbols (none of them a batch whose rows are independent) where
    their fixed traced value fits the graph too: one per symbol, which is what makes it
    ``ambiguous``. Each probe solves the whole graph again, so the reads are tried from the
    outputs back (a size nothing downstream forces sits near them: a decoder's last Reshape)
    and a symbol found ambiguous is not probed again (24 layers: 1 solve, not 73).

    Where the fixed value alone breaks the graph, the other reading may still fit with the
    other sizes the same hint read released with it (:func:`_fits_released`): one Reshape's
    alignment reads several sizes at once, and the other reading moves them together
    (CANINE's ``[batch, n - start, 4, C] -> [batch, -1, C]``: the start 1 as ``n - 1`` and
    the ``-1`` as 4, or the start fixed and the ``-1`` as ``4*(n - 1)``)."""
    found = []
    conflicts = len(sol.conflicts)
    settled: set[str] = set()
    released: set[int] = set()  # the hints' sources probed released
    for use in reversed(a.uses):
        if use.kind != "size":
            continue
        for atom in use.atoms:
            if atom is None or sol.how.get(atom) != "hint":
                continue
            chosen = sol.resolve(Dim.sym(atom))
            follows = _symbols_in(a, sol, chosen)
            syms = follows - rows
            if chosen.is_const() or not syms or syms <= settled:
                continue
            value = a.atoms[atom].traced
            source = sol.hinted_by.get(atom)
            if fits(a, atom, Dim.const(value), conflicts):
                other = None
            elif source is not None and id(source) not in released:
                released.add(id(source))
                if not _fits_released(a, sol, source, rows, conflicts):
                    continue
                other = (source.op, source.node)
            else:
                continue
            found.append(
                Ambiguity(
                    use.node, use.op, use.input_index, value, chosen, frozenset(follows), other,
                    dim_text(a, sol, chosen),
                )  # fmt: skip
            )
            settled |= syms
    return found


def _symbols_in(a: ShapeAnalysis, sol: Solution, d: Dim) -> set[str]:
    """The symbols ``d`` follows: its own, and those of a division an atom of it stands for
    (CANINE's molecule count ``(seq - 4)//4 + 1``, an opaque atom of the solution)."""
    todo, seen, found = set(d.atoms()), set(), set()
    while todo:
        x = todo.pop()
        seen.add(x)
        if x in a.symbols:
            found.add(x)
            continue
        parts = a.value_divs.get(x) or a.floor_parts.get(x, ())[:2]
        todo |= {y for p in parts for y in sol.resolve(p).atoms()} - seen
    return found


def _fits_released(
    a: ShapeAnalysis, sol: Solution, source: Constraint, rows: Set[str], conflicts: int
) -> bool:
    """Whether the graph stays as consistent with the soft constraint ``source`` (a Reshape's
    alignment) released: the sizes it hinted that follow a symbol other than a batch of
    ``rows`` at their fixed traced values, the ``-1`` it read (a derived dim, the one the
    model left to the element count) free, every other size it hinted as it was read. Only
    where it hinted a ``-1`` beside them: otherwise the probe of the size alone was the
    other reading."""
    hinted = [x for x, c in sol.hinted_by.items() if c is source]
    if not any(a.atoms[x].kind == "derived" for x in hinted) or len(hinted) < 2:
        return False
    at = next(i for i, c in enumerate(a.constraints) if c is source)
    del a.constraints[at]
    count = len(a.constraints)
    try:
        for x in hinted:
            chosen = sol.resolve(Dim.sym(x))
            if a.atoms[x].kind == "derived":
                continue
            follows = _symbols_in(a, sol, chosen) - rows
            tie(a, x, Dim.const(a.atoms[x].traced) if follows else chosen, "", "", "probe")
        return len(solve(a).conflicts) <= conflicts
    finally:
        del a.constraints[count:]
        a.constraints.insert(at, source)
