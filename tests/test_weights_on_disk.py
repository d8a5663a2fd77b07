"""Weights left on disk: the pipeline reads a model with external data without its large weights.

The oracle throughout is the path every release so far has taken: the same chain on the same
model with every weight in memory (``onnx.load``), saved with external data. A run that leaves
the weights in their file must write the very same bytes, fail with the very same message, and
give ONNX Runtime the very same weights.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from fixture_manifest import load_manifest
from onnx import numpy_helper
from typer.testing import CliRunner

from onnxsurgery.cli import app
from onnxsurgery.errors import ModelLoadError, ModelSaveError, OnnxSurgeryError
from onnxsurgery.model.io import load_weights, read_model_file, save_model
from onnxsurgery.model.tensors import on_disk
from onnxsurgery.model.weights_on_disk import (
    read_without_weights,
    strip_inline_weights,
    tensor_array,
)
from onnxsurgery.model.wire import FileBytes
from onnxsurgery.pipeline import Pass, PassContext, PassResult, Pipeline, run
from onnxsurgery.validation.runtime import create_session, run_session

FIXTURES = [e for e in load_manifest() if e.exported]


def _copy(model_path: Path, folder: Path, stored: str) -> Path:
    """``model_path`` with its weights stored ``"external"``ly or ``"inline"`` (as exported)."""
    if stored == "external":
        return _external_copy(model_path, folder)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / "model.onnx"
    shutil.copyfile(model_path, target)
    return target


def _external_copy(model_path: Path, folder: Path, *, location: str | None = None) -> Path:
    """``model_path`` saved by onnx with every tensor of 1 KiB and more in one data file."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / "model.onnx"
    onnx.save(
        onnx.load(str(model_path)),
        str(target),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=location or "model.onnx.data",
        size_threshold=1024,
    )
    return target


def _on_disk_names(model: onnx.ModelProto) -> list[str]:
    return [t.name for t in model.graph.initializer if on_disk(t)]


def _with_weights(fixture) -> bool:
    model = onnx.load(str(fixture.model_path))
    return any(
        t.data_type == onnx.TensorProto.FLOAT and t.HasField("raw_data") and len(t.raw_data) >= 1024
        for t in model.graph.initializer
    )


WEIGHTED = [f for f in FIXTURES if _with_weights(f)]


def test_fixtures_with_weights_are_many():
    assert len(WEIGHTED) >= 20, [str(f) for f in WEIGHTED]


@pytest.mark.parametrize("fixture", WEIGHTED, ids=str)
def test_weights_left_on_disk_read_back_as_onnx_loads_them(fixture, tmp_path):
    path = _external_copy(fixture.model_path, tmp_path)
    eager = {t.name: t for t in onnx.load(str(path)).graph.initializer}
    lazy = read_model_file(path, weights_on_disk=True).model
    names = _on_disk_names(lazy)
    assert names, "no weight was left on disk"
    for tensor in lazy.graph.initializer:
        want = numpy_helper.to_array(eager[tensor.name])
        got = tensor_array(tensor)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tobytes() == want.tobytes(), tensor.name
        if not on_disk(tensor):  # everything not left on disk is loaded as onnx loads it
            assert tensor.SerializeToString() == eager[tensor.name].SerializeToString()
    # read in, the model is the one onnx loads (data_location aside: onnx sets it to DEFAULT)
    load_weights(lazy)
    assert not _on_disk_names(lazy)
    for tensor in lazy.graph.initializer:
        assert tensor.raw_data == eager[tensor.name].raw_data or not eager[tensor.name].raw_data


CHAINS = [
    "cleanup, infer-shapes",
    "symbolize(*:0=batch)",
    "fold-constants",
    "compat, concat-outputs",
    "symbolize(*:0=batch), fold-constants, cleanup",  # weights read in midway, then saved
]


def _outcome(model, chain, **kwargs) -> tuple[str, onnx.ModelProto | None]:
    try:
        report = run(model, chain, **kwargs)
    except OnnxSurgeryError as exc:
        return f"{type(exc).__name__}: {exc}", None
    return "ok", report.model


