"""fold-constants: node counts vs plain onnxsim, onnxslim and Polygraphy; wall time vs onnxsim.

On every exported fixture, the same fixtures after ``symbolize`` (``+sym``), and a few larger
models built here (a TorchScript- and a
dynamo-exported transformer encoder and Conv+BatchNorm stack, exported by a separate
interpreter so this process never loads torch, and a 100 MB MLP with scaled weights and
shape arithmetic), the main-graph node count after:

- ``fold-constants`` (this project: onnxsim, symbolic-dim checks, fallback),
- plain ``onnxsim.simplify(model)`` with its defaults,
- ``onnxslim.slim(model)``, and
- Polygraphy's ``fold_constants`` (what ``polygraphy surgeon sanitize --fold-constants`` runs),

where those are installed; and the wall time of ``fold-constants`` (default ``isolate=auto``,
and ``isolate=true``: always in a forked child) vs plain onnxsim on the same model (best of
``--repeat`` runs after a warm-up; calls over 2 s are timed once). ``ratio`` is ours / onnxsim,
what the wrapper adds on top of onnxsim itself::

    python bench/bench_fold_constants.py [--repeat 3] [--no-generated] [--large] [--json PATH]

``--large`` adds the >2 GB external-data model of tests/test_fold_constants_large.py (our pass
on the loaded model vs ``onnxsim.simplify(path, output_path=...)``, peak memory).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxsurgery.passes.fold_constants import FoldConstants

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))


@dataclass
class Row:
    model: str
    nodes: int
    ours: int | None
    onnxsim: int | None
    onnxslim: int | None
    polygraphy: int | None
    ours_ms: float | None
    forked_ms: float | None
    onnxsim_ms: float | None
    note: str = ""
    group: str = "fixtures"

    @property
    def ratio(self) -> float | None:
        if self.ours_ms is None or not self.onnxsim_ms:
            return None
        return self.ours_ms / self.onnxsim_ms

    @property
    def forked_ratio(self) -> float | None:
        if self.forked_ms is None or not self.onnxsim_ms:
            return None
        return self.forked_ms / self.onnxsim_ms


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Keep every tool's console output (Python and native) off the table."""
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            with (
                contextlib.redirect_stdout(io.StringIO()),
                contextlib.redirect_stderr(io.StringIO()),
            ):
                yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def best_of(fn: Callable[[], onnx.ModelProto], repeat: int) -> tuple[onnx.ModelProto, float]:
    """The result of ``fn`` and its best time in ms over ``repeat`` runs after a warm-up; a
    call that takes over 2 s is timed once, without a warm-up."""
    t0 = time.perf_counter()
    result = fn()
    first = time.perf_counter() - t0
    if first > 2.0:
        return result, first * 1000
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return result, min(times) * 1000


def count_or_none(fn: Callable[[], onnx.ModelProto]) -> tuple[int | None, str]:
    try:
        with quiet():
            return len(fn().graph.node), ""
    except Exception as exc:  # a tool failing on a model is a result, not a bench failure
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:60] if str(exc) else ''}"


def measure(name: str, model: onnx.ModelProto, repeat: int, tools: dict[str, Callable]) -> Row:
    import onnxsim

    ours_pass, forked_pass = FoldConstants(), FoldConstants(isolate=True)
    notes = []
    try:
        result, ours_ms = best_of(lambda: ours_pass(model), repeat)
        ours = len(result.model.graph.node)
        warnings = [d.message for d in result.diagnostics if d.level == "warning"]
        if warnings:
            notes.append("; ".join(warnings)[:80])
        _, forked_ms = best_of(lambda: forked_pass(model), repeat)
    except Exception as exc:
        ours, ours_ms, forked_ms = None, None, None
        notes.append(f"ours: {exc}"[:80])
    try:
        with quiet():
            (simplified, _), onnxsim_ms = best_of(lambda: onnxsim.simplify(model), repeat)
        plain = len(simplified.graph.node)
    except Exception as exc:
        plain, onnxsim_ms = None, None
        notes.append(f"onnxsim: {type(exc).__name__}")
    counts = {}
    for tool, fn in tools.items():
        counts[tool], err = count_or_none(lambda fn=fn: fn(model))
        if err:
            notes.append(f"{tool}: {err}")
    return Row(
        name,
        len(model.graph.node),
        ours,
        plain,
        counts.get("onnxslim"),
        counts.get("polygraphy"),
        ours_ms,
        forked_ms,
        onnxsim_ms,
        " | ".join(notes),
    )


