"""Where the graph cannot tell two readings apart, the run's reference cases (``--ref``) may:
the one that alone matches every case is taken, and the blockers it answers go.

- :func:`decide_coincidences`: sizes kept at a traced value a symbol fits too
  (:mod:`.coincident`): fixed as traced, or following their symbols; where they read as a
  batch whose rows the graph shows independent, the original model run on each traced-many
  rows alone at two larger batches is an oracle too (:func:`~.row_checks.row_cases`), with no
  cases given (the symbol is then verified ``rows``, not ``references``);
- :func:`decide_readings`: 'same' padding baked at the traced size, or a table over a patch grid
  (:mod:`.readings`): the rewrite that matches; or a constant of one row that met a size
  traced at 1 (``one-point``): one row repeated (the graph as it is) is the only reading that
  extends (a table of that length cannot be rebuilt), taken where it matches every case and
  the cases hold each size it met at 2 or more (:func:`_one_point_unseen`).

Where none or several match, each blocker is told why.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial

import onnx

from onnxsurgery.passes.symbolize.blockers import Blocker
from onnxsurgery.passes.symbolize.coincident import Coincidence
from onnxsurgery.passes.symbolize.feeds import case_sizes
from onnxsurgery.passes.symbolize.plan import SymbolizePlan, plan_symbolize
from onnxsurgery.passes.symbolize.readings import (
    GRID_RESIZES,
    resize_tables,
    same_padding,
    slice_tables,
)
from onnxsurgery.passes.symbolize.reference_cases import failing_size, reference_mismatch, size_text
from onnxsurgery.passes.symbolize.rewrite import apply_plan
from onnxsurgery.passes.symbolize.rounded_lengths import rounded_outputs
from onnxsurgery.passes.symbolize.row_checks import ROW_CASE_MULTIPLES, row_cases
from onnxsurgery.passes.symbolize.rules import one_point_axes
from onnxsurgery.passes.symbolize.sizes import Divisions, check_sizes
from onnxsurgery.passes.symbolize.wording import ADVICE_WORDS
from onnxsurgery.pipeline.contract import PassContext
from onnxsurgery.shapes.dims import Dim
from onnxsurgery.shapes.solver import Solution
from onnxsurgery.shapes.spelling import dim_text
from onnxsurgery.validation.runtime import goes_by_path

__all__ = ["Reading", "decide_coincidences", "decide_readings"]

#: A rewrite reference cases may choose where the graph cannot (None: it does not apply).
Reading = Callable[[onnx.ModelProto], onnx.ModelProto | None]


def decide_readings(
    model: onnx.ModelProto,
    bare: onnx.ModelProto,
    plan: SymbolizePlan,
    references: Callable[[], list],
    ctx: PassContext,
) -> tuple[str | None, Reading | None]:
    """Where every blocker is one the graph cannot decide but a rewrite could fix, and the run
    has reference cases, let them decide between the readings (:func:`_readings`): the one
    that alone matches every case is kept and the blockers go. Returns (what was decided,
    the rewrite to apply after the plan's), or (None, None) with the blockers left as they
    are, told why if cases were given.
    """
    choice = _readings(plan) if plan.blockers else None
    cases = references() if choice is not None else []
    if (
        choice is None
        or not cases
        or _one_point_unseen(plan, cases)
        or rounding_unseen(plan, cases)
    ):
        return None, None
    what, readings = choice
    base = apply_plan(model if goes_by_path(bare) else bare, plan)
    candidates = {label: rewrite(base) for label, rewrite in readings.items()}
    found = _matching(model, bare, plan, candidates, cases, ctx)
    if found is None or _sliced_alike(model, bare, plan, base, cases, ctx, found[0]):
        return None, None
    passed, why = found
    plan.blockers = []
    others = ", ".join(label for label in readings if label != passed)
    why = f" ({why})" if why else ""
    return f"{what}: {passed} matches the reference cases, {others} not{why}", readings[passed]


def _sliced_alike(
    model: onnx.ModelProto,
    bare: onnx.ModelProto,
    plan: SymbolizePlan,
    base: onnx.ModelProto,
    cases: list,
    ctx: PassContext,
    passed: str,
) -> bool:
    """Whether the reference cases match a sequence's tables cut to the length too (learned
    positions ``0 .. seq-1``, :func:`~.readings.slice_tables`), which no resize is: then they
    do not tell the readings apart, and each blocker says so. One row shorter than traced, the
    nearest rows are the first ones: CLIP's text positions by dynamo (sliced in torch) matched
    the nearest resize at seq 7 of 8 and were wrong at 5."""
    tables = [plan.grid_tables[b.node] for b in plan.blockers if b.node in plan.grid_tables]
    if not tables or any(len(t.shape) != 1 for t in tables):
        return False
    sliced = slice_tables(base, tables)
    mapping = ctx.map_outputs if ctx.output_maps else None
    if sliced is None or reference_mismatch(
        model, sliced, plan.axes, plan.symbols, cases, ctx.provider, mapping, bare=bare
    ):
        return False
    for blocker in plan.blockers:
        blocker.why += (
            f"; the reference cases given match the table {passed} and cut to the length (learned "
            "positions 0..seq-1) alike: add a case at another length (not one row short of the "
            "traced one, where the nearest rows are the first), or bound the length (seq<=traced)"
            " if the table is cut"
        )
    return True


def decide_coincidences(
    model: onnx.ModelProto,
    bare: onnx.ModelProto,
    plan: SymbolizePlan,
    references: Callable[[], list],
    ctx: PassContext,
    *,
    rows: set[str] | None,
    keep: frozenset[str],
    bounds: Mapping[str, int | None],
    by_rows: bool = True,
) -> tuple[SymbolizePlan, str | None]:
    """Where every blocker is a size kept at a traced value a symbol fits too
    (:mod:`.coincident`), let the run's reference cases choose, per size
    (:func:`_coincidence_groups`): each fixed as traced or following its symbol, the one
    reading that alone matches every case; the plan as it is (those sizes fixed, its blockers
    gone) and the plan with them all following are two of the readings. Without cases, where
    every such size reads as one batch whose rows the graph shows independent, the original
    model run row by row at two larger batches (:func:`_row_oracle`) chooses between those
    two instead, unless ``by_rows`` is false (no check runs).
    Where other blockers stand beside those sizes, the reading with them fixed is blocked by
    them and no reading; a reading that follows may answer them (JetMoE's sorts of its routed
    tokens, a TopK whose K is their traced count: with the sorts fixed, the queries keep the
    traced length and its folded causal mask cannot grow), and only reference cases decide it.
    Returns (the plan to go on with, what was decided or None)."""
    others = [b for b in plan.blockers if b.kind != "coincident-size"]
    if not plan.blockers or len(others) == len(plan.blockers):
        return plan, None
    cases = references()
    if not cases and others:
        _answered_by_following(model, bare, plan, others, rows, keep, bounds)
    if not cases and (others or not by_rows or _row_batch(plan) is None):
        return plan, None
    groups = _coincidence_groups(plan) if cases else []
    n = len(groups)  # each mix of groups kept fixed (their indices), all of them first
    readings = [tuple(i for i in range(n) if not m >> i & 1) for m in range(2**n)]
    plans: dict[str, SymbolizePlan] = {}
    for fixed_groups in readings if groups else [(), (None,)]:
        label = _reading_label(groups, fixed_groups)
        made = plan_symbolize(
            model, plan.axes, rows, bare=bare, keep=keep | _pinned(plan, groups, fixed_groups),
            generalize=label != FIXED, bounds=bounds,
        )  # fmt: skip
        if made.blockers and label == FIXED and others:
            continue  # blocked by what blocks the plan: the sizes fixed are no reading
        if made.blockers and label in (FIXED, FOLLOWING):
            if cases:
                _undecided(plan, label, made)
            return plan, None
        if not made.blockers:  # a mix whose sizes break the graph is no reading
            plans[label] = made
    oracle = "the reference cases"
    if not cases:
        oracle, cases = _row_oracle(model, bare, plan, tuple(plans.values()), ctx)
        if not cases:
            return plan, None
    root = model if goes_by_path(bare) else bare
    candidates = {label: apply_plan(root, made) for label, made in plans.items()}
    limits = {
        s: plan.symbols[s] if b is None else b for s, b in bounds.items() if s in plan.symbols
    }
    rows_at = _other_batches(plan, cases)
    alike = FIXED if rows_at else None
    matched: list[str] = []
    found = _matching(model, bare, plan, candidates, cases, ctx, oracle, limits, alike, matched)
    if found is None:
        return plan, None
    passed, why = found
    nodes = ", ".join(sorted({b.node for b in plan.blockers if b.kind == "coincident-size"}))
    rejected = [label for label in plans if label != passed]
    if others:
        first = others[0]
        rejected.append(f"{FIXED} blocked ({first.op} {first.node!r}: {first.kind})")
    if alike is not None and passed == alike and len(matched) > 1:
        # every reading matched: the fixed one (``alike``) taken
        sym = _row_batch(plan)
        return plans[passed], (
            f"sizes of {nodes}: {passed} and {FOLLOWING} match {oracle} alike ({rows_at}, the "
            f"rows of {sym} independent): following {sym} only repeats a row the fixed size "
            "broadcasts, as a size that counted rows would show there; kept fixed as traced"
        )
    why = f" ({why})" if why else ""
    return plans[
        passed
    ], f"sizes of {nodes}: {passed} match {oracle}, {'; '.join(rejected)} not{why}"


def _answered_by_following(
    model: onnx.ModelProto,
    bare: onnx.ModelProto,
    plan: SymbolizePlan,
    others: list[Blocker],
    rows: set[str] | None,
    keep: frozenset[str],
    bounds: Mapping[str, int | None],
) -> None:
    """Where no reference case was given and the plan with its coincident sizes following
    their symbols has no blocker, tell the other blockers so: they hold only with those sizes
    fixed, and a case decides. Their own advice alone misled: JetMoE by dynamo at batch 2
    was told "the model fixes batch at 2: leave it out of the symbolized axes", a conflict
    of the reading with its sorts fixed that goes once they follow their tokens."""
    following = plan_symbolize(
        model, plan.axes, rows, bare=bare, keep=keep, generalize=True, bounds=bounds
    )
    if following.blockers:
        return
    blocked = {b.node for b in plan.blockers if b.kind == "coincident-size"}
    sizes = [c for c in plan.coincidences if c.nodes() & blocked]
    syms = ", ".join(sorted({s for c in sizes for s in c.reading.atoms()}))
    first = sizes[0]
    named = f"{first.sets[0]} {first.sets[1]!r} ({first.value} as {first.reading})" + (
        f" and {len(sizes) - 1} more" if len(sizes) > 1 else ""
    )
    for blocker in others:
        blocker.fix = (
            f"pass reference cases (--ref) at another {syms}: this holds only with sizes kept "
            f"as traced that fit their symbols too ({named}); following them, nothing blocks, "
            f"and the cases decide which reading matches; if they stay fixed: {blocker.fix}"
        )


def _undecided(plan: SymbolizePlan, label: str, made: SymbolizePlan) -> None:
    """Tell each of ``plan``'s blockers why the reference cases given did not decide it: the
    reading ``label`` (``made``) is blocked itself, by what and what to do there. Without it
    the refusal repeated "pass reference cases", which the user had done (GLM-5 next by
    TorchScript: the reading that follows seq needs its one-chunk pad bounded, seq<=traced)."""
    first = made.blockers[0]
    advice = {m.group(0) for b in made.blockers for w in ADVICE_WORDS if (m := w.search(b.fix))}
    then = "; ".join(sorted(advice)) or first.fix
    for blocker in plan.blockers:
        blocker.why += (
            f"; the reference cases given decide nothing while the reading with {label} is "
            f"blocked itself ({len(made.blockers)} blocker(s), the first: {first.op} "
            f"{first.node!r}: {first.why}; there: {then})"
        )


def _other_batches(plan: SymbolizePlan, cases: list) -> str:
    """Where every blocked coincident size reads as one batch whose rows the graph shows
    independent (:func:`_row_batch`), the batches other than the traced one the cases hold
    (``batch=2 and 3``); else "". There two readings that both match are one: a size that
    counted rows (a Slice, a Reshape folding them, a sum) would give other values at a batch
    other than its fixed value, so one that does not only repeats a row broadcasting gives."""
    sym = _row_batch(plan)
    if sym is None:
        return ""
    traced = plan.symbols[sym]
    seen = sorted(
        {n for c in cases if (n := case_sizes(plan.axes, c.inputs).get(sym, traced)) != traced}
    )
    return f"{sym}={' and '.join(map(str, seen))}" if seen else ""


#: at most this many groups of coincident sizes are decided one by one (every mix of fixed and
#: following: 2**4 readings); past it, all fixed or all following, as one
MAX_GROUPS = 4
FIXED, FOLLOWING = "the sizes fixed as traced", "the sizes following their symbols"


def _coincidence_groups(plan: SymbolizePlan) -> list[list[Coincidence]]:
    """The blocked coincident sizes in groups decided together: those a node ties (``keep=``
    names nodes, so sizes read or sized at one node are fixed or follow as one), in the
    order found; one group where there are more than :data:`MAX_GROUPS`."""
    blocked = {b.node for b in plan.blockers}
    groups: list[tuple[set[str], list[Coincidence]]] = []
    for c in plan.coincidences:
        if not c.nodes() & blocked or c.rows:
            continue
        joined = [g for g in groups if g[0] & c.nodes()]
        nodes, members = set(c.nodes()), [c]
        for g in joined:
            nodes |= g[0]
            members = g[1] + members
            groups.remove(g)
        groups.append((nodes, members))
    found = [members for _, members in groups]
    return found if len(found) <= MAX_GROUPS else [[c for g in found for c in g]]


def _pinned(plan: SymbolizePlan, groups: list[list[Coincidence]], fixed: tuple) -> set[str]:
    """The nodes ``keep=`` names to keep the groups ``fixed`` fixed (``(None,)``: every
    coincident size of the plan, where no groups were made)."""
    if fixed == (None,):
        return set()
    if not groups:
        return {n for c in plan.coincidences for n in c.nodes()}
    return {n for i in fixed for c in groups[i] for n in c.nodes()}


def _reading_label(groups: list[list[Coincidence]], fixed: tuple) -> str:
    """A reading's name: all fixed, all following, or which sizes follow their symbols."""
    if fixed == (None,) or (groups and not fixed):
        return FOLLOWING
    if not groups or len(fixed) == len(groups):
        return FIXED
    follow = [c for i, g in enumerate(groups) if i not in fixed for c in g]
    return (
        "the sizes of "
        + ", ".join(f"{c.sets[0]} {c.sets[1]!r} ({c.value} as {c.reading})" for c in follow)
        + " following their symbols, the others fixed"
    )