@pytest.mark.parametrize("stored", ["external", "inline"])
@pytest.mark.parametrize("chain", CHAINS)
@pytest.mark.parametrize("fixture", WEIGHTED, ids=str)
def test_a_chain_on_weights_left_on_disk_writes_what_it_writes_with_them_in_memory(
    fixture, chain, stored, tmp_path
):
    """Weights in a data file, or inline in the .onnx: the output is written the same way."""
    path = _copy(fixture.model_path, tmp_path / "in", stored)
    external = stored == "external"
    out_memory, out_disk = tmp_path / "memory" / "m.onnx", tmp_path / "disk" / "m.onnx"
    out_memory.parent.mkdir()
    out_disk.parent.mkdir()
    said_memory, model = _outcome(onnx.load(str(path)), chain)
    if model is not None:
        save_model(model, out_memory, external_data=external)
    said_disk, _ = _outcome(path, chain, output=out_disk)
    assert said_disk == said_memory.replace("model:", f"{path}:")
    if model is None:
        assert not out_disk.exists()
        return
    assert out_disk.read_bytes() == out_memory.read_bytes()
    data = Path(str(out_disk) + ".data")
    assert data.exists() == external
    if external:
        assert data.read_bytes() == Path(str(out_memory) + ".data").read_bytes()


@pytest.mark.parametrize("fixture", WEIGHTED[:8], ids=str)
def test_validation_on_weights_left_on_disk_says_what_it_says_with_them_in_memory(
    fixture, tmp_path
):
    """Against the fixture's torch references, at the traced size and others."""
    path = _external_copy(fixture.model_path, tmp_path)
    chain = "symbolize(*:0=batch), validate"
    said_memory, _ = _outcome(onnx.load(str(path)), chain, references=fixture.references_dir)
    said_disk, model = _outcome(path, chain, references=fixture.references_dir)
    assert said_disk == said_memory.replace("model:", f"{path}:")


def test_a_session_takes_the_weights_from_the_file_the_model_was_loaded_from(tmp_path):
    fixture = next(f for f in WEIGHTED if f.name == "attention_block")
    path = _external_copy(fixture.model_path, tmp_path)
    lazy = read_model_file(path, weights_on_disk=True).model
    eager = onnx.load(str(path))
    feeds = {
        i.name: np.random.default_rng(0).standard_normal(
            [d.dim_value for d in i.type.tensor_type.shape.dim]
        ).astype(np.float32)
        for i in eager.graph.input
    }
    names = [o.name for o in eager.graph.output]
    assert _on_disk_names(lazy)
    got = run_session(create_session(lazy, "cpu"), names, feeds)
    assert _on_disk_names(lazy)  # the session read them; the model still does not hold them
    want = run_session(create_session(eager, "cpu"), names, feeds)
    for a, b in zip(got, want, strict=True):
        assert a.tobytes() == b.tobytes()


class _Weights(Pass):
    """Read every weight's values (a pass that does not declare weights_on_disk)."""

    name = "read-weights"

    def run(self, model: onnx.ModelProto, ctx: PassContext) -> PassResult:
        assert not _on_disk_names(model)
        total = sum(float(numpy_helper.to_array(t).sum()) for t in model.graph.initializer
                    if t.data_type == onnx.TensorProto.FLOAT)
        return PassResult(model, modified=False, report={"total": total})


def test_a_pass_that_does_not_say_it_takes_weights_on_disk_gets_them_all_in_memory(tmp_path):
    fixture = WEIGHTED[0]
    path = _external_copy(fixture.model_path, tmp_path)
    report = Pipeline([_Weights()]).run(path)
    want = sum(
        float(numpy_helper.to_array(t).sum())
        for t in onnx.load(str(path)).graph.initializer
        if t.data_type == onnx.TensorProto.FLOAT
    )
    assert report.passes[0].report == {"total": want}


