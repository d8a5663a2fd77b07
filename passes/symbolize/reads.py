"""What symbolize decides one constant read against, and what it decides.

:class:`PlanContext` holds the analysis and its solution with what the plan worked out around
them (batch enumerations, coincident sizes, bounds, relative tables); :class:`ConstRead` is one
constant an op reads as the rules of :mod:`.rules` see it (its dims solved, its generator
matched, the evidence behind it); :class:`Change` is what a rule gives for it: the constant
becomes a computation of the inputs' shapes (a size) or is rebuilt by its generator (data).
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from onnxsurgery.model.dtypes import dtype_name, elem_type_of
from onnxsurgery.passes.symbolize.blockers import Blocker
from onnxsurgery.passes.symbolize.cache_offsets import band_bound_gap, cache_symbols, offset_gap
from onnxsurgery.passes.symbolize.coincident import Coincidence
from onnxsurgery.passes.symbolize.generators import (
    Generator,
    evidence_gap,
    flat_strides,
    match_generator,
)
from onnxsurgery.passes.symbolize.table_generator import broadcast_rest
from onnxsurgery.passes.symbolize.trig_tables import sinusoid
from onnxsurgery.passes.symbolize.wording import (
    fix_lead,
    fix_text,
    fmt_values,
    sym_tuple,
    symbol_hint,
)
from onnxsurgery.shapes.analysis import ConstUse, ShapeAnalysis
from onnxsurgery.shapes.dims import Dim, dim_product
from onnxsurgery.shapes.solver import Solution

__all__ = ["Change", "ConstRead", "PlanContext"]


@dataclass
class Change:
    """One constant read that becomes a computation from the inputs' shapes."""

    graph: str
    node: str
    op: str
    input_index: int
    input: str
    kind: str  # "size": integer elements; "data": dims of a data constant
    old: str
    new: str
    values: list[Dim]
    use: ConstUse = field(repr=False)  # the constant read
    rebuild: Generator | None = None  # data: how the constant is regenerated at run time
    #: size: the bounded symbols its values are exact within (``seq`` -> 8, a pad to one block,
    #: :mod:`.one_block`); the rewrite makes a size over a bound fail
    guard: dict[str, int] = field(default_factory=dict)

    def __str__(self) -> str:
        where = f"{self.op} {self.node!r} input {self.input_index} ({self.input})"
        return f"{where}: {self.old} -> {self.new}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "graph": self.graph or None,
            "node": self.node,
            "op": self.op,
            "input_index": self.input_index,
            "input": self.input,
            "kind": self.kind,
            "old": self.old,
            "new": self.new,
        }


@dataclass
class PlanContext:
    """What every constant read is decided against: the analysis, its solution, the symbols
    whose rows are independent (``rows``), the batch enumerations the graph shows (``forced``:
    ``id(use)`` -> (axis, step) of one traced at 1; ``structural``: every one, by ``id(use)``)."""

    analysis: ShapeAnalysis
    solution: Solution
    rows: set[str] = field(default_factory=set)
    forced: dict[int, tuple[int, np.ndarray]] = field(default_factory=dict)
    structural: Set[int] = frozenset()
    #: sizes kept at a traced value a symbol fits too (:mod:`.coincident`), by ``id(use)``
    coincident: dict[int, list[Coincidence]] = field(default_factory=dict)
    #: those settled: kept on purpose (``keep=``), or tied to their symbol (``generalize``)
    settled: list[Coincidence] = field(default_factory=list)
    #: each bounded symbol's upper bound (``seq<=traced``, :class:`BoundedTable`)
    bounds: dict[str, int] = field(default_factory=dict)
    #: the bounded symbols a table was sliced under (the others' bounds are not needed)
    used_bounds: set[str] = field(default_factory=set)
    #: relative-position sinusoids tied to the size they follow (:mod:`.relative_tables`):
    #: ``id(use)`` -> (axis, the distance of row 0, its traced value)
    relative: dict[int, tuple[int, Dim, int]] = field(default_factory=dict)

    @cached_property
    def cache(self) -> set[str]:
        """The symbols that are a cache axis's length (:func:`~.cache_offsets.cache_symbols`)."""
        return cache_symbols(self.analysis)

    @cached_property
    def starts(self) -> dict[int, str]:
        """Traced sizes a cos/sin table may start at: a cache length's, if no other symbol
        (not a batch) has that size."""
        a, rows = self.analysis, self.rows
        starts: dict[int, str] = {}
        for sym in sorted(self.cache - set(rows)):
            n = a.atoms[sym].traced
            if sum(1 for s in a.symbols if s not in rows and a.atoms[s].traced == n) == 1:
                starts[n] = sym
        return starts


