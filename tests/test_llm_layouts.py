"""Every way an exporter lays out a model's weights, and the loader leaves each weight on disk.

Large models reach the pipeline in layouts this file builds small: one file per tensor as
torch's exporter writes it (``location`` alone, no offset or length), stored inline by
``onnx.save`` after a load (``data_location`` set to DEFAULT), with a doc_string, with a
checksum entry. For each the loader must leave every large weight where it lies, and the model
read back in, saved, or run on ONNX Runtime must be the very same as with every weight read
into memory (``weights_on_disk=False``, the oracle).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import onnxsurgery
from onnxsurgery.model import weights_on_disk
from onnxsurgery.model.io import load_weights, read_model_file, save_model
from onnxsurgery.model.tensors import on_disk
from onnxsurgery.passes.fold_constants import held_weights as held_module
from onnxsurgery.passes.fold_constants import onnxsim_child
from onnxsurgery.validation import case_runner
from onnxsurgery.validation.against_references import validate
from onnxsurgery.validation.references import Case, save_case
from onnxsurgery.validation.runtime import create_session, run_session

#: Two weights of 16 KiB (fp32) and a bias under the external-data threshold.
_WEIGHTS = ("w1", "w2")


def _model(dtype: int = onnx.TensorProto.FLOAT, width: int = 64) -> onnx.ModelProto:
    np_type = helper.tensor_dtype_to_np_dtype(dtype)
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((width, width)).astype(np_type), name)
        for name in _WEIGHTS
    ]
    inits.append(numpy_helper.from_array(np.ones(width, np_type), "bias"))
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w1"], ["h"]),
            helper.make_node("Add", ["h", "bias"], ["hb"]),
            helper.make_node("MatMul", ["hb", "w2"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", dtype, [2, width])],
        [helper.make_tensor_value_info("y", dtype, [2, width])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _torch_layout(model: onnx.ModelProto, folder: Path) -> Path:
    """As torch's TorchScript exporter writes a model over 2 GB: each initializer of 1 KiB and
    more in a file of its own named after it, its external data ``location`` alone."""
    folder.mkdir(parents=True, exist_ok=True)
    for tensor in model.graph.initializer:
        if len(tensor.raw_data) < 1024:
            continue
        (folder / tensor.name).write_bytes(tensor.raw_data)
        tensor.ClearField("raw_data")
        tensor.data_location = onnx.TensorProto.EXTERNAL
        tensor.external_data.add(key="location", value=tensor.name)
    path = folder / "model.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def _saved_after_load(model: onnx.ModelProto, folder: Path) -> Path:
    """Inline, as ``onnx.save`` writes a model whose external data ``onnx.load`` read in: each
    such tensor carries ``data_location`` = DEFAULT."""
    external = folder / "external"
    external.mkdir(parents=True)
    onnx.save(model, str(external / "model.onnx"), save_as_external_data=True, size_threshold=1024)
    loaded = onnx.load(str(external / "model.onnx"))
    assert loaded.graph.initializer[0].HasField("data_location")  # what the class is about
    path = folder / "model.onnx"
    onnx.save(loaded, str(path))
    return path


def _with_doc_strings(model: onnx.ModelProto) -> onnx.ModelProto:
    for tensor in model.graph.initializer:
        tensor.doc_string = f"the weight {tensor.name}"
        tensor.metadata_props.add(key="origin", value="test")
        tensor.metadata_props.add(key="layer", value="0")
    return model


def _inline(model: onnx.ModelProto, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    onnx.save(model, str(path))
    return path


def _external(model: onnx.ModelProto, folder: Path, *, checksum: bool = False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    onnx.save(model, str(path), save_as_external_data=True, size_threshold=1024)
    if checksum:
        written = onnx.load(str(path), load_external_data=False)
        for tensor in written.graph.initializer:
            if tensor.data_location == onnx.TensorProto.EXTERNAL:
                tensor.external_data.add(key="checksum", value="0" * 40)
        path.write_bytes(written.SerializeToString())
    return path


def _without_offset_length(model: onnx.ModelProto, folder: Path) -> Path:
    """One file per tensor, as ``onnx.save(all_tensors_to_one_file=False)``, then the offset
    and length entries taken out (``location`` only, the bytes the whole file)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=False, size_threshold=1024)
    written = onnx.load(str(path), load_external_data=False)
    for tensor in written.graph.initializer:
        kept = [(e.key, e.value) for e in tensor.external_data if e.key == "location"]
        del tensor.external_data[:]
        for key, value in kept:
            tensor.external_data.add(key=key, value=value)
    path.write_bytes(written.SerializeToString())
    return path


