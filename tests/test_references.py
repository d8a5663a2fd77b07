"""onnxsurgery.validation.references: cases round-trip through both on-disk forms; bad data raises
ReferenceDataError naming the path; record() runs torch eager and writes a case."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import onnxsurgery
from onnxsurgery.errors import ReferenceDataError
from onnxsurgery.validation.against_references import validate
from onnxsurgery.validation.recording import record
from onnxsurgery.validation.references import (
    ALIGNMENT,
    Case,
    CaseStream,
    bind_cases,
    load_cases,
    save_case,
    save_npz,
)


def _case(name: str = "c", batch: int = 2) -> Case:
    rng = np.random.default_rng(batch)
    return Case(
        name=name,
        inputs={
            "x": rng.standard_normal((batch, 3)).astype(np.float32),
            "lengths": np.arange(1, batch + 1, dtype=np.int64),
            "mask": np.array([True, False] * batch),
        },
        outputs={
            "logits": rng.standard_normal((batch, 5)).astype(np.float32),
            "pred": np.zeros((batch,), dtype=np.int64),
            "half": np.ones((batch, 2), dtype=np.float16),
            "scalar": np.array(3.5, dtype=np.float64),
            "empty": np.zeros((0, 2), dtype=np.int64),
        },
    )


def _assert_same(a: Case, b: Case) -> None:
    for key in ("inputs", "outputs"):
        x, y = getattr(a, key), getattr(b, key)
        assert list(x) == list(y), key
        for name in x:
            assert x[name].dtype == y[name].dtype, name
            assert x[name].shape == y[name].shape, name
            np.testing.assert_array_equal(x[name], y[name])


# --------------------------------------------------------------------------------------------
# round trips


def test_test_data_layout_round_trip(tmp_path: Path) -> None:
    cases = [_case(batch=b) for b in (2, 5)]
    paths = [save_case(c, tmp_path) for c in cases]
    assert [p.name for p in paths] == ["test_data_set_0", "test_data_set_1"]
    assert sorted(f.name for f in paths[0].iterdir()) == [
        *(f"input_{k}.pb" for k in range(3)),
        *(f"output_{k}.pb" for k in range(5)),
    ]
    proto = onnx.TensorProto()
    proto.ParseFromString((paths[0] / "input_1.pb").read_bytes())
    assert proto.name == "lengths"
    loaded = load_cases(tmp_path)
    assert [c.name for c in loaded] == ["test_data_set_0", "test_data_set_1"]
    for want, got in zip(cases, loaded, strict=True):
        _assert_same(want, got)
    _assert_same(cases[1], load_cases(paths[1])[0])  # a single test_data_set_N dir
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp leftovers


def test_case_dirs_and_tensors_sort_numerically(tmp_path: Path) -> None:
    many = Case("m", {f"in{k}": np.full((1,), k, np.int64) for k in range(12)}, {"y": np.ones(1)})
    for index in (10, 2, 0):
        save_case(many, tmp_path, index=index)
    loaded = load_cases(tmp_path)
    assert [c.name for c in loaded] == ["test_data_set_0", "test_data_set_2", "test_data_set_10"]
    assert list(loaded[0].inputs) == [f"in{k}" for k in range(12)]
    assert save_case(many, tmp_path).name == "test_data_set_11"  # next free index


def test_save_case_with_index_replaces(tmp_path: Path) -> None:
    save_case(_case(batch=2), tmp_path, index=0)
    save_case(Case("small", {"a": np.zeros(1)}, {"b": np.ones(1)}), tmp_path, index=0)
    (case,) = load_cases(tmp_path)
    assert list(case.inputs) == ["a"] and list(case.outputs) == ["b"]


def test_unnamed_tensor_is_keyed_by_file_stem(tmp_path: Path) -> None:
    case_dir = tmp_path / "test_data_set_0"
    case_dir.mkdir()
    (case_dir / "input_0.pb").write_bytes(
        numpy_helper.from_array(np.ones(2, np.float32)).SerializeToString()
    )
    (case_dir / "output_0.pb").write_bytes(
        numpy_helper.from_array(np.ones(2, np.float32), name="y").SerializeToString()
    )
    (case,) = load_cases(tmp_path)
    assert list(case.inputs) == ["input_0"] and list(case.outputs) == ["y"]


def _write(path: Path, array: np.ndarray, name: str = "") -> None:
    path.write_bytes(numpy_helper.from_array(array, name=name).SerializeToString())


def test_unnamed_tensors_bind_by_position_as_onnx_reads_them(tmp_path: Path) -> None:
    case_dir = tmp_path / "test_data_set_0"
    case_dir.mkdir()
    a, b, y = np.zeros(2, np.float32), np.ones(3, np.float32), np.full(2, 7, np.float32)
    _write(case_dir / "input_0.pb", a)
    _write(case_dir / "input_1.pb", b, name="b")  # a named one keeps its name
    _write(case_dir / "output_0.pb", y)
    (case,) = bind_cases(load_cases(tmp_path), ["first", "b"], ["out"])
    assert list(case.inputs) == ["first", "b"] and list(case.outputs) == ["out"]
    np.testing.assert_array_equal(case.inputs["first"], a)
    np.testing.assert_array_equal(case.outputs["out"], y)
    assert not case.unnamed and case.source == str(case_dir)


def test_named_tensors_are_left_as_they_are(tmp_path: Path) -> None:
    save_case(_case(), tmp_path, index=0)
    (loaded,) = load_cases(tmp_path)
    (bound,) = bind_cases([loaded], list(loaded.inputs), ["some", "other", "names"])
    assert list(bound.inputs) == list(loaded.inputs)
    assert list(bound.outputs) == list(loaded.outputs)


def test_positional_binding_needs_matching_counts(tmp_path: Path) -> None:
    case_dir = tmp_path / "test_data_set_0"
    case_dir.mkdir()
    _write(case_dir / "input_0.pb", np.zeros(2, np.float32))
    _write(case_dir / "output_0.pb", np.zeros(2, np.float32))
    _write(case_dir / "output_1.pb", np.zeros(2, np.float32))
    with pytest.raises(ReferenceDataError) as info:
        bind_cases(load_cases(tmp_path), ["x", "mask"], None)
    assert str(case_dir) in str(info.value)
    assert "input_0.pb has no tensor name" in str(info.value)
    assert "1 input file(s) while the model has 2 inputs (not initializers) (x, mask)" in str(info.value)
    with pytest.raises(ReferenceDataError, match=r"2 output file\(s\) while the model has 1 outputs"):
        bind_cases(load_cases(tmp_path), ["x"], ["y"])


def test_npz_round_trip(tmp_path: Path) -> None:
    case = _case(batch=3)
    path = save_npz(case, tmp_path / "case_3.npz")
    assert path == tmp_path / "case_3.npz"
    with np.load(path) as npz:
        assert npz.files[:3] == ["input:x", "input:lengths", "input:mask"]
        assert npz.files[3] == "output:logits"
    (loaded,) = load_cases(path)
    assert loaded.name == "case_3"
    _assert_same(case, loaded)


def test_npz_path_is_written_exactly(tmp_path: Path) -> None:
    path = save_npz(_case(), tmp_path / "ref.data")
    assert path.exists() and not (tmp_path / "ref.data.npz").exists()


def test_dir_of_npz_files_in_natural_order(tmp_path: Path) -> None:
    for b in (10, 2, 1):
        save_npz(_case(batch=b), tmp_path / f"case{b}.npz")
    loaded = load_cases(tmp_path)
    assert [c.name for c in loaded] == ["case1", "case2", "case10"]
    assert loaded[2].inputs["x"].shape == (10, 3)


# --------------------------------------------------------------------------------------------
# errors name the path


def _raises(path: Path, match: str) -> None:
    with pytest.raises(ReferenceDataError, match=match) as info:
        load_cases(path)
    assert str(path) in str(info.value)


def test_missing_dir(tmp_path: Path) -> None:
    _raises(tmp_path / "nope", "does not exist")


def test_missing_npz(tmp_path: Path) -> None:
    _raises(tmp_path / "nope.npz", "does not exist")


def test_empty_dir(tmp_path: Path) -> None:
    _raises(tmp_path, "holds no cases")


def test_file_that_is_not_npz(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    path.write_bytes(b"x")
    _raises(path, "not an .npz")


def test_corrupted_pb(tmp_path: Path) -> None:
    case_dir = save_case(_case(), tmp_path)
    bad = case_dir / "output_0.pb"
    bad.write_bytes(b"\xff\xff\xff\xff garbage")
    _raises(tmp_path, "output_0.pb")


def test_truncated_pb(tmp_path: Path) -> None:
    case_dir = save_case(_case(), tmp_path)
    bad = case_dir / "input_0.pb"
    bad.write_bytes(bad.read_bytes()[:-7])
    with pytest.raises(ReferenceDataError) as info:
        load_cases(tmp_path)
    assert str(bad) in str(info.value)


def test_empty_pb_is_not_a_tensor(tmp_path: Path) -> None:
    case_dir = save_case(_case(), tmp_path)
    (case_dir / "input_0.pb").write_bytes(b"")
    with pytest.raises(ReferenceDataError, match="no data type") as info:
        load_cases(case_dir)
    assert str(case_dir / "input_0.pb") in str(info.value)


def test_case_without_outputs(tmp_path: Path) -> None:
    case_dir = save_case(_case(), tmp_path)
    for f in case_dir.glob("output_*.pb"):
        f.unlink()
    _raises(case_dir, "no output_K.pb")


def test_duplicate_tensor_names(tmp_path: Path) -> None:
    case_dir = save_case(
        Case("d", {"a": np.zeros(1), "b": np.zeros(1)}, {"y": np.zeros(1)}), tmp_path
    )
    (case_dir / "input_1.pb").write_bytes((case_dir / "input_0.pb").read_bytes())
    _raises(case_dir, "two input tensors are named 'a'")


def test_corrupted_npz(tmp_path: Path) -> None:
    path = tmp_path / "bad.npz"
    path.write_bytes(b"PK\x03\x04 not really a zip")
    _raises(path, "cannot read")


def test_npz_with_foreign_keys(tmp_path: Path) -> None:
    path = tmp_path / "plain.npz"
    np.savez(path, x=np.zeros(2))
    _raises(path, "'x'")


def test_npz_without_outputs(tmp_path: Path) -> None:
    path = tmp_path / "inputs_only.npz"
    np.savez(path, **{"input:x": np.zeros(2)})
    _raises(path, "no 'output:NAME'")


def test_save_case_refuses_an_empty_case(tmp_path: Path) -> None:
    with pytest.raises(ReferenceDataError, match="no outputs"):
        save_case(Case("e", {"x": np.zeros(1)}, {}), tmp_path)
    assert not list(tmp_path.iterdir())


# --------------------------------------------------------------------------------------------
# record


def test_record_runs_torch_and_writes_a_case(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(3, 4)

        def forward(self, x, n):
            y = self.fc(x)
            return y, (y.argmax(-1), [n * 2])

    torch.manual_seed(0)
    net = Net().eval()
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    inputs = {"x": x, "n": torch.tensor([1, 2], dtype=torch.int64)}
    case = record(net, inputs, tmp_path, output_names=["y", "pred", "n2"])
    assert case.name == "test_data_set_0"
    assert list(case.inputs) == ["x", "n"] and case.inputs["n"].dtype == np.int64
    assert list(case.outputs) == ["y", "pred", "n2"]
    with torch.no_grad():
        want = net.fc(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(case.outputs["y"], want, rtol=1e-6)
    np.testing.assert_array_equal(case.outputs["n2"], [2, 4])
    (loaded,) = load_cases(tmp_path)
    _assert_same(case, loaded)
    second = record(net, inputs, tmp_path, output_names=["y", "pred", "n2"])
    assert second.name == "test_data_set_1"


def test_record_without_out_dir_writes_nothing(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    case = record(torch.nn.Identity(), {"x": np.ones(2, np.float32)}, None, output_names=["y"])
    assert list(case.outputs) == ["y"] and not list(tmp_path.iterdir())


def test_record_output_count_mismatch(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    with pytest.raises(ReferenceDataError, match="returned 1 tensors but 2 output names"):
        record(torch.nn.Identity(), {"x": np.ones(2)}, tmp_path, output_names=["a", "b"])
    assert not list(tmp_path.iterdir())


# -- reading .pb tensors in place --------------------------------------------------------------
# load_cases reads a tensor's raw bytes where the file holds them; onnx's own decoder
# (numpy_helper.to_array on the parsed TensorProto) is the oracle for every tensor.


def _decoded_by_onnx(path: Path) -> tuple[str, np.ndarray]:
    proto = onnx.TensorProto()
    proto.ParseFromString(path.read_bytes())
    return proto.name or path.stem, numpy_helper.to_array(proto)


def _assert_identical(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.kind in "OU":
        assert got.tolist() == want.tolist()
    else:  # bit for bit, NaN payloads included
        assert got.tobytes() == want.tobytes()


def _pb(tmp_path: Path, proto: onnx.TensorProto, stem: str = "output_0") -> Path:
    case_dir = tmp_path / "test_data_set_0"
    case_dir.mkdir(exist_ok=True)
    (case_dir / "input_0.pb").write_bytes(
        numpy_helper.from_array(np.zeros(1, np.float32), "x").SerializeToString()
    )
    path = case_dir / f"{stem}.pb"
    path.write_bytes(proto.SerializeToString())
    return path


def _loaded(path: Path) -> np.ndarray:
    case = load_cases(path.parent)[0]
    tensors = {**case.inputs, **case.outputs}
    return tensors[_decoded_by_onnx(path)[0]]


def test_every_backend_test_tensor_reads_as_onnx_decodes_it() -> None:
    root = Path(onnx.__file__).parent / "backend" / "test" / "data"
    case_dirs = sorted({p.parent for p in root.rglob("test_data_set_*/*.pb")})
    assert len(case_dirs) > 20, root
    checked = 0
    for case_dir in case_dirs:
        case = load_cases(case_dir)[0]
        tensors = {**case.inputs, **case.outputs}
        for path in sorted(case_dir.glob("*.pb")):
            name, want = _decoded_by_onnx(path)
            _assert_identical(tensors[name], want)
            checked += 1
    assert checked > 200


@pytest.mark.parametrize(
    "dtype",
    [
        np.float32, np.float64, np.float16, np.int8, np.int16, np.int32, np.int64,
        np.uint8, np.uint16, np.uint32, np.uint64, np.bool_, np.complex64, np.complex128,
    ],
)
@pytest.mark.parametrize("shape", [(2, 3), (), (0, 4), (1, 0, 2)])
def test_raw_tensors_of_every_numpy_dtype_and_shape(tmp_path: Path, dtype, shape) -> None:
    rng = np.random.default_rng(1)
    values = (rng.standard_normal(shape) * 50).astype(dtype)
    if np.dtype(dtype).kind == "f" and values.size:
        values.reshape(-1)[0] = np.nan
    path = _pb(tmp_path, numpy_helper.from_array(values, "y"))
    got = _loaded(path)
    _assert_identical(got, _decoded_by_onnx(path)[1])
    _assert_identical(got, values)


@pytest.mark.parametrize("elem_type", ["BFLOAT16", "FLOAT8E4M3FN", "FLOAT8E5M2", "INT4", "UINT4"])
def test_ml_dtypes_and_bit_packed_tensors(tmp_path: Path, elem_type: str) -> None:
    data_type = getattr(onnx.TensorProto, elem_type)
    values = [1.0, -2.0, 3.0, 0.5, 7.0] if "FLOAT" in elem_type else [1, 2, 3, 4, 5]
    if elem_type == "INT4":
        values = [1, -2, 3, -4, 5]
    proto = onnx.helper.make_tensor("y", data_type, [5], values)
    proto = numpy_helper.from_array(numpy_helper.to_array(proto), "y")  # raw_data form
    assert proto.HasField("raw_data")
    path = _pb(tmp_path, proto)
    _assert_identical(_loaded(path), _decoded_by_onnx(path)[1])


def test_typed_field_and_string_tensors(tmp_path: Path) -> None:
    floats = onnx.helper.make_tensor("f", onnx.TensorProto.FLOAT, [2, 2], [1.5, -2.0, 0.0, 4.0])
    strings = onnx.helper.make_tensor("s", onnx.TensorProto.STRING, [2], [b"ab", b"c"])
    for stem, proto in (("output_0", floats), ("output_1", strings)):
        assert not proto.HasField("raw_data")
        path = _pb(tmp_path, proto, stem)
        _assert_identical(_loaded(path), _decoded_by_onnx(path)[1])


def test_a_second_raw_data_field_wins_as_protobuf_says(tmp_path: Path) -> None:
    first = numpy_helper.from_array(np.arange(4, dtype=np.float32), "y")
    second = np.array([9, 8, 7, 6], np.float32).tobytes()
    path = _pb(tmp_path, first)
    path.write_bytes(path.read_bytes() + b"\x4a" + bytes([len(second)]) + second)
    assert _decoded_by_onnx(path)[1].tolist() == [9, 8, 7, 6]
    assert _loaded(path).tolist() == [9, 8, 7, 6]


def test_raw_data_of_the_wrong_length_is_named(tmp_path: Path) -> None:
    proto = numpy_helper.from_array(np.arange(4, dtype=np.float32), "y")
    proto.dims[:] = [5]
    path = _pb(tmp_path, proto)
    with pytest.raises(ReferenceDataError, match="does not decode") as info:
        load_cases(path.parent)
    assert str(path) in str(info.value)


def test_raw_bytes_are_not_copied_on_the_way_in(tmp_path: Path) -> None:
    values = np.arange(1 << 22, dtype=np.float32)  # 16 MiB
    path = _pb(tmp_path, numpy_helper.from_array(values, "y"))
    tracemalloc.start()
    try:
        got = load_cases(path.parent)[0].outputs["y"]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert np.array_equal(got, values)
    assert peak < 1.25 * values.nbytes, f"peak {peak / 2**20:.1f} MiB for 16 MiB"


@pytest.mark.parametrize("name", ["y", "a much longer tensor name " * 300])  # head or past it
def test_raw_tensors_are_read_aligned_and_read_only(tmp_path: Path, name: str) -> None:
    for k, dims in enumerate([(3,), (5, 7), (2, 3, 4)]):
        values = np.arange(np.prod(dims), dtype=np.float32).reshape(dims)
        path = _pb(tmp_path, numpy_helper.from_array(values, f"{name}{k}"), f"output_{k}")
        got = _loaded(path)
        assert got.ctypes.data % ALIGNMENT == 0 and not got.flags.writeable
        assert np.array_equal(got, values)


def test_ort_sees_the_same_inputs_as_from_onnx_decoding(tmp_path: Path) -> None:
    # InstanceNormalization in ONNX Runtime rounds differently on a misaligned input: a case
    # read from disk must give the figures the same case gives in memory
    root = Path(onnx.__file__).parent / "backend" / "test" / "data" / "pytorch-operator"
    case_dir = root / "test_operator_symbolic_override"
    model = onnx.load(case_dir / "model.onnx")
    on_disk = validate(model, case_dir, provider="cpu")
    data = case_dir / "test_data_set_0"
    (_, x), (_, y) = map(_decoded_by_onnx, [data / "input_0.pb", data / "output_0.pb"])
    x_name, y_name = model.graph.input[0].name, model.graph.output[0].name
    in_memory = validate(model, [Case("test_data_set_0", {x_name: x}, {y_name: y})], provider="cpu")
    assert on_disk.cases[0].outputs[0].max_abs is not None
    assert on_disk.cases[0].outputs[0].to_dict() == in_memory.cases[0].outputs[0].to_dict()


# --------------------------------------------------------------------------------------------
# a stream of cases: each read (and bound) when asked for


def test_case_stream_reads_and_binds_each_case_when_asked(tmp_path: Path) -> None:
    for k in range(3):
        case_dir = tmp_path / f"test_data_set_{k}"
        case_dir.mkdir()
        _write(case_dir / "input_0.pb", np.full(2, k, np.float32))  # unnamed: bound by position
        _write(case_dir / "output_0.pb", np.full(2, 10 * k, np.float32), name="y")
    stream = CaseStream(tmp_path, ["x"], ["out"])
    assert len(stream) == 3
    cases = list(stream)
    assert [c.name for c in cases] == ["test_data_set_0", "test_data_set_1", "test_data_set_2"]
    assert all(list(c.inputs) == ["x"] and list(c.outputs) == ["y"] for c in cases)
    np.testing.assert_array_equal(stream[2].inputs["x"], np.full(2, 2, np.float32))
    assert [c.name for c in stream[1:]] == ["test_data_set_1", "test_data_set_2"]
    assert stream[1] is not stream[1]  # nothing is kept: read again
    (tmp_path / "test_data_set_1" / "output_0.pb").write_bytes(b"\x0a\xff")  # broken after
    assert stream[0].name == "test_data_set_0"  # the others still read
    with pytest.raises(ReferenceDataError, match="test_data_set_1"):
        stream[1]
    with pytest.raises(ReferenceDataError, match="does not exist"):  # the layout: at once
        CaseStream(tmp_path / "nowhere", ["x"], None)


def test_case_stream_binding_errors_name_the_case(tmp_path: Path) -> None:
    case_dir = tmp_path / "test_data_set_0"
    case_dir.mkdir()
    _write(case_dir / "input_0.pb", np.zeros(2, np.float32))
    _write(case_dir / "output_0.pb", np.zeros(2, np.float32))
    stream = CaseStream(tmp_path, ["x", "mask"], None)
    with pytest.raises(ReferenceDataError, match="input_0.pb has no tensor name") as info:
        stream[0]
    assert str(case_dir) in str(info.value)


def _big_cases(tmp_path: Path, count: int, size: int) -> tuple[onnx.ModelProto, Path]:
    """A one-Neg model and ``count`` cases of ``size`` float32 elements in and out."""
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Neg", ["x"], ["y"])],
        "neg",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [size])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [size])],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8
    rng = np.random.default_rng(0)
    for k in range(count):
        x = rng.standard_normal(size, dtype=np.float32)
        save_case(Case(f"c{k}", {"x": x}, {"y": -x}), tmp_path / "ref", index=k)
    return model, tmp_path / "ref"


@pytest.mark.parametrize("chain", ["validate(provider=cpu)", "cleanup"])
def test_pipeline_validation_holds_one_case_at_a_time(tmp_path: Path, chain: str) -> None:
    """`run --passes validate` and a run's final validation read each case as it runs: the
    peak of what numpy allocates stays near one case, not the 8 cases' 64 MiB."""
    size = 1 << 20  # 4 MiB per array, 8 MiB per case
    model, ref = _big_cases(tmp_path, 8, size)
    tracemalloc.start()
    try:
        report = onnxsurgery.run(model, chain, references=ref, provider="cpu")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.validation and len(report.validation.cases) == 8
    case_bytes = 2 * size * 4
    assert peak < 2.5 * case_bytes, f"peak {peak / 2**20:.1f} MiB, one case {case_bytes / 2**20:.0f} MiB"
