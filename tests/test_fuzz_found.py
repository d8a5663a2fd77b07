"""Classes the differential fuzzer (tests/differential) found outside symbolize, each as the
minimized reproducer it wrote or a smaller model written here: the result of the chain must
run on ONNX Runtime and compute what the input computed (``judge`` says "identical")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from differential.oracle import judge, run_on_ort

import onnxsurgery
from onnxsurgery.model.walk import subgraphs

REPRO = Path(__file__).parent / "differential" / "repro"

# An If branch reads `l` from the outer scope; the model carries a stale shape for `l` ([3], it
# is [1]). ORT only warns about it while `c` is an output, and refuses the model once `c` is not.
IF_READS_STALE_OUTER = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[2,1] x) => (float[1] c, float[1,1] s)
  <bool cond = {1}, float[1] k = {0.5}, int64[1] zero = {0}, int64[1] one = {1}, float[3] l> {
  r = ReduceProd <axes = [0], keepdims = 0> (x)
  l = LogSoftmax (r)
  i = If (cond) <
    then_branch = then_g () => (float[1] t) { t = Add (l, k) },
    else_branch = else_g () => (float[1] e) { e = Mul (l, k) }
  >
  c = Cast <to = 1> (i)
  s = Slice (x, zero, one, zero, one)
}
"""

FEEDS = {"x": np.array([[1.5], [-0.5]], dtype=np.float32)}


def test_concat_outputs_result_runs_where_the_input_carried_a_stale_outer_scope_shape():
    # fuzz seed 2739: ORT could not load the merged model ("Graph attribute inferencing failed:
    # Node:n_If_17 Output:logsoftmax_10 ... Inferred=1 Declared=3"): the stale shape was given,
    # and merging `cast_21` away from the outputs is what made ORT trip over it
    model = onnx.load(REPRO / "2739-concat-outputs.onnx")
    feeds = dict(np.load(REPRO / "2739-concat-outputs.npz"))
    chain = "concat-outputs(axis=0, flatten=0, dtype=float32, lossy=true)"
    assert judge(model, feeds, chain, run_on_ort(model, feeds)).kind == "identical"


@pytest.mark.parametrize("chain", ["concat-outputs", "concat-outputs(axis=0, flatten=0)"])
def test_a_stale_given_shape_that_contradicts_inference_is_dropped_once_a_pass_changes_the_graph(
    chain: str,
):
    model = onnx.parser.parse_model(IF_READS_STALE_OUTER)
    expected = run_on_ort(model, FEEDS)
    assert judge(model, FEEDS, chain, expected).kind == "identical"
    report = onnxsurgery.run(model, passes=chain, provider="cpu")
    assert "l" not in {vi.name for vi in report.model.graph.value_info}
    said = [str(d) for d in report.passes[0].diagnostics if "value_info" in str(d)]
    assert said == [
        "dropped value_info the input carried that contradicts shape inference: l float32[3] (inferred float32[1])"
    ]


def test_a_stale_given_shape_stays_when_the_pass_changes_nothing():
    model = onnx.parser.parse_model(IF_READS_STALE_OUTER)
    result = onnxsurgery.run(model, passes="concat-outputs(outputs=[c])", provider="cpu").model
    assert "l" in {vi.name for vi in result.graph.value_info}


# A dead node sends cleanup through onnx-graphsurgeon, which wrote the outer `t`'s stale shape
# ([3,3], it is [2,2]) into the bodies that read it as their own value_info.
IF_READS_STALE_OUTER_AND_A_DEAD_NODE = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[2,2] x) => (float[2,2] y) <bool cond = {1}, float[3,3] t> {
  t = Relu (x)
  dead = Neg (x)
  y = If (cond) <
    then_branch = then_g () => (float[2,2] a) { a = Add (t, t) },
    else_branch = else_g () => (float[2,2] b) { b = Mul (t, t) }
  >
}
"""

LOOP_READS_STALE_OUTER_AND_A_DEAD_NODE = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[2,2] x) => (float[2,2] y) <int64 trips = {2}, bool go = {1}, float[3,3] t> {
  t = Relu (x)
  dead = Neg (x)
  y = Loop (trips, go, x) <body = body (int64 i, bool c, float[2,2] s) => (bool c_out, float[2,2] s_out) {
    c_out = Identity (c)
    s_out = Add (s, t)
  }>
}
"""


@pytest.mark.parametrize(
    "text",
    [IF_READS_STALE_OUTER_AND_A_DEAD_NODE, LOOP_READS_STALE_OUTER_AND_A_DEAD_NODE],
    ids=["if", "loop"],
)
def test_cleanup_keeps_a_stale_outer_shape_out_of_the_bodies_that_read_it(text: str):
    # fuzz seeds 255, 923, 1160, 1281, 1484 (If) and 520, 696, 1193 (Loop), "cleanup": exit 2,
    # "its output model fails shape inference: (op_type:If ...) Inferred shape and existing
    # shape differ"; the shape graphsurgeon copied into the bodies counted as the pass's own
    model = onnx.parser.parse_model(text)
    feeds = {"x": np.array([[1, -2], [3, -4]], dtype=np.float32)}
    assert judge(model, feeds, "cleanup", run_on_ort(model, feeds)).kind == "identical"
    result = onnxsurgery.run(model, passes="cleanup", provider="cpu").model
    assert [n.op_type for n in result.graph.node] == ["Relu", model.graph.node[2].op_type]
    assert all("t" not in {vi.name for vi in g.value_info} for g in subgraphs(result.graph.node[1]))
