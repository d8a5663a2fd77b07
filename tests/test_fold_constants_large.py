"""fold-constants on a model over 2 GB with external data, through the whole pipeline.

The model is generated here (not committed): three weight matrices (2.1 GiB in all) written
straight to an external-data file, with constant arithmetic onnxsim folds (a 128 MiB weight
scaled by a Constant, a bias that is a sum of two constants). Marked ``large`` and run only when
selected with ``-m large``: it writes ~15 GB to the temp folder, needs ~10 GB of RAM at its peak
and takes a few minutes. The child's peak RSS counts the pages it shares copy-on-write with this
process, so the two peaks overlap rather than add up.
"""

from __future__ import annotations

import resource
import time
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxsurgery
from onnxsurgery.model.io import PROTOBUF_LIMIT
from onnxsurgery.validation.runtime import create_session, run_model

pytestmark = pytest.mark.large

K = 16384  # W1, W2: K x K float32 = 1 GiB each
N_OUT = 2048  # W3: K x N_OUT float32 = 128 MiB, scaled by a Constant (folded)
ROWS_PER_CHUNK = 1024


def _external_weight(
    name: str, rows: int, cols: int, data, seed: int, offset: int
) -> tuple[TensorProto, int]:
    """Write a seeded rows x cols float32 matrix to ``data`` in chunks; return its TensorProto."""
    rng = np.random.default_rng(seed)
    scale = np.float32(1.0 / np.sqrt(rows))
    for start in range(0, rows, ROWS_PER_CHUNK):
        n = min(ROWS_PER_CHUNK, rows - start)
        (rng.standard_normal((n, cols), dtype=np.float32) * scale).tofile(data)
    length = rows * cols * 4
    tensor = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=[rows, cols])
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "model.onnx.data"), ("offset", offset), ("length", length)):
        tensor.external_data.add(key=key, value=str(value))
    return tensor, offset + length


def write_large_model(path: Path) -> int:
    """y = ((relu(x @ W1 + (b0 + b1)) @ W2) @ (W3 * 0.5)); returns the bytes of weights."""
    offset = 0
    with open(path.with_name(path.name + ".data"), "wb") as data:
        w1, offset = _external_weight("W1", K, K, data, 1, offset)
        w2, offset = _external_weight("W2", K, K, data, 2, offset)
        w3, offset = _external_weight("W3", K, N_OUT, data, 3, offset)
    rng = np.random.default_rng(4)
    b0 = onnx.numpy_helper.from_array(rng.standard_normal(K).astype(np.float32), "b0")
    b1 = onnx.numpy_helper.from_array(rng.standard_normal(K).astype(np.float32), "b1")
    half = helper.make_tensor("half", TensorProto.FLOAT, [], [0.5])
    nodes = [
        helper.make_node("Constant", [], ["half_c"], value=half),
        helper.make_node("Mul", ["W3", "half_c"], ["W3_scaled"]),
        helper.make_node("Add", ["b0", "b1"], ["bias"]),
        helper.make_node("MatMul", ["x", "W1"], ["h1"]),
        helper.make_node("Add", ["h1", "bias"], ["h2"]),
        helper.make_node("Relu", ["h2"], ["h3"]),
        helper.make_node("MatMul", ["h3", "W2"], ["h4"]),
        helper.make_node("MatMul", ["h4", "W3_scaled"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "large",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", K])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", N_OUT])],
        initializer=[w1, w2, w3, b0, b1],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return offset


def _peak_gib() -> tuple[float, float]:
    self_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return self_kib / 2**20, children_kib / 2**20


def test_model_over_2gb_folds_and_is_saved_with_external_data(tmp_path, capsys, request):
    if "large" not in (request.config.getoption("markexpr", "") or ""):
        pytest.skip("needs ~10 GB of RAM, ~15 GB of temp disk and minutes; select it with -m large")
    src = tmp_path / "model.onnx"
    weight_bytes = write_large_model(src)
    assert weight_bytes > PROTOBUF_LIMIT
    out = tmp_path / "out" / "model.folded.onnx"
    out.parent.mkdir()

    t0 = time.perf_counter()
    report = onnxsurgery.run(src, passes="fold-constants", output=out, provider="cpu")
    seconds = time.perf_counter() - t0
    peak_self, peak_children = _peak_gib()

    [record] = report.passes
    pass_seconds = record.seconds
    assert record.modified and record.error is None
    messages = [d.message for d in record.diagnostics]
    assert "folded with onnxsim" in messages[0] and "forked child process" in messages[0]
    assert f"nodes: 8 -> {record.nodes_after}" in messages
    assert "op counts: Add -1, Constant -1, Mul -1" in messages  # b0 + b1, W3 * 0.5 folded
    assert not any(d.level == "warning" for d in record.diagnostics)

    # saved with external data: a small model file and one data file beside it
    data_file = out.with_name(out.name + ".data")
    assert data_file.is_file() and data_file.stat().st_size > PROTOBUF_LIMIT
    assert out.stat().st_size < 2**20
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name, data_file.name]
    del report

    saved = onnx.load(str(out), load_external_data=False)
    ops = Counter(n.op_type for n in saved.graph.node if n.op_type != "Constant")
    assert ops == Counter({"MatMul": 3, "Add": 1, "Relu": 1}), ops
    constants = len(saved.graph.initializer) + sum(
        n.op_type == "Constant" for n in saved.graph.node
    )
    assert constants == 4  # W1, W2, W3 * 0.5, b0 + b1
    assert [d.dim_param for d in saved.graph.input[0].type.tensor_type.shape.dim] == ["batch", ""]
    del saved

    rng = np.random.default_rng(5)
    feeds = {b: {"x": rng.standard_normal((b, K)).astype(np.float32)} for b in (1, 3)}
    session = create_session(src, "cpu")
    expected = {b: run_model(session, f, "cpu")["y"] for b, f in feeds.items()}
    del session
    session = create_session(out, "cpu")
    for b, f in feeds.items():
        got = run_model(session, f, "cpu")["y"]
        assert got.shape == (b, N_OUT)
        np.testing.assert_allclose(got, expected[b], rtol=1e-5, atol=1e-5)
    del session

    with capsys.disabled():
        print(
            f"\n[fold-constants large] {weight_bytes / 2**30:.2f} GiB of weights: pass "
            f"{pass_seconds:.1f} s, whole pipeline (load, checks, save) {seconds:.1f} s; peak RSS "
            f"this process {peak_self:.2f} GiB, onnxsim's child {peak_children:.2f} GiB"
        )
    assert peak_self < 12 and peak_children < 12
