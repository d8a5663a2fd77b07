"""The model handle (model/handle.py) and the in_place declaration Pass.__call__ checks."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import onnxsurgery
from onnxsurgery.errors import PassError
from onnxsurgery.model.handle import ModelHandle, adopt_in_place
from onnxsurgery.model.io import restore_weights, save_model, weightless
from onnxsurgery.model.tensors import is_placeholder, on_disk
from onnxsurgery.pipeline.contract import Pass, PassResult

W = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)


def _model() -> onnx.ModelProto:
    """y = Relu(MatMul(x, W)) + b, W large enough to be a placeholder in a weightless view."""
    model = onnx.parser.parse_model(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[2, 64] x) => (float[2, 64] y) {
            m = MatMul(x, W)
            r = Relu(m)
            y = Add(r, b)
        }
        """
    )
    model.graph.initializer.extend(
        [numpy_helper.from_array(W, "W"), numpy_helper.from_array(np.ones(64, np.float32), "b")]
    )
    return model


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out


def _renamed(bare: onnx.ModelProto) -> onnx.ModelProto:
    """What a structural pass makes of a weightless view: a new model, node names set."""
    out = _copy(bare)
    for i, node in enumerate(out.graph.node):
        node.name = f"n{i}"
    return out


# -- the handle ------------------------------------------------------------------------------------
def test_weightless_view_has_placeholders_and_adopt_fills_them_from_a_copy():
    model = _model()
    before = model.SerializeToString()
    handle = ModelHandle(model)  # not owned: the model stays as it was
    bare = handle.weightless()
    assert is_placeholder(bare.graph.initializer[0])
    result = handle.adopt(_renamed(bare))
    assert result is not model
    assert model.SerializeToString() == before
    assert not any(is_placeholder(t) for t in result.graph.initializer)
    np.testing.assert_array_equal(numpy_helper.to_array(result.graph.initializer[0]), W)


def test_owned_adopt_is_the_model_itself_byte_for_byte_the_copy(monkeypatch):
    """Owned and at MAPPED_BYTES (lowered to 0 here), the model becomes the result in place,
    its weight messages the ones it had, the bytes those of the copying path."""
    import onnxsurgery.model.handle as handle_module

    expected = restore_weights(_renamed(weightless(_model())), _model())
    monkeypatch.setattr(handle_module, "MAPPED_BYTES", 0)
    model = _model()
    weight = model.graph.initializer[0]
    handle = ModelHandle(model, owned=True)
    result = handle.adopt(_renamed(handle.weightless()))
    assert result is model
    assert result.graph.initializer[0] is weight
    assert result.SerializeToString() == expected.SerializeToString()


def test_owned_below_mapped_bytes_copies_as_before():
    model = _model()
    handle = ModelHandle(model, owned=True)
    assert handle.adopt(_renamed(handle.weightless())) is not model


def test_adopt_in_place_takes_new_initializers_after_the_kept_ones():
    """fold-constants' order: kept weights (placeholders) first, then the folder's own
    initializers, one of them named as one of the model's (given again: copied)."""
    model = _model()
    new = weightless(model)
    del new.graph.initializer[1:]  # keep W's placeholder
    new.graph.initializer.extend(
        [numpy_helper.from_array(np.zeros(3, np.float32), "c"), numpy_helper.from_array(np.full(64, 2, np.float32), "b")]
    )
    expected = restore_weights(_copy(new), _model()).SerializeToString()
    weight = model.graph.initializer[0]
    assert adopt_in_place(model, new) is model
    assert model.graph.initializer[0] is weight
    assert [t.name for t in model.graph.initializer] == ["W", "c", "b"]
    assert model.SerializeToString() == expected


def test_adopt_in_place_refuses_a_placeholder_out_of_order():
    model = _model()
    new = weightless(model)
    new.graph.initializer.reverse()  # b, then W's placeholder: W would have to move
    before = model.SerializeToString()
    assert adopt_in_place(model, new) is None
    assert model.SerializeToString() == before


