"""symbolize on every architecture people export: a sweep over the registries (issue 30, item 1).

    python bench/sweep.py --limit 60                 # the first 60 rows, every kind in turn
    python bench/sweep.py --kinds audio,video        # some kinds
    python bench/sweep.py --only bert.base,gpt2.causal-lm-kv --exporter torchscript --batch 2
    python bench/sweep.py --list                     # how many rows the registries give
    python bench/sweep.py --readme                   # the README table from bench/sweep.json

Rows come from ``bench/sweep_rows.py`` (every transformers model type, as a base model, causal
LM and causal LM over a flat KV cache; every torchvision model). For each row, exporter
(TorchScript, dynamo) and traced batch (2, 1) the corpus harness (``tests/corpus/harness.py``)
exports the model statically; a static export that fails, or differs from torch at its traced
size, is listed and not scored. Otherwise the static model is made dynamic three ways, each run
on ONNX Runtime at the traced size and three other sizes against torch eager (atol 1e-4, rtol
1e-3):

- ``symbolize``: ``onnxsurgery run --passes "symbolize(INPUT:AXIS=NAME, ...)"`` as a user runs
  it, every symbolic axis of the row named. ``pass``; ``refused`` (exit 2); ``wrong`` (exit 0,
  but the model fails to load or differs from torch at some size); ``crash`` (exit 3, another
  exit, or the time limit);
- ``re-export`` with dynamic axes (TorchScript ``dynamic_axes``, dynamo ``dynamic_shapes``);
- ``update_model_dims`` (``onnx.tools.update_model_dims``).

A refused symbolize is then run again as a user who follows its advice (:func:`follow_advice`;
``--no-advice`` skips it), beside ``symbolize`` in the results, scored the same way:
``symbolize+ref`` where the refusal advises reference cases (``--ref``: one torch eager case
recorded in the layout ``--ref`` reads, at a size no check uses), ``symbolize+bound`` where it
advises a bound (``seq<=traced``, as ``--bound`` below). The table counts the cases symbolize
passes plainly or after the advice (``+ref``, ``+bound``: cumulative), and totals by kind.

Each row runs in a forked worker with a time limit and an address-space cap; its exports,
references and probed signature are cached under ``build/sweep/`` keyed by a hash of the row, so
a re-run only scores. Results merge into ``bench/sweep.json`` (rows of this run replace the same
rows there); the exit status is 0 whatever they are: this is a measurement.

``--bound`` runs symbolize with every symbol but ``batch`` bounded at its traced size
(``input_ids:1=seq<=traced``: tables folded at the traced length are sliced to the size) and
scores it at sizes within the bound (each check size over it scaled under it), then runs it
once over the bound, where it must fail on ONNX Runtime (``over:`` in the message says how).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import functools
import json
import multiprocessing
import os
import platform
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests"))

from corpus.harness import cache_root, check_sizes, current_cache, evaluate, sizes_label  # noqa: E402
from corpus_report import static_status  # noqa: E402
from sweep_rows import (  # noqa: E402
    KINDS,
    BuildError,
    Row,
    advised_least,
    architecture,
    enumerate_rows,
    reference_sizes,
    row_key,
    write_reference,
)

__all__ = [
    "ADVICE",
    "SYMBOLIZE_STATUSES",
    "advised",
    "after_advice",
    "by_kind",
    "classify",
    "follow_advice",
    "main",
    "score_rows",
    "select",
    "table",
]

EXPORTERS = ("torchscript", "dynamo")
BATCHES = (2, 1)
SYMBOLIZE_STATUSES = ("pass", "refused", "wrong", "crash")
RESULTS = REPO / "bench" / "sweep.json"
README = REPO / "README.md"
ONNXSURGERY = Path(sys.executable).with_name("onnxsurgery")


def sweep_root() -> Path:
    """``build/sweep/<torch-version>/``: every row's exports, references and results."""
    return cache_root(REPO / "build" / "sweep")


# --------------------------------------------------------------------------------------------
# choosing rows


def select(
    rows: Sequence[Row],
    *,
    kinds: Iterable[str] | None = None,
    only: Iterable[str] | None = None,
    limit: int | None = None,
) -> list[Row]:
    """The rows asked for; ``limit`` takes them one kind after another in turn, so a slice of
    the sweep covers every kind."""
    chosen = [r for r in rows if (not kinds or r.kind in kinds) and (not only or r.name in only)]
    by_kind = {k: [r for r in chosen if r.kind == k] for k in KINDS}
    interleaved: list[Row] = []
    while any(by_kind.values()):
        for queue in by_kind.values():
            if queue:
                interleaved.append(queue.pop(0))
    return interleaved[:limit] if limit else interleaved


