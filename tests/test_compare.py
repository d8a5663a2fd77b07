"""compare_arrays against statistics worked out by hand (values exact in binary floating point)."""

from __future__ import annotations

import json
import math
import tracemalloc

import numpy as np
import pytest

import onnxsurgery.validation.array_stats as stats_mod
from onnxsurgery.validation.arrays import OutputComparison, compare_arrays, format_number
from onnxsurgery.validation.tolerances import DEFAULT_ATOL, DEFAULT_RTOL

EXPECTED = np.array([[1.0, 2.0, -4.0], [8.0, 0.0, 16.0]], dtype=np.float32)
ACTUAL = np.array([[1.0, 2.5, -4.0], [8.0, 0.25, 15.875]], dtype=np.float32)
# |a - e| = [0, .5, 0, 0, .25, .125];  atol .1 + rtol .01 * |e| = [.11, .12, .14, .18, .1, .26]


def test_known_difference_gives_hand_computed_statistics() -> None:
    r = compare_arrays(ACTUAL, EXPECTED, atol=0.1, rtol=0.01, name="logits")
    assert not r
    assert r.passed is False
    assert r.name == "logits"
    assert r.max_abs == 0.5
    assert r.max_rel == 0.25  # 0.5 / 2; the 0.25 error sits on a zero reference and is left out
    assert r.mean_abs == pytest.approx(0.875 / 6, rel=0, abs=1e-15)
    assert r.mismatches == 2  # 0.5 > 0.12 and 0.25 > 0.1; 0.125 <= 0.26
    assert r.mismatch_percent == pytest.approx(100 * 2 / 6)
    assert r.size == 6
    assert r.worst_index == (0, 1)  # excess 0.5 - 0.02 beats 0.25 - 0
    assert r.worst_actual == 2.5 and r.worst_expected == 2.0
    assert r.min_atol == pytest.approx(0.48, rel=1e-7)  # a float32 value (see below)
    assert r.nonfinite_mismatches == 0
    assert r.shape == (2, 3) and r.dtype == "float32"


def test_min_atol_is_the_smallest_that_passes() -> None:
    r = compare_arrays(ACTUAL, EXPECTED, atol=0.1, rtol=0.01)
    # float32 outputs follow numpy.allclose on float32 arrays (atol rounded to float32)
    below = float(np.nextafter(np.float32(r.min_atol), np.float32(0)))
    assert compare_arrays(ACTUAL, EXPECTED, atol=r.min_atol, rtol=0.01)
    assert not compare_arrays(ACTUAL, EXPECTED, atol=below, rtol=0.01)
    assert np.allclose(ACTUAL, EXPECTED, atol=r.min_atol, rtol=0.01)
    assert not np.allclose(ACTUAL, EXPECTED, atol=below, rtol=0.01)
    # float64 outputs: the same in float64
    a64, e64 = ACTUAL.astype(np.float64), EXPECTED.astype(np.float64)
    r64 = compare_arrays(a64, e64, atol=0.1, rtol=0.01)
    assert r64.min_atol == pytest.approx(0.48, rel=0, abs=1e-15)
    assert compare_arrays(a64, e64, atol=r64.min_atol, rtol=0.01)
    assert np.allclose(a64, e64, atol=r64.min_atol, rtol=0.01)
    assert not np.allclose(a64, e64, atol=math.nextafter(r64.min_atol, 0), rtol=0.01)
    assert not compare_arrays(a64, e64, atol=math.nextafter(r64.min_atol, 0), rtol=0.01)


def test_within_default_tolerance_passes_and_states_defaults() -> None:
    noisy = EXPECTED + np.float32(1e-6)
    r = compare_arrays(noisy, EXPECTED)
    assert r
    assert (r.atol, r.rtol) == (DEFAULT_ATOL, DEFAULT_RTOL) == (1e-4, 1e-3)
    assert r.mismatches == 0
    # float32 rounding of x + 1e-6 is exact in float64: the max is what numpy says it is
    assert r.max_abs == np.max(np.abs(noisy.astype(np.float64) - EXPECTED.astype(np.float64)))
    assert "ok" in r.describe()


