"""Run a symbolized model at several sizes on ONNX Runtime and check it stays right.

:func:`check_dynamic` feeds inputs shaped by the graph (:func:`~onnxsurgery.passes.symbolize.feeds.check_feeds`: token ids over the
vocabulary their gather reads, sizes never made up, initializers listed as inputs never fed) to
the original model (one session), then to the rewritten one (one session, sharing its weights),
and hands what they said to a list of evidence checks (:data:`EVIDENCE`), each with one job:

1. :func:`check_traced_size`: at the traced size the outputs agree with the original's within
   1e-5, or, where ORT fuses the static original's nodes and rounds apart, both models agree
   with its graph optimizations off;
2. :func:`check_batch_in_original`, :func:`check_rows`, :func:`check_first_rows`: for batches
   (rows independent), a new row 0 leaves the original's other rows alone, each row of a larger
   batch equals a run of that row alone, and the first traced-many rows of a larger batch equal
   the original model on those rows (a size grown alone begins with the traced run's inputs, so
   those are the traced run's outputs);
3. :func:`check_shapes`: at two other sizes per free symbol (symbols the graph ties to others,
   ``total = past + seq``, follow them) the model runs, and every output dim that the plan
   expresses in the symbols comes out as that expression evaluated at the size;
4. :func:`check_prefix`: evidence only, a larger run's first positions equal the original's;
5. :func:`check_claims`, :func:`check_references`: the reference cases given to the run fit
   the model, and every output matches torch's.

Every comparison goes through validation's :func:`~onnxsurgery.validation.arrays.compare_arrays`
and a failure quotes its ``describe()`` after the check's context: a tolerance failure is worded
in ``validation/`` alone. Each check returns its first failure (:class:`Finding`); the driver
raises the earliest in the order the checks read the runs, as a
:class:`~onnxsurgery.errors.PassError` (ONNX Runtime errors translated into the node that broke,
:func:`~onnxsurgery.validation.runtime.describe_ort_error`). Each symbol ends at the best level
it reached (:data:`LEVELS`, :class:`CheckResult`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnxruntime as ort

from onnxsurgery.errors import PassError
from onnxsurgery.model.signature import model_inputs
from onnxsurgery.passes.symbolize.feeds import check_feeds, shape_inputs, unsized_axes
from onnxsurgery.passes.symbolize.ort_failure import (
    PlanDecisions,
    broken_decision,
    ort_failure,
    wrong_values,
)
from onnxsurgery.passes.symbolize.reads import Change
from onnxsurgery.passes.symbolize.reference_cases import (
    Claims,
    OutputMap,
    claimed_cases,
    run_reference_cases,
    size_text,
)
from onnxsurgery.passes.symbolize.row_checks import (
    axes_of,
    begin_with,
    compare,
    first_differs,
    head_rows,
    new_row_zero,
    original_rows_independent,
    rows_alone,
    rows_differ,
)
from onnxsurgery.passes.symbolize.sizes import Divisions, check_sizes
from onnxsurgery.shapes.dims import Dim
from onnxsurgery.validation.arrays import OutputComparison
from onnxsurgery.validation.references import Case
from onnxsurgery.validation.runtime import (
    create_session,
    run_many,
)
from onnxsurgery.validation.session_weights import SharedWeight, session_weights

__all__ = [
    "EVIDENCE",
    "LEVELS",
    "CheckRequest",
    "CheckResult",
    "CheckState",
    "Finding",
    "check_batch_in_original",
    "check_claims",
    "check_dynamic",
    "check_first_rows",
    "check_prefix",
    "check_references",
    "check_rows",
    "check_shapes",
    "check_traced_size",
    "check_sizes",
    "traced_only",
]


#: A run's outputs by name, or the error ONNX Runtime raised.
Said = dict[str, np.ndarray] | Exception


#: How far a symbol was verified, best first (see :class:`CheckResult`).
LEVELS = ("references", "rows", "runs", "ambiguous", "traced-only")


@dataclass
class CheckResult:
    """The sizes checked, the largest difference from the original at the traced size, and how
    far each symbol was verified (``levels``; the oracle behind each in ``oracles``):

    - ``references``: the model matched stored torch outputs at sizes of the symbol other than
      the traced one;
    - ``rows``: at other sizes each batch row equals a run of that row alone (rows independent),
      values otherwise unverified;
    - ``runs``: ran at other sizes with the output shapes the symbols give, values unverified;
    - ``ambiguous``: ran at other sizes, but a size follows it where the trace fits a fixed
      value as well (:mod:`.coincident`): only reference cases can tell which is right;
    - ``traced-only``: checked at the traced size only (kept there by a blocker, or no check).
    """

    sizes: list[dict[str, int]] = field(default_factory=list)
    max_abs_diff: float = 0.0
    rows_checked: bool = False
    levels: dict[str, str] = field(default_factory=dict)
    oracles: dict[str, str] = field(default_factory=dict)
    reference_cases: int = 0
    #: the traced-size outputs differ from the original's past the tolerance only by how ONNX
    #: Runtime fuses the static original (equal with its graph optimizations off)
    fusion_rounding: bool = False
    #: The session over the rewritten model that ran the reference cases, for the run's
    #: validation to reuse (the pass takes it out before the result goes into its report).
    session: ort.InferenceSession | None = field(default=None, repr=False, compare=False)

    def __str__(self) -> str:
        text = "; ".join(", ".join(f"{k}={v}" for k, v in s.items()) for s in self.sizes)
        rows = "; batch rows independent" if self.rows_checked else ""
        refs = f"; matched {self.reference_cases} reference case(s)" if self.reference_cases else ""
        levels = ", ".join(f"{s}: {lv}" for s, lv in self.levels.items())
        fused = (
            " (ONNX Runtime's fusions of the static original's nodes; equal with its graph "
            "optimizations off)"
            if self.fusion_rounding
            else ""
        )
        return (
            f"ran at {text}; traced-size outputs within {self.max_abs_diff:.2g} of the original"
            f"{fused}{rows}{refs}; verified {levels}"
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "sizes": self.sizes,
            "max_abs_diff": self.max_abs_diff,
            "fusion_rounding": self.fusion_rounding,
            "reference_cases": self.reference_cases,
            "levels": {
                s: {"level": lv, "oracle": self.oracles.get(s, "")} for s, lv in self.levels.items()
            },
        }


@dataclass(frozen=True)
class CheckRequest:
    """What :func:`check_dynamic` is asked: check ``model`` (``original`` symbolized) at the
    traced size and two others per symbol.

    ``traced`` maps each symbol to its traced size; symbols in ``dynamic`` had no traced size
    (their axes were dynamic already) and are checked at 2; symbols in ``fixed`` (kept from
    being generalized by a blocker, with ``strict=False``) stay at their traced size. For
    symbols in ``batch_rows`` (batches, whose rows are independent) each row's outputs must also
    equal a run of that row alone: a constant that still carries the traced batch (a mask or an
    index read at row 0) shows up there even when every shape is right. ``output_dims`` gives
    each output's symbolic dims (None where unknown). ``steps`` and ``relations``: see
    :func:`check_sizes`, as ``divisions`` (the graph's strided divisions: which sizes the model
    takes). ``references`` (stored torch cases; ``output_map`` maps their outputs
    onto the model's) are run too: any mismatch fails the check, and a symbol whose other sizes
    they cover is verified to ``references``. Cases that move a symbol in ``fixed`` are outside
    what the model claims and are left out. ``unsure_rows``: symbols the graph would take as a
    batch but for a node that mixes their rows (symbol -> that node): their rows are checked
    like a batch's (:func:`check_rows`), a difference refused unless reference cases at other
    sizes of the symbol decide. ``atol``/``rtol``: the tolerance against the
    original model. ``bare``: ``weightless(original)``, where the caller has it (the original's
    session is built from it). ``changes``: the plan's, so that a failure of the rewritten
    model names the decision that broke (:mod:`.ort_failure`).
    """

    original: onnx.ModelProto
    model: onnx.ModelProto
    axes: Mapping[str, Mapping[int, str]]
    traced: Mapping[str, int]
    output_dims: Mapping[str, Sequence[Dim | None] | None]
    provider: str = "auto"
    dynamic: Set[str] = frozenset()
    fixed: Set[str] = frozenset()
    batch_rows: Set[str] = frozenset()
    unsure_rows: Mapping[str, str] = field(default_factory=dict)
    steps: Mapping[str, int] | None = None
    relations: Mapping[str, Dim] | None = None
    ambiguous: Set[str] = frozenset()
    references: Sequence[Case] = ()
    output_map: OutputMap | None = None
    atol: float = 1e-5
    rtol: float = 1e-5
    bare: onnx.ModelProto | None = None
    changes: Sequence[Change] = ()
    bounds: Mapping[str, int] = field(default_factory=dict)
    divisions: Divisions | None = None

    @property
    def decisions(self) -> PlanDecisions | None:
        """The plan's changes with the sizes and axes, where the plan gave its changes."""
        return PlanDecisions(self.changes, self.traced, self.axes) if self.changes else None


def check_dynamic(ask: CheckRequest) -> CheckResult:
    """Run the check ``ask`` describes: every run of the original model, then every run of the
    rewritten one, then the evidence checks (:data:`EVIDENCE`) over what they said, each
    returning its first failure; the earliest failure in the order the checks read the runs is
    raised. The reference cases run last, only when all else held."""
    state = _start(ask)
    _run_rewritten(state, _run_original(state))
    findings = [f for check in EVIDENCE if (f := check(state)) is not None]
    if not findings and (f := check_references(state)) is not None:
        findings.append(f)
    if findings:
        raise _said(min(findings, key=lambda f: f.order), ask)
    return _result(state)


def _decided(error: PassError, ask: CheckRequest) -> PassError:
    """``error`` (ONNX Runtime failing at a node of the rewritten model, as :func:`ort_failure`
    words it) said as the plan's decision that broke there, where one reaches the node."""
    said, decisions = error.report, ask.decisions
    if not isinstance(said, dict) or decisions is None or error.node is None:
        return error
    blamed = broken_decision(said["check"], error.node, said["onnx_runtime"], ask.model, decisions)
    return error if blamed is None else blamed


def _said(finding: Finding, ask: CheckRequest) -> PassError:
    """The finding's error; where outputs of the rewritten model came out wrong, with the
    plan's changes they depend on (:func:`~.ort_failure.wrong_values`)."""
    decisions = ask.decisions
    if finding.outputs is None or decisions is None:
        return finding.error
    outputs = finding.outputs or [o.name for o in ask.model.graph.output]
    return wrong_values(finding.error, outputs, ask.model, decisions)


@dataclass
class _SizeRun:
    """One size the rewritten model runs at (``k``: its place among the sizes), its inputs, the
    original model's outputs on their first traced-many entries along each symbol grown alone
    (``heads``), and what the rewritten model said: at this size (``outs``), and for each batch
    its first and last row run alone (``alone``)."""

    k: int
    size: dict[str, int]
    text: str
    inputs: dict[str, np.ndarray]
    heads: dict[str, Said] = field(default_factory=dict)
    outs: Said = field(default_factory=dict)
    alone: dict[str, dict[int, Said]] = field(default_factory=dict)


@dataclass
class CheckState:
    """What the evidence checks share: the request, the traced size (``base``, ``where``) and
    its inputs, what each model said, and what each check found (``rows_shown``, ...)."""

    ask: CheckRequest
    base: dict[str, int]
    where: str
    feeds: dict[str, np.ndarray]
    expected: dict[str, np.ndarray] = field(default_factory=dict)
    new_row: dict[str, Said] = field(default_factory=dict)
    runs: list[_SizeRun] = field(default_factory=list)
    claims: Claims = field(default_factory=Claims)
    got: Said = field(default_factory=dict)
    session: ort.InferenceSession | None = None
    result: CheckResult = field(default_factory=CheckResult)
    rows_shown: set[str] = field(default_factory=set)
    #: the first traced-many rows of a larger batch matched the original model
    rows_original: set[str] = field(default_factory=set)
    #: a larger run's first traced-many positions matched the original
    prefix: set[str] = field(default_factory=set)
    covered: dict[str, set[int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Finding:
    """A failed evidence check: the error, and where it comes in the order the checks read the
    runs (the traced size, the original's rows, each other size in turn, the references)."""

    order: tuple[int, ...]
    error: PassError
    #: where the rewritten model's values or shapes were wrong: the outputs (empty: any of
    #: them); None for any other failure
    outputs: tuple[str, ...] | None = None


def _start(ask: CheckRequest) -> CheckState:
    """The check's state at the traced size (symbols in ``dynamic`` at 2), with its inputs."""
    base = {s: (2 if s in ask.dynamic else v) for s, v in ask.traced.items()}
    feeds = check_feeds(ask.model, ask.axes, base, 0, ask.batch_rows, ask.references)
    return CheckState(ask, base, size_text(base), feeds)


# -- the runs: the original model's, then the rewritten model's, each with one session --------


def _run_original(state: CheckState) -> Mapping[str, SharedWeight]:
    """Everything the original model is asked, with one session: the traced size and, for each
    batch, the traced inputs with a new row 0; then (once the traced size ran) the first
    traced-many entries of each size grown alone; the reference cases it claims. Returns the
    session's weights for the rewritten model's session to share: the session (ORT's own copy
    of every weight) is gone when this returns."""
    ask, base = state.ask, state.base
    try:
        session = create_session(
            ask.original, ask.provider, threads=1, prepack=False, bare=ask.bare, mapped=True
        )
    except Exception as exc:  # noqa: BLE001 - ORT raises several types
        raise _original_failed(exc, ask.model, ask.axes, base, state.where) from None
    said = {o.name for o in session.get_outputs()}
    new_rows = {}
    for sym in ask.batch_rows:
        if base[sym] >= 2:
            changed = new_row_zero(
                ask.model, ask.axes, ask.output_dims, sym, base, state.feeds, said,
                ask.batch_rows, ask.references,
            )  # fmt: skip
            if changed is not None:
                new_rows[sym] = changed
    done = run_many(session, [state.feeds, *new_rows.values()])
    if isinstance(done[0], Exception):
        raise _original_failed(done[0], ask.model, ask.axes, base, state.where) from None
    state.expected, state.new_row = done[0], dict(zip(new_rows, done[1:], strict=True))
    state.runs = _size_runs(state)
    _run_heads(state, session)
    state.claims = claimed_cases(
        session, ask.axes, base, ask.fixed, ask.references, ask.output_map, model_inputs(ask.model),
        ask.bounds,
    )  # fmt: skip
    return session_weights(session)


def _size_runs(state: CheckState) -> list[_SizeRun]:
    """Each size other than the traced one (:func:`check_sizes`) with its inputs."""
    ask = state.ask
    sizes = check_sizes(
        state.base, ask.fixed, ask.steps, ask.relations, bounds=ask.bounds, divisions=ask.divisions
    )[1:]
    return [
        _SizeRun(k, size, size_text(size), check_feeds(ask.model, ask.axes, size, k, ask.batch_rows, ask.references))
        for k, size in enumerate(sizes, start=1)
    ]  # fmt: skip


def _run_heads(state: CheckState, session: ort.InferenceSession) -> None:
    """The original model on the first traced-many entries of each size grown along one symbol
    alone (batches: rows are independent, so they must match; other symbols: a causal prefix
    may, a mismatch proves nothing). Where the grown inputs can begin with the traced inputs
    (:func:`begin_with`), they are made to, and the traced run's outputs serve."""
    ask, base = state.ask, state.base
    names = {o.name for o in ask.model.graph.output}
    sized = set(shape_inputs(ask.model))
    relations = ask.relations or {}
    jobs: list[tuple[_SizeRun, str, dict[str, np.ndarray]]] = []
    for run in state.runs:
        for sym in base:
            grown = run.size[sym] > base[sym] and all(
                run.size[o] == base[o] for o in base if o != sym
            )
            related = any(sym in v.atoms() for v in relations.values())
            in_axis, out_axis = axes_of(ask.axes, ask.output_dims, sym, names)
            if not grown or related or sym in ask.fixed or not in_axis or not out_axis:
                continue
            if begin_with(run.inputs, state.feeds, in_axis, base[sym], sized):
                run.heads[sym] = state.expected  # its first entries are the traced run's own
            else:
                run.heads[sym] = {}
                jobs.append((run, sym, head_rows(run.inputs, in_axis, base[sym])))
    if jobs:
        for (run, sym, _), said in zip(jobs, run_many(session, [j[2] for j in jobs]), strict=True):
            run.heads[sym] = said


def _run_rewritten(state: CheckState, shared: Mapping[str, SharedWeight]) -> None:
    """Every run of the rewritten model, made at once (two at a time): the traced size, then
    each other size with, for each batch, its first and last rows run alone."""
    ask, base = state.ask, state.base
    try:
        session = create_session(
            ask.model, ask.provider, threads=1, prepack=False, share_with=shared
        )
    except Exception as exc:  # noqa: BLE001
        raise ort_failure("loading the rewritten model", exc) from None
    del shared
    outputs = {o.name for o in session.get_outputs()}
    jobs: list[Mapping[str, np.ndarray]] = [state.feeds]
    places: list[tuple[_SizeRun, str, list[int]]] = []
    for run in state.runs:
        jobs.append(run.inputs)
        for sym in sorted(set(ask.batch_rows) | set(ask.unsure_rows)):
            if run.size[sym] >= 2 and run.size[sym] != base[sym]:
                alone = rows_alone(ask.axes, ask.output_dims, sym, run.inputs, outputs)
                places.append((run, sym, list(alone)))
                jobs += alone.values()
    done = run_many(session, jobs)
    state.got, state.session = done[0], session
    at = 1
    for run in state.runs:
        run.outs = done[at]
        at += 1
        for _, sym, rows in (p for p in places if p[0] is run):
            run.alone[sym] = {row: done[at + i] for i, row in enumerate(rows)}
            at += len(rows)


# -- the evidence checks: each reads the runs and returns its first failure, or None ---------


def check_traced_size(state: CheckState) -> Finding | None:
    """At the traced size the rewritten model must run and give the original's outputs, within
    the check's tolerance (``max_abs_diff`` records how close), or differ only by how ONNX
    Runtime fuses the static graph (:func:`_fusion_rounding`)."""
    ask, got = state.ask, state.got
    if isinstance(got, Exception):
        what = f"at the traced size {state.where}"
        return Finding((0,), ort_failure(what, got, ask.model, ask.decisions))
    failed: list[tuple[str, OutputComparison]] = []
    closest = 0.0
    for name, ref in state.expected.items():
        cmp = compare(got.get(name), ref, name, ask.atol, ask.rtol)
        if not cmp:
            failed.append((name, cmp))
        elif ref.dtype.kind in "fc" and cmp.max_abs is not None and ref.size:
            closest = max(closest, cmp.max_abs)
    if failed and not _fusion_rounding(state, failed):
        name, cmp = failed[0]
        return Finding((0,), PassError(
            f"check at the traced size {state.where}: output {name!r} differs from the "
            f"original: {cmp.describe()}"
        ), (name,))  # fmt: skip
    for _, cmp in failed:
        closest = max(closest, cmp.max_abs or 0.0)
    state.result.max_abs_diff = max(state.result.max_abs_diff, closest)
    state.result.fusion_rounding = bool(failed)
    return None


def _fusion_rounding(state: CheckState, failed: Sequence[tuple[str, OutputComparison]]) -> bool:
    """Whether outputs of the rewritten model that differ from the original's at the traced size
    (``failed``) differ only by how ONNX Runtime rounds them. ORT fuses nodes only where their
    shapes are static (a MatMul and its Add into one Gemm, the bias summed into the product; an
    Add and its LayerNormalization into a SkipLayerNormalization): the original, static
    everywhere, runs fused kernels where the rewritten model, its shapes now symbolic, runs the
    nodes one by one, and the two round apart. No tolerance bounds that: a normalization scales
    the rounding of a sum by how large its terms are against their spread (Flaubert, hidden
    width 2048, outputs up to 4.7: 1.26e-5 apart; a residual of 1000 + noise: 2.9e-4).

    So it is shown, not assumed: both models run again at the traced size with ORT's graph
    optimizations off (each node its own kernel, alike in both) and must give the same outputs
    within the check's own tolerance, which a rewrite that changes a value does not. Only
    floating outputs of the right shape and dtype, NaN and Inf where the original has them, can
    differ by rounding (integers and booleans come out of fused kernels exact)."""
    ask = state.ask
    for _, cmp in failed:
        rounding = cmp.problem is None and cmp.min_atol is not None and math.isfinite(cmp.min_atol)
        if not rounding or cmp.exact or cmp.expected_dtype is None or "float" not in cmp.expected_dtype:
            return False
    shared = session_weights(state.session)
    try:
        plain = create_session(
            ask.original, ask.provider, threads=1, prepack=False, share_with=shared,
            bare=ask.bare, optimize=False,
        )  # fmt: skip
        want = run_many(plain, [state.feeds])[0]
        del plain
        plain = create_session(
            ask.model, ask.provider, threads=1, prepack=False, share_with=shared, optimize=False
        )
        said = run_many(plain, [state.feeds])[0]
        del plain
    except Exception:  # noqa: BLE001 - ORT raises several types; the difference stands
        return False
    if isinstance(want, Exception) or isinstance(said, Exception):
        return False
    return all(
        compare(said.get(name), ref, name, ask.atol, ask.rtol) for name, ref in want.items()
    )


def check_batch_in_original(state: CheckState) -> Finding | None:
    """Each batch is one in the original model: a new row 0 leaves the other rows as they were
    (:func:`original_rows_independent`)."""
    ask = state.ask
    for sym in ask.batch_rows:
        if state.base[sym] >= 2:
            error = original_rows_independent(
                ask.axes, ask.output_dims, sym, state.base, state.expected,
                state.new_row.get(sym), ask.atol, ask.rtol,
            )  # fmt: skip
            if error is not None:
                return Finding((1,), error)
    return None


def check_shapes(state: CheckState) -> Finding | None:
    """At each other size the rewritten model must run, and every output dim the symbols
    express must come out as that expression evaluated at the size."""
    for run in state.runs:
        if isinstance(run.outs, Exception):
            error = ort_failure(f"at {run.text}", run.outs, state.ask.model, state.ask.decisions)
            return Finding((2, run.k, 0), error)
        for name, dims in state.ask.output_dims.items():
            if dims is None or name not in run.outs:
                continue
            shape, want = run.outs[name].shape, _expected_dims(dims, run.size)
            if len(shape) != len(want) or any(
                w is not None and w != g for w, g in zip(want, shape, strict=False)
            ):
                shown = ", ".join("?" if w is None else str(w) for w in want)
                return Finding((2, run.k, 3), PassError(
                    f"check at {run.text}: output {name!r} has shape {list(shape)}, expected "
                    f"[{shown}] from the symbols"
                ), (name,))  # fmt: skip
    return None


def _expected_dims(dims: Sequence[Dim | None], size: Mapping[str, int]) -> list[int | None]:
    """Each dim evaluated at ``size``; None where unknown or not given by the symbols."""
    want: list[int | None] = []
    for d in dims:
        try:
            want.append(d.evaluate(size) if d is not None else None)
        except KeyError:
            want.append(None)
    return want


def check_rows(state: CheckState) -> Finding | None:
    """At each other size of a batch, its first and last rows run alone must equal those rows
    of the batch (:func:`rows_differ`)."""
    ask = state.ask
    for run in state.runs:
        if isinstance(run.outs, Exception):
            continue  # check_shapes says so, first
        for sym, singles in run.alone.items():
            error = rows_differ(
                ask.model, ask.axes, ask.output_dims, sym, run.outs, singles, run.text,
                ask.atol, ask.rtol,
            )  # fmt: skip
            if error is not None and error.node is not None:  # ONNX Runtime failed on a row
                return Finding((2, run.k, 1), _decided(error, ask))
            if error is not None and sym in ask.unsure_rows and sym not in ask.batch_rows:
                if _references_move(state, sym):
                    continue  # the reference cases at other sizes decide
                return Finding((2, run.k, 1), _unsure_rows(error, sym, ask.unsure_rows[sym]), ())
            if error is not None:
                return Finding((2, run.k, 1), error, ())
            if singles:
                state.result.rows_checked = True
                state.rows_shown.add(sym)
    return None


def _references_move(state: CheckState, sym: str) -> bool:
    """Whether a reference case the model claims sizes ``sym`` other than the traced size."""
    return any(sizes.get(sym, state.base[sym]) != state.base[sym] for _, sizes, _ in state.claims.cases)


def _unsure_rows(error: PassError, sym: str, node: str) -> PassError:
    """A row of a batch that differs from the row run alone, where node ``node`` mixes rows."""
    said = str(error.args[0]).split("; a constant still carries")[0]
    return PassError(
        f"{said}; node {node!r} mixes {sym} rows, so the graph cannot tell a model whose rows "
        f"depend on each other from a constant that still reads one row of the traced {sym}: "
        f"pass --ref with cases at other {sym} sizes (record them with `onnxsurgery reference "
        f"record`), or keep {sym} static"
    )


def check_first_rows(state: CheckState) -> Finding | None:
    """A batch grown alone must begin with the original model's rows: its first traced-many
    rows equal the original run on those rows (a constant that still carries the traced batch
    shows up here)."""
    ask = state.ask
    for run in state.runs:
        if isinstance(run.outs, Exception):
            continue
        for sym, want in run.heads.items():
            if sym not in ask.batch_rows:
                continue
            n, text = state.base[sym], run.text
            if isinstance(want, Exception):
                what = f"of the original model on the first {n} rows ({text})"
                return Finding((2, run.k, 2), ort_failure(what, want))
            _, out_axis = axes_of(ask.axes, ask.output_dims, sym, run.outs)
            cmp = first_differs(want, out_axis, n, run.outs, ask.atol, ask.rtol)
            if cmp is not None:
                return Finding((2, run.k, 2), PassError(
                    f"check at {text}: the first {n} {sym} rows of output {cmp.name!r} differ "
                    f"from the original model run on those rows: {cmp.describe()}; a constant "
                    f"still carries the traced {sym}"
                ), (cmp.name,))  # fmt: skip
            state.rows_original.add(sym)
    return None


def check_prefix(state: CheckState) -> Finding | None:
    """Evidence only, never a failure: a symbol other than a batch grown alone whose first
    traced-many positions equal the original model's (as in a causal model)."""
    ask = state.ask
    for run in state.runs:
        if isinstance(run.outs, Exception):
            continue
        for sym, want in run.heads.items():
            if sym in ask.batch_rows or isinstance(want, Exception):
                continue  # the original may not run on a prefix
            _, out_axis = axes_of(ask.axes, ask.output_dims, sym, run.outs)
            if first_differs(want, out_axis, state.base[sym], run.outs, ask.atol, ask.rtol) is None:
                state.prefix.add(sym)
    return None


def check_claims(state: CheckState) -> Finding | None:
    """The reference cases fit the rewritten model and map onto its outputs."""
    failure = state.claims.failure
    return None if failure is None else Finding((3,), failure)


def check_references(state: CheckState) -> Finding | None:
    """Every reference case the model claims must match the stored torch outputs
    (:func:`run_reference_cases`). Where the run has reference cases, the session that ran them
    goes with the result (``CheckResult.session``): the run's validation is made on it."""
    assert state.session is not None  # _run_rewritten made it
    ask = state.ask
    covered, failure = run_reference_cases(
        ask.model, state.session, state.base, state.claims, ask.decisions
    )
    state.covered = covered
    state.result.reference_cases = len(state.claims.cases)
    if failure is None and state.ask.references:
        state.result.session = state.session
    # a mismatch names no node: the outputs' decisions are named (an ONNX Runtime failure
    # names its own)
    return None if failure is None else Finding((4,), failure, None if failure.node else ())


#: The evidence checks, judged together; the reference cases (:func:`check_references`) run
#: after them, only when they all held.
EVIDENCE: tuple[Callable[[CheckState], Finding | None], ...] = (
    check_traced_size,
    check_batch_in_original,
    check_shapes,
    check_rows,
    check_first_rows,
    check_prefix,
    check_claims,
)


def _result(state: CheckState) -> CheckResult:
    """The sizes checked and how far each symbol was verified, from what the checks found."""
    result, base = state.result, state.base
    result.sizes = [base] + [run.size for run in state.runs]
    for sym in base:
        result.levels[sym], result.oracles[sym] = _level(state, sym)
    return result


def _level(state: CheckState, sym: str) -> tuple[str, str]:
    n = state.base[sym]
    if sym in state.ask.fixed:
        return "traced-only", "kept at its traced size"
    if sym in state.covered:
        return "references", "stored torch outputs at " + ", ".join(
            f"{sym}={v}" for v in sorted(state.covered[sym])
        )
    if sym in state.ask.ambiguous:
        return "ambiguous", "a size follows it where the trace fits a fixed value too"
    if sym in state.rows_shown:
        return "rows", "each row equals a run of that row alone" + (
            f"; the first {n} rows of a larger {sym} equal the original model"
            if sym in state.rows_original
            else ""
        )
    return "runs", "ran with the output shapes the symbols give; values unverified" + (
        f" beyond the first {n} positions, which equal the original model (as in a causal model)"
        if sym in state.prefix
        else ""
    )


def traced_only(traced: Mapping[str, int]) -> CheckResult:
    """The result when no check ran: every symbol verified at its traced size at most."""
    result = CheckResult(sizes=[dict(traced)])
    for sym in traced:
        result.levels[sym], result.oracles[sym] = "traced-only", "no check ran"
    return result


def _original_failed(
    exc: BaseException,
    model: onnx.ModelProto,
    axes: Mapping[str, Mapping[int, str]],
    base: Mapping[str, int],
    where: str,
) -> PassError:
    """The check's error when the original model fails to load or run at its traced size."""
    error = ort_failure(f"of the original model at the traced size {where}", exc)
    unsized = unsized_axes(model, axes, base)
    if unsized:
        return PassError(
            f"{error.args[0]}; the model gives no size to {', '.join(unsized)} and the check tried 2 "
            "there: give those axes a size, or run symbolize with check=false",
            node=error.node,
        )
    if "Could not find an implementation for" in str(exc):
        return PassError(
            f"{error.args[0]}; ONNX Runtime has no kernel for this operator at the model's "
            "opset: convert the model to a newer opset first (onnx.version_converter), or run "
            "symbolize with check=false",
            node=error.node,
        )
    return error
