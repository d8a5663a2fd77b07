"""The ONNX backend models shipped in the ``onnx`` wheel, through validate, run and compat.

Baseline (the oracle): ONNX Runtime runs the model on its stored inputs and matches its stored
outputs (``tests/backend_models.py``). Every model whose baseline passes must validate (exit 0)
and survive ``run --passes "cleanup, infer-shapes, fold-constants" --ref`` (exit 0, output
written, validated); every model ORT has no kernel for must load after ``compat`` and validate
against its stored outputs. ``make test`` runs a representative subset (IR 3, opset 6, unnamed
tensors, a light zoo net, a sequence of nodes from ``simple/``); all of them:
``make test-backend`` (``pytest -m backend``).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from backend_models import BackendModel, backend_models, baseline, cli, run_exit, validate_exit
from onnx import helper

from onnxsurgery.validation.references import Case, save_case
from onnxsurgery.validation.runtime import ort_limits

#: make test's share: IR-3 convs with unnamed tensors (cleanup used to break them), opset-6
#: models ORT has no kernel for, IR-3 with several inputs, IR 7+ from simple/, a light zoo net.
SUBSET = {
    "pytorch-converted/test_Conv2d",
    "pytorch-converted/test_Embedding",
    "pytorch-operator/test_operator_concat2",
    "pytorch-operator/test_operator_maxpool",
    "simple/test_single_relu_model",
    "simple/test_expand_shape_model1",
    "light/light_squeezenet",
    "light/light_resnet50",  # onnxsim folds its weights into float_data
}
COMPAT_SUBSET = {
    "pytorch-converted/test_BatchNorm2d_eval",
    "pytorch-converted/test_PReLU_2d_multiparam",
    "pytorch-operator/test_operator_addmm",
    "pytorch-operator/test_operator_pow",
}


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> list[BackendModel]:
    return backend_models(tmp_path_factory.mktemp("light"))


def _pick(models: list[BackendModel], labels: set[str] | None) -> list[BackendModel]:
    picked = [m for m in models if labels is None or m.label in labels]
    if labels is not None:
        assert {m.label for m in picked} == labels, "a subset model is missing from the wheel"
    return picked


def _check_all(models: list[BackendModel], tmp_path) -> list[str]:
    """Every baseline-passing model through validate and run; the failures, as lines."""
    problems = []
    ran = 0
    for m in models:
        if baseline(m) is not None:
            continue
        ran += 1
        code, line = validate_exit(m)
        if code != 0:
            problems.append(f"validate {m.label}: exit {code}: {line}")
        code, line = run_exit(m, tmp_path)
        if code != 0:
            problems.append(f"run {m.label}: exit {code}: {line}")
    assert ran, "no backend model passed its baseline: the oracle itself is broken"
    return problems


def _compat_all(models: list[BackendModel], tmp_path) -> tuple[int, list[str]]:
    problems, tried = [], 0
    for m in models:
        why = baseline(m)
        if why is None or "NOT_IMPLEMENTED" not in why:
            continue
        tried += 1
        out = tmp_path / f"compat-{m.kind}-{m.name}.onnx"
        code, line = cli("run", m.model, "-o", out, "--passes", "compat", "--ref", m.directory,
                         "--provider", "cpu", "-q")  # fmt: skip
        if code != 0:
            problems.append(f"compat {m.label}: exit {code}: {line}")
            continue
        code, line = cli("validate", out, "--ref", m.directory, "--provider", "cpu", "-q")
        if code != 0:
            problems.append(f"validate after compat {m.label}: exit {code}: {line}")
    return tried, problems


def test_subset_validates_and_survives_the_pass_chain(models, tmp_path):
    picked = _pick(models, SUBSET)
    assert all(baseline(m) is None for m in picked), [baseline(m) for m in picked]
    assert _check_all(picked, tmp_path) == []


def test_subset_compat_brings_opset_6_models_onto_ort(models, tmp_path):
    picked = _pick(models, COMPAT_SUBSET)
    tried, problems = _compat_all(picked, tmp_path)
    assert tried == len(COMPAT_SUBSET) and problems == []


@pytest.mark.backend
def test_every_backend_model_ort_runs_validates_and_survives_the_chain(models, tmp_path):
    problems = _check_all(models, tmp_path)
    assert problems == [], "\n".join(problems)


@pytest.mark.backend
def test_compat_brings_every_opset_6_model_onto_ort(models, tmp_path):
    tried, problems = _compat_all(models, tmp_path)
    assert tried >= 30, f"only {tried} models lacked an ORT kernel: the oracle changed"
    assert problems == [], "\n".join(problems)


# -- reference binding ----------------------------------------------------------------------------


def test_unbindable_reference_is_exit_2_naming_the_case(models, tmp_path):
    """input_K.pb without names but a count the model does not have: a data problem, exit 2."""
    m = next(m for m in models if m.label == "pytorch-converted/test_Conv2d")
    case = tmp_path / "refs" / "test_data_set_0"
    case.mkdir(parents=True)
    for k in range(2):  # the model has one input that is not an initializer
        (case / f"input_{k}.pb").write_bytes((m.directory / "test_data_set_0" / "input_0.pb").read_bytes())
    (case / "output_0.pb").write_bytes((m.directory / "test_data_set_0" / "output_0.pb").read_bytes())
    code, line = cli("validate", m.model, "--ref", tmp_path / "refs", "--provider", "cpu")
    assert code == 2
    assert str(case) in line and "input_0.pb, input_1.pb have no tensor name" in line
    assert "cannot bind them by position" in line


def test_ir3_initializer_inputs_are_never_fed(models, tmp_path):
    """A case naming a weight that IR 3 lists as an input: the weight is the model's, not fed."""
    m = next(m for m in models if m.label == "pytorch-converted/test_Conv2d")
    model = onnx.load(m.model)
    assert model.ir_version < 4
    inits = {t.name for t in model.graph.initializer}
    weight = next(i for i in model.graph.input if i.name in inits)
    real = next(i for i in model.graph.input if i.name not in inits)
    stored = onnx.numpy_helper.to_array(onnx.load_tensor(str(m.directory / "test_data_set_0" / "input_0.pb")))
    out = onnx.numpy_helper.to_array(onnx.load_tensor(str(m.directory / "test_data_set_0" / "output_0.pb")))
    shape = [d.dim_value for d in weight.type.tensor_type.shape.dim]
    save_case(
        Case("c", {real.name: stored, weight.name: np.zeros(shape, np.float32)},
             {model.graph.output[0].name: out}),
        tmp_path / "refs",
    )  # fmt: skip
    code, line = cli("validate", m.model, "--ref", tmp_path / "refs", "--provider", "cpu")
    assert code == 0, line