def _row_batch(plan: SymbolizePlan) -> str | None:
    """The batch every blocked coincident size reads as, where it is one symbol whose rows
    the graph shows independent (``plan.rows``); else None."""
    blocked = {b.node for b in plan.blockers}
    readings = {c.reading for c in plan.coincidences if c.nodes() & blocked}
    if len(readings) != 1:
        return None
    reading = next(iter(readings))
    sym = next(iter(reading.atoms()), None) if reading.is_atom() else None
    return sym if sym in plan.rows else None


def _row_oracle(
    model: onnx.ModelProto,
    bare: onnx.ModelProto,
    plan: SymbolizePlan,
    readings: tuple[SymbolizePlan, ...],
    ctx: PassContext,
) -> tuple[str, list]:
    """Cases the original model gives row by row (:func:`~.row_checks.row_cases`) for the
    batch the coincident sizes read as (:func:`_row_batch`), and the oracle's name; none where
    an output does not carry the batch on one axis, the same in every reading (rows cannot be
    put together), or the outputs are mapped."""
    sym = _row_batch(plan)
    if sym is None or ctx.output_maps:
        return "", []
    out_axis: dict[str, int] = {}
    for name in plan.outputs:
        places = {
            tuple(i for i, d in enumerate(p.outputs.get(name) or []) if d == sym) for p in readings
        }
        if len(places) != 1 or len(axis := next(iter(places))) != 1:
            return "", []
        out_axis[name] = axis[0]
    cases = row_cases(model, plan.axes, plan.symbols, sym, out_axis, ctx.provider, bare=bare)
    sizes = " and ".join(str(k * plan.symbols[sym]) for k in ROW_CASE_MULTIPLES)
    return f"the original model run row by row at {sym}={sizes}", cases


