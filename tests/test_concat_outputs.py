"""concat-outputs: merge outputs in the graph, check every numerical claim on ONNX Runtime."""

from __future__ import annotations

import importlib
import json

import numpy as np
import onnx
import pytest
from fixture_manifest import load_manifest

import onnxsurgery
from onnxsurgery.errors import PassError, PassOptionError, ReferenceDataError
from onnxsurgery.merged_outputs import METADATA_KEY, read_layout, split_outputs
from onnxsurgery.model.io import infer_shapes
from onnxsurgery.passes.concat_outputs import ConcatOutputs
from onnxsurgery.pipeline.chain import build_passes
from onnxsurgery.pipeline.contract import PassResult
from onnxsurgery.validation.references import Case, load_cases, save_case
from onnxsurgery.validation.runtime import run_model

RNG = np.random.default_rng(0)


def parse(text: str) -> onnx.ModelProto:
    model = onnx.parser.parse_model(text)
    onnx.checker.check_model(model, full_check=True)
    return model


def apply(model: onnx.ModelProto, **options) -> PassResult:
    """Run the pass and check its model as the pipeline does (checker, strict inference)."""
    before = model.SerializeToString(deterministic=True)
    result = ConcatOutputs(**options)(model)
    assert model.SerializeToString(deterministic=True) == before, "the input model was edited"
    onnx.checker.check_model(result.model, full_check=True)
    infer_shapes(result.model)
    return result


def ort(model: onnx.ModelProto, **feeds) -> dict[str, np.ndarray]:
    return run_model(model, feeds, "cpu")


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def assert_split_exact(original: onnx.ModelProto, merged: PassResult, feeds: dict) -> dict:
    """ORT on the merged model, split, equals ORT on the original bit for bit; and the merged
    output equals the output map applied to the original outputs."""
    want = run_model(original, feeds, "cpu")
    got = run_model(merged.model, feeds, "cpu")
    layout = read_layout(merged.model)
    parts = split_outputs(merged.model, got if layout.shapes else got[layout.name])
    for name in layout.part_names:
        assert parts[name].dtype == want[name].dtype, name
        assert parts[name].shape == want[name].shape, name
        assert parts[name].tobytes() == want[name].tobytes(), name
    mapped = merged.output_map(want)
    assert list(mapped) == list(got)
    for name in got:
        np.testing.assert_array_equal(got[name], mapped[name], err_msg=name)
    return got


TWO = """
<ir_version: 8, opset_import: ["" : 17]>
two (float[2, 3] x) => (float[2, 3] a, float[2, 4] b, float[2] c)
  <float[3, 4] w = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}> {
    a = Relu(x)
    b = MatMul(x, w)
    axes = Constant<value = int64[1] {1}>()
    c = ReduceSum<keepdims = 0>(x, axes)
}
"""

DYN = """
<ir_version: 8, opset_import: ["" : 17]>
dyn (float[batch, seq] x, float[batch, 3] y) => (float[batch, seq] a, float[batch, 4] b, float[batch] c)
  <float[3, 4] w = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, int64[1] one = {1}> {
    a = Relu(x)
    b = MatMul(y, w)
    c = ReduceSum<keepdims = 0>(y, one)
}
"""


@pytest.fixture
def two() -> onnx.ModelProto:
    return parse(TWO)


@pytest.fixture
def dyn() -> onnx.ModelProto:
    return parse(DYN)


# -- the basic merge -------------------------------------------------------------------------------


def test_merges_every_output_on_the_last_axis(two):
    result = apply(two)
    assert result.modified
    graph = result.model.graph
    assert [o.name for o in graph.output] == ["merged"]
    dims = [d.dim_value for d in graph.output[0].type.tensor_type.shape.dim]
    assert dims == [2, 8]
    x = rand(2, 3)
    got = assert_split_exact(two, result, {"x": x})
    want = ort(two, x=x)
    np.testing.assert_array_equal(
        got["merged"], np.concatenate([want["a"], want["b"], want["c"][:, None]], axis=1)
    )
    assert "merged 3 outputs into 'merged' [2, 8] on axis 1" in str(result.diagnostics[0])


def test_metadata_records_the_layout(two):
    model = apply(two).model
    meta = {p.key: p.value for p in model.metadata_props}
    assert meta[METADATA_KEY] == (
        '{"axis":1,"dtype":"float32","flatten":null,"keep":false,"lossy":false,"name":"merged",'
        '"pad":null,"padded_axes":[],"parts":['
        '{"cast":false,"dims":[2,3],"dtype":"float32","name":"a","start":0,"stop":3},'
        '{"cast":false,"dims":[2,4],"dtype":"float32","name":"b","start":3,"stop":7},'
        '{"cast":false,"dims":[2],"dtype":"float32","name":"c","start":7,"stop":8}],'
        '"rank":2,"shape":[2,8],"shapes":null,"version":1}'
    )


def test_same_model_gives_the_same_bytes(two):
    first = apply(two).model.SerializeToString(deterministic=True)
    assert apply(two).model.SerializeToString(deterministic=True) == first


