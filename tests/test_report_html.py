"""The --report FILE.html page (issue 27 item 3): the error histogram it draws, the localized
node's neighbourhood, the page picked by extension, escaping, and, in a real headless chromium,
a screenshot that renders, no console message, and every number shown equal to the JSON's."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from typer.testing import CliRunner

from onnxsurgery.cli import app
from onnxsurgery.divergence import localize
from onnxsurgery.pipeline.report_html import render_html
from onnxsurgery.validation.arrays import compare_arrays

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "fixtures" / "alexnet_view" / "torchscript"

TINY = """
<ir_version: 8, opset_import: ["" : 17]>
agraph (float[2, 3] x) => (float[2, 3] y) <float[3] w = {1.0, 2.0, 3.0}> {
    h = Mul(x, w)
    y = Relu(h)
}
"""


def _tiny(weight: list[float] | None = None, name: str = "") -> onnx.ModelProto:
    model = onnx.parser.parse_model(TINY)
    if weight is not None:
        model.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.array(weight, np.float32), "w"))
    if name:
        model.graph.node[0].name = name
    return model


# the histogram validation keeps ----------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_histogram_counts_every_compared_element_by_power_of_two(dtype) -> None:
    rng = np.random.default_rng(0)
    expected = rng.standard_normal(70_000).astype(dtype)  # three chunks
    actual = expected + (rng.standard_normal(expected.size) * 10.0 ** rng.integers(-9, 0, expected.size)).astype(dtype)
    actual[:100] = expected[:100]  # exact matches
    expected[5], actual[5] = np.nan, 1.0  # NaN placed differently: not an error of any size
    expected[6] = actual[6] = np.inf  # placed alike: a match
    result = compare_arrays(actual, expected, histogram=True)
    hist = result.histogram
    assert hist is not None
    with np.errstate(invalid="ignore"):
        errors = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
    finite = np.isfinite(errors)
    tiny = np.finfo(dtype).tiny
    assert hist.zeros == int(np.count_nonzero(errors[finite] < tiny)) + 1  # + the Inf pair
    edges = np.array(hist.edges)
    counted, _ = np.histogram(errors[finite & (errors >= tiny)], bins=edges)
    assert list(hist.counts) == counted.tolist()
    assert hist.zeros + sum(hist.counts) == expected.size - result.nonfinite_mismatches
    assert edges[1] / edges[0] == 2 and hist.counts[0] and hist.counts[-1]
    assert result.to_dict()["histogram"] == {"zeros": hist.zeros, "edges": hist.edges, "counts": list(hist.counts)}


def test_histogram_is_none_where_nothing_was_differenced() -> None:
    assert compare_arrays(np.array(["a"]), np.array(["b"]), histogram=True).histogram is None
    assert compare_arrays(np.zeros(3), np.zeros(4), histogram=True).to_dict()["histogram"] is None
    assert compare_arrays(np.zeros(3), np.zeros(3), histogram=True).histogram.to_dict() == {"zeros": 3, "edges": [1.0], "counts": []}


# the localized node's neighbourhood --------------------------------------------------------------


def test_localized_node_carries_its_neighbourhood_before_and_after() -> None:
    x = np.ones((2, 3), np.float32)
    found = localize(_tiny([1.0, 2.5, 3.0], "scale"), _tiny(name="orig_scale"), {"x": x}, provider="cpu")
    hood = found.to_dict()["neighbourhood"]
    assert hood == {
        "after": {"name": "scale", "op": "Mul", "inputs": ["x", "w"], "outputs": ["h"]},
        "before": {"name": "orig_scale", "op": "Mul", "inputs": ["x", "w"], "outputs": ["h"]},
    }
    page = render_html({"cases": [], "passed": False, "summary": "s", "provider": "CPU", "reference": None,
                        "atol": 1e-4, "rtol": 1e-3, "notes": [], "localized": found.to_dict()})  # fmt: skip
    assert page.count("<svg") == 2 and "before (reference)" in page and "after (this model)" in page


# --report by extension, escaping, offline ----------------------------------------------------------


def test_diff_report_html_by_extension_and_json_otherwise(tmp_path) -> None:
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(_tiny(), a)
    onnx.save(_tiny([1.0, 2.0, 4.0]), b)
    runner = CliRunner()
    for name in ("d.html", "d.HTM", "d.json", "d.txt"):
        result = runner.invoke(app, ["diff", str(a), str(b), "--report", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
    assert (tmp_path / "d.html").read_text().startswith("<!DOCTYPE html>")
    assert (tmp_path / "d.HTM").read_text().startswith("<!DOCTYPE html>")
    assert json.loads((tmp_path / "d.json").read_text())["constants"][0]["node"]["op"] == "Mul"
    assert json.loads((tmp_path / "d.txt").read_text())["empty"] is False


def test_user_text_stays_text_and_the_page_fetches_nothing(tmp_path) -> None:
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    hostile = '<script>alert(1)</script><img src="http://example.com/x.png">'
    onnx.save(_tiny(name=hostile), a)
    onnx.save(_tiny([1.0, 2.0, 4.0], hostile), b)
    result = CliRunner().invoke(app, ["diff", str(a), str(b), "--report", str(tmp_path / "d.html")])
    assert result.exit_code == 0, result.output
    page = (tmp_path / "d.html").read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script" not in page and "<img" not in page
    assert "default-src 'none'" in page  # and the policy forbids any fetch, were one there


# in a real browser ---------------------------------------------------------------------------------


def _chromium() -> str:
    found = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
    if found is None:
        pytest.skip("no chromium binary found (Debian: apt-get install chromium); the page is checked without a browser only")
    return found


def _browse(html: Path, tmp_path: Path) -> tuple[str, list[str], Path]:
    """The DOM as chromium built it, its console messages, and a screenshot, offline."""
    common = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
              "--host-resolver-rules=MAP * ~NOTFOUND", "--disable-background-networking",
              "--enable-logging=stderr", "--v=0", f"--user-data-dir={tmp_path / 'profile'}"]  # fmt: skip
    shot = tmp_path / (html.stem + ".png")
    taken = subprocess.run([*common, "--window-size=1200,1600", f"--screenshot={shot}", html.as_uri()],
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    dom = subprocess.run([*common, "--dump-dom", html.as_uri()], capture_output=True, text=True, timeout=120)
    console = [line for line in (taken.stderr + dom.stderr).splitlines() if ":CONSOLE" in line]
    return dom.stdout, console, shot


class _Numbers(HTMLParser):
    """(data-json path, data-fmt, text shown) of every number on the page."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[list[str]] = []
        self._open: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        if "data-json" in a:
            self._open = [a["data-json"], a["data-fmt"], ""]
            self.found.append(self._open)

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._open[2] += data

    def handle_endtag(self, tag: str) -> None:
        self._open = None


