"""The layout record of concat-outputs: JSON, dtypes, dim algebra, split_outputs, concat_references."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from onnxsurgery.errors import ReferenceDataError, UsageError
from onnxsurgery.merged_outputs import (
    METADATA_KEY,
    Layout,
    PartLayout,
    concat_references,
    read_layout,
    render_dim,
    split_outputs,
    unknown_symbol,
)
from onnxsurgery.model.dtypes import dtype_name, is_lossless_cast, parse_dtype
from onnxsurgery.shapes.dims import Dim

T = onnx.TensorProto
RNG = np.random.default_rng(0)


def make(parts, *, axis, rank, dtype="float32", **kw) -> Layout:
    """A layout from (name, dtype, dims) triples, start/stop filled in from the dims."""
    draft = Layout("merged", axis, rank, dtype, tuple(PartLayout(*p) for p in parts), flatten=kw.get("flatten"))
    bounds = draft.bounds()
    full = tuple(
        PartLayout(n, dt, tuple(d), render_dim(b[0]), render_dim(b[1]), cast=dt != dtype)
        for (n, dt, d), b in zip(parts, bounds, strict=True)
    )
    return Layout("merged", axis, rank, dtype, full, **kw)


def rand(shape, dtype="float32") -> np.ndarray:
    if np.dtype(dtype).kind in "iu":
        return RNG.integers(-50 if np.dtype(dtype).kind == "i" else 0, 50, size=shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


def roundtrip(layout: Layout, outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    merged = concat_references(layout, outputs)
    back = split_outputs(layout, merged if layout.shapes else merged[layout.name])
    for name, value in outputs.items():
        if name in layout.part_names:
            assert back[name].dtype == value.dtype, name
            assert back[name].shape == value.shape, name
            assert back[name].tobytes() == value.tobytes(), name
    return merged


# -- dtypes ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, enum",
    [("float32", T.FLOAT), ("float", T.FLOAT), ("FLOAT16", T.FLOAT16), ("half", T.FLOAT16),
     ("double", T.DOUBLE), ("tensor(int64)", T.INT64), ("bfloat16", T.BFLOAT16), ("bool", T.BOOL),
     (T.INT8, T.INT8)],
)  # fmt: skip
def test_parse_dtype_names(text, enum):
    assert parse_dtype(text) == enum


@pytest.mark.parametrize("bad", ["float33", "", "tensor(x)"])
def test_parse_dtype_rejects_unknown_names(bad):
    with pytest.raises(ValueError, match="not an ONNX tensor type; use one of .*float32"):
        parse_dtype(bad)


def test_parse_dtype_rejects_other_types():
    with pytest.raises(TypeError):
        parse_dtype(True)
    with pytest.raises(TypeError):
        parse_dtype(1.5)  # type: ignore[arg-type]


def test_dtype_name_is_the_numpy_style_name():
    assert [dtype_name(t) for t in (T.FLOAT, T.INT64, T.BFLOAT16, T.BOOL)] == [
        "float32", "int64", "bfloat16", "bool",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "src, dst, lossless",
    [
        ("float32", "float32", True), ("float32", "float64", True), ("float16", "float32", True),
        ("bfloat16", "float32", True), ("bool", "float16", True), ("bool", "int8", True),
        ("int8", "int16", True), ("uint8", "int16", True), ("uint16", "uint32", True),
        ("uint32", "int64", True), ("int8", "float16", True), ("uint8", "bfloat16", True),
        ("int16", "float32", True), ("int32", "float64", True),
        ("int64", "float32", False), ("int64", "float64", False), ("int32", "float32", False),
        ("float32", "int64", False), ("float64", "float32", False), ("float32", "float16", False),
        ("float16", "bfloat16", False), ("bfloat16", "float16", False), ("int8", "uint64", False),
        ("uint8", "int8", False), ("int64", "int32", False), ("float32", "bool", False),
        ("int32", "bool", False), ("uint16", "float16", False),
    ],
)  # fmt: skip
def test_lossless_casts(src, dst, lossless):
    assert is_lossless_cast(parse_dtype(src), parse_dtype(dst)) is lossless


# -- the dim algebra -------------------------------------------------------------------------------


def test_layout_renders_dims_in_its_json_form():
    batch, seq = Dim.sym("batch"), Dim.sym("seq")
    assert render_dim(batch * 5) == "batch*5"
    assert render_dim(batch * 2 + 5) == "batch*2+5"
    assert render_dim(batch * seq + seq) == "batch*seq+seq"
    assert render_dim(seq * seq + Dim.sym("ctx")) == "ctx+seq*seq"  # sorted atoms, not by degree
    assert render_dim(Dim.sym("s0 + 1")) == "(s0 + 1)"
    assert render_dim(Dim.sym(unknown_symbol("score", 1)) + 2) == "score.shape[1]+2"
    assert render_dim(Dim.const(3) + 4) == 7
    assert render_dim(Dim()) == 0


# -- the record ------------------------------------------------------------------------------------

STATIC = [("logits", "float32", (4, 5)), ("score", "float32", (4,)), ("pred", "int64", (4,))]


def test_json_is_deterministic_and_round_trips():
    layout = make(STATIC, axis=1, rank=2, lossy=True)
    text = layout.to_json()
    assert text == make(STATIC, axis=1, rank=2, lossy=True).to_json()
    data = json.loads(text)
    assert list(data) == sorted(data)
    assert data["shape"] == [4, 7]
    assert [(p["name"], p["start"], p["stop"], p["cast"]) for p in data["parts"]] == [
        ("logits", 0, 5, False), ("score", 5, 6, False), ("pred", 6, 7, True),
    ]  # fmt: skip
    back = Layout.from_json(text)
    assert back == layout
    assert back.to_json() == text


def test_symbolic_start_stop_are_expressions():
    layout = make([("a", "float32", ("batch", 5)), ("b", "float32", ("batch", 5))], axis=0, rank=2)
    data = json.loads(layout.to_json())
    assert [(p["start"], p["stop"]) for p in data["parts"]] == [(0, "batch"), ("batch", "batch*2")]
    assert data["shape"] == ["batch*2", 5]


def test_unknown_dims_are_null_and_named_by_tensor():
    layout = make([("a", "float32", (None, 3)), ("b", "float32", (2, 3))], axis=0, rank=2)
    data = json.loads(layout.to_json())
    assert data["parts"][0]["dims"] == [None, 3]
    assert data["parts"][0]["stop"] == "a.shape[0]"
    assert Layout.from_json(layout.to_json()) == layout


def test_nan_pad_is_written_as_text():
    layout = make([("a", "float32", (2, 3)), ("b", "float32", (2, 5))], axis=0, rank=2,
                  pad=float("nan"), padded_axes=(1,))  # fmt: skip
    data = json.loads(layout.to_json())
    assert data["pad"] == "nan"
    assert np.isnan(Layout.from_json(layout.to_json()).pad)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: "not json", "not valid JSON"),
        (lambda d: {**d, "version": 99}, "layout version 99"),
        (lambda d: {k: v for k, v in d.items() if k != "axis"}, "lacks the field 'axis'"),
        (lambda d: {**d, "axis": 7}, "axis 7 is outside rank 2"),
        (lambda d: {**d, "parts": []}, "'parts' must be a non-empty list"),
        (lambda d: {**d, "dtype": "float33"}, "float33"),
        (lambda d: {**d, "parts": [{**d["parts"][0], "stop": 6}, *d["parts"][1:]]},
         "claims 0..6 along axis 1, but its dims put it at 0..5"),
        (lambda d: {**d, "parts": [{**d["parts"][0], "dims": [4, -5]}, *d["parts"][1:]]},
         "non-negative int"),
    ],
)  # fmt: skip
def test_malformed_records_are_usage_errors(edit, message):
    data = json.loads(make(STATIC, axis=1, rank=2).to_json())
    edited = edit(data)
    text = edited if isinstance(edited, str) else json.dumps(edited)
    with pytest.raises(UsageError, match=message):
        Layout.from_json(text)


def _model_with(layout: Layout | None) -> onnx.ModelProto:
    model = onnx.parser.parse_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[4, 7] merged) => (float[4, 7] y) { y = Identity(merged) }"""
    )
    model.metadata_props.add(key="other", value="x")
    if layout is not None:
        model.metadata_props.add(key=METADATA_KEY, value=layout.to_json())
    return model


