"""What ``symbolize`` would change in a static model, and what blocks it, without editing it.

    plan = plan_symbolize(model, {"x": {0: "batch"}})
    for change in plan.changes:   # node, op, input, old value -> new symbolic value
        print(change)
    for blocker in plan.blockers:  # node, op, input, traced value, why, what to do
        print(blocker)

:func:`plan_symbolize` runs symbolic shape propagation (:mod:`onnxsurgery.shapes.propagation`)
and unification (:mod:`onnxsurgery.shapes.solver`), then turns the result into
:class:`Change` entries (constants that must become computations) and :class:`Blocker` entries
(what cannot be generalized: conflicts, constants whose values differ along a symbolic axis, loops
unrolled at trace time). :func:`onnxsurgery.passes.symbolize.rewrite.apply_plan` applies a plan.
The plan has ``to_dict()`` for JSON reports and ``__rich__()`` for the terminal (:mod:`.plan_view`).
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from typing import Any

import onnx

from onnxsurgery.passes.symbolize.baked import GridTable, grid_resizes, grid_table
from onnxsurgery.passes.symbolize.batch_indices import (
    batch_like_symbols,
    find_batch_indices,
)
from onnxsurgery.passes.symbolize.block_padding import hold_runtime_blocks
from onnxsurgery.passes.symbolize.blockers import Blocker, group_blockers
from onnxsurgery.passes.symbolize.bounds import symbol_bounds
from onnxsurgery.passes.symbolize.cache_offsets import (
    cache_index_relations,
    slice_end_relations,
    window_starts,
)
from onnxsurgery.passes.symbolize.coincident import (
    Ambiguity,
    Coincidence,
    ambiguous_hints,
    find_coincidences,
    tie,
)
from onnxsurgery.passes.symbolize.conflict_readings import broadcast_readings, conflict_readings
from onnxsurgery.passes.symbolize.graph_blockers import find_blockers
from onnxsurgery.passes.symbolize.one_block import (
    advise_bound,
    read_under_bounds,
    remainder_bounds,
)
from onnxsurgery.passes.symbolize.reads import Change, ConstRead, PlanContext
from onnxsurgery.passes.symbolize.relative_tables import relative_tables
from onnxsurgery.passes.symbolize.rules import count_starts, decide
from onnxsurgery.passes.symbolize.wording import fix_lead
from onnxsurgery.shapes.analysis import Constraint, ShapeAnalysis
from onnxsurgery.shapes.dims import Dim, dim_product
from onnxsurgery.shapes.propagation import propagate
from onnxsurgery.shapes.solver import Solution, misfollowed, solve, unmatched_ones

__all__ = [
    "Change",
    "Blocker",
    "SymbolizePlan",
    "plan_symbolize",
    "normalize_axes",
    "default_axes",
]


def normalize_axes(dynamic_axes: dict[str, Any]) -> dict[str, dict[int, str]]:
    """``{input: {axis: name}}`` or torch's list form ``{input: [axis, ...]}`` as one mapping.

    In the list form axis 0 is named ``batch`` and axis ``k`` ``<input>_dim<k>``.
    """
    out: dict[str, dict[int, str]] = {}
    if not isinstance(dynamic_axes, dict):
        raise TypeError(
            f"dynamic_axes must be a mapping of input name to axes, got {dynamic_axes!r}"
        )
    for name, spec in dynamic_axes.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"dynamic_axes keys must be input names, got {name!r}")
        if isinstance(spec, (list, tuple)):
            spec = {a: ("batch" if int(a) == 0 else f"{name}_dim{a}") for a in spec}
        if not isinstance(spec, dict):
            raise TypeError(
                f"dynamic_axes[{name!r}] must be a list of axes or {{axis: name}}, got {spec!r}"
            )
        axes: dict[int, str] = {}
        for axis, sym in spec.items():
            try:
                ax = int(axis)
            except (TypeError, ValueError):
                raise ValueError(f"dynamic_axes[{name!r}]: axis {axis!r} is not an int") from None
            if not isinstance(sym, str) or not sym.isidentifier():
                raise ValueError(
                    f"dynamic_axes[{name!r}][{ax}]: symbol {sym!r} must be a name like batch or seq"
                )
            axes[ax] = sym
        out[name] = axes
    return out


@dataclass
class SymbolizePlan:
    """The preview: symbols, changes, blockers, symbolic output shapes, notes."""

    axes: dict[str, dict[int, str]]
    symbols: dict[str, int]
    changes: list[Change]
    blockers: list[Blocker]
    outputs: dict[str, list[str | int | None] | None]
    notes: list[str]
    analysis: ShapeAnalysis = field(repr=False)
    solution: Solution = field(repr=False)
    #: symbols whose rows are independent (batches): given by the user or found in the graph
    rows: set[str] = field(default_factory=set)
    #: symbols the graph ties to others (``total`` -> ``past + seq``): never varied alone
    relations: dict[str, Dim] = field(default_factory=dict)
    #: the check's result (per-symbol verification levels), set by the pass after the check
    verification: Any = field(default=None, repr=False)
    #: each bounded symbol's upper bound (``seq<=traced``): sizes over it fail at run time
    bounds: dict[str, int] = field(default_factory=dict)
    #: blockers for 'same' padding baked at the traced size (blocker node -> the window op, and
    #: the Pad node before it or None), each rewritable as ``auto_pad=SAME_UPPER``: reference
    #: cases can decide between that and the fixed pads as exported
    same_padding: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    #: blockers for a learned table added whole whose length is a strided op's traced grid
    #: (DINOv2's position embeddings): blocker node -> :class:`GridTable`; reference cases can
    #: confirm it is resized to the grid at other sizes, as torch code that the export skipped
    grid_tables: dict[str, GridTable] = field(default_factory=dict)
    #: sizes kept at a traced value a symbol fits too (:mod:`.coincident`): blocked, kept on
    #: purpose (``keep=``), or, in a plan made with ``generalize``, tied to the symbol
    coincidences: list[Coincidence] = field(default_factory=list)
    #: sizes a hint tied to a symbol where the fixed traced value fits too: their symbols are
    #: verified ``ambiguous`` until reference cases at another size confirm them
    ambiguities: list[Ambiguity] = field(default_factory=list)
    #: MatMuls whose B folds A's leading batch dims (``ShapeAnalysis.unfolded``) where they
    #: are not 1 in the solution: node index -> how many; the rewrite unfolds B before them
    unfolded: dict[int, int] = field(default_factory=dict)

    @property
    def ambiguous(self) -> dict[str, list[str]]:
        """Each symbol a choice between readings rests on, with what else fits."""
        out: dict[str, list[str]] = {}
        for amb in self.ambiguities:
            for sym in sorted(amb.symbols or amb.chosen.atoms() & self.symbols.keys()):
                out.setdefault(sym, []).append(str(amb))
        return out

    @property
    def ok(self) -> bool:
        return not self.blockers

    def to_dict(self) -> dict[str, Any]:
        return {
            "axes": {k: {str(a): s for a, s in v.items()} for k, v in self.axes.items()},
            "symbols": dict(self.symbols),
            "changes": [c.to_dict() for c in self.changes],
            "blockers": [b.to_dict() for b in self.blockers],
            "blocker_groups": [g.to_dict() for g in group_blockers(self.blockers)],
            "outputs": self.outputs,
            "notes": list(self.notes),
            "rows": sorted(self.rows),
            "relations": {s: str(v) for s, v in self.relations.items()},
            "ambiguous": self.ambiguous,
            "verification": (
                self.verification.to_dict() if self.verification is not None else None
            ),
            **({"bounds": dict(self.bounds)} if self.bounds else {}),  # seq<=8: over it fails
        }

    def __rich__(self):
        return self.view()

    def view(self, verbose: bool = False):
        """The terminal form (``inspect``; :func:`.plan_view.plan_view`)."""
        from onnxsurgery.passes.symbolize.plan_view import plan_view

        return plan_view(self, verbose)


# ------------------------------------------------------------------------------------------------


def _output_dims(a: ShapeAnalysis, sol: Solution) -> dict[str, list[str | int | None] | None]:
    outs: dict[str, list[str | int | None] | None] = {}
    for o in a.model.graph.output:
        info = a.tensors.get(o.name)
        if info is None or info.shape is None:
            outs[o.name] = None
            continue
        dims: list[str | int | None] = []
        for d in info.shape:
            r = sol.resolve(d)
            if r.value is not None:
                dims.append(int(r.value))
            elif all(x in a.symbols for x in r.atoms()):
                dims.append(str(r))
            else:
                dims.append(None)
        outs[o.name] = dims
    return outs


def default_axes(model: onnx.ModelProto) -> dict[str, dict[int, str]]:
    """What ``symbolize`` alone means: the model's own named dims where its inputs declare any
    (``[batch, sequence]``, ``state [2, batch, 128]``: silero-vad's, whose axis 0 of the state is
    its two directions, no batch), each under its own name; else axis 0 of every graph input of
    rank >= 1, as ``batch``."""
    inits = {i.name for i in model.graph.initializer}
    named = {
        vi.name: {k: d.dim_param for k, d in enumerate(vi.type.tensor_type.shape.dim) if d.dim_param}
        for vi in model.graph.input
        if vi.name not in inits
    }
    if any(named.values()):
        return {name: spec for name, spec in named.items() if spec}
    return {
        vi.name: {0: "batch"}
        for vi in model.graph.input
        if vi.name not in inits and len(vi.type.tensor_type.shape.dim) >= 1
    }


def plan_symbolize(
    model: onnx.ModelProto,
    dynamic_axes: dict[str, Any] | None = None,
    rows: set[str] | None = None,
    *,
    bare: onnx.ModelProto | None = None,
    keep: Set[str] = frozenset(),
    generalize: bool = False,
    bounds: Mapping[str, int | None] | None = None,
) -> SymbolizePlan:
    """Preview symbolize on ``model`` for ``dynamic_axes`` ({input: {axis: name}} or {input: [axes]};
    None: axis 0 of every input as ``batch``, like ``symbolize`` alone). ``rows``: the symbols
    whose rows are independent (batches); None finds them in the graph
    (:func:`~.batch_indices.batch_like_symbols`). ``bare``: ``weightless(model)``, where the
    caller has it (for shape inference; else made here). A size kept at a traced value that a
    symbol fits too (:mod:`.coincident`) is a blocker, unless a node in ``keep`` reads or is
    sized by it (fixed on purpose); ``generalize`` ties those to the symbol instead (the other
    reading, for reference cases to choose). ``bounds``: each bounded symbol's upper bound (None:
    its traced size), under which a table folded at the traced length is sliced to the size.

    Nothing is edited. Raises ValueError for an input or axis the model does not have, or one
    name given to axes of different traced sizes.
    """
    axes = normalize_axes(default_axes(model) if dynamic_axes is None else dynamic_axes)
    analysis, solved = _propagated(model, axes, bare)
    asked = symbol_bounds(analysis, bounds or {})
    context = plan_context(analysis, rows, keep, generalize, asked, solved)
    sol, row_syms = context.solution, context.rows
    changes, blockers = _decide_constants(context)
    graph_wide = find_blockers(analysis, sol)  # the graph's blockers: .graph_blockers.GRAPH_RULES
    advise_bound(graph_wide, analysis, sol, asked)
    leading = [f.blocker for f in graph_wide if f.rule.leads]
    blockers = leading + blockers + [f.blocker for f in graph_wide if not f.rule.leads]
    symbols = {s: analysis.atoms[s].traced for s in analysis.symbols}
    outputs = _output_dims(analysis, sol)
    notes = _notes(analysis, sol) + _untied_outputs(row_syms, symbols, outputs)
    relations = {s: v for s, (v, _) in sol.relations.items()}
    relations.update(cache_index_relations(analysis, sol, changes, row_syms, context.cache))
    relations.update(
        slice_end_relations(analysis, sol, changes, row_syms, context.cache, relations.keys())
    )
    plan = SymbolizePlan(
        axes, symbols, changes, blockers, outputs, notes, analysis, sol, row_syms, relations
    )
    plan.bounds = {s: b for s, b in context.bounds.items() if s in context.used_bounds}
    plan.same_padding = dict(
        alt for f in graph_wide if (alt := f.rule.alternative(f.site)) is not None
    )
    plan.grid_tables = _grid_tables(analysis, sol, blockers)
    plan.coincidences = [c for found in context.coincident.values() for c in found]
    plan.coincidences += context.settled
    plan.ambiguities = ambiguous_hints(analysis, sol, row_syms)
    plan.unfolded = _unfolded(analysis, sol)
    plan.notes += _decision_notes(plan, context, keep)
    return plan


#: propagations at most: the first, then again while a broadcast followed the wrong operand
MAX_PROPAGATIONS = 4


def _propagated(
    model: onnx.ModelProto, axes: dict[str, dict[int, str]], bare: onnx.ModelProto | None
) -> tuple[ShapeAnalysis, Solution]:
    """The analysis of ``model`` and its first solution; propagated again while a broadcast
    whose operands are all 1 at the traced size followed a dim the solution made the constant 1
    where another operand varies (:func:`~onnxsurgery.shapes.solver.misfollowed`), that one
    followed then (at most :data:`MAX_PROPAGATIONS` times)."""
    analysis = propagate(model, axes, bare=bare)
    sol = solve(analysis)
    for _ in range(MAX_PROPAGATIONS - 1):
        wrong = misfollowed(analysis, sol)
        if not wrong:
            break
        analysis = propagate(model, axes, bare=bare, follow={**analysis.follow, **wrong})
        sol = solve(analysis)
    for _ in range(MAX_PROPAGATIONS):
        ties = unmatched_ones(analysis, sol)
        if not ties:
            break
        analysis.constraints += ties
        trial = solve(analysis)
        if len(trial.conflicts) > len(sol.conflicts):
            del analysis.constraints[-len(ties) :]  # the graph does not fit them: as it was
            break
        sol = trial
    return analysis, sol


def _decision_notes(plan: SymbolizePlan, context: PlanContext, keep: Set[str]) -> list[str]:
    """What the plan decided that the user did not ask for and should know: bounds no table
    needs, MatMuls whose second input is unfolded, sizes kept fixed on purpose (``keep``)."""
    nodes = plan.analysis.model.graph.node
    return [
        *(
            f"{s}<={b}: no table folded at the traced length needs it, so {s} is left unbounded"
            for s, b in context.bounds.items()
            if s not in context.used_bounds
        ),
        *(
            f"MatMul {nodes[i].name!r}: its second input is viewed with the first's {n} leading "
            "batch dim(s) unfolded from its first dim before it (a bmm whose views the export "
            "dropped at the traced size)"
            for i, n in sorted(plan.unfolded.items())
        ),
        *(
            f"{c.sets[0]} {c.sets[1]!r}: {c.value} kept fixed as traced, though {c.reading} "
            "fits too"
            for c in context.settled
            if c.nodes() & keep
        ),
    ]


def _matmul_broadcasts(analysis: ShapeAnalysis, sol: Solution) -> Solution:
    """Where the solution has conflicts, read the MatMuls that fold A's leading batch dims into
    B's first dim (``ShapeAnalysis.foldable``) as broadcasts again (B a table shared by the
    batch), all at once; kept when that leaves a strict subset of the conflicts, taken back
    otherwise (a conflict is refused, never a wrong model)."""
    if not sol.conflicts or not analysis.unfolded:
        return sol
    saved = list(analysis.constraints)
    for index in analysis.unfolded:
        _, folded, broadcast = analysis.foldable[index]
        at = next((i for i, c in enumerate(analysis.constraints) if c is folded), None)
        if at is not None:
            analysis.constraints[at] = broadcast
    trial = solve(analysis)
    if {id(k.constraint) for k in trial.conflicts} < {id(k.constraint) for k in sol.conflicts}:
        analysis.unfolded = {}
        return trial
    analysis.constraints[:] = saved
    return sol


def _unfolded(analysis: ShapeAnalysis, sol: Solution) -> dict[int, int]:
    """The MatMuls whose B must be unfolded: A's leading batch dims it folds are not 1."""
    out: dict[int, int] = {}
    for index, ext in analysis.unfolded.items():
        info = analysis.tensors.get(analysis.model.graph.node[index].input[0])
        if info is None or info.shape is None:
            continue
        if sol.resolve(dim_product(info.shape[:ext])) != Dim.const(1):
            out[index] = ext
    return out