def test_axis_zero_and_negative_axis(two):
    result = apply(two, outputs=["a", "a"], axis=-2)  # rank 2: -2 is axis 0
    assert read_layout(result.model).axis == 0
    got = assert_split_exact(two, result, {"x": rand(2, 3)})
    assert got["merged"].shape == (4, 3)


def test_subset_takes_the_place_of_the_first_and_leaves_the_rest(two):
    result = apply(two, outputs=["c", "a"], name="ca")
    assert [o.name for o in result.model.graph.output] == ["ca", "b"]
    layout = read_layout(result.model)
    assert [(p.name, p.start, p.stop) for p in layout.parts] == [("c", 0, 1), ("a", 1, 4)]
    assert_split_exact(two, result, {"x": rand(2, 3)})


def test_keep_leaves_the_original_outputs(two):
    result = apply(two, keep=True)
    assert [o.name for o in result.model.graph.output] == ["a", "b", "c", "merged"]
    got = assert_split_exact(two, result, {"x": rand(2, 3)})
    assert set(got) == {"a", "b", "c", "merged"}


def test_merged_away_outputs_keep_their_type_as_value_info(two):
    model = apply(two).model
    info = {v.name: v for v in model.graph.value_info}
    assert [d.dim_value for d in info["b"].type.tensor_type.shape.dim] == [2, 4]


def test_flatten_keeps_leading_axes():
    # the example: [B,5], [B], [B,2,3] -> [B,5], [B,1], [B,6]
    model = parse("""
        <ir_version: 8, opset_import: ["" : 17]>
        f (float[batch, 5] x, float[batch, 2, 3] z) => (float[batch, 5] p, float[batch] q, float[batch, 2, 3] r)
          <int64[1] one = {1}> {
            p = Relu(x)
            q = ReduceSum<keepdims = 0>(x, one)
            r = Neg(z)
        }
    """)  # fmt: skip
    result = apply(model, flatten=1)
    layout = read_layout(result.model)
    assert [(p.start, p.stop) for p in layout.parts] == [(0, 5), (5, 6), (6, 12)]
    assert layout.shapes is None
    for batch in (1, 3):
        got = assert_split_exact(model, result, {"x": rand(batch, 5), "z": rand(batch, 2, 3)})
        assert got["merged"].shape == (batch, 12)


def test_flatten_of_symbolic_trailing_dims_computes_the_shape_in_the_graph(dyn):
    # a [batch, seq] flattened at 0 is [batch*seq]; b [batch, 4] is [batch*4]
    result = apply(dyn, outputs=["a", "b"], flatten=0)
    ops = [n.op_type for n in result.model.graph.node]
    assert "ReduceProd" in ops
    layout = read_layout(result.model)
    assert (layout.parts[1].start, layout.parts[1].stop) == ("batch*seq", "batch*4+batch*seq")
    # batch*seq + batch*4 = extent has two unknowns: the pass adds the shapes output
    assert layout.shapes == "merged_shapes"
    for batch, seq in ((2, 3), (1, 7)):
        got = assert_split_exact(dyn, result, {"x": rand(batch, seq), "y": rand(batch, 3)})
        np.testing.assert_array_equal(got["merged_shapes"], [batch, seq, batch, 4])


# -- symbolic dims ---------------------------------------------------------------------------------


def test_symbolic_batch_and_seq_on_the_concat_axis(dyn):
    result = apply(dyn)
    out = result.model.graph.output
    assert [o.name for o in out] == ["merged"]
    assert [d.dim_param or d.dim_value for d in out[0].type.tensor_type.shape.dim] == ["batch", 0]
    layout = read_layout(result.model)
    assert [(p.start, p.stop) for p in layout.parts] == [
        (0, "seq"), ("seq", "seq+4"), ("seq+4", "seq+5"),
    ]  # fmt: skip
    assert layout.shapes is None  # seq is solved from the merged extent
    for batch, seq in ((2, 3), (5, 1), (1, 0)):
        got = assert_split_exact(dyn, result, {"x": rand(batch, seq), "y": rand(batch, 3)})
        assert got["merged"].shape == (batch, seq + 5)


def test_batch_vs_seq_is_an_error_naming_both(dyn):
    with pytest.raises(PassError, match=(
        r"concat-outputs: outputs 'a' and 'b' differ in dim 1 \(seq vs 4; shapes after alignment "
        r"\[batch, seq\] and \[batch, 4\]\), so they cannot be concatenated on axis 0; pass pad=VALUE"
    )):  # fmt: skip
        apply(dyn, outputs=["a", "b"], axis=0)


def test_symbol_vs_different_symbol_is_an_error():
    model = parse("""
        <ir_version: 8, opset_import: ["" : 17]>
        m (float[batch, 3] x, float[seq, 3] y) => (float[batch, 3] a, float[seq, 3] b) {
            a = Relu(x)
            b = Relu(y)
        }
    """)
    with pytest.raises(PassError, match=r"outputs 'a' and 'b' differ in dim 0 \(batch vs seq"):
        apply(model)
    result = apply(model, axis=0)  # batch + seq on the concat axis: fine, but needs the shapes
    assert read_layout(result.model).shapes == "merged_shapes"
    assert_split_exact(model, result, {"x": rand(2, 3), "y": rand(5, 3)})


