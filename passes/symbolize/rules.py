"""symbolize's rules for one constant read: the pattern that rebuilds it, or the blocker that keeps it.

Each rule is a small unit, after onnxscript's rewrite rules: what it matches (a
:class:`~.reads.ConstRead`, one constant an op reads), ``check()`` returning None where it applies or a
short reason why not, and ``produce()``: a :class:`~.reads.Change` (the constant becomes a computation)
or a :class:`~.blockers.Blocker` whose words come from :mod:`.wording` under the rule's kind.
:data:`CONST_RULES` lists them in the order they are tried; the first that applies decides
(:func:`decide`). The blockers the graph shows as a whole (conflicting constraints, unrolled loops,
'same' padding) are declared the same way in :data:`.graph_blockers.GRAPH_RULES`.

    for use in analysis.uses:
        made = decide(ConstRead(context, use))   # Change, Blocker, or None (nothing traced)
"""

from __future__ import annotations

from collections.abc import Sequence, Set

import numpy as np

from onnxsurgery.model.dtypes import dtype_name, elem_type_of
from onnxsurgery.passes.symbolize.baked import relative_axes
from onnxsurgery.passes.symbolize.blockers import Blocker
from onnxsurgery.passes.symbolize.bounds import bound_text, largest
from onnxsurgery.passes.symbolize.generators import (
    Generator,
)
from onnxsurgery.passes.symbolize.reads import Change, ConstRead, PlanContext
from onnxsurgery.passes.symbolize.sizes import Divisions
from onnxsurgery.passes.symbolize.wording import (
    BOUND_HINT,
    at_least_text,
    dim_text,
    fix_lead,
    fix_text,
    fmt_values,
    input_symbols,
    least_text,
    sym_tuple,
    symbol_hint,
    values_text,
    why_text,
)
from onnxsurgery.shapes.analysis import ConstUse, ShapeAnalysis
from onnxsurgery.shapes.dims import Dim
from onnxsurgery.shapes.solver import Solution

__all__ = ["Rule", "CONST_RULES", "decide", "BoundedTable", "count_starts", "one_point_axes"]


class Rule:
    """One pattern or blocker kind: ``check`` says whether it applies, ``produce`` what it gives."""

    kind = ""

    def check(self, read: ConstRead) -> str | None:
        """None where the rule applies to ``read``, else a short reason why not."""
        raise NotImplementedError

    def produce(self, read: ConstRead) -> Change | Blocker | None:
        raise NotImplementedError


def decide(read: ConstRead, rules: list[Rule] | None = None) -> Change | Blocker | None:
    """What the first rule that applies to ``read`` produces (None: the read keeps no traced
    size). Every read has one: the last rules cover every generator kind."""
    for rule in CONST_RULES if rules is None else rules:
        if rule.check(read) is None:
            return rule.produce(read)
    raise AssertionError(f"no symbolize rule decides {read.use.tensor!r}")


# -- blockers at one constant ---------------------------------------------------------------------


class CoincidentSize(Rule):
    """A size kept at its traced value, which a symbol's traced size fits too: fixed on purpose
    (a resize to 64x64) or the symbol baked in (a resize to the input's size). Blocked, naming
    both readings, unless ``keep=`` names the node (it then never reaches this rule)."""

    kind = "coincident-size"

    def check(self, read: ConstRead) -> str | None:
        return None if read.coincidences else "no size kept at a traced value a symbol fits"

    def produce(self, read: ConstRead) -> Blocker:
        found = read.coincidences
        a, use = read.context.analysis, read.use
        op, node = found[0].sets
        values = ", ".join(f"{c.value} (= {c.reading})" for c in found)
        readings = ", ".join(str(c.reading) for c in found)
        via = "" if node == use.node else f" through {use.op} {use.node!r}"
        why = why_text(
            self.kind, tensor=use.tensor, values=values, op=op, node=node, via=via,
            fixed=", ".join(str(c.value) for c in found), readings=readings,
        )  # fmt: skip
        atoms = set().union(*(c.reading.atoms() for c in found))
        syms = symbol_hint(a.symbols, atoms)
        fix = fix_lead(self.kind, syms=syms, node=node, readings=readings) + fix_text(a, syms)
        old = (
            fmt_values([int(v) for v in use.array.reshape(-1)]) if use.kind == "size" else read.old
        )
        return Blocker(node, op, use.tensor, old, why, fix, sym_tuple(syms), self.kind)