def other_tools() -> tuple[dict[str, Callable], list[str]]:
    tools: dict[str, Callable] = {}
    missing = []
    try:
        import onnxslim

        tools["onnxslim"] = lambda m: onnxslim.slim(m)
    except ImportError as exc:
        missing.append(f"onnxslim not installed ({exc})")
    try:
        from polygraphy.backend.onnx import fold_constants

        tools["polygraphy"] = lambda m: fold_constants(m, copy=True)
    except ImportError as exc:
        missing.append(f"polygraphy not installed ({exc})")
    return tools, missing


# ---------------------------------------------------------------------------------------------
# models


def fixture_models() -> Iterator[tuple[str, onnx.ModelProto]]:
    from fixture_manifest import load_manifest

    for entry in load_manifest():
        if entry.exported:
            yield entry.id, onnx.load(str(entry.model_path))


def symbolized_fixtures() -> Iterator[tuple[str, onnx.ModelProto]]:
    """The fixtures after ``symbolize`` (their dynamic axes), where symbolize is expected to work."""
    import importlib.util

    from fixture_manifest import load_manifest

    import onnxsurgery

    if importlib.util.find_spec("onnxsurgery.passes.symbolize") is None:
        print("[symbolize not available: no symbolized rows]")
        return
    for entry in load_manifest():
        if not entry.exported or entry.symbolize != "expected":
            continue
        axes = ", ".join(
            f"{name}:{axis}={symbol}"
            for name, by_axis in entry.dynamic_axes.items()
            for axis, symbol in by_axis.items()
        )
        try:
            with quiet():
                report = onnxsurgery.run(entry.model_path, passes=f"symbolize({axes})")
        except onnxsurgery.OnnxSurgeryError as exc:
            print(f"[{entry.id}: symbolize failed: {exc}]")
            continue
        yield f"{entry.id} +sym", report.model


# Exported by a separate interpreter, so this process never imports torch: a fork's cost grows
# with the parent's memory, and the CLI, which the timings stand for, does not load torch either.
_EXPORT_SCRIPT = r"""
import sys, torch
from torch import nn
out = sys.argv[1]
torch.manual_seed(0)
encoder = nn.TransformerEncoder(
    nn.TransformerEncoderLayer(256, 8, 1024, dropout=0.0, batch_first=True), 4).eval()
layers = []
for i in range(8):
    layers += [nn.Conv2d(3 if i == 0 else 64, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU()]
convbn = nn.Sequential(*layers).eval()
for m in convbn:
    if isinstance(m, nn.BatchNorm2d):
        m.running_mean.uniform_(-0.5, 0.5); m.running_var.uniform_(0.5, 2.0)
cases = [("transformer-4x256", encoder, (torch.randn(2, 64, 256),)),
         ("convbn-8x64", convbn, (torch.randn(2, 3, 32, 32),))]
for name, module, args in cases:
    for exporter in ("torchscript", "dynamo"):
        path = f"{out}/{name} ({exporter}).onnx"
        try:
            with torch.no_grad():
                if exporter == "torchscript":
                    torch.onnx.export(module, args, path, dynamo=False, opset_version=17)
                else:
                    torch.onnx.export(module, args, dynamo=True, verbose=False).save(
                        path, external_data=False)
        except Exception as exc:
            print(f"[skipped {name} ({exporter}): export failed: {str(exc).splitlines()[0][:100]}]")
"""


