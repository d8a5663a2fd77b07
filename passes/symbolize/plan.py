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
The plan has ``to_dict()`` for JSON reports and ``__rich__()`` for the terminal.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from onnxsurgery.model.dtypes import dtype_name, elem_type_of
from onnxsurgery.passes.symbolize.baked import GridTable, grid_table, relative_axes, same_pads
from onnxsurgery.passes.symbolize.batch_indices import (
    batch_like_symbols,
    find_batch_indices,
)
from onnxsurgery.passes.symbolize.blockers import Blocker, group_blockers
from onnxsurgery.passes.symbolize.cache_offsets import band_bound_gap, cache_symbols, offset_gap
from onnxsurgery.passes.symbolize.generators import Generator, evidence_gap, match_generator
from onnxsurgery.passes.symbolize.graph_blockers import conflict_blockers, unrolled_loops
from onnxsurgery.passes.symbolize.wording import (
    dim_text,
    fix_text,
    fmt_values,
    input_symbols,
    sym_tuple,
    symbol_hint,
    values_text,
)
from onnxsurgery.shapes.analysis import Constraint, ConstUse, ShapeAnalysis
from onnxsurgery.shapes.dims import Dim
from onnxsurgery.shapes.propagation import propagate
from onnxsurgery.shapes.solver import Solution, solve

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
    #: blockers for 'same' padding baked at the traced size (blocker node -> the window op, and
    #: the Pad node before it or None), each rewritable as ``auto_pad=SAME_UPPER``: reference
    #: cases can decide between that and the fixed pads as exported
    same_padding: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    #: blockers for a learned table added whole whose length is a strided op's traced grid
    #: (DINOv2's position embeddings): blocker node -> :class:`GridTable`; reference cases can
    #: confirm it is resized to the grid at other sizes, as torch code that the export skipped
    grid_tables: dict[str, GridTable] = field(default_factory=dict)

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
            "verification": (
                self.verification.to_dict() if self.verification is not None else None
            ),
        }

    def __rich__(self):
        return self.view()

    def view(self, verbose: bool = False):
        """The terminal form (``inspect``): what would change, one table row per constant, and
        each blocker in a few lines; ``verbose`` adds the constants' input names. Cells wrap
        (node names fold whole), never cut."""
        from rich.console import Group
        from rich.text import Text

        syms = ", ".join(f"{s} (traced {v})" for s, v in self.symbols.items())
        parts: list[Any] = [Text(f"symbolize: {syms}", style="bold")]
        if self.changes:
            parts.append(_changes_table(self.changes, verbose))
        else:
            parts.append(Text("no constant carries a traced size"))
        if self.blockers:
            parts += _blocker_lines(group_blockers(self.blockers))
        outs = "; ".join(
            f"{name} [{', '.join('?' if d is None else str(d) for d in dims)}]"
            if dims is not None
            else f"{name} [?]"
            for name, dims in self.outputs.items()
        )
        parts.append(Text(f"outputs: {outs}"))
        if self.verification is not None:
            parts.append(_verified_table(self))
        for note in self.notes:
            parts.append(Text(f"note: {note}", style="dim"))
        return Group(*parts)


def _table(title: str, columns: list[str], **style: Any) -> Any:
    """A plan table whose cells wrap and fold (a node name is never cut short)."""
    from rich.table import Table

    table = Table(title=title, title_justify="left", **style)
    for col in columns:
        table.add_column(col, overflow="fold", no_wrap=col == "op")
    return table


def _changes_table(changes: list[Change], verbose: bool) -> Any:
    from rich.text import Text

    table = _table("would change", ["node", "op", *(["input"] if verbose else []), "old -> new"])
    for c in changes:
        cells = [c.node, c.op, *([f"{c.input_index}: {c.input}"] if verbose else [])]
        # plain text: shapes like [batch, -1] are no markup
        table.add_row(*(Text(x) for x in cells), Text(f"{c.old} -> {c.new}"))
    return table


