"""LLM exports as torch writes them: every pass on a TinyLlama-1.1B-shaped decoder, fp32 and fp16.

The models (``llm_models.py export``: one external file per tensor, written by torch's
exporter, with torch references at (2, 7) and (1, 23) in the model's dtype) are built once into
``--root`` (default /tmp/onnxsurgery-llm; about 6.5 GB, 3 minutes, 6 GB of memory), never
into the repository. Each command is a whole process, one round; wall and peak RSS as
``bench_pipeline.timed`` measures them, ratios against the floor (``onnx.load`` +
``onnx.save`` with external data) and against the model's size on disk.

    python bench/bench_llm.py [--root DIR] [--dtype float32 --dtype float16] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from bench_pipeline import _FLOOR, _ONNXSIM, _ONNXSLIM, BIN, Row, print_table, timed

HERE = Path(__file__).resolve().parent
AXES = "symbolize(*:0=batch, *:1=seq)"
#: (what, passes, target) of the chains run on each model; None: the command is its own.
CHAINS = (
    ("run --passes cleanup", "cleanup", "RSS <= 0.25x size, wall <= floor"),
    ("run --passes infer-shapes", "infer-shapes", "RSS <= 0.25x size, wall <= floor"),
    ("run --passes fold-constants", "fold-constants", "RSS <= 0.25x size, wall <= floor"),
    (f"run --passes {AXES!r} --ref", AXES, "RSS <= 1.25x size, wall <= floor"),
)


def model_size(folder: Path) -> int:
    """Bytes of the model file and every external-data file beside it."""
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


def ensure(root: Path, dtype: str) -> Path:
    """The exported model's folder, exported first where it is not there yet."""
    folder = root / f"tinyllama-1.1b-{dtype}"
    if not (folder / "model.onnx").exists():
        subprocess.run(
            [sys.executable, str(HERE / "llm_models.py"), "export", str(folder), "--dtype", dtype],
            check=True,
        )
    return folder


def commands(folder: Path, out: Path) -> dict[str, tuple[list[str], str]]:
    model, refs = folder / "model.onnx", folder / "refs"
    run = [str(BIN / "onnxsurgery"), "run", str(model), "-o", str(out), "-q", "--passes"]
    cmds = {"floor: onnx.load + onnx.save": ([sys.executable, "-c", _FLOOR, str(model), str(out), "1"], "baseline")}
    for what, passes, target in CHAINS:
        argv = run + [passes] + (["--ref", str(refs)] if "--ref" in what else [])
        if "symbolize" in what:  # kept for validate, next
            argv[argv.index(str(out))] = str(out.with_name("symbolized.onnx"))
        cmds[what] = (argv, target)
    cmds["validate (the symbolized model)"] = ([], "works")  # filled in once symbolize wrote it
    cmds["onnxsim: load + simplify + save"] = ([sys.executable, "-c", _ONNXSIM, str(model), str(out), "1"], "peer")
    cmds["onnxslim"] = ([sys.executable, "-c", _ONNXSLIM, str(model), str(out)], "peer")
    return cmds


def measure(folder: Path, cap_mib: float) -> list[Row]:
    size_mib = model_size(folder) / 2**20
    work = folder.parent / (folder.name + "-out")
    work.mkdir(exist_ok=True)
    out, symbolized = work / "out.onnx", work / "symbolized.onnx"
    rows = []
    for what, (argv, target) in commands(folder, out).items():
        if what.startswith("validate"):
            argv = [str(BIN / "onnxsurgery"), "validate", str(symbolized), "--ref", str(folder / "refs"), "-q"]
        row = Row("llm", folder.name, what, target=target)
        wall, rss, error = timed(argv, cap_mib)
        row.failed = error
        if not error:
            row.walls.append(wall)
            row.rss_mib.append(rss)
        for leftover in work.glob("out.onnx*"):
            leftover.unlink()
        rows.append(row)
    base = rows[0]
    for row in rows:
        if row.rss is not None:
            note = f"peak RSS {row.rss / size_mib:.2f}x the model's size"
            row.failed = f"{row.failed}; {note}" if row.failed else note
        if row is not base and row.wall and base.wall:
            row.ratio, row.rss_ratio = row.wall / base.wall, row.rss / base.rss
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("/tmp/onnxsurgery-llm"))
    parser.add_argument("--dtype", action="append", choices=("float32", "float16"))
    parser.add_argument("--rss-cap-gib", type=float, default=14.0,
                        help="stop a command whose processes pass this RSS (default 14)")
    parser.add_argument("--json", type=Path, help="write the rows as JSON here")
    args = parser.parse_args(argv)
    args.root.mkdir(parents=True, exist_ok=True)
    rows: list[Row] = []
    for dtype in args.dtype or ["float32", "float16"]:
        folder = ensure(args.root, dtype)
        size = model_size(folder) / 2**20
        found = measure(folder, args.rss_cap_gib * 1024)
        print_table(f"{folder.name}: {size:.0f} MiB, one external file per tensor (torch)", found)
        rows += found
    if args.json:
        args.json.write_text(json.dumps([asdict(r) | {"wall": r.wall, "rss": r.rss} for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
