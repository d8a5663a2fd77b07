"""onnxsurgery: repair ONNX models exported from PyTorch.

Load an exported graph, run a chain of passes over it (``symbolize`` hard-coded sizes,
``concat-outputs``, ``fold-constants``, ...), validate it on ONNX Runtime against stored torch
outputs, and write it atomically::

    import onnxsurgery
    report = onnxsurgery.run("model.onnx", passes="symbolize, concat-outputs",
                             output="model.dyn.onnx", references="fixtures/net")

Everything the README shows is importable from here; each name imports its module when first used
(``lazy.py``), so a command pays only for the modules it runs. Where things live:

    errors.py          the one exception tree (OnnxSurgeryError)
    lazy.py            package namespaces that import a module on first use of one of its names
    cli/               the ``onnxsurgery`` command, one library call per command; reference.py
                       its ``reference`` group; commands.py what every command is made with
    terminal.py        what the command shows: consoles, the error boundary, the progress line
    merged_outputs/   concat-outputs' layout record in metadata; split_outputs undoes a merge
    pipeline/          the pass contract, registry, chain grammar and recipes, runner, report
    model/             load/save and external data, graph walking, dtypes, signature, equality,
                       the summary ``inspect`` shows
    shapes/            symbolic dims, shape rules by op family, propagation, solver
    validation/        ONNX Runtime and providers, reference cases, feeds, tolerances, array
                       comparison, model-vs-references and model-vs-model
    graphdiff/         diff(): what changed between two models (nodes, constants, inputs/outputs)
    divergence/        localize(): the first node where two models that should agree part ways

The passes live in ``onnxsurgery.passes`` (the ``passes/`` folder of the repository), one module
or package per pass; the engine never imports them: the pipeline finds them through the
``onnxsurgery.passes`` entry points.
"""

from __future__ import annotations

from onnxsurgery import errors
from onnxsurgery.lazy import lazy_exports

# Each name imports its module when first used (see lazy.py): `onnxsurgery run --passes cleanup`
# then never imports shapes, merged outputs or model equality.
__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "onnxsurgery._version": ("__version__",),
        # running
        "onnxsurgery.pipeline": (
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
        ),
        # models
        "onnxsurgery.model": ("load_model", "save_model", "summarize"),
        # merged outputs (concat-outputs)
        "onnxsurgery.merged_outputs": ("split_outputs", "read_layout", "Layout"),
        # validation and references
        "onnxsurgery.validation": (
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
        ),
        # what changed, and where two models part ways
        "onnxsurgery.graphdiff": ("diff", "ModelDiff"),
        "onnxsurgery.divergence": ("localize", "localize_failure", "Localization"),
        # errors: the whole tree
        "onnxsurgery.errors": tuple(errors.__all__),
    },
    modules=(
        "_version",
        "cli",
        "divergence",
        "errors",
        "files",
        "graphdiff",
        "limits",
        "merged_outputs",
        "model",
        "pipeline",
        "shapes",
        "terminal",
        "validation",
    ),
)
