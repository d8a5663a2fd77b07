"""The run time limit: one watcher thread for every run, and a run over the limit still stops."""

from __future__ import annotations

import os
import tempfile
import threading
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnxsurgery.limits import LimitExceeded, use_limits
from onnxsurgery.validation import watchdog
from onnxsurgery.validation.runtime import create_session, quiet_stderr, run_session


def _slow_model() -> onnx.ModelProto:
    """``x`` squared and squashed ``n`` times in a Loop: as slow as ``n`` asks."""
    body = helper.make_graph(
        [
            helper.make_node("MatMul", ["x_in", "x_in"], ["y"]),
            helper.make_node("Tanh", ["y"], ["x_out"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x_in", TensorProto.FLOAT, [128, 128]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x_out", TensorProto.FLOAT, [128, 128]),
        ],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["n", "", "x"], ["out"], body=body)],
        "slow",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [128, 128]),
            helper.make_tensor_value_info("n", TensorProto.INT64, []),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [128, 128])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_a_run_over_the_limit_stops_with_limit_exceeded() -> None:
    session = create_session(_slow_model(), "cpu")
    x = np.eye(128, dtype=np.float32) * np.float32(0.5)
    out = run_session(session, ["out"], {"x": x, "n": np.array(3, np.int64)})[0]
    expected = x
    for _ in range(3):
        expected = np.tanh(expected @ expected)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    with use_limits({"run_seconds": 0.2}):
        t0 = time.monotonic()
        with pytest.raises(LimitExceeded, match=r"stopped after 0\.2 s.*run_seconds=0\.2"):
            run_session(session, ["out"], {"x": x, "n": np.array(10**9, np.int64)})
        assert time.monotonic() - t0 < 30
        # the next run under the limit is not stopped by the one before
        run_session(session, ["out"], {"x": x, "n": np.array(3, np.int64)})


def test_runs_start_no_thread_each() -> None:
    session = create_session(_slow_model(), "cpu")
    feeds = {"x": np.eye(128, dtype=np.float32), "n": np.array(1, np.int64)}
    run_session(session, ["out"], feeds)  # the watcher exists from here on
    started = []
    original = threading.Thread.start

    def counting_start(self: threading.Thread) -> None:
        started.append(self.name)
        original(self)

    threading.Thread.start = counting_start  # type: ignore[method-assign]
    try:
        for _ in range(20):
            run_session(session, ["out"], feeds)
    finally:
        threading.Thread.start = original  # type: ignore[method-assign]
    assert started == []


def test_deadlines_fire_in_order_and_disarmed_ones_never() -> None:
    fired: list[str] = []
    done = threading.Event()
    late = watchdog.arm(0.3, lambda: (fired.append("late"), done.set()))
    early = watchdog.arm(0.05, lambda: fired.append("early"))
    never = watchdog.arm(0.1, lambda: fired.append("never"))
    watchdog.disarm(never)
    assert done.wait(30), fired
    assert fired == ["early", "late"]
    watchdog.disarm(late)  # already fired: nothing to forget, no error
    watchdog.disarm(early)


# -- stderr of native code, captured around each run -------------------------------------------


def test_quiet_stderr_captures_native_writes_nested_and_restores_fd_2(capfd) -> None:
    with quiet_stderr() as outer:
        os.write(2, b"outer one\n")
        with quiet_stderr() as inner:
            os.write(2, b"inner\n")
        os.write(2, b"outer two\n")
    os.write(2, b"after\n")
    assert inner == ["inner"]
    assert outer == ["outer one", "outer two"]
    assert capfd.readouterr().err == "after\n"


def test_quiet_stderr_makes_no_file_per_use(monkeypatch: pytest.MonkeyPatch) -> None:
    with quiet_stderr():
        pass
    made = []
    original = tempfile.TemporaryFile

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        made.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(tempfile, "TemporaryFile", counting)
    before = len(os.listdir("/proc/self/fd"))
    for k in range(50):
        with quiet_stderr() as lines:
            os.write(2, f"line {k}\n".encode())
        assert lines == [f"line {k}"]
    assert made == [] and len(os.listdir("/proc/self/fd")) == before
