"""Corpus models that the graph alone cannot make dynamic, made dynamic with torch reference cases.

- MobileNetV2 with ``tf_padding`` pads by TensorFlow's 'same' rule computed from the input size;
  the export baked the traced size's pads, which symbolize refuses without references (the graph
  cannot tell them from fixed pads).
- DINOv2 exported by dynamo at its configured resolution adds its position table as is: the
  export skipped the interpolation torch runs at other resolutions.

Given torch outputs at one other size, symbolize keeps the reading that alone matches them, and
the model must then match torch eager at the architecture's other stored sizes, none of which it
was given.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

pytest.importorskip("transformers")

from corpus.architectures import ARCHITECTURES  # noqa: E402
from corpus.harness import ATOL, RTOL, export_model, reference  # noqa: E402

import onnxsurgery  # noqa: E402
from onnxsurgery.passes.symbolize import Symbolize  # noqa: E402
from onnxsurgery.validation.references import Case, save_case  # noqa: E402
from onnxsurgery.validation.runtime import run_model  # noqa: E402

pytestmark = pytest.mark.corpus

GIVEN = {"batch": 2, "height": 48, "width": 64}  # 48 -> 24 -> 12 -> 6 -> 3: odd at the 4th stride

CASES = [
    ("mobilenet_v2", "torchscript", "padding of 5 op(s): 'same' padding (auto_pad=SAME_UPPER)"),
    ("mobilenet_v2", "dynamo", "padding of 5 op(s): 'same' padding (auto_pad=SAME_UPPER)"),
    ("dinov2", "dynamo", "1 table(s) over a patch grid: resized bicubic to the grid"),
]


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize(("name", "exporter", "decided"), CASES, ids=[f"{n}-{e}" for n, e, _ in CASES])
def test_one_reference_decides_what_the_graph_cannot(name, exporter, decided, batch, tmp_path):
    arch = ARCHITECTURES[name]
    traced = next(t for t in arch.traced if t["batch"] == batch)
    exp = export_model(arch, exporter, traced)
    assert exp.ok, exp.error
    model = onnx.load(str(exp.path))
    inputs, outputs = reference(arch, GIVEN)
    save_case(Case("given", inputs, dict(zip(arch.output_names, outputs, strict=True))), tmp_path)
    ctx = onnxsurgery.PassContext(provider="cpu", references=tmp_path)
    result = Symbolize(dynamic_axes=arch.dynamic_axes_for("all"))(model, ctx)
    said = " ".join(d.message for d in result.diagnostics)
    assert f"{decided} matches the reference cases" in said
    for sizes in arch.checks:
        x, want = reference(arch, sizes)
        got = run_model(result.model, x, "cpu")
        for name, ref in zip(arch.output_names, want, strict=True):
            np.testing.assert_allclose(got[name], ref, atol=ATOL, rtol=RTOL, err_msg=str(sizes))