def test_max_rel_ignores_zero_references_matched_exactly() -> None:
    e = np.array([0.0, 0.0, 4.0, -2.0], dtype=np.float32)  # ReLU-like exact zeros
    a = np.array([0.0, 0.0, 4.5, -2.0], dtype=np.float32)
    r = compare_arrays(a, e)
    assert r.max_rel == 0.125 and r.max_abs == 0.5 and r.mismatches == 1


def test_identical_arrays_have_no_worst_element() -> None:
    r = compare_arrays(EXPECTED.copy(), EXPECTED)
    assert r and r.max_abs == 0 and r.min_atol == 0 and r.worst_index is None


def test_describe_names_output_count_and_passing_atol() -> None:
    text = compare_arrays(ACTUAL, EXPECTED, atol=0.1, rtol=0.01, name="logits").describe()
    assert text.startswith("logits: 2/6 elements out of tolerance")
    assert "max abs 5e-1 at [0, 1]" in text
    assert "passes at atol >= 4.8e-1" in text


def test_inputs_are_not_modified() -> None:
    a, e = ACTUAL.copy(), EXPECTED.copy()
    compare_arrays(a, e, atol=0.1, rtol=0.01)
    assert np.array_equal(a, ACTUAL) and np.array_equal(e, EXPECTED)


# -- NaN / Inf placement -------------------------------------------------------------------------


def test_nan_where_reference_has_nan_is_a_match() -> None:
    e = np.array([1.0, np.nan, np.inf, -np.inf], dtype=np.float32)
    r = compare_arrays(e.copy(), e)
    assert r
    assert r.max_abs == 0 and r.nonfinite_mismatches == 0 and r.min_atol == 0


def test_nan_where_reference_is_finite_is_a_mismatch() -> None:
    e = np.array([1.0, 2.0, 3.0, np.nan], dtype=np.float32)
    a = np.array([1.0, np.nan, 3.5, np.nan], dtype=np.float32)
    r = compare_arrays(a, e, atol=0.1, rtol=0.0)
    assert not r
    assert r.nonfinite_mismatches == 1
    assert r.mismatches == 2  # the NaN and 3.5 vs 3.0
    assert r.worst_index == (1,)  # the misplaced NaN comes first
    assert math.isinf(r.min_atol)  # no atol can pass a misplaced NaN
    assert r.max_abs == 0.5  # statistics over the comparable elements only
    assert r.mean_abs == pytest.approx(0.5 / 3)
    assert "1 NaN/Inf placed differently" in r.describe()
    assert r.to_dict()["min_atol"] is None


@pytest.mark.parametrize(
    ("actual", "expected"),
    [(np.inf, -np.inf), (-np.inf, np.inf), (1.0, np.inf), (np.inf, 1.0), (np.nan, np.inf)],
)
def test_infinities_must_match_in_sign_and_place(actual: float, expected: float) -> None:
    a = np.array([0.0, actual], dtype=np.float32)
    e = np.array([0.0, expected], dtype=np.float32)
    r = compare_arrays(a, e, atol=1e30, rtol=1.0)  # no tolerance excuses a misplaced Inf
    assert not r
    assert r.nonfinite_mismatches == 1 and r.mismatches == 1 and r.worst_index == (1,)


def test_same_signed_infinities_match() -> None:
    a = np.array([np.inf, -np.inf, 1.0], dtype=np.float64)
    r = compare_arrays(a, a.copy(), atol=0, rtol=0)
    assert r and r.nonfinite_mismatches == 0


# -- shape, dtype, exact outputs -------------------------------------------------------------------


