"""The check's evidence that a symbol is a batch: rows that do not see each other.

For a symbol whose rows are independent (the evidence checks
:func:`~onnxsurgery.passes.symbolize.check.check_batch_in_original`, ``check_rows`` and
``check_first_rows``): a new row 0 leaves the original model's other rows as they were at the traced size
(:func:`new_row_zero`, :func:`original_rows_independent`); each row of a larger batch equals
that row run alone (:func:`rows_alone`, :func:`rows_differ`); and the first traced-many rows
equal the original model on those rows (:func:`head_rows`, :func:`first_differs`; where a
larger batch begins with the traced run's inputs, :func:`begin_with`, those are the traced run's).
Where the graph fits a constant fixed or following the batch, the original model run on each
traced-many rows alone gives cases at larger batches that choose (:func:`row_cases`).

Every comparison is validation's :func:`~onnxsurgery.validation.arrays.compare_arrays`
(:func:`compare`; across batch sizes :func:`agree`, at :data:`ROWS_SLACK` times the tolerance),
and a failure quotes its ``describe()``: a tolerance failure is worded in ``validation/`` alone.
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence, Set

import numpy as np
import onnx

from onnxsurgery.errors import PassError
from onnxsurgery.passes.symbolize.feeds import check_feeds
from onnxsurgery.passes.symbolize.ort_failure import ort_failure
from onnxsurgery.shapes.dims import Dim
from onnxsurgery.validation.arrays import OutputComparison, compare_arrays
from onnxsurgery.validation.references import Case
from onnxsurgery.validation.runtime import create_session, run_many
from onnxsurgery.validation.tolerances import tolerance_for

__all__ = [
    "ROWS_SLACK",
    "agree",
    "axes_of",
    "begin_with",
    "compare",
    "first_differs",
    "head_rows",
    "new_row_zero",
    "original_rows_independent",
    "row_cases",
    "rows_alone",
    "rows_differ",
]


def axes_of(
    axes: Mapping[str, Mapping[int, str]],
    output_dims: Mapping[str, Sequence[Dim | None] | None],
    sym: str,
    outs: Container[str],
) -> tuple[dict[str, int], dict[str, int]]:
    """The input axes ``sym`` names, and the one output axis per output (of those in ``outs``)
    that follows it."""
    in_axis = {name: a for name, spec in axes.items() for a, s in spec.items() if s == sym}
    out_axis = {}
    for name, dims in output_dims.items():
        if dims is not None and name in outs:
            hits = [i for i, d in enumerate(dims) if d is not None and d == Dim.sym(sym)]
            if len(hits) == 1:
                out_axis[name] = hits[0]
    return in_axis, out_axis


def new_row_zero(
    model: onnx.ModelProto,
    axes: Mapping[str, Mapping[int, str]],
    output_dims: Mapping[str, Sequence[Dim | None] | None],
    sym: str,
    base: Mapping[str, int],
    feeds: Mapping[str, np.ndarray],
    outputs: Container[str],
    rows: Set[str],
    references: Sequence[Case],
) -> dict[str, np.ndarray] | None:
    """The traced-size inputs with a new ``sym`` row 0 (for :func:`original_rows_independent`);
    None when no input or output follows ``sym``."""
    in_axis, out_axis = axes_of(axes, output_dims, sym, outputs)
    if not in_axis or not out_axis:
        return None
    other = check_feeds(model, axes, base, 1_000, rows, references)
    changed = {}
    for name, arr in feeds.items():
        if name in in_axis and name in other:
            arr = np.array(arr, copy=True)
            index: list[slice | int] = [slice(None)] * arr.ndim
            index[in_axis[name]] = 0
            arr[tuple(index)] = other[name][tuple(index)]
        changed[name] = arr
    return changed


def original_rows_independent(
    axes: Mapping[str, Mapping[int, str]],
    output_dims: Mapping[str, Sequence[Dim | None] | None],
    sym: str,
    base: Mapping[str, int],
    expected: Mapping[str, np.ndarray],
    got: Mapping[str, np.ndarray] | Exception | None,
    atol: float,
    rtol: float,
) -> PassError | None:
    """What makes ``sym`` a batch, shown on the original model at its traced size: a new row 0
    (``got``: the original run on :func:`new_row_zero`'s inputs, the error it raised, or None
    when there were none) leaves every other row of every output that follows ``sym`` as it
    was. The failure, or None."""
    if got is None or isinstance(got, Exception):  # the original may reject the new row
        return None
    _, out_axis = axes_of(axes, output_dims, sym, expected)
    n = base[sym]
    for name, axis in out_axis.items():
        keep = np.take(expected[name], range(1, n), axis=axis)
        cmp = agree(np.take(got[name], range(1, n), axis=axis), keep, name, atol, rtol)
        if not cmp:
            return PassError(
                f"check at the traced size: in the original model, a new {sym} row 0 changes the "
                f"other rows of output {name!r} ({cmp.describe()}): {sym}'s rows are not "
                f"independent, so it is no batch; name the batches with rows=... (rows= for none)"
            )
    return None


def first_differs(
    want: Mapping[str, np.ndarray],
    out_axis: Mapping[str, int],
    n: int,
    outs: Mapping[str, np.ndarray],
    atol: float,
    rtol: float,
) -> OutputComparison | None:
    """The comparison of the first output whose first ``n`` entries (along ``out_axis``) differ
    from ``want``, the original model run on the first ``n`` entries of the inputs; None when
    all agree."""
    for name, axis in out_axis.items():
        cmp = agree(np.take(outs[name], range(n), axis=axis), want.get(name), name, atol, rtol)
        if not cmp:
            return cmp
    return None


def begin_with(
    inputs: dict[str, np.ndarray],
    feeds: Mapping[str, np.ndarray],
    in_axis: Mapping[str, int],
    n: int,
    sized: Set[str],
) -> bool:
    """Make ``inputs`` (a size grown along one symbol) begin with the traced run's ``feeds``:
    each input's first ``n`` entries along its axis in ``in_axis`` become that feed, and an
    input without the axis becomes it whole. The original model's outputs on those first
    entries are then the traced run's, and need no run of their own. False, with ``inputs``
    untouched, where the feeds do not fit (an input read as a size, in ``sized``, is made for
    its size and stays so)."""
    for name, arr in inputs.items():
        base = feeds.get(name)
        if name in sized or base is None or base.dtype != arr.dtype:
            return False
        axis = in_axis.get(name)
        if axis is not None and not -arr.ndim <= axis < arr.ndim:
            return False
        head = list(arr.shape)
        if axis is not None:
            if head[axis] < n:
                return False
            head[axis] = n
        if base.shape != tuple(head):
            return False
    for name, arr in inputs.items():
        axis = in_axis.get(name)
        if axis is None:
            inputs[name] = feeds[name]
        else:
            arr = arr.copy()
            arr[(slice(None),) * (axis % arr.ndim) + (slice(0, n),)] = feeds[name]
            inputs[name] = arr
    return True


def head_rows(
    inputs: Mapping[str, np.ndarray], in_axis: Mapping[str, int], n: int
) -> dict[str, np.ndarray]:
    """The first ``n`` entries of each input along its axis in ``in_axis`` (others whole)."""
    return {
        name: (np.take(arr, range(n), axis=in_axis[name]) if name in in_axis else arr)
        for name, arr in inputs.items()
    }


#: How much of an output's largest finite magnitude a float comparison forgives: rounding. A
#: float32 of 7e6 (torchvision's FCN with random weights) holds only steps of 0.5, and a rewrite
#: that changes how ONNX Runtime fuses a node moves its elements near 0 by 2.5e-3; nothing there
#: can be verified in float32 at all. A wrong plan is off by the values themselves.
SCALE = 1e-6

#: How much looser than the check's tolerance a comparison across batch sizes is: ORT's kernels
#: differ a little between batch sizes ...
ROWS_SLACK = 10
#: ... and how much of an output's largest magnitude: the kernels' rounding grows with the values
#: they sum, so an element near 0 of an output whose values reach 500 (a 3-D convolution's) may
#: differ by 1e-3 between batch sizes. A row that reads another row, or a constant that still
#: carries the traced size, is off by the values themselves.
ROWS_SCALE = 1e-5


def compare(
    got: np.ndarray | None,
    want: np.ndarray,
    name: str,
    atol: float,
    rtol: float,
    scale: float = SCALE,
) -> OutputComparison:
    """``got`` against ``want``, its oracle, through validation's :func:`compare_arrays` (whose
    ``describe()`` words a failure): floats within ``atol``/``rtol``, or ``scale`` times
    ``want``'s largest finite magnitude where that is more; other dtypes exact; None (no such
    output) fails."""
    if got is None:
        return OutputComparison.missing(name, "no such output")
    a, r = tolerance_for(name, want, atol, rtol, {})
    if a is not None and np.issubdtype(want.dtype, np.floating) and want.size:
        finite = np.abs(want[np.isfinite(want)])
        a = max(a, scale * float(finite.max())) if finite.size else a
    return compare_arrays(got, want, atol=a, rtol=r, name=name)


def agree(
    got: np.ndarray, want: np.ndarray | None, name: str, atol: float, rtol: float
) -> OutputComparison:
    """:func:`compare` across batch sizes: floats within :data:`ROWS_SLACK` times the check's
    tolerance, or :data:`ROWS_SCALE` of the output's largest finite magnitude where that is
    more; ``want`` None (the original has no such output) fails."""
    if want is None:
        return OutputComparison.missing(name, "not an output of the original model")
    return compare(got, want, name, atol * ROWS_SLACK, rtol * ROWS_SLACK, ROWS_SCALE)


def rows_alone(
    axes: Mapping[str, Mapping[int, str]],
    output_dims: Mapping[str, Sequence[Dim | None] | None],
    sym: str,
    inputs: Mapping[str, np.ndarray],
    outputs: Container[str],
) -> dict[int, dict[str, np.ndarray]]:
    """The inputs of a batch run with only its first row, and with only its last (along
    ``sym``); none when no output follows ``sym`` (nothing to compare)."""
    in_axis, out_axis = axes_of(axes, output_dims, sym, outputs)
    if not out_axis or not in_axis:
        return {}
    n = next(inputs[name].shape[a] for name, a in in_axis.items() if name in inputs)
    return {
        row: {
            name: (np.take(arr, [row], axis=in_axis[name]) if name in in_axis else arr)
            for name, arr in inputs.items()
        }
        for row in (0, n - 1)
    }


def rows_differ(
    model: onnx.ModelProto,
    axes: Mapping[str, Mapping[int, str]],
    output_dims: Mapping[str, Sequence[Dim | None] | None],
    sym: str,
    outs: Mapping[str, np.ndarray],
    singles: Mapping[int, Mapping[str, np.ndarray] | Exception],
    text: str,
    atol: float,
    rtol: float,
) -> PassError | None:
    """Each row of a batch run must equal running that row alone (rows are independent):
    ``singles`` holds the runs of :func:`rows_alone` (or the errors they raised). The failure,
    or None."""
    _, out_axis = axes_of(axes, output_dims, sym, outs)
    n = max(singles) + 1 if singles else 0  # the rows run alone are the first and the last
    for row, single in singles.items():
        if isinstance(single, Exception):
            return ort_failure(f"of {sym} row {row} alone ({text})", single, model)
        found = _run_axes(outs, single, out_axis)
        for name, axis in found.items():
            if np.shape(outs[name])[axis] != n:  # a row alone gives 1: a batch of n gives n
                return PassError(
                    f"check at {text}: {sym} rows are not independent: output {name!r} has "
                    f"{np.shape(outs[name])[axis]} rows along axis {axis} at {sym} {n}, where "
                    f"one row alone gives 1 (a size read as following {sym} where it is fixed, "
                    "or the other way round)"
                )
        for name, axis in {**found, **out_axis}.items():
            want = np.take(outs[name], [row], axis=axis)
            got = single[name]
            if got.shape != want.shape:
                continue
            cmp = agree(got, want, name, atol, rtol)
            if not cmp:
                return PassError(
                    f"check at {text}: {sym} rows are not independent: row {row} of output "
                    f"{name!r} differs from running that row alone: {cmp.describe()}; a constant "
                    f"still carries the traced {sym} (a mask or an index that reads one row)"
                )
    return None


def _run_axes(
    outs: Mapping[str, np.ndarray], single: Mapping[str, np.ndarray], known: Container[str]
) -> dict[str, int]:
    """The batch axis of each output whose dims the plan does not know (an op without a
    symbolic rule: CLIP's pooled output, a GatherND of the last hidden state at each row's end
    token), read off the runs: the one axis that is 1 in the run of one row alone and longer in
    the batch's run. Not compared, a row reading row 0 there was verified ``rows``."""
    found = {}
    for name, full in outs.items():
        alone = single.get(name)
        if name in known or alone is None or np.ndim(full) != np.ndim(alone):
            continue
        differ = [k for k in range(np.ndim(full)) if np.shape(full)[k] != np.shape(alone)[k]]
        if len(differ) == 1 and np.shape(alone)[differ[0]] == 1:
            found[name] = differ[0]
    return found