def one_point_axes(
    a: ShapeAnalysis, sol: Solution, rows: Set[str], atoms: Sequence[str | None]
) -> list[tuple[int, Dim]]:
    """The axes of a data constant (its dims' ``atoms``) of size 1 that met, in a broadcast, a
    symbol this plan generalizes (traced at 1, not a batch) or a size the model computes from
    one (a strided stage of height), each with the dim it met: an axis already dynamic, or a
    size computed from one, does not count."""
    generalized = a.symbols.keys() - a.dynamic - rows
    found = []
    for k, atom in enumerate(atoms):
        met = a.one_point.get(atom) if atom is not None else None
        if met is not None and (met.atoms() | input_symbols(a, sol, met.atoms())) & generalized:
            found.append((k, met))
    return found


class OnePoint(Rule):
    """A data constant of size 1 on an axis that met a non-batch symbol traced at 1: one point
    cannot tell a broadcast from a table of the symbol's length."""

    kind = "one-point"

    def _met(self, read: ConstRead) -> tuple[int, Dim] | None:
        """The first axis :func:`one_point_axes` finds, or None."""
        ctx = read.context
        found = one_point_axes(ctx.analysis, ctx.solution, ctx.rows, read.use.atoms)
        return found[0] if found else None

    def check(self, read: ConstRead) -> str | None:
        if read.use.kind != "data":
            return "not a data constant"
        return None if self._met(read) else "no axis meets a symbol traced at 1"

    def produce(self, read: ConstRead) -> Blocker:
        found = self._met(read)
        assert found is not None
        axis, met = found
        a, sol = read.context.analysis, read.context.solution
        spelled = dim_text(a, sol, met)  # a strided stage's size in the input symbols
        why = why_text(self.kind, tensor=read.use.tensor, old=read.old, axis=axis, met=spelled)
        syms = input_symbols(a, sol, met.atoms())
        every = one_point_axes(a, sol, read.context.rows, read.use.atoms)
        mets = {dim_text(a, sol, m): _least(a, sol, m, 2) for _, m in every}  # for --ref
        return read.blocker(
            self.kind, why, syms, met=spelled, least=least_text(_least(a, sol, met, 3)),
            ref_sizes=at_least_text(list(mets), 2, [n for found in mets.values() for n in found]),
        )  # fmt: skip


def _least(a: ShapeAnalysis, sol: Solution, met: Dim, size: int) -> list[str]:
    """``['height 192 or more']``: the input sizes at which ``met``, a strided op's division,
    is ``size`` or more; none where ``met`` is no such division."""
    if not met.is_atom() or met.atoms() & a.symbols.keys():
        return []
    traced = {s: a.atoms[s].traced for s in a.symbols}
    smallest = Divisions.of(a, sol).smallest(traced, next(iter(met.atoms())), size)
    return [f"{s} {n} or more" for s, n in sorted(smallest.items())]


class OneRow(Rule):
    """A data constant whose values repeat along an axis the plan read as 1 (one row that the
    graph broadcasts; :func:`~.conflict_readings.broadcast_readings`): cut to that row."""

    kind = "one-row"

    def _rows(self, read: ConstRead) -> list[int]:
        shape = read.use.array.shape
        return [
            k for k, r in enumerate(read.resolved) if r is not None and r.value == 1 < shape[k]
        ]

    def check(self, read: ConstRead) -> str | None:
        if read.use.kind != "data":
            return "not a data constant"
        return None if self._rows(read) else "no axis was read as one row"

    def produce(self, read: ConstRead) -> Change:
        base = read.use.array
        for k in self._rows(read):
            base = np.take(base, [0], axis=k)
        a, sol, use = read.context.analysis, read.context.solution, read.use
        dtype = dtype_name(elem_type_of(use.array))
        new = f"{dtype}{values_text(a, sol, read.dims)} (one row)"
        return Change(
            use.graph, use.node, use.op, use.input_index, use.tensor, "data", read.old, new,
            read.dims, use, Generator("affine", [], base, {}),
        )  # fmt: skip


