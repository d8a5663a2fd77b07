"""symbolize's declared rules, one small test per pattern and per blocker kind: which rule
decides a constant read, what its ``check()`` says where it does not apply, and what it
produces (a change, or a blocker worded by ``wording``)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from test_symbolize import parse

from onnxsurgery.passes.symbolize import reads as const_reads
from onnxsurgery.passes.symbolize import rules, wording
from onnxsurgery.passes.symbolize.blockers import Blocker
from onnxsurgery.passes.symbolize.plan import normalize_axes, plan_context, plan_symbolize
from onnxsurgery.shapes.propagation import propagate

OPSET = '<ir_version: 8, opset_import: ["" : 17]>'


def reads(model: onnx.ModelProto, axes: dict) -> dict[str, const_reads.ConstRead]:
    """Each constant read of ``model`` (by tensor name), in the context the plan decides it in."""
    analysis = propagate(model, normalize_axes(axes))
    context = plan_context(analysis, None)
    return {use.tensor: const_reads.ConstRead(context, use) for use in analysis.uses}


def deciding(read: const_reads.ConstRead) -> rules.Rule:
    """The first rule of :data:`rules.CONST_RULES` that applies."""
    return next(rule for rule in rules.CONST_RULES if rule.check(read) is None)


def add(shape: str, table: np.ndarray) -> onnx.ModelProto:
    """``y = x + pos`` with ``pos`` the constant ``table``."""
    return parse(
        f"{OPSET} net (float{shape} x) => (float{shape} y) {{ y = Add (x, pos) }}",
        pos=table.astype(np.float32),
    )


SEQ = {"x": {0: "batch", 1: "seq"}}
RNG = np.random.default_rng(0)


def line(seq: int, start: float = 1.0) -> np.ndarray:
    """``start + i * step`` along axis 1 of a [1, seq, 3] table."""
    return start + np.arange(seq)[None, :, None] * np.array([0.5, -1.0, 2.0])


def cached_count() -> onnx.ModelProto:
    """Positions ``past .. past + seq - 1`` added to the new rows of a cache (traced past 5)."""
    return parse(
        f"""{OPSET} net (float[1, 5, 4] past, float[1, 3, 4] new) => (float[1, 8, 4] present) {{
            s = Add (new, pos)
            present = Concat <axis = 1> (past, s)
        }}""",
        pos=(5 + np.arange(3)).astype(np.float32).reshape(1, 3, 1),
    )


def band(seq: int) -> onnx.ModelProto:
    mask = np.triu(np.full((seq, seq), -1e9, np.float32), 1)
    return parse(
        f"{OPSET} net (float[2, {seq}, {seq}] x) => (float[2, {seq}, {seq}] y) {{ y = Add (x, mask) }}",
        mask=mask,
    )


def batch_grid() -> onnx.ModelProto:
    """``mask[batch_idx, pos]`` gathered with an index grid folded at batch 1."""
    grid = np.stack([np.zeros(4, np.int64), np.arange(4)], axis=-1)[None]
    return parse(
        f"""{OPSET} net (float[1, 4] x, int64[1, 4] mask) => (float[1, 4] y) {{
            g = GatherND (mask, grid)
            f = Cast <to = 1> (g)
            y = Mul (x, f)
        }}""",
        grid=grid,
    )


def head_tile() -> onnx.ModelProto:
    """A per-block bias [1, n*3] repeating one block of 3, traced at n = 2."""
    return parse(
        f"""{OPSET} net (float[2, 2, 3] x) => (float[2, 6] y) <int64[2] shape = {{2, 6}}> {{
            r = Reshape (x, shape)
            y = Add (r, bias)
        }}""",
        bias=np.tile(np.array([[0.5, -2.0, 1.0]], np.float32), (1, 2)),
    )


toeplitz = RNG.standard_normal(7)
RELATIVE = np.array([[toeplitz[j - i + 3] for j in range(4)] for i in range(4)])[None]

# (case, model, axes, tensor, the rule that decides it, what it produces: a change's new value
# or a blocker's reason, in part)
CASES = [
    ("size", head_tile(), {"x": {0: "batch", 1: "n"}}, "shape", "size", "[batch, n*3]"),
    ("static", add("[2, 3, 4]", np.ones((3, 4))), {"x": {0: "batch"}}, "pos", "static", None),
    ("broadcast", add("[2, 3]", np.tile([[1.0, 2.0, 3.0]], (2, 1))), {"x": {0: "batch"}}, "pos",
     "broadcast", "float32[batch, 3] (Expand)"),
    ("range", add("[2, 3, 3]", line(3)), SEQ, "pos", "range", "float32[1, seq, 3] (Range on axis 1)"),
    ("rotary", add("[2, 6, 3]", np.cos(np.arange(6)[None, :, None] * np.array([1.0, 0.1, 0.01]))),
     SEQ, "pos", "rotary", "(Cos(Range * freq) on axis 1)"),
    ("band", band(4), {"x": {1: "seq", 2: "seq"}}, "mask", "band",
     "float32[seq, seq] (band mask (j - i <= 0) on axes 0, 1)"),
    ("tile", head_tile(), {"x": {0: "batch", 1: "n"}}, "bias", "tile",
     "float32[1, n*3] (Tile of a 3-block on axis 1)"),
    ("batch indices", batch_grid(), {"x": {0: "batch"}, "mask": {0: "batch"}}, "grid",
     "batch-indices", "int64[batch, 4, 2] (Range on axis 0)"),
    ("cache offset", cached_count(), {"past": {1: "past"}, "new": {1: "seq"}}, "pos",
     "cache-offset", "float32[1, seq, 1] (Range on axis 1 from past)"),
    ("one point", add("[2, 1, 3]", RNG.standard_normal((1, 1, 3))), SEQ, "pos", "one-point",
     "has size 1 on axis 1, where it meets seq traced at 1"),
    ("relative bias", add("[2, 4, 4]", RELATIVE), {"x": {1: "seq", 2: "seq"}}, "pos",
     "relative-position-bias", "a relative-position bias (T5, WavLM) the exporter folded for "
     "distances -3..3"),
    ("table cut", add("[2, 4, 3]", RNG.standard_normal((1, 4, 3))), SEQ, "pos", "table-cut",
     "values follow no pattern symbolize can extend"),
    ("thin evidence", add("[2, 2, 3]", line(2)), SEQ, "pos", "unpinned",
     "fits Range on axis 1, but its traced values do not pin that down: axis 1 was traced at "
     "size 2"),
    ("moving start", add("[2, 3, 3]", 3 + np.arange(3)[None, :, None] * np.ones((1, 3, 3))),
     SEQ, "pos", "unpinned", "it counts from 3, the traced size of seq"),
]  # fmt: skip


@pytest.mark.parametrize(
    "model, axes, tensor, kind, text", [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_each_rule_decides_its_own_constant(model, axes, tensor, kind, text):
    read = reads(model, axes)[tensor]
    rule = deciding(read)
    assert rule.kind == kind
    made = rule.produce(read)
    if text is None:
        assert made is None
    elif isinstance(made, Blocker):
        assert made.kind == kind and text in made.why
    else:
        assert made is not None and made.new.endswith(text)


@pytest.mark.parametrize(
    "model, axes, tensor, kind, text", [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_every_other_rule_says_why_it_does_not_apply_first(model, axes, tensor, kind, text):
    """Rules before the deciding one each give a short reason (one line, no paragraph)."""
    read = reads(model, axes)[tensor]
    for rule in rules.CONST_RULES[: rules.CONST_RULES.index(deciding(read))]:
        reason = rule.check(read)
        assert isinstance(reason, str) and 0 < len(reason) < 60 and "\n" not in reason


def test_plan_keeps_the_rules_verdicts_in_order():
    """The plan is the rules' products, constant by constant, in the graph's order."""
    model, axes = head_tile(), {"x": {0: "batch", 1: "n"}}
    plan = plan_symbolize(model, axes)
    assert [c.input for c in plan.changes] == ["shape", "bias"]
    assert [c.rebuild.kind if c.rebuild else None for c in plan.changes] == [None, "tile"]


#: Phrases of the long blocker texts: each said in wording only.
PARAGRAPHS = [
    "(T5, WavLM)",
    "DINOv2 interpolates",
    "table gathered at the traced positions",
    "T5's encoder mask",
    "(transformers' tf_padding)",
    "a loop unrolled at trace time",
]


@pytest.mark.parametrize("module", ["rules", "plan", "graph_blockers", "baked"])
def test_long_wording_lives_in_wording_keyed_by_blocker_kind(module):
    """The paragraphs naming T5, WavLM and DINOv2 are wording's, not the rules' or the plan's."""
    import importlib
    import inspect

    source = inspect.getsource(importlib.import_module(f"onnxsurgery.passes.symbolize.{module}"))
    said = " ".join(wording.WHY.values())
    for phrase in PARAGRAPHS:
        assert phrase in said and phrase not in source, phrase


def test_learned_position_table_fix_comes_first():
    """A table added whole at a patch grid (DINOv2): the blocker's fix leads with --ref."""
    grid = RNG.standard_normal((1, 4, 8)).astype(np.float32)
    model = parse(
        f"""{OPSET} net (float[2, 3, 4, 4] img) => (float[2, 4, 8] y) <int64[3] shape = {{2, 8, 4}}> {{
            p = Conv <strides = [2, 2], kernel_shape = [2, 2]> (img, w)
            f = Reshape (p, shape)
            t = Transpose <perm = [0, 2, 1]> (f)
            y = Add (t, table)
        }}""",
        w=RNG.standard_normal((8, 3, 2, 2)).astype(np.float32),
        table=grid,
    )
    plan = plan_symbolize(model, {"img": {2: "h", 3: "w"}})
    (blocker,) = [b for b in plan.blockers if b.input == "table"]
    assert blocker.fix.startswith(wording.fix_lead("learned-position-table"))
