"""concat-outputs: ONNX Runtime latency of the merged model vs the original plus np.concatenate.

A model with several heads (MatMul + Add on one shared input, outputs of different widths) is
run as exported, its outputs concatenated on the host with ``np.concatenate`` as users do after
every call, and again after ``concat-outputs``, which does the Concat in the graph and returns one
array. Both are timed alike (warm-up, then alternating rounds, median per call); the merged
output is checked equal to the host concatenation. Prints a table and the ratio
(merged / original+concatenate; below 1 means the merge is faster)::

    python bench/bench_concat_outputs.py [--json PATH] [--threads N] [--provider cpu|auto|cuda]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxsurgery.merged_outputs import read_layout
from onnxsurgery.passes.concat_outputs import ConcatOutputs
from onnxsurgery.validation.runtime import create_session, resolve_provider

#: (label, batch, input features, output widths)
CONFIGS = [
    ("8 heads, batch 1", 1, 256, [16, 32, 64, 64, 128, 128, 256, 512]),
    ("8 heads, batch 64", 64, 256, [16, 32, 64, 64, 128, 128, 256, 512]),
    ("6 heads, batch 256", 256, 128, [64, 64, 128, 128, 256, 256]),
    ("10 heads, batch 32", 32, 128, [8, 8, 16, 16, 32, 32, 64, 64, 128, 128]),
]


def heads_model(features: int, widths: list[int], seed: int = 0) -> onnx.ModelProto:
    """x [batch, features] -> one output [batch, width] per head (MatMul + Add)."""
    rng = np.random.default_rng(seed)
    nodes, inits, outputs = [], [], []
    for i, width in enumerate(widths):
        w = (rng.standard_normal((features, width)) / np.sqrt(features)).astype(np.float32)
        b = rng.standard_normal(width).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes += [
            helper.make_node("MatMul", ["x", f"w{i}"], [f"mm{i}"]),
            helper.make_node("Add", [f"mm{i}", f"b{i}"], [f"head{i}"]),
        ]
        outputs.append(helper.make_tensor_value_info(f"head{i}", TensorProto.FLOAT, ["batch", width]))
    graph = helper.make_graph(
        nodes, "heads", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", features])],
        outputs, inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def per_call(fn, calls: int) -> float:
    """Seconds per call of ``fn`` over ``calls`` calls in a row."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def bench(config, provider, threads: int, seconds: float) -> dict:
    label, batch, features, widths = config
    original = heads_model(features, widths)
    merged = ConcatOutputs()(original).model
    layout = read_layout(merged)
    s_orig = create_session(original, provider, threads=threads)
    s_merged = create_session(merged, provider, threads=threads)
    x = np.random.default_rng(1).standard_normal((batch, features)).astype(np.float32)
    feeds = {"x": x}

    def host():
        return np.concatenate(s_orig.run(None, feeds), axis=1)

    def graph():
        return s_merged.run(None, feeds)[0]

    def plain():
        return s_orig.run(None, feeds)

    np.testing.assert_array_equal(graph(), host())  # same numbers before timing anything
    for fn in (host, graph, plain):  # warm-up
        for _ in range(20):
            fn()
    # calls per round so that one round takes ~20 ms; alternate so drift hits all alike
    calls = max(5, int(0.02 / max(per_call(host, 10), 1e-7)))
    times: dict[str, list[float]] = {"host": [], "graph": [], "plain": []}
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(times["host"]) < 5:
        for name, fn in (("host", host), ("graph", graph), ("plain", plain)):
            times[name].append(per_call(fn, calls))
    med = {k: statistics.median(v) * 1e6 for k, v in times.items()}
    return {
        "config": label,
        "batch": batch,
        "outputs": len(widths),
        "merged_shape": [batch, sum(widths)],
        "merged_axis": layout.axis,
        "rounds": len(times["host"]),
        "calls_per_round": calls,
        "original_run_us": round(med["plain"], 2),
        "original_plus_concat_us": round(med["host"], 2),
        "merged_us": round(med["graph"], 2),
        "ratio": round(med["graph"] / med["host"], 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    parser.add_argument("--threads", type=int, default=1, help="ORT intra-op threads (default 1)")
    parser.add_argument("--provider", default="cpu", choices=["cpu", "auto", "cuda"])
    parser.add_argument("--seconds", type=float, default=3.0, help="timing per config (default 3)")
    args = parser.parse_args(argv)
    choice = resolve_provider(args.provider)
    started = time.perf_counter()
    rows = [bench(c, choice, args.threads, args.seconds) for c in CONFIGS]
    header = f"{'config':<20} {'merged shape':>13} {'ORT only':>10} {'ORT+concat':>11} {'merged':>10} {'ratio':>7}"
    print(f"concat-outputs bench: onnxruntime {ort.__version__}, {choice.note}, {args.threads} thread(s), "
          f"{platform.processor() or platform.machine()}")  # fmt: skip
    print("median per call in microseconds; ratio = merged / (ORT + np.concatenate)")
    print(header)
    print("-" * len(header))
    for r in rows:
        shape = "x".join(map(str, r["merged_shape"]))
        print(
            f"{r['config']:<20} {shape:>13} {r['original_run_us']:>10.1f} "
            f"{r['original_plus_concat_us']:>11.1f} {r['merged_us']:>10.1f} {r['ratio']:>7.3f}"
        )
    geo = float(np.exp(np.mean([np.log(r["ratio"]) for r in rows])))
    print(f"geometric mean ratio: {geo:.3f} ({(1 - geo) * 100:+.1f}% time saved by merging in the graph)")
    print(f"total {time.perf_counter() - started:.1f} s")
    if args.json:
        payload = {
            "onnxruntime": ort.__version__,
            "provider": choice.note,
            "threads": args.threads,
            "rows": rows,
            "geomean_ratio": round(geo, 3),
        }
        args.json.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