class NoTracedSize(Rule):
    """A constant whose every size resolves to a number: nothing to change."""

    kind = "static"

    def check(self, read: ConstRead) -> str | None:
        if all(r is None or r.is_const() for r in read.resolved):
            return None
        return "a size follows a symbol"

    def produce(self, read: ConstRead) -> None:
        return None


class _NoPattern(Rule):
    """A data constant no generator reproduces along its symbolic axes."""

    def check(self, read: ConstRead) -> str | None:
        if read.use.kind != "data":
            return "not a data constant"
        return None if read.generator is None else f"it fits {read.generator.describe()}"

    def _why(self, read: ConstRead, **fields: object) -> Blocker:
        a, sol, use = read.context.analysis, read.context.solution, read.use
        axes = ", ".join(f"axis {k} ({dim_text(a, sol, read.dims[k])})" for k in read.symbolic_axes)
        why = why_text(self.kind, tensor=use.tensor, old=read.old, axes=axes, **fields)
        cache = read.context.cache
        if cache and use.array.dtype.kind == "f":
            why += why_text("cache-position-table", cache=", ".join(sorted(cache)))
        blocker = read.blocker(self.kind, why, read.atoms | input_symbols(a, sol, read.atoms))
        sliceable = BoundedTable().axes(read)
        if sliceable is not None:  # a bound on its symbols would slice it
            syms = sorted(set().union(*sliceable[0].values()) - read.context.bounds.keys())
            blocker.fix = BOUND_HINT.format(syms=", ".join(syms), example=syms[0]) + blocker.fix
        return blocker


class RelativePositionBias(_NoPattern):
    """A table that depends only on j - i, folded at the traced length (T5's, WavLM's bias)."""

    kind = "relative-position-bias"

    def check(self, read: ConstRead) -> str | None:
        reason = super().check(read)
        if reason is None and relative_axes(read.use.array, read.symbolic_axes) is None:
            return "it does not depend on j - i alone"
        return reason

    def produce(self, read: ConstRead) -> Blocker:
        found = relative_axes(read.use.array, read.symbolic_axes)
        assert found is not None
        i, j = found
        return self._why(read, i=i, j=j, far=read.use.array.shape[i] - 1)


class TableCut(_NoPattern):
    """A table or mask made for the traced size (cut, folded, or a weight torch resizes)."""

    kind = "table-cut"

    def produce(self, read: ConstRead) -> Blocker:
        return self._why(read)