def test_unknown_dims_are_checked_by_onnx_runtime():
    model = parse("""
        <ir_version: 8, opset_import: ["" : 17]>
        m (float[?, 3] x, float[2, 3] y) => (float[?, 3] a, float[2, 3] b) {
            a = Relu(x)
            b = Relu(y)
        }
    """)
    result = apply(model)
    assert any("ONNX Runtime's Concat checks" in str(d) for d in result.diagnostics)
    got = assert_split_exact(model, result, {"x": rand(2, 3), "y": rand(2, 3)})
    assert got["merged"].shape == (2, 6)
    with pytest.raises(Exception, match="Non concat axis dimensions must match"):
        ort(result.model, x=rand(3, 3), y=rand(2, 3))


# -- pad -------------------------------------------------------------------------------------------


def test_static_pad_uses_constant_amounts():
    model = parse("""
        <ir_version: 8, opset_import: ["" : 17]>
        m (float[2, 3] x, float[1, 5] y) => (float[2, 3] a, float[1, 5] b) {
            a = Relu(x)
            b = Neg(y)
        }
    """)
    with pytest.raises(PassError, match=r"outputs 'a' and 'b' differ in dim 1 \(3 vs 5"):
        apply(model, axis=0)
    result = apply(model, axis=0, pad=-1)
    assert [n.op_type for n in result.model.graph.node].count("Pad") == 1  # b needs none
    assert "Max" not in [n.op_type for n in result.model.graph.node]
    got = assert_split_exact(model, result, {"x": rand(2, 3), "y": rand(1, 5)})
    assert got["merged"].shape == (3, 5)
    np.testing.assert_array_equal(got["merged"][:2, 3:], -1)


def test_symbolic_pad_is_computed_in_the_graph():
    model = parse("""
        <ir_version: 8, opset_import: ["" : 17]>
        m (float[batch, seq] x, float[batch, len] y) => (float[batch, seq] a, float[batch, len] b) {
            a = Relu(x)
            b = Neg(y)
        }
    """)
    result = apply(model, axis=0, pad=0)
    ops = [n.op_type for n in result.model.graph.node]
    assert {"Shape", "Max", "Sub", "Pad"} <= set(ops)
    layout = read_layout(result.model)
    assert layout.padded_axes == (1,) and layout.shapes == "merged_shapes"
    assert [o.name for o in result.model.graph.output] == ["merged", "merged_shapes"]
    for batch, seq, length in ((2, 3, 5), (3, 6, 1), (1, 4, 4)):
        got = assert_split_exact(model, result, {"x": rand(batch, seq), "y": rand(batch, length)})
        assert got["merged"].shape == (2 * batch, max(seq, length))


def test_pad_value_must_fit_the_dtype():
    model = parse("""
        <ir_version: 8, opset_import: ["" : 17]>
        m (int64[2, 3] x, int64[2, 5] y) => (int64[2, 3] a, int64[2, 5] b) {
            a = Neg(x)
            b = Neg(y)
        }
    """)
    with pytest.raises(PassError, match=r"pad=0.5 cannot be held exactly by the merged dtype int64"):
        apply(model, axis=0, pad=0.5)
    result = apply(model, axis=0, pad=-7)
    got = assert_split_exact(model, result, {"x": np.arange(6).reshape(2, 3), "y": np.arange(10).reshape(2, 5)})
    assert got["merged"].dtype == np.int64 and got["merged"][0, 4] == -7


# -- dtypes ----------------------------------------------------------------------------------------

MIXED = """
<ir_version: 8, opset_import: ["" : 17]>
mixed (float[batch, 5] x, int32[batch] k) => (float[batch, 5] p, int64[batch] i, int32[batch] j) {
    p = Relu(x)
    i = ArgMax<axis = 1, keepdims = 0>(x)
    j = Neg(k)
}
"""


def test_differing_dtypes_need_dtype():
    with pytest.raises(PassError, match=(
        r"outputs 'p' \(float32\) and 'i' \(int64\) have different dtypes; pass dtype= "
        r"\(e.g. dtype=float32\)"
    )):  # fmt: skip
        apply(parse(MIXED))


def test_lossy_cast_needs_lossy():
    with pytest.raises(PassError, match=(
        r"casting output 'i' from int64 to float32 loses information; pass lossy=true"
    )):  # fmt: skip
        apply(parse(MIXED), dtype="float32")


def test_lossless_cast_is_exact():
    model = parse(MIXED)
    result = apply(model, outputs=["p", "j"], dtype="float64")
    layout = read_layout(result.model)
    assert (layout.dtype, layout.lossy, [p.cast for p in layout.parts]) == ("float64", False, [True, True])
    assert [n.op_type for n in result.model.graph.node].count("Cast") == 2
    feeds = {"x": rand(3, 5), "k": np.array([2**30, -7, 2**31 - 1], np.int32)}
    got = assert_split_exact(model, result, feeds)
    assert got["merged"].dtype == np.float64