def test_the_report_hands_over_a_model_with_every_weight_in_it(tmp_path):
    fixture = next(f for f in WEIGHTED if f.name == "attention_block")
    path = _external_copy(fixture.model_path, tmp_path / "in")
    report = run(path, "cleanup")
    assert _on_disk_names(report.held_model)  # the run itself never read them in
    model = report.model
    assert not _on_disk_names(model)
    onnx.save(model, str(tmp_path / "plain.onnx"))  # a model any tool can save and load
    reloaded = onnx.load(str(tmp_path / "plain.onnx"))
    eager = {t.name: t.raw_data for t in onnx.load(str(path)).graph.initializer}
    for tensor in reloaded.graph.initializer:
        if tensor.name in eager and eager[tensor.name]:
            assert tensor.raw_data == eager[tensor.name]


def test_an_output_that_replaces_the_data_file_weights_are_read_from(tmp_path):
    """The model names its data ``out.onnx.data``; writing ``out.onnx`` replaces that file."""
    fixture = next(f for f in WEIGHTED if f.name == "attention_block")
    path = _external_copy(fixture.model_path, tmp_path, location="out.onnx.data")
    eager = onnx.load(str(path))
    report = run(path, "cleanup", output=tmp_path / "out.onnx")
    written = onnx.load(str(tmp_path / "out.onnx"))
    for got, model in ((written, "written"), (report.model, "report")):
        values = {t.name: numpy_helper.to_array(t).tobytes() for t in got.graph.initializer}
        for tensor in eager.graph.initializer:
            if tensor.name in values:
                assert values[tensor.name] == numpy_helper.to_array(tensor).tobytes(), model


def test_a_data_file_cut_short_after_loading_is_an_error_and_nothing_is_written(tmp_path):
    fixture = next(f for f in WEIGHTED if f.name == "attention_block")
    path = _external_copy(fixture.model_path, tmp_path / "in")
    model = read_model_file(path, weights_on_disk=True).model
    data = tmp_path / "in" / "model.onnx.data"
    with open(data, "r+b") as fh:
        fh.truncate(os.path.getsize(data) // 2)
    out = tmp_path / "out.onnx"
    with pytest.raises(ModelSaveError, match="no longer holds bytes") as caught:
        save_model(model, out, external_data=True)
    assert str(data.resolve()) in str(caught.value)
    assert not out.exists() and not Path(str(out) + ".data").exists()
    assert os.listdir(tmp_path) == ["in"]
    with pytest.raises(ModelLoadError, match="changed since the model was loaded"):
        load_weights(model)


def test_weights_on_disk_saved_inline_are_the_bytes_of_the_model_loaded_whole(tmp_path):
    fixture = next(f for f in WEIGHTED if f.name == "attention_block")
    path = _external_copy(fixture.model_path, tmp_path / "in")
    lazy = read_model_file(path, weights_on_disk=True).model
    eager = read_model_file(path).model
    save_model(lazy, tmp_path / "lazy.onnx", external_data=False)
    save_model(eager, tmp_path / "eager.onnx", external_data=False)
    assert (tmp_path / "lazy.onnx").read_bytes() == (tmp_path / "eager.onnx").read_bytes()
    assert _on_disk_names(lazy)  # saving inline read them into a copy, not into the model


def test_keep_failed_from_the_cli_writes_the_failing_model_with_its_weights(tmp_path):
    """``--keep-failed`` on a model whose weights the run left on disk: the kept model has them."""
    fixture = next(f for f in WEIGHTED if f.name == "attention_block")
    m = onnx.load(str(fixture.model_path))
    for t in m.graph.initializer:  # changed weights: validation against torch must fail
        if t.data_type == onnx.TensorProto.FLOAT and len(t.raw_data) >= 1024:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) + 1.0, t.name))
    changed = tmp_path / "changed.onnx"
    onnx.save(m, str(changed))
    path = _external_copy(changed, tmp_path / "in")
    kept, out = tmp_path / "kept.onnx", tmp_path / "out.onnx"
    result = CliRunner().invoke(
        app,
        ["run", str(path), "--passes", "cleanup", "--ref", str(fixture.references_dir),
         "--keep-failed", str(kept), "-o", str(out), "-q"],
    )
    assert result.exit_code == 1, result.output
    assert not out.exists()
    want = {t.name: numpy_helper.to_array(t).tobytes() for t in m.graph.initializer}
    got = onnx.load(str(kept))
    assert got.graph.initializer
    for tensor in got.graph.initializer:
        assert numpy_helper.to_array(tensor).tobytes() == want[tensor.name]



