"""fold-constants on tiny ONNX-text graphs: what it folds, what it keeps, how it fails."""

from __future__ import annotations

import ctypes

import numpy as np
import onnx
import onnx.parser
import pytest

import onnxsurgery
from onnxsurgery.errors import PassError, PassOptionError
from onnxsurgery.model.equality import same_graph
from onnxsurgery.model.io import tensor_bytes
from onnxsurgery.passes.fold_constants import (
    FoldConstants,
    changes,
    graphsurgeon,
    onnxsim_child,
    options,
)
from onnxsurgery.pipeline.registry import get_pass
from onnxsurgery.validation.runtime import run_model

CHAIN = """
<ir_version: 8, opset_import: ["" : 17]>
chain (float[N,4] x) => (float[N,4] y) {
  c = Constant <value = float[4] {1, 2, 3, 4}> ()
  two = Constant <value = float {2}> ()
  d = Mul (c, two)
  e = Add (d, c)
  y = Add (x, e)
}
"""

# Shape arithmetic on a symbolic batch, plus a stale value_info claiming r is [4, 4] (what a
# model traced at batch 4 carries before symbolize cleans up). Folding must keep `batch`.
DYNAMIC = """
<ir_version: 8, opset_import: ["" : 17]>
dyn (float[batch,4] x) => (float[batch,4] y) {
  r = Relu (x)
  s = Shape (r)
  i = Constant <value = int64 {0}> ()
  b = Gather <axis = 0> (s, i)
  a = Constant <value = int64[1] {0}> ()
  bu = Unsqueeze (b, a)
  m1 = Constant <value = int64[1] {-1}> ()
  shp = Concat <axis = 0> (bu, m1)
  f = Reshape (r, shp)
  c = Constant <value = float[4] {1, 2, 3, 4}> ()
  two = Constant <value = float {2}> ()
  d = Mul (c, two)
  y = Add (f, d)
}
"""

FOLDED = """
<ir_version: 8, opset_import: ["" : 17]>
folded (float[N,4] x) => (float[N,4] y) <float[4] w = {3, 6, 9, 12}> {
  y = Add (x, w)
}
"""


def _model(text: str) -> onnx.ModelProto:
    model = onnx.parser.parse_model(text)
    onnx.checker.check_model(model)
    return model


def _ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return run_model(model, {"x": x}, provider="cpu")["y"]


def _dims(vi: onnx.ValueInfoProto) -> list[str | int]:
    return [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]


@pytest.fixture(params=[True, False], ids=["forked", "in-process"])
def isolate(request) -> bool:
    return request.param


# -- folding ------------------------------------------------------------------------------------


def test_auto_isolation_forks_only_big_models(monkeypatch):
    small = _model(CHAIN)
    assert not onnxsim_child.wants_isolation(small, "auto")
    assert onnxsim_child.wants_isolation(small, True) and not onnxsim_child.wants_isolation(small, False)
    assert "(in-process)" in str(FoldConstants()(small).diagnostics[0])
    monkeypatch.setattr(onnxsim_child, "AUTO_ISOLATE_BYTES", 16)  # CHAIN holds 20 bytes of constants
    assert onnxsim_child.wants_isolation(small, "auto")
    assert "(forked child process)" in str(FoldConstants()(small).diagnostics[0])


def test_registered_under_its_name():
    assert get_pass("fold-constants") is FoldConstants
    assert FoldConstants.summary().startswith("Fold constant subgraphs")


def test_folds_a_constant_chain(isolate):
    model = _model(CHAIN)
    result = FoldConstants(isolate=isolate)(model)
    assert result.modified
    assert _ops(result.model) == ["Add"]  # the folded value is an initializer, not a Constant
    assert [t.name for t in result.model.graph.initializer] == [result.model.graph.node[0].input[1]]
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(_run(result.model, x), _run(model, x), rtol=0, atol=0)
    text = [str(d) for d in result.diagnostics]
    assert any(t.startswith("folded with onnxsim") for t in text)
    assert "nodes: 5 -> " in " | ".join(text)
    assert any("Mul -1" in t for t in text)
    assert any(t.startswith("constant data: ") for t in text)
    assert not any(d.level == "warning" for d in result.diagnostics)
    # the input model is never edited
    assert _ops(model) == ["Constant", "Constant", "Mul", "Add", "Add"]