LAYOUTS = {
    "torch-exporter": lambda m, d: _torch_layout(m, d),
    "onnx-save-after-load": lambda m, d: _saved_after_load(m, d),
    "inline-doc-string": lambda m, d: _inline(_with_doc_strings(m), d),
    "external-doc-string": lambda m, d: _external(_with_doc_strings(m), d),
    "external-checksum": lambda m, d: _external(m, d, checksum=True),
    "no-offset-no-length": lambda m, d: _without_offset_length(m, d),
}
DTYPES = {"fp32": onnx.TensorProto.FLOAT, "fp16": onnx.TensorProto.FLOAT16}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_large_weight_stays_on_disk(tmp_path, layout, dtype):
    path = LAYOUTS[layout](_model(DTYPES[dtype]), tmp_path / "in")
    held = read_model_file(path, weights_on_disk=True).model
    assert [t.name for t in held.graph.initializer if on_disk(t)] == list(_WEIGHTS)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_read_back_in_it_is_the_model_onnx_loads(tmp_path, layout):
    path = LAYOUTS[layout](_model(), tmp_path / "in")
    oracle = read_model_file(path).model
    held = read_model_file(path, weights_on_disk=True).model
    assert load_weights(held).SerializeToString() == oracle.SerializeToString()


@pytest.mark.parametrize("external_data", [True, False])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_saved_from_disk_it_is_the_bytes_a_full_load_saves(tmp_path, layout, external_data):
    path = LAYOUTS[layout](_model(), tmp_path / "in")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    oracle = save_model(read_model_file(path).model, tmp_path / "a" / "m.onnx", external_data=external_data)
    held = read_model_file(path, weights_on_disk=True).model
    ours = save_model(held, tmp_path / "b" / "m.onnx", external_data=external_data)
    assert ours.read_bytes() == oracle.read_bytes()
    if external_data:
        assert (tmp_path / "b" / "m.onnx.data").read_bytes() == (tmp_path / "a" / "m.onnx.data").read_bytes()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_onnx_runtime_reads_the_weights_where_they_lie(tmp_path, layout):
    path = LAYOUTS[layout](_model(), tmp_path / "in")
    x = {"x": np.random.default_rng(1).standard_normal((2, 64)).astype(np.float32)}
    expected = run_session(create_session(read_model_file(path).model, "cpu"), ["y"], x)
    held = read_model_file(path, weights_on_disk=True).model
    got = run_session(create_session(held, "cpu"), ["y"], x)
    np.testing.assert_array_equal(got[0], expected[0])


def test_a_file_longer_than_the_tensor_without_a_length_is_read_in(tmp_path):
    """Without a length, onnx reads to the end of the file: a file holding more than the tensor
    is not the tensor's bytes alone, so that weight is read in, as onnx reads it."""
    path = _torch_layout(_model(), tmp_path / "in")
    with open(tmp_path / "in" / "w1", "ab") as fh:
        fh.write(b"\0" * 4)
    held = read_model_file(path, weights_on_disk=True).model
    assert [t.name for t in held.graph.initializer if on_disk(t)] == ["w2"]
    assert len(held.graph.initializer[0].raw_data) == 64 * 64 * 4 + 4