#: Models other tools wrote, stored inline: the fixtures (torch's two exporters) and every model
#: the onnx wheel ships for its backend tests (light zoo nets included).
_DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
INLINE_MODELS = sorted(
    [f.model_path for f in FIXTURES]
    + list(_DATA.glob("*/*/model.onnx"))
    + list((_DATA / "light").glob("light_*.onnx")),
    key=str,
)


def test_models_stored_inline_are_many_and_some_keep_weights_on_disk():
    """...and the loader's reader, which reads the file where it looks, strips each as the
    same walk over the file's bytes in memory does."""
    kept = 0
    for path in INLINE_MODELS:
        stripped = strip_inline_weights(path.read_bytes(), path.name)
        assert read_without_weights(path, path.name) == stripped, path
        kept += stripped is not None
    assert len(INLINE_MODELS) >= 200 and kept >= 25, (len(INLINE_MODELS), kept)


def test_the_loader_does_not_read_the_weights_it_leaves_on_disk(tmp_path, monkeypatch):
    weights = [numpy_helper.from_array(np.full((512, 512), k, np.float32), f"w{k}") for k in range(4)]
    nodes = [onnx.helper.make_node("MatMul", ["x", "w0"], ["h0"])] + [
        onnx.helper.make_node("MatMul", [f"h{k - 1}", f"w{k}"], [f"h{k}"]) for k in range(1, 4)
    ]
    graph = onnx.helper.make_graph(
        nodes,
        "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 512])],
        [onnx.helper.make_tensor_value_info("h3", onnx.TensorProto.FLOAT, [1, 512])],
        weights,
    )
    path = tmp_path / "m.onnx"
    path.write_bytes(onnx.helper.make_model(graph).SerializeToString())
    read = []
    pread = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, at: read.append(n) or pread(fd, n, at))
    loaded = read_model_file(path, weights_on_disk=True)
    assert _on_disk_names(loaded.model) == ["w0", "w1", "w2", "w3"]
    size = path.stat().st_size  # 4 MiB of weights; a block around each tensor's fields is read
    assert sum(read) < size // 32 and size > 4 * 2**20, (sum(read), size)
    monkeypatch.undo()
    assert load_weights(loaded.model).SerializeToString() == path.read_bytes()


def test_file_bytes_read_as_the_bytes_do(tmp_path):
    data = np.random.default_rng(0).integers(0, 256, 3 * FileBytes.BLOCK + 17, np.uint8).tobytes()
    path = tmp_path / "f"
    path.write_bytes(data)
    with open(path, "rb") as fh:
        view = FileBytes(fh.fileno(), len(data))
        assert len(view) == len(data)
        for i in (0, 1, FileBytes.BLOCK - 1, FileBytes.BLOCK, len(data) - 1, -1, -len(data)):
            assert view[i] == data[i], i
        for a, b in ((0, 10), (5, 3 * FileBytes.BLOCK), (len(data) - 4, len(data) + 9), (7, 7), (-5, None)):
            assert view[a:b] == data[a:b], (a, b)
        for i in (len(data), -len(data) - 1):
            with pytest.raises(IndexError):
                view[i]
        longer = FileBytes(fh.fileno(), len(data) + 40)  # the file cut while it is read
        with pytest.raises(ValueError, match="the file ended"):
            longer[len(data) - 2 : len(data) + 1]
        with pytest.raises(ValueError, match="the file ended"):
            longer[len(data) + 1]