def test_already_folded_model_is_not_modified(isolate):
    model = _model(FOLDED)
    result = FoldConstants(isolate=isolate)(model)
    assert not result.modified
    assert result.model is model
    assert any("nothing to fold" in str(d) for d in result.diagnostics)


def test_folding_twice_changes_nothing_the_second_time():
    once = FoldConstants()(_model(CHAIN))
    twice = FoldConstants()(once.model)
    assert once.modified and not twice.modified


def test_model_fields_and_metadata_are_kept():
    model = _model(CHAIN)
    model.producer_name = "pytorch"
    model.producer_version = "2.13.0"
    model.metadata_props.add(key="origin", value="test")
    result = FoldConstants()(model)
    assert result.modified
    assert result.model.producer_name == "pytorch"
    assert result.model.producer_version == "2.13.0"
    assert {p.key: p.value for p in result.model.metadata_props} == {"origin": "test"}


def test_symbolic_dims_stay_symbolic_and_run_at_other_sizes(isolate):
    model = _model(DYNAMIC)
    model.graph.value_info.append(
        onnx.helper.make_tensor_value_info("r", onnx.TensorProto.FLOAT, [4, 4])
    )
    result = FoldConstants(isolate=isolate)(model)
    assert result.modified
    assert _dims(result.model.graph.input[0]) == ["batch", 4]
    assert _dims(result.model.graph.output[0])[0] == "batch"
    assert "Mul" not in _ops(result.model)
    rng = np.random.default_rng(1)
    for batch in (1, 4, 7):
        x = rng.standard_normal((batch, 4)).astype(np.float32)
        got = _run(result.model, x)
        assert got.shape == (batch, 4)
        # the reference is the model without the stale entry (ONNX Runtime trusts it, too)
        np.testing.assert_allclose(got, _run(_model(DYNAMIC), x), rtol=0, atol=0)


def test_input_shapes_pins_only_on_request():
    result = FoldConstants(input_shapes="x:2x4")(_model(DYNAMIC))
    assert _dims(result.model.graph.input[0]) == [2, 4]
    assert "Shape" not in _ops(result.model)
    x = np.ones((2, 4), np.float32)
    np.testing.assert_allclose(_run(result.model, x), _run(_model(DYNAMIC), x))


def test_input_shapes_naming_a_missing_input_fails():
    with pytest.raises(PassError, match=r"fold-constants: input_shapes names 'z'.*'x'"):
        FoldConstants(input_shapes=["z:1x4"])(_model(CHAIN))


EXPAND = """
<ir_version: 8, opset_import: ["" : 17]>
expand (float[N,512] x) => (float[N,1024] y) {
  c = Constant <value = float[1] {2}> ()
  s = Constant <value = int64[2] {512, 1024}> ()
  e = Expand (c, s)
  y = MatMul (x, e)
}
"""


def test_size_threshold_keeps_big_folds_unfolded():
    model = _model(EXPAND)  # Expand folds into a 2 MB tensor
    assert "Expand" not in _ops(FoldConstants()(model).model)
    kept = FoldConstants(size_threshold="1MB")(model)
    assert "Expand" in _ops(kept.model)
    assert tensor_bytes(kept.model) < 1024
    assert "Expand" not in _ops(FoldConstants(size_threshold=4 * 2**20)(model).model)