def test_fold_constants_reads_in_only_the_weights_onnxsim_gets(tmp_path, monkeypatch):
    """Over 2 GB (the threshold lowered here) onnxsim holds back the weights no folding reads:
    those stay where they lie, never read in, and the folded model computes what it did."""
    monkeypatch.setattr(onnxsim_child, "LARGE_MODEL_BYTES", 1)
    monkeypatch.setattr(held_module, "HELD_MIN_BYTES", 1)
    path = _torch_layout(_model(), tmp_path / "in")
    read: list[str] = []
    real = weights_on_disk.tensor_data
    monkeypatch.setattr(weights_on_disk, "tensor_data", lambda t: read.append(t.name) or real(t))
    (tmp_path / "out").mkdir()
    out = tmp_path / "out" / "m.onnx"
    report = onnxsurgery.run(path, "fold-constants", output=out, provider="cpu")
    assert "3 weight(s) no folding reads" in report.passes[0].diagnostics[0].message
    assert read == []
    x = {"x": np.random.default_rng(1).standard_normal((2, 64)).astype(np.float32)}
    expected = run_session(create_session(read_model_file(path).model, "cpu"), ["y"], x)
    got = run_session(create_session(read_model_file(out).model, "cpu"), ["y"], x)
    np.testing.assert_array_equal(got[0], expected[0])


def _fp16_case(path: Path, error: float) -> Case:
    """A case for the fp16 model at ``path``: its own output, as float64 math gives it, rounded
    to float16 and moved by ``error`` relative (torch's fp16 kernels round differently)."""
    model = read_model_file(path).model
    w1, w2 = (numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer[:2])
    x = (np.random.default_rng(2).standard_normal((2, 64)) / 8).astype(np.float16)
    y = ((x.astype(np.float64) @ w1 + 1) @ w2) * (1 + error)
    return Case(name="case", inputs={"x": x}, outputs={"y": y.astype(np.float16)})


@pytest.mark.parametrize(("error", "passed"), [(2e-3, True), (5e-2, False)])
def test_fp16_outputs_are_compared_at_the_fp16_tolerance(tmp_path, error, passed):
    """Float16 outputs against torch's float16 outputs: the default is the fp16 tolerance
    (rounding differences of a few steps pass; 5% off does not), and the report says so."""
    path = _torch_layout(_model(onnx.TensorProto.FLOAT16), tmp_path / "in")
    report = validate(str(path), [_fp16_case(path, error)], provider="cpu")
    assert bool(report) is passed
    assert "float16 outputs atol 2e-2, rtol 1e-2 (fp16 defaults)" in report.tolerance_text()
    assert "float16 at atol 2e-2, rtol 1e-2" in report.summary or not passed


def test_a_tolerance_given_applies_to_fp16_outputs_as_given(tmp_path):
    path = _torch_layout(_model(onnx.TensorProto.FLOAT16), tmp_path / "in")
    report = validate(str(path), [_fp16_case(path, 2e-3)], provider="cpu", atol=1e-4, rtol=1e-4)
    assert not report


def test_validate_by_path_reads_no_weight_in(tmp_path, monkeypatch):
    """ONNX Runtime reads a model given by path from its files: validation's own copy of the
    model is its graph, the weights left where they lie (else they sat in memory twice)."""
    path = _torch_layout(_model(onnx.TensorProto.FLOAT16), tmp_path / "in")
    case = _fp16_case(path, 2e-3)
    read: list[str] = []
    real = weights_on_disk.tensor_data
    monkeypatch.setattr(weights_on_disk, "tensor_data", lambda t: read.append(t.name) or real(t))
    loads: list[str] = []
    real_load = onnx.external_data_helper.load_external_data_for_tensor
    monkeypatch.setattr(
        onnx.external_data_helper,
        "load_external_data_for_tensor",
        lambda t, base: loads.append(t.name) or real_load(t, base),
    )
    assert validate(str(path), [case], provider="cpu")
    assert (read, loads) == ([], [])


def _batch_cases(path: Path, folder: Path, batches: tuple[int, ...] = (2, 3)) -> Path:
    """Reference cases for the model at ``path`` at each batch, its outputs as float64 math
    gives them (what torch would have stored)."""
    model = read_model_file(path).model
    w1, w2, bias = (numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer)
    rng = np.random.default_rng(3)
    np_type = helper.tensor_dtype_to_np_dtype(model.graph.input[0].type.tensor_type.elem_type)
    for k, batch in enumerate(batches):
        x = (rng.standard_normal((batch, len(bias))) / 8).astype(np_type)
        y = ((x.astype(np.float64) @ w1 + bias) @ w2).astype(np_type)
        save_case(Case(name=f"b{batch}", inputs={"x": x}, outputs={"y": y}), folder, index=k)
    return folder


