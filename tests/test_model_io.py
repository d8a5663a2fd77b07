"""Loading and saving: every bad file is one clear ModelLoadError; saves are atomic and identical."""

from __future__ import annotations

import hashlib

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from onnxsurgery import load_model, save_model
from onnxsurgery.errors import ModelLoadError, ModelSaveError
from onnxsurgery.model.io import read_model_file


def weighted_model(n: int = 4096) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.arange(n, dtype=np.float32).reshape(-1, 4), "w")
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, n // 4])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 4])],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_missing_file(tmp_path):
    with pytest.raises(ModelLoadError, match=r"nope\.onnx: no such file"):
        load_model(tmp_path / "nope.onnx")


def test_directory(tmp_path):
    with pytest.raises(ModelLoadError, match="is a directory"):
        load_model(tmp_path)


def test_empty_file(tmp_path):
    (tmp_path / "e.onnx").write_bytes(b"")
    with pytest.raises(ModelLoadError, match=r"is empty \(0 bytes\)"):
        load_model(tmp_path / "e.onnx")


@pytest.mark.parametrize("seed", range(5))
def test_random_bytes(tmp_path, seed):
    path = tmp_path / "r.onnx"
    path.write_bytes(np.random.default_rng(seed).bytes(3000))
    with pytest.raises(ModelLoadError, match="not an ONNX model"):
        load_model(path)


@pytest.mark.parametrize("keep", [0.3, 0.6, 0.9])
def test_truncated_model(tmp_path, keep):
    data = weighted_model().SerializeToString()
    path = tmp_path / "t.onnx"
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(ModelLoadError, match=r"t\.onnx: (not an ONNX model|fails the ONNX checker)"):
        load_model(path)


def test_checker_failure(tmp_path):
    model = weighted_model()
    model.graph.node[0].input[1] = "undefined_tensor"
    path = tmp_path / "c.onnx"
    path.write_bytes(model.SerializeToString())
    with pytest.raises(ModelLoadError, match=r"c\.onnx: fails the ONNX checker: .*undefined_tensor"):
        load_model(path)


def test_save_is_byte_identical_and_round_trips(tmp_path):
    model = weighted_model()
    a, b = save_model(model, tmp_path / "a.onnx"), save_model(model, tmp_path / "b.onnx")
    assert hashlib.sha256(a.read_bytes()).digest() == hashlib.sha256(b.read_bytes()).digest()
    assert load_model(a) == model
    assert [p.name for p in tmp_path.iterdir()] == sorted(["a.onnx", "b.onnx"]) or len(list(tmp_path.iterdir())) == 2


def test_external_data_round_trip(tmp_path):
    model = weighted_model()
    path = save_model(model, tmp_path / "m.onnx", external_data=True)
    assert (tmp_path / "m.onnx.data").stat().st_size == 4096 * 4
    assert path.stat().st_size < 1000
    loaded = read_model_file(path)
    assert loaded.external_data
    np.testing.assert_array_equal(
        numpy_helper.to_array(loaded.model.graph.initializer[0]), np.arange(4096, dtype=np.float32).reshape(-1, 4)
    )
    # Saving again gives the same bytes (model and data).
    again = save_model(loaded.model, tmp_path / "n.onnx", external_data=True)
    assert (tmp_path / "n.onnx.data").read_bytes() == (tmp_path / "m.onnx.data").read_bytes()
    assert again.read_bytes() == path.read_bytes().replace(b"m.onnx.data", b"n.onnx.data")


def test_missing_external_data(tmp_path):
    path = save_model(weighted_model(), tmp_path / "m.onnx", external_data=True)
    (tmp_path / "m.onnx.data").unlink()
    with pytest.raises(ModelLoadError, match=r"initializer 'w' keeps its data in 'm\.onnx\.data', which does not exist"):
        load_model(path)


@pytest.mark.parametrize(("location", "fragment"), [("../outside.data", "points outside the model's folder"), ("/etc/passwd", "an absolute path")])
def test_external_data_outside_the_folder(tmp_path, location, fragment):
    sub = tmp_path / "model"
    sub.mkdir()
    path = save_model(weighted_model(), sub / "m.onnx", external_data=True)
    (sub / "m.onnx.data").rename(tmp_path / "outside.data")
    model = onnx.load(path, load_external_data=False)
    for entry in model.graph.initializer[0].external_data:
        if entry.key == "location":
            entry.value = location
    path.write_bytes(model.SerializeToString())
    with pytest.raises(ModelLoadError, match=fragment):
        load_model(path)


def test_external_data_too_short(tmp_path):
    path = save_model(weighted_model(), tmp_path / "m.onnx", external_data=True)
    data = tmp_path / "m.onnx.data"
    data.write_bytes(data.read_bytes()[:100])
    with pytest.raises(ModelLoadError, match="but that file has only 100 bytes"):
        load_model(path)


def test_save_into_missing_folder_leaves_nothing(tmp_path):
    with pytest.raises(ModelSaveError, match="does not exist"):
        save_model(weighted_model(), tmp_path / "no" / "m.onnx")
    assert list(tmp_path.iterdir()) == []


def test_failed_write_leaves_no_partial_file(tmp_path, monkeypatch):
    target = tmp_path / "m.onnx"
    target.write_bytes(b"old")

    def boom(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("onnxsurgery.model.io.os.replace", boom)
    with pytest.raises(ModelSaveError, match="No space left on device"):
        save_model(weighted_model(), target)
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]


def test_a_failed_flush_moves_no_external_data_file_into_place(tmp_path, monkeypatch):
    # The data file beside a model is renamed into place only once the model file is on disk:
    # a flush that fails leaves the old model and its old data file as they were.
    target = tmp_path / "m.onnx"
    save_model(weighted_model(), target, external_data=True)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert set(before) == {"m.onnx", "m.onnx.data"}

    def boom(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr("onnxsurgery.files.os.fsync", boom)
    changed = weighted_model()
    changed.graph.initializer[0].raw_data = bytes(len(changed.graph.initializer[0].raw_data))
    with pytest.raises(ModelSaveError, match="Input/output error"):
        save_model(changed, target, external_data=True)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