CONV_BN = """
<ir_version: 8, opset_import: ["" : 17]>
convbn (float[N,2,5,5] x) => (float[N,2,5,5] y)
  <float[2,2,1,1] w = {1, 0.5, -1, 2}, float[2] g = {1.5, 0.5}, float[2] b = {0.1, -0.2},
   float[2] mu = {0.3, 0.1}, float[2] var = {2, 0.5}> {
  c = Conv (x, w)
  y = BatchNormalization <epsilon = 0.00001> (c, g, b, mu, var)
}
"""


def test_fuse_bn_option():
    model = _model(CONV_BN)
    fused = FoldConstants()(model)
    kept = FoldConstants(fuse_bn=False)(model)
    assert "BatchNormalization" not in _ops(fused.model)
    assert "BatchNormalization" in _ops(kept.model)
    x = np.random.default_rng(2).standard_normal((2, 2, 5, 5)).astype(np.float32)
    np.testing.assert_allclose(_run(fused.model, x), _run(model, x), rtol=1e-5, atol=1e-5)


LINEAR3D = """
<ir_version: 8, opset_import: ["" : 17]>
linear (float[N,5,8] x) => (float[N,5,4] y) <float[8,4] w = {
  1,2,3,4, 5,6,7,8, 1,2,3,4, 5,6,7,8, 1,2,3,4, 5,6,7,8, 1,2,3,4, 5,6,7,8}, float[4] b = {1,2,3,4}> {
  m = MatMul (x, w)
  y = Add (m, b)
}
"""


def test_batched_gemm_rewrite_only_on_request():
    model = _model(LINEAR3D)
    plain = FoldConstants()(model)
    assert not plain.modified and _ops(plain.model) == ["MatMul", "Add"]
    gemm = FoldConstants(batched_gemm=True)(model)
    assert gemm.modified and sorted(_ops(gemm.model)) == ["Gemm", "Reshape", "Reshape"]
    x = np.random.default_rng(3).standard_normal((2, 5, 8)).astype(np.float32)
    np.testing.assert_allclose(_run(gemm.model, x), _run(model, x), rtol=1e-5, atol=1e-5)


TRANSPOSES = """
<ir_version: 8, opset_import: ["" : 17]>
tt (float[N,4,5] x) => (float[N,4,5] y) {
  t = Transpose <perm = [0, 2, 1]> (x)
  y = Transpose <perm = [0, 2, 1]> (t)
}
"""


def test_skip_names_an_optimizer_not_to_run():
    model = _model(TRANSPOSES)
    assert _ops(FoldConstants()(model).model) == ["Transpose"]
    result = FoldConstants(skip=["fuse_consecutive_transposes"])(model)
    assert not result.modified
    assert _ops(result.model) == ["Transpose", "Transpose"]


def test_check_runs_onnxsims_own_comparison():
    result = FoldConstants(check=2)(_model(CHAIN))
    assert result.modified
    assert not any(d.level == "warning" for d in result.diagnostics)


# -- options ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"size_threshold": "1XB"}, "size '1XB' is not understood"),
        ({"size_threshold": 0}, "must be positive"),
        ({"size_threshold": "3GB"}, "under 2 GB"),
        (
            {"skip": ["no_such_pass"]},
            "unknown onnx-optimizer pass.*'no_such_pass'.*fuse_bn_into_conv",
        ),
        ({"check": -1}, "check must be"),
        ({"check": True}, "check must be"),
        ({"fuse_bn": "yes"}, "fuse_bn must be true or false"),
        ({"fallback": 1}, "fallback must be true or false"),
        ({"isolate": "maybe"}, "isolate must be true, false or auto"),
        (
            {"batched_gemm": True, "skip": ["fuse_matmul_add_bias_into_gemm_batched"]},
            "batched_gemm=true contradicts skip",
        ),
        ({"input_shapes": "x"}, "must read NAME:DIMS"),
        ({"input_shapes": "x:1xa"}, "whole numbers"),
        ({"input_shapes": "x:0x4"}, "positive dims"),
        ({"frobnicate": 1}, "unknown option 'frobnicate'"),
    ],
)
def test_wrong_options_are_errors_before_any_work(options, match):
    with pytest.raises(PassOptionError, match=match) as info:
        FoldConstants.from_options(options)
    assert str(info.value).startswith("fold-constants: ")


