"""The differential campaign: random valid models through every pass and chains of them.

Model ``k`` of a campaign with seed ``s`` is ``random_model(s * 1_000_003 + k)``; each kept model
(ONNX Runtime runs it) goes through one single pass, in turn, and one random chain. A failure is
minimized (outputs dropped or moved up to a producer's input, dead nodes and value_info removed,
as long as the same verdict holds) and written under ``--out`` as ``<seed>-<pass>.onnx`` with
the feeds in ``.npz``, replayed by ``python -m differential --replay SEED --chain CHAIN``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from differential.graphs import Generated, random_model
from differential.oracle import Verdict, judge, reference_outputs

__all__ = ["SINGLES", "Run", "differential", "minimize", "pick_chain", "row_of", "model_seed"]

SINGLES = ["cleanup", "infer-shapes", "fold-constants", "compat", "concat-outputs"]
MERGES = [
    "concat-outputs(flatten=0, dtype=float64, lossy=true)",
    "concat-outputs(flatten=0, dtype=float64, lossy=true, keep=true)",
    "concat-outputs(flatten=1, dtype=float64, lossy=true, pad=0)",
    "concat-outputs(axis=0, flatten=0, dtype=float32, lossy=true)",
    "concat-outputs",
    "concat-outputs(pad=-1)",
]


@dataclass
class Run:
    seed: int
    chain: str
    row: str
    verdict: Verdict
    features: frozenset[str]


def model_seed(campaign_seed: int, k: int) -> int:
    return campaign_seed * 1_000_003 + k


def _spelled(rng: random.Random, name: str) -> str:
    return rng.choice(MERGES) if name == "concat-outputs" else name


def pick_chain(rng: random.Random, k: int) -> tuple[str, str]:
    """(row, chain): the k-th model's single pass, in turn; or a chain of 2-3 passes."""
    if k % 2 == 0:
        name = SINGLES[(k // 2) % len(SINGLES)]
        return name, _spelled(rng, name)
    names = rng.sample(SINGLES, rng.randint(2, 3))
    return "chain", ", ".join(_spelled(rng, n) for n in names)


def row_of(chain: str) -> str:
    parts = [p.split("(")[0].strip() for p in chain.split(", ") if p.strip() and p.strip()[0].isalpha()]
    return parts[0] if len(parts) == 1 else "chain"


def differential(campaign_seed: int, models: int, runs_per_model: int = 2) -> Iterator[Run | None]:
    """Yield each run; None for a generated model ORT does not run (not kept)."""
    for k in range(models):
        seed = model_seed(campaign_seed, k)
        gen = random_model(seed)
        expected = reference_outputs(gen.model, gen.feeds)
        if expected is None:
            yield None
            continue
        rng = random.Random(seed)
        for j in range(runs_per_model):
            row, chain = pick_chain(rng, 2 * k + j)
            verdict = judge(gen.model, gen.feeds, chain, expected)
            yield Run(seed, chain, row, verdict, frozenset(gen.features))


# -- minimizing a failure ---------------------------------------------------------------------


def _read_names(graph: onnx.GraphProto) -> set[str]:
    names: set[str] = set()
    for node in graph.node:
        names.update(node.input)
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                names |= _read_names(sub)
    return names


def _prune(model: onnx.ModelProto) -> onnx.ModelProto:
    """Drop nodes no output needs, and initializers then unread (a harness helper: the cleanup
    pass is one of the things under test)."""
    g = model.graph
    needed = {o.name for o in g.output}
    keep = []
    for node in reversed(g.node):
        if needed & set(node.output):
            keep.append(node)
            needed |= _read_names(_wrap(node))
    del g.node[:]
    g.node.extend(reversed(keep))
    unread = [t for t in g.initializer if t.name not in needed]
    for t in unread:
        g.initializer.remove(t)
    dropped = {t.name for t in unread}
    for vi in [i for i in g.input if i.name in dropped]:
        g.input.remove(vi)
    return model


def _wrap(node: onnx.NodeProto) -> onnx.GraphProto:
    g = onnx.GraphProto()
    g.node.append(node)
    return g


def _typed(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - then only what the graph declares
        inferred = model
    g = inferred.graph
    return {vi.name: vi for vi in list(g.value_info) + list(g.input) + list(g.output)}


def _smaller(model: onnx.ModelProto) -> Iterator[onnx.ModelProto]:
    g = model.graph
    for i in range(len(g.output)):
        if len(g.output) > 1:
            m = onnx.ModelProto()
            m.CopyFrom(model)
            del m.graph.output[i]
            yield _prune(m)
    typed = _typed(model)
    producers = {o: n for n in g.node for o in n.output}
    for i, out in enumerate(g.output):
        node = producers.get(out.name)
        for name in list(node.input) if node is not None else []:
            if name in typed and name not in {o.name for o in g.output} and typed[name].type.HasField("tensor_type"):
                m = onnx.ModelProto()
                m.CopyFrom(model)
                m.graph.output[i].CopyFrom(typed[name])
                yield _prune(m)
    for i in range(len(g.value_info)):
        m = onnx.ModelProto()
        m.CopyFrom(model)
        del m.graph.value_info[i]
        yield m


def minimize(gen: Generated, chain: str, verdict: Verdict, budget: int = 150) -> onnx.ModelProto:
    """The smallest model found (within ``budget`` tries) on which ``chain`` still gets a verdict
    of the same kind."""
    current = gen.model
    tries = 0
    progress = True
    while progress and tries < budget:
        progress = False
        for candidate in _smaller(current):
            tries += 1
            expected = reference_outputs(candidate, gen.feeds)
            if expected is not None and judge(candidate, gen.feeds, chain, expected).kind == verdict.kind:
                current, progress = candidate, True
                break
            if tries >= budget:
                break
    return current


def save_reproducer(out: Path, gen: Generated, chain: str, model: onnx.ModelProto) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    stem = f"{gen.seed}-{chain.split('(')[0].split(',')[0].strip()}"
    path = out / f"{stem}.onnx"
    onnx.save(model, path)
    np.savez(out / f"{stem}.npz", **gen.feeds)
    return path
