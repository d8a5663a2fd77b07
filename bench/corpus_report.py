"""Run the real-architecture corpus and report symbolize beside the two baselines.

    python bench/corpus_report.py                      # everything (exports cached under build/corpus/)
    python bench/corpus_report.py --only llama,gpt2    # some architectures
    python bench/corpus_report.py --exporter dynamo --batch 1 --method symbolize
    python bench/corpus_report.py --json out.json --markdown out.md

For every architecture in ``tests/corpus/architectures.py``, exporter (TorchScript, dynamo) and
traced batch (1, 2) it exports the model statically, makes it dynamic by each method
(``symbolize``; ``onnx.tools.update_model_dims``; re-exporting from torch with
``dynamic_axes``/``dynamic_shapes``) and checks the result on ONNX Runtime CPU against torch
eager at the traced size and at the architecture's other sizes (atol 1e-4, rtol 1e-3). Prints one
row per (architecture, exporter, traced batch) and the pass rate of each method. The exit status
is 0 whatever the rates are: this is a measurement, the test suite (``-m corpus``) is the gate.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from corpus.architectures import ARCHITECTURES  # noqa: E402
from corpus.harness import (  # noqa: E402
    ATOL,
    EXPORTERS,
    METHODS,
    RTOL,
    CaseResult,
    cache_root,
    check_sizes,
    evaluate,
    export_dir,
    export_model,
    load_symbolize,
)

__all__ = ["main", "run_corpus", "pass_rates", "all_rates", "static_status"]


def _split(values: Sequence[str] | None) -> list[str] | None:
    if not values:
        return None
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


def static_status(
    arch: Any, exporter: str, traced: dict[str, int], rebuild: bool
) -> dict[str, Any]:
    """The static export itself: did it export, and does it match torch at the traced size?"""
    import onnx

    exp = export_model(arch, exporter, traced, rebuild=rebuild)
    if not exp.ok:
        return {
            "status": "export failed",
            "reason": exp.error,
            "seconds": exp.seconds,
            "cached": exp.cached,
        }
    [size] = check_sizes(onnx.load(str(exp.path)), arch, [traced], rebuild=rebuild)
    return {
        "status": "ok" if size.ok else "mismatch",
        "reason": size.message,
        "seconds": exp.seconds,
        "cached": exp.cached,
    }


def run_corpus(
    archs: Sequence[str],
    exporters: Sequence[str],
    batches: Sequence[int],
    methods: Sequence[str],
    axes_sets: Sequence[str] = ("all", "batch"),
    *,
    rebuild: bool = False,
    timeout: float | None = 300,
    progress: Any = None,
) -> tuple[list[dict[str, Any]], list[CaseResult]]:
    """(one row per arch/exporter/batch/axes with its static status, every method's result)."""
    rows: list[dict[str, Any]] = []
    results: list[CaseResult] = []
    for name in archs:
        arch = ARCHITECTURES[name]
        for exporter in exporters:
            for traced in arch.traced:
                batch = traced["batch"]
                if batch not in batches:
                    continue
                static = static_status(arch, exporter, traced, rebuild)
                for axes in arch.axis_sets:
                    if axes not in axes_sets:
                        continue
                    row = {
                        "arch": name,
                        "exporter": exporter,
                        "batch": batch,
                        "axes": axes,
                        "symbols": sorted(
                            {s for a in arch.dynamic_axes_for(axes).values() for s in a.values()}
                        ),
                        "static": static,
                    }
                    for method in methods:
                        result = evaluate(
                            arch,
                            exporter,
                            batch,
                            method,
                            axes=axes,
                            rebuild=rebuild,
                            keep_dir=export_dir(arch, exporter, traced),
                            timeout=timeout,
                        )
                        results.append(result)
                        row[method] = result.to_dict()
                        if progress:
                            progress(result)
                    rows.append(row)
    return rows, results


def pass_rates(
    results: Sequence[CaseResult], methods: Sequence[str], axes: str | None = None
) -> dict[str, dict[str, Any]]:
    """Per method: passed, cases, n/a (no static export to work on), rate over all cases.

    ``axes`` limits it to one axis set (``all`` or ``batch``)."""
    rates = {}
    for method in methods:
        mine = [r for r in results if r.method == method and axes in (None, r.axes)]
        passed = sum(r.ok for r in mine)
        rates[method] = {
            "passed": passed,
            "cases": len(mine),
            "n/a": sum(r.status == "n/a" for r in mine),
            "rate": passed / len(mine) if mine else 0.0,
        }
    return rates


def all_rates(results: Sequence[CaseResult], methods: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Pass rates over every case, and per axis set."""
    out = {"overall": pass_rates(results, methods)}
    for axes in ("all", "batch"):
        if any(r.axes == axes for r in results):
            out[f"axes={axes}"] = pass_rates(results, methods, axes)
    return out


def _cell(result: dict[str, Any], width: int) -> str:
    if result["status"] == "pass":
        return "PASS"
    label = "N/A" if result["status"] == "n/a" else "FAIL"
    reason = result["reason"]
    if len(reason) > width:
        reason = reason[: width - 1] + "…"
    return f"{label}: {reason}"


def _static_text(static: dict[str, Any], width: int) -> str:
    if static["status"] == "ok":
        return "ok"
    reason = static["reason"] or ""
    return f"{static['status']}: {reason[:width]}"


def _rate_lines(rates: dict[str, dict[str, Any]], methods: Sequence[str]) -> list[str]:
    lines = []
    for scope, per_method in rates.items():
        parts = []
        for method in methods:
            r = per_method[method]
            text = f"{method} {r['passed']}/{r['cases']} ({100 * r['rate']:.0f}%)"
            if r["n/a"]:
                text += f" [{r['n/a']} without a static export]"
            parts.append(text)
        lines.append(f"{scope:>10}: " + "; ".join(parts))
    return lines


def _render_terminal(
    rows: list[dict[str, Any]], methods: Sequence[str], rates: dict, width: int
) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(width=max(160, 50 + len(methods) * (width + 8)))
    table = Table(
        title="symbolize corpus: static export -> dynamic model, checked against torch eager"
    )
    for col in ("arch", "exporter", "traced", "dynamic", "static export", *methods):
        table.add_column(col, overflow="fold")
    for row in rows:
        cells = []
        for method in methods:
            status = row[method]["status"]
            style = {"pass": "green", "n/a": "yellow"}.get(status, "red")
            cells.append(f"[{style}]{escape(_cell(row[method], width))}[/{style}]")
        table.add_row(
            row["arch"],
            row["exporter"],
            f"b{row['batch']}",
            ",".join(row["symbols"]),
            escape(_static_text(row["static"], width)),
            *cells,
        )
    console.print(table)
    for line in _rate_lines(rates, methods):
        console.print(escape(line))


def _markdown(
    rows: list[dict[str, Any]], methods: Sequence[str], rates: dict, meta: dict[str, Any]
) -> str:
    lines = [
        "# symbolize corpus report",
        "",
        f"torch {meta['torch']}, transformers {meta['transformers']}, onnx {meta['onnx']}, "
        f"onnxruntime {meta['onnxruntime']}; atol {ATOL:g}, rtol {RTOL:g}; "
        f"{meta['seconds']:.0f} s on {meta['machine']}.",
        "",
        "| scope | " + " | ".join(methods) + " |",
        "| --- " * (1 + len(methods)) + "|",
    ]
    for scope, per_method in rates.items():
        cells = []
        for method in methods:
            r = per_method[method]
            cells.append(f"{r['passed']}/{r['cases']} ({100 * r['rate']:.0f}%)")
        lines.append(f"| {scope} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| arch | exporter | traced | dynamic | static export | " + " | ".join(methods) + " |",
        "| --- " * (5 + len(methods)) + "|",
    ]
    for row in rows:
        cells = [_cell(row[m], 200).replace("|", "\\|") for m in methods]
        lines.append(
            f"| {row['arch']} | {row['exporter']} | b{row['batch']} | {','.join(row['symbols'])} | "
            f"{_static_text(row['static'], 200).replace('|', '/')} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines) + "\n"


def _meta(seconds: float) -> dict[str, Any]:
    import onnx
    import onnxruntime
    import torch
    import transformers

    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "onnx": onnx.__version__,
        "onnxruntime": onnxruntime.__version__,
        "atol": ATOL,
        "rtol": RTOL,
        "seconds": seconds,
        "machine": f"{platform.machine()}, {__import__('os').cpu_count()} cpus",
        "cache": str(cache_root()),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only", action="append", help="architecture(s), comma-separated; repeatable"
    )
    parser.add_argument(
        "--exporter", action="append", choices=EXPORTERS, help="exporter(s) (default both)"
    )
    parser.add_argument(
        "--batch", action="append", type=int, help="traced batch(es) (default 1 and 2)"
    )
    parser.add_argument(
        "--method", action="append", choices=METHODS, help="method(s) (default all)"
    )
    parser.add_argument(
        "--axes",
        action="append",
        choices=("all", "batch"),
        help="axis set(s): every symbolic axis, or batch alone (default both)",
    )
    parser.add_argument("--rebuild", action="store_true", help="re-export and recompute references")
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds allowed per symbolize call"
    )
    parser.add_argument("--width", type=int, default=48, help="reason width in the terminal table")
    parser.add_argument(
        "--json", type=Path, help="write every result here (default: report.json in the cache)"
    )
    parser.add_argument(
        "--markdown", type=Path, help="write the table and rates here (default: report.md there)"
    )
    parser.add_argument("--list", action="store_true", help="list the architectures and exit")
    args = parser.parse_args(argv)

    if args.list:
        for arch in ARCHITECTURES.values():
            print(f"{arch.name:16} {arch.family}; dynamic axes {arch.dynamic_axes}")
        return 0
    archs = _split(args.only) or list(ARCHITECTURES)
    unknown = [a for a in archs if a not in ARCHITECTURES]
    if unknown:
        parser.error(f"unknown architecture(s) {unknown}; known: {', '.join(ARCHITECTURES)}")
    exporters = args.exporter or list(EXPORTERS)
    batches = args.batch or [1, 2]
    methods = args.method or list(METHODS)
    try:
        import transformers  # noqa: F401
    except ImportError:
        print(
            "the corpus builds models from transformers configs: pip install 'transformers>=5,<6'",
            file=sys.stderr,
        )
        return 1
    _, why = load_symbolize()
    if why and "symbolize" in methods:
        print(f"note: symbolize {why}", file=sys.stderr)

    def progress(result: CaseResult) -> None:
        mark = "ok " if result.ok else ("n/a" if result.status == "n/a" else "XX ")
        print(
            f"  {mark} {result.key:56} {result.seconds:6.1f}s  {result.reason[:90]}",
            file=sys.stderr,
        )

    start = time.perf_counter()
    rows, results = run_corpus(
        archs,
        exporters,
        batches,
        methods,
        args.axes or ("all", "batch"),
        rebuild=args.rebuild,
        timeout=args.timeout,
        progress=progress,
    )
    seconds = time.perf_counter() - start
    rates = all_rates(results, methods)
    meta = _meta(seconds)
    _render_terminal(rows, methods, rates, args.width)
    print(f"{len(results)} cases in {seconds:.0f} s (exports cached under {cache_root()})")
    whole = not (args.only or args.exporter or args.batch or args.method or args.axes)
    if whole:  # a full run is the one worth keeping beside the cache
        args.json = args.json or cache_root() / "report.json"
        args.markdown = args.markdown or cache_root() / "report.md"
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps({"meta": meta, "rates": rates, "rows": rows}, indent=1) + "\n"
        )
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(_markdown(rows, methods, rates, meta))
    written = [str(p) for p in (args.json, args.markdown) if p]
    if written:
        print(f"written: {', '.join(written)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