def test_shape_mismatch_fails_without_statistics() -> None:
    r = compare_arrays(np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32), name="y")
    assert not r
    assert r.problem == "shape [2, 3], expected [3, 2]"
    assert r.max_abs is None and r.min_atol is None
    assert r.describe() == "y: shape [2, 3], expected [3, 2]"
    assert r.mismatch_percent == 100.0


def test_dtype_mismatch_fails_but_still_measures_values() -> None:
    r = compare_arrays(np.ones(4, np.float64), np.ones(4, np.float32))
    assert not r
    assert r.problem == "dtype float64, expected float32"
    assert r.max_abs == 0 and r.mismatches == 0


def test_integer_outputs_compare_exactly_by_default() -> None:
    r = compare_arrays(np.array([1, 2, 3], np.int64), np.array([1, 2, 4], np.int64))
    assert not r
    assert (r.atol, r.rtol) == (0.0, 0.0) and r.exact
    assert r.mismatches == 1 and r.worst_index == (2,) and r.max_abs == 1 and r.min_atol == 1
    assert r.tolerance_text() == "exact"
    assert compare_arrays(np.array([1, 2, 3]), np.array([1, 2, 4]), atol=1)  # unless told otherwise


def test_int64_beyond_float_precision_is_still_exact() -> None:
    big = 2**53
    r = compare_arrays(np.array([big + 1], np.int64), np.array([big], np.int64))
    assert not r and r.mismatches == 1
    # where and by how much too, though float64 holds neither value (it once said "max abs 0")
    r = compare_arrays(np.array([5, 2**62 + 1, 2**62], np.int64), np.array([5, 2**62, 2**62]))
    assert r.max_abs == 1 and r.worst_index == (1,) and r.min_atol == 1
    assert r.describe() == (
        "output: 1/3 elements out of tolerance (exact), max abs 1 at [1]; passes at atol >= 1"
    )


@pytest.mark.parametrize("dtype", [np.int64, np.uint64])
def test_64_bit_integers_over_their_whole_range(dtype) -> None:
    info = np.iinfo(dtype)
    rng = np.random.default_rng(5)
    e = rng.integers(info.min, info.max, 300, dtype=dtype, endpoint=True)
    a = e.copy()
    a[:4] = [info.max, info.min, info.max, info.min]
    a[10:20] ^= 1
    r = compare_arrays(a, e)
    d = [abs(int(x) - int(y)) for x, y in zip(a, e, strict=True)]  # exact, in Python integers
    assert r.mismatches == sum(v != 0 for v in d)
    assert r.max_abs == float(max(d)) and r.worst_index == (int(np.argmax(d)),)
    assert r.mean_abs == pytest.approx(sum(d) / len(d), rel=1e-12)
    assert r.min_atol == float(max(d))


def test_bool_outputs_compare_exactly() -> None:
    r = compare_arrays(np.array([True, False, True]), np.array([True, True, True]))
    assert not r
    assert r.mismatches == 1 and r.worst_index == (1,) and r.worst_actual is np.False_
    assert compare_arrays(np.array([True, False]), np.array([True, False]))


def test_empty_and_scalar_outputs() -> None:
    assert compare_arrays(np.zeros((0, 4), np.float32), np.zeros((0, 4), np.float32))
    r = compare_arrays(np.float32(1.5), np.float32(1.0), atol=0.1, rtol=0)
    assert not r and r.shape == () and r.worst_index == () and r.max_abs == 0.5


def test_string_outputs_compare_exactly() -> None:
    r = compare_arrays(np.array(["a", "b", "c"]), np.array(["a", "x", "y"]), name="labels")
    assert not r and r.mismatches == 2 and r.worst_index == (1,)
    assert r.describe() == "labels: 2/3 elements differ (first at [1])"


def test_negative_tolerance_is_rejected() -> None:
    with pytest.raises(ValueError, match="tolerances must be >= 0"):
        compare_arrays(EXPECTED, EXPECTED, atol=-1)