def test_option_table_checks_in_order_and_keeps_normalised_values():
    """read_options reports the first wrong option in the table's order and returns the values
    the pass keeps: a single skip name as a tuple, sizes in bytes, shapes as lists."""
    defaults = {
        "fuse_bn": True, "fallback": True, "batched_gemm": False, "hold_weights": True,
        "isolate": "auto", "check": 0, "skip": None, "size_threshold": None, "input_shapes": None,
    }  # fmt: skip
    assert list(options.OPTION_CHECKS) == list(defaults)
    values = options.read_options(
        {**defaults, "skip": "fuse_bn_into_conv", "size_threshold": "1KB", "input_shapes": "x:1x3"}
    )
    assert values["skip"] == ("fuse_bn_into_conv",)
    assert values["size_threshold"] == 1024
    assert values["input_shapes"] == {"x": [1, 3]}
    assert options.read_options(defaults) == {**defaults, "skip": ()}
    with pytest.raises(ValueError, match="^fallback must be"):
        options.read_options({**defaults, "fallback": 1, "check": -1, "size_threshold": 0})
    with pytest.raises(ValueError, match="^batched_gemm=true contradicts"):
        options.read_options({
            **defaults, "batched_gemm": True, "skip": [options.BATCHED_GEMM], "size_threshold": 0,
        })  # fmt: skip


def test_parse_size_and_input_shapes():
    assert options.parse_size("1MB") == 2**20
    assert options.parse_size("512KB") == 512 * 1024
    assert options.parse_size("1.5 gb") == 3 * 2**29
    assert options.parse_size("4096") == 4096
    assert options.parse_size(100) == 100
    assert options.parse_input_shapes("x:1x3x224x224") == {"x": [1, 3, 224, 224]}
    assert options.parse_input_shapes(["x:1,3", "y:2x4"]) == {"x": [1, 3], "y": [2, 4]}
    assert options.parse_input_shapes({"x": [1, 3]}) == {"x": [1, 3]}
    assert options.parse_input_shapes("a:b:2x2") == {"a:b": [2, 2]}


def test_chain_text_options_reach_onnxsim():
    [p] = onnxsurgery.Pipeline(
        "fold-constants(size_threshold=1MB, skip=[fuse_bn_into_conv], input_shapes=[x:2x4])"
    ).passes
    assert isinstance(p, FoldConstants)
    assert p.settings.kwargs() == {
        "check_n": 0,
        "certify": False,
        "skipped_optimizers": ["fuse_bn_into_conv", options.BATCHED_GEMM],
        "tensor_size_threshold": f"{2**20}B",
        "overwrite_input_shapes": {"x": [2, 4]},
    }


# -- failures and the fallback ------------------------------------------------------------------


def _raising_simplify(*args, **kwargs):
    raise RuntimeError("Unsupported op SomethingOdd in node 'n7'")


def _crashing_simplify(*args, **kwargs):
    ctypes.string_at(0)  # a real segmentation fault in native code


def _noisy_simplify(*args, **kwargs):
    import os

    print("onnxsim talks on stdout")
    os.write(1, b"native stdout noise\n")
    os.write(2, b"native stderr noise\n")
    raise RuntimeError("noisy failure")


def test_onnxsim_error_falls_back_to_graphsurgeon(monkeypatch, isolate):
    monkeypatch.setattr("onnxsim.simplify", _raising_simplify)
    model = _model(CHAIN)
    result = FoldConstants(isolate=isolate)(model)
    assert result.modified
    assert _ops(result.model) == ["Add"]
    [warning] = [d for d in result.diagnostics if d.level == "warning"]
    assert "onnxsim failed (RuntimeError: Unsupported op SomethingOdd in node 'n7')" in str(warning)
    assert "folded with onnx-graphsurgeon instead" in str(warning)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_allclose(_run(result.model, x), _run(model, x))


