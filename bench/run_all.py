"""Run the benchmarks (``make bench``), print each one's tables, write bench/results.json.

The benchmarks run one after another (timings need a quiet machine), each a plain script that
prints its own tables; ``--quick`` runs a short form of each (under 3 minutes in all). The
whole-process benchmark (bench_pipeline.py) runs last, because in the full run it ends with the
> 2 GB external-data model. The output of each is shown and saved to ``OUT/<name>.txt``; each
one's rows (``--json``) and text go to ``--results`` (bench/results.json, a committed snapshot,
rewritten on every run); a summary line per benchmark closes the run. Exit 1 if any failed.

    python bench/run_all.py [--quick] [--out build/bench] [-k NAME] [--llm] [--llm-huge]

``--llm`` (never with ``--quick``) adds, last, the LLM exports of ``bench_llm.py``: a
TinyLlama-1.1B-shaped decoder in fp32 and fp16, exported by torch into /tmp once (6.5 GB).
``--llm-huge`` (never with ``--quick``; with ``--llm`` after it) adds ``bench_llm.py --huge``:
that decoder grown to 14 GiB (larger than memory can hold twice), built into /tmp once.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import onnx
import onnxruntime as ort

HERE = Path(__file__).resolve().parent

#: (script, arguments for --quick, arguments for the full run), in the order they run.
BENCHMARKS = [
    ("bench_concat_outputs", ["--seconds", "0.5"], []),
    ("bench_validate", ["--cases", "10"], ["--cases", "40"]),
    ("bench_fold_constants", ["--no-generated", "--repeat", "1"], ["--repeat", "3"]),
    ("bench_pipeline", ["--quick"], ["--runs", "3", "--large"]),
]
#: The group ``--llm`` adds (full runs only), after the others.
LLM_BENCHMARKS = [("bench_llm", None, [])]
#: The group ``--llm-huge`` adds (full runs only), last: its rows go to ``bench_llm_huge``.
LLM_HUGE_BENCHMARKS = [("bench_llm_huge", None, ["--huge"])]


def selected(args: argparse.Namespace) -> list[tuple[str, list[str] | None, list[str]]]:
    """The benchmarks this run asks for, in the order they run (the LLM groups last)."""
    chosen = BENCHMARKS + (LLM_BENCHMARKS if args.llm else [])
    chosen += LLM_HUGE_BENCHMARKS if args.llm_huge else []
    return [entry for entry in chosen if args.only in entry[0]]


def script(name: str) -> Path:
    """The script a benchmark runs: ``bench_llm_huge`` is ``bench_llm.py --huge``."""
    return HERE / f"{name.removesuffix('_huge')}.py"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("build/bench"), help="where outputs go")
    parser.add_argument("--results", type=Path, default=HERE / "results.json")
    parser.add_argument("--quick", action="store_true", help="the short form of every benchmark")
    parser.add_argument("-k", dest="only", default="", help="run only benchmarks whose name contains this")
    parser.add_argument("--llm", action="store_true", help="also the LLM exports (bench_llm.py), last")
    parser.add_argument("--llm-huge", action="store_true",
                        help="also the 14 GiB decoder (bench_llm.py --huge), last")
    args = parser.parse_args(argv)
    if (args.llm or args.llm_huge) and args.quick:
        parser.error("--llm and --llm-huge have no quick form: run them without --quick")
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict = {
        "mode": "quick" if args.quick else "full",
        "python": platform.python_version(),
        "onnx": onnx.__version__,
        "onnxruntime": ort.__version__,
        "machine": f"{platform.machine()}, {platform.processor() or '?'}",
        "benchmarks": {},
    }
    summary = []
    started = time.perf_counter()
    for name, quick, full in selected(args):
        print(f"\n=== {name} ===", flush=True)
        rows_path = args.out / f"{name}.json"
        rows_path.unlink(missing_ok=True)
        argv_ = [sys.executable, str(script(name)), *(quick if args.quick else full)]
        argv_ += ["--json", str(rows_path)]
        start = time.perf_counter()
        proc = subprocess.run(argv_, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        text = proc.stdout + (f"\n[stderr]\n{proc.stderr}" if proc.returncode else "")
        print(text, flush=True)
        (args.out / f"{name}.txt").write_text(text)
        results["benchmarks"][name] = {
            "returncode": proc.returncode,
            "seconds": round(seconds, 1),
            "args": argv_[2:-2],
            "rows": json.loads(rows_path.read_text()) if rows_path.exists() else None,
            "text": proc.stdout.splitlines(),
        }
        summary.append((name, proc.returncode, seconds))
    results["seconds"] = round(time.perf_counter() - started, 1)
    args.results.write_text(json.dumps(results, indent=1) + "\n")
    print("\n=== summary ===")
    for name, code, seconds in summary:
        print(f"{'ok    ' if code == 0 else 'FAILED'} {name:<28} {seconds:8.1f} s")
    print(f"total {results['seconds']:.0f} s; results in {args.results}")
    return 1 if any(code for _, code, _ in summary) else 0


if __name__ == "__main__":
    sys.exit(main())
