"""The one exception tree of onnxsurgery.

Every error a user can cause derives from :class:`OnnxSurgeryError`. The CLI catches that base
class at one boundary, prints its message on one line and exits with its ``exit_code``. The
pipeline turns anything else a pass raises into a :class:`PassError` naming the pass and the node,
the loader anything else it meets into a :class:`ModelLoadError`; any other exception is a bug in
onnxsurgery: the CLI exits 3 with one line (``--traceback`` prints the stack)::

    OnnxSurgeryError                  exit 2 unless said otherwise
     +-- UsageError                   the request itself is wrong
     |    +-- PassSpecError           a --passes string or recipe file that does not parse
     |    +-- PassOptionError         unknown pass, unknown option, option of the wrong type
     +-- PluginError                  a pass entry point that cannot be used (duplicate name, failed import)
     +-- ModelLoadError               missing, unreadable, truncated or invalid model; bad external data
     +-- ModelSaveError               the output could not be written
     +-- ReferenceDataError           reference cases missing, unreadable, or not matching the model
     +-- ProviderError                the asked-for ONNX Runtime provider cannot run
     +-- PassError                    a pass could not do its job (names the pass and, where known, the node)
     |    +-- LimitExceeded           a model would cost more than a resource limit (onnxsurgery.limits)
     +-- ValidationMismatch           exit 1: the model ran but its outputs differ from the references

A pipeline run that stops on an error attaches what it had done so far as the error's
``pipeline_report`` (a :class:`~onnxsurgery.pipeline.report.PipelineReport`), so the CLI can
still write ``--report`` and show the failing validation.

Messages say what was wrong, where (file, pass, node, input, axis) and, where there is one, what
to do about it.
"""

from __future__ import annotations

from typing import Any

__all__ = [
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


class OnnxSurgeryError(Exception):
    """Base of every error a user can cause. ``exit_code`` is what the CLI exits with;
    ``pipeline_report`` is set by the pipeline that stopped on this error."""

    exit_code: int = 2
    #: The :class:`~onnxsurgery.pipeline.report.PipelineReport` of the run that stopped here
    #: (typed ``Any``: this module is the leaf every other one imports).
    pipeline_report: Any = None


class UsageError(OnnxSurgeryError):
    """The request is wrong before any model is touched."""


class PassSpecError(UsageError):
    """A pass chain (``--passes`` text or recipe file) that does not parse."""


class PassOptionError(UsageError):
    """An unknown pass, an unknown option, or an option value a pass does not accept."""


class PluginError(OnnxSurgeryError):
    """A pass entry point that cannot be used: its import failed, or two declare one name."""


class ModelLoadError(OnnxSurgeryError):
    """The input model cannot be read, or is not a valid ONNX model."""


class ModelSaveError(OnnxSurgeryError):
    """The output model cannot be written."""


class ReferenceDataError(OnnxSurgeryError):
    """Reference cases are missing, unreadable, or do not fit the model."""


class ProviderError(OnnxSurgeryError):
    """The requested ONNX Runtime execution provider cannot run here."""


class PassError(OnnxSurgeryError):
    """A pass could not do its job. Carries the pass name and, where known, the node."""

    def __init__(
        self,
        message: str,
        *,
        pass_name: str | None = None,
        node: str | None = None,
        details: list[str] | None = None,
    ) -> None:
        self.pass_name = pass_name
        self.node = node
        self.details = list(details or [])
        #: The type name of the exception this error stands for, when a pass raised something
        #: other than an OnnxSurgeryError (the pipeline's boundary converted it).
        self.cause_type: str | None = None
        super().__init__(message)

    def __str__(self) -> str:
        text = super().__str__()
        if self.node and self.node not in text:
            text = f"node {self.node!r}: {text}"
        if self.pass_name and not text.startswith(f"{self.pass_name}:"):
            text = f"{self.pass_name}: {text}"
        return text


class LimitExceeded(PassError):
    """A model would cost more than a resource limit (time, elements, loop trips); the message
    names the limit and how to raise it. The loader reports it as a ModelLoadError."""


class ValidationMismatch(OnnxSurgeryError):
    """The model ran, but its outputs differ from the references beyond tolerance."""

    exit_code = 1

    def __init__(self, message: str, *, report: Any = None) -> None:
        #: The :class:`~onnxsurgery.validation.report.ValidationReport` that failed.
        self.report = report
        super().__init__(message)