def test_a_model_cut_short_while_it_is_read_is_left_to_the_parser(tmp_path):
    data = _weight_model().SerializeToString()
    path = tmp_path / "m.onnx"
    path.write_bytes(data[: len(data) // 2])
    with open(path, "rb") as fh:
        assert strip_inline_weights(FileBytes(fh.fileno(), len(data)), "m.onnx") is None
    with pytest.raises(ModelLoadError, match="not an ONNX model"):
        read_model_file(path, weights_on_disk=True)


@pytest.mark.parametrize("path", INLINE_MODELS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_weights_stored_inline_left_on_disk_save_to_the_bytes_of_the_model_loaded_whole(
    path, tmp_path
):
    """The loader's verdict, the model read back in, and the inline save (spliced from the
    file) are those of the same model loaded whole."""
    try:
        eager = read_model_file(path).model
    except ModelLoadError as exc:
        with pytest.raises(ModelLoadError) as caught:
            read_model_file(path, weights_on_disk=True)
        assert str(caught.value) == str(exc)
        return
    lazy = read_model_file(path, weights_on_disk=True).model
    save_model(lazy, tmp_path / "lazy.onnx", external_data=False)
    save_model(eager, tmp_path / "eager.onnx", external_data=False)
    assert (tmp_path / "lazy.onnx").read_bytes() == (tmp_path / "eager.onnx").read_bytes()
    assert load_weights(lazy).SerializeToString() == eager.SerializeToString()


def _weight_model(**fields) -> onnx.ModelProto:
    tensors = [numpy_helper.from_array(np.ones(300, np.float32), name) for name in ("a", "b")]
    for key, value in fields.items():
        if isinstance(value, list):  # a repeated field
            getattr(tensors[1], key).extend(value)
        else:
            setattr(tensors[1], key, value)
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Add", ["a", "b"], ["y"])],
        "g",
        [],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [300])],
        tensors,
    )
    return onnx.helper.make_model(graph)


@pytest.mark.parametrize(
    "fields",
    [{"float_data": [1.0]}, {"data_type": onnx.TensorProto.INT32}, {"dims": [299]}],
    ids=["data-besides-raw-data", "not-float", "wrong-size"],
)
def test_only_float_weights_of_raw_data_alone_stored_inline_are_left_on_disk(fields, tmp_path):
    """A field that describes a weight (doc_string: ``test_llm_layouts.py``) does not keep it
    in memory; data in another field besides ``raw_data`` does."""
    path = tmp_path / "m.onnx"
    if "dims" in fields:
        model = _weight_model()
        del model.graph.initializer[1].dims[:]
        model.graph.initializer[1].dims.append(299)
    else:
        model = _weight_model(**fields)
    path.write_bytes(model.SerializeToString())
    lazy = read_model_file(path, weights_on_disk=True, check=False).model
    assert _on_disk_names(lazy) == ["a"]


def test_bytes_the_inline_reader_does_not_expect_go_to_the_parser_as_they_are():
    data = _weight_model().SerializeToString()
    assert strip_inline_weights(data, "m.onnx") is not None
    for broken in (data[:-7], data + b"\x0f", b"\xff" * 40, data + data[:20]):
        assert strip_inline_weights(broken, "m.onnx") is None


def test_a_model_reached_by_a_link_runs_as_the_file_it_links_to(tmp_path):
    """A link beside the model leaves its weights in the model; a link from another folder
    reads them whole (they may not be named from outside the link's folder)."""
    fixture = next(f for f in WEIGHTED if f.name == "attention_block")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    real = tmp_path / "a" / "model.onnx"
    shutil.copyfile(fixture.model_path, real)
    beside, elsewhere = tmp_path / "a" / "link.onnx", tmp_path / "b" / "link.onnx"
    beside.symlink_to("model.onnx")
    elsewhere.symlink_to(Path("..") / "a" / "model.onnx")
    save_model(run(onnx.load(str(real)), "cleanup").model, tmp_path / "want.onnx")
    for link, kept in ((beside, True), (elsewhere, False)):
        out = link.parent / "out.onnx"
        report = run(link, "cleanup", output=out)
        assert bool(_on_disk_names(report.held_model)) == kept
        assert out.read_bytes() == (tmp_path / "want.onnx").read_bytes()
