"""cleanup's shortcut for graphs with nothing to clean, against onnx-graphsurgeon's own verdict.

``_nothing_to_clean`` lets cleanup return a model without handing it to onnx-graphsurgeon. The
oracle is graphsurgeon itself (the pass's other path): on every model the onnx wheel ships and
every fixture, and on copies with a dead node, an unused initializer or an unused input added,
wherever the shortcut says "nothing to clean" graphsurgeon must change nothing.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from onnxsurgery.passes.cleanup import Cleanup, _is_sorted, _nothing_to_clean

ROOT = Path(__file__).resolve().parent.parent
BACKEND = Path(onnx.__file__).parent / "backend" / "test" / "data"
MODELS = sorted(BACKEND.rglob("model.onnx")) + sorted((ROOT / "fixtures").rglob("*.onnx"))


def _dead_node(m: onnx.ModelProto) -> onnx.ModelProto:
    source = m.graph.input[0].name if m.graph.input else m.graph.node[0].output[0]
    m.graph.node.append(helper.make_node("Identity", [source], ["cleanup_test_dead"]))
    return m


def _unused_initializer(m: onnx.ModelProto) -> onnx.ModelProto:
    m.graph.initializer.append(numpy_helper.from_array(np.zeros(3, np.float32), "cleanup_test_unused"))
    return m


def _unused_input(m: onnx.ModelProto) -> onnx.ModelProto:
    m.graph.input.append(helper.make_tensor_value_info("cleanup_test_in", onnx.TensorProto.FLOAT, [2]))
    return m


def _copy(m: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(m)
    return out


def _verdicts(m: onnx.ModelProto, inputs: bool) -> tuple[bool, bool]:
    """(the shortcut says nothing to clean, graphsurgeon changed something)."""
    ordered = _is_sorted(m.graph)
    shortcut = ordered and _nothing_to_clean(m.graph, inputs=inputs)
    result = Cleanup(inputs=inputs)._with_graphsurgeon(_copy(m), not ordered)
    return shortcut, result.modified


def test_the_corpus_is_there():
    assert len(MODELS) > 150


@pytest.mark.parametrize("inputs", [True, False])
def test_nothing_to_clean_agrees_with_graphsurgeon(inputs: bool):
    taken = 0
    for path in MODELS:
        model = onnx.load(path)
        shortcut, modified = _verdicts(model, inputs)
        assert not (shortcut and modified), path
        taken += shortcut
        if not model.graph.node:
            continue
        for mutate in (_dead_node, _unused_initializer) + ((_unused_input,) if inputs else ()):
            changed = mutate(_copy(model))
            shortcut, modified = _verdicts(changed, inputs)
            assert not shortcut and modified, (path, mutate.__name__)
    assert taken > 100  # the shortcut covers the plain models, not a handful


def test_a_clean_model_takes_the_shortcut_and_stays_the_same_object(clean_model, monkeypatch):
    monkeypatch.setattr(Cleanup, "_with_graphsurgeon", None)  # would fail if called
    result = Cleanup()(clean_model)
    assert not result.modified and result.model is clean_model
    assert [d.message for d in result.diagnostics] == ["nothing to clean"]