def _matching(
    model: onnx.ModelProto,
    bare: onnx.ModelProto,
    plan: SymbolizePlan,
    candidates: Mapping[str, onnx.ModelProto | None],
    references: list,
    ctx: PassContext,
    oracle: str = "the reference cases",
    bounds: Mapping[str, int] | None = None,
    alike: str | None = None,
    matched: list[str] | None = None,
) -> tuple[str, str] | None:
    """The one candidate rewrite that alone matches every reference case (from ``oracle``);
    of several that do, ``alike`` where it and every other candidate match them (readings the
    cases show give one set of values), else the one ONNX Runtime runs where the others fail
    (:func:`_running`, within ``bounds``, else the plan's); with why each other was not taken
    (where ONNX Runtime failed it). None (each of ``plan``'s blockers told why) where none or
    several remain. ``matched``: filled with every candidate that matched."""
    mapping = ctx.map_outputs if ctx.output_maps else None
    verdict = {
        label: "cannot be rewritten"
        if candidate is None
        else reference_mismatch(
            model, candidate, plan.axes, plan.symbols, references, ctx.provider, mapping,
            bare=bare,
        )
        for label, candidate in candidates.items()
    }  # fmt: skip
    passed = [label for label, why in verdict.items() if why is None]
    if matched is not None:
        matched += passed
    if len(passed) > 1 and alike in passed and len(passed) == len(verdict):
        return alike, ""
    given = oracle == "the reference cases"
    if len(passed) > 1 and given:
        matching = {k: candidates[k] for k in passed}
        limits = plan.bounds if bounds is None else bounds
        passed = _running(model, bare, plan, matching, ctx, verdict, limits)
    if len(passed) == 1:
        ran = "; ".join(
            f"{k}: {v}" for k, v in verdict.items() if k != passed[0] and v and v.startswith(_FAILS)
        )
        return passed[0], ran
    why = (
        f"match {' and '.join(passed)} alike"
        + (" (add cases at other sizes)" if given else " (the readings give the same values there)")
        if passed
        else "match no reading: " + "; ".join(f"{k}: {v}" for k, v in verdict.items())
    )
    for blocker in plan.blockers:
        blocker.why += f"; {oracle} given {why}" if given else f"; {oracle}: {why}"
    return None


