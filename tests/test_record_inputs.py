"""onnxsurgery reference record: the inputs it makes and the cases it refuses (issue 26, items 5-6).

Every test runs the command as a user does (typer's CliRunner) on small torch modules written
to tmp_path and exported in the test: bad input is exit 2 with one line, never a traceback.
"""

from __future__ import annotations

import pytest

from onnxsurgery.model.signature import parse_shape_spec

# --- item 6: shape syntax people already type ----------------------------------------------


@pytest.mark.parametrize("dims", ["1x3x224x224", "1,3,224,224", "[1,3,224,224]", "[1, 3, 224, 224]"])
def test_every_spelling_of_dims_reads_the_same(dims):
    assert parse_shape_spec(f"x:{dims}") == ("x", [1, 3, 224, 224])
    assert parse_shape_spec(f"input:0:{dims}") == ("input:0", [1, 3, 224, 224])


def test_a_bracketed_scalar():
    assert parse_shape_spec("x:[]") == ("x", [])


@pytest.mark.parametrize("text", ["x:[4,a]", "x"])
def test_a_bad_spec_names_its_flag_and_every_spelling(text):
    with pytest.raises(Exception, match="^--case ") as caught:
        parse_shape_spec(text, flag="--case")
    assert "1x3x224x224, x:1,3,224,224 or x:[1,3,224,224]" in str(caught.value)
