"""symbolize's self-check, one evidence check at a time: each fails on a tiny model built for it.

The "rewritten" models here are written by hand (the check does not care who rewrote them), so
each one breaks exactly one piece of evidence. Every value failure is worded by validation's
``OutputComparison.describe()`` after the check's context: "N/M elements out of tolerance
(atol A, rtol R), max abs ..." appears in each message, with the tolerance the check used.
"""

from __future__ import annotations

import re

import numpy as np
import onnx
import onnx.parser
import pytest

from onnxsurgery.errors import PassError
from onnxsurgery.passes.compat import Compat
from onnxsurgery.passes.symbolize.check import CheckRequest, check_dynamic
from onnxsurgery.shapes.dims import Dim
from onnxsurgery.validation.references import Case

HEAD = '<ir_version: 8, opset_import: ["" : 17]>'
BATCH_DIMS = {"y": [Dim.sym("batch"), Dim.const(3)]}


def model(text: str) -> onnx.ModelProto:
    m = onnx.parser.parse_model(f"{HEAD}\n{text}")
    onnx.checker.check_model(m)
    return m


#: The model as exported: y = x + 1 at batch 2 (rows independent).
ORIGINAL = model("net (float[2, 3] x) => (float[2, 3] y) { one = Constant <value_float = 1.0> ()\n y = Add (x, one) }")


def rewritten(body: str) -> onnx.ModelProto:
    """A hand-made "rewrite" of :data:`ORIGINAL` with x's axis 0 named batch."""
    return model(f"net (float[batch, 3] x) => (float[batch, 3] y) {{ one = Constant <value_float = 1.0> ()\n {body} }}")


#: A right rewrite of ORIGINAL.
RIGHT = "y = Add (x, one)"

#: ``n``, the batch size, as a float scalar, and ``n - 2`` (zero at the traced size).
BATCH_SIZE = """
    shape = Shape (x)
    n64 = Gather <axis = 0> (shape, zero)
    n = Cast <to = 1> (n64)
    two = Constant <value_float = 2.0> ()
    grown = Sub (n, two)
"""


def ask(new: onnx.ModelProto, **kw) -> CheckRequest:
    return CheckRequest(
        ORIGINAL, new, {"x": {0: "batch"}}, {"batch": 2}, BATCH_DIMS, "cpu", **kw
    )


def failure(request: CheckRequest) -> str:
    with pytest.raises(PassError) as info:
        check_dynamic(request)
    return str(info.value)


def test_a_right_rewrite_passes_every_check():
    result = check_dynamic(ask(rewritten(RIGHT), batch_rows={"batch"}))
    assert result.levels == {"batch": "rows"}
    assert [s["batch"] for s in result.sizes] == [2, 3, 4]
    assert result.max_abs_diff == 0.0


def test_traced_size_mismatch_is_worded_by_validation():
    half = rewritten("h = Constant <value_float = 0.5> ()\n z = Add (x, one)\n y = Add (z, h)")
    message = failure(ask(half))
    assert re.fullmatch(
        r"check at the traced size batch=2: output 'y' differs from the original: y: 6/6 "
        r"elements out of tolerance \(atol 1e-5, rtol 1e-5\), max abs 5e-1 at \[\d, \d\]; "
        r"passes at atol >= 5e-1",
        message,
    ), message


def test_traced_size_mismatch_of_an_integer_output_is_exact():
    """Integers are compared exactly, not within the float tolerance (1e-5 relative of 1e6 is
    10, which a float tolerance would let through)."""
    original = model("net (int64[2] x) => (int64[2] y) { y = Identity (x) }")
    new = model(
        "net (int64[batch] x) => (int64[batch] y) { one = Constant <value_int = 1> ()\n y = Add (x, one) }"
    )
    request = CheckRequest(original, new, {"x": {0: "batch"}}, {"batch": 2}, {"y": [Dim.sym("batch")]}, "cpu")
    assert failure(request) == (
        "check at the traced size batch=2: output 'y' differs from the original: y: 2/2 "
        "elements out of tolerance (exact), max abs 1 at [0]; passes at atol >= 1"
    )