def test_lossy_cast_when_asked(tmp_path):
    model = parse(MIXED)
    result = apply(model, dtype="float", lossy=True)
    layout = read_layout(result.model)
    assert layout.lossy and layout.dtype == "float32"
    assert any(d.level == "warning" and "loses information" in str(d) for d in result.diagnostics)
    assert_split_exact(model, result, {"x": rand(4, 5), "k": np.array([1, 2, 3, 4], np.int32)})


# -- edge cases ------------------------------------------------------------------------------------


def test_output_that_is_a_graph_input_or_an_initializer():
    model = parse("""
        <ir_version: 8, opset_import: ["" : 17]>
        m (float[2, 3] x) => (float[2, 3] x, float[2, 3] w, float[2, 3] b) <float[2, 3] w = {1, 2, 3, 4, 5, 6}> {
            b = Neg(x)
        }
    """)  # fmt: skip
    result = apply(model)
    graph = result.model.graph
    assert [o.name for o in graph.output] == ["merged"]
    assert [i.name for i in graph.input] == ["x"] and "w" in {t.name for t in graph.initializer}
    assert not {v.name for v in graph.value_info} & {"x", "w"}
    x = rand(2, 3)
    got = assert_split_exact(model, result, {"x": x})
    np.testing.assert_array_equal(got["merged"][:, :3], x)
    np.testing.assert_array_equal(got["merged"][:, 3:6], [[1, 2, 3], [4, 5, 6]])


def test_same_tensor_listed_twice_in_the_graph():
    model = parse("""
        <ir_version: 8, opset_import: ["" : 17]>
        m (float[2, 3] x) => (float[2, 3] y, float[2, 3] y) {
            y = Relu(x)
        }
    """)
    result = apply(model)
    assert [o.name for o in result.model.graph.output] == ["merged"]
    assert any("listed more than once" in str(d) for d in result.diagnostics)
    got = assert_split_exact(model, result, {"x": rand(2, 3)})
    assert got["merged"].shape == (2, 6)
    assert list(split_outputs(result.model, got["merged"])) == ["y"]


def test_output_consumed_by_other_nodes():
    model = parse("""
        <ir_version: 8, opset_import: ["" : 17]>
        m (float[2, 3] x) => (float[2, 3] a, float[2, 3] b) {
            a = Relu(x)
            b = Neg(a)
        }
    """)
    result = apply(model)
    consumers = [n.op_type for n in result.model.graph.node if "a" in n.input]
    assert sorted(consumers) == ["Concat", "Neg"]
    assert_split_exact(model, result, {"x": rand(2, 3)})


SUBGRAPH = """
<ir_version: 8, opset_import: ["" : 17]>
sub (bool cond, float[2] x) => (float[2] y, float[2] z) {
    y = If (cond) <then_branch = g1 () => (float[2] t) { t = Relu(x) },
                   else_branch = g2 () => (float[2] e) { e = Neg(x) }>
    z = Abs(x)
}
"""


def test_outputs_of_a_model_with_subgraphs():
    model = parse(SUBGRAPH)
    result = apply(model, axis=0)
    x = np.array([-1.5, 2.0], np.float32)
    for cond in (True, False):
        got = assert_split_exact(model, result, {"cond": np.array(cond), "x": x})
        np.testing.assert_array_equal(got["merged"], np.concatenate([np.maximum(x, 0) if cond else -x, abs(x)]))
    with pytest.raises(PassError, match="the model already has a tensor or node named 't'"):
        apply(model, name="t")  # taken inside the then-branch


def test_opset_11_uses_unsqueeze_attributes():
    model = parse(TWO.replace('"" : 17', '"" : 11').replace(
        "axes = Constant<value = int64[1] {1}>()\n    c = ReduceSum<keepdims = 0>(x, axes)",
        "c = ReduceSum<keepdims = 0, axes = [1]>(x)"))  # fmt: skip
    result = apply(model)
    unsqueeze = next(n for n in result.model.graph.node if n.op_type == "Unsqueeze")
    assert [a.name for a in unsqueeze.attribute] == ["axes"] and len(unsqueeze.input) == 1
    assert_split_exact(model, result, {"x": rand(2, 3)})


OLD_OPSET = """
<ir_version: 4, opset_import: ["" : OPSET]>
old (float[2, 3] x, float[2, 3, 4] y) => (float[2, 3] a, float[2, 3, 4] b, float[2, 1] c) {
    a = Relu(x)
    b = Sigmoid(y)
    c = ReduceSum<keepdims = 1, axes = [1]>(x)
}
"""


@pytest.mark.parametrize("opset", [7, 9, 10])
def test_opsets_below_11_merge_with_ops_of_that_opset(opset):
    """Unsqueeze/Pad take attributes there; ORT runs the result and it splits back exactly."""
    model = parse(OLD_OPSET.replace("OPSET", str(opset)))
    for options in (
        {"outputs": ["a", "c"]},
        {"outputs": ["a", "c"], "axis": 0, "pad": 0},
        {"flatten": 1},
        {"outputs": ["c", "b"], "axis": 0, "pad": -1},  # c: rank 2 -> 3 by Unsqueeze, padded
    ):
        result = apply(model, **options)
        ops = {n.op_type: n for n in result.model.graph.node}
        if "pad" in options:
            assert [a.name for a in ops["Pad"].attribute] == ["mode", "pads", "value"]
        if "Unsqueeze" in ops:
            assert [a.name for a in ops["Unsqueeze"].attribute] == ["axes"]
        assert_split_exact(model, result, {"x": rand(2, 3), "y": rand(2, 3, 4)})


