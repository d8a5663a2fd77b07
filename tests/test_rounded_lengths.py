"""Output lengths rounded down to a multiple at run time, traced where they were not (issue 30,
SEW by TorchScript).

SEW pools its frames by 2, expands them back by 2, and pads an odd frame count back in Python,
a branch the trace at an even count did not take: the symbolized model gave one frame less
than torch at odd counts, exit 0 (the sweep's 2 wrong SEW cases). The graph cannot tell that
from a model that rounds as its graph does, so it is a blocker that reference cases at a size
where the rounding shows decide: the graph as it is, or refused."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import pytest
from onnx import numpy_helper
from sweep_cases import scored_case

import onnxsurgery
from onnxsurgery.errors import PassError
from onnxsurgery.passes.symbolize import Symbolize
from onnxsurgery.validation.references import Case, save_case
from onnxsurgery.validation.runtime import run_model

HEAD = '<ir_version: 8, opset_import: ["" : 17]>'
AXES = {"x:0": "batch", "x:2": "frames"}


def _model(dims: str, *, pad_back: bool = False) -> onnx.ModelProto:
    """Frames pooled by 2 and expanded back by 2 (``2 * (T // 2)`` frames); ``pad_back``: then
    padded with zeros back to ``T`` (what SEW's Python does, here in the graph)."""
    tail = (
        """s = Shape (x)
      t = Slice (s, two, three)
      u = Shape (r)
      v = Slice (u, two, three)
      d = Sub (t, v)
      pads = Concat <axis = 0> (zeros5, d)
      y = Pad (r, pads)"""
        if pad_back
        else "y = Identity (r)"
    )
    model = onnx.parser.parse_model(f"""{HEAD}
    net (float[{dims}] x) => (float y) {{
      p = AveragePool <kernel_shape = [2], strides = [2]> (x)
      r = Resize <mode = "nearest"> (p, roi, scales)
      {tail}
    }}""")
    consts = {"roi": np.zeros(0, np.float32), "scales": np.array([1, 1, 2], np.float32)}
    if pad_back:
        consts |= {"two": np.array([2]), "three": np.array([3]), "zeros5": np.zeros(5, np.int64)}
    model.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in consts.items())
    for i, node in enumerate(model.graph.node):
        node.name = f"{node.op_type}_{i}"
    return model


TRACED = _model("2, 3, 8")


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return next(iter(run_model(model, {"x": x}, provider="cpu").values()))


def _refs(tmp_path, source: onnx.ModelProto, *frames: int) -> onnxsurgery.PassContext:
    for k, t in enumerate(frames):
        x = np.random.default_rng(k + 1).standard_normal((3, 3, t)).astype(np.float32)
        save_case(Case(f"case{k}", {"x": x}, {"y": _run(source, x)}), tmp_path)
    return onnxsurgery.PassContext(provider="cpu", references=tmp_path)


def test_a_length_pooled_and_expanded_back_is_refused_naming_a_size_where_it_rounds() -> None:
    with pytest.raises(PassError, match="pooled by 2 and expanded back") as info:
        Symbolize(**AXES)(TRACED, onnxsurgery.PassContext(provider="cpu"))
    assert "pass reference cases (--ref) at a size where n is no multiple of 2 (frames = 9" in str(
        info.value
    )


def test_cases_of_a_source_that_rounds_too_keep_the_graph_as_it_is(tmp_path) -> None:
    source = _model("N, 3, T")
    result = Symbolize(**AXES)(TRACED, _refs(tmp_path, source, 9))
    said = " ".join(str(d) for d in result.diagnostics)
    assert "rounding as the graph does matches the reference cases" in said
    x = np.random.default_rng(7).standard_normal((2, 3, 13)).astype(np.float32)
    np.testing.assert_allclose(_run(result.model, x), _run(source, x), atol=1e-6)


def test_cases_of_a_source_that_pads_back_match_no_reading_and_stay_refused(tmp_path) -> None:
    ctx = _refs(tmp_path, _model("N, 3, T", pad_back=True), 9)
    with pytest.raises(PassError, match="pooled by 2 and expanded back") as info:
        Symbolize(**AXES)(TRACED, ctx)
    assert "the reference cases given match no reading" in str(info.value)


def test_cases_where_the_length_does_not_round_decide_nothing(tmp_path) -> None:
    ctx = _refs(tmp_path, _model("N, 3, T", pad_back=True), 10)
    with pytest.raises(PassError, match="add a case where it rounds"):
        Symbolize(**AXES)(TRACED, ctx)


@pytest.mark.sweep_rows
def test_sew_by_torchscript_is_refused_not_wrong() -> None:
    case = scored_case("sew.base", "torchscript", 2)
    assert case["symbolize"]["status"] == "refused", case["symbolize"]
    assert "pooled by 2 and expanded back" in case["symbolize"]["message"]
    # its advice followed, a reference at an odd frame count: torch pads back, still refused
    assert case["symbolize+ref"]["status"] == "refused", case["symbolize+ref"]