# -- big outputs -------------------------------------------------------------------------------


def test_chunked_walk_matches_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(0)
    e = rng.standard_normal((37, 41)).astype(np.float32)
    a = e + rng.standard_normal(e.shape).astype(np.float32) * np.float32(2e-4)
    a[30, 7] = np.nan
    e[3, 2] = a[3, 2] = np.inf
    whole = compare_arrays(a, e)
    monkeypatch.setattr(stats_mod, "CHUNK", 64)
    chunked = compare_arrays(a, e)
    w, c = whole.to_dict(), chunked.to_dict()
    assert w.pop("mean_abs") == pytest.approx(c.pop("mean_abs"), rel=1e-12)  # summation order
    assert w == c
    # and both agree with numpy, element by element
    a64, e64 = a.astype(np.float64), e.astype(np.float64)
    finite = np.isfinite(a64) & np.isfinite(e64)
    diff = np.abs(a64[finite] - e64[finite])
    assert chunked.max_abs == diff.max()
    assert chunked.mismatches == int(
        np.count_nonzero(~np.isclose(a64, e64, 1e-3, 1e-4, equal_nan=True))
    )
    assert chunked.nonfinite_mismatches == 1 and chunked.worst_index == (30, 7)


def test_worst_element_found_in_a_later_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stats_mod, "CHUNK", 10)
    e = np.zeros(95, np.float32)
    a = e.copy()
    a[4] = 0.001
    a[83] = -0.01
    r = compare_arrays(a, e)
    assert r.worst_index == (83,) and r.mismatches == 2 and r.max_abs == pytest.approx(0.01)


def test_big_output_needs_no_whole_size_temporaries() -> None:
    n = 1 << 22  # 16 MiB per float32 array; a float64 copy of one would be 32 MiB
    e = np.linspace(-1, 1, n, dtype=np.float32)
    a = e + np.float32(1e-5)
    tracemalloc.start()
    try:
        r = compare_arrays(a, e)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert r
    assert peak < 16 * 2**20, f"peak {peak / 2**20:.1f} MiB"


# -- reports -----------------------------------------------------------------------------------


def test_to_dict_is_strict_json() -> None:
    r = compare_arrays(np.array([np.nan, 1.0]), np.array([0.0, 1.0]), name="y")
    data = json.loads(json.dumps(r.to_dict(), allow_nan=False))
    assert data["name"] == "y" and data["passed"] is False
    assert data["nonfinite_mismatches"] == 1 and data["worst_index"] == [0]
    assert data["worst_actual"] == "nan" and data["min_atol"] is None


def test_missing_output_is_a_failure() -> None:
    r = OutputComparison.missing("aux", "reference output the model does not produce")
    assert not r and r.describe() == "aux: reference output the model does not produce"


@pytest.mark.parametrize(
    ("value", "up", "text"),
    [
        (0.021, False, "2.1e-2"),
        (0.02134, False, "2.13e-2"),
        (1e-4, False, "1e-4"),
        (1.0, False, "1"),
        (0.0, False, "0"),
        (math.inf, False, "inf"),
        (None, False, "-"),
        (0.4944, False, "4.94e-1"),
        (0.4944, True, "4.95e-1"),
        (0.48, True, "4.8e-1"),
        (9.9961, True, "1e1"),
    ],
)
def test_format_number(value: float | None, up: bool, text: str) -> None:
    assert format_number(value, up=up) == text


# -- every dtype against numpy in float64, chunked or not ------------------------------------------