def test_shape_mismatch_at_another_size():
    """At batch 3 the output keeps 2 rows: the symbols say 3."""
    cut = rewritten(
        "s = Constant <value_ints = [0]> ()\n e = Constant <value_ints = [2]> ()\n"
        " a = Constant <value_ints = [0]> ()\n z = Slice (x, s, e, a)\n y = Add (z, one)"
    )
    message = failure(ask(cut))
    assert message == "check at batch=3: output 'y' has shape [2, 3], expected [3, 3] from the symbols"


def test_rows_not_independent_at_another_size():
    """y = x + 1 + (n - 2) * mean over the batch: right at batch 2, and at batch 3 a row run
    alone differs from that row in the batch."""
    mixed = rewritten(
        "zero = Constant <value_ints = [0]> ()\n"
        + BATCH_SIZE
        + " mean = ReduceMean <axes = [0], keepdims = 1> (x)\n d = Mul (mean, grown)\n"
        " z = Add (x, one)\n y = Add (z, d)"
    )
    message = failure(ask(mixed, batch_rows={"batch"}))
    assert message.startswith(
        "check at batch=3: batch rows are not independent: row 0 of output 'y' differs from "
        "running that row alone: y: "
    ), message
    # the 10x tolerance across batch sizes, worded by validation
    assert "elements out of tolerance (atol 1e-4, rtol 1e-4), max abs" in message
    assert message.endswith("a constant still carries the traced batch (a mask or an index that reads one row)")


def test_first_rows_of_a_larger_batch_differ_from_the_original():
    """y[i] = x[i] + 1 + 5 * (i == 1 and n > 2): right at batch 2 and for each row alone (always
    row 0), and for the last row of batch 3 and 4, but row 1 of a larger batch is off."""
    marked = rewritten(
        "zero = Constant <value_ints = [0]> ()\n"
        + BATCH_SIZE
        + """ start = Constant <value_float = 0.0> ()
        step = Constant <value_float = 1.0> ()
        nf = Squeeze (n)
        i = Range (start, nf, step)
        is1 = Equal (i, step)
        big = Greater (n, two)
        big1 = Squeeze (big)
        both = And (is1, big1)
        mark = Cast <to = 1> (both)
        five = Constant <value_float = 5.0> ()
        off = Mul (mark, five)
        axes1 = Constant <value_ints = [1]> ()
        col = Unsqueeze (off, axes1)
        z = Add (x, one)
        y = Add (z, col)"""
    )
    message = failure(ask(marked, batch_rows={"batch"}))
    assert message.startswith(
        "check at batch=3: the first 2 batch rows of output 'y' differ from the original model "
        "run on those rows: y: 3/6 elements out of tolerance (atol 1e-4, rtol 1e-4), max abs 5 "
        "at [1, 0]"
    ), message
    assert message.endswith("a constant still carries the traced batch")


def test_batch_in_the_original_rows_must_not_see_each_other():
    """The original itself mixes rows (x - mean over the batch): batch is no batch there."""
    mixing = "zero = Constant <value_ints = [0]> ()\n mean = ReduceMean <axes = [0], keepdims = 1> (x)\n y = Sub (x, mean)"
    original = model(f"net (float[2, 3] x) => (float[2, 3] y) {{ {mixing} }}")
    new = model(f"net (float[batch, 3] x) => (float[batch, 3] y) {{ {mixing} }}")
    request = CheckRequest(
        original, new, {"x": {0: "batch"}}, {"batch": 2}, BATCH_DIMS, "cpu", batch_rows={"batch"}
    )
    message = failure(request)
    assert message.startswith(
        "check at the traced size: in the original model, a new batch row 0 changes the other "
        "rows of output 'y' (y: 3/3 elements out of tolerance (atol 1e-4, rtol 1e-4)"
    ), message
    assert message.endswith(
        "batch's rows are not independent, so it is no batch; name the batches with rows=... "
        "(rows= for none)"
    )