def test_ir3_model_keeps_its_new_initializers_listed_as_inputs():
    """IR 3 lists every initializer as an input; the pipeline adds the pass's new ones too."""
    model = parse(OLD_OPSET.replace("OPSET", "7").replace("ir_version: 4", "ir_version: 3"))
    report = onnxsurgery.run(model, "concat-outputs(flatten=1)")
    merged = report.model
    onnx.checker.check_model(merged, full_check=True)
    inputs = {i.name for i in merged.graph.input}
    assert {t.name for t in merged.graph.initializer} <= inputs
    feeds = {"x": rand(2, 3), "y": rand(2, 3, 4)}
    got = run_model(merged, feeds, "cpu")  # only the real inputs are fed
    want = run_model(model, feeds, "cpu")
    np.testing.assert_array_equal(
        got["merged"], np.concatenate([want["a"], want["b"].reshape(2, 12), want["c"]], axis=1)
    )


def test_pad_of_ints_below_opset_11_is_refused_naming_pad():
    model = parse("""
        <ir_version: 3, opset_import: ["" : 9]>
        m (int64[2, 3] x, int64[2, 5] y) => (int64[2, 3] a, int64[2, 5] b) {
            a = Neg(x)
            b = Neg(y)
        }
    """)
    with pytest.raises(PassError, match=r"pad= on int64 outputs needs Pad\(11\)"):
        apply(model, axis=0, pad=0)


def test_casts_below_opset_6_are_refused_naming_cast():
    model = parse("""
        <ir_version: 3, opset_import: ["" : 5]>
        m (float[2, 3] x, double[2, 3] y) => (float[2, 3] a, double[2, 3] b) {
            a = Neg(x)
            b = Neg(y)
        }
    """)
    with pytest.raises(PassError, match=r"dtype= casts need Cast\(6\)"):
        apply(model, dtype="double")


# -- nothing to do ---------------------------------------------------------------------------------


def test_single_output_changes_nothing(clean_model):
    result = ConcatOutputs()(clean_model)
    assert not result.modified and result.output_map is None
    assert result.model is clean_model
    assert "nothing to merge" in str(result.diagnostics[-1])


def test_a_merged_model_is_left_as_it_is(two):
    merged = apply(two).model
    again = ConcatOutputs()(merged)
    assert not again.modified
    assert "already merged into 'merged'" in str(again.diagnostics[0])
    kept = apply(two, keep=True).model
    assert not ConcatOutputs()(kept).modified


def test_merging_a_merged_model_with_more_outputs_is_an_error(two):
    merged = apply(two, outputs=["a", "b"]).model
    with pytest.raises(PassError, match=(
        r"merged by concat-outputs already \(output 'merged', metadata 'onnxsurgery.concat-outputs'\); "
        r"merging 'c' as well would need a second layout"
    )):  # fmt: skip
        ConcatOutputs(name="again")(merged)


# -- errors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options, error, message",
    [
        ({"outputs": []}, ValueError, r"outputs=\[\] names no output"),
        ({"outputs": [True]}, TypeError, "outputs must be output names"),
        ({"outputs": {"a": 1}}, TypeError, "outputs must be a list"),
        ({"axis": "1"}, TypeError, "axis must be an integer"),
        ({"axis": True}, TypeError, "axis must be an integer"),
        ({"name": ""}, ValueError, "name must be a non-empty tensor name"),
        ({"keep": "yes"}, TypeError, "keep must be true or false"),
        ({"lossy": 1}, TypeError, "lossy must be true or false"),
        ({"flatten": -1}, ValueError, "flatten must be >= 0"),
        ({"flatten": 1.5}, TypeError, "flatten must be a non-negative integer"),
        ({"dtype": "float33"}, ValueError, "dtype 'float33' is not an ONNX tensor type"),
        ({"dtype": "string"}, ValueError, "strings cannot be concatenated"),
        ({"pad": "zero"}, TypeError, "pad must be a number"),
        ({"pad": True}, TypeError, "pad must be a number"),
    ],
)
def test_bad_options_fail_before_any_model(options, error, message):
    with pytest.raises(error, match=message):
        ConcatOutputs(**options)


def test_bad_options_in_a_chain_are_option_errors():
    with pytest.raises(PassOptionError, match="concat-outputs: dtype 'float33'"):
        build_passes(["concat-outputs(dtype=float33)"])
    with pytest.raises(PassOptionError, match="unknown option 'axes'"):
        build_passes(["concat-outputs(axes=1)"])
    (p,) = build_passes(["concat-outputs(outputs=[19, b], pad=nan, dtype=float16, lossy=true)"])
    assert p.outputs == ["19", "b"] and np.isnan(p.pad)


