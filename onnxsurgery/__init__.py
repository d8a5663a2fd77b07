"""onnxsurgery: repair ONNX models exported from PyTorch.

Load an exported graph, run a chain of passes over it (``symbolize`` hard-coded sizes,
``concat-outputs``, ``fold-constants``, ...), validate it on ONNX Runtime against stored torch
outputs, and write it atomically::

    import onnxsurgery
    report = onnxsurgery.run("model.onnx", passes="symbolize, concat-outputs",
                             output="model.dyn.onnx", references="fixtures/net")

Where things live:
    pipeline.py    Pipeline and run(): order, checks, timing, atomic write
    pass_infra.py  the pass contract: Pass, PassResult, PassContext, Diagnostic
    registry.py    pass discovery through the ``onnxsurgery.passes`` entry points
    spec.py        the ``--passes`` grammar and TOML recipes
    model_io.py    load/save with external data, checker, shape inference
    runtime.py     ONNX Runtime sessions and provider choice (auto/cuda/cpu)
    report.py      what a run reports (rich tables and JSON)
    errors.py      the one exception tree (OnnxSurgeryError)
    cli.py         the ``onnxsurgery`` command, a thin layer over the above
The passes themselves live in ``onnxsurgery.passes`` (the ``passes/`` folder of the repository).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from onnxsurgery.errors import (
    ModelLoadError,
    ModelSaveError,
    OnnxSurgeryError,
    PassError,
    PassOptionError,
    PassSpecError,
    PluginError,
    ProviderError,
    ReferenceDataError,
    UsageError,
    ValidationMismatch,
)
from onnxsurgery.model.io import load_model, save_model
from onnxsurgery.pipeline.chain import PassSpec, load_recipe, parse_passes
from onnxsurgery.pipeline.contract import Diagnostic, Pass, PassContext, PassResult
from onnxsurgery.pipeline.registry import create_pass, discover, get_pass
from onnxsurgery.pipeline.report import PassRecord, PipelineReport
from onnxsurgery.pipeline.runner import Pipeline, default_output_path, run
from onnxsurgery.validation.runtime import create_session, resolve_provider

try:
    __version__ = version("onnxsurgery")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = [
    "__version__",
    # running
    "run",
    "Pipeline",
    "PipelineReport",
    "PassRecord",
    "default_output_path",
    # passes
    "Pass",
    "PassContext",
    "PassResult",
    "Diagnostic",
    "PassSpec",
    "parse_passes",
    "load_recipe",
    "discover",
    "get_pass",
    "create_pass",
    # models and runtime
    "load_model",
    "save_model",
    "create_session",
    "resolve_provider",
    # errors
    "OnnxSurgeryError",
    "UsageError",
    "PassSpecError",
    "PassOptionError",
    "PluginError",
    "ModelLoadError",
    "ModelSaveError",
    "ReferenceDataError",
    "ProviderError",
    "PassError",
    "ValidationMismatch",
]