def test_prefix_is_evidence_only():
    """seq is no batch: a larger seq whose first traced-many positions equal the original's is
    noted (as in a causal model); one whose positions differ is no failure, only not noted."""
    original = model(
        "net (float[3, 2] x) => (float[3, 2] y) { zero = Constant <value_ints = [0]> ()\n"
        " y = CumSum (x, zero) }"
    )
    dims = {"y": [Dim.sym("seq"), Dim.const(2)]}

    def level(body: str) -> str:
        new = model(f"net (float[seq, 2] x) => (float[seq, 2] y) {{ zero = Constant <value_ints = [0]> ()\n {body} }}")
        result = check_dynamic(CheckRequest(original, new, {"x": {0: "seq"}}, {"seq": 3}, dims, "cpu"))
        assert result.levels == {"seq": "runs"}
        return result.oracles["seq"]

    assert level("y = CumSum (x, zero)").endswith(
        "beyond the first 3 positions, which equal the original model (as in a causal model)"
    )
    # off by (seq - 3) / 2 everywhere: right at the traced size, runs at every other size
    moved = (
        "y0 = CumSum (x, zero)\n shape = Shape (x)\n n64 = Gather <axis = 0> (shape, zero)\n"
        " n = Cast <to = 1> (n64)\n three = Constant <value_float = 3.0> ()\n"
        " d = Sub (n, three)\n y = Add (y0, d)"
    )
    assert level(moved) == "ran with the output shapes the symbols give; values unverified"


def test_references_mismatch_is_worded_by_validation():
    x = np.arange(9, dtype=np.float32).reshape(3, 3)
    wrong = Case("case_3", {"x": x}, {"y": x + 1.5})
    message = failure(ask(rewritten(RIGHT), references=[wrong]))
    assert re.fullmatch(
        r"check at reference case case_3 \(batch=3\): output 'y' does not match the stored torch "
        r"outputs: y: 9/9 elements out of tolerance \(atol 1e-4, rtol 1e-3\), max abs 5e-1 at "
        r"\[\d, \d\]; passes at atol >= 4.99e-1",
        message,
    ), message
    right = Case("case_3", {"x": x}, {"y": x + 1})
    result = check_dynamic(ask(rewritten(RIGHT), references=[right]))
    assert result.levels == {"batch": "references"} and result.reference_cases == 1


def test_the_earliest_failure_in_reading_order_is_raised():
    """Every check runs over the runs and the driver decides: a rewrite wrong at the traced size
    and at batch 3 (and against a reference case) is told about the traced size; wrong at
    batch 3 only, about batch 3, not the reference case."""
    x = np.arange(9, dtype=np.float32).reshape(3, 3)
    wrong = Case("case_3", {"x": x}, {"y": x + 1.5})
    slicing = (
        "s = Constant <value_ints = [0]> ()\n e = Constant <value_ints = [2]> ()\n"
        " a = Constant <value_ints = [0]> ()\n z = Slice (x, s, e, a)\n"
    )
    both = rewritten(slicing + " h = Constant <value_float = 0.5> ()\n w = Add (z, h)\n y = Add (w, one)")
    message = failure(ask(both, references=[wrong]))
    assert message.startswith("check at the traced size batch=2: output 'y' differs"), message
    shape = failure(ask(rewritten(slicing + " y = Add (z, one)"), references=[wrong]))
    assert shape.startswith("check at batch=3: output 'y' has shape [2, 3]"), shape


def test_compat_words_a_mismatch_as_validation_does():
    original = model("net (float[2] x) => (float[2] y) { y = Identity (x) }")
    changed = model(
        "net (float[2] x) => (float[2] y) { h = Constant <value_float = 0.5> ()\n y = Add (x, h) }"
    )
    with pytest.raises(PassError) as info:
        Compat()._compare(original, changed)
    assert re.fullmatch(
        r"compat: the converted model differs from the original \(onnx.reference\) on random "
        r"inputs: y: 2/2 elements out of tolerance \(atol 1e-4, rtol 1e-3\), max abs 5e-1 at "
        r"\[\d\]; passes at atol >= [0-9.e-]+",
        str(info.value),
    ), str(info.value)