def test_unknown_output_lists_the_models_outputs(two):
    with pytest.raises(PassError, match=(
        r"concat-outputs: no output named 'nope'; the model's outputs are 'a', 'b', 'c'"
    )):  # fmt: skip
        apply(two, outputs=["a", "nope"])


def test_axis_out_of_range(two):
    with pytest.raises(PassError, match=r"axis=2 is out of range for outputs of rank 2 after alignment \(valid: -2..1\)"):
        apply(two, axis=2)


def test_name_clash(two):
    with pytest.raises(PassError, match=r"name='a': the model already has a tensor or node named 'a'"):
        apply(two, name="a")


def test_shapes_name_clash():
    model = parse("""
        <ir_version: 8, opset_import: ["" : 17]>
        m (float[batch, 3] x, float[seq, 3] y) => (float[batch, 3] a, float[seq, 3] merged_shapes) {
            a = Relu(x)
            merged_shapes = Relu(y)
        }
    """)
    with pytest.raises(PassError, match="name='merged_shapes'"):
        apply(model, axis=0)


def test_flatten_needs_the_rank(two):
    with pytest.raises(PassError, match=r"flatten=2 keeps 2 leading axes, but output 'c' has rank 1 \(dims \[2\]\)"):
        apply(two, flatten=2)


def test_non_tensor_output_is_an_error():
    model = parse("""
        <ir_version: 8, opset_import: ["" : 17]>
        m (float[2] x) => (float[2] a, seq(float[2]) s) {
            a = Relu(x)
            s = SequenceConstruct(x)
        }
    """)
    with pytest.raises(PassError, match="output 's' is a sequence, not a tensor"):
        apply(model)


# -- through the pipeline --------------------------------------------------------------------------


def _references(tmp_path, model: onnx.ModelProto, feeds_list) -> str:
    for i, feeds in enumerate(feeds_list):
        save_case(Case(f"case{i}", dict(feeds), ort(model, **feeds)), tmp_path / "refs", index=i)
    return str(tmp_path / "refs")


def test_pipeline_validates_through_the_output_map(tmp_path, dyn):
    refs = _references(tmp_path, dyn, [{"x": rand(b, s), "y": rand(b, 3)} for b, s in ((2, 3), (4, 1))])
    report = onnxsurgery.run(dyn, passes=[ConcatOutputs()], references=refs, provider="cpu",
                             output=tmp_path / "out.onnx")  # fmt: skip
    assert report.validation
    assert [o.name for o in report.validation.cases[0].outputs] == ["merged"]
    assert (tmp_path / "out.onnx").exists()


def test_pipeline_with_chain_text_and_keep(tmp_path, two):
    refs = _references(tmp_path, two, [{"x": rand(2, 3)}])
    report = onnxsurgery.run(two, passes="concat-outputs(outputs=[b, c], keep=true, name=bc)",
                             references=refs, provider="cpu")  # fmt: skip
    assert report.validation
    names = sorted(o.name for o in report.validation.cases[0].outputs)
    assert names == ["a", "b", "bc", "c"]


def test_pipeline_mapping_with_a_wrong_reference_fails_the_case(tmp_path, two):
    refs = _references(tmp_path, two, [{"x": rand(2, 3)}])
    broken = tmp_path / "refs" / "test_data_set_0" / "output_1.pb"
    broken.unlink()  # reference 'b' is gone: the mapping cannot build 'merged'
    with pytest.raises(onnxsurgery.ValidationMismatch, match=(
        "concat-outputs merged 'b', but the reference outputs hold only 'a', 'c'"
    )):  # fmt: skip
        onnxsurgery.run(two, passes=[ConcatOutputs()], references=refs, provider="cpu")


# -- the fixtures ----------------------------------------------------------------------------------

# Options that make each multi-output fixture mergeable (their outputs differ in dtype or dims).
FIXTURE_OPTIONS = {
    "multi_output": {"dtype": "float32", "lossy": True},
    "multi_output_mismatch": {"flatten": 1},
    "lstm_packed": {"flatten": 1},
    "zero_state_gru": {"flatten": 0},
}
MULTI = [e for e in load_manifest() if e.multi_output and e.exported]


def _relax(model: onnx.ModelProto, dynamic_axes) -> onnx.ModelProto:
    """Name the dynamic input axes and drop the output shapes (the fixtures' relax_io)."""
    relaxed = onnx.ModelProto()
    relaxed.CopyFrom(model)
    for value in relaxed.graph.input:
        for axis, symbol in dynamic_axes.get(value.name, {}).items():
            dim = value.type.tensor_type.shape.dim[axis]
            dim.Clear()
            dim.dim_param = symbol
    for value in relaxed.graph.output:
        value.type.tensor_type.ClearField("shape")
    del relaxed.graph.value_info[:]
    return relaxed


