"""onnxsurgery: repair ONNX models exported from PyTorch.

Load an exported graph, run a chain of passes over it (``symbolize`` hard-coded sizes,
``concat-outputs``, ``fold-constants``, ...), validate it on ONNX Runtime against stored torch
outputs, and write it atomically::

    import onnxsurgery
    report = onnxsurgery.run("model.onnx", passes="symbolize, concat-outputs",
                             output="model.dyn.onnx", references="fixtures/net")

Everything the README shows is importable from here. Where things live:

    errors.py          the one exception tree (OnnxSurgeryError)
    cli.py             the ``onnxsurgery`` command, one library call per command
    merged_outputs/   concat-outputs' layout record in metadata; split_outputs undoes a merge
    pipeline/          the pass contract, registry, chain grammar and recipes, runner, report
    model/             load/save and external data, graph walking, dtypes, signature, equality,
                       the summary ``inspect`` shows
    shapes/            symbolic dims, shape rules by op family, propagation, solver
    validation/        ONNX Runtime and providers, reference cases, feeds, tolerances, array
                       comparison, model-vs-references and model-vs-model

The passes live in ``onnxsurgery.passes`` (the ``passes/`` folder of the repository), one module
or package per pass; the engine never imports them: the pipeline finds them through the
``onnxsurgery.passes`` entry points.
"""

from __future__ import annotations

from onnxsurgery._version import __version__
from onnxsurgery.errors import (
    LimitExceeded,
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
from onnxsurgery.merged_outputs import Layout, read_layout, split_outputs
from onnxsurgery.model import load_model, save_model, summarize
from onnxsurgery.pipeline import (
    Diagnostic,
    Pass,
    PassContext,
    PassRecord,
    PassResult,
    PassSpec,
    Pipeline,
    PipelineReport,
    create_pass,
    default_output_path,
    discover,
    get_pass,
    load_recipe,
    parse_passes,
    run,
)
from onnxsurgery.validation import (
    DEFAULT_ATOL,
    DEFAULT_RTOL,
    Case,
    ValidationReport,
    compare_models,
    create_session,
    load_cases,
    record,
    record_model_cases,
    resolve_provider,
    save_case,
    validate,
)

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
    # models
    "load_model",
    "save_model",
    "summarize",
    # merged outputs (concat-outputs)
    "split_outputs",
    "read_layout",
    "Layout",
    # validation and references
    "validate",
    "compare_models",
    "ValidationReport",
    "DEFAULT_ATOL",
    "DEFAULT_RTOL",
    "Case",
    "load_cases",
    "save_case",
    "record",
    "record_model_cases",
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
    "LimitExceeded",
    "ValidationMismatch",
]