# --------------------------------------------------------------------------------------------
# scoring one case


def classify(exit_code: int | None, mismatch: str | None, *, validated: bool = False) -> str:
    """symbolize's status from its exit code and, when it exited 0, the check against torch.
    ``validated``: the run had reference cases (``--ref``), so exit 1 (its model did not match
    them, nothing written) is a refusal too."""
    if exit_code == 0:
        return "wrong" if mismatch else "pass"
    return "refused" if exit_code == 2 or (validated and exit_code == 1) else "crash"


#: What a refusal advises that the sweep can follow, and the words that say it
#: (``passes/symbolize/wording.py``: FIX's "pass reference cases (--ref)", BOUND_HINT's bound).
ADVICE = {"ref": "reference cases (--ref)", "bound": "<=traced"}


def advised(text: str) -> list[str]:
    """The advice (:data:`ADVICE`) a refusal's text gives, in the order the sweep follows it."""
    return [kind for kind, words in ADVICE.items() if words in text]


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:400] if lines else ""


def within_bound(sizes: Sequence[dict[str, int]], traced: dict[str, int]) -> list[dict[str, int]]:
    """``sizes`` with every symbol but batch kept at most its traced size: a value over it is
    scaled under it by the same ratio (13 at a traced 8 -> 4, 3200 samples at 1600 -> 800),
    never under 2; duplicates dropped."""
    out: list[dict[str, int]] = []
    for size in sizes:
        s = {k: v if k == "batch" or v <= traced[k] else max(2, traced[k] * traced[k] // v) for k, v in size.items()}
        if s not in out:
            out.append(s)
    return out


def _over_bound(model: Any, arch: Any, traced: dict[str, int]) -> str:
    """How the bounded model fails one over its bound (every symbol but batch at traced + 1)."""
    over = {k: v if k == "batch" else v + 1 for k, v in traced.items()}
    (result,) = check_sizes(model, arch, [over])
    return f"over: {sizes_label(over)} " + ("ran and matched torch" if result.ok else result.message)


def symbolize_by_cli(
    arch: Any,
    static: Path,
    traced: dict[str, int],
    timeout: float,
    bound: bool = False,
    ref: Path | None = None,
) -> dict[str, Any]:
    """``onnxsurgery run --passes symbolize(...)`` on the static export, then checked vs torch
    (``bound``: every symbol but batch bounded at its traced size, scored within it; ``ref``:
    the run gets these reference cases, ``--ref``). A refusal lists the :func:`advised` steps
    its full text gives (``advice``)."""
    import onnx

    names = {i.name for i in onnx.load(str(static), load_external_data=False).graph.input}
    axes = [
        f"{inp}:{axis}={sym}" + ("<=traced" if bound and sym != "batch" else "")
        for inp, chosen in arch.dynamic_axes_for("all").items()
        if inp in names
        for axis, sym in chosen.items()
    ]
    out = static.with_name(static.stem + (".symbolize-ref.onnx" if ref else ".symbolize.onnx"))
    out.unlink(missing_ok=True)
    paths = (static, out) if ref is None else (static, out, ref)
    rel = [str(p.relative_to(REPO)) if p.is_relative_to(REPO) else str(p) for p in paths]
    cmd = [
        str(ONNXSURGERY),
        "run",
        rel[0],
        "-o",
        rel[1],
        "-q",
        "--provider",
        "cpu",
        "--passes",
        f"symbolize({', '.join(axes)})",
        *(["--ref", rel[2]] if ref is not None else []),
    ]
    stderr = ""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)
        code, stderr = proc.returncode, proc.stderr
        message = _last_line(stderr)
    except subprocess.TimeoutExpired:
        code, message = None, f"took longer than {timeout:g} s"
    mismatch = None
    if code == 0:
        model = onnx.load(str(out))
        asked = arch.sizes_for(traced, "all")
        sizes = check_sizes(model, arch, within_bound(asked, traced) if bound else asked)
        bad = [s for s in sizes if not s.ok]
        mismatch = f"{sizes_label(bad[0].sizes)}: {bad[0].message}" if bad else None
        message = mismatch or f"{len(sizes)} sizes ok ({', '.join(sizes_label(s.sizes) for s in sizes)})"
        if bound:
            message += "; " + _over_bound(model, arch, traced)
    result = {
        "status": classify(code, mismatch, validated=ref is not None),
        "exit": code,
        "message": message,
        "command": " ".join(cmd[1:]),
    }
    if result["status"] == "refused" and advised(stderr):
        result["advice"] = advised(stderr)
        if advised_least(stderr):  # the sizes the reference cases must reach
            result["reference at least"] = advised_least(stderr)
    said = re.search(r"the reference cases given [^;\[]*", stderr) if ref is not None else None
    if said:  # why the reference did not decide, past where the message is cut
        result["references"] = said.group(0).strip()
    return result


def _reference(
    arch: Any,
    static: Path,
    traced: dict[str, int],
    least: dict[str, int] | None = None,
    within: bool = False,
) -> tuple[Path | None, dict[str, int], str]:
    """(the folder of one torch reference case beside ``static``, its sizes, "") at the first
    of :func:`sweep_rows.reference_sizes` torch eager takes (``least``: the sizes the refusal
    asked the case to reach; ``within``: only sizes within the bound), else (None, {}, why
    not)."""
    why = ""
    for sizes in reference_sizes(arch, traced, least):
        if within and not _within(sizes, traced):
            continue
        folder = static.with_name(f"reference-{sizes_label(sizes)}")
        try:
            return write_reference(arch, static, sizes, folder), sizes, ""
        except Exception as exc:  # torch eager refuses the size (a grid it reshapes)
            why += f"; torch eager at {sizes_label(sizes)}: {_last_line(str(exc))}"
    return None, {}, why[2:402]


def follow_advice(
    arch: Any,
    static: Path,
    traced: dict[str, int],
    timeout: float,
    advice: Sequence[str],
    least: dict[str, int] | None = None,
) -> dict[str, dict[str, Any]]:
    """symbolize as a user who follows a refusal's ``advice`` runs it again: ``symbolize+ref``
    with one torch reference case (``--ref``) at the first of
    :func:`sweep_rows.reference_sizes` torch eager takes, never a checked size;
    ``symbolize+bound`` with every symbol but batch bounded at its traced size (and that
    reference too where it was advised as well and is within the bound), where the refusal, or
    the one after the reference, names a bound. In the other order too: where the bounded run's
    refusal advises reference cases and it had none, it runs again with one within the bound
    (:func:`_bound_then_reference`). Where the refusal names the sizes the reference must reach
    (``least``, ``height 128 or more``), the case is at those. Each is scored as plain
    symbolize is."""
    out: dict[str, dict[str, Any]] = {}
    ref = None
    if "ref" in advice:
        ref, sizes, why = _reference(arch, static, traced, least)
        if ref is None:  # torch eager takes none of the sizes: no reference to follow it with
            out["symbolize+ref"] = {"status": "no reference", "exit": None, "message": why}
        else:
            out["symbolize+ref"] = symbolize_by_cli(arch, static, traced, timeout, ref=ref)
            out["symbolize+ref"]["reference"] = sizes
            advice = [*advice, *out["symbolize+ref"].get("advice", ())]
    if "bound" in advice:  # with the reference where it is within the bound
        sizes = out.get("symbolize+ref", {}).get("reference", {})
        within = ref is not None and _within(sizes, traced)
        out["symbolize+bound"] = symbolize_by_cli(
            arch, static, traced, timeout, bound=True, ref=ref if within else None
        )
        if not within:
            out["symbolize+bound"] = _bound_then_reference(
                arch, static, traced, timeout, out["symbolize+bound"]
            )
    return out


def _within(sizes: dict[str, int], traced: dict[str, int]) -> bool:
    """Whether a reference at ``sizes`` is within the bound (every symbol but batch at most
    its traced size)."""
    return all(v <= traced[k] for k, v in sizes.items() if k != "batch")


def _bound_then_reference(
    arch: Any, static: Path, traced: dict[str, int], timeout: float, bounded: dict[str, Any]
) -> dict[str, Any]:
    """The bounded run ``bounded`` (made without reference cases) again with one, where its
    refusal advises them: at the first of :func:`sweep_rows.reference_sizes` torch eager takes
    within the bound (at the sizes it names it must reach, where it names some); the run
    with it, the one before kept in its ``without reference``; else ``bounded``, why not said."""
    if bounded["status"] != "refused" or "ref" not in bounded.get("advice", ()):
        return bounded
    least = bounded.get("reference at least")
    ref, sizes, why = _reference(arch, static, traced, least, within=True)
    if ref is None:
        return {**bounded, "reference": why or "no reference case within the bound"}
    again = symbolize_by_cli(arch, static, traced, timeout, bound=True, ref=ref)
    first = {k: bounded[k] for k in ("status", "message") if k in bounded}
    return {**again, "reference": sizes, "without reference": first}


def score_case(
    arch: Any,
    exporter: str,
    batch: int,
    timeout: float,
    bound: bool = False,
    advice: bool = True,
) -> dict[str, Any]:
    """One (row, exporter, traced batch): the static export, then the three methods, and
    (``advice``) symbolize again as a refusal advises (:func:`follow_advice`)."""
    traced = next(t for t in arch.traced if t["batch"] == batch)
    case: dict[str, Any] = {
        "exporter": exporter,
        "batch": batch,
        "static": static_status(arch, exporter, traced, False),
    }
    if case["static"]["status"] != "ok":
        return case
    from corpus.harness import export_model

    static = export_model(arch, exporter, traced).path
    case["symbolize"] = symbolize_by_cli(arch, static, traced, timeout, bound)
    if bound:  # the other methods are scored without a bound: the plain sweep has them
        return case
    if advice and case["symbolize"].get("advice"):
        plain = case["symbolize"]
        case.update(
            follow_advice(
                arch, static, traced, timeout, plain["advice"], plain.get("reference at least")
            )
        )
    for method in ("re-export", "update_model_dims"):
        result = evaluate(arch, exporter, batch, method, axes="all")
        case[method] = {"status": result.status, "message": result.reason}
    return case


# --------------------------------------------------------------------------------------------
# one row in a worker


def _row_architecture(row: Row) -> Any:
    """The row's Architecture, named ``<row>-<hash>`` so its caches are keyed by what built it."""
    return replace(architecture(row, f"{row.name}-{row_key(row)}"), cache=sweep_root())


def _worker(
    row: Row,
    exporters: Sequence[str],
    batches: Sequence[int],
    sink: str,
    timeout: float,
    memory_gb: float,
    bound: bool = False,
    advice: bool = True,
) -> None:
    limit = int(memory_gb * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    with contextlib.suppress(OSError, AttributeError):  # Linux: end with the sweep that forked it
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    import torch

    torch.set_num_threads(1)

    def write(entry: dict[str, Any]) -> None:
        with open(sink, "a") as f:
            f.write(json.dumps(entry) + "\n")

    try:
        arch = _row_architecture(row)
    except BuildError as exc:
        write({"build": str(exc)})
        return
    except Exception as exc:
        write(
            {"build": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]}
        )
        return
    stale = current_cache(arch)  # exports and references of one build, never two
    write({"build": "ok", "signature": {i.name: list(i.shape) for i in arch.inputs}, "stale": stale})
    for exporter in exporters:
        for batch in batches:
            try:
                write({"case": score_case(arch, exporter, batch, timeout, bound, advice)})
            except Exception as exc:  # the sweep's own failure on one case: say so, go on
                write(
                    {
                        "case": {
                            "exporter": exporter,
                            "batch": batch,
                            "error": traceback.format_exc(limit=-3)[-600:],
                            "static": {"status": "sweep error", "reason": str(exc)[:300]},
                        }
                    }
                )


def score_row(
    row: Row,
    exporters: Sequence[str],
    batches: Sequence[int],
    *,
    timeout: float,
    memory_gb: float,
    bound: bool = False,
    advice: bool = True,
    row_budget: float | None = None,
) -> dict[str, Any]:
    """Run one row in a forked worker; what it finished before a time limit (``row_budget``
    seconds, or enough for every symbolize run to take ``timeout``) or a crash counts (a case
    may run symbolize three times: plainly, and after each advice)."""
    commit = _commit()  # before the worker runs: the code the row is scored with
    folder = sweep_root() / "results"
    folder.mkdir(parents=True, exist_ok=True)
    # this sweep's own file: build/sweep/ is shared (a link to one cache for several checkouts),
    # and two sweeps scoring one row must not read each other's cases
    sink = folder / f"{row.name}.{os.getpid()}.jsonl"
    sink.unlink(missing_ok=True)
    start = time.perf_counter()
    budget = row_budget or 60 + timeout * (5 if advice else 3) * len(exporters) * len(batches)
    proc = multiprocessing.get_context("fork").Process(
        target=_worker, args=(row, exporters, batches, str(sink), timeout, memory_gb, bound, advice)
    )
    proc.start()
    proc.join(budget)
    late = proc.is_alive()
    if late:
        proc.kill()
        proc.join()
    entries = [json.loads(ln) for ln in sink.read_text().splitlines()] if sink.exists() else []
    sink.unlink(missing_ok=True)
    result: dict[str, Any] = {
        **asdict(row),
        "name": row.name,
        "seconds": round(time.perf_counter() - start, 1),
        "versions": _versions(),
        "commit": commit,
    }
    result["asked"] = [[e, b] for e in exporters for b in batches]
    result["build"] = next((e["build"] for e in entries if "build" in e), None)
    result["signature"] = next((e["signature"] for e in entries if "signature" in e), None)
    if any(e.get("stale") for e in entries):  # the cache held another build's exports: redone
        result["stale cache"] = True
    result["cases"] = [e["case"] for e in entries if "case" in e]
    if result["build"] is None or (
        result["build"] == "ok" and len(result["cases"]) < len(exporters) * len(batches)
    ):
        why = (
            f"worker took longer than {budget:g} s"
            if late or not proc.exitcode
            else f"worker ended (exit {proc.exitcode})"
        )
        result["worker"] = f"{why} after {len(result['cases'])} case(s)"
        result["build"] = result["build"] or why
    return result


# --------------------------------------------------------------------------------------------
# the table

#: symbolize run again as a refusal advised (:func:`follow_advice`), in the order followed
ADVICE_METHODS = ("symbolize+ref", "symbolize+bound")
COLUMNS = (
    "rows",
    "not built",
    "static failed",
    "unfinished",
    "scored",
    *SYMBOLIZE_STATUSES,
    "+ref",
    "+bound",
    "advice wrong",
    "re-export",
    "update_model_dims",
)


def after_advice(case: dict[str, Any]) -> dict[str, bool]:
    """Whether symbolize passes ``case`` plainly (``pass``), plainly or after the reference
    (``+ref``), or plainly or after any advice (``+bound``: cumulative); ``advice wrong``: a
    run after the advice gave a model that differs from torch, or crashed."""
    plain = case["symbolize"]["status"] == "pass"
    ref, bound = (case.get(m, {}).get("status") for m in ADVICE_METHODS)
    return {
        "pass": plain,
        "+ref": plain or ref == "pass",
        "+bound": plain or ref == "pass" or bound == "pass",
        "advice wrong": bool({ref, bound} & {"wrong", "crash"}),
    }


def _cell_counts(rows: Sequence[dict[str, Any]], exporter: str, batch: int) -> dict[str, int]:
    counts = dict.fromkeys(COLUMNS, 0)
    for row in rows:
        if [exporter, batch] not in row["asked"]:
            continue
        counts["rows"] += 1
        case = next(
            (c for c in row["cases"] if c["exporter"] == exporter and c["batch"] == batch), None
        )
        if row["build"] != "ok":
            counts["not built"] += 1
        elif case is None:
            counts["unfinished"] += 1  # the worker ended before it: the row says why
        elif case["static"]["status"] != "ok":
            counts["static failed"] += 1
        else:
            counts["scored"] += 1
            counts[case["symbolize"]["status"]] += 1
            for column, passed in after_advice(case).items():
                counts[column] += passed and column != "pass"
            for method in ("re-export", "update_model_dims"):  # not scored under --bound
                counts[method] += case.get(method, {}).get("status") == "pass"
    return counts


def table(data: dict[str, Any]) -> str:
    """The Markdown table of ``bench/sweep.json``: kind x exporter x traced batch."""
    rows = data["rows"]
    meta = data["meta"]
    lines = [
        f"Sweep of {meta['rows_scored']} of the {meta['rows_in_registries']} rows the registries give"
        f"{' (partial)' if meta['partial'] else ''}; {_made_with(meta)}. symbolize: pass / refused (exit 2) / wrong (exit 0, differs from "
        "torch) / crash; +ref, +bound: symbolize passes plainly or after following the refusal's advice "
        "(cumulative: +ref with one stored torch reference case, --ref, at a size never checked; +bound "
        "also with seq<=traced, checked within the bound); advice wrong: a run after the advice wrong or "
        "crashed; re-export and update_model_dims: passes. Each checked against torch eager at the "
        "traced size and three others.",
        "",
        "| kind | exporter | traced | " + " | ".join(COLUMNS) + " |",
        "|" + " --- |" * (3 + len(COLUMNS)),
    ]
    for kind in KINDS:
        mine = [r for r in rows if r["kind"] == kind]
        if not mine:
            continue
        for exporter in EXPORTERS:
            for batch in BATCHES:
                counts = _cell_counts(mine, exporter, batch)
                if not counts["rows"]:  # not asked for in any run
                    continue
                lines.append(
                    f"| {kind} | {exporter} | b{batch} | "
                    + " | ".join(str(counts[c]) for c in COLUMNS)
                    + " |"
                )
    lines += ["", *by_kind(rows)]
    if meta.get("sources_missing"):
        lines += [
            "",
            "Not swept: "
            + "; ".join(f"{k} ({v})" for k, v in meta["sources_missing"].items())
            + ".",
        ]
    return "\n".join(lines) + "\n"


def _made_with(meta: dict[str, Any]) -> str:
    """The versions the table's rows were scored with, per source where they differ."""
    versions = meta.get("versions")
    if not versions:  # results written before rows recorded their versions
        return f"torch {meta['torch']}, transformers {meta['transformers']}, onnxruntime {meta['onnxruntime']}"
    named = ("torch", "torchvision", "transformers", "onnxruntime-gpu")
    said = {
        source: ", ".join(f"{k.removesuffix('-gpu')} {v[k]}" for k in named if k in v)
        for source, v in sorted(versions.items())
    }
    if len(set(said.values())) == 1:
        return next(iter(said.values()))
    return "; ".join(f"{source} rows: {text}" for source, text in said.items())


def by_kind(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The totals by kind over both exporters and traced batches: cases scored, symbolize's
    passes, its passes plainly or after the advice, re-export's passes."""
    lines = [
        "| kind | scored | symbolize | symbolize after advice | re-export |",
        "| --- | --- | --- | --- | --- |",
    ]
    total = [0, 0, 0, 0]
    for kind in KINDS:
        counts = [0, 0, 0, 0]
        for row in rows:
            for case in row["cases"] if row["kind"] == kind and row["build"] == "ok" else ():
                if case["static"]["status"] == "ok" and "symbolize" in case:
                    done = after_advice(case)
                    again = case.get("re-export", {}).get("status") == "pass"
                    these = (1, done["pass"], done["+bound"], again)
                    counts = [a + b for a, b in zip(counts, these, strict=True)]
        if counts[0]:
            lines.append(f"| {kind} | " + " | ".join(map(str, counts)) + " |")
            total = [a + b for a, b in zip(total, counts, strict=True)]
    return [*lines, "| all | " + " | ".join(map(str, total)) + " |"]


BEGIN, END = "<!-- sweep table: bench/sweep.py --readme -->", "<!-- end of sweep table -->"


def update_readme(text: str, readme: Path = README) -> None:
    """Replace the README's sweep block with ``text``."""
    content = readme.read_text()
    head, sep, rest = content.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not (sep and sep2):
        raise SystemExit(f"{readme}: no '{BEGIN}' ... '{END}' block to fill")
    readme.write_text(f"{head}{BEGIN}\n{text}{END}{tail}")


def problems(data: dict[str, Any]) -> list[str]:
    """One line per symbolize case that is not a pass: row, exporter, batch, status, message."""
    out = []
    for row in data["rows"]:
        for case in row["cases"]:
            for method in ("symbolize", *ADVICE_METHODS):
                sym = case.get(method)
                if sym and sym["status"] != "pass":
                    what = "" if method == "symbolize" else f" {method}"
                    out.append(
                        f"{row['name']} {case['exporter']} b{case['batch']}{what}: {sym['status']} (exit {sym['exit']}): {sym['message']}"
                    )
    return out


# --------------------------------------------------------------------------------------------
# the command


def _commit() -> str:
    """The code a row was scored with (rows of one results file may come from several runs):
    the checkout's commit when the row starts, read for each row, since a sweep's checkout may
    move during a run of hours (one commit a run mislabelled 26 torchvision rows)."""
    return subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()


@functools.cache
def _versions() -> dict[str, str]:
    """The versions a row is built and exported with (a source may need its own environment:
    torchvision installs here only beside another torch, see ``make sweep-torchvision``)."""
    import importlib.metadata as md

    found = {}
    for package in ("torch", "torchvision", "transformers", "onnx", "onnxruntime-gpu"):
        with contextlib.suppress(md.PackageNotFoundError):
            found[package] = md.version(package)
    return found


def _meta(
    all_rows: Sequence[Row],
    missing: dict[str, str],
    results: Sequence[dict[str, Any]],
    previous: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What the merged results were made with: each source's registry size (a source this
    environment cannot import keeps the count an earlier run recorded) and, per source, the
    versions its rows were scored with."""
    commit = _commit()
    counts = dict((previous or {}).get("registries", {}))
    for source in {r.source for r in all_rows}:
        counts[source] = sum(r.source == source for r in all_rows)
    versions: dict[str, dict[str, str]] = {}
    for row in results:
        if row.get("versions"):  # the newest row of a source names its versions
            versions[row["source"]] = row["versions"]
    return {
        "versions": versions, "commit": commit,
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
        "registries": counts, "rows_in_registries": sum(counts.values()),
        "rows_scored": len(results), "partial": len(results) < sum(counts.values()),
        "sources_missing": {k: v for k, v in missing.items() if k not in counts},
    }  # fmt: skip


def _previous(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.exists() else None


def _merge(
    previous: dict[str, Any] | None,
    results: list[dict[str, Any]],
    known: set[str],
    missing: Iterable[str] = (),
) -> list[dict[str, Any]]:
    """This run's rows, plus the earlier ones it did not redo that are still in the registries
    or come from a source this environment does not import (``missing``: their rows stand)."""
    if previous is None:
        return results
    mine, elsewhere = {r["name"] for r in results}, set(missing)
    old = [
        r
        for r in previous["rows"]
        if r["name"] not in mine and (r["name"] in known or r.get("source") in elsewhere)
    ]
    return sorted([*old, *results], key=lambda r: (r.get("source", ""), r["name"]))


def _split(values: Sequence[str] | None) -> list[str] | None:
    return [v.strip() for item in values for v in item.split(",") if v.strip()] if values else None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--limit", type=int, help="at most this many rows, the kinds in turn")
    parser.add_argument(
        "--kinds", action="append", help=f"kinds, comma-separated: {', '.join(KINDS)}"
    )
    parser.add_argument(
        "--sources",
        action="append",
        help="registries, comma-separated: transformers, torchvision (default every one that imports)",
    )
    parser.add_argument(
        "--only",
        action="append",
        help="rows by name (bert.base, gpt2.causal-lm-kv), comma-separated",
    )
    parser.add_argument(
        "--exporter", action="append", choices=EXPORTERS, help="exporter(s) (default both)"
    )
    parser.add_argument(
        "--batch",
        action="append",
        type=int,
        choices=BATCHES,
        help="traced batch(es) (default 2 and 1)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=240.0,
        help="seconds for one symbolize run (a row gets 3x that per case)",
    )
    parser.add_argument(
        "--row-budget",
        type=float,
        help="seconds for a whole row (build, exports, every case); a row past it is listed "
        "unfinished with the cases it scored (default: enough for every run to take --timeout)",
    )
    parser.add_argument(
        "--memory-gb", type=float, default=8.0, help="address-space cap of a worker"
    )
    parser.add_argument(
        "--json",
        type=Path,
        default=RESULTS,
        help=f"results (default {RESULTS.relative_to(REPO)}; merged)",
    )
    parser.add_argument(
        "--readme", action="store_true", help="only rewrite the README table from --json"
    )
    parser.add_argument("--list", action="store_true", help="print the rows per kind and exit")
    parser.add_argument(
        "--bound",
        action="store_true",
        help="symbolize with every symbol but batch bounded at its traced size (seq<=traced), "
        "scored within the bound and once over it",
    )
    parser.add_argument(
        "--no-advice",
        dest="advice",
        action="store_false",
        help="score plain symbolize only: do not run it again as a refusal advises "
        "(symbolize+ref with a torch reference case, symbolize+bound)",
    )
    parser.add_argument(
        "--prune",
        action="store_true",
        help="delete each row's cached exports and references once it is scored (disk: a "
        "full-size torchvision row takes about a GB; a re-run exports again)",
    )
    return parser


def score_rows(
    rows: Sequence[Row],
    exporters: Sequence[str],
    batches: Sequence[int],
    *,
    timeout: float,
    memory_gb: float,
    save: Callable[[list[dict[str, Any]]], Any] | None = None,
    bound: bool = False,
    advice: bool = True,
    row_budget: float | None = None,
    prune: bool = False,
) -> list[dict[str, Any]]:
    """Every row in its worker, one after another, with a line per row on stderr; ``save`` gets
    the results so far after each row (an interrupted sweep keeps what it scored). ``prune``:
    delete each row's cached exports and references once it is scored (full-size torchvision
    models take about a GB a row; a re-run then exports again)."""
    results: list[dict[str, Any]] = []
    for i, row in enumerate(rows, 1):
        result = score_row(
            row,
            exporters,
            batches,
            timeout=timeout,
            memory_gb=memory_gb,
            bound=bound,
            advice=advice,
            row_budget=row_budget,
        )
        statuses = [
            "".join(
                [c["symbolize"]["status"]]
                + [f"{m[9:]}:{c[m]['status']}" for m in ADVICE_METHODS if m in c]
            )
            if "symbolize" in c
            else c["static"]["status"]
            for c in result["cases"]
        ]
        what = ", ".join(statuses) if result["build"] == "ok" else f"not built: {result['build']}"
        print(
            f"[{i}/{len(rows)}] {row.name} ({row.kind}) {result['seconds']:.0f}s: {what[:160]}",
            file=sys.stderr,
            flush=True,
        )
        results.append(result)
        if save:
            save(results)
        if prune:
            shutil.rmtree(sweep_root() / f"{row.name}-{row_key(row)}", ignore_errors=True)
    return results


def _chosen(args: argparse.Namespace, all_rows: list[Row], missing: dict[str, str]) -> list[Row]:
    """The rows the command line asks for; a kind, row or source there is none of is an error."""
    kinds, only, sources = _split(args.kinds), _split(args.only), _split(args.sources)
    unknown = sorted(set(kinds or ()) - set(KINDS))
    if unknown:
        _parser().error(f"unknown kind(s) {unknown}; known: {', '.join(KINDS)}")
    strangers = sorted(set(only or ()) - {r.name for r in all_rows})
    if strangers:
        _parser().error(f"no row named {strangers}; see --list, names are like bert.base")
    absent = sorted(set(sources or ()) - {r.source for r in all_rows})
    if absent:
        _parser().error(
            f"no rows from source(s) {absent} here"
            + "".join(f"; {k}: {v}" for k, v in missing.items() if k in absent)
        )
    wanted = [r for r in all_rows if not sources or r.source in sources]
    return select(wanted, kinds=kinds, only=only, limit=args.limit)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.readme:
        update_readme(table(json.loads(args.json.read_text())))
        print(f"README table written from {args.json}")
        return 0
    all_rows, missing = enumerate_rows()
    rows = _chosen(args, all_rows, missing)
    if args.list:
        wanted = {r.source for r in rows} if args.sources else {r.source for r in all_rows}
        for kind in KINDS:
            print(f"{kind:16} {sum(r.kind == kind and r.source in wanted for r in all_rows)}")
        if args.only or args.kinds or args.limit:
            print("\n".join(f"  {r.name} ({r.kind})" for r in rows))
        print(
            f"{'all':16} {sum(r.source in wanted for r in all_rows)}"
            + "".join(f"; {k} not importable: {v}" for k, v in missing.items())
        )
        return 0
    start = time.perf_counter()

    def save(results: list[dict[str, Any]]) -> dict[str, Any]:
        previous = _previous(args.json)
        merged = _merge(previous, results, {r.name for r in all_rows}, missing)
        meta = _meta(all_rows, missing, merged, previous and previous["meta"])
        data = {
            "meta": {**meta, "seconds_this_run": round(time.perf_counter() - start)},
            "rows": merged,
        }
        tmp = args.json.with_name(args.json.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        tmp.replace(args.json)
        return data

    exporters, batches = args.exporter or EXPORTERS, args.batch or BATCHES
    kwargs = {
        "timeout": args.timeout,
        "memory_gb": args.memory_gb,
        "save": save,
        "bound": args.bound,
        "advice": args.advice and not args.bound,
        "row_budget": args.row_budget,
        "prune": args.prune,
    }
    results = score_rows(rows, exporters, batches, **kwargs)
    data = save(results)
    print(table(data))
    for line in problems(data):
        print(line)
    print(
        f"{len(results)} rows in {time.perf_counter() - start:.0f} s; written: {args.json}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
