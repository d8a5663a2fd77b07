"""The checker, shape inference and ORT sessions see models without their weights' data.

Oracles: onnx's own checker and shape inference on the full model, and an ORT session built
from the full model's bytes; the weightless forms must give the same verdicts, shapes and outputs.
"""

from __future__ import annotations

import dataclasses
import gc
import tempfile
import types
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from google.protobuf.message import Message
from onnx import TensorProto, helper, numpy_helper

from onnxsurgery import load_model
from onnxsurgery.errors import ModelLoadError
from onnxsurgery.model.io import (
    PLACEHOLDER,
    adopt_graph,
    check_model,
    infer_shapes,
    tensor_nbytes,
    weightless,
)
from onnxsurgery.passes.cleanup import Cleanup
from onnxsurgery.passes.symbolize import Symbolize
from onnxsurgery.validation.mapped_weights import DiskWeight, FileWeight
from onnxsurgery.validation.runtime import create_session, goes_by_path, session_weights
from onnxsurgery.validation.session_weights import split_weights

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
REAL_MODELS = sorted(FIXTURES.glob("*/torchscript/model.onnx"))[:6]


def mixed_weights_model() -> onnx.ModelProto:
    """x[2, 64] through float32, float16, bfloat16 and int64 weights, all over 1 KiB."""
    rng = np.random.default_rng(0)
    w32 = numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "w32")
    w16 = numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float16), "w16")
    bits = (rng.standard_normal(64 * 64).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    wbf = helper.make_tensor("wbf", TensorProto.BFLOAT16, [64, 64], bits.tobytes(), raw=True)
    idx = numpy_helper.from_array(np.arange(64, dtype=np.int64)[::-1].copy(), "idx")
    nodes = [
        helper.make_node("MatMul", ["x", "w32"], ["a"]),
        helper.make_node("Cast", ["a"], ["a16"], to=TensorProto.FLOAT16),
        helper.make_node("MatMul", ["a16", "w16"], ["b16"]),
        helper.make_node("Cast", ["b16"], ["b"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["wbf"], ["wf"], to=TensorProto.FLOAT),
        helper.make_node("MatMul", ["b", "wf"], ["c"]),
        helper.make_node("Gather", ["c", "idx"], ["y"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "mixed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64])],
        [w32, w16, wbf, idx],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def one_matmul(
    inputs: list[str], weight: TensorProto, x_shape: list[int], y_shape: list[int]
) -> onnx.ModelProto:
    """``y = MatMul(*inputs)`` over input ``x`` and the initializer ``weight`` (opset 17, IR 8)."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", inputs, ["y"])],
        "one_matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_only_large_float_weights_lose_their_data():
    model = mixed_weights_model()
    bare = weightless(model)
    kinds = {t.name: t.data_location for t in bare.graph.initializer}
    assert kinds == {
        "w32": TensorProto.EXTERNAL,
        "w16": TensorProto.EXTERNAL,
        "wbf": TensorProto.EXTERNAL,
        "idx": TensorProto.DEFAULT,  # integers may be read as shapes: kept whole
    }
    for stub, tensor in zip(bare.graph.initializer, model.graph.initializer, strict=True):
        assert (stub.name, list(stub.dims), stub.data_type) == (
            tensor.name, list(tensor.dims), tensor.data_type
        )
        if stub.data_location == TensorProto.EXTERNAL:
            assert stub.external_data[0].value == PLACEHOLDER
            assert tensor_nbytes(stub) == tensor_nbytes(tensor)
    assert bare.ByteSize() < model.ByteSize() / 10


def test_a_weight_of_the_wrong_size_keeps_its_data_and_the_checker_says_so():
    model = mixed_weights_model()
    model.graph.initializer[0].raw_data = b"\0" * 100
    assert weightless(model).graph.initializer[0].raw_data == b"\0" * 100
    with pytest.raises(ModelLoadError, match=r"w32.*raw_data size \(100 bytes\) is too small"):
        check_model(model)
    with pytest.raises(onnx.checker.ValidationError, match="too small"):
        onnx.checker.check_model(model)  # the oracle agrees


@pytest.mark.parametrize("field", ["doc_string", "metadata_props", "segment"])
def test_a_weight_with_any_other_field_set_keeps_it_whole(field):
    # The placeholder carries name, type, dims and location only: a weight with anything more
    # stays as it is, so nothing of it is lost to the checker or to a session.
    model = mixed_weights_model()
    tensor = model.graph.initializer[0]
    if field == "doc_string":
        tensor.doc_string = "a note"
    elif field == "metadata_props":
        tensor.metadata_props.add(key="k", value="v")
    else:
        tensor.segment.begin, tensor.segment.end = 0, 64
    kept = weightless(model).graph.initializer[0]
    assert kept.SerializeToString() == tensor.SerializeToString()
    assert weightless(model).graph.initializer[1].data_location == TensorProto.EXTERNAL


def test_a_weight_held_in_float_data_keeps_it_and_runs():
    """float_data (packed) serializes to as many bytes as raw_data would: it is not raw_data.
    onnxsim writes folded weights that way (light_resnet50 of the onnx wheel)."""
    w = np.arange(64 * 147, dtype=np.float32).reshape(64, 147) / 1000  # 37 KB: over the threshold
    init = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=w.shape)
    init.float_data.extend(w.ravel().tolist())
    model = one_matmul(["w", "x"], init, [147, 2], [64, 2])
    assert list(weightless(model).graph.initializer[0].float_data) == list(init.float_data)
    x = np.ones((147, 2), np.float32)
    (y,) = create_session(model, "cpu").run(None, {"x": x})
    np.testing.assert_allclose(y, w @ x, rtol=1e-6)


def test_checker_verdicts_match_onnx_on_the_full_model():
    model = mixed_weights_model()
    onnx.checker.check_model(model)
    check_model(model)
    broken = mixed_weights_model()
    broken.graph.node[0].input[1] = "nowhere"
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(broken)
    with pytest.raises(ModelLoadError, match="nowhere"):
        check_model(broken)


@pytest.mark.parametrize("path", REAL_MODELS, ids=lambda p: p.parent.parent.name)
def test_shape_inference_is_the_same_as_on_the_full_model(path):
    model = onnx.load(str(path))
    ours = infer_shapes(model)
    full = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    assert ours.SerializeToString(deterministic=True) == full.SerializeToString(deterministic=True)


def test_adopt_graph_is_copy_then_replace_graph():
    model = mixed_weights_model()
    model.producer_name = "me"
    model.metadata_props.add(key="k", value="v")
    other = helper.make_model(helper.make_graph([], "other", [], []), producer_name="gs")
    expected = onnx.ModelProto()
    expected.CopyFrom(model)
    expected.graph.CopyFrom(other.graph)
    assert adopt_graph(model, other).SerializeToString(deterministic=True) == (
        expected.SerializeToString(deterministic=True)
    )


@pytest.mark.parametrize("path", REAL_MODELS[:3], ids=lambda p: p.parent.parent.name)
def test_sessions_with_weights_as_ortvalues_match_sessions_from_bytes(path):
    for model in (mixed_weights_model(), onnx.load(str(path))):
        ours = create_session(model, "cpu")
        ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(1)
        feeds = {}
        for i in ref.get_inputs():
            shape = [d if isinstance(d, int) else 2 for d in i.shape]
            feeds[i.name] = (
                rng.integers(0, 3, shape).astype(np.int64)
                if "int64" in i.type
                else rng.standard_normal(shape).astype(np.float32)
            )
        for got, want in zip(ours.run(None, feeds), ref.run(None, feeds), strict=True):
            np.testing.assert_array_equal(got, want)


def test_weights_read_from_external_data_lose_theirs_too(tmp_path):
    # onnx sets data_location = DEFAULT on the tensors it loads from external data: those are
    # the weights of the models over 2 GB, whose weightless copy must stay small.
    path = tmp_path / "m.onnx"
    onnx.save(mixed_weights_model(), str(path), save_as_external_data=True, size_threshold=0)
    model = load_model(path)
    assert all(t.HasField("data_location") for t in model.graph.initializer)
    bare = weightless(model)
    assert [t.data_location for t in bare.graph.initializer] == [TensorProto.EXTERNAL] * 3 + [
        TensorProto.DEFAULT
    ]
    assert bare.ByteSize() < model.ByteSize() / 10


def test_cleanup_on_a_weightless_copy_keeps_every_kept_weight_and_leaves_the_input_alone():
    # cleanup runs graphsurgeon on a weightless copy and puts the kept weights back: the output
    # must run like the original (ORT on the original model is the oracle), carry no
    # placeholder, drop the dead weight, and the input model must come out byte for byte as it went in.
    model = mixed_weights_model()
    rng = np.random.default_rng(2)
    dead = numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "dead_w")
    model.graph.initializer.append(dead)
    model.graph.node.append(helper.make_node("MatMul", ["x", "dead_w"], ["dead"]))
    shift = numpy_helper.from_array(np.full((2, 64), 0.5, np.float32))
    model.graph.node.insert(0, helper.make_node("Constant", [], ["shift"], value=shift))
    model.graph.node.append(helper.make_node("Add", ["y", "shift"], ["z"]))
    model.graph.output[0].name = "z"
    before = model.SerializeToString(deterministic=True)

    result = Cleanup()(model)

    assert model.SerializeToString(deterministic=True) == before
    assert result.modified
    assert [t.name for t in result.model.graph.initializer] == ["w32", "w16", "wbf", "idx"]
    assert not any(t.external_data for t in result.model.graph.initializer)
    x = rng.standard_normal((2, 64)).astype(np.float32)
    ref = ort.InferenceSession(before, providers=["CPUExecutionProvider"])
    got = ort.InferenceSession(
        result.model.SerializeToString(), providers=["CPUExecutionProvider"]
    ).run(None, {"x": x})
    np.testing.assert_array_equal(got[0], ref.run(None, {"x": x})[0])


def test_a_session_sharing_weights_with_another_runs_its_own_model():
    # A rewritten model beside its original: equal weights are one buffer, a changed one is its
    # own; each session must still compute its own model (oracle: sessions from the bytes).
    model = mixed_weights_model()
    changed = onnx.ModelProto()
    changed.CopyFrom(model)
    w16 = numpy_helper.to_array(changed.graph.initializer[1])
    changed.graph.initializer[1].CopyFrom(numpy_helper.from_array(w16 * 2, "w16"))
    first = create_session(model, "cpu")
    second = create_session(changed, "cpu", share_with=first)
    assert second._onnxsurgery_weights["w32"] is first._onnxsurgery_weights["w32"]
    assert second._onnxsurgery_weights["w16"] is not first._onnxsurgery_weights["w16"]
    x = {"x": np.random.default_rng(3).standard_normal((2, 64)).astype(np.float32)}
    for session, m in ((first, model), (second, changed)):
        ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        np.testing.assert_array_equal(session.run(None, x)[0], ref.run(None, x)[0])


def test_a_weightless_copy_runs_on_the_weights_another_session_left():
    # The check builds its rewritten model's session from a weightless copy once the original's
    # session is gone: each placeholder takes the shared weight of its name (oracle: a session
    # from the full model's bytes); a placeholder nothing fills is refused, never run on zeros.
    model = mixed_weights_model()
    first = create_session(model, "cpu", prepack=False)
    shared = session_weights(first)
    del first
    second = create_session(weightless(model), "cpu", prepack=False, share_with=shared)
    assert second._onnxsurgery_weights["w32"] is shared["w32"][1]
    x = {"x": np.random.default_rng(4).standard_normal((2, 64)).astype(np.float32)}
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(second.run(None, x)[0], ref.run(None, x)[0])
    with pytest.raises(ValueError, match="'w32' is a placeholder no shared weight fills"):
        create_session(weightless(model), "cpu", share_with={})


def test_a_placeholder_takes_a_shared_weight_on_disk_of_its_type_and_dims_only(tmp_path):
    # A weightless copy's placeholder filled by a weight an earlier session mapped from its data
    # file is named where that weight lies, and the session computes on those bytes (oracle: a
    # session from the full model's bytes). One of other dims is refused, and so is a weight in
    # a mapped file (a session maps one folder): never run on the wrong bytes.
    w = numpy_helper.from_array(np.random.default_rng(7).standard_normal((64, 64), np.float32), "w")
    model = one_matmul(["x", "w"], w, [2, 64], [2, 64])
    (tmp_path / "w.data").write_bytes(b"\0" * 16 + w.raw_data)
    fits = DiskWeight(str(tmp_path / "w.data"), 16, 64 * 64 * 4, TensorProto.FLOAT, (64, 64))

    bare, weights, arrays, folder = split_weights(weightless(model), {"w": fits})

    assert (weights, arrays, folder) == ({}, {"w": fits}, str(tmp_path))
    entries = {e.key: e.value for e in bare.graph.initializer[0].external_data}
    assert entries == {"location": "w.data", "offset": "16", "length": "16384"}
    session = create_session(weightless(model), "cpu", share_with={"w": fits})
    x = {"x": np.random.default_rng(8).standard_normal((2, 64)).astype(np.float32)}
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(session.run(None, x)[0], ref.run(None, x)[0])
    other = dataclasses.replace(fits, dims=(32, 128))
    with pytest.raises(ValueError, match="'w' is a placeholder no shared weight fills"):
        split_weights(weightless(model), {"w": other})
    held = tempfile.TemporaryDirectory()
    mapped = FileWeight(held, "model0.data", 0, 64 * 64 * 4, TensorProto.FLOAT, (64, 64))
    with pytest.raises(ValueError, match="'w' lies in a mapped file"):
        split_weights(weightless(model), {"w": mapped})
    held.cleanup()


def test_symbolize_checks_a_model_with_weights_of_every_float_type():
    # The rewrite edits a weightless copy and the check runs it on the original's weights,
    # bfloat16 ones (no OrtValue here) included; the result carries every weight's bytes.
    model = mixed_weights_model()
    shape = numpy_helper.from_array(np.array([2, 8, 8], dtype=np.int64), "shape")
    model.graph.initializer.append(shape)
    model.graph.node.append(helper.make_node("Reshape", ["y", "shape"], ["z"]))
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 8, 8]))
    before = {t.name: t.SerializeToString() for t in model.graph.initializer}

    result = Symbolize(**{"x:0": "batch"})(model)

    assert "batch: rows" in str(result.diagnostics)
    after = {t.name: t for t in result.model.graph.initializer}
    for name in ("w32", "w16", "wbf", "idx"):
        assert after[name].SerializeToString() == before[name]
    x = {"x": np.random.default_rng(5).standard_normal((3, 64)).astype(np.float32)}
    got = ort.InferenceSession(result.model.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = np.concatenate([ref.run(None, {"x": x["x"][i : i + 2]})[0] for i in (0, 1)])
    np.testing.assert_allclose(got.run(None, x)[0][[0, 1, 2]], want[[0, 1, 3]], rtol=1e-5)


def test_symbolize_report_keeps_no_part_of_the_input_model():
    # The report outlives the pass; any node or tensor of the input it held would keep every
    # weight of the input alive (protobuf frees a model only with its last part).
    model = mixed_weights_model()
    shape = numpy_helper.from_array(np.array([2, 8, 8], dtype=np.int64), "shape")
    model.graph.initializer.append(shape)
    model.graph.node.append(helper.make_node("Reshape", ["y", "shape"], ["z"]))
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 8, 8]))
    plan = Symbolize(**{"x:0": "batch"})(model).report
    seen, stack, messages = set(), [plan], []
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (str, bytes, int, float, np.ndarray, type)):
            continue  # a class leads to its module and every object of the test session
        if isinstance(obj, (types.ModuleType, types.FunctionType, types.MethodType)):
            continue
        seen.add(id(obj))
        if isinstance(obj, Message):
            messages.append(obj)
            continue
        stack.extend(gc.get_referents(obj))
    assert messages == [plan.analysis.model]  # a weightless copy
    assert not any(t.raw_data for t in plan.analysis.model.graph.initializer if t.name == "w32")


def test_symbolize_over_the_protobuf_limit_checks_a_full_copy(monkeypatch):
    # Over 2 GB even without its float weights, a model reaches ORT by path, weights and all,
    # so the rewrite edits a full copy (the limit is lowered here; oracle: the same model made
    # below the limit, byte for byte).
    import onnxsurgery.model.tensors as tensors

    def model():
        m = mixed_weights_model()
        m.graph.initializer.append(numpy_helper.from_array(np.array([2, 8, 8], np.int64), "shape"))
        m.graph.node.append(helper.make_node("Reshape", ["y", "shape"], ["z"]))
        m.graph.output[0].CopyFrom(helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 8, 8]))
        return m

    small = Symbolize(**{"x:0": "batch"})(model())
    monkeypatch.setattr(tensors, "LARGE_MODEL_BYTES", 1024)
    large = Symbolize(**{"x:0": "batch"})(model())
    assert "batch: rows" in str(large.diagnostics)
    assert large.model.SerializeToString() == small.model.SerializeToString()


def test_a_weightless_copy_of_a_model_over_the_limit_is_one_small_message(monkeypatch):
    # A model over 2 GB in float weights: its weightless copy carries none of them, so the
    # checker, shape inference, the rewrite and ORT's session take it as one message (before,
    # the placeholders' lengths counted and every such step went by path with a full copy).
    # The limit is lowered here; oracle: the same model symbolized below the limit.
    import onnxsurgery.model.tensors as tensors

    def model():
        rng = np.random.default_rng(1)
        w = numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "w")
        return one_matmul(["x", "w"], w, [2, 64], [2, 64])

    small = Symbolize(**{"x:0": "batch"})(model())
    monkeypatch.setattr(tensors, "LARGE_MODEL_BYTES", 1024)
    assert tensors.is_large(model())
    assert not tensors.is_large(weightless(model()))
    assert not goes_by_path(model()) and not goes_by_path(weightless(model()))
    large = Symbolize(**{"x:0": "batch"})(model())
    assert "batch: rows" in str(large.diagnostics)
    assert large.model.SerializeToString() == small.model.SerializeToString()


def test_a_model_over_the_limit_runs_on_weights_ort_maps_from_one_file(monkeypatch):
    # Over 2 GB, weights handed as OrtValues cost numpy's copy and ORT's beside the model's own:
    # the session maps them from a data file instead, and a weightless copy's session (the
    # check's rewritten model) maps the same file, no second one written. The limit is lowered
    # here; oracle: sessions from the full model's bytes.
    import onnxsurgery.model.tensors as tensors

    model = mixed_weights_model()
    x = {"x": np.random.default_rng(6).standard_normal((2, 64)).astype(np.float32)}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = want.run(None, x)[0]
    monkeypatch.setattr(tensors, "LARGE_MODEL_BYTES", 1024)
    first = create_session(model, "cpu", prepack=False)
    shared = session_weights(first)
    folder = Path(shared["w32"].folder.name)
    assert {w.location for w in shared.values()} == {"model0.data"}
    np.testing.assert_array_equal(first.run(None, x)[0], want)
    del first
    second = create_session(weightless(model), "cpu", prepack=False, share_with=shared)
    assert sorted(p.name for p in folder.iterdir()) == ["model0.data", "model0.onnx", "model1.onnx"]
    np.testing.assert_array_equal(second.run(None, x)[0], want)
    bad = weightless(model)
    bad.graph.initializer[0].dims[:] = [32, 128]
    with pytest.raises(ValueError, match="'w32' is a placeholder no shared weight fills"):
        create_session(bad, "cpu", share_with=shared)
    del second, shared
    gc.collect()
    assert not folder.exists()


def test_a_session_built_from_a_weightless_copy_made_already_leaves_it_as_it_was():
    # symbolize makes one weightless copy and hands it to the check's first session instead of
    # a second one being made (oracle: a session from the full model's bytes).
    model = mixed_weights_model()
    bare = weightless(model)
    before = bare.SerializeToString()
    session = create_session(model, "cpu", bare=bare)
    assert bare.SerializeToString() == before
    x = {"x": np.random.default_rng(7).standard_normal((2, 64)).astype(np.float32)}
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(session.run(None, x)[0], ref.run(None, x)[0])


def test_a_session_asked_for_mapped_weights_maps_them_from_the_size_on(monkeypatch):
    # The check asks for mapped weights: from MAPPED_BYTES on (lowered here) its sessions map a
    # file, below it they take OrtValues; outputs alike (oracle: a session from the bytes).
    import onnxsurgery.validation.runtime as runtime

    model = mixed_weights_model()
    x = {"x": np.random.default_rng(8).standard_normal((2, 64)).astype(np.float32)}
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = ref.run(None, x)[0]
    small = create_session(model, "cpu", mapped=True)
    assert isinstance(session_weights(small)["w32"], tuple)
    monkeypatch.setattr(runtime, "MAPPED_BYTES", 1024)
    assert isinstance(session_weights(create_session(model, "cpu"))["w32"], tuple)
    first = create_session(model, "cpu", mapped=True)
    assert isinstance(session_weights(first)["w32"], FileWeight)
    second = create_session(weightless(model), "cpu", share_with=first)
    for session in (small, first, second):
        np.testing.assert_array_equal(session.run(None, x)[0], want)


def test_mapped_weights_go_to_the_system_temp_folder_where_the_memory_one_fails(monkeypatch, tmp_path):
    # The data file goes to /dev/shm where it fits; where making it there fails, it goes to the
    # system's temporary folder and the session runs the same (oracle: a session from the bytes).
    import tempfile

    import onnxsurgery.validation.mapped_weights as mapped
    import onnxsurgery.validation.runtime as runtime

    model = mixed_weights_model()
    x = {"x": np.random.default_rng(9).standard_normal((2, 64)).astype(np.float32)}
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    monkeypatch.setattr(runtime, "MAPPED_BYTES", 1024)
    monkeypatch.setattr(mapped, "_folder_for", lambda size: str(tmp_path / "missing"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    session = create_session(model, "cpu", mapped=True)
    folder = Path(session_weights(session)["w32"].folder.name)
    assert folder.parent == tmp_path
    np.testing.assert_array_equal(session.run(None, x)[0], ref.run(None, x)[0])
