"""The pipeline: order, checks after each pass, reports, and nothing written on failure."""

from __future__ import annotations

import hashlib
import sys

import onnx
import pytest

from onnxsurgery import Diagnostic, Pass, PassResult, Pipeline, default_output_path, run
from onnxsurgery.errors import PassError, UsageError
from onnxsurgery.pipeline.runner import PIPELINE_METADATA_KEY


class Breaker(Pass):
    """Points the first node at a tensor that does not exist."""

    name = "breaker"
    in_place = True  # it edits the model it is given

    def run(self, model, ctx):
        model.graph.node[0].input[0] = "nowhere"
        return PassResult(model, modified=True)


class Refuser(Pass):
    """Cannot do its job."""

    name = "refuser"

    def run(self, model, ctx):
        self.fail("cannot generalize the traced batch", node="Reshape_3")


class Buggy(Pass):
    """Has a bug."""

    name = "buggy"

    def run(self, model, ctx):
        return {}["missing"]


class Counter(Pass):
    """Records the order it ran in."""

    name = "counter"
    calls: list[str] = []

    def __init__(self, *, tag: str = "a") -> None:
        super().__init__(tag=tag)
        self.tag = tag

    def run(self, model, ctx):
        Counter.calls.append(self.tag)
        return PassResult(model, modified=False, diagnostics=[Diagnostic.info(f"ran {self.tag}")])


def sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_passes_run_in_order_with_a_report(tiny_model, tmp_path):
    Counter.calls = []
    report = run(tiny_model, [Counter(tag="1"), "cleanup", Counter(tag="2")], output=tmp_path / "o.onnx")
    assert Counter.calls == ["1", "2"]
    assert [p.name for p in report.passes] == ["counter", "cleanup", "counter"]
    cleanup = report.passes[1]
    assert (cleanup.nodes_before, cleanup.nodes_after, cleanup.modified) == (2, 1, True)
    assert all(p.seconds >= 0 for p in report.passes)
    assert report.ok and report.modified
    assert str(report.passes[0].diagnostics[0]) == "ran 1"
    data = report.to_dict()
    assert data["passes"][1]["options"] == {"inputs": True}
    assert data["passes"][1]["nodes_before"] == 2
    assert data["output"] == str(tmp_path / "o.onnx")


def test_output_records_the_chain_in_metadata(tiny_model, tmp_path):
    run(tiny_model, "cleanup(inputs=false)", output=tmp_path / "o.onnx")
    props = {p.key: p.value for p in onnx.load(tmp_path / "o.onnx").metadata_props}
    assert props[PIPELINE_METADATA_KEY].endswith(": cleanup(inputs=false)")


def test_same_input_same_bytes(tiny_model, tmp_path):
    src = tmp_path / "in.onnx"
    onnx.save(tiny_model, src)
    before = sha(src)
    run(src, "cleanup, infer-shapes", output=tmp_path / "a.onnx")
    run(src, "cleanup, infer-shapes", output=tmp_path / "b.onnx")
    assert sha(tmp_path / "a.onnx") == sha(tmp_path / "b.onnx")
    assert sha(src) == before


def test_checker_failure_names_the_pass_and_writes_nothing(tiny_model, tmp_path):
    out = tmp_path / "o.onnx"
    with pytest.raises(PassError, match=r"^breaker: its output model fails the ONNX checker: .*'nowhere'") as info:
        Pipeline([Breaker()]).run(tiny_model, out)
    assert not out.exists()
    partial = info.value.pipeline_report
    assert partial.error and partial.passes[0].error
    assert list(tmp_path.iterdir()) == []


def test_pass_failure_stops_the_chain(tiny_model, tmp_path):
    Counter.calls = []
    with pytest.raises(PassError, match=r"^refuser: node 'Reshape_3': cannot generalize"):
        run(tiny_model, [Refuser(), Counter()], output=tmp_path / "o.onnx")
    assert Counter.calls == []
    assert list(tmp_path.iterdir()) == []


def test_any_exception_in_a_pass_becomes_a_pass_error_naming_it(tiny_model):
    with pytest.raises(PassError, match=r"^buggy: .*KeyError: 'missing'") as info:
        run(tiny_model, [Buggy()])
    assert info.value.pass_name == "buggy" and info.value.cause_type == "KeyError"
    assert isinstance(info.value.__cause__, KeyError)  # the stack --traceback shows
    assert info.value.pipeline_report.passes[-1].error.startswith("buggy:")


def test_output_may_not_be_the_input(tiny_model, tmp_path):
    src = tmp_path / "m.onnx"
    onnx.save(tiny_model, src)
    before = sha(src)
    with pytest.raises(UsageError, match="would overwrite the input"):
        run(src, "cleanup", output=tmp_path / "." / "m.onnx")
    assert sha(src) == before


def test_options_are_checked_before_the_model_is_read(tmp_path):
    with pytest.raises(Exception, match="unknown option"):
        run(tmp_path / "does-not-exist.onnx", "cleanup(nope=1)")


def test_caller_model_is_not_modified(tiny_model):
    original = onnx.ModelProto()
    original.CopyFrom(tiny_model)
    report = run(tiny_model, "cleanup")
    assert tiny_model == original
    assert len(report.model.graph.node) == 1


def test_default_output_path(tmp_path):
    assert default_output_path(tmp_path / "net.onnx") == tmp_path / "net.surgery.onnx"
    assert default_output_path(tmp_path / "net") == tmp_path / "net.surgery.onnx"


class Bracketed(Pass):
    """Says something with brackets in it."""

    name = "bracketed"

    def run(self, model, ctx):
        return PassResult(model, modified=False, diagnostics=[Diagnostic.info("[4, -1] -> [batch, -1]")])


def test_report_table_shows_bracketed_values_verbatim(tiny_model):
    from rich.console import Console

    console = Console(record=True, width=200)
    console.print(run(tiny_model, [Bracketed()]).view(verbose=True))  # notes show with -v
    assert "[4, -1] -> [batch, -1]" in console.export_text()


class Renewer(Pass):
    """Returns a new model, as most passes do; records the model it was given."""

    name = "renewer"
    given: list[onnx.ModelProto] = []
    held: list[int] = []

    def run(self, model, ctx):
        if Renewer.given:  # the model the previous pass was given, now replaced by its result
            Renewer.held.append(sys.getrefcount(Renewer.given[-1]))
        Renewer.given.append(model)
        out = onnx.ModelProto()
        out.CopyFrom(model)
        return PassResult(out, modified=True)


def test_a_pass_input_is_dropped_once_the_pass_returns(tiny_model, tmp_path):
    # Two models at once cost two copies of every weight: once a pass returns, the run keeps
    # its result only (refcount: the list above and getrefcount's own argument, nothing else).
    path = tmp_path / "m.onnx"
    onnx.save(tiny_model, path)
    Renewer.given, Renewer.held = [], []
    run(path, [Renewer(), Renewer()])
    assert Renewer.held == [2]
