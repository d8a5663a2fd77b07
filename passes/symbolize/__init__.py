"""Make a statically exported model dynamic: name input axes and rewrite every traced size.

The pass reads as stages, each a module that only reads what the one before it produced:

    onnxsurgery.shapes  propagate symbolic shapes with provenance, then solve the constraints
    generators.py       how a constant was generated along its traced axes (Range grids, tables)
    trig_tables.py      its cos/sin and rotary tables; table_generator.py: the Generator both match to
    batch_indices.py    constant indices that enumerate the batch
    plan.py             the plan: every change (constant -> shape computation) and every blocker
    plan_view.py        the plan in the terminal (inspect, the report): changes, blockers, levels
    reads.py            one constant read as the rules see it, its context, the Change made of it
    rules.py            the rules for one constant read (CONST_RULES), the first that applies decides
    relative_tables.py  sinusoids over relative distances, their length tied to the size they follow
    rounded_lengths.py  output lengths pooled by k and expanded back (a rule reference cases decide)
    graph_blockers.py   blockers of the graph as a whole, declared rules (GRAPH_RULES)
    cache_offsets.py    counts and band bounds that move with a KV cache's length, or cannot be told
    blockers.py         a blocker (what holds only at the traced size), grouped and summarized
    baked.py            what an export baked at the traced size ('same' pads, grid tables)
    block_padding.py    a length padded to a multiple of a block at the traced size (a rule)
    one_block.py        that pad read as block - seq within a bound (one block), guarded past it
    coincident.py       sizes a symbol and a fixed value both fit (kept ones blocked, hinted ambiguous)
    conflict_readings.py  a conflict's one reading: kept sizes following a symbol, a row broadcast
    wording.py          how blockers spell dims, axes and fixes in the input symbols
    readings.py         the rewrites reference cases choose between where the graph cannot tell
    by_references.py    the reference cases choosing among readings (coincident sizes, each
                        group fixed or following on its own; readings.py)
    rewrite.py          apply the plan to a copy of the graph
    graph_edits.py      names a node reads, stable topological order, orphans, stale value infos
    check.py            run the result on ONNX Runtime at the traced size and at other sizes
    sizes.py            the sizes the check runs at (inputs the model takes, remainders, bounds)
    bounds.py           symbols bounded at a size (seq<=traced): the bounds, a size's largest value
    row_checks.py       the check's evidence that a batch's rows are independent
    reference_cases.py  the --ref cases in the check: which the model claims, running them
    ort_failure.py      an ONNX Runtime failure in the check, naming the model's node
    feeds.py            the check's inputs, shaped by the graph (ids, sizes, masks), never by names

:class:`Symbolize` below ties them together: options -> plan -> rewrite -> check.

Options in detail: ``INPUT:AXIS=NAME`` entries (``*`` matches every input), or ``dynamic_axes``
in torch's format (``{"x": {0: "batch"}}`` or ``{"x": [0]}``); neither means the dims the
model's inputs already name (``[batch, sequence]``), each under its name, or ``*:0=batch``
where they name none.
``strict`` (default true) fails listing the blockers (identical ones as one entry, the message
kept to a screen, every one in the --report JSON); false applies what it can and reports the
rest. ``check`` (default true) runs the result on ONNX Runtime at the traced size (same outputs
as the original within 1e-5, or with ORT's graph optimizations off where only its fusions of the
static original round apart), at two other sizes per symbol, and on the reference cases given
to the run (``--ref``). Each symbol ends verified to a level: ``references`` (matched stored torch
outputs at other sizes), ``rows`` (batch rows shown independent), ``runs`` (ran at other sizes,
values unverified), ``ambiguous`` (a size follows it where the trace fits a fixed value too) or
``traced-only``; ``verify=LEVEL`` makes anything less an error
(``verify=references`` for builds that must not ship unverified models). ``rows`` names the
symbols whose rows are independent (``rows=batch``, several separated by ``+``; ``rows=`` for
none); by default the graph decides (the one symbol on axis 0 of every input, along which no node
mixes rows), never a symbol's name.

Rules (symbolic shape propagation with provenance, decided by structure, not by value):
- every tensor gets a symbolic shape (``batch*16``, ``seq + 1``); each constant read as a size
  (Reshape/Expand/Tile/Slice/Range/Resize/Split/Pad/ConstantOfShape inputs, shape arithmetic)
  or as data (a zero initial state, a mask) gets unknowns, fixed by the equalities the graph
  requires (broadcasting, MatMul/Gemm inner dims, Concat, RNN batch, Reshape element count);
  a 1 that only broadcasts stays 1, a 3 that is the channel count stays 3;
- constants that must change become ``Shape -> ...`` computations (``0``/``-1`` in Reshape
  where valid); data constants are regenerated from the pattern their values follow (a
  broadcast, a Range grid, rotary cos/sin tables, a causal/sliding-window band, a per-head
  Tile); constant indices into a batch axis enumerate the batch (at batch 1 too);
- what holds only at the traced size (a table cut to the traced length, a loop unrolled at
  trace time, a size baked into a weight) is a blocker naming the node and what to do;
- a pattern is taken only when the traced values pin it down: 3 or more points along a
  counting axis (two points fit any line), 2 for a repeat, no start or bound equal to a traced
  size; along a batch, rows are independent by structure, so one row may repeat;
- the one exception is a cache length: where a graph input axis is grown by a Concat with
  computed values (``present = Concat(past, new)``), a count, a rotary table or a band bound
  that starts at that axis's traced size (and at no other symbol's) moves with it
  (positions past .. past + seq - 1), and the check against references decides; a band
  over ``[seq, past + seq]`` (queries against keys that add the cache) counts both bounds
  from past, a sliding window's lower one too (``past - w < j - i <= past``: the window
  keeps its width, only its offset moves);
- symbols the graph ties together (``total = past + seq``) become relations, kept by the check;
- a strided Conv or pool padded by TensorFlow's 'same' rule for the traced size (a Pad before
  it, or uneven pads of its own) is a blocker: the source may compute that padding from the
  size (transformers' ``tf_padding``) or pad by fixed amounts. Reference cases decide: the
  fixed pads are kept, or the op rewritten to ``auto_pad=SAME_UPPER``, whichever alone
  matches them (MobileNetV2 with one case at 48x64 then matches torch at 40x24);
- likewise a learned [1, lead + h*w, dim] table added whole over a patch grid (DINOv2 by
  dynamo: torch interpolates it at other resolutions, in code the export skipped): reference
  cases at another grid choose a bicubic, bilinear or nearest resize of its grid rows (torch's
  ``F.interpolate``; TimeSformer's is 'nearest'), whichever alone matches them.
- a Resize to a patch grid whose sizes the export folded at the traced grid (YOLOS by
  TorchScript: a table interpolated to ``(height // 16, width // 16)`` in Python ints), where the
  graph needs its output's rows to be the grid's ``h*w``, follows the grid axis by axis.

    x[4,3,32,32] ─ ... ─ Reshape(shape=[4, -1]) ─ Gemm
    =>
    x[batch,3,32,32] ─ ... ─ Reshape(shape=[0, -1]) ─ Gemm      (logits [batch, 10])
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import onnx

from onnxsurgery.errors import OnnxSurgeryError
from onnxsurgery.model.bounds import record_bounds
from onnxsurgery.passes.symbolize.batch_indices import mixed_batches
from onnxsurgery.passes.symbolize.blockers import blocker_summary, group_blockers
from onnxsurgery.passes.symbolize.by_references import Reading, decide_coincidences, decide_readings
from onnxsurgery.passes.symbolize.check import (
    LEVELS,
    CheckRequest,
    CheckResult,
    check_dynamic,
    traced_only,
)
from onnxsurgery.passes.symbolize.feeds import shape_inputs
from onnxsurgery.passes.symbolize.plan import SymbolizePlan, normalize_axes, plan_symbolize
from onnxsurgery.passes.symbolize.rewrite import apply_plan
from onnxsurgery.passes.symbolize.sizes import Divisions, size_steps
from onnxsurgery.passes.symbolize.wording import traced_words
from onnxsurgery.pipeline.contract import Diagnostic, Pass, PassContext, PassResult
from onnxsurgery.shapes.dims import Dim
from onnxsurgery.validation.references import load_cases
from onnxsurgery.validation.runtime import goes_by_path

__all__ = ["Symbolize"]

_AXIS_KEY = re.compile(r"^(?P<input>\*|[^:]+):(?P<axis>-?\d+)$")
#: ``NAME`` or ``NAME<=BOUND`` (``traced`` or a number): an axis's symbol and its upper bound
_SYMBOL = re.compile(r"^\s*(?P<sym>[^<=\s]+)\s*(?:<=\s*(?P<bound>\S+)\s*)?$")


class Symbolize(Pass):
    """Give input axes symbolic names and rewrite the traced sizes left in the graph.

    Every constant the export baked at the traced size (Reshape/Expand/Slice shapes, Range
    bounds, zero states, masks, position tables) becomes a computation from the inputs' shapes,
    decided by symbolic shape propagation, not by value. What holds only at the traced size, or
    fits both a fixed and a symbolic reading, is a blocker naming the node. The result is run on
    ONNX Runtime at other sizes and on the --ref cases; each symbol is reported as verified to
    references, rows, runs, ambiguous or traced-only.

    Options:
        INPUT:AXIS (str, default: *:0=batch): Name axis AXIS of input INPUT (``*``: every input),
            e.g. x:0=batch, ids:1=seq; ``ids:1=seq<=traced`` (or ``seq<=512``) bounds the
            symbol: a table folded at the traced length is then sliced to the size (valid up
            to the traced size), the check stays within the bound, and the bound is recorded
            in the model's metadata_props (``onnxsurgery.symbol_bound.seq``).
        dynamic_axes (dict, default: none): The axes in torch.onnx.export's format instead,
            e.g. {"x": {0: "batch"}} or {"x": [0]}.
        strict (bool): Fail listing the blockers; false applies what it can and reports the rest.
        check (bool): Run the result on ONNX Runtime at the traced size, at two other sizes per
            symbol and on the --ref cases.
        verify (str, default: none): Fail when a symbol is verified less than this level:
            references, rows, runs, ambiguous or traced-only.
        rows (str, default: decided by the graph): The symbols whose rows are independent (a+b
            for several; empty for none).
        keep (str, default: none): Nodes whose sizes stay fixed on purpose where a symbol's
            traced size fits them too (NODE, several NODE+NODE), e.g. keep=/Resize.

    Example:
        symbolize
        symbolize(x:0=batch, x:1=seq)
        symbolize(ids:0=batch, ids:1=seq<=traced)
        symbolize(*:0=batch, verify=references)
        symbolize(*:0=batch, *:2=height, *:3=width, keep=/Resize)
    """

    name = "symbolize"
    weights_on_disk = True

    def __init__(
        self,
        *,
        dynamic_axes: dict[str, Any] | None = None,
        strict: bool = True,
        check: bool = True,
        verify: str | None = None,
        rows: str | list[str] | None = None,
        keep: str | list[str] | None = None,
        **axes: str,
    ) -> None:
        super().__init__(
            **({"dynamic_axes": dynamic_axes} if dynamic_axes is not None else {}),
            **({"strict": strict} if strict is not True else {}),
            **({"check": check} if check is not True else {}),
            **({"verify": verify} if verify is not None else {}),
            **({"rows": rows} if rows is not None else {}),
            **({"keep": keep} if keep is not None else {}),
            **axes,
        )
        for opt, value in (("strict", strict), ("check", check)):
            if not isinstance(value, bool):
                raise TypeError(f"{opt} must be true or false, got {value!r}")
        if verify is not None and verify not in LEVELS:
            raise ValueError(f"verify must be one of {', '.join(LEVELS)}, got {verify!r}")
        if verify is not None and verify != "traced-only" and not check:
            raise ValueError(f"verify={verify} needs the check; drop check=false")
        self.strict = strict
        self.check = check
        self.verify = verify
        self.rows = _row_symbols(rows)
        self.keep = _node_names(keep)
        self.explicit: dict[str, dict[int, str]] = (
            normalize_axes(dynamic_axes) if dynamic_axes is not None else {}
        )
        self.wildcard: dict[int, str] = {}
        #: each bounded symbol's upper bound (None: its traced size)
        self.bounds: dict[str, int | None] = {}
        for key, sym in axes.items():
            self._name_axis(key, sym)
        if not self.explicit and not self.wildcard:
            self.wildcard = {0: "batch"}

    def _name_axis(self, key: str, sym: str) -> None:
        """Record one ``INPUT:AXIS=NAME`` option (``*`` for every input)."""
        m = _AXIS_KEY.match(key)
        if m is None:
            raise ValueError(
                f"option {key!r} is not INPUT:AXIS (like x:0=batch or *:1=seq), nor one of "
                "dynamic_axes, strict, check, verify, rows, keep"
            )
        named = _SYMBOL.match(sym) if isinstance(sym, str) else None
        if named is None or not named.group("sym").isidentifier():
            raise ValueError(
                f"{key}={sym!r}: the symbol must be a name like batch or seq (bounded: seq<=traced "
                "or seq<=512)"
            )
        sym = named.group("sym")
        if named.group("bound") is not None:
            self._bound(key, sym, named.group("bound"))
        axis = int(m.group("axis"))
        target = (
            self.wildcard if m.group("input") == "*" else self.explicit.setdefault(m.group("input"), {})
        )
        if axis in target and target[axis] != sym:
            raise ValueError(f"{key} is named twice ({target[axis]!r} and {sym!r})")
        target[axis] = sym

    def _bound(self, key: str, sym: str, text: str) -> None:
        """Record ``sym<=text`` (``traced``, or a positive whole number)."""
        if text == "traced":
            bound: int | None = None
        elif text.isdigit() and int(text) > 0:
            bound = int(text)
        else:
            raise ValueError(
                f"{key}={sym}<={text}: the bound must be 'traced' or a positive whole number, "
                f"like {sym}<=traced or {sym}<=512"
            )
        if sym in self.bounds and self.bounds[sym] != bound:
            raise ValueError(f"{sym} is bounded twice ({self.bounds[sym] or 'traced'} and {text})")
        self.bounds[sym] = bound

    def resolve_axes(self, model: onnx.ModelProto) -> dict[str, dict[int, str]]:
        """The {input: {axis: name}} this pass applies to ``model`` (wildcards expanded)."""
        inits = {i.name for i in model.graph.initializer}
        inputs = {
            i.name: len(i.type.tensor_type.shape.dim)
            for i in model.graph.input
            if i.name not in inits
        }
        kinds = {i.name: i.type.WhichOneof("value") for i in model.graph.input}
        for name in self.explicit:
            if name not in inputs:
                self.fail(
                    f"no graph input {name!r}; the model's inputs are {', '.join(inputs) or '(none)'}"
                )
            if kinds[name] != "tensor_type":
                kind = (kinds[name] or "value of no type").removesuffix("_type").replace("_", " ")
                self.fail(f"input {name!r} is a {kind}, not a tensor: symbolize names tensor axes only")
        sizes = shape_inputs(model)  # a shape vector's axis 0 is a rank, never a batch
        axes: dict[str, dict[int, str]] = {}
        for name, rank in inputs.items():
            spec = {
                a: s for a, s in self.wildcard.items() if -rank <= a < rank and name not in sizes
            }
            spec.update(self.explicit.get(name, {}))
            if spec:
                axes[name] = spec
        return axes

    def preview(self, model: onnx.ModelProto) -> SymbolizePlan:
        """The changes and blockers symbolize would find in ``model`` (nothing is edited)."""
        try:
            return plan_symbolize(model, self.resolve_axes(model), self.rows, bounds=self.bounds)
        except ValueError as exc:
            self.fail(str(exc))

    def run(self, model: onnx.ModelProto, ctx: PassContext) -> PassResult:
        axes = self.resolve_axes(model)
        if not axes:
            return PassResult(
                model, modified=False, diagnostics=[Diagnostic.info("no input axis to symbolize")]
            )
        # One weightless view serves every step that needs the graph without the weights (shape
        # inference, the rewrite, the check's sessions, the report).
        assert ctx.handle is not None  # Pass.__call__ sets it
        bare = ctx.handle.weightless()
        plan, diagnostics, reading = self._plan(model, bare, axes, ctx)
        new = self._rewrite(model, bare, plan, reading, ctx)
        if not (plan.changes or _io_changed(model, new)):
            diagnostics.append(Diagnostic.info("the model is already dynamic on these axes"))
            return PassResult(model, modified=False, diagnostics=diagnostics, report=plan)
        diagnostics += [
            Diagnostic.info(
                f"input {c.input_index} ({c.input}): {c.old} -> {c.new}", node=c.node, op=c.op
            )
            for c in plan.changes
        ]
        result = self._check(model, new, bare, plan, ctx)
        session, result.session = result.session, None  # for the run's validation, not the report
        if self.check:
            diagnostics.append(Diagnostic.info(f"check: {result}"))
        plan.verification = result
        diagnostics += self._verified(result)
        syms = ", ".join(
            f"{s} ({traced_words(s, v, plan.analysis.dynamic)}{_bound_note(plan.bounds, s)}, "
            f"verified: "
            f"{result.levels.get(s, 'traced-only')})"
            for s, v in plan.symbols.items()
        )
        record_bounds(new, plan.bounds)
        diagnostics.insert(
            0, Diagnostic.info(f"symbols {syms}; {len(plan.changes)} constant(s) rewritten")
        )
        # The rewritten view, placeholders and all: the handle gives it its weights.
        return PassResult(
            new, modified=True, diagnostics=diagnostics, report=plan, session=session
        )

    def _plan(
        self,
        model: onnx.ModelProto,
        bare: onnx.ModelProto,
        axes: dict[str, dict[int, str]],
        ctx: PassContext,
    ) -> tuple[SymbolizePlan, list[Diagnostic], Reading | None]:
        """The plan, its diagnostics, and the rewrite the reference cases chose where the graph
        could not (:mod:`.by_references`); fails listing the blockers when strict."""
        ctx.stage("planning")
        self._check_keep(model)
        try:
            plan = plan_symbolize(
                model, axes, self.rows, bare=bare, keep=self.keep, bounds=self.bounds
            )
        except ValueError as exc:
            self.fail(str(exc))
        def references() -> list:  # the --ref cases, loaded where they could decide
            return self._references(ctx) if self.check else []

        plan, decided = decide_coincidences(
            model, bare, plan, references, ctx, rows=self.rows, keep=self.keep, bounds=self.bounds,
            by_rows=self.check,
        )
        diagnostics = [Diagnostic.warning(n) for n in plan.notes]  # of the plan decided on
        reading: Reading | None = None
        if decided is None:
            decided, reading = decide_readings(model, bare, plan, references, ctx)
        if decided is not None:
            diagnostics.append(Diagnostic.info(decided))
        diagnostics += [
            Diagnostic.warning(f"{sym} is ambiguous: {'; '.join(what)}")
            for sym, what in plan.ambiguous.items()
        ]
        if plan.blockers:
            if self.strict:
                plan.analysis.consts.clear()  # the report keeps no weights (as on success)
                plan.analysis.model = bare
                self.fail(
                    blocker_summary(plan.blockers),
                    node=plan.blockers[0].node,
                    details=[str(b) for b in plan.blockers],
                    report=plan,
                )
            diagnostics += [
                Diagnostic.blocker(str(g), node=g.blockers[0].node, op=g.blockers[0].op)
                for g in group_blockers(plan.blockers)
            ]
        return plan, diagnostics, reading

    def _rewrite(
        self,
        model: onnx.ModelProto,
        bare: onnx.ModelProto,
        plan: SymbolizePlan,
        reading: Reading | None,
        ctx: PassContext,
    ) -> onnx.ModelProto:
        """Apply the plan (then the chosen reading) to the weightless view.

        The rewrite changes the graph, not the weights: it edits the weightless view, which the
        check runs with the original's weights, and which gets them back from the handle once
        the pass returns, so two full copies of the weights never sit beside the check's
        sessions. (Over 2 GB even so, ORT reads it from a file, weights and all: a full copy,
        then.)"""
        ctx.stage("rewriting")
        new = apply_plan(model if goes_by_path(bare) else bare, plan)
        if reading is not None:  # what the reference cases chose where the graph could not
            chosen = reading(new)
            assert chosen is not None  # the cases chose it having run it on this very rewrite
            new = chosen
        # The rewrite was the last reader of the constants' arrays (as large as the weights),
        # and of the original's nodes: the check and the report need none of them. The plan is
        # the run's report and outlives the input model: it keeps the graph it analysed, not
        # the weights.
        plan.analysis.consts.clear()
        plan.analysis.producers.clear()
        plan.analysis.consumers.clear()
        plan.analysis.model = bare
        return new

    def _check(
        self,
        model: onnx.ModelProto,
        new: onnx.ModelProto,
        bare: onnx.ModelProto,
        plan: SymbolizePlan,
        ctx: PassContext,
    ) -> CheckResult:
        """The check of the rewrite on ONNX Runtime (:func:`check_dynamic`), or, with
        ``check=false``, every symbol at its traced size."""
        if not self.check:
            return traced_only(plan.symbols)
        ctx.stage("checking on ONNX Runtime at the traced size and other sizes")
        divisions = Divisions.of(plan.analysis, plan.solution)
        return check_dynamic(
            CheckRequest(
                model,
                new,
                plan.axes,
                plan.symbols,
                _output_dims(plan),
                ctx.provider,
                dynamic=plan.analysis.dynamic,
                fixed={s for b in plan.blockers for s in b.symbols},
                batch_rows=plan.rows,
                unsure_rows=mixed_batches(plan.analysis, self.rows),
                steps=_size_steps(plan, divisions),
                relations=plan.relations,
                ambiguous=frozenset(plan.ambiguous),
                references=self._references(ctx),
                output_map=ctx.map_outputs if ctx.output_maps else None,
                bare=bare,
                changes=plan.changes,
                bounds=plan.bounds,
                divisions=divisions,
            )
        )

    def _check_keep(self, model: onnx.ModelProto) -> None:
        """Every node ``keep=`` names is in the graph."""
        names = {n.name for n in model.graph.node}
        missing = sorted(self.keep - names)
        if missing:
            self.fail(
                f"keep={'+'.join(missing)}: no node of that name in the graph (keep names the "
                "node a blocker names, like keep=/Resize)"
            )

    def _references(self, ctx: PassContext) -> list:
        """The run's reference cases, or none."""
        if ctx.references is None:
            return []
        try:
            return load_cases(ctx.references)
        except OnnxSurgeryError as exc:
            self.fail(f"reading the references for the check: {exc}")

    def _verified(self, result) -> list[Diagnostic]:
        """One line when a symbol ends below ``references`` (how to fix it); an error when below
        ``verify``."""
        below = {s: lv for s, lv in result.levels.items() if lv != "references"}
        if self.verify is not None:
            floor = LEVELS.index(self.verify)
            short = {s: lv for s, lv in result.levels.items() if LEVELS.index(lv) > floor}
            if short:
                listing = ", ".join(f"{s} to {lv}" for s, lv in short.items())
                self.fail(
                    f"verify={self.verify}: {listing} only; give reference cases at other sizes "
                    "(--ref DIR, made by `onnxsurgery reference record`)"
                )
        if not below:
            return []
        listing = ", ".join(f"{s}: {lv}" for s, lv in below.items())
        return [
            Diagnostic.warning(
                f"values at other sizes not verified against torch ({listing}); to verify, pass "
                "--ref with cases at other sizes (record them with `onnxsurgery reference record`)"
            )
        ]


