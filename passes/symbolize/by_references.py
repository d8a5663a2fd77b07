"""Where the graph cannot tell two readings apart, the run's reference cases (``--ref``) may:
the one that alone matches every case is taken, and the blockers it answers go.

- :func:`decide_coincidences`: sizes kept at a traced value a symbol fits too
  (:mod:`.coincident`): fixed as traced, or following their symbols;
- :func:`decide_readings`: 'same' padding baked at the traced size, or a table over a patch grid
  (:mod:`.readings`): the rewrite that matches.

Where none or several match, each blocker is told why.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial

import onnx

from onnxsurgery.passes.symbolize.plan import SymbolizePlan, plan_symbolize
from onnxsurgery.passes.symbolize.readings import GRID_RESIZES, resize_tables, same_padding
from onnxsurgery.passes.symbolize.reference_cases import reference_mismatch
from onnxsurgery.passes.symbolize.rewrite import apply_plan
from onnxsurgery.pipeline.contract import PassContext
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
    if choice is None or not cases:
        return None, None
    what, readings = choice
    base = apply_plan(model if goes_by_path(bare) else bare, plan)
    candidates = {label: rewrite(base) for label, rewrite in readings.items()}
    passed = _matching(model, bare, plan, candidates, cases, ctx)
    if passed is None:
        return None, None
    plan.blockers = []
    others = ", ".join(label for label in readings if label != passed)
    return f"{what}: {passed} matches the reference cases, {others} not", readings[passed]


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
) -> tuple[SymbolizePlan, str | None]:
    """Where every blocker is a size kept at a traced value a symbol fits too
    (:mod:`.coincident`) and the run has reference cases, let them choose: the plan as it is
    (the sizes fixed, its blockers gone) or the plan with those sizes following their
    symbols, whichever alone matches every case. Returns (the plan to go on with, what was
    decided or None)."""
    if not plan.blockers or any(b.kind != "coincident-size" for b in plan.blockers):
        return plan, None
    cases = references()
    if not cases:
        return plan, None
    kept = keep | {n for c in plan.coincidences for n in c.nodes()}
    fixed_plan = plan_symbolize(model, plan.axes, rows, bare=bare, keep=kept, bounds=bounds)
    general = plan_symbolize(
        model, plan.axes, rows, bare=bare, keep=keep, generalize=True, bounds=bounds
    )
    if general.blockers or fixed_plan.blockers:
        return plan, None
    root = model if goes_by_path(bare) else bare
    fixed, following = "the sizes fixed as traced", "the sizes following their symbols"
    candidates = {fixed: apply_plan(root, fixed_plan), following: apply_plan(root, general)}
    passed = _matching(model, bare, plan, candidates, cases, ctx)
    if passed is None:
        return plan, None
    nodes = ", ".join(sorted({b.node for b in plan.blockers}))
    other = following if passed == fixed else fixed
    text = f"sizes of {nodes}: {passed} match the reference cases, {other} not"
    return (fixed_plan if passed == fixed else general), text


def _matching(
    model: onnx.ModelProto,
    bare: onnx.ModelProto,
    plan: SymbolizePlan,
    candidates: Mapping[str, onnx.ModelProto | None],
    references: list,
    ctx: PassContext,
) -> str | None:
    """The one candidate rewrite that alone matches every reference case; None (each of
    ``plan``'s blockers told why) where none or several do."""
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
    if len(passed) == 1:
        return passed[0]
    why = (
        f"match {' and '.join(passed)} alike (add cases at other sizes)"
        if passed
        else "match no reading: " + "; ".join(f"{k}: {v}" for k, v in verdict.items())
    )
    for blocker in plan.blockers:
        blocker.why += f"; the reference cases given {why}"
    return None


def _readings(plan: SymbolizePlan) -> tuple[str, dict[str, Reading]] | None:
    """What the reference cases could decide, and the readings to choose between, where every
    blocker is one the graph cannot decide but a rewrite could fix: the plan's
    ``same_padding`` (fixed pads as exported, or ``auto_pad=SAME_UPPER``) or its
    ``grid_tables`` (the table resized to the grid bicubically, bilinearly or to the nearest rows); else None."""
    nodes = {b.node for b in plan.blockers}
    if nodes <= plan.same_padding.keys():
        ops = [plan.same_padding[n] for n in sorted(nodes)]
        return f"padding of {len(ops)} op(s)", {
            "the fixed pads as exported": lambda m: m,
            "'same' padding (auto_pad=SAME_UPPER)": lambda m: same_padding(m, ops),
        }
    if nodes <= plan.grid_tables.keys():
        tables = [plan.grid_tables[n] for n in sorted(nodes)]
        arrays = {t.tensor: plan.analysis.consts[t.tensor] for t in tables}
        return f"{len(tables)} table(s) over a patch grid", {
            f"resized {how} to the grid": partial(
                resize_tables, tables=tables, how=how, arrays=arrays
            )
            for how in GRID_RESIZES
        }
    return None
