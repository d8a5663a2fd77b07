"""Op traits: one declaration per op beside its shape rule, every per-op table a query of it.

The tables the traits replaced are written out below once, as the oracle: the registry must give
exactly them (and ``_mixed`` must decide exactly as the code it replaced, copied below).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import pytest

from onnxsurgery.passes.symbolize import batch_indices
from onnxsurgery.passes.symbolize.batch_indices import _mixed, batch_like_symbols
from onnxsurgery.passes.symbolize.feeds import shape_inputs
from onnxsurgery.passes.symbolize.plan import plan_symbolize
from onnxsurgery.shapes import propagate
from onnxsurgery.shapes.rules import RULES, TRAITS, MixAxis, OpTraits, op_traits, rule, traits
from onnxsurgery.shapes.rules.core import broadcast, out

# -- the oracle: the literal tables as they stood before the registry ---------------------------

#: passes/symbolize/feeds.py
OLD_SHAPE_SLOTS = {
    ("Expand", 1), ("Reshape", 1), ("ConstantOfShape", 0), ("Tile", 1), ("Range", 0),
    ("Range", 1), ("Range", 2), ("Slice", 1), ("Slice", 2), ("Slice", 3), ("Slice", 4),
    ("Resize", 2), ("Resize", 3), ("Pad", 1), ("TopK", 1), ("OneHot", 1), ("Split", 1),
    ("Unsqueeze", 1), ("Squeeze", 1), ("CenterCropPad", 1),
}  # fmt: skip
#: passes/symbolize/rewrite.py
OLD_BROADCASTING = {
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Where", "Expand", "And", "Or", "Xor",
    "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "PRelu", "Sum", "Mean",
}  # fmt: skip
#: onnxsurgery/shapes/rules/core.py
OLD_NO_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
               "Multinomial", "Bernoulli", "If", "Loop", "Scan", "Constant"}  # fmt: skip
#: passes/fold_constants/graphsurgeon.py
OLD_RANDOM_OPS = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
                  "Multinomial", "Bernoulli"}  # fmt: skip
#: the ops passes/symbolize/batch_indices.py's _mixed named (``op.startswith("Reduce")`` there)
OLD_MIXING = {
    "RNN", "GRU", "LSTM", "ArgMax", "ArgMin", "LpNormalization", "TopK", "Softmax", "LogSoftmax",
    "Hardmax", "CumSum", "Gemm", "MatMul", "ReduceL1", "ReduceL2", "ReduceLogSum",
    "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum",
    "ReduceSumSquare",
}  # fmt: skip


def _old_axis(attrs: dict, name: str, default: int, rank: int) -> int:
    a = int(attrs.get(name, default))
    return a + rank if a < 0 else a


def _old_mixed(analysis, sym: str) -> bool:  # noqa: C901 - verbatim, the oracle
    for node in analysis.model.graph.node:
        if not node.input:
            continue
        info = analysis.tensors.get(node.input[0])
        if info is None or info.shape is None:
            continue
        shape, rank = info.shape, len(info.shape)
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        axes: list[int] = []
        op = node.op_type
        if op in ("RNN", "GRU", "LSTM"):
            axes = [1 if attrs.get("layout", 0) else 0]
        elif op in ("ArgMax", "ArgMin", "LpNormalization", "TopK"):
            axes = [_old_axis(attrs, "axis", -1 if op in ("LpNormalization", "TopK") else 0, rank)]
        elif op in ("Softmax", "LogSoftmax", "Hardmax", "CumSum"):
            if op == "CumSum":
                ax = analysis.consts.get(node.input[1]) if len(node.input) > 1 else None
                axes = [int(ax.reshape(-1)[0]) % rank] if ax is not None and rank else []
            else:
                axes = [_old_axis(attrs, "axis", -1, rank)]
        elif op.startswith("Reduce"):
            listed = attrs.get("axes")
            if listed is None and len(node.input) > 1 and node.input[1]:
                const = analysis.consts.get(node.input[1])
                listed = None if const is None else const.reshape(-1).tolist()
            axes = list(range(rank)) if not listed else [int(a) % rank for a in listed]
        elif op == "Gemm" and rank == 2:
            axes = [0 if attrs.get("transA", 0) else 1]
            other = analysis.tensors.get(node.input[1]) if len(node.input) > 1 else None
            if other is not None and other.shape is not None and len(other.shape) == 2:
                if sym in other.shape[1 if attrs.get("transB", 0) else 0].atoms():
                    return True
        elif op == "MatMul" and rank >= 1:
            axes = [rank - 1]
            other = analysis.tensors.get(node.input[1]) if len(node.input) > 1 else None
            if other is not None and other.shape is not None and len(other.shape) >= 2:
                if sym in other.shape[-2].atoms():
                    return True
        if any(0 <= a < rank and sym in shape[a].atoms() for a in axes):
            return True
    return False


def _default_domain(pred) -> set[str]:
    return {op for (domain, op), t in TRAITS.items() if domain == "" and pred(t)}


def test_derived_tables_equal_the_literal_ones_they_replaced():
    slots = {(op, k) for (d, op), t in TRAITS.items() if d == "" for k in t.size_inputs}
    assert slots == OLD_SHAPE_SLOTS
    assert _default_domain(lambda t: t.broadcasts) == OLD_BROADCASTING
    assert _default_domain(lambda t: not t.foldable) == OLD_NO_FOLD
    assert _default_domain(lambda t: t.random) == OLD_RANDOM_OPS
    assert _default_domain(lambda t: t.mixes_rows) == OLD_MIXING
    assert {domain for domain, _ in TRAITS} == {""}


# x [B, S, 4] (B: axis 0, S: axis 1), x2 [B*S, 4], w [4, 4]: each case mixes rows along some axis
# of its first or its second input, or along none.
MIXING_CASES = {
    "softmax_last": "y = Softmax (x)",
    "softmax_0": "y = Softmax <axis = 0> (x)",
    "logsoftmax_1": "y = LogSoftmax <axis = 1> (x)",
    "hardmax_neg3": "y = Hardmax <axis = -3> (x)",
    "lpnorm_default": "y = LpNormalization (x)",
    "lpnorm_0": "y = LpNormalization <axis = 0> (x)",
    "argmax_default": "y = ArgMax (x)",
    "argmin_1": "y = ArgMin <axis = 1> (x)",
    "topk_1": "y, i = TopK <axis = 1> (x, k)",
    "cumsum_const_0": "y = CumSum (x, zero)",
    "cumsum_const_neg2": "y = CumSum (x, m2)",
    "cumsum_dynamic": "y = CumSum (x, dyn)",
    "reduce_all": "y = ReduceMean (x)",
    "reduce_attr_0": "y = ReduceSum <axes = [0]> (x)",
    "reduce_attr_empty": "y = ReduceMax <axes: ints = []> (x)",
    "reduce_input_1": "y = ReduceSum (x, one)",
    "reduce_dynamic": "y = ReduceSum (x, dyn)",
    "reduce_empty_name": "y = ReduceSum (x, EMPTY)",  # EMPTY: made "" (no input)
    "matmul_x_w": "y = MatMul (x, w)",
    "matmul_t_x": "y = MatMul (xt, x)",
    "matmul_B": "y = MatMul (w3, x)",
    "gemm": "y = Gemm (x2, w)",
    "gemm_A": "y = Gemm (x2t, x2)",
    "gemm_transA": "y = Gemm <transA = 1> (x2, w)",
    "gemm_transB": "y = Gemm <transB = 1> (w, x2t)",
    "gemm_B": "y = Gemm (w, x2t)",
    "gru_layout0": "y, h = GRU <hidden_size = 2> (x, wg, rg)",
    "gru_layout1": "y, h = GRU <hidden_size = 2, layout = 1> (x, wg, rg)",
    "relu": "y = Relu (x)",
    "add": "y = Add (x, x)",
}


def _mixing_model(body: str) -> onnx.ModelProto:
    text = f"""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[2, 3, 4] x, float[4, 4] w, int64[1] dyn, float[3, 3] w3, float[1, 6, 4] wg,
           float[1, 6, 2] rg) => (float[3] z) <
            int64[1] zero = {{0}}, int64[1] m2 = {{-2}}, int64[1] one = {{1}}, int64[1] k = {{2}}> {{
            xt = Transpose <perm = [0, 2, 1]> (x)
            x2 = Flatten <axis = 2> (x)
            x2t = Transpose (x2)
            {body}
            z = Shape (x)
        }}
    """
    model = onnx.parser.parse_model(text)
    for node in model.graph.node:
        node.input[:] = ["" if name == "EMPTY" else name for name in node.input]
    return model


@pytest.mark.parametrize("case", sorted(MIXING_CASES))
def test_mixed_rows_decide_as_the_code_they_replaced(case, monkeypatch):
    """The traits decide which axes a node mixes as the old code did. The nodes here feed
    nothing; since issue 30 a node whose values only reach sizes (or nothing) mixes no rows
    (tests/test_sweep_trust.py), so that exception is set aside to compare the traits alone."""
    monkeypatch.setattr(batch_indices, "_sizes_only", lambda *args: False)
    model = _mixing_model(MIXING_CASES[case])
    analysis = propagate(model, {"x": {0: "B", 1: "S"}})
    for sym in ("B", "S"):
        assert (_mixed(analysis, sym) is not None) == _old_mixed(analysis, sym), (case, sym)


def test_mixing_cases_cover_both_answers():
    answers = set()
    for body in MIXING_CASES.values():
        analysis = propagate(_mixing_model(body), {"x": {0: "B", 1: "S"}})
        answers |= {(sym, _old_mixed(analysis, sym)) for sym in ("B", "S")}
    assert answers == {("B", True), ("B", False), ("S", True), ("S", False)}


# -- the registry --------------------------------------------------------------------------------


@pytest.fixture
def scratch_registry():
    """Rules and traits declared inside a test are removed after it."""
    rules, declared = dict(RULES), dict(TRAITS)
    yield
    RULES.clear()
    RULES.update(rules)
    TRAITS.clear()
    TRAITS.update(declared)


def test_a_second_traits_declaration_is_refused_naming_both_places(scratch_registry):
    with pytest.raises(ValueError, match=r"ai\.onnx::Reshape declared twice: "
                       r"onnxsurgery\.shapes\.rules\.tensor\._reshape and \S*test_op_traits:\d+$"):  # fmt: skip
        traits("Reshape", size_inputs=(1,))
    with pytest.raises(ValueError, match=r"ai\.onnx::Scan declared twice: "
                       r"onnxsurgery\.shapes\.rules\.control_flow:\d+ and \S*test_op_traits\.\S*\.scan$"):  # fmt: skip

        @rule("Scan", foldable=False)
        def scan(ctx):
            return [None]

    # Refused whole: neither the rule nor the traits of the other ops named were registered.
    assert ("", "Scan") not in RULES
    assert op_traits("", "Reshape").size_inputs == (1,)


def test_a_rule_without_traits_declares_none(scratch_registry):
    @rule("Plain", domain="test.toy")
    def plain(ctx):
        return [None]

    traits("Plain", domain="test.toy", broadcasts=True)  # its traits, once, beside it
    assert op_traits("test.toy", "Plain").broadcasts
    assert op_traits("test.toy", "Other") == OpTraits()


def test_traits_are_checked_when_declared():
    with pytest.raises(TypeError, match=r"unknown op traits \['size_input'\]"):
        traits("Nothing", domain="test.toy", size_input=(1,))
    with pytest.raises(ValueError, match="a random op is never foldable"):
        OpTraits(random=True)
    assert ("test.toy", "Nothing") not in TRAITS


# -- a new op is one declaration -----------------------------------------------------------------

GROW = """
    <ir_version: 8, opset_import: ["" : 17, "test.toy" : 1]>
    g (float[4, 3] x{extra}) => (float[4, 3] y) {{
        {shape}
        y = test.toy.Grow (x, shape)
    }}