def _blocker_lines(groups: list) -> list[Any]:
    """Each kind of blocker in a few lines: where (nodes, op, input, traced value), why, what to
    do; every blocker with its node is in the JSON report."""
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    parts: list[Any] = [Text(f"blockers ({len(groups)} kind(s))", style="bold red")]
    for g in groups:
        b = g.blockers[0]
        nodes = g.nodes[0] or "(unnamed)"
        if len(g.nodes) > 1:
            nodes = f"{len(g.nodes)} alike: {', '.join(g.nodes[:3])}" + (", ..." if len(g.nodes) > 3 else "")
        where = f" ({b.op}" + (f", input {b.input}" if b.input else "") + f", traced {b.traced})"
        parts.append(Text(nodes, style="red") + Text(where))
        grid = Table.grid(padding=(0, 1))
        grid.add_column(style="dim", no_wrap=True)
        grid.add_column(overflow="fold")
        grid.add_row("why", Text(b.why))
        grid.add_row("fix", Text(b.fix))
        parts.append(Padding(grid, (0, 0, 0, 2)))
    return parts


def _verified_table(plan: SymbolizePlan) -> Any:
    from rich.text import Text

    table = _table("verified", ["symbol", "traced", "level", "oracle"])
    for sym, level in plan.verification.levels.items():
        oracle = plan.verification.oracles.get(sym, "")
        cells = (sym, plan.symbols.get(sym, ""), level, oracle)
        table.add_row(*(Text(str(x)) for x in cells))
    return table


# ------------------------------------------------------------------------------------------------


def _one_point(a: ShapeAnalysis, use: ConstUse, rows: Set[str]) -> Blocker | None:
    """A data constant of size 1 on an axis that met a non-batch symbol traced at 1: kept as a
    broadcast, though one point cannot tell that from a table of the symbol's length."""
    if use.kind != "data":
        return None
    for k, atom in enumerate(use.atoms):
        met = a.one_point.get(atom) if atom is not None else None
        if met is None or not (met.atoms() - rows):
            continue
        syms = symbol_hint(a.symbols, met.atoms())
        old = f"{dtype_name(elem_type_of(use.array))}{fmt_values(list(use.array.shape))}"
        return Blocker(
            use.node,
            use.op,
            use.tensor,
            old,
            f"constant {use.tensor!r} {old} has size 1 on axis {k}, where it meets {met} traced "
            "at 1: one point cannot tell one row repeated from a table of that length, so "
            "symbolize cannot know what it holds at another size",
            f"export at a size of {syms} of 3 or more so the values show their pattern; "
            + fix_text(a, syms),
            sym_tuple(syms),
        )
    return None


