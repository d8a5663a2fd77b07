"""Hostile input, class by class, through the CLI: exit 2 with at most 2 stderr lines, no
traceback, no output left, the input's bytes and mtime unchanged. Then the pipeline's boundary
(exit 3 for our own bugs), --keep-failed and --report on failure, a bounded fuzz slice, and
hypothesis-built graphs through every pass."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from fuzzing import CLASSES, FIXTURES, campaign
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh
from typer.testing import CliRunner

import onnxsurgery
from onnxsurgery import ModelLoadError, OnnxSurgeryError, compare_models
from onnxsurgery.cli import app, main

runner = CliRunner()


def base_model() -> onnx.ModelProto:
    return onnx.parser.parse_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[4, 3] x) => (float[4, 3] y) { r = Relu(x)
        y = Neg(r) }"""
    )


def graph_model(nodes, inits, out_shape=(4, 3), name="g") -> onnx.ModelProto:
    g = h.make_graph(
        nodes, name, [h.make_tensor_value_info("x", TP.FLOAT, [4, 3])],
        [h.make_tensor_value_info("y", TP.FLOAT, list(out_shape))], inits,
    )
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


def external_tensor(location: str, offset: str = "0", length: str = "4") -> onnx.TensorProto:
    t = h.make_tensor("w", TP.FLOAT, [1], [1.0])
    del t.float_data[:]
    t.data_location = TP.EXTERNAL
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        t.external_data.add(key=key, value=value)
    return t


def with_init(tensor: onnx.TensorProto) -> onnx.ModelProto:
    m = base_model()
    m.graph.initializer.append(tensor)
    return m


def _bad_utf8(field: str):
    def build(tmp: Path) -> bytes:
        m = base_model()
        marker = "Q\u00ffQ"
        if field == "op_type":
            m.graph.node[0].op_type = marker
        elif field == "domain":
            m.graph.node[0].domain = marker
        elif field == "graph name":
            m.graph.name = marker
        else:
            m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = marker
        return m.SerializeToString().replace(marker.encode(), b"Q\xffQ")  # not UTF-8

    return build


def _loop_bomb(tmp: Path) -> bytes:
    body = h.make_graph(
        [h.make_node("Identity", ["c_in"], ["c_out"]), h.make_node("Relu", ["v_in"], ["v_out"])], "body",
        [h.make_tensor_value_info("i", TP.INT64, []), h.make_tensor_value_info("c_in", TP.BOOL, []),
         h.make_tensor_value_info("v_in", TP.FLOAT, [4, 3])],
        [h.make_tensor_value_info("c_out", TP.BOOL, []), h.make_tensor_value_info("v_out", TP.FLOAT, [4, 3])],
    )
    inits = [nh.from_array(np.array(10**12, np.int64), "M"), nh.from_array(np.array(True), "c")]
    return graph_model([h.make_node("Loop", ["M", "c", "x"], ["y"], body=body)], inits).SerializeToString()