def test_read_layout_from_every_source(tmp_path):
    layout = make(STATIC, axis=1, rank=2, lossy=True)
    model = _model_with(layout)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    sources = [
        layout, model, path, str(path), layout.to_json(), json.loads(layout.to_json()),
        {METADATA_KEY: layout.to_json(), "other": "x"},
    ]  # fmt: skip
    for source in sources:
        assert read_layout(source) == layout, type(source)


def test_read_layout_from_an_ort_session():
    import onnxruntime as ort

    layout = make(STATIC, axis=1, rank=2, lossy=True)
    session = ort.InferenceSession(_model_with(layout).SerializeToString())
    assert read_layout(session) == layout


def test_read_layout_without_the_record_names_the_key():
    with pytest.raises(UsageError, match=r"no 'onnxsurgery.concat-outputs' metadata \(its keys: other\)"):
        read_layout(_model_with(None))
    with pytest.raises(TypeError, match="not int"):
        read_layout(3)


# -- split_outputs ---------------------------------------------------------------------------------


def test_split_static_mixed_dtypes_is_bit_exact():
    layout = make(STATIC, axis=1, rank=2, lossy=True)
    outputs = {"logits": rand((4, 5)), "score": rand((4,)), "pred": rand((4,), "int64")}
    merged = roundtrip(layout, outputs)
    assert merged["merged"].dtype == np.float32 and merged["merged"].shape == (4, 7)
    np.testing.assert_array_equal(merged["merged"][:, 6], outputs["pred"].astype(np.float32))