def _changes(
    a: ShapeAnalysis,
    sol: Solution,
    forced: dict[int, tuple[int, np.ndarray]],
    rows: Set[str] = frozenset(),
    structural: Set[int] = frozenset(),
) -> tuple[list[Change], list[Blocker]]:
    changes: list[Change] = []
    blockers: list[Blocker] = []
    cache = cache_symbols(a)
    # a cos/sin table may start at a cache length's traced size, if no other symbol has that size
    starts: dict[int, str] = {}
    for sym in sorted(cache - set(rows)):
        n = a.atoms[sym].traced
        if sum(1 for s in a.symbols if s not in rows and a.atoms[s].traced == n) == 1:
            starts[n] = sym
    for use in a.uses:
        resolved = [sol.resolve(Dim.sym(x)) if x is not None else None for x in use.atoms]
        ambiguous = _one_point(a, use, rows)
        if ambiguous is not None:
            blockers.append(ambiguous)
            continue
        if all(r is None or r.is_const() for r in resolved):
            continue
        if use.kind == "size":
            flat = use.array.reshape(-1).tolist()
            values = [
                r if r is not None else Dim.const(int(v))
                for r, v in zip(resolved, flat, strict=True)
            ]
            old = fmt_values([int(v) for v in flat]) if use.array.ndim else str(int(flat[0]))
            new = values_text(a, sol, values) if use.array.ndim else dim_text(a, sol, values[0])
            changes.append(_change(use, "size", old, new, values))
            continue
        dims = [
            r if r is not None else Dim.const(n)
            for r, n in zip(resolved, use.array.shape, strict=True)
        ]
        sym_axes = [k for k, d in enumerate(dims) if not d.is_const()]
        old = f"{dtype_name(elem_type_of(use.array))}{fmt_values(list(use.array.shape))}"
        enumerates = forced.get(id(use))  # (axis, step) of a batch enumeration traced at 1
        if enumerates is None:
            blocks = {}
            for k in sym_axes:
                terms = dims[k].terms
                if len(terms) == 1:
                    ((mono, coef),) = terms.items()
                    if mono and coef > 1:
                        blocks[k] = coef
            gen = match_generator(use.array, sym_axes, blocks, tuple(starts))
            if gen is not None and gen.phase is not None:
                gen.offset = ("phase", Dim.sym(starts[gen.phase]), gen.phase)
        else:  # a batch enumeration traced at 1: its step comes from the gather it indexes
            axis, step = enumerates
            rest = [k for k in sym_axes if k != axis]
            gen = (
                match_generator(use.array, rest) if rest else Generator("affine", [], use.array, {})
            )
            if gen is not None and gen.kind == "affine":
                gen.axes = sorted([*gen.axes, axis])
                gen.steps[axis] = step
            else:
                gen = None
        row_axes = {k for k in sym_axes if dims[k].atoms() and dims[k].atoms() <= rows}
        atoms = set().union(*(dims[k].atoms() for k in sym_axes))
        why = fix = None
        if gen is None:
            atoms |= input_symbols(a, sol, atoms)
            axes_text = ", ".join(f"axis {k} ({dim_text(a, sol, dims[k])})" for k in sym_axes)
            rel = relative_axes(use.array, sym_axes)
            if rel is not None:
                n = use.array.shape[rel[0]]
                why = (
                    f"constant {use.tensor!r} {old} has the traced size on {axes_text} and "
                    f"depends only on j - i along axes {rel[0]}, {rel[1]}: a relative-position "
                    f"bias (T5, WavLM) the exporter folded for distances -{n - 1}..{n - 1}; "
                    "longer sizes need farther distances, whose values (and the bucket "
                    "embedding that gives them) are not in the graph"
                )
                fix = "export with TorchScript (dynamo=False), whose graph computes it, or "
            else:
                why = (
                    f"constant {use.tensor!r} {old} has the traced size on {axes_text} and its "
                    "values follow no pattern symbolize can extend (a table or mask made for "
                    "the traced size: cut or folded there by the exporter, or a weight that "
                    "torch resizes or rejects at other sizes in code the export did not record, "
                    "as DINOv2 interpolates its position embeddings), so it cannot be rebuilt "
                    "at another size"
                )
            if cache and use.array.dtype.kind == "f":
                why += (
                    f" (the graph has a cache of length {', '.join(sorted(cache))}: a learned "
                    "position table gathered at the traced positions and folded by the exporter "
                    "looks like this, and its weight is no longer in the graph to gather from)"
                )
        elif enumerates is None:
            gap = evidence_gap(gen, use.array, row_axes, id(use) in structural)
            found = (
                (gap, set())
                if gap
                else band_bound_gap(a, gen, dims, cache) or offset_gap(a, gen, rows, cache)
            )
            if found:
                atoms |= found[1]
                why = (
                    f"constant {use.tensor!r} {old} fits {gen.describe()}, but its traced values "
                    f"do not pin that down: {found[0]}"
                )
                fix = (
                    "export at sizes that show the pattern (3 or more along each symbolic axis, "
                    "no size equal to an offset or bound); "
                )
        if why is not None:
            syms = symbol_hint(a.symbols, atoms)
            blockers.append(
                Blocker(
                    use.node, use.op, use.tensor, old, why, (fix or "") + fix_text(a, syms),
                    sym_tuple(syms),
                )
            )  # fmt: skip
            continue
        assert gen is not None
        new = f"{dtype_name(elem_type_of(use.array))}{values_text(a, sol, dims)} ({gen.describe()})"
        changes.append(_change(use, "data", old, new, dims, gen))
    return changes, blockers