def test_fallback_false_makes_onnxsims_error_a_pass_error(monkeypatch, isolate):
    monkeypatch.setattr("onnxsim.simplify", _raising_simplify)
    with pytest.raises(PassError) as info:
        FoldConstants(fallback=False, isolate=isolate)(_model(CHAIN))
    assert str(info.value) == (
        "fold-constants: onnxsim failed: RuntimeError: Unsupported op SomethingOdd in node 'n7'"
    )


def test_native_crash_is_a_failure_not_the_end_of_the_process(monkeypatch):
    monkeypatch.setattr("onnxsim.simplify", _crashing_simplify)
    with pytest.raises(PassError, match=r"^fold-constants: onnxsim failed: .*crashed.*SIGSEGV"):
        FoldConstants(fallback=False, isolate=True)(_model(CHAIN))
    result = FoldConstants(isolate=True)(_model(CHAIN))  # with the fallback, a warning
    assert _ops(result.model) == ["Add"]
    assert any("SIGSEGV" in str(d) and d.level == "warning" for d in result.diagnostics)


def test_console_noise_never_reaches_the_terminal(monkeypatch, capfd, isolate):
    monkeypatch.setattr("onnxsim.simplify", _noisy_simplify)
    with pytest.raises(PassError) as info:
        FoldConstants(fallback=False, isolate=isolate)(_model(CHAIN))
    out, err = capfd.readouterr()
    assert out == "" and err == ""
    assert "native stderr noise" in info.value.details


def test_real_onnxsim_failure_unsorted_graph_falls_back():
    # onnxsim rejects a graph whose nodes are out of order; graphsurgeon sorts it first.
    model = _model(CHAIN)
    nodes = list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend(reversed(nodes))
    result = FoldConstants()(model)
    [warning] = [d for d in result.diagnostics if d.level == "warning"]
    assert "topologically sorted" in str(warning)
    assert _ops(result.model) == ["Add"]
    x = np.ones((2, 4), np.float32)
    np.testing.assert_allclose(_run(result.model, x), _run(_model(CHAIN), x))


def test_both_folders_failing_folds_nothing_and_says_why(monkeypatch):
    """Folding never fails a model that runs: the model comes back unchanged, with the reasons."""
    monkeypatch.setattr("onnxsim.simplify", _raising_simplify)

    def broken_fold(self, *args, **kwargs):
        raise ValueError("graphsurgeon cannot fold this")

    monkeypatch.setattr("onnx_graphsurgeon.Graph.fold_constants", broken_fold)
    model = _model(CHAIN)
    result = FoldConstants()(model)
    assert not result.modified and result.model is model
    (warning,) = [d for d in result.diagnostics if d.level == "warning"]
    assert str(warning) == (
        "folded nothing: onnxsim failed (RuntimeError: Unsupported op SomethingOdd in node 'n7') "
        "and the onnx-graphsurgeon fallback failed too (ValueError: graphsurgeon cannot fold "
        "this); the model is unchanged"
    )


def test_a_pinned_symbolic_dim_counts_as_onnxsim_failing(monkeypatch):
    import onnxsim

    real = onnxsim.simplify

    def pinning_simplify(model, *args, **kwargs):
        out, ok = real(model, *args, **kwargs)
        out.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 4
        return out, ok

    monkeypatch.setattr("onnxsim.simplify", pinning_simplify)
    result = FoldConstants()(_model(DYNAMIC))
    [warning] = [d for d in result.diagnostics if d.level == "warning"]
    assert "pinned symbolic dims: input 'x' axis 0 ('batch') became 4" in str(warning)
    assert _dims(result.model.graph.input[0]) == ["batch", 4]
    with pytest.raises(PassError, match="pinned symbolic dims"):
        FoldConstants(fallback=False)(_model(DYNAMIC))