"""


def _declare_grow() -> None:
    """The toy op: ``Grow(x, shape)`` broadcasts ``x`` to ``shape`` (input 1, a size)."""

    @rule("Grow", domain="test.toy", size_inputs=(1,), broadcasts=True)
    def grow(ctx):
        info, target = ctx.info(0, "data"), ctx.value(1, size=True)
        if info is None or info.shape is None or target is None:
            return [None]
        return [out(broadcast(ctx, [info.shape, target], "Grow"), info.dtype)]


def test_a_new_op_declared_in_one_place_has_its_size_input_treated_as_a_size(scratch_registry):
    _declare_grow()
    constant = GROW.format(extra="", shape="shape = Constant <value = int64[2] {4, 3}> ()")
    plan = plan_symbolize(onnx.parser.parse_model(constant), {"x": {0: "batch"}})
    assert plan.ok
    (change,) = plan.changes
    assert (change.op, change.input_index) == ("Grow", 1)
    assert (change.old, change.new) == ("[4, 3]", "[batch, 3]")
    assert plan.outputs == {"y": ["batch", 3]}
    # Given as a graph input, symbolize's check takes it from the references, never made up.
    given = GROW.format(extra=", int64[2] shape", shape="")
    assert shape_inputs(onnx.parser.parse_model(given)) == {"shape": [("y", "Grow", 1)]}
    # The same op in another domain is another op.
    other = given.replace("test.toy.Grow", "other.Grow").replace('"test.toy"', '"other"')
    assert shape_inputs(onnx.parser.parse_model(other)) == {}


def test_a_new_op_that_mixes_rows_says_so_in_its_declaration(scratch_registry):
    model = onnx.parser.parse_model(
        """
        <ir_version: 8, opset_import: ["" : 17, "test.toy" : 1]>
        g (float[4, 3] x) => (float[4, 3] y) {
            y = test.toy.Smear <axis = 0> (x)
        }
        """
    )
    assert batch_like_symbols(propagate(model, {"x": {0: "batch"}})) == {"batch"}
    traits("Smear", domain="test.toy", mixes_rows=(MixAxis(attr="axis", default=-1),))
    assert batch_like_symbols(propagate(model, {"x": {0: "batch"}})) == set()


def test_mix_axis_forms():
    attrs = {"axis": 0, "axes": [-1], "layout": 1}
    assert MixAxis(attr="axis", default=-1).axes(attrs, 3, None) == [0]
    assert MixAxis(attr="axis", default=-1).axes({}, 3, None) == [2]
    assert MixAxis(attr="axes", default="all").axes({}, 3, None) == [0, 1, 2]
    assert MixAxis(attr="axes", default="all").axes(attrs, 3, None) == [2]
    assert MixAxis(axes_input=1).axes({}, 3, np.array([-2])) == [1]
    assert MixAxis(axes_input=1).axes({}, 3, None) == []
    assert MixAxis(axis=0, swap="layout", swapped=1).axes(attrs, 3, None) == [1]
    assert MixAxis(axis=0, swap="layout", swapped=1).axes({}, 3, None) == [0]
    assert MixAxis(axis=-2).axes({}, 1, None) == []