def _oracle(a: np.ndarray, e: np.ndarray, atol: float, rtol: float) -> dict:
    """The statistics computed whole, in float64, with numpy's own isclose."""
    a64, e64 = a.astype(np.float64), e.astype(np.float64)
    with np.errstate(invalid="ignore"):
        finite = np.isfinite(a64) & np.isfinite(e64)
        alike = (np.isnan(a64) & np.isnan(e64)) | (np.isinf(a64) & (a64 == e64))
        placed = ~finite & ~alike
        d = np.abs(a64 - e64)
    d = np.where(finite, d, 0.0)
    m = np.abs(np.where(finite, e64, 0.0))
    excess = np.where(finite, d - rtol * m, -np.inf)
    rel = np.divide(d, m, out=np.zeros_like(d), where=m > 0)
    return {
        "mismatches": int(np.count_nonzero(~np.isclose(a64, e64, rtol, atol, equal_nan=True))),
        "nonfinite": int(np.count_nonzero(placed)),
        "first_placed": int(np.flatnonzero(placed)[0]) if placed.any() else None,
        "max_abs": float(d.max()) if d.size else 0.0,
        "max_rel": float(rel.max()) if rel.size else 0.0,
        # NaN/Inf placed alike count as a match with error 0
        "mean_abs": float(d[finite | alike].mean()) if (finite | alike).any() else 0.0,
        "worst": int(np.argmax(excess)) if d.size and d.max() > 0 else None,
    }


@pytest.mark.parametrize(
    "dtype", [np.float16, np.float32, np.float64, np.int8, np.int32, np.int64, np.uint8, np.bool_]
)
@pytest.mark.parametrize("chunk", [7, None])
def test_statistics_match_numpy_in_float64(monkeypatch, dtype, chunk) -> None:
    if chunk is not None:
        monkeypatch.setattr(stats_mod, "CHUNK", chunk)
    rng = np.random.default_rng(7)
    shape = (5, 13)
    kind = np.dtype(dtype).kind
    if kind == "f":
        e = (rng.standard_normal(shape) * 4).astype(dtype)
        # errors either well inside atol 1e-2 + rtol 1e-2 * |e| or well outside: no ties at the edge
        noise = np.where(rng.random(shape) < 0.2, 0.5, 1e-3) * rng.choice([-1, 1], shape)
        a = (e.astype(np.float64) + noise).astype(dtype)
        e.reshape(-1)[[3, 20, 40]] = [np.nan, np.inf, -np.inf]
        a.reshape(-1)[[3, 20, 40, 41]] = [np.nan, np.inf, np.inf, np.nan]  # 40, 41 misplaced
        e.reshape(-1)[50] = 0  # an error on a zero reference: out of max_rel's reach
        atol, rtol = 1e-2, 1e-2
    elif kind == "b":
        e = rng.random(shape) < 0.5
        a = e.copy()
        a.reshape(-1)[[4, 30]] ^= True
        atol = rtol = 0.0
    else:
        info = np.iinfo(dtype)  # within float64's exact integers (beyond: the test above)
        low, high = max(info.min, -(2**52)), min(info.max, 2**52)
        e = rng.integers(low, high, shape, dtype=dtype, endpoint=True)
        a = e.copy()
        a.reshape(-1)[[2, 33, 64]] = a.reshape(-1)[[2, 33, 64]] ^ 1  # off by one bit
        atol = rtol = 0.0
    r = compare_arrays(a, e, atol=atol, rtol=rtol)
    want = _oracle(a, e, atol, rtol)
    assert r.mismatches == want["mismatches"] > 0
    assert r.nonfinite_mismatches == want["nonfinite"]
    assert r.max_abs == pytest.approx(want["max_abs"], rel=1e-6)
    assert r.max_rel == pytest.approx(want["max_rel"], rel=1e-6)
    assert r.mean_abs == pytest.approx(want["mean_abs"], rel=1e-6)
    worst = want["first_placed"] if want["nonfinite"] else want["worst"]
    assert r.worst_index == np.unravel_index(worst, shape)
    assert r.worst_actual == a.reshape(-1)[worst] or (np.isnan(r.worst_actual))
    if not want["nonfinite"]:  # the smallest passing atol passes, and one step below does not
        assert compare_arrays(a, e, atol=r.min_atol, rtol=rtol)
        below = float(np.nextafter(np.float32(r.min_atol), np.float32(0)))
        assert not compare_arrays(a, e, atol=below, rtol=rtol)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.int64, np.bool_])