def _running(
    model: onnx.ModelProto,
    bare: onnx.ModelProto,
    plan: SymbolizePlan,
    matching: Mapping[str, onnx.ModelProto | None],
    ctx: PassContext,
    verdict: dict[str, str | None],
    bounds: Mapping[str, int],
) -> list[str]:
    """Of readings that all match the reference cases, those ONNX Runtime runs at every size of
    :func:`_probe_sizes` where another of them runs: a reading that fails where another runs is
    no model there (Bailing's causal conv cut fixed at 8, then padded to one chunk of 64, runs
    at seq 7 as the reading that follows seq does, with the same values, and fails at seq 4).
    Each reading dropped is told why in ``verdict``; all of them where none or all fail."""
    sizes = _probe_sizes(plan, bounds)
    failed = {
        label: failing_size(model, m, plan.axes, sizes, ctx.provider, bare=bare)
        for label, m in matching.items()
        if m is not None
    }
    running = [label for label, why in failed.items() if why is None]
    if not running or len(running) == len(matching):
        return list(matching)
    for label, why in failed.items():
        if why is not None:
            size, text = why
            text = text if len(text) <= 240 else text[:240] + "..."
            verdict[label] = f"{_FAILS} {size_text(size)}, where {running[0]} runs: {text}"
    return running