def test_array_and_full_read_weights_left_on_disk(tmp_path):
    path = tmp_path / "m.onnx"
    save_model(_model(), path, external_data=True)
    loaded = onnxsurgery.model.read_model_file(path, weights_on_disk=True)
    handle = ModelHandle(loaded.model, external_data=loaded.external_data, path=path)
    assert on_disk(handle.model.graph.initializer[0])
    np.testing.assert_array_equal(handle.array("W"), W)
    with pytest.raises(KeyError):
        handle.array("nothing")
    full = handle.full()  # not owned: a copy, the handle's model keeps its weight on disk
    assert full is not handle.model and on_disk(handle.model.graph.initializer[0])
    np.testing.assert_array_equal(numpy_helper.to_array(full.graph.initializer[0]), W)


def test_a_pass_that_edits_the_weightless_view_gets_its_weights_back(tmp_path):
    class Namer(Pass):
        """Names every node (edits the weightless view)."""

        name = "namer"
        weights_on_disk = True

        def run(self, model, ctx):
            return PassResult(_renamed(ctx.handle.weightless()), modified=True)

    source = tmp_path / "in.onnx"
    save_model(_model(), source, external_data=True)
    out = tmp_path / "out.onnx"
    onnxsurgery.run(source, [Namer()], output=out)
    written = onnx.load(str(out))
    assert [n.name for n in written.graph.node] == ["n0", "n1", "n2"]
    np.testing.assert_array_equal(numpy_helper.to_array(written.graph.initializer[0]), W)
    direct = Namer()(_model()).model  # called directly: its own handle, weights copied back
    np.testing.assert_array_equal(numpy_helper.to_array(direct.graph.initializer[0]), W)


# -- the in_place declaration --------------------------------------------------------------------
class ReturnsACopy(Pass):
    """Declares in place, returns a copy."""

    name = "returns-a-copy"
    in_place = True

    def run(self, model, ctx):
        return PassResult(_copy(model), modified=True)


class ReturnsItsInput(Pass):
    """Declares nothing (functional), edits its input and returns it."""

    name = "returns-its-input"

    def run(self, model, ctx):
        model.graph.node[0].name = "edited"
        return PassResult(model, modified=True)


class EditsItsInput(Pass):
    """Functional, returns a new model, but removes a node from its input on the way."""

    name = "edits-its-input"
    in_place = False

    def run(self, model, ctx):
        out = _copy(model)
        del model.graph.node[-1]
        return PassResult(out, modified=True)


class InPlace(Pass):
    """Declares in place and is: names the first node."""

    name = "in-place"
    in_place = True

    def run(self, model, ctx):
        model.graph.node[0].name = "first"
        return PassResult(model, modified=True)


class Functional(Pass):
    """Declares nothing and keeps to it: a new model, or its input unchanged."""

    name = "functional"

    def run(self, model, ctx):
        if any(n.name == "first" for n in model.graph.node):
            return PassResult(model, modified=False)
        out = _copy(model)
        out.graph.node[0].name = "first"
        return PassResult(out, modified=True)


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        (ReturnsACopy, "declares in_place but returned another model"),
        (ReturnsItsInput, "declares in_place false (functional) but returned the model it was given"),
        (EditsItsInput, "declares in_place false (functional) but changed the model it was given"),
    ],
)
def test_a_pass_that_breaks_its_declaration_is_a_pass_error_naming_it(bad, says, tmp_path):
    out = tmp_path / "out.onnx"
    with pytest.raises(PassError) as info:
        onnxsurgery.run(_model(), [bad()], output=out)
    assert str(info.value).startswith(f"{bad.name}: broke the pass contract: {says}")
    assert info.value.exit_code == 2
    assert not out.exists()
    with pytest.raises(PassError, match="broke the pass contract"):
        bad()(_model())  # called directly: the same check


def test_passes_that_keep_their_declaration_run():
    report = onnxsurgery.run(_model(), [InPlace(), Functional(), Functional()])
    assert [r.modified for r in report.passes] == [True, False, False]
    assert report.model.graph.node[0].name == "first"


def test_third_party_pass_without_declaration_is_functional():
    assert Pass.in_place is False and Functional.in_place is False
