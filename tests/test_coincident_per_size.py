"""Reference cases decide coincident sizes one by one (issue 30): where one size kept at a
traced value must follow its symbol and another must stay fixed, neither "all fixed" nor "all
following" matches the cases; the reading where each takes its own choice does, and is taken
only where it alone matches them (two readings that match alike stay refused, saying so).
Checked against numpy at other sizes.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from test_symbolize import parse

import onnxsurgery
from onnxsurgery.errors import PassError
from onnxsurgery.passes.symbolize import Symbolize
from onnxsurgery.validation.references import Case, save_case

AXES = {"x:0": "batch", "x:1": "seq", "d:0": "batch", "d:1": "tgt"}


def positions() -> onnx.ModelProto:
    """``ones(batch, seq)`` and ``ones(batch, 3)``, traced at batch 2, seq 4, tgt 3: the export
    keeps both lengths as constants, 4 (= seq) and 3 (= tgt), which nothing downstream forces."""
    model = parse(
        """<ir_version: 8, opset_import: ["" : 17]>
        net (float[2, 4] x, float[2, 3] d) => (float[2, 4] y, float[2, 3] z, int64[2, 4] p, int64[2, 3] q) {
            y = Relu (x)
            z = Relu (d)
            s = Shape <end = 1> (x)
            ps = Concat <axis = 0> (s, four)
            qs = Concat <axis = 0> (s, three)
            p = ConstantOfShape <value = int64[1] {1}> (ps)
            q = ConstantOfShape <value = int64[1] {1}> (qs)
        }""",
        four=np.array([4], np.int64),
        three=np.array([3], np.int64),
    )
    for i, node in enumerate(model.graph.node):
        node.name = f"/{node.op_type}_{i}"
    return model


def truth(batch: int, seq: int, tgt: int) -> Case:
    """What the source computes (numpy): one per position of seq, and always three."""
    rng = np.random.default_rng(seq)
    x = rng.standard_normal((batch, seq)).astype(np.float32)
    d = rng.standard_normal((batch, tgt)).astype(np.float32)
    outputs = {"y": np.maximum(x, 0), "z": np.maximum(d, 0), "p": np.ones((batch, seq), np.int64), "q": np.ones((batch, 3), np.int64)}
    return Case(f"b{batch}s{seq}t{tgt}", {"x": x, "d": d}, outputs)


def _ctx(tmp_path, *cases: Case) -> onnxsurgery.PassContext:
    for k, case in enumerate(cases):
        save_case(case, tmp_path / "refs", index=k)
    return onnxsurgery.PassContext(provider="cpu", references=tmp_path / "refs")


def test_one_size_follows_its_symbol_and_the_other_stays_fixed(tmp_path) -> None:
    """A case at batch 3, seq 5, tgt 2: all fixed gives 4 positions, all following 2 fixed
    ones; only seq's ConstantOfShape following and the other fixed matches, and it is right elsewhere."""
    result = Symbolize(**AXES)(positions(), _ctx(tmp_path, truth(3, 5, 2)))
    said = [d.message for d in result.diagnostics]
    assert any("'/ConstantOfShape_5' (4 as seq) following their symbols, the others fixed match" in s for s in said)
    session = ort.InferenceSession(result.model.SerializeToString(), providers=["CPUExecutionProvider"])
    for batch, seq, tgt in ((1, 7, 5), (4, 2, 1)):
        case = truth(batch, seq, tgt)
        got = dict(zip(["y", "z", "p", "q"], session.run(None, case.inputs), strict=True))
        for name, want in case.outputs.items():
            np.testing.assert_array_equal(got[name], want)


def test_two_readings_that_match_alike_stay_refused(tmp_path) -> None:
    """A case at tgt 3, as traced: the fixed 3 and tgt give the same there, so two readings
    match it alike; refused, asking for cases at other sizes."""
    with pytest.raises(PassError, match=r"match .* alike \(add cases at other sizes\)"):
        Symbolize(**AXES)(positions(), _ctx(tmp_path, truth(3, 5, 3)))
