"""Behaviour fingerprint: sha256 of what a fixed set of runs writes, for refactors that must change nothing.

Every exported fixture goes through ``cleanup`` and ``symbolize`` (with the manifest's dynamic
axes); every symbolizable one also through ``symbolize, fold-constants``, and every multi-output
one through ``symbolize, concat-outputs(flatten=1)``, plain and cast to float32.
A run that writes a model is recorded by the
sha256 of the file; a run that fails by its error type and message. Usage::

    python bench/behaviour_hashes.py --write bench/behaviour_hashes.json   # record
    python bench/behaviour_hashes.py --check bench/behaviour_hashes.json   # compare, exit 1 on a difference

Only the public API (``onnxsurgery.run`` with chain text) is used, so the script runs unchanged
before and after a restructure of the modules behind it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import tomllib
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def _axes(dynamic_axes: dict[str, dict[str, str]]) -> str:
    return ", ".join(
        f"{name}:{axis}={symbol}"
        for name, axes in sorted(dynamic_axes.items())
        for axis, symbol in sorted(axes.items())
    )


def planned_runs() -> list[tuple[str, str, str]]:
    """(run id, model path relative to fixtures/, chain text) for every run, in a fixed order."""
    manifest = tomllib.loads((FIXTURES / "manifest.toml").read_text())
    runs: list[tuple[str, str, str]] = []
    for fx in manifest["fixture"]:
        if not fx["exported"]:
            continue
        fid = f"{fx['name']}/{fx['exporter']}"
        sym = f"symbolize({_axes(fx['dynamic_axes'])})"
        runs.append((f"{fid}: cleanup", fx["model"], "cleanup"))
        runs.append((f"{fid}: symbolize", fx["model"], sym))
        if fx["symbolize"] == "expected":
            if fx["multi_output"]:
                for extra, opts in (("", "flatten=1"), (" cast", "flatten=1, dtype=float32, lossy=true")):
                    chain = f"{sym}, concat-outputs({opts})"
                    runs.append((f"{fid}: symbolize, concat{extra}", fx["model"], chain))
            runs.append((f"{fid}: symbolize, fold", fx["model"], f"{sym}, fold-constants"))
    return runs


def fingerprint(run: tuple[str, str, str]) -> tuple[str, str]:
    """Run one chain; the output file's sha256, or the error's type and message."""
    import onnxsurgery

    run_id, model, chain = run
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.onnx"
        try:
            onnxsurgery.run(FIXTURES / model, passes=chain, output=out)
        except onnxsurgery.OnnxSurgeryError as exc:
            return run_id, f"error {type(exc).__name__}: {exc}"
        return run_id, "sha256 " + hashlib.sha256(out.read_bytes()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", type=Path, help="record the fingerprints to this JSON file")
    group.add_argument("--check", type=Path, help="compare with the fingerprints in this JSON file")
    parser.add_argument("-j", "--jobs", type=int, default=2)
    args = parser.parse_args(argv)

    runs = planned_runs()
    with ProcessPoolExecutor(args.jobs) as pool:
        got = dict(pool.map(fingerprint, runs))
    if args.write:
        args.write.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        print(f"{len(got)} runs recorded in {args.write}")
        return 0
    expected = json.loads(args.check.read_text())
    differ = sorted(k for k in expected.keys() | got.keys() if expected.get(k) != got.get(k))
    for key in differ:
        print(f"DIFFERS {key}\n  expected: {expected.get(key)}\n  got:      {got.get(key)}")
    print(f"{len(got)} runs, {len(got) - len(differ)} identical, {len(differ)} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
