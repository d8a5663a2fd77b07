"""Validation throughput: cases per second on a mid-size conv model, inference vs comparison.

A generated 3.4 MiB conv net (3 -> 64 -> 512 channels, 112 x 112, two outputs: a 64 x 56 x 56 feature map
per image and 1000 logits) runs on ONNX Runtime CPU over 20 stored cases at batch 4; the
references are its own outputs plus 1e-6 noise, so every statistic is computed for real. The
comparison must not dominate: its share of the time is printed and checked (exit 1 over 25 %).
The timed ``validate()`` runs ``--repeat`` times (5) and the median run is shown: one run is at
the mercy of a shared machine.
"Inside ONNX Runtime" is ``InferenceSession.run`` alone, timed by wrapping that method for the
timed runs; what ``run_session`` adds around it (the run's time limit, stderr capture) counts
outside, like loading the cases and building the session.
A second figure times ``compare_arrays`` alone on one 16 M-element output (64 MiB float32).

    python bench/bench_validate.py [--cases 20] [--batch 4] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxsurgery.validation.against_references import validate
from onnxsurgery.validation.arrays import compare_arrays
from onnxsurgery.validation.references import Case, save_case
from onnxsurgery.validation.runtime import create_session


def conv_net(rng: np.random.Generator) -> onnx.ModelProto:
    def weight(name: str, *shape: int) -> onnx.TensorProto:
        fan_in = int(np.prod(shape[1:])) or 1
        array = (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)
        return numpy_helper.from_array(array, name)

    inits = [
        weight("c1", 64, 3, 7, 7),
        weight("c2", 64, 64, 3, 3),
        weight("c3", 64, 64, 3, 3),
        weight("c4", 512, 64, 3, 3),
        weight("fc", 1000, 512),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "c1"], ["a1"], strides=[2, 2], pads=[3, 3, 3, 3]),
        helper.make_node("Relu", ["a1"], ["r1"]),
        helper.make_node("Conv", ["r1", "c2"], ["a2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a2"], ["r2"]),
        helper.make_node("Conv", ["r2", "c3"], ["features"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["features", "c4"], ["a4"], strides=[4, 4], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a4"], ["r4"]),
        helper.make_node("GlobalAveragePool", ["r4"], ["pooled"]),
        helper.make_node("Flatten", ["pooled"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fc"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "bench_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 112, 112])],
        [
            helper.make_tensor_value_info("features", TensorProto.FLOAT, ["N", 64, 56, 56]),
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 1000]),
        ],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


class SessionRunClock:
    """Time spent inside ``InferenceSession.run`` while active: the method wrapped, nothing else."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0
        self._original = ort.InferenceSession.run

    def __enter__(self) -> SessionRunClock:
        original, clock = self._original, self

        def run(session, *args, **kwargs):  # type: ignore[no-untyped-def]
            t0 = time.perf_counter()
            try:
                return original(session, *args, **kwargs)
            finally:
                clock.seconds += time.perf_counter() - t0
                clock.calls += 1

        ort.InferenceSession.run = run  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        ort.InferenceSession.run = self._original  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=20)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument(
        "--repeat", type=int, default=5, help="timed validate() runs; the median one is shown"
    )
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    model = conv_net(rng)
    weights_mb = sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer) / 2**20

    session = create_session(model, "cpu")
    cases = []
    for i in range(args.cases):
        x = rng.standard_normal((args.batch, 3, 112, 112), dtype=np.float32)
        features, logits = session.run(["features", "logits"], {"x": x})
        noise = np.float32(1e-6)
        cases.append(
            Case(
                f"test_data_set_{i}",
                {"x": x},
                {"features": features + noise, "logits": logits - noise},
            )
        )
    out_mb = sum(a.nbytes for a in cases[0].outputs.values()) / 2**20

    with tempfile.TemporaryDirectory() as tmp:
        for i, case in enumerate(cases):
            save_case(case, Path(tmp) / "ref", index=i)
        validate(model, cases[:1], provider="cpu")  # warm-up: first-run allocations, probe
        timed = []
        for _ in range(args.repeat):  # one run is at the mercy of a shared machine: the median
            with SessionRunClock() as clock:
                t0 = time.perf_counter()
                report = validate(model, Path(tmp) / "ref", provider="cpu")
                seconds = time.perf_counter() - t0
            assert clock.calls == args.cases, clock.calls
            timed.append((seconds, clock.seconds, report))
            assert report, report.summary
        timed.sort(key=lambda row: row[0])
        total, inference, report = timed[len(timed) // 2]
    comparison = report.compare_seconds
    wrapper = report.inference_seconds - inference  # run_session around session.run
    other = total - report.inference_seconds - comparison
    share = comparison / (inference + comparison)

    print(f"model: conv net, {weights_mb:.1f} MiB of weights, batch {args.batch}, 112 x 112 input")
    print(f"cases: {args.cases}, outputs per case: features + logits = {out_mb:.1f} MiB float32")
    print(f"provider: {report.provider}")
    print()
    print(f"{'':<34}{'seconds':>10}{'share':>9}")
    print(f"{'total validate() (from disk)':<34}{total:>10.3f}{1:>9.0%}")
    print(f"{'  inside ORT (session.run)':<34}{inference:>10.3f}{inference / total:>9.0%}")
    print(f"{'  run_session around it':<34}{wrapper:>10.3f}{wrapper / total:>9.0%}")
    print(f"{'  comparison (compare_arrays)':<34}{comparison:>10.3f}{comparison / total:>9.0%}")
    print(f"{'  load cases, session, checks':<34}{other:>10.3f}{other / total:>9.0%}")
    print()
    print(
        f"throughput: {args.cases / total:.1f} cases/s end to end, "
        f"{args.cases / (inference + comparison):.1f} cases/s run + compare"
    )
    print(f"comparison share of run + compare: {share:.1%}")
    outside = 1 - inference / total
    print(f"share of validate() outside ONNX Runtime: {outside:.1%} (target < 20 %)")
    print(f"comparison speed: {args.cases * out_mb / comparison:.0f} MiB/s of float32 output")

    big_e = rng.standard_normal(1 << 24, dtype=np.float32)
    big_a = big_e + np.float32(1e-6)
    t0 = time.perf_counter()
    result = compare_arrays(big_a, big_e)
    seconds = time.perf_counter() - t0
    print(
        f"compare_arrays alone, 16 M elements (64 MiB float32): {seconds:.3f} s, "
        f"{64 / seconds:.0f} MiB/s, {'ok' if result else 'FAIL'}"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "cases": args.cases,
                    "seconds": total,
                    "cases_per_second": args.cases / total,
                    "inference_seconds": inference,
                    "run_session_overhead_seconds": wrapper,
                    "compare_seconds": comparison,
                    "outside_ort_share": outside,
                    "compare_share": share,
                },
                indent=1,
            )
        )
    if share > 0.25:
        print(f"FAIL: comparison takes {share:.0%} of run + compare (limit 25 %)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
