"""validate() / compare_models() / the validate pass on tiny models with hand-computed outputs.

Inputs and weights are small binary fractions, so ONNX Runtime's float32 arithmetic is exact and
every statistic can be checked with ``==`` against numpy.
"""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from rich.console import Console

import onnxsurgery
from onnxsurgery.errors import (
    ModelLoadError,
    PassError,
    PassOptionError,
    ProviderError,
    ReferenceDataError,
    UsageError,
    ValidationMismatch,
)
from onnxsurgery.model.signature import parse_shape_spec
from onnxsurgery.passes.validate import Validate
from onnxsurgery.pipeline.contract import PassContext
from onnxsurgery.validation.against_model import compare_models
from onnxsurgery.validation.against_references import validate
from onnxsurgery.validation.references import Case, save_case
from onnxsurgery.validation.report import ValidationReport
from onnxsurgery.validation.runtime import _probe_cuda
from onnxsurgery.validation.tolerances import parse_tolerance_spec

W = np.array([[0.5, -1.0], [0.25, 2.0], [1.0, 0.0]], dtype=np.float32)
B = np.array([1.0, -0.5], dtype=np.float32)

NET = """
<ir_version: 8, opset_import: ["" : 17]>
net (float[N, 3] x) => (float[N, 2] y, float[N, 3] z)
<float[3, 2] W = {0.5, -1.0, 0.25, 2.0, 1.0, 0.0}, float[2] B = {1.0, -0.5}>
{
    m = MatMul(x, W)
    y = Add(m, B)
    z = Relu(x)
}
"""


def parse(text: str) -> onnx.ModelProto:
    model = onnx.parser.parse_model(text)
    onnx.checker.check_model(model)
    return model


def torch_like(x: np.ndarray) -> dict[str, np.ndarray]:
    return {"y": x @ W + B, "z": np.maximum(x, 0)}


X2 = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 4.0]], dtype=np.float32)
X5 = np.array([[1, 2, 3], [0.5, -1, 4], [0, 0, 0], [-2, 0.25, 1], [8, -4, 0.5]], dtype=np.float32)
CASES = [
    Case("test_data_set_0", {"x": X2}, torch_like(X2)),
    Case("test_data_set_1", {"x": X5}, torch_like(X5)),
]


@pytest.fixture
def net() -> onnx.ModelProto:
    return parse(NET)


