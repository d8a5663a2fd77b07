"""Hostile inputs through the CLI entry point, in-process: the fuzz campaign of ``make fuzz`` and
the bounded slice ``make test`` runs (tests/test_robustness.py).

Classes of input (each a generator of ``Case``: argv plus the files it needs):

    bytes      byte flips, truncations, insertions and splices of the fixture models (through
               run, and sometimes inspect or validate --against)
    structure  models rebuilt with the onnx helpers: bad dims, element types, op types, dropped
               or swapped inputs, cycles, duplicate outputs, wrong attributes, bogus external data
    chain      --passes strings and recipes: random text, deep nesting, huge literals, long names
    paths      -o/--report/--keep-failed onto the input, into missing folders, markup in names

Every input must end with exit 0, 1 or 2, at most 2 stderr lines and no traceback when it fails,
no file left at a failed output, no temp file, and the input's bytes and mtime unchanged.
Anything else (exit 3, an exception escaping, a traceback) counts as *uncaught*.

    python tests/fuzzing.py --inputs 10000 --seed 0
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import helper
from typer.testing import CliRunner

from onnxsurgery.cli import app

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = [
    ROOT / "fixtures" / name / "torchscript" / "model.onnx"
    for name in ("linear", "multi_output", "view_from_shape", "bool_mask", "batch1_conv1d", "pad_loop", "nonzero")
]
CHEAP_CHAINS = ["cleanup", "infer-shapes", "cleanup, infer-shapes", "concat-outputs"]
ALL_CHAINS = CHEAP_CHAINS + ["symbolize", "fold-constants", "symbolize, fold-constants", "validate"]
CLASSES = ("bytes", "structure", "chain", "paths")

_runner = CliRunner()


@dataclass
class Case:
    cls: str
    argv: list[str]
    model: Path
    outputs: list[Path] = field(default_factory=list)


@dataclass
class Outcome:
    cls: str
    code: int
    stderr: str
    problem: str | None  # None: handled as the rules say


class _Hang(Exception):
    pass


def _alarm(signum, frame):  # noqa: ARG001
    raise _Hang()


def run_case(case: Case, seconds: int = 60) -> Outcome:
    """Run one case through the CLI and judge it."""
    before = case.model.read_bytes() if case.model.is_file() else None
    mtime = case.model.stat().st_mtime_ns if case.model.is_file() else None
    leftovers_before = set(case.model.parent.iterdir())
    outputs_before = {p: _stamp(p) for p in case.outputs}
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(seconds)
    try:
        result = _runner.invoke(app, case.argv, env={"COLUMNS": "80"})
    except _Hang:
        return Outcome(case.cls, -1, "", f"no result in {seconds} s")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    code, stderr = result.exit_code, result.stderr
    problem = None
    if isinstance(result.exception, _Hang):
        problem = f"no result in {seconds} s"
    elif result.exception is not None and not isinstance(result.exception, SystemExit):
        problem = f"uncaught {type(result.exception).__name__}: {str(result.exception)[:200]}"
    elif code == 3:
        problem = f"internal error: {stderr.strip()[:300]}"
    elif code not in (0, 1, 2):
        problem = f"exit {code}: {stderr.strip()[:200]}"
    elif "Traceback" in stderr or "Traceback" in result.stdout:
        problem = "traceback printed"
    elif code == 2 and len(stderr.strip().splitlines()) > 2:
        problem = f"{len(stderr.strip().splitlines())} stderr lines"
    if problem is None and before is not None:
        if case.model.read_bytes() != before or case.model.stat().st_mtime_ns != mtime:
            problem = "the input model changed"
    if problem is None and code != 0:
        left = [p for p in case.outputs if _stamp(p) != outputs_before[p] and p.suffix == ".onnx"]
        if left:
            problem = f"a failed run left {left[0].name}"
    if problem is None:
        temps = [p for p in set(case.model.parent.iterdir()) - leftovers_before if ".onnxsurgery-tmp-" in p.name]
        if temps:
            problem = f"temp file left: {temps[0].name}"
    return Outcome(case.cls, code, stderr, problem)


def _stamp(path: Path) -> tuple[int, int] | None:
    """(mtime, size) of a file, None when there is none (or the name is too long to be one)."""
    try:
        st = path.stat()
    except (OSError, ValueError):
        return None
    return (st.st_mtime_ns, st.st_size)


# -- generators ------------------------------------------------------------------------------


def _fixture_bytes(rng: random.Random) -> bytes:
    return rng.choice([p for p in FIXTURES if p.exists()]).read_bytes()


def _mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        op = rng.random()
        if not buf:
            break
        at = rng.randrange(len(buf))
        if op < 0.5:
            buf[at] = rng.randrange(256)
        elif op < 0.65:
            del buf[at:]
        elif op < 0.8:
            buf[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        elif op < 0.9:
            del buf[at : at + rng.randint(1, 64)]
        else:
            j = rng.randrange(len(buf))
            buf[at:at] = buf[j : j + rng.randint(1, 64)]
    return bytes(buf)


def gen_bytes(rng: random.Random, work: Path) -> Case:
    model = work / "model.onnx"
    model.write_bytes(_mutate_bytes(rng, _fixture_bytes(rng)))
    out = work / "out.onnx"
    chain = rng.choice(ALL_CHAINS if rng.random() < 0.15 else CHEAP_CHAINS)
    return Case("bytes", _command(rng, model, out, chain), model, [out])


def _command(rng: random.Random, model: Path, out: Path, chain: str) -> list[str]:
    """Mostly ``run``; sometimes ``inspect`` (with symbolize's preview) or ``validate --against``."""
    roll = rng.random()
    if roll < 0.1:
        return ["inspect", str(model)]
    if roll < 0.15:
        return ["validate", str(model), "--against", str(FIXTURES[0]), "-q"]
    return ["run", str(model), "-o", str(out), "--passes", chain, "-q"]


def _rand_name(rng: random.Random) -> str:
    pool = ["", "x", "\u00ff", "[/b]", "a" * 300, "y", "onnx::Shape_1", "\x00", "../up"]
    return rng.choice(pool)


def _structure(rng: random.Random, model: onnx.ModelProto) -> None:
    g = model.graph
    kind = rng.randrange(16)
    values = list(g.input) + list(g.output) + list(g.value_info)
    if kind == 0 and values:
        vi = rng.choice(values)
        dims = vi.type.tensor_type.shape.dim
        if dims:
            d = rng.choice(dims)
            d.dim_value = rng.choice([-7, 0, 1, 2**40, 3, -1])
    elif kind == 1 and values:
        rng.choice(values).type.tensor_type.elem_type = rng.choice([0, 8, 9, 13, 65, 99, 7, 17])
    elif kind == 2 and g.node:
        rng.choice(g.node).op_type = rng.choice(["Nope", "Add", "Reshape", "Loop", "If", "Concat", ""])
    elif kind == 3 and g.node:
        node = rng.choice(g.node)
        if node.input:
            del node.input[rng.randrange(len(node.input))]
    elif kind == 4 and len(g.node) > 1:
        a, b = rng.sample(list(g.node), 2)
        if a.input and b.output:
            a.input[0] = b.output[0]
            if b.input and a.output:
                b.input[0] = a.output[0]  # a cycle
    elif kind == 5 and len(g.node) > 1:
        a, b = rng.sample(list(g.node), 2)
        if a.output and b.output:
            b.output[0] = a.output[0]
    elif kind == 6 and g.node:
        node = rng.choice(g.node)
        node.attribute.append(helper.make_attribute(rng.choice(["axis", "shape", "to", "perm"]), rng.choice([99, -99, [1, 2], "s", 1.5])))
    elif kind == 7 and g.initializer:
        del g.initializer[rng.randrange(len(g.initializer))]
    elif kind == 8 and g.initializer:
        t = rng.choice(g.initializer)
        t.data_location = onnx.TensorProto.EXTERNAL
        del t.external_data[:]
        t.external_data.add(key="location", value=rng.choice(["w.bin", "/etc/passwd", "../x", "a\x00b", ""]))
        t.external_data.add(key="offset", value=rng.choice(["0", "-5", "abc", "99999999999"]))
        t.external_data.add(key="length", value=rng.choice(["4", "-1", "1e3", ""]))
    elif kind == 9:
        model.opset_import[0].version = rng.choice([1, 7, 11, 13, 17, 21, 99])
    elif kind == 10:
        model.ir_version = rng.choice([1, 3, 4, 7, 99])
    elif kind == 11 and g.node:
        rng.choice(g.node).name = _rand_name(rng)
    elif kind == 12 and g.initializer:
        t = rng.choice(g.initializer)
        t.data_type = rng.choice([1, 7, 9, 65, 99, 16])
    elif kind == 13 and g.initializer:
        t = rng.choice(g.initializer)
        if t.dims:
            t.dims[rng.randrange(len(t.dims))] = rng.choice([0, -3, 7, 2**33])
    elif kind == 14 and g.node:
        node = rng.choice(g.node)
        node.domain = rng.choice(["com.nope", "ai.onnx.ml", "\u00ff"])
    else:
        g.name = _rand_name(rng)


def gen_structure(rng: random.Random, work: Path) -> Case:
    model = onnx.ModelProto()
    model.ParseFromString(_fixture_bytes(rng))
    for _ in range(rng.randint(1, 3)):
        _structure(rng, model)
    path = work / "model.onnx"
    path.write_bytes(model.SerializeToString())
    (work / "w.bin").write_bytes(b"\0" * 64)
    out = work / "out.onnx"
    chain = rng.choice(ALL_CHAINS if rng.random() < 0.3 else CHEAP_CHAINS)
    return Case("structure", _command(rng, path, out, chain), path, [out])


_CHAIN_ATOMS = [
    "cleanup", "symbolize", "fold-constants", "concat-outputs", "validate", "infer-shapes", "nope",
    "(", ")", "[", "]", ",", "=", "'", '"', "x:0=batch", "axis=1", "size_threshold=", "check=",
    "9" * 30, "1e999", "-1", "ref=" + "a" * 300, "[/b]", "\u00ff", " ", "skip=[", "inputs=true",
    "input_shapes=x:1x3", "isolate=", "true", "none", "a" * 1000,
]


def gen_chain(rng: random.Random, work: Path) -> Case:
    model = work / "model.onnx"
    shutil.copy(FIXTURES[0], model)
    out = work / "out.onnx"
    if rng.random() < 0.25:
        recipe = work / "r.toml"
        depth = rng.choice([1, 3, 40, 3000])
        body = rng.choice([
            "[[pass]]\nname = 'cleanup'\n",
            "[[pass]]\nname = 'fold-constants'\nsize_threshold = '1" + "0" * rng.randint(1, 400) + "MB'\n",
            "[[pass]]\nname = 'cleanup'\nx = " + "[" * depth + "]" * depth + "\n",
            "[[pass]]\n" + "[a]\n" * 3,
            "".join(rng.choice("[]=\"'\n\\abc{}. ") for _ in range(rng.randint(0, 80))),
            "[[pass]]\nname = 'validate'\nref = '" + "r" * 300 + "'\n",
        ])
        recipe.write_text(body, encoding="utf-8")
        return Case("chain", ["run", str(model), "-o", str(out), "--recipe", str(recipe), "-q"], model, [out])
    if rng.random() < 0.1:
        text = "cleanup(x=" + "[" * rng.choice([5, 40, 5000]) + ")"
    else:
        text = "".join(rng.choice(_CHAIN_ATOMS) for _ in range(rng.randint(1, 12)))
    return Case("chain", ["run", str(model), "-o", str(out), "--passes", text, "-q"], model, [out])


def gen_paths(rng: random.Random, work: Path) -> Case:
    model = work / "model.onnx"
    shutil.copy(FIXTURES[0], model)
    odd = work / "[bold]x"
    odd.mkdir(exist_ok=True)
    choices = [
        model, work / "out.onnx", work / "missing" / "o.onnx", work / ("x" * 300 + ".onnx"),
        odd / "o.onnx", work, work / "r.json", work / "." / "model.onnx", Path("/proc/version"),
    ]
    out = rng.choice(choices)
    source = model if rng.random() < 0.9 else odd / "none.onnx"
    argv = ["run", str(source), "-o", str(out), "--passes", rng.choice(CHEAP_CHAINS), "-q"]
    outputs = [out]
    if rng.random() < 0.6:
        report = rng.choice(choices)
        argv += ["--report", str(report)]
    if rng.random() < 0.3:
        kept = rng.choice(choices)
        argv += ["--keep-failed", str(kept)]
    if rng.random() < 0.2:
        argv += ["--limit", rng.choice(["run_seconds=0", "nope=1", "max_elements=abc", "max_elements=10", "propagate_seconds=1e999"])]
    return Case("paths", argv, source, outputs)


GENERATORS: dict[str, Callable[[random.Random, Path], Case]] = {
    "bytes": gen_bytes,
    "structure": gen_structure,
    "chain": gen_chain,
    "paths": gen_paths,
}


def campaign(inputs: int, seed: int, classes=CLASSES, weights=None) -> Iterator[tuple[Case, Outcome]]:
    """Yield (case, outcome) for ``inputs`` inputs spread over ``classes``."""
    rng = random.Random(seed)
    weights = weights or [1] * len(classes)
    for _ in range(inputs):
        cls = rng.choices(classes, weights)[0]
        with tempfile.TemporaryDirectory(prefix="onnxsurgery-fuzz-") as tmp:
            case = GENERATORS[cls](rng, Path(tmp))
            yield case, run_case(case)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inputs", type=int, default=int(os.environ.get("FUZZ_INPUTS", 12000)))
    parser.add_argument("--seed", type=int, default=int(os.environ.get("FUZZ_SEED", 0)))
    parser.add_argument("--minutes", type=float, default=float(os.environ.get("FUZZ_MINUTES", 20)))
    parser.add_argument("--weights", default=os.environ.get("FUZZ_WEIGHTS", "4,2,3,1"),
                        help="relative share of bytes,structure,chain,paths")
    args = parser.parse_args(argv)
    weights = [float(w) for w in args.weights.split(",")]
    tried, failed, exits, wrapped, wrapped_types = Counter(), Counter(), Counter(), Counter(), Counter()
    problems: dict[str, tuple[list[str], str]] = {}
    start = time.monotonic()
    for case, outcome in campaign(args.inputs, args.seed, CLASSES, weights):
        tried[case.cls] += 1
        exits[(case.cls, outcome.code)] += 1
        m = re.search(r"cannot handle this graph: (\w+):", outcome.stderr)
        if m:
            wrapped[case.cls] += 1
            wrapped_types[m.group(1)] += 1
        if outcome.problem:
            failed[case.cls] += 1
            key = outcome.problem.split(":")[0] + ":" + outcome.problem[:120]
            problems.setdefault(key, (case.argv, outcome.problem))
        if time.monotonic() - start > args.minutes * 60:
            print(f"stopped after {args.minutes:g} minutes")
            break
    np.set_printoptions(linewidth=120)
    print(f"fuzz: {sum(tried.values())} inputs in {time.monotonic() - start:.0f} s (seed {args.seed})")
    print(f"{'class':10} {'tried':>7} {'exit 0':>7} {'exit 1':>7} {'exit 2':>7} {'wrapped':>8} {'uncaught':>9}")
    for cls in CLASSES:
        print(
            f"{cls:10} {tried[cls]:7} {exits[(cls, 0)]:7} {exits[(cls, 1)]:7} {exits[(cls, 2)]:7} "
            f"{wrapped[cls]:8} {failed[cls]:9}"
        )
    print(f"{'total':10} {sum(tried.values()):7} {'':7} {'':7} {'':7} {sum(wrapped.values()):8} {sum(failed.values()):9}")
    print("wrapped: a pass raised something other than an OnnxSurgeryError and the pipeline's boundary")
    print("turned it into a PassError (exit 2, one line); by exception type:", dict(wrapped_types))
    for argv_, problem in list(problems.values())[:30]:
        shown_argv = " ".join(a if len(a) < 80 else a[:77] + "..." for a in argv_)
        print(f"  {problem}\n    onnxsurgery {shown_argv}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