# -- IR newer than ORT ----------------------------------------------------------------------------


def test_model_from_onnx_helper_newer_than_ort_validates_after_compat(tmp_path):
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["y"])],
        "newest",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 3])],
    )
    model = helper.make_model(graph)  # onnx's newest IR and opset
    limits = ort_limits()
    if model.ir_version <= limits.ir_version and model.opset_import[0].version <= limits.opset:
        pytest.skip("the installed onnxruntime loads onnx's newest IR and opset")
    src = tmp_path / "newest.onnx"
    onnx.save(model, src)
    x = np.array([[1, -2, 3], [-4, 5, -6]], np.float32)
    save_case(Case("c", {"x": x}, {"y": -np.maximum(x, 0)}), tmp_path / "refs")

    code, line = cli("validate", src, "--ref", tmp_path / "refs", "--provider", "cpu")
    assert code == 2
    assert "newer than onnxruntime" in line and "--passes compat" in line
    code, line = cli("run", src, "-o", tmp_path / "x.onnx", "--passes", "cleanup", "--ref",
                     tmp_path / "refs", "--provider", "cpu")  # fmt: skip
    assert code == 2 and "newer than onnxruntime" in line and "--passes compat" in line

    out = tmp_path / "compat.onnx"
    code, line = cli("run", src, "-o", out, "--passes", "compat", "--provider", "cpu")
    assert code == 0, line
    converted = onnx.load(out)
    assert converted.ir_version == limits.ir_version
    assert converted.opset_import[0].version <= limits.opset
    code, line = cli("validate", out, "--ref", tmp_path / "refs", "--provider", "cpu")
    assert code == 0, line


def test_compat_names_what_needs_the_newer_ir(tmp_path):
    limits = ort_limits()
    newer = [(name, ir) for name, ir in (("FLOAT6E2M3", 14), ("UINT2", 13), ("FLOAT8E8M0", 12))
             if hasattr(onnx.TensorProto, name) and ir > limits.ir_version]  # fmt: skip
    if not newer:
        pytest.skip("the installed onnxruntime loads every element type onnx knows")
    name, ir = newer[0]
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["c"], to=getattr(onnx.TensorProto, name)),
         helper.make_node("Cast", ["c"], ["y"], to=onnx.TensorProto.FLOAT)],
        "needs_new_ir",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", limits.opset)])
    model.ir_version = ir
    src = tmp_path / "needs.onnx"
    onnx.save(model, src)
    code, line = cli("run", src, "-o", tmp_path / "out.onnx", "--passes", "compat", "--provider", "cpu")
    assert code == 2
    assert f"IR version {ir} cannot be lowered to {limits.ir_version}" in line
    assert f"makes {name}" in line
    assert not (tmp_path / "out.onnx").exists()