def with_weight_error(
    model: onnx.ModelProto, name: str, index: tuple[int, ...], delta: float
) -> onnx.ModelProto:
    """A copy of ``model`` with one element of initializer ``name`` changed by ``delta``."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for i, init in enumerate(out.graph.initializer):
        if init.name == name:
            array = numpy_helper.to_array(init).copy()
            array[index] += delta
            out.graph.initializer[i].CopyFrom(numpy_helper.from_array(array, name))
            return out
    raise KeyError(name)


# -- passing and failing -------------------------------------------------------------------------


def test_unmodified_model_validates(net: onnx.ModelProto) -> None:
    report = validate(net, CASES, provider="cpu")
    assert report
    assert report.summary == "2 cases, 4 outputs: all match (atol 1e-4, rtol 1e-3)"
    assert report.provider == "CPU (asked for)"
    assert [o.name for c in report.cases for o in c.outputs] == ["y", "z", "y", "z"]
    assert all(o.max_abs == 0 for c in report.cases for o in c.outputs)


def test_injected_weight_error_is_caught_on_the_right_output(net: onnx.ModelProto) -> None:
    broken = with_weight_error(net, "W", (1, 0), 0.125)  # y[:, 0] moves by 0.125 * x[:, 1]
    report = validate(broken, CASES, provider="cpu")
    assert not report
    for case in report.cases:
        x = next(c for c in CASES if c.name == case.name).inputs["x"]
        y_ref = torch_like(x)["y"]
        diff = np.zeros_like(y_ref, dtype=np.float64)
        diff[:, 0] = np.abs(0.125 * x[:, 1].astype(np.float64))
        allowed = 1e-4 + 1e-3 * np.abs(y_ref.astype(np.float64))
        y, z = case.outputs
        assert z and z.name == "z"  # the untouched output passes
        assert not y and y.name == "y"
        assert y.max_abs == diff.max()
        assert y.mean_abs == pytest.approx(diff.mean(), rel=1e-12)
        assert y.mismatches == int(np.count_nonzero(diff > allowed))
        excess = diff - 1e-3 * np.abs(y_ref.astype(np.float64))
        assert y.worst_index == tuple(
            int(i) for i in np.unravel_index(np.argmax(excess), diff.shape)
        )
        # float32 output: min_atol is the float32 value that passes numpy's float32 rule
        assert y.min_atol == pytest.approx(excess.max(), rel=1e-7)
        assert np.float32(y.min_atol) == y.min_atol
        nonzero = y_ref != 0
        assert y.max_rel == pytest.approx((diff[nonzero] / np.abs(y_ref[nonzero])).max(), rel=1e-6)
    # case 1: x[:, 1] = [2, -1, 0, .25, -4] -> the worst is row 4 (0.5 off)
    worst = report.cases[1].outputs[0]
    assert worst.worst_index == (4, 0) and worst.max_abs == 0.5 and worst.mismatches == 4
    assert report.summary.startswith(
        "2 cases, 4 outputs: 2 mismatches, worst (case test_data_set_1 output y:"
    )
    assert "max abs 5e-1 at [4, 0]" in report.summary


def test_references_from_a_folder(net: onnx.ModelProto, tmp_path) -> None:
    for i, case in enumerate(CASES):
        save_case(case, tmp_path, index=i)
    report = validate(net, tmp_path, provider="cpu")
    assert report and report.reference == str(tmp_path)
    assert [c.name for c in report.cases] == ["test_data_set_0", "test_data_set_1"]


def test_model_given_as_a_path(net: onnx.ModelProto, tmp_path) -> None:
    path = tmp_path / "net.onnx"
    onnx.save(net, path)
    assert validate(path, CASES, provider="cpu")
    assert validate(str(path), CASES, provider="cpu")


# -- inputs the model does not accept ------------------------------------------------------------


def test_size_the_model_does_not_accept_names_input_and_dims() -> None:
    static = parse(NET.replace("float[N, 3] x", "float[2, 3] x").replace("[N,", "[2,"))
    report = validate(static, CASES, provider="cpu")
    assert not report
    ok, bad = report.cases
    assert ok and not bad
    assert bad.error == "input 'x' expects dims [2, 3], got [5, 3]: axis 0 is fixed at 2, got 5"
    assert bad.outputs == []
    assert (
        "1 case did not run (test_data_set_1: input 'x' expects dims [2, 3], got [5, 3]"
        in report.summary
    )


def test_unknown_dims_written_as_minus_one_or_question_mark_take_any_size() -> None:
    """paddle2onnx declares [-1, 3, ?, ?]: ORT runs any size there, and so must validation."""
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Relu", ["x"], ["y"])],
        "paddle_dims",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [-1, 3, "?", "?"])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [-1, 3, "?", "?"])],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 13)])
    model.ir_version = 8
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)
    report = validate(model, [Case("c", {"x": x}, {"y": np.maximum(x, 0)})], provider="cpu")
    assert report, report.summary


def test_rank_mismatch() -> None:
    net = parse(NET)
    report = validate(net, [Case("c", {"x": X2[None]}, torch_like(X2))], provider="cpu")
    assert (
        report.cases[0].error == "input 'x' expects dims [N, 3], got [1, 2, 3] (rank 2, got rank 3)"
    )


def test_missing_input_is_a_data_error_naming_it(net: onnx.ModelProto) -> None:
    """A case that does not give a model input is a reference problem (exit 2), not a mismatch."""
    with pytest.raises(ReferenceDataError) as info:
        validate(net, [Case("c", {"other": X2}, torch_like(X2))], provider="cpu")
    assert "gives no value for model input 'x'" in str(info.value)
    assert "the case has other" in str(info.value)


def test_wrong_input_dtype_is_named(net: onnx.ModelProto) -> None:
    report = validate(
        net, [Case("c", {"x": X2.astype(np.float64)}, torch_like(X2))], provider="cpu"
    )
    assert report.cases[0].error == "input 'x': dtype float64, the model declares float32"


def test_extra_reference_inputs_are_ignored_with_a_note(net: onnx.ModelProto) -> None:
    case = Case("c", {"x": X2, "unused": np.zeros(2, np.float32)}, torch_like(X2))
    report = validate(net, [case, case], provider="cpu")
    assert report
    assert report.notes == ["reference input 'unused' is not a model input; ignored (2 cases)"]
    assert report.to_dict()["cases"][0]["notes"] == [
        "reference input 'unused' is not a model input; ignored"
    ]


def test_inconsistent_symbolic_dims_are_caught() -> None:
    two = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        two (float[N, 3] a, float[N, 3] b) => (float[N, 3] y) { y = Add(a, b) }
        """
    )
    case = Case("c", {"a": X2, "b": X5[:3]}, {"y": X2})
    report = validate(two, [case], provider="cpu")
    assert report.cases[0].error == (
        "input 'b' expects dims [N, 3], got [3, 3]: axis 0 is 'N' = 3, but 'a' axis 0 set 'N' = 2"
    )


