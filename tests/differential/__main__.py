"""``python -m differential`` (with tests/ on the path): the campaign ``make fuzz`` runs."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

from differential.campaign import differential, minimize, save_reproducer
from differential.graphs import random_model
from differential.oracle import judge, judge_template, reference_outputs
from differential.table import classes, pass_table, template_table
from differential.templates import random_template


def _valid(args: argparse.Namespace) -> int:
    counts: Counter = Counter()
    dropped, failures, refusals = 0, [], []
    for run in differential(args.seed, args.models):
        if run is None:
            dropped += 1
            continue
        counts[(run.row, run.verdict.kind)] += 1
        if run.verdict.kind == "exit 2":
            refusals.append(run.verdict.detail)
        if run.verdict.failed:
            failures.append(run)
    print(pass_table(counts, dropped, args.models))
    if refusals:
        print("exit 2, by message:\n" + classes(refusals))
    for run in failures[: args.minimize]:
        gen = random_model(run.seed)
        path = save_reproducer(args.out, gen, run.chain, minimize(gen, run.chain, run.verdict))
        print(f"  {run.verdict.kind}: seed {run.seed}, {run.chain!r}: {run.verdict.detail[:200]}\n    -> {path}")
    return len(failures)


def _templates(args: argparse.Namespace) -> int:
    counts: Counter = Counter()
    wrong = []
    for k in range(args.templates):
        seed = args.seed * 1_000_003 + k
        template = random_template(seed)
        for batch in (2, 1):
            verdict = judge_template(template, batch)
            counts[(batch, verdict.kind)] += 1
            if verdict.kind in ("wrong", "crash"):
                wrong.append({"seed": seed, "traced_batch": batch, "kind": verdict.kind,
                              "blocks": template.blocks, "channels": template.channels,
                              "axes": template.axes, "detail": verdict.detail})  # fmt: skip
    print(template_table(counts, args.templates))
    if wrong:
        print("wrong or crash, by blocks:")
        print(classes(f"{w['kind']} traced at {w['traced_batch']}: {'+'.join(w['blocks'])}" for w in wrong))
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "symbolize.json").write_text(json.dumps(wrong, indent=1) + "\n", encoding="utf-8")
        print(f"  every one with its seed: {args.out / 'symbolize.json'}")
    return len(wrong)


def _replay(args: argparse.Namespace) -> int:
    gen = random_model(args.replay)
    expected = reference_outputs(gen.model, gen.feeds)
    if expected is None:
        print(f"seed {args.replay}: ONNX Runtime does not run this model (not kept)")
        return 0
    verdict = judge(gen.model, gen.feeds, args.chain, expected)
    print(f"seed {args.replay}, {args.chain!r}: {verdict.kind} {verdict.detail}")
    return int(verdict.failed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m differential", description=__doc__)
    parser.add_argument("--models", type=int, default=3000, help="generated models (0: none)")
    parser.add_argument("--templates", type=int, default=400, help="symbolize templates (0: none)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("build/fuzz-differential"))
    parser.add_argument("--minimize", type=int, default=20, help="failures to minimize and save")
    parser.add_argument("--replay", type=int, default=None, help="one model's seed")
    parser.add_argument("--chain", default="cleanup")
    args = parser.parse_args(argv)
    if args.replay is not None:
        return _replay(args)
    start = time.monotonic()
    failed = _valid(args) if args.models else 0
    print(f"({time.monotonic() - start:.0f} s)")
    if args.templates:
        start = time.monotonic()
        failed += _templates(args)  # a wrong model exit 0 is never acceptable: it fails
        print(f"({time.monotonic() - start:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