BAKED = """
<ir_version: 8, opset_import: ["" : 17]>
baked (float[batch,4] x) => (float[batch,M] y) {
  shape = Constant <value = int64[2] {2, -1}> ()
  y = Reshape (x, shape)
}
"""


def test_an_output_the_graph_computes_at_a_fixed_size_is_a_warning():
    # x.view(2, -1) with 2 the traced batch, declared [batch, M]: the output has 2 rows always.
    result = FoldConstants()(_model(BAKED))
    assert _dims(result.model.graph.input[0]) == ["batch", 4]
    assert _dims(result.model.graph.output[0])[0] == 2
    [warning] = [d for d in result.diagnostics if d.level == "warning"]
    assert str(warning) == (
        "declared symbolic, but the graph computes a fixed size: output 'y' axis 0 ('batch') "
        "became 2 (a traced size baked into the graph; symbolize it)"
    )
    x = np.ones((6, 4), np.float32)
    assert _run(result.model, x).shape == (2, 12)


RANDOM = """
<ir_version: 8, opset_import: ["" : 17]>
rnd (float[N,4] x) => (float[N,4] y) {
  r = RandomNormal <shape = [4]> ()
  c = Constant <value = float[4] {1, 2, 3, 4}> ()
  d = Add (c, c)
  e = Add (r, d)
  y = Add (x, e)
}
"""


def test_fallback_never_freezes_a_random_op():
    model = _model(RANDOM)
    folded = graphsurgeon.fold_with_graphsurgeon(model)
    assert "RandomNormal" in _ops(folded)
    assert _ops(folded).count("Add") == 2  # c + c folded, the random draw kept


# -- what "modified" means ------------------------------------------------------------------------


def test_same_graph_ignores_names_order_and_value_info():
    a = _model(CHAIN)
    b = onnx.ModelProto()
    b.CopyFrom(a)
    for i, node in enumerate(b.graph.node):
        node.name = f"renamed_{i}"
    rename = {"c": "c_new", "d": "d_new", "e": "e_new"}
    for node in b.graph.node:
        node.input[:] = [rename.get(n, n) for n in node.input]
        node.output[:] = [rename.get(n, n) for n in node.output]
    nodes = list(b.graph.node)
    del b.graph.node[:]
    b.graph.node.extend([nodes[1], nodes[0], *nodes[2:]])
    b.graph.value_info.append(onnx.helper.make_tensor_value_info("d_new", 1, [4]))
    assert same_graph(a, b)


def test_same_graph_sees_constants_dead_nodes_and_signature():
    a = _model(FOLDED)
    changed_value = onnx.ModelProto()
    changed_value.CopyFrom(a)
    changed_value.graph.initializer[0].CopyFrom(
        onnx.numpy_helper.from_array(np.array([3, 6, 9, 13], np.float32), "w")
    )
    assert not same_graph(a, changed_value)
    dead = onnx.ModelProto()
    dead.CopyFrom(a)
    dead.graph.node.add(op_type="Neg", input=["x"], output=["unused"])
    assert not same_graph(a, dead)
    renamed_output = onnx.ModelProto()
    renamed_output.CopyFrom(a)
    renamed_output.graph.output[0].name = "z"
    renamed_output.graph.node[0].output[0] = "z"
    assert not same_graph(a, renamed_output)
    as_constant = _model(
        FOLDED.replace(
            "<float[4] w = {3, 6, 9, 12}> {",
            "{\n  w = Constant <value = float[4] {3, 6, 9, 12}> ()",
        )
    )
    assert same_graph(a, as_constant)
    assert not same_graph(a, as_constant, constant_storage=True)