def test_empty_outputs_of_every_kind_pass_with_zero_statistics(dtype) -> None:
    r = compare_arrays(np.zeros((3, 0), dtype), np.zeros((3, 0), dtype))
    assert r and r.size == 0 and r.max_abs == 0 and r.mean_abs == 0 and r.worst_index is None
    assert not compare_arrays(np.zeros((0, 3), dtype), np.zeros((3, 0), dtype))


def test_shapes_that_would_broadcast_are_still_a_mismatch() -> None:
    r = compare_arrays(np.zeros((4, 1), np.float32), np.zeros((4, 4), np.float32), name="y")
    assert not r and r.problem == "shape [4, 1], expected [4, 4]" and r.max_abs is None
    r = compare_arrays(np.zeros(4, np.float32), np.zeros((1, 4), np.float32), name="y")
    assert not r and r.problem == "shape [4], expected [1, 4]"


def test_non_contiguous_outputs_compare_like_their_copies(monkeypatch) -> None:
    monkeypatch.setattr(stats_mod, "CHUNK", 5)
    rng = np.random.default_rng(3)
    e = rng.standard_normal((6, 8)).astype(np.float32)
    a = e + np.float32(3e-3)
    r = compare_arrays(a.T, e.T)  # transposed views: reshape(-1) copies, results the same
    assert r.to_dict() == compare_arrays(a.T.copy(), e.T.copy()).to_dict()


# -- the near-zero walk: after the first chunk, only elements with a small reference are measured --


def _whole_array(a: np.ndarray, e: np.ndarray, atol: float, rtol: float) -> dict:
    """Worst element, max_rel and mismatch count over the whole array at once, in the work
    dtype's own arithmetic (float32 for float16/float32, float64 otherwise), as numpy does it."""
    work = np.float64 if a.dtype == np.float64 or a.dtype.kind in "iu" else np.float32
    d = np.abs(np.subtract(a.reshape(-1), e.reshape(-1), dtype=work))
    m = np.abs(e.reshape(-1).astype(work))
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(m > 0, d / m, 0)
    excess = d - (m * rtol + atol)
    return {
        "worst": int(np.argmax(excess)),
        "max_rel": float(rel.max()),
        "mismatches": int(np.count_nonzero(~np.isclose(a, e, rtol=rtol, atol=atol))),
    }