def _change(
    use: ConstUse, kind: str, old: str, new: str, values: list[Dim], rebuild: Generator | None = None
) -> Change:
    """The Change of the constant read ``use``: where it is, what it was and what it becomes."""
    return Change(
        use.graph, use.node, use.op, use.input_index, use.tensor, kind, old, new, values, use, rebuild
    )


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
    """What ``symbolize`` alone means: axis 0 of every graph input of rank >= 1, as ``batch``."""
    inits = {i.name for i in model.graph.initializer}
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
) -> SymbolizePlan:
    """Preview symbolize on ``model`` for ``dynamic_axes`` ({input: {axis: name}} or {input: [axes]};
    None: axis 0 of every input as ``batch``, like ``symbolize`` alone). ``rows``: the symbols
    whose rows are independent (batches); None finds them in the graph
    (:func:`~.batch_indices.batch_like_symbols`). ``bare``: ``weightless(model)``, where the
    caller has it (for shape inference; else made here).

    Nothing is edited. Raises ValueError for an input or axis the model does not have, or one
    name given to axes of different traced sizes.
    """
    axes = normalize_axes(default_axes(model) if dynamic_axes is None else dynamic_axes)
    analysis = propagate(model, axes, bare=bare)
    sol = solve(analysis)
    row_syms = batch_like_symbols(analysis, rows)
    batch_indices = find_batch_indices(analysis, sol, row_syms)
    if batch_indices:
        for bi in batch_indices:
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
        sol = solve(analysis)
    forced = {id(bi.use): (bi.axis, bi.step) for bi in batch_indices if bi.step is not None}
    structural = {id(bi.use) for bi in batch_indices}
    changes, blockers = _changes(analysis, sol, forced, row_syms, structural)
    padding, same_padding = same_pads(analysis, sol)
    blockers = conflict_blockers(analysis, sol) + blockers + unrolled_loops(analysis, sol) + padding
    notes = []
    seen: set[tuple[str, str]] = set()
    for node, op, text in analysis.notes:
        if (op, text) in seen:
            continue
        seen.add((op, text))
        notes.append(f"{op} {node!r}: {text}")
    symbols = {s: analysis.atoms[s].traced for s in analysis.symbols}
    for c, drop, keep in sol.assumed:
        notes.append(
            f"{c.op} {c.node!r}: {c.why}: two dims computed at run time are taken as one "
            f"({analysis.atoms[drop].note} == {analysis.atoms[keep].note}); ONNX Runtime checks it"
        )
    outputs = _output_dims(analysis, sol)
    relations = {s: v for s, (v, _) in sol.relations.items()}
    for sym, (value, c) in sol.relations.items():
        notes.append(
            f"{c.op} {c.node!r}: {c.why}: {sym} is {value} at every size (the check sizes keep it so)"
        )
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
    plan = SymbolizePlan(
        axes, symbols, changes, blockers, outputs, notes, analysis, sol, row_syms, relations
    )
    plan.same_padding = same_padding
    blocked = {(b.node, b.input) for b in blockers if b.input}
    for use in analysis.uses:
        if use.kind == "data" and (use.node, use.tensor) in blocked:
            grid_dims = [
                sol.resolve(Dim.sym(x)) if x is not None else Dim.const(n)
                for x, n in zip(use.atoms, use.array.shape, strict=True)
            ]
            table = grid_table(analysis, use, grid_dims)
            if table is not None:
                plan.grid_tables[use.node] = table
                for blocker in blockers:
                    if (blocker.node, blocker.input) == (use.node, use.tensor):
                        blocker.fix = (
                            "pass reference cases (--ref) at another grid size: symbolize then "
                            "resizes the table to the grid bicubically or bilinearly, whichever "
                            "alone matches them; or " + blocker.fix
                        )
    return plan
