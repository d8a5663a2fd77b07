"""symbolize's comparisons across batch sizes (``row_checks.agree``): ORT's kernels round a little
differently at another batch, and that rounding grows with the values a model sums, not with each
output element. A 3-D convolution with torchvision's random weights (``mc3_18``: outputs up to
~500) differs by 1.2e-3 at an element near 0 between a row run alone and in a batch of 3; the
check refused it as "rows are not independent". A row that really depends on another is off by
the values themselves, and still fails."""

from __future__ import annotations

import numpy as np

from onnxsurgery.passes.symbolize.row_checks import ROWS_SCALE, agree


def _output(scale: float) -> np.ndarray:
    rng = np.random.default_rng(0)
    out = (rng.standard_normal((1, 400)) * scale / 4).astype(np.float32)
    out[0, 0], out[0, 189] = scale, 0.01  # its largest value, and one near 0
    return out


def test_rounding_of_an_output_of_large_values_is_within_its_scale():
    want = _output(460.0)
    got = want.copy()
    got[0, 189] += 1.22e-3  # mc3_18's difference, row 0 alone against a batch of 3
    assert agree(got, want, "out_0", 1e-5, 1e-5)


def test_a_row_off_by_its_values_still_fails_however_large_the_output():
    want = _output(460.0)
    got = want.copy()
    got[0, 189] += 460.0 * ROWS_SCALE * 20  # 0.092: far past rounding, well under the values
    cmp = agree(got, want, "out_0", 1e-5, 1e-5)
    assert not cmp and "out_0" in cmp.describe()


def test_an_output_of_small_values_keeps_the_check_s_own_tolerance():
    want = _output(1.0)
    got = want.copy()
    got[0, 189] += 1.22e-3  # 1e-3 on values of 1 is no rounding
    assert not agree(got, want, "out_0", 1e-5, 1e-5)


def test_integer_outputs_stay_exact_and_non_finite_values_set_no_scale():
    ids = np.array([[3, 5000]], dtype=np.int64)
    assert not agree(ids + np.array([[0, 1]]), ids, "ids", 1e-5, 1e-5)
    want = np.array([[np.inf, 0.5]], dtype=np.float32)
    assert not agree(np.array([[np.inf, 0.502]], dtype=np.float32), want, "x", 1e-5, 1e-5)


def test_at_one_size_rounding_below_a_millionth_of_the_output_s_scale_is_forgiven():
    # torchvision's FCN with random weights: outputs up to 7e6, where float32 holds steps of 0.5;
    # the rewritten Resize moved elements near 0 by 2.5e-3 against the original, at one size
    from onnxsurgery.passes.symbolize.row_checks import SCALE, compare

    want = _output(7.0e6)
    got = want.copy()
    got[0, 189] += 2.54e-3
    assert compare(got, want, "out_0", 1e-5, 1e-5)
    got[0, 189] = want[0, 189] + 7.0e6 * SCALE * 10  # 70 on values of millions: no rounding
    assert not compare(got, want, "out_0", 1e-5, 1e-5)
    small = _output(1.0)
    assert not compare(small + np.float32(2.54e-3), small, "out_0", 1e-5, 1e-5)