def test_runtime_failure_is_a_per_case_failure_with_the_node() -> None:
    reshape = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        r (float[N, 3] x) => (float[2, M] y) <int64[2] s = {2, -1}> { y = Reshape <allowzero = 0> (x, s) }
        """
    )
    reshape.graph.node[0].name = "the_reshape"
    cases = [
        Case("even", {"x": X2}, {"y": X2.reshape(2, -1)}),
        Case("odd", {"x": X5}, {"y": np.zeros((2, 1), np.float32)}),  # 15 elements: no [2, -1]
    ]
    report = validate(reshape, cases, provider="cpu")
    even, odd = report.cases
    assert even and not odd
    assert odd.error.startswith("ONNX Runtime failed: ")
    assert odd.node == "the_reshape"
    assert "the_reshape" in odd.error


def test_model_ort_cannot_load_is_a_model_load_error() -> None:
    model = parse(NET)
    model.graph.node[0].op_type = "NoSuchOp"
    with pytest.raises(ModelLoadError, match="ONNX Runtime cannot load the model"):
        validate(model, CASES, provider="cpu")


# -- outputs ---------------------------------------------------------------------------------------


def test_outputs_missing_on_either_side_are_reported(net: onnx.ModelProto) -> None:
    case = Case("c", {"x": X2}, {"y": torch_like(X2)["y"], "extra": np.zeros(1, np.float32)})
    report = validate(net, [case], provider="cpu")
    by_name = {o.name: o for o in report.cases[0].outputs}
    assert by_name["y"]
    assert not by_name["z"] and by_name["z"].problem.startswith("model output with no reference")
    assert not by_name["extra"]
    assert (
        by_name["extra"].problem
        == "reference output the model does not produce (model outputs: y, z)"
    )


def test_output_map_is_applied_to_every_case() -> None:
    merged = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        merged (float[N, 3] x) => (float[N, 6] yz) {
            a = Relu(x)
            b = Neg(x)
            yz = Concat <axis = 1> (a, b)
        }
        """
    )
    cases = [
        Case(f"c{i}", {"x": x}, {"a": np.maximum(x, 0), "b": -x}) for i, x in enumerate((X2, X5))
    ]
    seen = []

    def concat_map(outputs):
        seen.append(sorted(outputs))
        return {"yz": np.concatenate([outputs["a"], outputs["b"]], axis=1)}

    assert validate(merged, cases, provider="cpu", output_map=concat_map)
    assert seen == [["a", "b"], ["a", "b"]]
    unmapped = validate(merged, cases, provider="cpu")
    assert not unmapped
    assert {o.name for o in unmapped.cases[0].outputs} == {"yz", "a", "b"}


