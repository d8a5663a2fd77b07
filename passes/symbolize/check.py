"""Run a symbolized model at several sizes on ONNX Runtime and check it stays right.

:func:`check_dynamic` feeds inputs shaped by the graph (:func:`~onnxsurgery.passes.symbolize.feeds.check_feeds`: token ids over the
vocabulary their gather reads, sizes never made up, initializers listed as inputs never fed) to

1. the original and the rewritten model at the traced size: outputs must agree within 1e-5;
2. the rewritten model at two other sizes per free symbol (symbols the graph ties to others,
   ``total = past + seq``, follow them): it must run, and every output dim that the plan
   expresses in the symbols must come out as that expression evaluated at the size;
3. for batches (rows independent): each row must equal a run of that row alone, and the first
   traced-many rows of a larger batch must equal the original model on those rows (a size grown
   alone begins with the traced run's inputs, so those are the traced run's outputs);
4. the reference cases given to the run: every output must match torch's.

Each symbol ends at the best level it reached (:data:`LEVELS`, :class:`CheckResult`). Failures
raise :class:`~onnxsurgery.errors.PassError` with the ONNX Runtime error translated into the
node that broke (:func:`~onnxsurgery.validation.runtime.describe_ort_error`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnxruntime as ort

from onnxsurgery.errors import OnnxSurgeryError, PassError, ReferenceDataError
from onnxsurgery.model.signature import CaseFailure, InputSpec, check_inputs, model_inputs
from onnxsurgery.passes.symbolize.feeds import case_sizes, check_feeds, shape_inputs, unsized_axes
from onnxsurgery.passes.symbolize.ort_failure import ort_failure
from onnxsurgery.passes.symbolize.row_checks import (
    axes_of,
    begin_with,
    check_rows,
    first_differs,
    head_rows,
    new_row_zero,
    original_rows_independent,
    rows_alone,
)
from onnxsurgery.shapes.dims import Dim
from onnxsurgery.validation.arrays import compare_arrays
from onnxsurgery.validation.references import Case, bind_cases
from onnxsurgery.validation.runtime import (
    create_session,
    run_many,
    run_model,
    session_weights,
)
from onnxsurgery.validation.tolerances import DEFAULT_ATOL

__all__ = [
    "LEVELS",
    "CheckResult",
    "check_dynamic",
    "check_sizes",
    "reference_mismatch",
    "traced_only",
]


#: How far a symbol was verified, best first (see :class:`CheckResult`).
LEVELS = ("references", "rows", "runs", "traced-only")


@dataclass
class CheckResult:
    """The sizes checked, the largest difference from the original at the traced size, and how
    far each symbol was verified (``levels``; the oracle behind each in ``oracles``):

    - ``references``: the model matched stored torch outputs at sizes of the symbol other than
      the traced one;
    - ``rows``: at other sizes each batch row equals a run of that row alone (rows independent),
      values otherwise unverified;
    - ``runs``: ran at other sizes with the output shapes the symbols give, values unverified;
    - ``traced-only``: checked at the traced size only (kept there by a blocker, or no check).
    """

    sizes: list[dict[str, int]] = field(default_factory=list)
    max_abs_diff: float = 0.0
    rows_checked: bool = False
    levels: dict[str, str] = field(default_factory=dict)
    oracles: dict[str, str] = field(default_factory=dict)
    reference_cases: int = 0

    def __str__(self) -> str:
        text = "; ".join(", ".join(f"{k}={v}" for k, v in s.items()) for s in self.sizes)
        rows = "; batch rows independent" if self.rows_checked else ""
        refs = (
            f"; matched {self.reference_cases} reference case(s)" if self.reference_cases else ""
        )
        levels = ", ".join(f"{s}: {lv}" for s, lv in self.levels.items())
        return (
            f"ran at {text}; traced-size outputs within {self.max_abs_diff:.2g} of the original"
            f"{rows}{refs}; verified {levels}"
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "sizes": self.sizes,
            "max_abs_diff": self.max_abs_diff,
            "reference_cases": self.reference_cases,
            "levels": {
                s: {"level": lv, "oracle": self.oracles.get(s, "")} for s, lv in self.levels.items()
            },
        }


def check_sizes(
    traced: Mapping[str, int],
    fixed: Set[str] = frozenset(),
    steps: Mapping[str, int] | None = None,
    relations: Mapping[str, Dim] | None = None,
) -> list[dict[str, int]]:
    """The traced size, then two other values for each symbol not in ``fixed`` (others traced).

    The other values are ``traced + step`` and ``traced - step`` (or ``+ 2*step`` when that is
    too small); ``steps`` defaults to 1, and is larger for symbols that strided convolutions or
    pools divide, so the sizes keep the traced size's remainder (a padding computed for an even
    height is baked into the graph). A symbol in ``relations`` (``total`` = ``past + seq``) is
    never varied itself: every size computes it from the others, so the sizes respect what the
    graph requires.
    """
    relations = relations or {}
    sizes = [dict(traced)]
    for sym, v in traced.items():
        if sym in fixed or sym in relations:
            continue
        step = (steps or {}).get(sym, 1)
        others = [v + step, v - step if v - step >= 2 else v + 2 * step]
        for o in others:
            s = dict(traced)
            s[sym] = o
            for _ in relations:  # relations may chain
                s.update({d: value.evaluate(s) for d, value in relations.items()})
            if s not in sizes:
                sizes.append(s)
    return sizes


def check_dynamic(
    original: onnx.ModelProto,
    model: onnx.ModelProto,
    axes: Mapping[str, Mapping[int, str]],
    traced: Mapping[str, int],
    output_dims: Mapping[str, list[Dim] | None],
    provider: str = "auto",
    *,
    dynamic: Set[str] = frozenset(),
    fixed: Set[str] = frozenset(),
    batch_rows: Set[str] = frozenset(),
    steps: Mapping[str, int] | None = None,
    relations: Mapping[str, Dim] | None = None,
    references: Sequence[Case] = (),
    output_map: Callable[[Mapping[str, np.ndarray]], Mapping[str, np.ndarray]] | None = None,
    atol: float = 1e-5,
    rtol: float = 1e-5,
    bare: onnx.ModelProto | None = None,
) -> CheckResult:
    """Check ``model`` (symbolized ``original``) at the traced size and two others per symbol.

    ``traced`` maps each symbol to its traced size; symbols in ``dynamic`` had no traced size (their
    axes were dynamic already) and are checked at 2; symbols in ``fixed`` (kept from being
    generalized by a blocker, with ``strict=False``) stay at their traced size. For symbols in
    ``batch_rows`` (batches, whose rows are independent) each row's outputs must also equal a run
    of that row alone: a constant that still carries the traced batch (a mask or an index read at
    row 0) shows up there even when every shape is right. ``output_dims`` gives each output's symbolic
    dims (None where unknown). ``references`` (stored torch cases; ``output_map`` maps their
    outputs onto the model's) are run too: any mismatch fails the check, and a symbol whose other
    sizes they cover is verified to ``references``. Cases that move a symbol in ``fixed`` are
    outside what the model claims and are left out. ``bare``: ``weightless(original)``, where
    the caller has it (the original's session is built from it).
    """
    base = {s: (2 if s in dynamic else v) for s, v in traced.items()}
    result = CheckResult()
    where = ", ".join(f"{k}={v}" for k, v in base.items())
    feeds = check_feeds(model, axes, base, 0, batch_rows, references)
    names = {o.name for o in model.graph.output}
    # Everything the original model is asked, it is asked first, with one session, in one go
    # (run_many); then that session (ORT's own copy of every weight) is gone before the
    # rewritten model's is built. What it says is judged below in the order the checks read
    # (its errors raised there too).
    try:
        reference = create_session(
            original, provider, threads=1, prepack=False, bare=bare, mapped=True
        )
    except Exception as exc:  # noqa: BLE001 - ORT raises several types
        raise _original_failed(exc, model, axes, base, where) from None
    said = {o.name for o in reference.get_outputs()}
    jobs: list[Mapping[str, np.ndarray]] = [feeds]
    new_row_at: dict[str, int] = {}
    for sym in batch_rows:
        if base[sym] >= 2:
            changed = new_row_zero(model, axes, output_dims, sym, base, feeds, said, batch_rows, references)
            if changed is not None:
                new_row_at[sym] = len(jobs)
                jobs.append(changed)
    try:  # raised once the traced size is judged, as when these inputs were made after it
        steps_at = [
            _SizeRun(size, ", ".join(f"{s}={v}" for s, v in size.items()),
                     check_feeds(model, axes, size, k, batch_rows, references))
            for k, size in enumerate(check_sizes(base, fixed, steps, relations)[1:], start=1)
        ]  # fmt: skip
    except PassError as exc:
        steps_at, no_inputs = [], exc
    else:
        no_inputs = None
    heads_at: list[tuple[_SizeRun, str, int]] = []
    sized = set(shape_inputs(model))
    for run in steps_at:
        for sym in base:
            # Grown alone: the first traced-many rows (batches: rows are independent, so they
            # must) or positions (a causal prefix may; a mismatch proves nothing) can be set
            # against the original model at its traced size.
            grown = run.size[sym] > base[sym] and all(
                run.size[o] == base[o] for o in base if o != sym
            )
            related = any(sym in v.atoms() for v in (relations or {}).values())
            in_axis, out_axis = axes_of(axes, output_dims, sym, names)
            if not grown or related or sym in fixed or not in_axis or not out_axis:
                continue
            if begin_with(run.inputs, feeds, in_axis, base[sym], sized):
                heads_at.append((run, sym, 0))  # its first entries are the traced run's own
            else:
                heads_at.append((run, sym, len(jobs)))
                jobs.append(head_rows(run.inputs, in_axis, base[sym]))
    said_all = run_many(reference, jobs)
    expected = said_all[0]
    if isinstance(expected, Exception):
        raise _original_failed(expected, model, axes, base, where) from None
    not_batch: PassError | None = None
    for sym in batch_rows:
        if base[sym] >= 2:
            try:
                original_rows_independent(
                    axes, output_dims, sym, base, expected,
                    said_all[new_row_at[sym]] if sym in new_row_at else None, atol, rtol,
                )  # fmt: skip
            except PassError as exc:
                not_batch = exc
                break
    if no_inputs is not None:
        raise no_inputs
    for run, sym, k in heads_at:  # an error is judged where the check reads it
        run.heads[sym] = said_all[k]
    del said_all
    try:
        claimed, floor = _claimed_cases(
            reference, axes, base, fixed, references, output_map, model_inputs(model)
        )
    except PassError as exc:
        claimed, floor, unmapped = [], {}, exc
    else:
        unmapped = None
    shared = session_weights(reference)
    del reference
    try:
        session = create_session(model, provider, threads=1, prepack=False, share_with=shared)
    except Exception as exc:  # noqa: BLE001
        raise ort_failure("loading the rewritten model", exc) from None
    del shared
    # Every run of the rewritten model, made at once (two at a time), judged below in the order
    # the checks read them: the traced size, then each other size with its rows run alone.
    outputs = {o.name for o in session.get_outputs()}
    jobs: list[Mapping[str, np.ndarray]] = [feeds]
    for run in steps_at:
        run.outs = len(jobs)
        jobs.append(run.inputs)
        for sym in batch_rows:
            if run.size[sym] >= 2 and run.size[sym] != base[sym]:
                alone = rows_alone(axes, output_dims, sym, run.inputs, outputs)
                run.alone[sym] = {row: len(jobs) + k for k, row in enumerate(alone)}
                jobs += alone.values()
    done = run_many(session, jobs)
    got = done[0]
    if isinstance(got, Exception):
        raise ort_failure(f"at the traced size {where}", got, model) from None
    for name, ref in expected.items():
        out = got.get(name)
        if out is None or out.shape != ref.shape:
            raise PassError(
                f"check at the traced size {where}: output {name!r} has shape "
                f"{None if out is None else list(out.shape)}, the original {list(ref.shape)}"
            )
        if ref.dtype.kind in "fc":
            diff = np.abs(out.astype(np.float64) - ref.astype(np.float64))
            bad = ~(diff <= atol + rtol * np.abs(ref.astype(np.float64))) & ~(
                np.isnan(out) & np.isnan(ref)
            )
            if np.any(bad):
                raise PassError(
                    f"check at the traced size {where}: output {name!r} differs from the original "
                    f"by up to {float(np.nanmax(diff)):.3g} (tolerance {atol:g})"
                )
            if diff.size:
                result.max_abs_diff = max(result.max_abs_diff, float(np.nanmax(diff)))
        elif not np.array_equal(out, ref):
            raise PassError(
                f"check at the traced size {where}: output {name!r} differs from the original"
            )
    if not_batch is not None:
        raise not_batch
    result.sizes.append(base)
    rows_shown: set[str] = set()
    rows_original: set[str] = set()  # the first traced-many rows matched the original model
    prefix: set[str] = set()  # a larger run's first traced-many positions matched the original
    for run in steps_at:
        size, text = run.size, run.text
        outs = done[run.outs]
        if isinstance(outs, Exception):
            raise ort_failure(f"at {text}", outs, model) from None
        for sym in batch_rows:
            if size[sym] >= 2 and size[sym] != base[sym]:
                singles = {row: done[k] for row, k in run.alone.get(sym, {}).items()}
                if check_rows(model, axes, output_dims, sym, outs, singles, text, atol, rtol):
                    result.rows_checked = True
                    rows_shown.add(sym)
        for sym, want in run.heads.items():
            n = base[sym]
            _, out_axis = axes_of(axes, output_dims, sym, outs)
            if sym in batch_rows:
                if isinstance(want, Exception):
                    raise ort_failure(f"of the original model on the first {n} rows ({text})", want) from None
                bad = first_differs(want, out_axis, n, outs, atol, rtol)
                if bad is not None:
                    raise PassError(
                        f"check at {text}: the first {n} {sym} rows of output {bad!r} differ from "
                        f"the original model run on those rows; a constant still carries the "
                        f"traced {sym}"
                    )
                rows_original.add(sym)
            elif not isinstance(want, Exception):  # the original may not run on a prefix
                if first_differs(want, out_axis, n, outs, atol, rtol) is None:
                    prefix.add(sym)
        for name, dims in output_dims.items():
            if dims is None or name not in outs:
                continue
            shape = outs[name].shape
            want = []
            for d in dims:
                try:
                    want.append(d.evaluate(size) if d is not None else None)
                except KeyError:
                    want.append(None)
            ok = len(shape) == len(want) and all(
                w is None or w == g for w, g in zip(want, shape, strict=False)
            )
            if not ok:
                shown = ", ".join("?" if w is None else str(w) for w in want)
                raise PassError(
                    f"check at {text}: output {name!r} has shape {list(shape)}, expected [{shown}] "
                    "from the symbols"
                )
        result.sizes.append(size)
    if unmapped is not None:
        raise unmapped
    covered = _check_references(model, session, base, claimed, floor, result)
    for sym in base:
        if sym in fixed:
            result.levels[sym], result.oracles[sym] = "traced-only", "kept at its traced size"
        elif sym in covered:
            result.levels[sym] = "references"
            result.oracles[sym] = "stored torch outputs at " + ", ".join(
                f"{sym}={v}" for v in sorted(covered[sym])
            )
        elif sym in rows_shown:
            result.levels[sym] = "rows"
            result.oracles[sym] = "each row equals a run of that row alone" + (
                f"; the first {base[sym]} rows of a larger {sym} equal the original model"
                if sym in rows_original
                else ""
            )
        else:
            result.levels[sym] = "runs"
            result.oracles[sym] = "ran with the output shapes the symbols give; values unverified" + (
                f" beyond the first {base[sym]} positions, which equal the original model "
                "(as in a causal model)"
                if sym in prefix
                else ""
            )
    return result


@dataclass
class _SizeRun:
    """One size the rewritten model runs at, its inputs, the original model's outputs on
    their first traced-many entries along each symbol grown alone (or the error it raised),
    and where its own runs are among the check's."""

    size: dict[str, int]
    text: str
    inputs: dict[str, np.ndarray]
    heads: dict[str, dict[str, np.ndarray] | Exception] = field(default_factory=dict)
    #: where the rewritten model's run at this size, and each batch row run alone, are among
    #: the check's runs (:func:`~onnxsurgery.validation.runtime.run_many`)
    outs: int = -1
    alone: dict[str, dict[int, int]] = field(default_factory=dict)


def reference_mismatch(
    original: onnx.ModelProto,
    model: onnx.ModelProto,
    axes: Mapping[str, Mapping[int, str]],
    traced: Mapping[str, int],
    references: Sequence[Case],
    provider: str = "auto",
    output_map: Callable[[Mapping[str, np.ndarray]], Mapping[str, np.ndarray]] | None = None,
    *,
    bare: onnx.ModelProto | None = None,
) -> str | None:
    """Run ``model`` (``original`` rewritten; its weights may be placeholders of a weightless
    copy, shared from the original's session) on the reference cases alone, as
    :func:`check_dynamic` does: why the first one fails, or None. For telling apart rewrites the
    graph alone cannot choose between. ``bare``: ``weightless(original)``, if made already."""
    try:
        reference = create_session(
            original, provider, threads=1, prepack=False, bare=bare, mapped=True
        )
        claimed, floor = _claimed_cases(
            reference, axes, traced, frozenset(), references, output_map, model_inputs(model)
        )
        shared = session_weights(reference)
        del reference
        session = create_session(model, provider, threads=1, prepack=False, share_with=shared)
        del shared
        _check_references(model, session, traced, claimed, floor, CheckResult())
    except OnnxSurgeryError as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - ORT raises several types
        return str(ort_failure("building a session", exc, model))
    return None


def traced_only(traced: Mapping[str, int]) -> CheckResult:
    """The result when no check ran: every symbol verified at its traced size at most."""
    result = CheckResult(sizes=[dict(traced)])
    for sym in traced:
        result.levels[sym], result.oracles[sym] = "traced-only", "no check ran"
    return result


def _export_error(
    original: ort.InferenceSession,
    cases: Sequence[tuple[Case, Mapping[str, np.ndarray]]],
) -> dict[str, float]:
    """Per output, twice the smallest atol at which the original model matches the cases at its
    traced size, where the default tolerance is too tight: the export's own error, which no
    rewrite can be asked to beat."""
    floor: dict[str, float] = {}
    for case, want in cases:
        try:
            got = run_model(original, case.inputs)
        except Exception:  # noqa: BLE001 - a case the original cannot run sets no floor
            continue
        for name, ref in want.items():
            if name in got:
                cmp = compare_arrays(got[name], np.asarray(ref), name=name)
                if not cmp and cmp.min_atol is not None and np.isfinite(cmp.min_atol):
                    floor[name] = max(floor.get(name, 0.0), 2 * cmp.min_atol)
    return floor


def _claimed_cases(
    original: ort.InferenceSession,
    axes: Mapping[str, Mapping[int, str]],
    base: Mapping[str, int],
    fixed: Set[str],
    references: Sequence[Case],
    output_map: Callable[[Mapping[str, np.ndarray]], Mapping[str, np.ndarray]] | None,
    specs: Sequence[InputSpec],
) -> tuple[list[tuple[Case, dict[str, int], Mapping[str, np.ndarray]]], dict[str, float]]:
    """The reference cases the model claims (none moving a symbol in ``fixed``), each with its
    sizes and its outputs mapped onto the model's; and per output, the original model's own
    error at the traced size where the default tolerance is too tight (:func:`_export_error`).
    Each case is checked against the rewritten model's inputs (``specs``) before any runs
    (:func:`_fitting`)."""
    claimed = []
    for case in references:
        sizes = case_sizes(axes, case.inputs)
        if any(sizes.get(s, base[s]) != base[s] for s in fixed):
            continue
        case = _fitting(specs, case, references)
        try:
            want = output_map(case.outputs) if output_map is not None else case.outputs
        except (KeyError, ValueError, OnnxSurgeryError) as exc:
            raise PassError(
                f"check: mapping reference case {case.name}'s outputs onto the model's failed: {exc}"
            ) from None
        claimed.append((case, sizes, want))
    traced = [(c, w) for c, sizes, w in claimed if all(sizes.get(s, v) == v for s, v in base.items())]
    return claimed, _export_error(original, traced)


def _fitting(specs: Sequence[InputSpec], case: Case, references: Sequence[Case]) -> Case:
    """``case`` with its inputs bound to the model's and checked against what the rewritten
    model declares (``specs``), as validation checks a case, before ONNX Runtime runs it; a case
    that does not fit is a PassError in validation's words, naming the axis to symbolize where a
    fixed axis is what the references vary."""
    required = [s.name for s in specs if not s.optional]
    try:
        bound = bind_cases([case], required, None)[0]
        feeds, _ = check_inputs(specs, bound.inputs)
    except ReferenceDataError as exc:
        raise PassError(f"check: {exc}") from None
    except CaseFailure as exc:
        hint = _unsymbolized(exc, bound, references)
        raise PassError(f"check at reference case {case.name}: {exc}{hint}") from None
    return Case(name=case.name, inputs=feeds, outputs=case.outputs, source=case.source)


def _unsymbolized(exc: CaseFailure, case: Case, references: Sequence[Case]) -> str:
    """What to add to symbolize when ``case`` moves an axis the model keeps fixed: ``"; axis 1
    of 'x' varies in the references (8, 12) but is not symbolized: add x:1=NAME to symbolize"``."""
    name, axis = exc.input, exc.axis
    if name is None or axis is None or not isinstance(exc.declared, int):
        return ""
    seen = {int(np.shape(case.inputs[name])[axis])}
    for other in references:
        value = other.inputs.get(name)
        if value is not None and np.ndim(value) > axis:
            seen.add(int(np.shape(value)[axis]))
    add = f"add {name}:{axis}=NAME to symbolize"
    if len(seen) > 1:
        sizes = ", ".join(map(str, sorted(seen)))
        return f"; axis {axis} of {name!r} varies in the references ({sizes}) but is not symbolized: {add}"
    return (
        f"; axis {axis} of {name!r} is {seen.pop()} in the references, {exc.declared} in the "
        f"model, and is not symbolized: {add}"
    )


def _check_references(
    model: onnx.ModelProto,
    session,
    base: Mapping[str, int],
    claimed: Sequence[tuple[Case, dict[str, int], Mapping[str, np.ndarray]]],
    floor: Mapping[str, float],
    result: CheckResult,
) -> dict[str, set[int]]:
    """Run every reference case the model claims (:func:`_claimed_cases`); a mismatch fails the
    check (at the default tolerance, or the original model's own error at the traced size where
    that is larger). Returns, per symbol, the sizes other than the traced one that matching cases
    covered."""
    covered: dict[str, set[int]] = {}
    for case, sizes, want in claimed:
        where = f"reference case {case.name} ({', '.join(f'{k}={v}' for k, v in sizes.items())})"
        try:
            got = run_model(session, case.inputs)
        except Exception as exc:  # noqa: BLE001
            raise ort_failure(f"at {where}", exc, model) from None
        for name, ref in want.items():
            if name not in got:
                continue
            atol = max(DEFAULT_ATOL, floor.get(name, 0.0)) if name in floor else None
            cmp = compare_arrays(got[name], np.asarray(ref), atol=atol, name=name)
            if not cmp:
                raise PassError(
                    f"check at {where}: output {name!r} does not match the stored torch outputs: "
                    f"{cmp.describe()}"
                )
        result.reference_cases += 1
        for sym, v in sizes.items():
            if sym in base and v != base[sym]:
                covered.setdefault(sym, set()).add(v)
    return covered


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