def _patterns(dtype, rng: np.random.Generator):
    """(name, actual, expected, atol, rtol, whether the near-zero walk can be taken): references
    with small and zero elements, errors from rounding-sized to past the tolerance, ties between
    chunks."""
    n = 4000
    if np.dtype(dtype).kind in "iu":
        e = rng.integers(-1000, 1000, n).astype(dtype)
        a = e.copy()
        a[[100, 2500, 3999]] += 1
        # an error of 1 could beat the worst at any reference under 500: no bound worth using
        yield "ints off by 1", a, e, 2.0, 1e-3, False
        a[3000] += 5
        yield "ints off by 1, one by 6", a, e, 2.0, 1e-3, False
        return
    e = rng.standard_normal(n).astype(dtype)

    def offset(ref: np.ndarray, by: float) -> np.ndarray:
        return (ref.astype(np.float64) + by).astype(dtype)

    yield "constant offset", offset(e, 1e-6), e, 1e-4, 1e-3, True
    late = offset(e, 1e-6)
    late[3700] += 1  # a large error at a large reference, in a late chunk: a mismatch
    late[2900] = e[2900] + dtype(0.5)
    yield "late mismatches", late, e, 1e-4, 1e-3, True
    # the worst element early at a small reference, the largest error at a large one; later,
    # smaller mismatches (at references past where the worst could be beaten) all count
    big = rng.uniform(6, 10, n).astype(dtype)
    big[[300, 301]] = [1e-3, 10]
    early = offset(big, 1e-6)
    early[[300, 301]] = offset(big[[300, 301]], 0.05)
    early[[2100, 3300]] = offset(big[[2100, 3300]], 0.02)
    yield "early worst, later mismatches", early, big, 1e-4, 1e-3, False
    small = e.copy()
    small[[1000, 3000]] = 1e-3  # references that small decide max_rel late in the walk
    yield "small references late", offset(small, 3e-6), small, 1e-4, 1e-3, True
    tie, tie_e = offset(e, 1e-6), e.copy()
    tie_e[[700, 2000, 3500]] = 1e-3  # three equal worst elements, none out of tolerance
    tie[[700, 2000, 3500]] = offset(tie_e[[700]], 5e-5)[0]
    yield "ties", tie, tie_e, 1e-4, 1e-3, True
    yield "rtol 0", offset(e, 1e-6), e, 1e-4, 0.0, True
    noisy = (e.astype(np.float64) * (1 + rng.standard_normal(n) * 1e-4)).astype(dtype)
    yield "relative noise", noisy, e, 1e-5, 1e-5, False  # max_rel anywhere: no bound
    yield "atol 0", noisy, e, 0.0, 1e-3, False
    relu = np.maximum(e, 0)
    yield "mostly zeros", offset(relu, 1e-6), relu, 1e-4, 1e-3, False


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int32])
def test_near_zero_walk_gives_the_whole_chunk_figures(monkeypatch, dtype) -> None:
    """The walk that measures only small-reference elements after the first chunk gives the
    figures, bit for bit, of measuring every element (the fast path switched off), and the worst
    element, max_rel and count of numpy's arithmetic over the whole array at once."""
    monkeypatch.setattr(stats_mod, "CHUNK", 256)
    taken = []
    near_zero_only = stats_mod.ElementStats._near_zero_only

    def counting(self, *args):  # type: ignore[no-untyped-def]
        taken.append(near_zero_only(self, *args))
        return taken[-1]

    for name, a, e, atol, rtol, walks in _patterns(dtype, np.random.default_rng(11)):
        taken.clear()
        monkeypatch.setattr(stats_mod.ElementStats, "_near_zero_only", counting)
        fast = compare_arrays(a, e, atol=atol, rtol=rtol)
        monkeypatch.setattr(stats_mod.ElementStats, "_near_zero_only", lambda *args: False)
        every = compare_arrays(a, e, atol=atol, rtol=rtol)
        assert fast.to_dict() == every.to_dict(), name
        if walks:  # the first chunk sets what later ones must beat
            assert taken.count(True) >= len(taken) // 2, f"{name}: near-zero walk taken {taken}"
        want = _whole_array(a, e, atol, rtol)
        assert fast.mismatches == want["mismatches"], name
        assert fast.max_rel == want["max_rel"], name
        if fast.max_abs:
            assert fast.worst_index == (want["worst"],), name


def test_max_abs_and_the_element_furthest_out_of_tolerance_apart() -> None:
    """The largest error sits on a large value, which rtol forgives; the element out of
    tolerance is another (Flaubert's check once said "max abs 1.26e-5 at [0, 0, 337]; passes at
    atol >= 1.13e-5", the 1.26e-5 at another element): each figure is given its own element."""
    expected = np.array([4.7, 0.0508], np.float32)
    actual = expected + np.array([1.26e-5, 1.18e-5], np.float32)
    r = compare_arrays(actual, expected, atol=1e-5, rtol=1e-5)
    assert r.mismatches == 1 and r.worst_index == (1,)
    assert r.describe() == (
        "output: 1/2 elements out of tolerance (atol 1e-5, rtol 1e-5), max abs 1.24e-5; "
        "furthest out of tolerance at [1]: 1.18e-5 off (expected 5.08e-2); passes at atol >= 1.13e-5"
    )