def test_pass_context_map_outputs_is_accepted(net: onnx.ModelProto) -> None:
    ctx = PassContext(output_maps=[lambda o: {**o, "z": o["z"] * 1}])
    assert validate(net, CASES, provider="cpu", output_map=ctx.map_outputs)


def test_integer_outputs_are_exact_unless_a_tolerance_names_them() -> None:
    argmax = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        am (float[N, 3] x) => (int64[N] i) { i = ArgMax <axis = 1, keepdims = 0> (x) }
        """
    )
    wrong = Case("c", {"x": X2}, {"i": np.array([2, 1], np.int64)})  # ORT gives [2, 2]
    report = validate(argmax, [wrong], provider="cpu", atol=10, rtol=10)
    assert not report
    out = report.cases[0].outputs[0]
    assert out.tolerance_text() == "exact" and out.mismatches == 1 and out.worst_index == (1,)
    assert validate(argmax, [wrong], provider="cpu", tolerances={"i": (1, None)})


def test_per_output_tolerance_loosens_only_that_output(net: onnx.ModelProto) -> None:
    broken = with_weight_error(net, "W", (1, 0), 0.125)
    assert validate(broken, CASES, provider="cpu", tolerances={"y": (0.5, None)})
    report = validate(broken, CASES, provider="cpu", tolerances={"z": (0.5, None)})
    assert not report
    with pytest.raises(UsageError, match="'nope', which is neither a model output"):
        validate(net, CASES, provider="cpu", tolerances={"nope": (1, None)})


def test_bad_arguments(net: onnx.ModelProto, tmp_path) -> None:
    with pytest.raises(UsageError, match="atol must be a number >= 0"):
        validate(net, CASES, provider="cpu", atol=-1)
    with pytest.raises(ReferenceDataError, match="no reference cases"):
        validate(net, [], provider="cpu")
    with pytest.raises(ReferenceDataError, match="does not exist"):
        validate(net, tmp_path / "nothing", provider="cpu")
    with pytest.raises(UsageError, match="provider 'tpu'"):
        validate(net, CASES, provider="tpu")


# -- providers -------------------------------------------------------------------------------------

cuda_loads = _probe_cuda()[0]


@pytest.mark.skipif(cuda_loads, reason="CUDA loads on this machine")
def test_auto_falls_back_to_cpu_with_a_reason(net: onnx.ModelProto, capfd) -> None:
    report = validate(net, CASES, provider="auto")
    assert report
    assert report.provider.startswith("CPU (CUDA unavailable: ")
    assert len(report.provider.splitlines()) == 1
    captured = capfd.readouterr()
    assert captured.out == "" and captured.err == ""  # ORT's own log lines stay off the terminal


def test_a_machine_without_the_nvidia_driver_is_told_so_before_cuda_is_tried(monkeypatch) -> None:
    import sys

    from onnxsurgery.validation import runtime

    if sys.platform != "linux":
        pytest.skip("the driver's library is named for Linux here")
    monkeypatch.setitem(runtime._DRIVER_LIBRARY, "linux", "libnvidia-driver-absent.so.9")
    assert runtime._no_driver() == "the NVIDIA driver's libnvidia-driver-absent.so.9 is not found"
    monkeypatch.setitem(runtime._DRIVER_LIBRARY, "linux", "libc.so.6")  # a library that loads
    assert runtime._no_driver() is None


@pytest.mark.skipif(cuda_loads, reason="CUDA loads on this machine")
def test_cuda_raises_provider_error_here(net: onnx.ModelProto) -> None:
    with pytest.raises(ProviderError, match="CUDA cannot load here"):
        validate(net, CASES, provider="cuda")


@pytest.mark.skipif(not cuda_loads, reason="no CUDA here")
def test_cuda_validates(net: onnx.ModelProto) -> None:
    report = validate(net, CASES, provider="cuda")
    assert report and report.provider.startswith("CUDA")


# -- reports ---------------------------------------------------------------------------------------


def test_report_json_and_table(net: onnx.ModelProto) -> None:
    broken = with_weight_error(net, "W", (1, 0), 0.125)
    report = validate(broken, CASES, provider="cpu")
    data = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    assert data["passed"] is False and (data["atol"], data["rtol"]) == (1e-4, 1e-3)
    y = data["cases"][1]["outputs"][0]
    assert y["name"] == "y" and y["passed"] is False and y["worst_index"] == [4, 0]
    assert y["max_abs"] == 0.5 and y["mismatches"] == 4 and y["mismatch_percent"] == 40.0
    assert data["cases"][1]["inputs"] == {"x": {"shape": [5, 3], "dtype": "float32"}}
    console = Console(width=200, record=True, color_system=None)
    console.print(report)
    text = console.export_text()
    lines = [line.rstrip() for line in text.splitlines() if line.startswith(" test_data_set_")]
    assert len(lines) == 4
    assert lines[0].split()[:2] == ["test_data_set_1", "y"] and lines[0].endswith(
        "FAIL"
    )  # worst first
    assert lines[1].split()[:2] == ["test_data_set_0", "y"] and lines[1].endswith("FAIL")
    assert lines[-1].endswith("ok")
    assert "max rel" in text and "mean abs" in text  # wide terminal: every column
    assert "  test_data_set_1 y: 4/10 elements out of tolerance" in text  # why, under the table
    assert "FAIL: 2 cases, 4 outputs" in text
    assert "tolerance: atol 1e-4, rtol 1e-3 (fp32 defaults)" in text
    assert "runtime: CPU (asked for)" in text


def test_table_fits_a_narrow_terminal(net: onnx.ModelProto) -> None:
    report = validate(with_weight_error(net, "W", (1, 0), 0.125), CASES, provider="cpu")
    console = Console(width=80, record=True, color_system=None)
    console.print(report)
    text = console.export_text()
    assert all(len(line) <= 80 for line in text.splitlines())
    rows = [line for line in text.splitlines() if line.startswith(" test_data_set_")]
    assert len(rows) == 4 and not any("…" in row for row in rows)  # no cell cut short
    assert "max rel" not in text and "max abs" in text


def test_table_hides_passing_rows_beyond_max_rows(net: onnx.ModelProto) -> None:
    report = validate(net, CASES * 10, provider="cpu")
    report.max_rows = 5
    console = Console(width=200, record=True, color_system=None)
    console.print(report)
    text = console.export_text()
    assert "... 35 more passing output(s)" in text


# -- the validate pass -----------------------------------------------------------------------------


@pytest.fixture
def ref_dir(tmp_path):
    for i, case in enumerate(CASES):
        save_case(case, tmp_path / "ref", index=i)
    return tmp_path / "ref"


def test_validate_pass_leaves_the_model_unchanged(net: onnx.ModelProto, ref_dir) -> None:
    result = Validate(ref=str(ref_dir), provider="cpu")(net, PassContext())
    assert result.modified is False
    assert result.model is net
    assert isinstance(result.report, ValidationReport) and result.report
    assert Validate.validates is True


def test_validate_pass_raises_mismatch_with_the_report(net: onnx.ModelProto, ref_dir) -> None:
    broken = with_weight_error(net, "W", (1, 0), 0.125)
    with pytest.raises(ValidationMismatch) as info:
        Validate(ref=str(ref_dir), provider="cpu")(broken, PassContext())
    assert info.value.exit_code == 1
    assert isinstance(info.value.report, ValidationReport) and not info.value.report
    assert "output y" in str(info.value)


def test_validate_pass_per_output_options(net: onnx.ModelProto, ref_dir) -> None:
    broken = with_weight_error(net, "W", (1, 0), 0.125)
    p = onnxsurgery.create_pass("validate", {"atol.y": 0.5, "rtol.y": 0.0, "provider": "cpu"})
    assert p.tolerances == {"y": (0.5, 0.0)}
    assert p(broken, PassContext(references=ref_dir)).report


def test_validate_pass_uses_the_run_references_and_provider(net: onnx.ModelProto, ref_dir) -> None:
    result = Validate()(net, PassContext(references=ref_dir, provider="cpu"))
    assert result.report.provider == "CPU (asked for)"


def test_validate_pass_without_references(net: onnx.ModelProto) -> None:
    with pytest.raises(PassError, match=r"give validate\(ref=PATH\) or --ref PATH"):
        Validate()(net, PassContext())


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"atolx": 1}, "unknown option 'atolx'"),
        ({"atol": -1}, "atol must be a number >= 0"),
        ({"atol.y": "big"}, "atol.y must be a number"),
        ({"provider": "tpu"}, "provider must be one of"),
        ({"ref": "/no/such/folder"}, "does not exist"),
    ],
)
def test_validate_pass_option_errors(options, message) -> None:
    with pytest.raises(PassOptionError, match=message):
        onnxsurgery.create_pass("validate", options)


def test_pipeline_with_validate_pass_and_automatic_validation(
    net: onnx.ModelProto, ref_dir, tmp_path
) -> None:
    report = onnxsurgery.run(net, "cleanup, validate(provider=cpu)", references=ref_dir)
    assert report.validation and report.provider == "CPU (asked for)"
    auto = onnxsurgery.run(net, "cleanup", references=ref_dir, provider="cpu")
    assert auto.validation and auto.validation.summary.startswith("2 cases, 4 outputs: all match")
    broken = with_weight_error(net, "W", (1, 0), 0.125)
    out = tmp_path / "out.onnx"
    with pytest.raises(ValidationMismatch):
        onnxsurgery.run(broken, "cleanup", output=out, references=ref_dir, provider="cpu")
    assert not out.exists()


# -- two models ------------------------------------------------------------------------------------


def test_compare_models_on_random_inputs(net: onnx.ModelProto) -> None:
    report = compare_models(net, net, shapes={"x": [4, 3]}, cases=3, provider="cpu")
    assert report and [c.name for c in report.cases] == ["random_0", "random_1", "random_2"]
    assert report.cases[0].inputs == {"x": ([4, 3], "float32")}
    broken = with_weight_error(net, "W", (1, 0), 0.125)
    report = compare_models(broken, net, shapes={"x": [4, 3]}, seed=7, provider="cpu")
    assert not report
    y = report.cases[0].outputs[0]
    x = np.random.default_rng(7).standard_normal((4, 3), dtype=np.float32)
    assert y.name == "y" and y.max_abs == pytest.approx(0.125 * np.abs(x[:, 1]).max(), rel=1e-5)
    assert report.cases[0].outputs[1]  # z untouched


def test_compare_models_takes_sizes_from_the_static_model(net: onnx.ModelProto) -> None:
    static = parse(NET.replace("float[N, 3] x", "float[2, 3] x").replace("[N,", "[2,"))
    report = compare_models(net, static, provider="cpu")
    assert report and report.cases[0].inputs["x"][0] == [2, 3]
    with pytest.raises(
        UsageError, match=r"input 'x' axis 0 is symbolic \('N'\); give its size with --shape x:Nx3"
    ):
        compare_models(net, net, provider="cpu")
    with pytest.raises(UsageError, match="--shape given for 'y', not an input"):
        compare_models(net, net, shapes={"y": [1]}, provider="cpu")


def test_compare_models_on_stored_inputs(net: onnx.ModelProto, ref_dir) -> None:
    report = compare_models(net, net, feeds_or_cases=ref_dir, provider="cpu")
    assert report and [c.name for c in report.cases] == ["test_data_set_0", "test_data_set_1"]
    report = compare_models(net, net, feeds_or_cases={"x": X2}, provider="cpu")
    assert report and report.cases[0].name == "feeds_0"


def test_compare_models_reference_model_failure_is_per_case(net: onnx.ModelProto) -> None:
    static = parse(NET.replace("float[N, 3] x", "float[2, 3] x").replace("[N,", "[2,"))
    report = compare_models(net, static, feeds_or_cases=CASES, provider="cpu")
    assert report.cases[0] and not report.cases[1]
    assert report.cases[1].error.startswith(
        "reference model the other model: input 'x' expects dims [2, 3]"
    )


def test_compare_models_integer_inputs_in_a_safe_range() -> None:
    gather = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        g (int64[N] ids) => (float[N, 2] y)
        <float[4, 2] table = {0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0}>
        { y = Gather <axis = 0> (table, ids) }
        """
    )
    report = compare_models(gather, gather, shapes={"ids": [64]}, provider="cpu")
    assert report and report.cases[0].inputs["ids"] == ([64], "int64")


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("x:3x3x224x224", ("x", [3, 3, 224, 224])),
        ("input:0:1x2", ("input:0", [1, 2])),
        ("x:1,2", ("x", [1, 2])),
        ("x:", ("x", [])),
    ],
)
def test_parse_shape_spec(text, parsed) -> None:
    assert parse_shape_spec(text) == parsed