#: how a reading dropped by :func:`_running` is told
_FAILS = "fails on ONNX Runtime at"


def _probe_sizes(plan: SymbolizePlan, bounds: Mapping[str, int]) -> list[dict[str, int]]:
    """The check's sizes (within ``bounds``) and, per symbol, the traced size with that symbol
    at 2: the small sizes a reading fixed at the traced one breaks at first."""
    related = plan.relations
    sizes = check_sizes(plan.symbols, relations=related, bounds=bounds)
    for sym, traced in plan.symbols.items():
        if traced <= 2 or sym in related:
            continue
        small = {**plan.symbols, sym: 2}
        try:
            small.update({r: d.evaluate(small) for r, d in related.items()})
        except KeyError:
            continue
        if small not in sizes:
            sizes.append(small)
    return sizes


def _one_point_unseen(plan: SymbolizePlan, cases: list) -> bool:
    """Whether a one-point blocker's constant met a size (:func:`~.rules.one_point_axes`) that
    no reference case holds at 2 or more: there the cases cannot tell one row repeated from a
    table of that length either, and that blocker is told so."""
    a, sol = plan.analysis, plan.solution
    divisions = Divisions.of(a, sol)
    sizes = [case_sizes(plan.axes, case.inputs) for case in cases]
    unseen = False
    for blocker in plan.blockers:
        if blocker.kind != "one-point":
            continue
        uses = [u for u in a.uses if (u.node, u.tensor) == (blocker.node, blocker.input)]
        met = [m for u in uses for _, m in one_point_axes(a, sol, plan.rows, u.atoms)]
        missed = [m for m in met if all((_met_at(divisions, sol, m, s) or 1) < 2 for s in sizes)]
        if missed:
            unseen = True
            blocker.why += (
                f"; the reference cases given hold {dim_text(a, sol, missed[0])} at 1 only, as "
                "traced (add a case where it is 2 or more)"
            )
    return unseen