def plan_context(
    analysis: ShapeAnalysis,
    rows: set[str] | None,
    keep: Set[str] = frozenset(),
    generalize: bool = False,
    bounds: Mapping[str, int] | None = None,
    solved: Solution | None = None,
) -> PlanContext:
    """Solve the analysis with every constant that enumerates a batch (:mod:`.batch_indices`)
    tied to it, a Resize's sizes folded at the traced patch grid tied to the grid
    (:func:`~.baked.grid_resizes`), and a pad to one block read from the size within
    ``bounds`` (:func:`~.one_block.read_under_bounds`): the context the constant reads are
    decided in (``rows``, ``keep`` and ``generalize``: as :func:`plan_symbolize` takes them;
    ``solved``: the analysis solved as it is, where the caller has solved it)."""
    sol = _matmul_broadcasts(analysis, solved if solved is not None else solve(analysis))
    if sol.conflicts and grid_resizes(analysis, sol):
        sol = solve(analysis)
    while read_under_bounds(analysis, sol, bounds or {}):  # a remainder of a remainder: again
        sol = solve(analysis)
    # after the bounded reading: a remainder it read as ``block - seq`` pads to the block itself
    if hold_runtime_blocks(analysis, sol):
        sol = solve(analysis)
    row_syms = batch_like_symbols(analysis, rows)
    if window_starts(analysis, sol):
        sol = solve(analysis)
    if sol.conflicts and (
        conflict_readings(analysis, sol, row_syms) or broadcast_readings(analysis, sol)
    ):
        sol = solve(analysis)
    batch_indices: list = []
    while True:  # a gather of a gathered batch is found once the first one is tied to it
        done = {id(bi.use) for bi in batch_indices}
        new = [bi for bi in find_batch_indices(analysis, sol, row_syms) if id(bi.use) not in done]
        if not new:
            break
        for bi in new:
            atom = bi.use.atoms[bi.axis]
            assert atom is not None  # a constant read as data has an unknown on every axis
            analysis.constraints.append(
                Constraint(
                    Dim.sym(atom) - Dim.sym(bi.symbol),
                    bi.use.node,
                    bi.use.op,
                    f"constant {bi.use.tensor!r} indexes {bi.symbol} rows in {bi.gather!r}",
                    False,
                    Dim.sym(atom),
                    Dim.sym(bi.symbol),
                )
            )
        batch_indices += new
        sol = solve(analysis)
    forced = {id(bi.use): (bi.axis, bi.step) for bi in batch_indices if bi.step is not None}
    structural = {id(bi.use) for bi in batch_indices}
    relative, windows = relative_tables(analysis, sol, row_syms)
    if relative or windows:
        sol = solve(analysis)
    open_, settled, tied = _coincidences(analysis, sol, row_syms, keep, generalize)
    if tied:
        sol = solve(analysis)
        # a size tied to its symbol only now may be what a pad to one block pads
        # (``x[:, :, :8]`` read as ``seq``, then padded to one block of 64)
        while read_under_bounds(analysis, sol, bounds or {}):
            sol = solve(analysis)
    context = PlanContext(analysis, sol, row_syms, forced, structural, open_)
    context.relative = {id(t.use): (t.axis, t.start, t.traced_start) for t in relative}
    context.settled = settled
    context.bounds = dict(bounds or {})
    context.used_bounds |= remainder_bounds(analysis, sol) & context.bounds.keys()
    return context