def mlp_with_shape_arithmetic(layers: int = 6, width: int = 2048) -> onnx.ModelProto:
    """x[8, width] through ``layers`` of MatMul(W * scale) + bias, reshaped through shape math."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    current = "x"
    for i in range(layers):
        w = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        inits += [
            numpy_helper.from_array(w, f"W{i}"),
            numpy_helper.from_array(np.array(0.5, np.float32), f"scale{i}"),
            numpy_helper.from_array(rng.standard_normal(width).astype(np.float32), f"b{i}"),
        ]
        nodes += [
            helper.make_node("Mul", [f"W{i}", f"scale{i}"], [f"Ws{i}"]),
            helper.make_node("MatMul", [current, f"Ws{i}"], [f"m{i}"]),
            helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"]),
            helper.make_node("Relu", [f"a{i}"], [f"r{i}"]),
            # TorchScript-style view(x.size(0), -1): Shape -> Gather -> Unsqueeze -> Concat
            helper.make_node("Shape", [f"r{i}"], [f"s{i}"]),
            helper.make_node("Gather", [f"s{i}", "zero"], [f"g{i}"], axis=0),
            helper.make_node("Unsqueeze", [f"g{i}", "axes0"], [f"u{i}"]),
            helper.make_node("Concat", [f"u{i}", "minus1"], [f"shape{i}"], axis=0),
            helper.make_node("Reshape", [f"r{i}", f"shape{i}"], [f"h{i}"]),
        ]
        current = f"h{i}"
    inits += [
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array([0], np.int64), "axes0"),
        numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
    ]
    nodes.append(helper.make_node("Identity", [current], ["y"]))
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, width])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def generated_models(tmp: Path) -> Iterator[tuple[str, onnx.ModelProto]]:
    yield "mlp-6x2048 (100 MB, helper)", mlp_with_shape_arithmetic()
    proc = subprocess.run(
        [sys.executable, "-c", _EXPORT_SCRIPT, str(tmp)], capture_output=True, text=True
    )
    for line in proc.stdout.splitlines():
        if line.startswith("[skipped"):
            print(line)
    if proc.returncode:
        print(f"[torch exports failed: {proc.stderr.strip().splitlines()[-1:]}]")
    for path in sorted(tmp.glob("*.onnx")):
        yield path.stem, onnx.load(str(path))


def bench_large(tmp: Path) -> None:
    """The >2 GB model of tests/test_fold_constants_large.py: our pass vs onnxsim by path."""
    import resource

    import onnxsim
    from test_fold_constants_large import write_large_model

    import onnxsurgery

    src = tmp / "model.onnx"
    weight_bytes = write_large_model(src)
    model = onnxsurgery.load_model(src, check=False)
    t0 = time.perf_counter()
    result = FoldConstants()(model)
    ours_s = time.perf_counter() - t0
    peak_self = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    peak_child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    ours_nodes, before = len(result.model.graph.node), len(model.graph.node)
    del result
    # Plain onnxsim on the same in-memory model: it finds it too big for one protobuf message
    # and goes through a temporary file itself (a deep copy, saved with external data).
    t0 = time.perf_counter()
    with quiet():
        simplified, _ = onnxsim.simplify(model)
    memory_s = time.perf_counter() - t0
    del model, simplified
    plain = tmp / "plain.onnx"
    t0 = time.perf_counter()
    with quiet():
        onnxsim.simplify(str(src), output_path=str(plain))
    path_s = time.perf_counter() - t0
    plain_nodes = len(onnx.load(str(plain), load_external_data=False).graph.node)
    print(
        f"\n>2 GB model ({weight_bytes / 2**30:.2f} GiB of weights, external data): nodes "
        f"{before} -> ours {ours_nodes}, onnxsim {plain_nodes}\n"
        f"  fold-constants on the loaded model: {ours_s:.1f} s (forked child; peak RSS "
        f"{peak_self:.2f} GiB here, {peak_child:.2f} GiB in the child, shared pages in both)\n"
        f"  onnxsim.simplify(loaded model): {memory_s:.1f} s, ratio {ours_s / memory_s:.2f}\n"
        f"  onnxsim.simplify(path, output_path) on the file: {path_s:.1f} s, ratio "
        f"{ours_s / path_s:.2f} (no model to write out or read back)"
    )


# ---------------------------------------------------------------------------------------------
# report


def _cell(value, fmt: str = "{}") -> str:
    return "-" if value is None else fmt.format(value)


def print_table(rows: list[Row]) -> None:
    headers = [
        "model",
        "nodes",
        "ours",
        "onnxsim",
        "onnxslim",
        "polygr.",
        "ours ms",
        "onnxsim ms",
        "ratio",
        "forked ms",
        "f.ratio",
    ]
    table = [
        [
            r.model,
            str(r.nodes),
            _cell(r.ours),
            _cell(r.onnxsim),
            _cell(r.onnxslim),
            _cell(r.polygraphy),
            _cell(r.ours_ms, "{:.1f}"),
            _cell(r.onnxsim_ms, "{:.1f}"),
            _cell(r.ratio, "{:.2f}"),
            _cell(r.forked_ms, "{:.1f}"),
            _cell(r.forked_ratio, "{:.2f}"),
        ]
        for r in rows
    ]
    widths = [max(len(h), *(len(row[i]) for row in table)) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    print(line(headers))
    print("-" * len(line(headers)))
    for row in table:
        print(line(row))
    for r in rows:
        if r.note:
            print(f"  note {r.model}: {r.note}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per model (best is kept)")
    parser.add_argument("--no-generated", action="store_true", help="fixtures only")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    parser.add_argument(
        "--large",
        action="store_true",
        help="also the >2 GB model (~3 min, ~8 GB of RAM, ~10 GB of temp disk)",
    )
    args = parser.parse_args(argv)

    import onnxsim

    from onnxsurgery.passes.fold_constants.options import onnxsim_version

    tools, missing = other_tools()
    print(
        f"onnxsim {onnxsim_version()}; fold-constants with its defaults (onnxsim's batched "
        f"MatMul+Add -> Gemm rewrite off), plain onnxsim with its own; best of {args.repeat} "
        "after a warm-up; '+sym': the fixture after symbolize"
    )
    for line in missing:
        print(f"[{line}]")
    with quiet():
        onnxsim.simplify(mlp_with_shape_arithmetic(1, 8))  # first-call costs out of the table
    rows: list[Row] = []
    start = time.perf_counter()
    for name, model in fixture_models():
        rows.append(measure(name, model, args.repeat, tools))
    for name, model in symbolized_fixtures():
        rows.append(measure(name, model, args.repeat, tools))
        rows[-1].group = "symbolized"
    if not args.no_generated:
        with tempfile.TemporaryDirectory() as tmp:
            for name, model in generated_models(Path(tmp)):
                rows.append(measure(name, model, args.repeat, tools))
                rows[-1].group = "generated"
    print_table(rows)
    for label in ("fixtures", "symbolized", "generated"):
        group = [r for r in rows if r.group == label and r.ratio is not None]
        if not group:
            continue
        added = np.median([r.ours_ms - r.onnxsim_ms for r in group])
        forked = [r.forked_ms - r.onnxsim_ms for r in group if r.forked_ms is not None]
        print(
            f"{label}: median ratio ours/onnxsim {np.median([r.ratio for r in group]):.2f} "
            f"(the wrapper adds a median {added:.1f} ms); always forked (isolate=true): "
            f"{np.median([r.forked_ratio for r in group if r.forked_ratio]):.2f} "
            f"(+{np.median(forked):.1f} ms)"
        )
    compared = [r for r in rows if r.ours is not None and r.onnxsim is not None]
    fewer = sum(r.ours < r.onnxsim for r in compared)
    same = sum(r.ours == r.onnxsim for r in compared)
    print(
        f"nodes vs plain onnxsim: fewer on {fewer}, equal on {same}, more on "
        f"{len(compared) - fewer - same} of {len(compared)} models; "
        f"{time.perf_counter() - start:.0f} s"
    )
    if args.large:
        with tempfile.TemporaryDirectory() as tmp:
            bench_large(Path(tmp))
    if args.json:
        args.json.write_text(
            json.dumps(
                [asdict(r) | {"ratio": r.ratio, "forked_ratio": r.forked_ratio} for r in rows],
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