def _at(data, path: str):
    for key in path.split("."):
        data = data[int(key)] if isinstance(data, list) else data[key]
    return data


def _check_numbers(dom: str, data: dict) -> int:
    parser = _Numbers()
    parser.feed(dom)
    for path, fmt, text in parser.found:
        value = _at(data, path)
        if value is None:
            assert text == "-", path
        elif fmt == "int":
            assert int(text) == value, (path, text, value)
        elif fmt == "fixed3":
            assert abs(float(text) - value) <= 5e-4, (path, text, value)
        else:  # three significant digits
            assert math.isclose(float(text), value, rel_tol=5e-3, abs_tol=0), (path, text, value)
    return len(parser.found)


def test_the_browser_check_sees_console_errors(tmp_path) -> None:
    """The console check can fail: a page with a script error and a fetch is caught."""
    page = tmp_path / "bad.html"
    page.write_text('<!DOCTYPE html><p>x</p><script>missing_function()</script>')
    _, console, _ = _browse(page, tmp_path)
    assert any("missing_function" in line for line in console), console


@pytest.mark.e2e
def test_run_and_validate_pages_render_in_chromium_and_show_the_json_numbers(tmp_path) -> None:
    _chromium()
    runner = CliRunner()
    out = tmp_path / "model.dyn.onnx"
    run = ["run", str(DEMO / "model.onnx"), "-o", str(out), "--passes", "symbolize, fold-constants",
           "--ref", str(DEMO), "--provider", "cpu", "-q"]  # fmt: skip
    for name in ("run.html", "run.json"):
        result = runner.invoke(app, [*run, "--report", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
    bad = tmp_path / "bad.onnx"  # a perturbed weight: validation fails, localized at its Conv
    model = onnx.load(out)
    weight = next(t for t in model.graph.initializer if t.name == "features.3.weight")
    values = numpy_helper.to_array(weight).copy()
    values.flat[0] += 2.0
    weight.CopyFrom(numpy_helper.from_array(values, weight.name))
    onnx.save(model, bad)
    check = ["validate", str(bad), "--ref", str(DEMO), "--localize", "--original", str(DEMO / "model.onnx"),
             "--provider", "cpu", "-q"]  # fmt: skip
    for name in ("bad.html", "bad.json"):
        result = runner.invoke(app, [*check, "--report", str(tmp_path / name)])
        assert result.exit_code == 1, result.output
    for stem, must in (("run", ["batch", "references", "Reshape"]), ("bad", ["/features/features.3/Conv", "Conv"])):
        data = json.loads((tmp_path / f"{stem}.json").read_text())
        dom, console, shot = _browse(tmp_path / f"{stem}.html", tmp_path)
        assert console == [], console
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
        for text in must:
            assert text in dom
        if stem == "bad":  # the same failure twice: the page the CLI wrote shows the JSON's numbers
            assert _check_numbers(dom, data) > 40
        # a run's timings differ between two runs: the page from this very dict, number by number
        (tmp_path / f"{stem}.same.html").write_text(render_html(data))
        dom_same, console_same, _ = _browse(tmp_path / f"{stem}.same.html", tmp_path)
        assert console_same == []
        assert _check_numbers(dom_same, data) > 40
    assert "error histograms" in dom and dom.count("<svg") >= 5


def test_histograms_are_counted_only_where_a_report_asks() -> None:
    # counting every element's error about doubles a comparison's time: a plain validate,
    # a run without --report and the symbolize check do not pay for it
    from onnxsurgery import validate

    fixture = Path(__file__).resolve().parent.parent / "fixtures" / "alexnet_view" / "torchscript"
    plain = validate(fixture / "model.onnx", fixture / "test_data_set_0", provider="cpu")
    asked = validate(fixture / "model.onnx", fixture / "test_data_set_0", provider="cpu", histograms=True)
    assert plain and asked
    assert plain.cases[0].outputs[0].histogram is None
    assert asked.cases[0].outputs[0].histogram is not None
    assert compare_arrays(np.ones(4), np.ones(4) + 1e-9).histogram is None