@pytest.mark.parametrize("text", ["x", ":3", "x:3xa", "x:-1"])
def test_parse_shape_spec_errors(text) -> None:
    with pytest.raises(UsageError, match="--shape"):
        parse_shape_spec(text)


def test_parse_tolerance_spec() -> None:
    assert parse_tolerance_spec("logits=1e-3") == ("logits", (1e-3, None))
    assert parse_tolerance_spec("logits=1e-3,1e-2") == ("logits", (1e-3, 1e-2))
    assert parse_tolerance_spec("logits=,1e-2") == ("logits", (None, 1e-2))
    for bad in ("logits", "logits=a", "logits=1,2,3", "logits=-1"):
        with pytest.raises(UsageError, match="--tol"):
            parse_tolerance_spec(bad)


def test_many_cases_keep_their_order_and_results(net: onnx.ModelProto) -> None:
    """Comparisons run beside the next case's inference: each case keeps its place and its own
    verdict whether it passed, mismatched or could not run."""
    rng = np.random.default_rng(3)
    cases = []
    for i in range(12):
        x = rng.standard_normal((1 + i % 4, 3)).astype(np.float32)
        outputs = torch_like(x)
        if i % 5 == 2:  # a mismatch on y
            outputs = {"y": outputs["y"] + np.float32(1.0), "z": outputs["z"]}
        if i == 7:  # cannot run: the wrong number of columns
            x = np.zeros((2, 4), np.float32)
        cases.append(Case(f"test_data_set_{i}", {"x": x}, outputs))
    report = validate(net, cases, provider="cpu")
    assert [c.name for c in report.cases] == [c.name for c in cases]
    for i, case in enumerate(report.cases):
        if i == 7:
            assert case.error and "x" in case.error and not case.outputs
            continue
        assert case.error is None
        y, z = case.outputs
        assert bool(z) and bool(y) == (i % 5 != 2), (i, y.describe())
        assert y.shape == (1 + i % 4, 2)


