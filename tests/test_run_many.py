"""run_many: a session run on several inputs at once gives, in order, what each run alone gives
(oracle: run_model one input at a time), or the error that run raised, and leaves fd 2 as it was."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest

from onnxsurgery.validation.runtime import create_session, run_many, run_model

MODEL = Path(__file__).resolve().parent.parent / "fixtures" / "attention_block" / "torchscript" / "model.onnx"


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_runs_at_once_equal_runs_one_by_one_in_order_errors_in_place(workers):
    model = onnx.load(str(MODEL))
    session = create_session(model, "cpu", threads=1)
    rng = np.random.default_rng(0)
    (first,) = session.get_inputs()
    shape = [d if isinstance(d, int) else 2 for d in first.shape]
    feeds = [{first.name: rng.standard_normal(shape).astype(np.float32)} for _ in range(5)]
    feeds.insert(2, {first.name: np.zeros([1, 1, 1], np.float32)})  # a rank ORT refuses
    before = os.fstat(2)
    got = run_many(session, feeds, workers)
    after = os.fstat(2)
    assert (before.st_dev, before.st_ino) == (after.st_dev, after.st_ino)
    assert len(got) == len(feeds)
    assert isinstance(got[2], Exception)
    for k, f in enumerate(feeds):
        if k == 2:
            continue
        want = run_model(session, f)
        assert got[k].keys() == want.keys()
        for name in want:
            np.testing.assert_array_equal(got[k][name], want[name])


def test_feeds_given_twice_run_once_and_share_its_outputs(monkeypatch):
    import onnxsurgery.validation.runtime as runtime

    model = onnx.load(str(MODEL))
    session = create_session(model, "cpu", threads=1)
    (first,) = session.get_inputs()
    shape = [d if isinstance(d, int) else 2 for d in first.shape]
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    nan = a.copy()
    nan.flat[0] = np.nan  # NaN equals nothing, itself included: run on its own
    feeds = [{first.name: a}, {first.name: b}, {first.name: a.copy()}, {first.name: nan}, {first.name: nan}]
    runs = []
    timed = runtime._run_timed
    monkeypatch.setattr(runtime, "_run_timed", lambda s, n, f: runs.append(f) or timed(s, n, f))
    got = run_many(session, feeds, 2)
    assert len(runs) == 4 and len(got) == 5
    assert got[2] is got[0] and got[3] is not got[4]
    for k in (0, 1, 3):
        want = run_model(session, feeds[k])
        for name in want:
            np.testing.assert_array_equal(got[k][name], want[name])
