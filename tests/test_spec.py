"""The --passes grammar and TOML recipes."""

from __future__ import annotations

import pytest

from onnxsurgery import PassSpec, load_recipe, parse_passes
from onnxsurgery.errors import PassOptionError, PassSpecError
from onnxsurgery.pipeline.chain import build_passes


def test_chain_with_every_value_kind():
    specs = parse_passes(
        'cleanup, symbolize(x:0=batch, *:1=seq), concat-outputs(axis=-1, name="my merged", '
        "outputs=[a, 'b c'], keep=true, pad=0.5, flatten=1, dtype=none), v(atol.out/0=1e-5)"
    )
    assert specs == [
        PassSpec("cleanup"),
        PassSpec("symbolize", {"x:0": "batch", "*:1": "seq"}),
        PassSpec(
            "concat-outputs",
            {
                "axis": -1,
                "name": "my merged",
                "outputs": ["a", "b c"],
                "keep": True,
                "pad": 0.5,
                "flatten": 1,
                "dtype": None,
            },
        ),
        PassSpec("v", {"atol.out/0": 1e-5}),
    ]


def test_types_of_bare_values():
    (spec,) = parse_passes("p(a=1, b=-2.5, c=False, d=hello, e=[], f=[1, [2, 3]], g=1e3)")
    assert spec.options == {"a": 1, "b": -2.5, "c": False, "d": "hello", "e": [], "f": [1, [2, 3]], "g": 1000.0}
    assert isinstance(spec.options["a"], int) and isinstance(spec.options["g"], float)


def test_spec_text_round_trips():
    text = 'symbolize(x:0=batch, name="a b", l=[1, two], t=true)'
    (spec,) = parse_passes(text)
    assert parse_passes(str(spec)) == [spec]


@pytest.mark.parametrize(
    ("text", "fragment", "column"),
    [
        ("cleanup(", "expected an option name, found end of text", 9),
        ("cleanup(x=1", "expected ')'", 12),
        ("cleanup x", "unexpected 'x'", 9),
        ("a(x=1, x=2)", "option 'x' given twice", 8),
        ("a(x='open)", "unterminated string", 5),
        ("(x=1)", "expected a pass name", 1),
        ("a(x=)", "expected a value", 5),
    ],
)
def test_syntax_errors_point_at_the_column(text, fragment, column):
    with pytest.raises(PassSpecError) as info:
        parse_passes(text)
    message = str(info.value)
    assert fragment in message
    assert f"column {column}" in message
    assert len(message.splitlines()) == 1  # one line on the terminal, the column marked
    assert message.endswith(f": {text[: column - 1]}<<HERE>>{text[column - 1 :]}")


def test_empty_chain_is_an_error():
    with pytest.raises(PassSpecError, match="empty pass list"):
        parse_passes("  ")


def test_recipe_reads_the_same_chain(tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text('[[pass]]\nname = "cleanup"\n\n[[pass]]\nname = "infer-shapes"\ndata_prop = false\n')
    assert load_recipe(recipe) == parse_passes("cleanup, infer-shapes(data_prop=false)")


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("[[pass]]\nfoo = 1\n", "has no name"),
        ("name = 'x'\n", "unknown top-level key"),
        ("", "no [[pass]] tables"),
        ("[[pass]\n", "not valid TOML"),
    ],
)
def test_bad_recipes(tmp_path, content, fragment):
    recipe = tmp_path / "r.toml"
    recipe.write_text(content)
    with pytest.raises(PassSpecError, match="r.toml") as info:
        load_recipe(recipe)
    assert fragment in str(info.value)


def test_missing_recipe(tmp_path):
    with pytest.raises(PassSpecError, match="recipe file not found"):
        load_recipe(tmp_path / "nope.toml")


def test_unknown_pass_lists_the_valid_ones():
    with pytest.raises(PassOptionError) as info:
        build_passes(parse_passes("cleanup, no-such-pass"))
    assert "unknown pass 'no-such-pass'" in str(info.value)
    assert "cleanup" in str(info.value) and "infer-shapes" in str(info.value)


def test_unknown_option_lists_the_valid_ones():
    with pytest.raises(PassOptionError, match=r"cleanup: unknown option 'bogus'; valid options: inputs"):
        build_passes(parse_passes("cleanup(bogus=1)"))


def test_wrong_option_value_is_an_option_error():
    with pytest.raises(PassOptionError, match="inputs must be true or false"):
        build_passes(parse_passes("cleanup(inputs=3)"))


def test_recipe_options_table_carries_an_option_called_name(tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text('[[pass]]\nname = "concat-outputs"\naxis = 1\n[pass.options]\nname = "merged"\n')
    assert load_recipe(recipe) == [PassSpec("concat-outputs", {"axis": 1, "name": "merged"})]
    recipe.write_text('[[pass]]\nname = "p"\naxis = 1\n[pass.options]\naxis = 2\n')
    with pytest.raises(PassSpecError, match=r"\['axis'\] given twice"):
        load_recipe(recipe)