def _bound_note(bounds: Mapping[str, int], sym: str) -> str:
    """``, at most 8`` for a bounded symbol (the run's summary line), else nothing."""
    return f", at most {bounds[sym]}" if sym in bounds else ""


def _row_symbols(rows: str | list[str] | None) -> set[str] | None:
    """The ``rows=`` option: symbols whose rows are independent (``a+b``; empty for none)."""
    names = ([] if not rows.strip() else rows.split("+")) if isinstance(rows, str) else rows
    if names is not None and (
        not isinstance(names, (list, tuple))
        or not all(isinstance(n, str) and n.strip().isidentifier() for n in names)
    ):
        raise ValueError(f"rows must name symbols like batch (several: a+b), got {rows!r}")
    return None if names is None else {n.strip() for n in names}


def _node_names(keep: str | list[str] | None) -> frozenset[str]:
    """``keep=`` as a set of node names (``a+b`` or a list)."""
    if keep is None:
        return frozenset()
    names = keep.split("+") if isinstance(keep, str) else keep
    if not isinstance(names, (list, tuple)) or not all(
        isinstance(n, str) and n.strip() for n in names
    ):
        raise ValueError(f"keep must name nodes (several: a+b), got {keep!r}")
    return frozenset(n.strip() for n in names)


def _size_steps(plan: SymbolizePlan, divisions: Divisions) -> dict[str, int]:
    """For symbols a strided op divides: the power of two (up to 8) dividing the traced size,
    times what keeps every division's remainder (:func:`.sizes.size_steps`)."""
    divided: set[str] = set()
    for num, _, _ in plan.analysis.floors:
        divided.update(s for s in plan.symbols if s in num)
    steps = {}
    for sym in divided:
        v, step = plan.symbols[sym], 1
        while step < 8 and v % (step * 2) == 0:
            step *= 2
        steps[sym] = step
    return size_steps(plan.symbols, divisions, steps)


def _output_dims(plan: SymbolizePlan) -> dict[str, list[Dim | None] | None]:
    out: dict[str, list[Dim | None] | None] = {}
    for o in plan.analysis.model.graph.output:
        info = plan.analysis.tensors.get(o.name)
        if info is None or info.shape is None:
            out[o.name] = None
            continue
        dims: list[Dim | None] = []
        for d in info.shape:
            r = plan.solution.resolve(d)
            dims.append(r if all(x in plan.symbols for x in r.atoms()) else None)
        out[o.name] = dims
    return out


def _io_changed(before: onnx.ModelProto, after: onnx.ModelProto) -> bool:
    def sig(m: onnx.ModelProto) -> list[bytes]:
        return [vi.type.SerializeToString() for vi in list(m.graph.input) + list(m.graph.output)]

    return sig(before) != sig(after) or len(before.graph.node) != len(after.graph.node)