#: The batches, in multiples of the traced one, at which :func:`row_cases` runs the original
#: model row by row: two larger sizes, so a reading that holds at one alone is told apart.
ROW_CASE_MULTIPLES = (2, 3)


def row_cases(
    model: onnx.ModelProto,
    axes: Mapping[str, Mapping[int, str]],
    traced: Mapping[str, int],
    sym: str,
    out_axis: Mapping[str, int],
    provider: str,
    bare: onnx.ModelProto | None = None,
) -> list[Case]:
    """Cases at larger ``sym`` batches (:data:`ROW_CASE_MULTIPLES` times the traced size, the
    other symbols at theirs) whose outputs are the original model run on each traced-many rows
    alone, put together along each output's ``sym`` axis (``out_axis``, which must name every
    output): what a model whose ``sym`` rows are independent gives there. An oracle only for a
    batch the graph shows independent (the caller's to know); none where the rows of every
    input are alike (nothing to tell apart) or the original fails on a group of rows."""
    n = traced[sym]
    in_axis = {name: a for name, spec in axes.items() for a, s in spec.items() if s == sym}
    cases: list[Case] = []
    session = None
    for k in ROW_CASE_MULTIPLES:
        size = {**traced, sym: k * n}
        inputs = check_feeds(model, axes, size, 100 + k, {sym})
        groups = [
            {
                name: (
                    np.take(arr, range(g * n, (g + 1) * n), axis=in_axis[name])
                    if name in in_axis
                    else arr
                )
                for name, arr in inputs.items()
            }
            for g in range(k)
        ]
        if not any(
            not np.array_equal(group[name], groups[0][name])
            for group in groups[1:]
            for name in in_axis
            if name in inputs
        ):
            return []
        if session is None:
            session = create_session(
                model, provider, threads=1, prepack=False, bare=bare, mapped=True
            )
        said = run_many(session, groups)
        if any(isinstance(s, Exception) or set(s) != set(out_axis) for s in said):
            return []
        outputs = {
            name: np.concatenate([s[name] for s in said], axis=axis)  # type: ignore[index]
            for name, axis in out_axis.items()
        }
        cases.append(Case(name=f"{sym}={k * n} row by row", inputs=inputs, outputs=outputs))
    return cases
