"""Running passes: the pass contract, finding passes, chains as text, the runner, its report.

    contract.py   Pass, PassResult, PassContext, Diagnostic: what a pass is, gets and gives back
    registry.py   passes found through the ``onnxsurgery.passes`` entry points
    pass_help.py  a pass's help read from its docstring: ``onnxsurgery passes [NAME]``
    chain.py      the ``--passes`` grammar (``NAME(key=value, ...)``) and TOML recipes
    runner.py     Pipeline and run(): order, checks after each pass, validation, atomic write
    report.py     what a run reports: per pass options, seconds, node counts, diagnostics
    report_html.py  ``--report FILE.html``: the page rendered from a report's dict (templates/)
    report_svg.py   the page's drawings: error histograms, a localized node's neighbourhood
"""

from __future__ import annotations

from onnxsurgery.pipeline.chain import PassSpec, build_passes, load_recipe, parse_passes
from onnxsurgery.pipeline.contract import (
    Diagnostic,
    OptionInfo,
    OutputMap,
    Pass,
    PassContext,
    PassResult,
)
from onnxsurgery.pipeline.registry import PassEntry, create_pass, discover, get_pass, pass_names
from onnxsurgery.pipeline.report import PassRecord, PipelineReport, write_json
from onnxsurgery.pipeline.runner import Pipeline, default_output_path, run

__all__ = [
    "Diagnostic",
    "OptionInfo",
    "OutputMap",
    "Pass",
    "PassContext",
    "PassEntry",
    "PassRecord",
    "PassResult",
    "PassSpec",
    "Pipeline",
    "PipelineReport",
    "build_passes",
    "create_pass",
    "default_output_path",
    "discover",
    "get_pass",
    "load_recipe",
    "parse_passes",
    "pass_names",
    "run",
    "write_json",
]