def _sessions_built_by_validation(monkeypatch) -> list[object]:
    """Every model validation's case runner builds a session for, from now on."""
    built: list[object] = []
    real = case_runner.create_session
    monkeypatch.setattr(
        case_runner, "create_session", lambda model, *a, **k: built.append(model) or real(model, *a, **k)
    )
    return built


def _content(report) -> dict:
    """A validation report's facts (cases, outputs, errors), without timings and notes."""
    facts = {k: v for k, v in report.to_dict().items() if "seconds" not in k and k != "notes"}
    for case in facts["cases"]:
        case.pop("inference_seconds"), case.pop("compare_seconds")
    return facts


def test_validation_after_symbolize_runs_on_the_session_its_check_built(tmp_path, monkeypatch):
    """symbolize's check ran the reference cases on a session over exactly the model it
    returns; the run's validation right after it runs on that session (loading a large model in
    ONNX Runtime again was most of its time), says so, and finds what a session of its own finds."""
    path = _torch_layout(_model(), tmp_path / "in")
    refs = _batch_cases(path, tmp_path / "refs")
    built = _sessions_built_by_validation(monkeypatch)
    report = onnxsurgery.run(path, "symbolize(x:0=batch)", references=refs, provider="cpu")
    assert report.validation and built == []
    assert report.validation.notes == [
        "cases run on the session symbolize's check built over this model"
    ]
    unchecked = onnxsurgery.run(
        path, "symbolize(x:0=batch, check=false)", references=refs, provider="cpu"
    )
    assert len(built) == 1 and unchecked.validation.notes == []
    assert _content(report.validation) == _content(unchecked.validation)


def test_a_pass_after_symbolize_gets_validation_a_session_of_its_own(tmp_path, monkeypatch):
    """A pass after symbolize may change the model its check's session runs: that session is
    dropped before the pass, and validation builds its own."""
    path = _torch_layout(_model(), tmp_path / "in")
    refs = _batch_cases(path, tmp_path / "refs")
    built = _sessions_built_by_validation(monkeypatch)
    report = onnxsurgery.run(path, "symbolize(x:0=batch), cleanup", references=refs, provider="cpu")
    assert report.validation and len(built) == 1 and report.validation.notes == []


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES)
def test_the_runs_validation_finds_what_validate_finds(tmp_path, dtype):
    """Every session is built alike (no prepacked weights, which ORT rounds otherwise at
    widths of 256 and more): validation on symbolize's check session gives, to the bit, what
    validation with a session of its own (a pass after symbolize) and ``validate`` give."""
    path = _torch_layout(_model(dtype, width=256), tmp_path / "in")
    refs = _batch_cases(path, tmp_path / "refs")
    axes = "symbolize(x:0=batch)"
    shared = onnxsurgery.run(path, axes, references=refs, provider="cpu", output=tmp_path / "o.onnx")
    own = onnxsurgery.run(path, f"{axes}, cleanup", references=refs, provider="cpu")
    alone = validate(str(tmp_path / "o.onnx"), str(refs), provider="cpu")
    assert shared.validation.notes and not own.validation.notes
    assert _content(shared.validation) == _content(own.validation)
    assert _content(alone) == _content(own.validation)


def test_the_checks_session_is_gone_before_a_mismatch_is_localized(tmp_path, monkeypatch):
    """A mismatch at the run's tolerance (tighter than the check's) is localized with sessions
    of its own: the check's session, done with, is no longer held by then."""
    import weakref

    from onnxsurgery import divergence

    path = _torch_layout(_model(width=256), tmp_path / "in")
    refs = _batch_cases(path, tmp_path / "refs")
    given: list[weakref.ref] = []
    real_init = case_runner.ModelRunner.__init__

    def init(self, model, choice, session=None):
        given.extend([weakref.ref(session)] if session is not None else [])
        real_init(self, model, choice, session)

    held: list[bool] = []
    real_localize = divergence.localize_failure
    monkeypatch.setattr(case_runner.ModelRunner, "__init__", init)
    monkeypatch.setattr(
        divergence, "localize_failure", lambda *a, **k: held.append(given[0]() is not None) or real_localize(*a, **k)
    )
    with pytest.raises(onnxsurgery.errors.ValidationMismatch):
        onnxsurgery.run(path, "symbolize(x:0=batch)", references=refs, provider="cpu", atol=1e-12, rtol=1e-12)
    assert len(given) == 1 and held == [False]