def _chain_bomb(tmp: Path) -> bytes:
    nodes = [h.make_node("Shape", ["x"], ["s"]), h.make_node("Gather", ["s", "zero"], ["g0"], axis=0)]
    prev = "g0"
    for i in range(5000):
        nodes += [h.make_node("Add", [prev, "one"], [f"a{i}"]), h.make_node("Sub", [f"a{i}", "one"], [f"b{i}"])]
        prev = f"b{i}"
    nodes += [
        h.make_node("Unsqueeze", [prev, "z1"], ["u"]),
        h.make_node("Concat", ["u", "m1"], ["shape"], axis=0),
        h.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    inits = [nh.from_array(np.array(v, np.int64), n) for n, v in (("zero", 0), ("one", 1), ("z1", [0]), ("m1", [-1]))]
    return graph_model(nodes, inits).SerializeToString()


def _range_bomb(tmp: Path) -> bytes:
    nodes = [
        h.make_node("Range", ["s0", "lim", "d1"], ["r"]),
        h.make_node("Cast", ["r"], ["rf"], to=TP.FLOAT),
        h.make_node("ReduceSum", ["rf"], ["t"], keepdims=0),
        h.make_node("Add", ["x", "t"], ["y"]),
    ]
    inits = [nh.from_array(np.array(v, np.int64), n) for n, v in (("s0", 0), ("lim", 10**12), ("d1", 1))]
    return graph_model(nodes, inits).SerializeToString()


def _cycle(tmp: Path) -> bytes:
    m = base_model()
    m.graph.node[0].input[0] = "y"  # Relu reads Neg's output, Neg reads Relu's
    return m.SerializeToString()


def _negative_dim(tmp: Path) -> bytes:
    m = base_model()
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = -7
    return m.SerializeToString()


def _dtype(value: int, where: str):
    def build(tmp: Path) -> bytes:
        m = base_model()
        if where == "initializer":
            t = h.make_tensor("w", TP.FLOAT, [1], [1.0])
            t.data_type = value
            m.graph.initializer.append(t)
        else:
            m.graph.input[0].type.tensor_type.elem_type = value
        return m.SerializeToString()

    return build


def _external(location: str, offset: str = "0", length: str = "4"):
    def build(tmp: Path) -> bytes:
        (tmp / "w.bin").write_bytes(b"\0" * 8)
        return with_init(external_tensor(location, offset, length)).SerializeToString()

    return build


def _huge_input(tmp: Path) -> bytes:
    m = onnx.parser.parse_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[4, 2147483648, 2147483648] x) => (float[4, 2147483648, 2147483648] y) { y = Relu(x) }"""
    )
    return m.SerializeToString()


def _plain(tmp: Path) -> bytes:
    return base_model().SerializeToString()


# (id, model bytes builder, passes, extra CLI args relative to tmp, expected fragment of the error)
CASES = [
    ("utf8-op-type", _bad_utf8("op_type"), "cleanup", [], "not an ONNX model"),
    ("utf8-domain", _bad_utf8("domain"), "cleanup", [], "not an ONNX model"),
    ("utf8-graph-name", _bad_utf8("graph name"), "cleanup", [], "not an ONNX model"),
    ("utf8-dim-param", _bad_utf8("dim_param"), "cleanup", [], "not an ONNX model"),
    ("dtype-65", _dtype(65, "initializer"), "cleanup", [], "data type 65"),
    ("dtype-99", _dtype(99, "input"), "symbolize", [], "element type 99"),
    ("external-offset-negative", _external("w.bin", "-5"), "cleanup", [], "offset -5 is negative"),
    ("external-length-not-int", _external("w.bin", "0", "4.5"), "cleanup", [], "is not an integer"),
    ("external-nul", _external("w\x00.bin"), "cleanup", [], "NUL byte"),
    ("cycle", _cycle, "symbolize", [], "topologically sorted"),
    ("negative-dim-fold", _negative_dim, "fold-constants", [], "dim 0 = -7"),
    ("loop-1e12", _loop_bomb, "symbolize", [], "max_loop_trips"),
    ("chain-10k", _chain_bomb, "symbolize", [], "max_dim_terms"),
    ("range-1e12", _range_bomb, "symbolize", [], "max_elements"),
    ("self-check-input-2^62", _huge_input, "symbolize", [], "random input of dims [4, 2147483648, 2147483648]"),
    ("check-huge", _plain, "fold-constants(check=99999999999999999999999)", [], "from 0 to 1000"),
    ("nested-brackets", _plain, "cleanup(x=" + "[" * 5000 + ")", [], "nested deeper than 32"),
    ("huge-size", _plain, "fold-constants(size_threshold=1" + "0" * 400 + "MB)", [], "under 2 GB"),
    ("long-ref", _plain, "validate(ref=" + "a" * 300 + ")", [], "validate"),
    ("long-pass-name", _plain, "a" * 100_000, [], "(100000 characters)"),
    ("report-is-input", _plain, "cleanup", ["--report", "{model}"], "would overwrite the input model"),
    ("report-is-output", _plain, "cleanup", ["--report", "{out}"], "both"),
    ("report-missing-folder", _plain, "cleanup", ["--report", "{tmp}/missing/r.json"], "does not exist"),
    ("keep-failed-is-input", _plain, "cleanup", ["--keep-failed", "{model}"], "would overwrite the input"),
    ("output-folder-is-a-file", _plain, "cleanup", ["-o", "{model}/o.onnx"], "does not exist"),
    ("output-name-too-long", _plain, "cleanup", ["-o", "{tmp}/" + "x" * 300 + ".onnx"], "too long"),
    ("limit-unknown", _plain, "cleanup", ["--limit", "nope=1"], "unknown limit"),
]


def _invoke(args):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "80"})


def assert_clean_refusal(result, fragment: str) -> None:
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2, result.stderr
    assert 1 <= len(lines) <= 2, result.stderr
    assert "Traceback" not in result.output
    assert lines[0].startswith("error: ")
    assert fragment in result.stderr.replace("\n", " "), result.stderr


@pytest.mark.parametrize("name, build, passes, extra, fragment", CASES, ids=[c[0] for c in CASES])
def test_hostile_input_is_refused_cleanly(tmp_path, name, build, passes, extra, fragment):
    model = tmp_path / "model.onnx"
    model.write_bytes(build(tmp_path))
    os.utime(model, ns=(1_000_000_000, 1_000_000_000))
    before = model.read_bytes()
    out = tmp_path / "out.onnx"
    args = [a.format(model=model, out=out, tmp=tmp_path) for a in extra]
    if "-o" not in args:
        args = ["-o", out, *args]
    listing = set(tmp_path.iterdir())
    result = _invoke(["run", model, "--passes", passes, *args])
    assert_clean_refusal(result, fragment)
    assert model.read_bytes() == before and model.stat().st_mtime_ns == 1_000_000_000
    assert set(tmp_path.iterdir()) == listing  # no output, no report, no temp file


@pytest.mark.parametrize("path", ["fifo", "/dev/zero"])
def test_fifo_and_device_are_refused_without_reading(tmp_path, path):
    if path == "fifo":
        path = tmp_path / "fifo.onnx"
        os.mkfifo(path)
    result = _invoke(["run", path, "--passes", "cleanup", "-o", tmp_path / "o.onnx"])
    assert_clean_refusal(result, "expected an .onnx file (a regular file)")


def test_toml_nesting_is_refused(tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text("[[pass]]\nname = 'cleanup'\nx = " + "[" * 5000 + "]" * 5000 + "\n")
    model = tmp_path / "m.onnx"
    model.write_bytes(_plain(tmp_path))
    assert_clean_refusal(_invoke(["run", model, "--recipe", recipe, "-o", tmp_path / "o.onnx"]), "nested too deeply")


def test_markup_in_paths_is_printed_as_written(tmp_path):
    folder = tmp_path / "[" / "b]"  # the path reads .../[/b]/...
    folder.mkdir(parents=True)
    result = _invoke(["run", folder / "[bold]x.onnx", "--passes", "cleanup"])
    assert_clean_refusal(result, "[/b]/[bold]x.onnx: no such file")


def test_help_texts_render_their_brackets():
    text = runner.invoke(app, ["run", "-h"], env={"COLUMNS": "200"}).stdout
    assert "[[pass]]" in text and "[default: MODEL.surgery.onnx" in text.replace("\n", " ").replace("│", "")


def test_our_own_bug_exits_3_with_one_line_and_traceback_on_request(tmp_path, monkeypatch):
    import onnxsurgery

    monkeypatch.setattr(onnxsurgery, "summarize", lambda model: {}["boom"])  # what inspect calls
    result = _invoke(["inspect", tmp_path / "m.onnx"])
    assert result.exit_code == 3
    assert result.stderr.count("\n") == 1 and "internal error" in result.stderr and "KeyError" in result.stderr
    result = _invoke(["--traceback", "inspect", tmp_path / "m.onnx"])
    assert result.exit_code == 3 and "Traceback" in result.stderr


def test_report_is_written_when_a_pass_fails(tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(_range_bomb(tmp_path))
    report = tmp_path / "r.json"
    result = _invoke(["run", model, "--passes", "cleanup", "-o", tmp_path / "o.onnx", "--report", report])
    assert result.exit_code == 2 and report.is_file() and "max_elements" in report.read_text()


def test_keep_failed_writes_the_failing_model(tmp_path):
    fixture = FIXTURES[0].parent
    model = tmp_path / "m.onnx"
    m = onnx.load(fixture / "model.onnx")
    for t in m.graph.initializer:  # change the weights: validation must fail
        if t.data_type == TP.FLOAT and t.raw_data:
            arr = nh.to_array(t) + 1.0
            t.CopyFrom(nh.from_array(arr, t.name))
    onnx.save(m, model)
    kept = tmp_path / "kept.onnx"
    result = _invoke(["run", model, "--passes", "cleanup", "-o", tmp_path / "o.onnx", "--ref", fixture, "--keep-failed", kept, "-q"])
    assert result.exit_code == 1, result.stderr
    assert kept.is_file() and not (tmp_path / "o.onnx").exists()
    assert len(onnx.load(kept).graph.node) == len(m.graph.node)


def test_model_proto_goes_through_the_loader_checks(tmp_path):
    (tmp_path / "w.bin").write_bytes(np.float32([2.0]).tobytes())
    m = with_init(external_tensor("w.bin"))
    with pytest.raises(ModelLoadError, match="base_dir"):
        onnxsurgery.run(m, "cleanup")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with pytest.raises(ModelLoadError, match="does not exist"):
        onnxsurgery.run(m, "cleanup", base_dir=elsewhere)
    report = onnxsurgery.run(m, "cleanup", base_dir=tmp_path)
    assert report.ok
    bad = base_model()
    bad.graph.input[0].type.tensor_type.elem_type = 99
    with pytest.raises(ModelLoadError, match="element type 99"):
        onnxsurgery.run(bad, "cleanup")


def test_run_table_reads_at_80_columns(tmp_path):
    model = tmp_path / "m.onnx"
    onnx.save(onnx.load(FIXTURES[0]), model)
    result = _invoke(["run", model, "--passes", "cleanup, symbolize, infer-shapes", "-o", tmp_path / "o.onnx"])
    assert result.exit_code == 0, result.stderr
    for line in result.stdout.splitlines():
        assert len(line) <= 80
    rows = [ln for ln in result.stdout.splitlines() if ln.startswith("│")]
    assert len(rows) <= 6, result.stdout  # one line per pass, no word-per-line notes column


def test_fuzz_slice_has_no_uncaught_input():
    seen = {cls: 0 for cls in CLASSES}
    problems = []
    for case, outcome in campaign(240, seed=7, classes=CLASSES, weights=[3, 3, 3, 2]):
        seen[case.cls] += 1
        if outcome.problem:
            problems.append((case.argv, outcome.problem))
    assert all(seen.values()), seen
    assert not problems, problems[:3]


# -- properties: small valid graphs through every pass ----------------------------------------


@st.composite
def small_graphs(draw):
    """A valid float graph over x[2, 4, 6]: elementwise, Reshape, Concat, MatMul, Slice, Expand, If."""
    nodes, inits, shape, cur = [], [], [2, 4, 6], "x"
    count = draw(st.integers(1, 4))
    for i in range(count):
        kind = draw(st.sampled_from(["elementwise", "Reshape", "Concat", "MatMul", "Slice", "Expand", "If"]))
        out = f"t{i}"
        if kind == "elementwise":
            op = draw(st.sampled_from(["Relu", "Neg", "Add", "Mul", "Sigmoid"]))
            if op in ("Add", "Mul"):
                inits.append(nh.from_array(np.full([shape[-1]], 0.5, np.float32), f"c{i}"))
                nodes.append(h.make_node(op, [cur, f"c{i}"], [out]))
            else:
                nodes.append(h.make_node(op, [cur], [out]))
        elif kind == "Reshape":
            new = [shape[0], -1]
            inits.append(nh.from_array(np.array(new, np.int64), f"s{i}"))
            nodes.append(h.make_node("Reshape", [cur, f"s{i}"], [out]))
            shape = [shape[0], int(np.prod(shape[1:]))]
        elif kind == "Concat":
            nodes.append(h.make_node("Concat", [cur, cur], [out], axis=len(shape) - 1))
            shape = shape[:-1] + [shape[-1] * 2]
        elif kind == "MatMul":
            k = draw(st.integers(1, 5))
            inits.append(nh.from_array(np.ones([shape[-1], k], np.float32) / shape[-1], f"w{i}"))
            nodes.append(h.make_node("MatMul", [cur, f"w{i}"], [out]))
            shape = shape[:-1] + [k]
        elif kind == "Slice":
            end = draw(st.integers(1, shape[-1]))
            inits += [nh.from_array(np.array([0], np.int64), f"b{i}"), nh.from_array(np.array([end], np.int64), f"e{i}"),
                      nh.from_array(np.array([len(shape) - 1], np.int64), f"a{i}")]
            nodes.append(h.make_node("Slice", [cur, f"b{i}", f"e{i}", f"a{i}"], [out]))
            shape = shape[:-1] + [end]
        elif kind == "Expand":
            inits.append(nh.from_array(np.array([1] * len(shape), np.int64), f"x{i}"))
            nodes.append(h.make_node("Expand", [cur, f"x{i}"], [out]))
        else:
            then_g = h.make_graph([h.make_node("Relu", [cur], ["then_out"])], f"then{i}", [],
                                  [h.make_tensor_value_info("then_out", TP.FLOAT, shape)])
            else_g = h.make_graph([h.make_node("Neg", [cur], ["else_out"])], f"else{i}", [],
                                  [h.make_tensor_value_info("else_out", TP.FLOAT, shape)])
            inits.append(nh.from_array(np.array(draw(st.booleans())), f"cond{i}"))
            nodes.append(h.make_node("If", [f"cond{i}"], [out], then_branch=then_g, else_branch=else_g))
        cur = out
    nodes.append(h.make_node("Identity", [cur], ["y"]))
    g = h.make_graph(nodes, "prop", [h.make_tensor_value_info("x", TP.FLOAT, [2, 4, 6])],
                     [h.make_tensor_value_info("y", TP.FLOAT, shape)], inits)
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("chain", ["cleanup", "infer-shapes", "symbolize", "concat-outputs", "fold-constants"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(model=small_graphs())
def test_every_pass_keeps_the_function_or_refuses(chain, model):
    try:
        report = onnxsurgery.run(model, chain, provider="cpu")
    except OnnxSurgeryError:
        return  # refusing is allowed; any other exception fails the test
    feeds = {"x": np.random.default_rng(0).standard_normal([2, 4, 6]).astype(np.float32)}
    result = compare_models(report.model, model, feeds_or_cases=feeds, provider="cpu")
    assert result, result.summary


def test_limits_apply_and_are_stated(tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(_chain_bomb(tmp_path))
    t0 = time.monotonic()
    result = _invoke(["run", model, "--passes", "symbolize", "-o", tmp_path / "o.onnx",
                      "--limit", "max_dim_terms=100000", "--limit", "propagate_seconds=1"])
    assert_clean_refusal(result, "propagate_seconds=1.0; raise it with --limit propagate_seconds=N")
    assert time.monotonic() - t0 < 60


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["run", "m.onnx", "-p", "cleanup", "--atol", "abc"], "Invalid value for '--atol'"),
        (["run"], "Missing argument 'MODEL'"),  # as the usage line names it
        (["nope"], "No such command 'nope'"),
    ],
)
def test_command_lines_that_do_not_parse_are_one_line_not_a_usage_box(monkeypatch, capsys, argv, fragment):
    monkeypatch.setattr("sys.argv", ["onnxsurgery", *argv])
    with pytest.raises(SystemExit) as info:
        main()
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert err.count("\n") == 1 and err.startswith("error: ") and fragment in err and "Usage" not in err


def test_inspect_prints_names_and_metadata_as_written(tmp_path):
    m = onnx.parser.parse_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[N, 3] x) => (float[N, 3] y) { y = Relu(x) }"""
    )
    m.graph.input[0].name = "[bold]x"
    m.graph.node[0].input[0] = "[bold]x"
    m.producer_name = "[/b]torch"
    m.metadata_props.add(key="[red]k", value="[link=x]v")
    path = tmp_path / "[bold]m.onnx"
    onnx.save(m, path)
    result = runner.invoke(app, ["inspect", str(path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for text in ("[bold]x", "[/b]torch", "[red]k", "[link=x]v", "[bold]m.onnx"):
        assert text in result.stdout, text
