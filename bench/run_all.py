"""Run every benchmark in bench/ (``make bench``), keeping each one's output in --out.

Each ``bench/*.py`` other than this file is a plain script that prints its own table. They run
one after another (timings need a quiet machine); the output of each is shown and saved to
``OUT/<name>.txt``; a summary line per benchmark closes the run. Exit 1 if any benchmark failed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("build/bench"), help="where outputs go")
    parser.add_argument("-k", dest="only", default="", help="run only benchmarks whose name contains this")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    scripts = sorted(p for p in HERE.glob("*.py") if p.name != Path(__file__).name and args.only in p.stem)
    summary = []
    for script in scripts:
        print(f"\n=== {script.stem} ===", flush=True)
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
        seconds = time.perf_counter() - start
        text = proc.stdout + (f"\n[stderr]\n{proc.stderr}" if proc.returncode else "")
        print(text, flush=True)
        (args.out / f"{script.stem}.txt").write_text(text)
        summary.append((script.stem, proc.returncode, seconds))
    print("\n=== summary ===")
    for name, code, seconds in summary:
        print(f"{'ok    ' if code == 0 else 'FAILED'} {name:<28} {seconds:8.1f} s")
    return 1 if any(code for _, code, _ in summary) else 0


if __name__ == "__main__":
    sys.exit(main())