def _run_all():
    """bench/run_all.py as a module (bench/ is no package)."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "bench" / "run_all.py"
    spec = importlib.util.spec_from_file_location("run_all_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_make_bench_llm_huge_runs_the_huge_decoder_last(tmp_path, monkeypatch):
    """``make bench ARGS=--llm-huge`` runs ``bench_llm.py --huge`` after the other benchmarks."""
    import subprocess
    from types import SimpleNamespace

    run_all = _run_all()
    ran: list[list[str]] = []

    def fake_run(argv, **_):
        ran.append(argv)
        Path(argv[-1]).write_text("[]")
        return subprocess.CompletedProcess(argv, 0, "table\n", "")

    # run_all's own name only: platform.processor() runs `uname -p` through subprocess.run
    monkeypatch.setattr(run_all, "subprocess", SimpleNamespace(run=fake_run))
    code = run_all.main(["--llm-huge", "--out", str(tmp_path), "--results", str(tmp_path / "r.json")])
    assert code == 0
    assert Path(ran[-1][1]).name == "bench_llm.py" and ran[-1][2:-2] == ["--huge"]
    assert all("--huge" not in argv for argv in ran[:-1])
    assert (tmp_path / "bench_llm_huge.json").exists()
    with pytest.raises(SystemExit):
        run_all.main(["--llm-huge", "--quick", "--out", str(tmp_path)])


def _rss_anon() -> int:
    """Bytes of this process's anonymous memory (heap, ORT's own buffers; not mapped files)."""
    with open("/proc/self/status") as status:
        return 1024 * int(next(line for line in status if line.startswith("RssAnon")).split()[1])


def _matmul_chain(dtype, layers: int = 9, width: int = 2048) -> onnx.ModelProto:
    """x @ w0 @ w1 ... in ``dtype``: 72 MiB of float16 weights (over MAPPED_BYTES), which ORT's CPU
    provider casts to float32 for its MatMul as TinyLlama's fp16 export has it cast."""
    rng = np.random.default_rng(0)
    np_type = helper.tensor_dtype_to_np_dtype(dtype)
    inits = [
        numpy_helper.from_array((rng.standard_normal((width, width)) / 45).astype(np_type), f"w{i}")
        for i in range(layers)
    ]
    names = ["x", *(f"h{i}" for i in range(1, layers)), "y"]
    nodes = [helper.make_node("MatMul", [names[i], f"w{i}"], [names[i + 1]]) for i in range(layers)]
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", dtype, ["b", width])],
        [helper.make_tensor_value_info("y", dtype, ["b", width])], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads RssAnon from /proc")
def test_a_check_session_over_fp16_weights_holds_no_float32_copy_of_them(tmp_path):
    """ORT's CPU provider casts float16 weights to float32 for most ops; with its default
    optimizations it folds each Cast into a float32 copy of the weight, held for the session's
    life (TinyLlama fp16: 2.2x the model). A session run a few times (the check's) casts as it
    runs, each copy gone once its op ran: ORT holds no weight-sized memory of its own, and the
    outputs are the float32 products rounded to float16 after each op, as with folded copies."""
    model = _matmul_chain(onnx.TensorProto.FLOAT16)
    arrays = [numpy_helper.to_array(t) for t in model.graph.initializer]
    weights = sum(a.nbytes for a in arrays)
    feeds = {"x": np.random.default_rng(1).standard_normal((3, 2048)).astype(np.float16)}
    expected = feeds["x"]
    for array in arrays:
        expected = (expected.astype(np.float32) @ array.astype(np.float32)).astype(np.float16)
    before = _rss_anon()
    session = create_session(model, "cpu", threads=1, prepack=False, mapped=True)
    assert _rss_anon() - before < 0.5 * weights
    got = run_session(session, ["y"], feeds)[0]
    assert _rss_anon() - before < 0.5 * weights
    np.testing.assert_allclose(got.astype(np.float32), expected.astype(np.float32), atol=1e-2, rtol=1e-2)