def _coincidences(
    analysis: ShapeAnalysis, sol: Solution, rows: Set[str], keep: Set[str], generalize: bool
) -> tuple[dict[int, list[Coincidence]], list[Coincidence], bool]:
    """The coincident sizes (:func:`~.coincident.find_coincidences`) still open, by ``id(use)``;
    those settled: kept on purpose (a node in ``keep``), or tied to their symbol in
    ``analysis`` (a batch's rows, or any with ``generalize``); and whether any was tied (the
    caller solves again)."""
    open_: dict[int, list[Coincidence]] = {}
    settled: list[Coincidence] = []
    tied = False
    for c in find_coincidences(analysis, sol, rows):
        if c.nodes() & keep and not c.rows:
            settled.append(c)
        elif generalize or c.rows:
            tie(analysis, c.atom, c.reading, c.use.node, c.use.op, "follows its symbol")
            tied = True
            if not c.rows:
                settled.append(c)
        else:
            open_.setdefault(id(c.use), []).append(c)
    return open_, settled, tied


def _decide_constants(context: PlanContext) -> tuple[list[Change], list[Blocker]]:
    """Every constant read, decided by the first of :data:`~.rules.CONST_RULES` that applies."""
    changes: list[Change] = []
    blockers: list[Blocker] = []
    for use in context.analysis.uses:
        made = decide(ConstRead(context, use))
        if isinstance(made, Blocker):
            blockers.append(made)
        elif made is not None:
            changes.append(made)
    changes += count_starts(context)  # scalars no rule sees (positions counted over a mask)
    return changes, blockers