class BoundedTable(Rule):
    """A table folded at the traced length that is right, sliced, at every shorter size, under
    bounded symbols (``seq<=traced``): learned positions 0..L-1 along one axis (BART's, GPT-2's
    ``wpe`` gathered by ``arange(seq)``), or a bias that depends only on j - i along two axes
    (T5's, WavLM's relative positions: any top-left block of it is the bias of that length).
    An axis is sliced where its size grows with bounded symbols alone (``seq``, ``seq + 1``,
    frames computed from ``samples``) and reaches at most the table's length at the bounds; an
    axis of ``batch*c`` that repeats one block of ``c`` (heads tiled over the batch) is cut to
    the block and tiled. Beside a ``seq`` axis, an axis of ``n*seq`` made of ``n`` blocks each
    depending on j - i (ProphetNet's predicting streams: ``cat`` of two tables each cut to
    ``seq``) is sliced block by block, each block's first ``seq`` entries side by side. Each
    sliced axis becomes a Gather of ``arange(size)``, which ONNX Runtime fails where a size is
    over the bound, the node named ``symbolize: seq<=8 ...``. A bound whose sizes the table
    does not reach is a blocker.

        Constant pos[8, 32] ─ Add(embeddings[batch, seq, 32])          seq<=traced (8)
        =>
        Gather(pos, arange(seq)) ─ Add

    Not where the graph has a cache: positions start at its length there, not at 0."""

    kind = "bounded-table"

    def axes(
        self, read: ConstRead
    ) -> tuple[dict[int, set[str]], dict[int, int], dict[int, int]] | None:
        """(the axes to slice, each with the input symbols its size grows with; the axes tiled
        over a batch, each with its block; the sliced axes of ``n*seq`` made of ``n`` blocks,
        each with ``n``), where the table is one a prefix of serves every shorter size (of
        each block); else None."""
        arr, c = read.use.array, read.context
        if read.use.kind != "data" or read.generator is not None or c.cache or c.analysis.opset < 10:
            return None
        cut: dict[int, set[str]] = {}
        tiled: dict[int, int] = {}
        blocks: dict[int, int] = {}
        for k in read.symbolic_axes:
            block = _batch_block(read, k)
            if block is not None:
                tiled[k] = block
                continue
            terms = dict(read.dims[k].terms)
            plus = terms.pop((), None)  # seq + 1 grows with seq as seq does
            if len(terms) != 1:
                return None
            ((mono, coef),) = terms.items()
            if len(mono) != 1:
                return None
            if coef != 1:  # n*seq: n blocks of seq side by side, where each block shows it
                if plus or not 2 <= coef <= MAX_BLOCKS or arr.shape[k] % coef:
                    return None
                blocks[k] = coef
            syms = input_symbols(c.analysis, c.solution, set(mono))
            if not syms or syms & c.rows:
                return None
            cut[k] = syms
        if not cut or len(cut) > 2 or (blocks and len(cut) != 2):
            return None
        if len(cut) == 2 and not _relative_blocks(arr, sorted(cut), blocks):
            return None
        return cut, tiled, blocks

    def check(self, read: ConstRead) -> str | None:
        found = self.axes(read)
        if found is None:
            return "it is no table a prefix of serves shorter sizes"
        bounds = read.context.bounds
        syms = set().union(*found[0].values())
        return None if syms <= bounds.keys() else "its symbols are not bounded"

    def produce(self, read: ConstRead) -> Change | Blocker:
        found = self.axes(read)
        assert found is not None
        cut, tiled, blocks = found
        c, arr = read.context, read.use.array
        syms = set().union(*cut.values())
        for k in sorted(cut):
            most = largest(c.analysis, c.solution, read.dims[k], c.bounds)
            if most is None or most > arr.shape[k]:
                why = why_text(
                    self.kind, tensor=read.use.tensor, old=read.old, axis=k,
                    bounds=bound_text(cut[k], c.bounds), length=arr.shape[k],
                    size="a size it cannot tell" if most is None else most,
                    traced=", ".join(f"{s}<=traced" for s in sorted(cut[k])),
                )  # fmt: skip
                return read.blocker(self.kind, why, syms)
        base = arr
        for k, block in tiled.items():
            base = np.take(base, range(block), axis=k)
        gen = Generator("prefix", sorted(cut), base, bound=bound_text(syms, c.bounds))
        c.used_bounds |= syms
        gen.steps = {k: np.array(block) for k, block in tiled.items()}
        gen.blocks = blocks
        a, sol = c.analysis, c.solution
        new = f"{dtype_name(elem_type_of(arr))}{values_text(a, sol, read.dims)} ({gen.describe()})"
        use = read.use
        return Change(
            use.graph, use.node, use.op, use.input_index, use.tensor, "data", read.old, new,
            read.dims, use, gen,
        )  # fmt: skip


#: the most blocks of one length an axis of a bounded table is read as (``n*seq``)
MAX_BLOCKS = 4


def _relative_blocks(arr: np.ndarray, axes: list[int], blocks: dict[int, int]) -> bool:
    """Whether ``arr`` depends only on j - i along ``axes``; where an axis is ``blocks[k]``
    blocks of one length (ProphetNet's predicting streams: ``cat`` of two tables each cut to
    the length), within each block, a first column every row sees alike allowed there (a
    sink). A prefix of each block then serves every shorter size."""
    if not blocks:
        return relative_axes(arr, axes) is not None
    parts = [arr]
    for k, n in blocks.items():
        parts = [p for q in parts for p in np.split(q, n, axis=k)]
    return all(relative_axes(p, axes, sink=True) is not None for p in parts)