def _check_fixture(original, result, cases):
    for case in cases:
        got = assert_split_exact(original, result, case.inputs)
        expected = result.output_map(case.outputs)  # the stored torch outputs, merged
        np.testing.assert_allclose(got["merged"], expected["merged"], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("entry", MULTI, ids=str)
def test_fixture_at_the_traced_size(entry, tmp_path):
    model = onnx.load(entry.model_path)
    result = apply(model, **FIXTURE_OPTIONS.get(entry.name, {"flatten": 0}))
    _check_fixture(model, result, load_cases(entry.references_dir)[:1])
    report = onnxsurgery.run(
        entry.model_path, passes=[ConcatOutputs(**FIXTURE_OPTIONS.get(entry.name, {"flatten": 0}))],
        references=entry.references_dir / "test_data_set_0", provider="cpu",
    )  # fmt: skip
    assert report.validation, report.validation.summary


@pytest.mark.parametrize(
    "entry", [e for e in MULTI if e.static_other_sizes and set(e.static_other_sizes) == {"ok"}], ids=str
)
def test_fixture_at_every_stored_size_once_relaxed(entry):
    relaxed = _relax(onnx.load(entry.model_path), entry.dynamic_axes)
    result = apply(relaxed, **FIXTURE_OPTIONS[entry.name])
    layout = read_layout(result.model)
    assert layout.parts[0].dims[0] == "batch" and layout.shapes is None
    cases = load_cases(entry.references_dir)
    assert len(cases) >= 3
    _check_fixture(relaxed, result, cases)


def test_fixture_errors_without_options():
    by_id = {e.id: e for e in MULTI}
    model = onnx.load(by_id["multi_output-torchscript"].model_path)
    with pytest.raises(PassError, match=r"outputs 'logits' \(float32\) and 'pred' \(int64\) have different dtypes"):
        apply(model)
    model = onnx.load(by_id["multi_output_mismatch-dynamo"].model_path)
    with pytest.raises(PassError, match=r"outputs 'a' and 'b' differ in dim 1 \(4 vs 5; shapes after alignment \[4, 4, 3\] and \[4, 5, 2\]\)"):
        apply(model)


def test_fixture_map_rejects_foreign_references():
    entry = next(e for e in MULTI if e.name == "multi_output")
    result = apply(onnx.load(entry.model_path), dtype="float32", lossy=True)
    with pytest.raises(ReferenceDataError, match="merged 'pred'"):
        result.output_map({"logits": np.zeros((4, 5), np.float32), "score": np.zeros(4, np.float32)})


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


HAS_SYMBOLIZE = _importable("onnxsurgery.passes.symbolize")
HAS_FOLD = _importable("onnxsurgery.passes.fold_constants")


@pytest.mark.skipif(not HAS_FOLD, reason="onnxsurgery.passes.fold_constants does not import")
@pytest.mark.parametrize("entry", [e for e in MULTI if e.name == "multi_output"], ids=str)
def test_before_and_after_fold_constants(entry):
    report = onnxsurgery.run(
        entry.model_path,
        passes="fold-constants, concat-outputs(dtype=float32, lossy=true), fold-constants",
        references=entry.references_dir / "test_data_set_0", provider="cpu",
    )  # fmt: skip
    assert report.validation, report.validation.summary
    assert [o.name for o in report.model.graph.output] == ["merged"]
    case = load_cases(entry.references_dir)[0]
    parts = split_outputs(report.model, run_model(report.model, case.inputs, "cpu")["merged"])
    want = run_model(onnx.load(entry.model_path), case.inputs, "cpu")
    assert all(parts[n].tobytes() == want[n].tobytes() for n in want)


@pytest.mark.skipif(not HAS_FOLD, reason="onnxsurgery.passes.fold_constants does not import")
def test_symbolic_merge_survives_fold_constants(tmp_path, dyn):
    refs = _references(tmp_path, dyn, [{"x": rand(b, s), "y": rand(b, 3)} for b, s in ((2, 3), (4, 1))])
    report = onnxsurgery.run(dyn, passes=[ConcatOutputs(flatten=0), "fold-constants"],
                             references=refs, provider="cpu")  # fmt: skip
    assert report.validation, report.validation.summary
    assert [o.name for o in report.model.graph.output] == ["merged", "merged_shapes"]


@pytest.mark.skipif(not HAS_SYMBOLIZE, reason="onnxsurgery.passes.symbolize does not import yet")
@pytest.mark.parametrize("entry", [e for e in MULTI if e.symbolize == "expected"], ids=str)
def test_after_symbolize_at_every_stored_size(entry):
    options = FIXTURE_OPTIONS.get(entry.name, {"flatten": 0})
    # A failure of symbolize here fails the test: the manifest says this fixture symbolizes.
    symbolize = importlib.import_module("onnxsurgery.passes.symbolize").Symbolize
    symbolized = onnxsurgery.run(
        entry.model_path, passes=[symbolize(dynamic_axes=entry.dynamic_axes)], provider="cpu"
    ).model
    report = onnxsurgery.run(
        symbolized, passes=[ConcatOutputs(**options)], references=entry.references_dir, provider="cpu",
    )  # fmt: skip
    assert report.validation, report.validation.summary
    cases = load_cases(entry.references_dir)
    assert len(report.validation.cases) == len(cases) >= 3
    merged = report.model
    layout = read_layout(merged)
    assert layout.name == "merged"
    for case in cases:
        got = run_model(merged, case.inputs, "cpu")
        parts = split_outputs(merged, got)
        want = run_model(symbolized, case.inputs, "cpu")
        for name in case.outputs:
            assert parts[name].tobytes() == want[name].tobytes(), name
            np.testing.assert_allclose(parts[name], case.outputs[name], rtol=1e-4, atol=1e-5, err_msg=name)


def test_json_of_a_fixture_is_readable():
    entry = next(e for e in MULTI if e.id == "multi_output-dynamo")
    relaxed = _relax(onnx.load(entry.model_path), entry.dynamic_axes)
    text = next(p.value for p in apply(relaxed, dtype="float32", lossy=True).model.metadata_props
                if p.key == METADATA_KEY)  # fmt: skip
    data = json.loads(text)
    assert data["shape"] == ["batch", 7]
    assert [(p["name"], p["dims"], p["start"], p["stop"]) for p in data["parts"]] == [
        ("logits", ["batch", 5], 0, 5), ("score", ["batch"], 5, 6), ("pred", ["batch"], 6, 7),
    ]  # fmt: skip


def test_unreadable_metadata_is_a_pass_error(two):
    two.metadata_props.add(key=METADATA_KEY, value="{broken")
    with pytest.raises(PassError, match="concat-outputs: the model's 'onnxsurgery.concat-outputs' metadata cannot be read"):
        ConcatOutputs()(two)


# -- random layouts on ONNX Runtime -----------------------------------------------------------------


def _random_case(seed: int):
    """Outputs (Identity of inputs) of random ranks and dims, with options that make them merge."""
    rng = np.random.default_rng(seed)
    pick = lambda items: items[rng.integers(len(items))]  # noqa: E731
    n = int(rng.integers(2, 5))
    mode = pick(["same", "pad", "flatten"])
    options: dict = {}
    if mode == "same":
        rank = int(rng.integers(1, 4))
        axis = int(rng.integers(rank))
        common = [pick([2, 3, "batch"]) for _ in range(rank)]
        shapes = []
        for _ in range(n):
            dims = list(common)
            dims[axis] = pick([0, 1, 2, "seq", "len"])
            shapes.append(dims)
        options["axis"] = axis - rank if rng.integers(2) else axis
    elif mode == "pad":
        shapes = [[pick([1, 2, 3, "batch", "seq", "len"]) for _ in range(int(rng.integers(0, 4)))] for _ in range(n)]
        rank = max(1, *(len(s) for s in shapes))
        options.update(axis=int(rng.integers(rank)), pad=pick([-3, 0.5, float("nan")]))
    else:
        keep_axes = int(rng.integers(0, 3))
        lead = [pick([2, "batch"]) for _ in range(keep_axes)]
        shapes = [lead + [pick([1, 3, "seq", "len"]) for _ in range(int(rng.integers(0, 3)))] for _ in range(n)]
        options["flatten"] = keep_axes
    return shapes, options, rng


@pytest.mark.parametrize("seed", range(30))
def test_random_layouts_round_trip_on_ort(seed):
    shapes, options, rng = _random_case(seed)
    inputs = ", ".join(f"float[{', '.join(map(str, s))}] x{i}" if s else f"float x{i}" for i, s in enumerate(shapes))
    outputs = ", ".join(f"float[{', '.join(map(str, s))}] y{i}" if s else f"float y{i}" for i, s in enumerate(shapes))
    body = "\n".join(f"y{i} = Identity(x{i})" for i in range(len(shapes)))
    model = parse(f'<ir_version: 8, opset_import: ["" : 17]>\nm ({inputs}) => ({outputs}) {{\n{body}\n}}')
    try:
        result = apply(model, **options)
    except PassError as exc:
        pytest.fail(f"{shapes} {options}: {exc}")
    for _ in range(3):
        sizes = {s: int(rng.integers(0 if s == "seq" else 1, 5)) for s in ("batch", "seq", "len")}
        feeds = {
            f"x{i}": rng.standard_normal([sizes.get(d, d) for d in s]).astype(np.float32)
            for i, s in enumerate(shapes)
        }
        assert_split_exact(model, result, feeds)


def test_string_outputs_concatenate_but_do_not_cast():
    model = parse("""
        <ir_version: 8, opset_import: ["" : 17]>
        m (string[2] s, string[3] t, float[2] f) => (string[2] a, string[3] b, float[2] g) {
            a = Identity(s)
            b = Identity(t)
            g = Identity(f)
        }
    """)
    result = apply(model, outputs=["a", "b"], axis=0)
    feeds = {"s": np.array(["x", "yy"], object), "t": np.array(["", "z", "w"], object), "f": rand(2)}
    got = ort(result.model, **feeds)
    assert got["merged"].tolist() == ["x", "yy", "", "z", "w"]
    parts = split_outputs(result.model, got["merged"])
    assert parts["b"].tolist() == ["", "z", "w"]
    with pytest.raises(PassError, match="output 'a' is string: strings and numbers cannot be cast"):
        apply(model, axis=0, dtype="float32", lossy=True)