def test_a_check_session_over_fp32_weights_keeps_every_optimization():
    """Only weights ORT casts change a session's options: a float32 model's check session is
    optimized as before (its outputs unchanged)."""
    import onnxruntime as ort

    for dtype, level in [
        (onnx.TensorProto.FLOAT, ort.GraphOptimizationLevel.ORT_ENABLE_ALL),
        (onnx.TensorProto.FLOAT16, ort.GraphOptimizationLevel.ORT_ENABLE_BASIC),
    ]:
        session = create_session(_matmul_chain(dtype, layers=2, width=8), "cpu", prepack=False)
        assert session.get_session_options().graph_optimization_level == level


def _foldable(width: int = 64) -> onnx.ModelProto:
    """``_model``'s chain with what onnxsim folds: a Transpose of a weight, a shape computed from
    constants for a Reshape."""
    model = _model(width=width)
    graph = model.graph
    graph.node[-1].input[1] = "w2t"
    graph.node.insert(2, helper.make_node("Transpose", ["w2"], ["w2t"], perm=[1, 0]))
    graph.node[-1].output[0] = "y0"
    graph.initializer.extend([
        numpy_helper.from_array(np.array([1, width], np.int64), "c"),
        numpy_helper.from_array(np.array([1, 0], np.int64), "d"),
    ])  # fmt: skip
    graph.node.extend([
        helper.make_node("Add", ["c", "d"], ["shape"]),
        helper.make_node("Reshape", ["y0", "shape"], ["y1"]),
        helper.make_node("Relu", ["y1"], ["y"]),
    ])  # fmt: skip
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, width]))
    return model


def test_fold_constants_gives_onnxsim_a_large_model_in_memory_by_path(monkeypatch):
    """A model passed in memory with BY_PATH_BYTES of tensors or more (the threshold lowered
    here) goes to onnxsim by path, written with external data: in memory onnxsim holds the
    model's bytes, its parse, its result's bytes and the checker's parse of them at once (a
    1.5 GB model peaked at 6.1x its size). The folded model is the one the in-memory route
    makes."""
    import onnxsim

    given: list[object] = []
    real = onnxsim.simplify
    monkeypatch.setattr(onnxsim, "simplify", lambda model, *a, **k: given.append(model) or real(model, *a, **k))
    in_memory = onnxsurgery.run(_foldable(), "fold-constants", provider="cpu").model
    assert isinstance(given[-1], onnx.ModelProto)
    monkeypatch.setattr(onnxsim_child, "BY_PATH_BYTES", 1)
    by_path = onnxsurgery.run(_foldable(), "fold-constants", provider="cpu").model
    assert isinstance(given[-1], str)
    assert len(by_path.graph.node) < len(_foldable().graph.node)
    assert by_path.graph.SerializeToString() == in_memory.graph.SerializeToString()


def test_a_session_by_path_over_fp16_weights_casts_them_as_it_runs(tmp_path):
    """validate MODEL builds its session by path: its graph is read (the weights left where they
    lie) to see that they are float16, and the session casts them as it runs, as the check's
    does (a TinyLlama-1.1B fp16 validate: 1.97x the model -> 1.14x)."""
    import onnxruntime as ort

    for dtype, level in [
        (onnx.TensorProto.FLOAT, ort.GraphOptimizationLevel.ORT_ENABLE_ALL),
        (onnx.TensorProto.FLOAT16, ort.GraphOptimizationLevel.ORT_ENABLE_BASIC),
    ]:
        path = _torch_layout(_matmul_chain(dtype, layers=2, width=512), tmp_path / str(dtype))
        session = create_session(path, "cpu")
        assert session.get_session_options().graph_optimization_level == level
