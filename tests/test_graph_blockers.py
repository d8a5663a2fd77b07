"""symbolize's graph-wide blocker kinds (:data:`graph_blockers.GRAPH_RULES`), one small test
each: a tiny graph where the rule applies (its blocker, worded by ``wording``), and one where
its ``check()`` gives the short reason it does not."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from test_symbolize import parse

from onnxsurgery.passes.symbolize import graph_blockers as gb
from onnxsurgery.passes.symbolize.plan import normalize_axes, plan_context, plan_symbolize
from onnxsurgery.shapes.propagation import propagate

OPSET = '<ir_version: 8, opset_import: ["" : 17]>'
RNG = np.random.default_rng(0)


def sites(model: onnx.ModelProto, axes: dict, rule: gb.GraphRule) -> list:
    """The places ``rule`` looks at in ``model``, solved as the plan solves them."""
    analysis = propagate(model, normalize_axes(axes))
    return list(rule.sites(analysis, plan_context(analysis, None).solution))


def deciding(rule: gb.GraphRule, site: object) -> type | None:
    """The kind of the first of the registry's rules over ``rule``'s sites that applies."""
    same = [r for r in gb.GRAPH_RULES if r.sites == rule.sites]
    return next((type(r) for r in same if r.check(site) is None), None)


def test_every_rule_is_declared_once_with_a_kind():
    kinds = [rule.kind for rule in gb.GRAPH_RULES]
    assert all(kinds) and len({type(r) for r in gb.GRAPH_RULES}) == len(kinds)
    assert [r.leads for r in gb.GRAPH_RULES] == sorted(
        (r.leads for r in gb.GRAPH_RULES), reverse=True
    )


def matmul(dynamic: bool) -> tuple[onnx.ModelProto, dict]:
    """``x @ w`` with ``w`` [4, 5]: a symbol on x's axis 1 must equal the weight's 4."""
    model = parse(
        f"{OPSET} net (float[2, 4] x) => (float[2, 5] y) {{ y = MatMul (x, w) }}",
        w=RNG.standard_normal((4, 5)).astype(np.float32),
    )
    return model, {"x": {0: "batch", 1: "feat"} if dynamic else {0: "batch"}}


def test_size_baked_into_weight():
    rule = gb.SizeBakedIntoWeight()
    (site,) = sites(*matmul(True), rule)
    assert rule.check(site) is None and deciding(rule, site) is type(rule)
    blocker = rule.produce(site)
    assert blocker.kind == "size-baked-into-weight" and blocker.symbols == ("feat",)
    assert "the model fixes feat at 4" in blocker.fix and "leave x:1 out" in blocker.fix
    assert "holds only at the traced size" in blocker.why
    assert sites(*matmul(False), rule) == []  # batch alone: nothing conflicts


def twins(one_name: bool) -> tuple[onnx.ModelProto, dict]:
    """``a + b``, both [2, 4]: axis 1 named ``seq`` on a and ``tgt`` on b (or ``seq`` on both)."""
    model = parse(
        f"{OPSET} net (float[2, 4] a, float[2, 4] b) => (float[2, 4] y) {{ y = Add (a, b) }}"
    )
    other = "seq" if one_name else "tgt"
    return model, {"a": {0: "batch", 1: "seq"}, "b": {0: "batch", 1: other}}


def test_traced_size_constraint():
    rule = gb.TracedSizeConstraint()
    (site,) = sites(*twins(False), rule)
    assert rule.check(site) is None and deciding(rule, site) is type(rule)
    blocker = rule.produce(site)
    assert blocker.kind == "traced-size-constraint" and blocker.op == "Add"
    assert "needs seq == tgt, which holds only at the traced size" in blocker.why
    assert "(both 4 when traced: the exporter may have shared" in blocker.why
    assert "re-export with dynamic axes for seq, tgt" in blocker.fix
    assert sites(*twins(True), rule) == []  # one name for both: no conflict
    # a conflict with a weight's size is the other kind's
    (weight,) = sites(*matmul(True), rule)
    assert rule.check(weight) == "the model fixes feat at 4"
    assert gb.SizeBakedIntoWeight().check(site) == "no side is one symbol against a constant"


def gathers(indices: list[int]) -> onnx.ModelProto:
    """``x[:, i]`` for each of ``indices``, summed: a loop over axis 1 Python ran at trace time."""
    body = [f"g{i} = Gather <axis = 1> (x, i{i})" for i in indices]
    body += [f"s{k} = Add ({'s' + str(k - 1) if k > 1 else 'g' + str(indices[0])}, g{i})"
             for k, i in enumerate(indices[1:], start=1)]  # fmt: skip
    last = f"s{len(indices) - 1}"
    text = f"{OPSET} net (float[2, 3, 4] x) => (float[2, 4] y) {{ {' '.join(body)} y = Identity ({last}) }}"
    return parse(text, **{f"i{i}": np.array(i, np.int64) for i in indices})


def test_unrolled_slices():
    rule = gb.UnrolledSlices()
    seq = {"x": {0: "batch", 1: "seq"}}
    (site,) = sites(gathers([0, 1, 2]), seq, rule)
    assert rule.check(site) is None
    blocker = rule.produce(site)
    assert (blocker.kind, blocker.op, blocker.input, blocker.traced) == (
        "unrolled-loop", "Gather", "x", "seq = 3",
    )  # fmt: skip
    assert "a loop unrolled at trace time: 3 nodes take one index each along axis 1" in blocker.why
    (part,) = sites(gathers([0, 2]), seq, rule)
    assert rule.check(part) == "the indices taken leave some of 0..2 out"
    (fixed,) = sites(gathers([0, 1, 2]), {"x": {0: "batch"}}, rule)
    assert rule.check(fixed) == "axis 1 of 'x' is no symbolic axis"


def appends(count: int, axis: int = 1) -> onnx.ModelProto:
    """``count`` Concat nodes each appending the same zeros along ``axis`` of x [2, 5, 3]."""
    out = [2, 5, 3]
    out[axis] += count
    names = [f"c{k}" for k in range(count - 1)] + ["y"]
    body = " ".join(
        f"{name} = Concat <axis = {axis}> ({'x' if k == 0 else names[k - 1]}, pad)"
        for k, name in enumerate(names)
    )
    shape = [2, 5, 3]
    shape[axis] = 1
    return parse(
        f"{OPSET} net (float[2, 5, 3] x) => (float{out} y) {{ {body} }}",
        pad=np.zeros(shape, np.float32),
    )


def test_unrolled_appends():
    rule = gb.UnrolledAppends()
    seq = {"x": {0: "batch", 1: "seq"}}
    (site,) = sites(appends(3), seq, rule)
    assert rule.check(site) is None
    blocker = rule.produce(site)
    assert (blocker.kind, blocker.node, blocker.traced, blocker.symbols) == (
        "unrolled-loop", "", "3 copies", ("seq",),
    )  # fmt: skip
    assert (
        "3 identical Concat nodes append the same piece along axis 1, giving seq + 3" in blocker.why
    )
    (one,) = sites(appends(1), seq, rule)
    assert rule.check(one) == "one Concat is no chain"
    (fixed,) = sites(appends(3, axis=2), seq, rule)
    assert rule.check(fixed) == "it appends along axis 2, which is no symbol's"


def strided(pads: list[int] | None) -> onnx.ModelProto:
    """A stride-2 3x3 Conv over x [1, 3, 8, 8]: after a Pad node (``pads``: ONNX order, begins
    then ends), or with its own even padding of 1 (None)."""
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    if pads is None:
        return parse(
            f"""{OPSET} net (float[1, 3, 8, 8] x) => (float[1, 4, 4, 4] y) {{
                y = Conv <strides = [2, 2], kernel_shape = [3, 3], pads = [1, 1, 1, 1]> (x, w)
            }}""",
            w=w,
        )
    model = parse(
        f"""{OPSET} net (float[1, 3, 8, 8] x) => (float[1, 4, 4, 4] y) {{
            p = Pad (x, pads)
            y = Conv <strides = [2, 2], kernel_shape = [3, 3]> (p, w)
        }}""",
        w=w,
        pads=np.array(pads, np.int64),
    )
    model.graph.node[0].name, model.graph.node[1].name = "pad", "conv"
    return model


SPATIAL = {"x": {2: "height", 3: "width"}}


def test_same_padding():
    rule = gb.SamePadding()
    (site,) = sites(strided([0, 0, 0, 0, 0, 0, 1, 1]), SPATIAL, rule)
    assert rule.check(site) is None
    blocker = rule.produce(site)
    assert (blocker.kind, blocker.op, blocker.symbols) == ("tf-padding", "Pad", ("height", "width"))
    assert (
        "TensorFlow 'same' padding at the traced size, which pads (1, 1) at lengths 1 mod 2"
        in blocker.why
    )
    assert blocker.fix.startswith("keep height, width static")
    assert blocker.node == "pad" and rule.alternative(site) == ("pad", ("conv", "pad"))
    (own,) = sites(strided(None), SPATIAL, rule)
    assert (
        rule.check(own)
        == "no strided symbolic axis is padded as 'same' pads its traced length alone"
    )
    assert rule.alternative(own) is None


def test_the_plan_lists_what_the_registry_finds(monkeypatch):
    """Conflicts first, then the constants' blockers, then the rest; a rule left out of
    :data:`GRAPH_RULES` finds nothing in the plan."""
    plan = plan_symbolize(appends(3), {"x": {0: "batch", 1: "seq"}})
    assert [b.kind for b in plan.blockers] == ["unrolled-loop"]
    padded = plan_symbolize(strided([0, 0, 0, 0, 0, 0, 1, 1]), SPATIAL)
    assert [b.kind for b in padded.blockers] == ["tf-padding"] and len(padded.same_padding) == 1
    monkeypatch.setattr(gb, "GRAPH_RULES", [r for r in gb.GRAPH_RULES if r.kind != "unrolled-loop"])
    assert plan_symbolize(appends(3), {"x": {0: "batch", 1: "seq"}}).blockers == []


@pytest.mark.parametrize("rule", gb.GRAPH_RULES, ids=lambda r: type(r).__name__)
def test_a_rule_finds_nothing_in_a_static_graph(rule):
    model = parse(f"{OPSET} net (float[2, 4] x) => (float[2, 4] y) {{ y = Relu (x) }}")
    found = [s for s in sites(model, {"x": {0: "batch"}}, rule) if rule.check(s) is None]
    assert found == []


def test_a_message_cut_short_still_names_every_kind_of_advice():
    """Blockers past the message's budget are counted, not listed; where their "what to do"
    advises a step none shown does (reference cases here, the bound shown), the count names
    it, so a user (and the sweep) following the message sees every step (LongT5 by
    TorchScript showed the bound only)."""
    from onnxsurgery.passes.symbolize.blockers import Blocker, blocker_summary
    from onnxsurgery.passes.symbolize.wording import BOUND_HINT, FIX

    bound = BOUND_HINT.format(syms="seq", example="seq")
    ref = FIX["coincident-size"].format(syms="batch", readings="batch", node="/Slice")
    shown = Blocker("/Pad", "Pad", None, "[120]", "x" * 600, bound + "re-export")
    cut = [
        Blocker(f"/Slice_{k}", "Slice", None, "[2]", f"cut {k} " + "y" * 600, ref + "re-export")
        for k in range(3)
    ]
    text = blocker_summary([shown, *cut], budget=1000)
    assert "(1) Pad '/Pad'" in text and "/Slice" not in text.split("; and ")[0]
    assert "and 3 more kind(s) (3 blocker(s)), whose what to do includes: pass reference " \
        "cases (--ref) at another batch;" in text
    assert "includes" not in blocker_summary([shown, *cut[:1]], budget=5000)  # all shown
    # advice a shown entry gives already is not repeated: the other order names the bound
    other = blocker_summary([cut[0], shown, *cut[1:]], budget=1000)
    assert other.count("--ref") == 1 and "includes: bound seq (like seq<=traced" in other