# -- reference cases read from disk one at a time ------------------------------------------------


def _big_cases(tmp_path, count: int, rows: int) -> list[Case]:
    rng = np.random.default_rng(11)
    cases = []
    for i in range(count):
        x = (rng.integers(-8, 8, (rows, 3)) / 4).astype(np.float32)  # exact in float32
        cases.append(Case(f"test_data_set_{i}", {"x": x}, torch_like(x)))
        save_case(cases[-1], tmp_path / "ref", index=i)
    return cases


def test_cases_from_disk_are_read_one_at_a_time(net: onnx.ModelProto, tmp_path) -> None:
    cases = _big_cases(tmp_path, 12, 40_000)  # 1.3 MiB per case, 16 MiB in all
    per_case = sum(a.nbytes for a in (*cases[0].inputs.values(), *cases[0].outputs.values()))
    seen = []
    tracemalloc.start()
    try:
        report = validate(
            net, tmp_path / "ref", provider="cpu", progress=lambda s, k, n: seen.append((k, n))
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report and len(report.cases) == 12 and report.reference == str(tmp_path / "ref")
    assert [c.name for c in report.cases] == [c.name for c in cases]
    assert seen == [(k, 12) for k in range(12)]
    # a case, the model's outputs for it, and the comparison's buffers: never all twelve cases
    assert peak < 4 * per_case, f"peak {peak / 2**20:.1f} MiB, one case {per_case / 2**20:.1f}"
    # the same figures as from the cases in memory
    in_memory = validate(net, cases, provider="cpu")
    assert [c.to_dict() | {"inference_seconds": 0, "compare_seconds": 0} for c in report.cases] == [
        c.to_dict() | {"inference_seconds": 0, "compare_seconds": 0} for c in in_memory.cases
    ]


def test_a_bad_case_file_read_late_is_still_a_reference_data_error(
    net: onnx.ModelProto, tmp_path
) -> None:
    _big_cases(tmp_path, 3, 4)
    bad = tmp_path / "ref" / "test_data_set_2" / "output_1.pb"
    bad.write_bytes(b"\xff\xff garbage")
    with pytest.raises(ReferenceDataError) as info:
        validate(net, tmp_path / "ref", provider="cpu")
    assert str(bad) in str(info.value)


def test_tolerance_for_a_reference_only_output_reads_every_case_first(
    net: onnx.ModelProto, tmp_path
) -> None:
    rng = np.random.default_rng(2)
    for i in range(2):
        x = rng.standard_normal((2, 3)).astype(np.float32)
        save_case(Case(f"c{i}", {"x": x}, {**torch_like(x), "aux": x}), tmp_path / "ref", index=i)
    report = validate(net, tmp_path / "ref", provider="cpu", tolerances={"aux": (1.0, None)})
    assert not report  # aux has no model output to compare with
    assert [o.name for o in report.cases[0].outputs] == ["y", "z", "aux"]
    with pytest.raises(UsageError, match="'nope'"):
        validate(net, tmp_path / "ref", provider="cpu", tolerances={"nope": (1.0, None)})


def test_random_inputs_size_symbols_from_shapes_then_the_other_model() -> None:
    """A symbol takes the size a given shape binds it to, else the fixed size the other model's
    same input declares; an optional input gets no feed; an axis nothing sizes is a UsageError
    naming the input and axis."""
    from onnxsurgery.model.signature import InputSpec
    from onnxsurgery.validation.feeds import random_inputs

    f32 = np.dtype(np.float32)
    specs = [
        InputSpec("x", f32, ("batch", 3)),
        InputSpec("m", f32, ("batch", "seq")),
        InputSpec("w", f32, (4,), optional=True),
    ]
    other = [InputSpec("m", f32, (2, 7))]
    rng = np.random.default_rng(0)
    feeds = random_inputs(specs, {"x": [5, 3]}, rng, fallback_specs=other)
    assert {k: v.shape for k, v in feeds.items()} == {"x": (5, 3), "m": (5, 7)}
    with pytest.raises(onnxsurgery.UsageError, match=r"input 'm' axis 1 is symbolic \('seq'\); give its size with --shape m:NxN"):
        random_inputs(specs, {"x": [5, 3]}, rng)