def rounding_unseen(plan: SymbolizePlan, cases: list) -> bool:
    """Whether a rounded output length (:mod:`.rounded_lengths`) comes out rounded at no
    reference case's size: there the cases cannot tell rounding from padding back either, and
    the blocker is told so."""
    if not any(b.kind == "rounded-length" for b in plan.blockers):
        return False
    a, sol = plan.analysis, plan.solution
    divisions = Divisions.of(a, sol)
    sizes = [case_sizes(plan.axes, case.inputs) for case in cases]
    unseen = False
    for site in rounded_outputs(a, sol):
        shown = [
            (_met_at(divisions, sol, site.dim, s), _met_at(divisions, sol, site.length, s))
            for s in sizes
        ]
        if any(d is not None and x is not None and d != x for d, x in shown):
            continue
        unseen = True
        for blocker in plan.blockers:
            if blocker.kind == "rounded-length" and site.output in blocker.why:
                blocker.why += (
                    f"; at the reference cases given {dim_text(a, sol, site.dim)} is "
                    f"{dim_text(a, sol, site.length)} (add a case where it rounds)"
                )
    return unseen


def _met_at(divisions: Divisions, sol: Solution, met: Dim, size: dict[str, int]) -> int | None:
    """The size ``met`` (a dim in the symbols and the graph's divisions) takes at ``size``;
    None where ``size`` does not give it."""
    known = {**size, **{atom: v for atom, (_, _, v) in divisions.values(size).items()}}
    try:
        return sol.resolve(met).evaluate(known)
    except KeyError:
        return None


def _readings(plan: SymbolizePlan) -> tuple[str, dict[str, Reading]] | None:
    """What the reference cases could decide, and the readings to choose between, where every
    blocker is one the graph cannot decide but a rewrite could fix: the plan's
    ``same_padding`` (fixed pads as exported, or ``auto_pad=SAME_UPPER``) or its
    ``grid_tables`` (the table resized to the grid bicubically, bilinearly or to the nearest rows),
    or, where every blocker is ``one-point``, one row repeated (the graph as it is) against a
    table of that length (which no rewrite rebuilds); else None."""
    nodes = {b.node for b in plan.blockers}
    if all(b.kind == "one-point" for b in plan.blockers):
        return f"{len(plan.blockers)} constant(s) of one row met by a size traced at 1", {
            "one row repeated (a broadcast)": lambda m: m,
            "a table of that length": lambda m: None,
        }
    if all(b.kind == "rounded-length" for b in plan.blockers):
        return f"{len(plan.blockers)} output length(s) rounded to a multiple at run time", {
            "rounding as the graph does": lambda m: m,
            "padded back in code the trace did not record": lambda m: None,
        }
    if nodes <= plan.same_padding.keys():
        ops = [plan.same_padding[n] for n in sorted(nodes)]
        return f"padding of {len(ops)} op(s)", {
            "the fixed pads as exported": lambda m: m,
            "'same' padding (auto_pad=SAME_UPPER)": lambda m: same_padding(m, ops),
        }
    if nodes <= plan.grid_tables.keys():
        tables = [plan.grid_tables[n] for n in sorted(nodes)]
        arrays = {t.tensor: plan.analysis.consts[t.tensor] for t in tables}
        over = "a patch grid" if any(len(t.shape) == 2 for t in tables) else "a sequence"
        to = "the grid" if over == "a patch grid" else "the length"
        return f"{len(tables)} table(s) over {over}", {
            f"resized {how} to {to}": partial(resize_tables, tables=tables, how=how, arrays=arrays)
            for how in GRID_RESIZES
        }
    return None