def test_split_returns_copies_in_the_original_dtype():
    layout = make([("a", "float32", (3, 2)), ("b", "int32", (3, 1))], axis=1, rank=2, dtype="float64")
    outputs = {"a": rand((3, 2)), "b": rand((3, 1), "int32")}
    merged = concat_references(layout, outputs)["merged"]
    assert merged.dtype == np.float64
    parts = split_outputs(layout, merged)
    assert parts["b"].dtype == np.int32
    assert not np.shares_memory(parts["a"], merged)
    np.testing.assert_array_equal(parts["a"], outputs["a"])


def test_split_binds_batch_from_a_non_concat_axis():
    layout = make([("a", "float32", ("batch", 5)), ("b", "float32", ("batch",))], axis=1, rank=2)
    assert layout.unresolved() == set()
    for batch in (1, 3, 8):
        roundtrip(layout, {"a": rand((batch, 5)), "b": rand((batch,))})


def test_split_solves_the_concat_axis():
    # 2*seq + 3 = extent: one unknown, solved
    layout = make(
        [("a", "float32", ("batch", "seq")), ("b", "float32", ("batch", 3)), ("c", "float32", ("batch", "seq"))],
        axis=1, rank=2,
    )  # fmt: skip
    assert layout.unresolved() == set()
    for seq in (0, 1, 7):
        roundtrip(layout, {"a": rand((2, seq)), "b": rand((2, 3)), "c": rand((2, seq))})


def test_split_of_batch_on_the_concat_axis():
    layout = make([("a", "float32", ("batch", 4)), ("b", "float32", ("batch", 4))], axis=0, rank=2)
    assert layout.unresolved() == set()
    merged = roundtrip(layout, {"a": rand((3, 4)), "b": rand((3, 4))})
    assert merged["merged"].shape == (6, 4)


def test_two_unknowns_on_the_axis_need_the_shapes_output():
    parts = [("a", "float32", ("batch", "s1")), ("b", "float32", ("batch", "s2"))]
    layout = make(parts, axis=1, rank=2)
    assert layout.unresolved() == {"s1", "s2"}
    merged = concat_references(layout, {"a": rand((2, 3)), "b": rand((2, 4))})["merged"]
    with pytest.raises(UsageError, match=r"cannot recover s1, s2 from a merged array of shape \(2, 7\)"):
        split_outputs(layout, merged)
    with_shapes = make(parts, axis=1, rank=2, shapes="merged_shapes")
    outputs = {"a": rand((2, 3)), "b": rand((2, 4))}
    mapped = roundtrip(with_shapes, outputs)
    np.testing.assert_array_equal(mapped["merged_shapes"], [2, 3, 2, 4])
    with pytest.raises(UsageError, match="include.*'merged_shapes'"):
        split_outputs(with_shapes, mapped["merged"])


def test_flatten_of_two_symbols_needs_shapes():
    parts = [("a", "float32", ("batch", "h", "w")), ("b", "float32", ("batch", 3))]
    layout = make(parts, axis=1, rank=2, flatten=1)
    assert layout.unresolved() == {"h", "w"}
    roundtrip(make(parts, axis=1, rank=2, flatten=1, shapes="merged_shapes"),
              {"a": rand((2, 4, 5)), "b": rand((2, 3))})  # fmt: skip
    one = make([("a", "float32", ("batch", "h", 4)), ("b", "float32", ("batch",))], axis=1, rank=2, flatten=1)
    assert one.unresolved() == set()
    merged = roundtrip(one, {"a": rand((2, 3, 4)), "b": rand((2,))})
    assert merged["merged"].shape == (2, 13)


