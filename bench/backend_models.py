"""Counts over the ONNX backend models shipped in the ``onnx`` wheel: how many ORT runs
(baseline), how many ``onnxsurgery validate`` accepts, how many survive
``run --passes "cleanup, infer-shapes, fold-constants" --ref``, and how many ``compat`` brings
onto ORT among those ORT cannot load.

    python bench/backend_models.py [--failures] [-k NAME]

Run it on main and on a branch to compare; the helpers are ``tests/backend_models.py``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from backend_models import backend_models, baseline, cli, run_exit, validate_exit  # noqa: E402

from onnxsurgery.pipeline.registry import discover  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--failures", action="store_true", help="print every failing model")
    parser.add_argument("-k", dest="only", default="", help="only models whose name contains this")
    parser.add_argument("--no-run", action="store_true", help="skip the run --passes sweep")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        models = [m for m in backend_models(Path(tmp) / "light") if args.only in m.label]
        passing, failing, unloadable = [], [], []
        for m in models:
            why = baseline(m)
            if why is None:
                passing.append(m)
            else:
                failing.append(f"baseline {m.label}: {why}")
                if "NOT_IMPLEMENTED" in why:
                    unloadable.append(m)
        kinds = Counter(m.kind for m in passing)
        print(f"{len(models)} backend models with test data; baseline (ORT matches stored "
              f"outputs): {len(passing)} ({', '.join(f'{k} {n}' for k, n in kinds.items())})")
        has_compat = "compat" in discover()
        rows: Counter[tuple[str, int]] = Counter()
        problems: list[str] = []
        for m in passing:
            code, line = validate_exit(m)
            rows[("validate", code)] += 1
            if code != 0:
                problems.append(f"validate {m.label}: exit {code}: {line}")
            if not args.no_run:
                code, line = run_exit(m, tmp)
                rows[("run", code)] += 1
                if code != 0:
                    problems.append(f"run {m.label}: exit {code}: {line}")
        if has_compat:
            for m in unloadable:
                out = Path(tmp) / f"compat-{m.kind}-{m.name}.onnx"
                code, line = cli("run", m.model, "-o", out, "--passes", "compat", "--ref",
                                 m.directory, "--provider", "cpu", "-q")
                rows[("compat", code)] += 1
                if code != 0:
                    problems.append(f"compat {m.label}: exit {code}: {line}")
    for what, total in (("validate", len(passing)), ("run", len(passing)),
                        ("compat", len(unloadable))):
        codes = {c: n for (w, c), n in rows.items() if w == what}
        if not codes:
            continue
        detail = ", ".join(f"exit {c}: {n}" for c, n in sorted(codes.items()))
        print(f"{what:<9} exit 0 on {codes.get(0, 0)}/{total}   ({detail})")
    print(f"ORT has no kernel for an op of {len(unloadable)} of the others (compat row)")
    if args.failures:
        print("\n".join(failing + problems))
    print(f"{time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