def test_constant_nodes_become_initializers_and_that_is_a_change():
    model = _model(
        FOLDED.replace(
            "<float[4] w = {3, 6, 9, 12}> {",
            "{\n  w = Constant <value = float[4] {3, 6, 9, 12}> ()",
        )
    )
    result = FoldConstants()(model)
    assert result.modified
    assert _ops(result.model) == ["Add"]
    assert "op counts: Constant -1" in [d.message for d in result.diagnostics]
    assert not FoldConstants()(result.model).modified


def test_constants_to_initializers_keeps_graph_outputs_as_nodes():
    model = _model(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        consts (float[4] x) => (float[4] y, float[2] k) {
          c = Constant <value = float[4] {1, 2, 3, 4}> ()
          f = Constant <value_floats = [0.5, 0.25]> ()
          k = Constant <value = float[2] {7, 8}> ()
          y = Add (x, c)
        }
        """
    )
    assert graphsurgeon.constants_to_initializers(model) == 2
    assert _ops(model) == ["Constant", "Add"]
    assert [t.name for t in model.graph.initializer] == ["c", "f"]
    np.testing.assert_array_equal(
        onnx.numpy_helper.to_array(model.graph.initializer[1]), [0.5, 0.25]
    )
    onnx.checker.check_model(model)


def test_constant_bytes_counts_without_reading_the_data():
    model = _model(CHAIN)  # Constant float[4] and float scalar: 20 bytes
    assert tensor_bytes(model) == 20
    big = onnx.numpy_helper.from_array(np.zeros((3, 5), np.int64), "big")
    model.graph.initializer.append(big)
    assert tensor_bytes(model) == 20 + 3 * 5 * 8
    external = onnx.TensorProto(name="ext", data_type=onnx.TensorProto.FLOAT, dims=[1000])
    external.data_location = onnx.TensorProto.EXTERNAL
    external.external_data.add(key="length", value="4000")
    model.graph.initializer.append(external)
    assert tensor_bytes(model) == 20 + 120 + 4000


def test_large_model_writer_round_trips(tmp_path):
    model = _model(FOLDED)
    rng = np.random.default_rng(4)
    big = rng.standard_normal((16, 32)).astype(np.float32)
    model.graph.initializer.append(onnx.numpy_helper.from_array(big, "big"))
    typed = onnx.helper.make_tensor("typed", onnx.TensorProto.INT64, [300], list(range(300)))
    model.graph.initializer.append(typed)
    onnxsim_child._save_for_onnxsim(model, tmp_path / "m.onnx")
    assert (tmp_path / "m.onnx.data").stat().st_size == big.nbytes + 300 * 8
    loaded = onnx.load(str(tmp_path / "m.onnx"))
    arrays = {t.name: onnx.numpy_helper.to_array(t) for t in loaded.graph.initializer}
    np.testing.assert_array_equal(arrays["big"], big)
    np.testing.assert_array_equal(arrays["typed"], np.arange(300))
    np.testing.assert_array_equal(arrays["w"], [3, 6, 9, 12])  # 16 bytes: stays inline
    onnx.checker.check_model(str(tmp_path / "m.onnx"))


def test_op_delta_and_format_bytes():
    before, after = _model(CHAIN), _model(FOLDED)
    assert changes.op_delta(before, after) == "Constant -2, Add -1, Mul -1"
    assert changes.format_bytes(512) == "512 B"
    assert changes.format_bytes(1536) == "1.5 KB"
    assert changes.format_bytes(3 * 2**30) == "3.00 GB"


# -- in the pipeline ----------------------------------------------------------------------------


def test_pipeline_runs_the_pass_and_writes_the_folded_model(tmp_path):
    src = tmp_path / "chain.onnx"
    onnx.save(_model(CHAIN), src)
    out = tmp_path / "chain.folded.onnx"
    report = onnxsurgery.run(src, passes="fold-constants", output=out)
    [record] = report.passes
    assert record.modified and record.nodes_before == 5 and record.nodes_after < 5
    saved = onnx.load(out)
    x = np.ones((3, 4), np.float32)
    np.testing.assert_allclose(_run(saved, x), _run(_model(CHAIN), x))