@dataclass
class ConstRead:
    """One constant read (``use``) as the rules see it: its dims solved, its generator matched."""

    context: PlanContext
    use: ConstUse

    @cached_property
    def resolved(self) -> list[Dim | None]:
        """Each element (size) or axis (data) as the solver resolves it; None: no unknown (a
        Slice bound counted from the end: minus its unknown, :attr:`~ConstUse.negated`)."""
        sol, negated = self.context.solution, self.use.negated
        return [
            None if x is None else -sol.resolve(Dim.sym(x)) if k in negated else sol.resolve(Dim.sym(x))
            for k, x in enumerate(self.use.atoms)
        ]

    @cached_property
    def dims(self) -> list[Dim]:
        """A data constant's dims: resolved, else the traced length."""
        shape = self.use.array.shape
        return [
            r if r is not None else Dim.const(n) for r, n in zip(self.resolved, shape, strict=True)
        ]

    @cached_property
    def symbolic_axes(self) -> list[int]:
        return [k for k, d in enumerate(self.dims) if not d.is_const()]

    @property
    def old(self) -> str:
        """A data constant as a user reads it: dtype and traced shape."""
        array = self.use.array
        return f"{dtype_name(elem_type_of(array))}{fmt_values(list(array.shape))}"

    @property
    def enumerates(self) -> tuple[int, np.ndarray] | None:
        """(axis, step) where the constant enumerates a batch traced at 1."""
        return self.context.forced.get(id(self.use))

    @cached_property
    def atoms(self) -> set[str]:
        """The unknowns on the symbolic axes."""
        return set().union(*(self.dims[k].atoms() for k in self.symbolic_axes))

    @cached_property
    def generator(self) -> Generator | None:
        """How the constant is regenerated along its symbolic axes, or None (no pattern)."""
        if self.enumerates is not None:
            return self._enumeration()
        relative = self.context.relative.get(id(self.use))
        if relative is not None:
            axis, start, traced = relative
            arr = self.use.array
            gen = sinusoid(arr, [axis], start=traced)
            rest = [k for k in self.symbolic_axes if k != axis]
            if gen is None or axis not in self.symbolic_axes or any(arr.shape[k] > 1 for k in rest):
                return None
            gen.offset = ("phase", start, traced)
            return broadcast_rest(gen, self.symbolic_axes)  # a leading 1 read as a batch
        blocks = {}  # an axis of size symbols * c may repeat a block of c
        for k in self.symbolic_axes:
            terms = self.dims[k].terms
            if len(terms) == 1:
                ((mono, coef),) = terms.items()
                if mono and coef > 1:
                    blocks[k] = coef
        starts = self.context.starts
        arr = self.use.array
        tables = []  # a rotary table traced at 2 positions: its twin or a longer one it begins
        if arr.dtype.kind == "f" and any(arr.shape[k] == 2 for k in self.symbolic_axes):
            tables = [u.array for u in self.context.analysis.uses if u.array.ndim == arr.ndim]
        gen = match_generator(arr, self.symbolic_axes, blocks, tuple(starts), tables)
        if gen is not None and gen.phase is not None:
            gen.offset = ("phase", Dim.sym(starts[gen.phase]), gen.phase)
        if gen is not None and gen.kind == "affine" and self.flat_index:
            gen.strides = flat_strides(self.use.array, self.dims)
        return gen

    @cached_property
    def flat_index(self) -> bool:
        """Gather indices 0 .. n-1 in order over an axis the solver sized as the whole grid
        (the product of their dims): every element of a flattened tensor, read back in place."""
        use, a = self.use, self.context.analysis
        if use.op != "Gather" or use.input_index != 1 or use.graph or not self.symbolic_axes:
            return False
        arr = use.array
        if arr.dtype.kind not in "iu" or not np.array_equal(arr.reshape(-1), np.arange(arr.size)):
            return False
        node = a.model.graph.node[use.node_index]
        data = a.tensors.get(node.input[0])
        if data is None or data.shape is None:
            return False
        attr = next((x.i for x in node.attribute if x.name == "axis"), 0)
        axis = data.shape[attr % len(data.shape)] if data.shape else Dim.const(0)
        return self.context.solution.resolve(axis) == dim_product(self.dims)

    def _enumeration(self) -> Generator | None:
        """A batch enumeration traced at 1: its step comes from the gather it indexes."""
        assert self.enumerates is not None
        axis, step = self.enumerates
        rest = [k for k in self.symbolic_axes if k != axis]
        array = self.use.array
        gen = match_generator(array, rest) if rest else Generator("affine", [], array, {})
        if gen is None or gen.kind != "affine":
            return None
        gen.axes = sorted([*gen.axes, axis])
        gen.steps[axis] = step
        return gen

    @cached_property
    def thin_evidence(self) -> str | None:
        """Why the traced values are too few to pin the generator down (:func:`evidence_gap`)."""
        gen = self.generator
        if gen is None or self.enumerates is not None:
            return None
        rows = self.context.rows
        row_axes = {
            k for k in self.symbolic_axes if self.dims[k].atoms() and self.dims[k].atoms() <= rows
        }
        return evidence_gap(gen, self.use.array, row_axes, id(self.use) in self.context.structural)

    @cached_property
    def moving_size(self) -> tuple[str, set[str]] | None:
        """A start or band bound equal to a traced size that the trace cannot tell from a fixed
        value, with the symbols it names; where a cache length settles it, the generator's
        ``offset`` is set instead and this is None."""
        gen = self.generator
        if gen is None or self.enumerates is not None or self.thin_evidence:
            return None
        c = self.context
        return band_bound_gap(c.analysis, gen, self.dims, c.cache) or offset_gap(
            c.analysis, gen, c.rows, c.cache
        )

    @property
    def coincidences(self) -> list[Coincidence]:
        """The sizes of this read kept at a traced value that a symbol fits too."""
        return self.context.coincident.get(id(self.use), [])

    def blocker(self, kind: str, why: str, atoms: set[str], **fix_fields: object) -> Blocker:
        """A blocker at this read: ``why``, and what to do for the symbols ``atoms`` name."""
        a, use = self.context.analysis, self.use
        syms = symbol_hint(a.symbols, atoms)
        fix = fix_lead(kind, syms=syms, **fix_fields) + fix_text(a, syms)
        return Blocker(use.node, use.op, use.tensor, self.old, why, fix, sym_tuple(syms), kind)

    def change(self, kind: str, old: str, new: str, values: list[Dim]) -> Change:
        use = self.use
        rebuild = self.generator if kind == "data" else None
        return Change(
            use.graph, use.node, use.op, use.input_index, use.tensor, kind, old, new, values, use,
            rebuild,
        )  # fmt: skip
