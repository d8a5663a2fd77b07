"""LLM exports as torch writes them: every pass on a TinyLlama-1.1B-shaped decoder, fp32 and fp16.

The models (``llm_models.py export``: one external file per tensor, written by torch's
exporter, with torch references at (2, 7) and (1, 23) in the model's dtype) are built once into
``--root`` (default /tmp/onnxsurgery-llm; about 6.5 GB, 3 minutes, 6 GB of memory), never
into the repository. Each command is a whole process, one round; wall and peak RSS as
``bench_pipeline.timed`` measures them, ratios against the floor (``onnx.load`` +
``onnx.save`` with external data) and against the model's size on disk.

    python bench/bench_llm.py [--root DIR] [--dtype float32 --dtype float16] [--json PATH]
    python bench/bench_llm.py --huge [--huge-gib 14] [--dtype float16]   # larger than memory twice

``--huge``: the decoder exported at 2 layers (fp32 unless ``--dtype float16``), grown tensor by
tensor to ``--huge-gib`` (``llm_models.py grow``: 82 fp32 or 164 fp16 layers at 14 GiB; about
1.7 GB of memory to build, 30 GB of disk with one output), through cleanup, fold-constants and
``cleanup, symbolize, fold-constants`` with symbolize's check (no references: torch cannot hold
the model), and the floor. An fp16 model's check sessions cast its weights as they run (ORT's
CPU provider has no fp16 MatMul), so they hold no fp32 copy of them.
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
    cmds[_SESSION_ROW] = ([], "RSS: what an ORT CPU session holds")
    cmds["onnxsim: load + simplify + save"] = ([sys.executable, "-c", _ONNXSIM, str(model), str(out), "1"], "peer")
    cmds["onnxslim"] = ([sys.executable, "-c", _ONNXSLIM, str(model), str(out)], "peer")
    return cmds


_SESSION_ROW = "ORT CPU session over the symbolized model (built, no run)"
#: builds the session validation builds (create_session by path, CPU) and nothing else
_SESSION = "import sys; from onnxsurgery.validation.runtime import create_session as c; c(sys.argv[1], 'cpu')"


def huge_commands(folder: Path, out: Path) -> dict[str, tuple[list[str], str]]:
    """The floor, cleanup, fold-constants and the chain with the check on the grown decoder."""
    model = folder / "model.onnx"
    run = [str(BIN / "onnxsurgery"), "run", str(model), "-o", str(out), "-q", "--passes"]
    return {
        "floor: onnx.load + onnx.save": ([sys.executable, "-c", _FLOOR, str(model), str(out), "1"], "baseline"),
        "run --passes cleanup": (run + ["cleanup"], "RSS <= 0.25x size, wall <= floor"),
        "run --passes fold-constants": (run + ["fold-constants"], "RSS <= 0.25x size, wall <= floor"),
        f"run --passes 'cleanup, {AXES}, fold-constants' (check on, no --ref)": (
            run + [f"cleanup, {AXES}, fold-constants"], "RSS <= 1.25x size, wall <= floor"
        ),
    }


def ensure_huge(root: Path, gib: float, dtype: str = "float32") -> Path:
    """The grown decoder's folder, exported at 2 layers and grown where it is not there yet."""
    folder, seed = root / f"llama-grown-{gib:g}gib-{dtype}", root / f"llama-2-layers-{dtype}"
    if not (folder / "model.onnx").exists():
        script = str(HERE / "llm_models.py")
        if not (seed / "model.onnx").exists():
            export = [script, "export", str(seed), "--layers", "2", "--dtype", dtype]
            subprocess.run([sys.executable, *export], check=True)
        subprocess.run([sys.executable, script, "grow", str(seed), str(folder), "--gib", str(gib)], check=True)
    return folder


def measure(folder: Path, cap_mib: float, huge: bool = False) -> list[Row]:
    size_mib = model_size(folder) / 2**20
    work = folder.parent / (folder.name + "-out")
    work.mkdir(exist_ok=True)
    out, symbolized = work / "out.onnx", work / "symbolized.onnx"
    rows = []
    listed = huge_commands(folder, out) if huge else commands(folder, out)
    for what, (argv, target) in listed.items():
        if what.startswith("validate"):
            argv = [str(BIN / "onnxsurgery"), "validate", str(symbolized), "--ref", str(folder / "refs"), "-q"]
        if what == _SESSION_ROW:
            argv = [sys.executable, "-c", _SESSION, str(symbolized)]
        row = Row("llm", folder.name, what, target=target)
        wall, rss, error = timed(argv, cap_mib)
        row.failed = error
        if not error:
            row.walls.append(wall)
            row.rss_mib.append(rss)
        for leftover in work.glob("out.onnx*"):
            leftover.unlink()
        rows.append(row)
    for leftover in work.iterdir():  # the symbolized model, the peers' data files
        leftover.unlink()
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
    parser.add_argument("--rss-cap-gib", type=float,
                        help="stop a command whose processes pass this RSS (default 14, --huge 20)")
    parser.add_argument("--json", type=Path, help="write the rows as JSON here")
    parser.add_argument("--huge", action="store_true",
                        help="only the decoder grown to --huge-gib (larger than memory can hold twice)")
    parser.add_argument("--huge-gib", type=float, default=14.0)
    args = parser.parse_args(argv)
    cap_mib = (args.rss_cap_gib or (20.0 if args.huge else 14.0)) * 1024
    args.root.mkdir(parents=True, exist_ok=True)
    rows: list[Row] = []
    if args.huge:
        folder = ensure_huge(args.root, args.huge_gib, (args.dtype or ["float32"])[-1])
        size = model_size(folder) / 2**20
        rows = measure(folder, cap_mib, huge=True)
        print_table(f"{folder.name}: {size:.0f} MiB, grown tensor by tensor, no references", rows)
    for dtype in [] if args.huge else args.dtype or ["float32", "float16"]:
        folder = ensure(args.root, dtype)
        size = model_size(folder) / 2**20
        found = measure(folder, cap_mib)
        print_table(f"{folder.name}: {size:.0f} MiB, one external file per tensor (torch)", found)
        rows += found
    if args.json:
        args.json.write_text(json.dumps([asdict(r) | {"wall": r.wall, "rss": r.rss} for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
