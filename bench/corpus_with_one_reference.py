"""The corpus rows symbolize refuses on all axes, again with one torch reference case.

    python bench/corpus_with_one_reference.py                 # every architecture
    python bench/corpus_with_one_reference.py --only mobilenet_v2,dinov2

Some refusals are about what the graph cannot say (is 'same' padding computed from the size or
fixed? is a learned table resized at another patch grid, and how?), not about what it lacks.
For every (architecture, exporter, traced batch) that symbolize refuses on all axes, this gives
it torch eager outputs at ONE size the corpus does not check (the traced size plus 11 on every
axis but the batch, batch 1), then checks the result at the corpus's sizes, as
``bench/corpus_report.py`` does: the evaluation sizes stay unseen. Exports and references come
from the corpus cache (``build/corpus/``). The exit status is 0 whatever the counts are.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import onnx  # noqa: E402
from corpus.architectures import ARCHITECTURES  # noqa: E402
from corpus.harness import EXPORTERS, check_sizes, export_model, reference  # noqa: E402

import onnxsurgery  # noqa: E402
from onnxsurgery.errors import PassError  # noqa: E402
from onnxsurgery.passes.symbolize import Symbolize  # noqa: E402
from onnxsurgery.validation.references import Case, save_case  # noqa: E402

__all__ = ["main"]


def fresh_size(traced: dict[str, int]) -> dict[str, int]:
    """A size the corpus does not check: batch 1, every other symbol its traced size + 11."""
    return {s: 1 if s == "batch" else v + 11 for s, v in traced.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated architecture names")
    args = parser.parse_args(argv)
    names = args.only.split(",") if args.only else sorted(ARCHITECTURES)
    cpu = onnxsurgery.PassContext(provider="cpu")
    refused = decided = 0
    for name in names:
        arch = ARCHITECTURES[name]
        if "all" not in arch.axis_sets:
            continue
        axes = arch.dynamic_axes_for("all")
        for exporter in EXPORTERS:
            for traced in arch.traced:
                exp = export_model(arch, exporter, traced)
                if not exp.ok:
                    continue
                model = onnx.load(str(exp.path))
                row = f"{name} {exporter} b{traced['batch']}"
                try:
                    Symbolize(dynamic_axes=axes)(model, cpu)
                    continue
                except PassError:
                    refused += 1
                given = fresh_size(traced)
                inputs, outputs = reference(arch, given)
                with tempfile.TemporaryDirectory() as tmp:
                    case = Case("given", inputs, dict(zip(arch.output_names, outputs, strict=True)))
                    save_case(case, Path(tmp))
                    ctx = onnxsurgery.PassContext(provider="cpu", references=tmp)
                    try:
                        out = Symbolize(dynamic_axes=axes)(model, ctx).model
                    except PassError as exc:
                        print(f"{row}: still refused with a case at {given}: {str(exc)[:140]}...")
                        continue
                sizes = check_sizes(out, arch, arch.sizes_for(traced, "all"))
                bad = [s for s in sizes if not s.ok]
                decided += not bad
                verdict = "PASS" if not bad else "FAIL: " + "; ".join(s.message for s in bad)
                print(f"{row}: given a case at {given}: {verdict} at {len(sizes)} corpus sizes")
    print(f"{refused} row(s) refused without references; {decided} pass with one reference case")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