def _batch_block(read: ConstRead, k: int) -> int | None:
    """``c`` where axis ``k`` of the table is ``batch*c`` (a symbol whose rows are independent)
    and repeats its first ``c`` entries (heads tiled over the batch); else None."""
    terms = read.dims[k].terms
    if len(terms) != 1:
        return None
    ((mono, coef),) = terms.items()
    if len(mono) != 1 or mono[0] not in read.context.rows:
        return None
    arr = read.use.array
    block = np.take(arr, range(coef), axis=k)
    reps = [arr.shape[k] // coef if i == k else 1 for i in range(arr.ndim)]
    return coef if np.array_equal(np.tile(block, reps), arr) else None


class ThinEvidence(Rule):
    """A pattern the traced values fit but are too few to pin down (2 points fit any line)."""

    kind = "unpinned"

    def check(self, read: ConstRead) -> str | None:
        return None if read.thin_evidence else "the traced values pin the pattern down"

    def produce(self, read: ConstRead) -> Blocker:
        assert read.generator is not None and read.thin_evidence is not None
        return _unpinned(read, read.thin_evidence, set())


class MovingSize(Rule):
    """A start or band bound equal to a traced size that no cache length explains."""

    kind = "unpinned"

    def check(self, read: ConstRead) -> str | None:
        return None if read.moving_size else "no start or bound equals a traced size alone"

    def produce(self, read: ConstRead) -> Blocker:
        assert read.moving_size is not None
        gap, atoms = read.moving_size
        return _unpinned(read, gap, atoms)


def _unpinned(read: ConstRead, gap: str, atoms: set[str]) -> Blocker:
    assert read.generator is not None
    pattern = read.generator.describe()
    why = why_text("unpinned", tensor=read.use.tensor, old=read.old, pattern=pattern, gap=gap)
    return read.blocker("unpinned", why, read.atoms | atoms)


# -- patterns: what a constant becomes ------------------------------------------------------------


class SizeConstant(Rule):
    """Integer sizes (a Reshape, Expand, Slice ... shape) become a Shape computation."""

    kind = "size"

    def check(self, read: ConstRead) -> str | None:
        return None if read.use.kind == "size" else "not a size constant"

    def produce(self, read: ConstRead) -> Change:
        a, sol, array = read.context.analysis, read.context.solution, read.use.array
        flat = array.reshape(-1).tolist()
        values = [
            r if r is not None else Dim.const(int(v))
            for r, v in zip(read.resolved, flat, strict=True)
        ]
        old = fmt_values([int(v) for v in flat]) if array.ndim else str(int(flat[0]))
        new = values_text(a, sol, values) if array.ndim else dim_text(a, sol, values[0])
        return read.change("size", old, new, values)


class Regenerated(Rule):
    """A data constant rebuilt at run time by its generator (see :mod:`.generators`); each
    subclass is one generator kind, matched only where the traced values pin it down."""

    def check(self, read: ConstRead) -> str | None:
        gen = read.generator
        if read.use.kind != "data" or gen is None:
            return "no generator reproduces it"
        if read.thin_evidence or read.moving_size:
            return "its traced values do not pin the generator down"
        return self.matches(read, gen)

    def matches(self, read: ConstRead, gen: Generator) -> str | None:
        raise NotImplementedError

    def produce(self, read: ConstRead) -> Change:
        a, sol, gen = read.context.analysis, read.context.solution, read.generator
        assert gen is not None
        dtype = dtype_name(elem_type_of(read.use.array))
        new = f"{dtype}{values_text(a, sol, read.dims)} ({gen.describe()})"
        return read.change("data", read.old, new, read.dims)


class BatchIndices(Regenerated):
    """An index that enumerates a batch traced at 1 (:mod:`.batch_indices`): a Range."""

    kind = "batch-indices"

    def matches(self, read: ConstRead, gen: Generator) -> str | None:
        return None if read.enumerates is not None else "it enumerates no batch"


class CacheOffset(Regenerated):
    """A count, band or rotary table that starts at a cache length (:mod:`.cache_offsets`)."""

    kind = "cache-offset"

    def matches(self, read: ConstRead, gen: Generator) -> str | None:
        return None if gen.offset is not None else "it does not move with a cache length"


def _moving(gen: Generator) -> bool:
    return any(np.any(step != 0) for step in gen.steps.values())


class Broadcast(Regenerated):
    """One row repeated along the symbolic axes: Expand."""

    kind = "broadcast"

    def matches(self, read: ConstRead, gen: Generator) -> str | None:
        return None if gen.kind == "affine" and not _moving(gen) else "it is no broadcast"


class RangeGrid(Regenerated):
    """``base + sum_k step_k * i_k``: position ids, an index grid."""

    kind = "range"

    def matches(self, read: ConstRead, gen: Generator) -> str | None:
        return None if gen.kind == "affine" and _moving(gen) else "it counts along no axis"


class RotaryTable(Regenerated):
    """``amp * cos(i * freq)`` / ``sin(i * freq)``: rotary tables."""

    kind = "rotary"

    def matches(self, read: ConstRead, gen: Generator) -> str | None:
        return None if gen.kind in ("cos", "sin") else "it is no cos/sin table"


class BandMask(Regenerated):
    """Two values split by ``lo <= j - i <= hi``: a causal or sliding-window mask."""

    kind = "band"

    def matches(self, read: ConstRead, gen: Generator) -> str | None:
        return None if gen.kind == "band" else "it is no band mask"


class HeadTile(Regenerated):
    """A block repeated along ``batch*heads``: Tile."""

    kind = "tile"

    def matches(self, read: ConstRead, gen: Generator) -> str | None:
        return None if gen.kind == "tile" else "it repeats no block"


# -- scalars no rule sees ---------------------------------------------------------------------

def count_starts(context: PlanContext) -> list[Change]:
    """Integer scalars added to positions counted over a mask (``cumsum(mask) + past``:
    RoBERTa's padding-aware position ids with a cache, whose ``past_key_values_length`` is a
    Python int the export folds) whose value is the traced length of a cache, the only symbol of
    that size (``context.starts``): they move with that length, as a count's start does. Kept,
    every position past the traced cache length was off by the difference (CamemBERT with a
    cache: 0.56 against an output scale of 0.89 at past 7, both exporters, exit 0). The shape
    analysis reads no size in such a scalar, so no rule sees it: the graph is scanned here."""
    a = context.analysis
    found: list[Change] = []
    for index, node in enumerate(a.model.graph.node):
        if node.op_type not in ("Add", "Sub") or len(node.input) != 2:
            continue
        for k, name in enumerate(node.input):
            arr = a.const(name)
            if arr is None or arr.size != 1 or arr.dtype.kind not in "iu":
                continue
            value = int(arr.reshape(-1)[0])
            sym = context.starts.get(value)
            if sym is None or value < 1 or not _counted(a, node.input[1 - k]):
                continue
            use = ConstUse(node.name, node.op_type, index, k, name, "data", arr, [None] * arr.ndim)
            gen = Generator("affine", [], base=arr, offset=("base", Dim.sym(sym), value))
            old = f"{dtype_name(elem_type_of(arr))} {value}"
            new = f"{sym} (positions counted over the mask start there)"
            dims = [Dim.const(n) for n in arr.shape]
            found.append(
                Change("", node.name, node.op_type, k, name, "data", old, new, dims, use, gen)
            )
    return found


def _counted(a: ShapeAnalysis, tensor: str) -> bool:
    """Whether ``tensor`` is a CumSum's output (through Casts): positions counted over a mask."""
    made = a.producers.get(tensor)
    while made is not None and made[1].op_type in ("Cast", "Identity"):
        made = a.producers.get(made[1].input[0])
    return made is not None and made[1].op_type == "CumSum"

#: The rules for one constant read, in the order they are tried (the first that applies decides).
CONST_RULES: list[Rule] = [
    CoincidentSize(),
    OnePoint(),
    OneRow(),
    NoTracedSize(),
    SizeConstant(),
    BoundedTable(),
    RelativePositionBias(),
    TableCut(),
    ThinEvidence(),
    MovingSize(),
    BatchIndices(),
    CacheOffset(),
    Broadcast(),
    RangeGrid(),
    RotaryTable(),
    BandMask(),
    HeadTile(),
]

from onnxsurgery.passes.symbolize import indexed_tables  # noqa: E402, F401  (registers its rule)
