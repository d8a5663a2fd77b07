"""How far symbolize verifies each symbol, on every fixture and the corpus smoke subset.

    python bench/symbolize_levels.py                 # fixtures + smoke corpus (cached exports)
    python bench/symbolize_levels.py --no-corpus     # fixtures only
    python bench/symbolize_levels.py --json out.json

For each model symbolize runs twice: as a user without references (the level its own check
reaches: ``rows``, ``runs``, ...) and with the stored torch cases as ``--ref`` (``references``
when they cover other sizes). The last column says whether the claim held: a model whose check
claims ``references`` matched torch by construction; one that claims less is compared here with
torch at every stored size, so an unverified level on a wrong model shows up as ``WRONG``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from fixture_manifest import load_manifest  # noqa: E402

import onnxsurgery  # noqa: E402
from onnxsurgery.errors import OnnxSurgeryError  # noqa: E402
from onnxsurgery.passes.symbolize import Symbolize  # noqa: E402
from onnxsurgery.validation.arrays import compare_arrays  # noqa: E402
from onnxsurgery.validation.references import Case, load_cases, save_case  # noqa: E402
from onnxsurgery.validation.runtime import create_session, run_model  # noqa: E402

SMOKE = ("roberta", "llama", "whisper_encoder", "vit")
ATOL, RTOL = 1e-4, 1e-3


def _levels(model: onnx.ModelProto, axes: dict, refs: Path | None) -> tuple[Any, str]:
    ctx = onnxsurgery.PassContext(provider="cpu", references=refs)
    try:
        result = Symbolize(dynamic_axes=axes)(model, ctx)
    except OnnxSurgeryError as exc:
        return None, f"refused: {str(exc).splitlines()[0][:90]}"
    if result.report is None or result.report.verification is None:
        return None, "not modified"
    return result, ""


def _holds(model: onnx.ModelProto, cases: list[Case], outputs: list[str] | None = None) -> bool:
    session = create_session(model, "cpu")
    names = [o.name for o in model.graph.output]
    for case in cases:
        got = run_model(session, case.inputs)
        for k, (name, ref) in enumerate(case.outputs.items()):
            out = got.get(name, got.get(names[k]) if outputs and k < len(names) else None)
            if out is None or not compare_arrays(out, ref, atol=ATOL, rtol=RTOL):
                return False
    return True


def _rows(label: str, model: onnx.ModelProto, axes: dict, refs: Path, cases: list[Case]) -> list:
    plain, why = _levels(model, axes, None)
    with_refs, why_refs = _levels(model, axes, refs)
    if plain is None:
        return [(label, "-", "-", why, why_refs or "-", "-")]
    held = "yes" if _holds(plain.model, cases, outputs=True) else "WRONG"
    rows = []
    for sym, level in plain.report.verification.levels.items():
        ref_level = with_refs.report.verification.levels[sym] if with_refs else why_refs
        oracle = plain.report.verification.oracles[sym]
        rows.append(
            (label, sym, plain.report.symbols[sym], f"{level} ({oracle})", ref_level, held)
        )
    return rows


def fixture_rows() -> list:
    rows = []
    for entry in load_manifest():
        if not entry.exported or entry.symbolize != "expected":
            continue
        model = onnx.load(entry.model_path)
        cases = load_cases(entry.references_dir)
        rows += _rows(str(entry), model, entry.dynamic_axes, entry.references_dir, cases)
    return rows


def corpus_rows(tmp: Path) -> list:
    from corpus.architectures import ARCHITECTURES
    from corpus.harness import EXPORTERS, export_model, reference

    rows = []
    for name in SMOKE:
        arch = ARCHITECTURES[name]
        for exporter in EXPORTERS:
            for traced in arch.traced:
                exp = export_model(arch, exporter, traced)
                if not exp.ok:
                    rows.append((f"{name}/{exporter}/b{traced['batch']}", "-", "-", "no export", "-", "-"))
                    continue
                model = onnx.load(str(exp.path))
                outs = [o.name for o in model.graph.output]
                folder = tmp / f"{name}-{exporter}-{traced['batch']}"
                cases = []
                for k, sizes in enumerate(arch.sizes_for(traced, "all")):
                    inputs, outputs = reference(arch, sizes)
                    case = Case(f"c{k}", dict(inputs), dict(zip(outs, outputs, strict=False)))
                    save_case(case, folder, index=k)
                    cases.append(case)
                label = f"{name}/{exporter}/b{traced['batch']}"
                rows += _rows(label, model, arch.dynamic_axes_for("all"), folder, cases)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-corpus", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rows = fixture_rows()
    if not args.no_corpus:
        with tempfile.TemporaryDirectory() as tmp:
            rows += corpus_rows(Path(tmp))
    head = ("model", "symbol", "traced", "level without --ref (oracle)", "with --ref", "torch agrees")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")
    if args.json:
        args.json.write_text(json.dumps([dict(zip(head, map(str, r), strict=True)) for r in rows], indent=1))
    wrong = sum(1 for r in rows if r[-1] == "WRONG")
    print(f"\n{len(rows)} rows; {wrong} where torch disagrees with a model symbolize returned")
    np.seterr(all="ignore")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