def _notes(analysis: ShapeAnalysis, sol: Solution) -> list[str]:
    """The analysis's notes (each kind once), then what the solver assumed or related."""
    notes = []
    seen: set[tuple[str, str]] = set()
    for node, op, text in analysis.notes:
        if (op, text) in seen:
            continue
        seen.add((op, text))
        notes.append(f"{op} {node!r}: {text}")
    for c, drop, keep in sol.assumed:
        notes.append(
            f"{c.op} {c.node!r}: {c.why}: two dims computed at run time are taken as one "
            f"({analysis.atoms[drop].note} == {analysis.atoms[keep].note}); ONNX Runtime checks it"
        )
    for sym, (value, c) in sol.relations.items():
        notes.append(
            f"{c.op} {c.node!r}: {c.why}: {sym} is {value} at every size (the check sizes keep it so)"
        )
    return notes


def _untied_outputs(
    row_syms: set[str], symbols: dict[str, int], outputs: dict[str, list[str | int | None] | None]
) -> list[str]:
    """Notes for outputs that keep a batch's traced size on axis 0, no symbolic dim following it."""
    notes = []
    for sym in row_syms:
        for name, dims in outputs.items():
            if (
                dims
                and dims[0] == symbols[sym]
                and not any(isinstance(d, str) and sym in d for d in dims)
            ):
                notes.append(
                    f"output {name!r} keeps the traced {sym} {symbols[sym]} on axis 0 (no "
                    f"symbolic dim follows {sym}): nothing in the graph ties it to the input"
                )
    return notes