def test_flatten_zero_and_scalars():
    layout = make([("a", "float32", (2, 3)), ("s", "float32", ())], axis=0, rank=1, flatten=0)
    merged = roundtrip(layout, {"a": rand((2, 3)), "s": np.float32(2.5).reshape(())})
    assert merged["merged"].shape == (7,) and merged["merged"][-1] == 2.5


def test_split_strips_static_padding():
    layout = make([("a", "float32", (2, 3)), ("b", "float32", (1, 5))], axis=0, rank=2,
                  pad=-1.0, padded_axes=(1,))  # fmt: skip
    merged = roundtrip(layout, {"a": rand((2, 3)), "b": rand((1, 5))})
    assert merged["merged"].shape == (3, 5)
    np.testing.assert_array_equal(merged["merged"][:2, 3:], -1.0)


def test_padded_symbolic_dims_recovered_through_the_axis_or_shapes():
    # b's padded dim "seq" also sets the extents on the concat axis (2*seq): solvable
    solvable = make([("a", "float32", ("seq", 3)), ("b", "float32", ("seq", "seq"))], axis=0, rank=2,
                    pad=0, padded_axes=(1,))  # fmt: skip
    assert solvable.unresolved() == set()
    for seq in (2, 5):
        merged = roundtrip(solvable, {"a": rand((seq, 3)), "b": rand((seq, seq))})
        assert merged["merged"].shape == (2 * seq, max(3, seq))
    # a padded dim seen nowhere else cannot be recovered from the merged shape
    hidden = [("a", "float32", ("batch", "seq")), ("b", "float32", ("batch", "len"))]
    assert make(hidden, axis=0, rank=2, pad=0, padded_axes=(1,)).unresolved() == {"seq", "len"}
    roundtrip(make(hidden, axis=0, rank=2, pad=0, padded_axes=(1,), shapes="merged_shapes"),
              {"a": rand((2, 5)), "b": rand((2, 3))})  # fmt: skip


def test_duplicate_parts_come_back_once():
    layout = make([("a", "float32", (2, 2)), ("a", "float32", (2, 2))], axis=1, rank=2)
    assert layout.part_names == ["a"]
    a = rand((2, 2))
    merged = roundtrip(layout, {"a": a})
    np.testing.assert_array_equal(merged["merged"], np.concatenate([a, a], axis=1))
    assert list(split_outputs(layout, merged["merged"])) == ["a"]


def test_split_rejects_arrays_that_do_not_fit():
    layout = make([("a", "float32", ("batch", 5)), ("b", "float32", ("batch",))], axis=1, rank=2)
    with pytest.raises(UsageError, match="should have rank 2"):
        split_outputs(layout, np.zeros((3, 6, 1), np.float32))
    with pytest.raises(UsageError, match="should be float32, got an array of dtype float64"):
        split_outputs(layout, np.zeros((3, 6)))
    with pytest.raises(UsageError, match="does not fit the layout of 'merged'.*add up to 6 on axis 1"):
        split_outputs(layout, np.zeros((3, 7), np.float32))
    with pytest.raises(UsageError, match="hold no 'merged'"):
        split_outputs(layout, {"other": np.zeros((3, 6), np.float32)})


# -- concat_references -----------------------------------------------------------------------------


def test_references_keep_their_order_and_unmerged_outputs():
    layout = make([("b", "float32", (2, 1)), ("c", "float32", (2, 2))], axis=1, rank=2)
    refs = {"a": rand((3,)), "b": rand((2, 1)), "c": rand((2, 2)), "d": rand((1,))}
    mapped = concat_references(layout, refs)
    assert list(mapped) == ["a", "merged", "d"]
    np.testing.assert_array_equal(mapped["merged"], np.concatenate([refs["b"], refs["c"]], axis=1))
    kept = concat_references(make([("b", "float32", (2, 1)), ("c", "float32", (2, 2))], axis=1, rank=2,
                                  keep=True), refs)  # fmt: skip
    assert list(kept) == ["a", "b", "c", "d", "merged"]


def test_references_missing_or_misshapen_are_reference_errors():
    layout = make([("b", "float32", (2, 1)), ("c", "float32", (2, 2))], axis=1, rank=2)
    with pytest.raises(ReferenceDataError, match="merged 'c', but the reference outputs hold only 'b'"):
        concat_references(layout, {"b": rand((2, 1))})
    with pytest.raises(ReferenceDataError, match="has shape \\(2,\\); the model's is \\[2, 2\\]"):
        concat_references(layout, {"b": rand((2, 1)), "c": rand((2,))})
    with pytest.raises(ReferenceDataError, match="do not concatenate on axis 1"):
        concat_references(layout, {"b": rand((2, 1)), "c": rand((3, 2))})