def _sequence_symbol(analysis: ShapeAnalysis, table: GridTable) -> str:
    """The input symbol a sequence's table follows (:func:`~.baked.grid_table`)."""
    origin = (table.grid, table.axes[0])
    return next(s for s in analysis.symbols if origin in (analysis.atoms[s].origin or ()))


def _grid_tables(
    analysis: ShapeAnalysis, sol: Solution, blockers: list[Blocker]
) -> dict[str, GridTable]:
    """Blocked tables that are a learned position table over a patch grid (DINOv2): reference
    cases may choose a resize of them, which their blockers' fix says first."""
    tables: dict[str, GridTable] = {}
    blocked = {(b.node, b.input) for b in blockers if b.input}
    for use in analysis.uses:
        if use.kind != "data" or (use.node, use.tensor) not in blocked:
            continue
        grid_dims = [
            sol.resolve(Dim.sym(x)) if x is not None else Dim.const(n)
            for x, n in zip(use.atoms, use.array.shape, strict=True)
        ]
        table = grid_table(analysis, use, grid_dims)
        if table is None:
            continue
        tables[use.node] = table
        lead = (
            fix_lead("learned-position-table")
            if len(table.shape) == 2
            else fix_lead("learned-sequence-table", syms=_sequence_symbol(analysis, table))
        )
        for blocker in blockers:
            if (blocker.node, blocker.input) == (use.node, use.tensor):
                blocker.fix = lead + blocker.fix
    return tables
