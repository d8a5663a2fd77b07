"""The pass contract: what a pass is, what it gets, and what it gives back.

A pass is a small class with a registry ``name``, keyword options validated in ``__init__`` (a
wrong option fails before any model is touched) and a docstring whose first line is its one-line
help. Calling it on a model returns a :class:`PassResult`::

    class Cleanup(Pass):
        \"\"\"Remove dead nodes and unused inputs/initializers; sort nodes topologically.\"\"\"

        name = "cleanup"

        def __init__(self, *, inputs: bool = True) -> None:
            super().__init__(inputs=inputs)
            if not isinstance(inputs, bool):
                raise ValueError(f"inputs must be true or false, got {inputs!r}")
            self.inputs = inputs

        def run(self, model: onnx.ModelProto, ctx: PassContext) -> PassResult:
            ...
            return PassResult(cleaned, modified=True, diagnostics=[Diagnostic.info("removed 3 nodes")])

(``passes/cleanup.py`` in full.) A ``ValueError`` or ``TypeError`` from ``__init__`` becomes a
:class:`~onnxsurgery.errors.PassOptionError` naming the pass. A pass that validates the model
sets ``validates = True`` and returns its validation report as ``PassResult.report``.

A pass never edits the model it was given in place (the pipeline hands it the model it holds, not
a copy: copying every weight per pass cost more than the passes themselves), unless
``PassContext.owns_input`` says the caller drops that model once the pass returns; and never
returns a half-edited graph as success: when it cannot do its job it raises
:class:`~onnxsurgery.errors.PassError` naming the node and the reason.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, NoReturn

import numpy as np
import onnx

from onnxsurgery.errors import PassError, PassOptionError

if TYPE_CHECKING:
    from onnxsurgery.validation.references import Case

__all__ = [
    "Diagnostic",
    "OutputMap",
    "Pass",
    "PassContext",
    "PassResult",
    "OptionInfo",
]

Level = Literal["info", "warning", "blocker"]

#: Maps a case's outputs, keyed by the names the model had before a pass, onto the outputs the
#: model has after it (concat-outputs merges several into one). Validation applies every map the
#: pipeline has collected, in order, so references still compare like with like.
OutputMap = Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]


@dataclass(frozen=True)
class Diagnostic:
    """One thing a pass wants the user to know: what it rewrote, what it could not, and why."""

    level: Level
    message: str
    node: str | None = None
    op: str | None = None

    @classmethod
    def info(cls, message: str, *, node: str | None = None, op: str | None = None) -> Diagnostic:
        return cls("info", message, node, op)

    @classmethod
    def warning(cls, message: str, *, node: str | None = None, op: str | None = None) -> Diagnostic:
        return cls("warning", message, node, op)

    @classmethod
    def blocker(cls, message: str, *, node: str | None = None, op: str | None = None) -> Diagnostic:
        return cls("blocker", message, node, op)

    def __str__(self) -> str:
        where = ""
        if self.node or self.op:
            where = f"[{self.op or '?'} {self.node or '?'}] "
        return f"{where}{self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {"level": self.level, "message": self.message, "node": self.node, "op": self.op}


@dataclass
class PassContext:
    """What the pipeline knows that a pass may need. Passes read it; only the pipeline writes it.

    ``references`` is the reference folder/file given to the run (``--ref``); ``output_maps`` are
    the output maps of the passes that already ran, in order; ``provider`` is the ONNX Runtime
    provider choice (``auto``, ``cuda``, ``cpu``); ``source`` is the input model's path, when the
    model came from a file; passes report their stages through :meth:`stage`. ``cases`` are the
    cases under ``references``, their unnamed ``input_K`` / ``output_K`` bound to the input
    model's inputs and outputs (later passes may change the outputs; ``map_outputs`` follows them
    from there): a sequence that reads each case from disk when it is asked for
    (:class:`~onnxsurgery.validation.references.CaseStream`), so a pass that goes through them in
    turn holds one at a time.
    """

    provider: str = "auto"
    references: Path | None = None
    cases: Sequence[Case] | None = None
    output_maps: list[OutputMap] = field(default_factory=list)
    source: Path | None = None
    #: ``(stage, done, total)``: where a long pass is, for a progress line (the CLI's, on a terminal).
    progress: Callable[[str, int | None, int | None], None] | None = None
    #: True when the caller drops the model it hands the pass once the pass returns (the
    #: pipeline does): the pass may then build its result from that model's own messages instead
    #: of copying them (fold-constants keeps a 2 GB model's weights where they are). Only once
    #: nothing can fail any more: a pass that raises leaves its input as it was given.
    owns_input: bool = False

    def stage(self, text: str, done: int | None = None, total: int | None = None) -> None:
        """Say which stage the pass is in (``done`` of ``total`` steps where it counts them)."""
        if self.progress is not None:
            self.progress(text, done, total)

    def map_outputs(self, outputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Apply every output map collected so far to one case's reference outputs."""
        mapped = dict(outputs)
        for output_map in self.output_maps:
            mapped = output_map(mapped)
        return mapped


@dataclass
class PassResult:
    """What a pass gives back.

    ``modified`` says whether the model changed; ``diagnostics`` what was rewritten or could not
    be; ``output_map`` is set by passes that change the output signature; ``report`` is any
    structured result a pass wants shown (an object with ``to_dict()`` and, for the terminal,
    ``__rich__()``), such as a validation report.
    """

    model: onnx.ModelProto
    modified: bool
    diagnostics: list[Diagnostic] = field(default_factory=list)
    output_map: OutputMap | None = None
    report: Any = None


@dataclass(frozen=True)
class OptionInfo:
    """One option of a pass, read from the signature of its ``__init__``."""

    name: str
    default: Any
    annotation: str
    variadic: bool = False

    def __str__(self) -> str:
        if self.variadic:
            return f"{self.name}=..."
        if self.default is inspect.Parameter.empty:
            return f"{self.name} (required)"
        return f"{self.name}={self.default!r}"


def _cut(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else f"{text[:limit]} ... ({len(text)} characters)"


class Pass:
    """Base class of every pass. Subclasses set ``name`` and implement :meth:`run`.

    Options are the keyword arguments of the subclass's ``__init__``; a subclass passes them all
    to ``super().__init__(**options)`` so they are recorded for reports. A subclass that takes
    free-form keys (``symbolize(x:0=batch)``) declares ``**kwargs`` and validates them itself.
    """

    name: ClassVar[str] = ""
    #: True for a pass that validates the model (its ``PassResult.report`` is then a
    #: :class:`~onnxsurgery.validation.report.ValidationReport`); the pipeline then skips its own
    #: validation after the last pass.
    validates: ClassVar[bool] = False
    #: True for a pass that takes a model whose large weights may still lie in the data file it
    #: was loaded from (``model.tensors.on_disk``): it reads a weight's values only through
    #: ``model.tensors.tensor_array``, runs the model only through
    #: ``validation.runtime.create_session``, and sees the graph through weightless copies. The
    #: pipeline reads every weight into the model before a pass that leaves this False.
    weights_on_disk: ClassVar[bool] = False

    def __init__(self, **options: Any) -> None:
        self.options: dict[str, Any] = dict(options)

    # -- introspection used by the registry and `onnxsurgery passes` ---------------------------
    @classmethod
    def summary(cls) -> str:
        """The first line of the class docstring: the pass's one-line help."""
        doc = inspect.getdoc(cls) or ""
        return doc.strip().splitlines()[0] if doc.strip() else ""

    @classmethod
    def option_infos(cls) -> list[OptionInfo]:
        infos = []
        for param in inspect.signature(cls.__init__).parameters.values():
            if param.name == "self" or param.kind is inspect.Parameter.VAR_POSITIONAL:
                continue
            annotation = param.annotation
            if annotation is inspect.Parameter.empty:
                annotation = ""
            infos.append(
                OptionInfo(
                    name=param.name,
                    default=param.default,
                    annotation=str(annotation),
                    variadic=param.kind is inspect.Parameter.VAR_KEYWORD,
                )
            )
        return infos

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> Pass:
        """Build the pass from parsed options, turning every wrong option into a PassOptionError."""
        infos = cls.option_infos()
        known = {i.name for i in infos if not i.variadic}
        takes_any = any(i.variadic for i in infos)
        unknown = [k for k in options if k not in known]
        if unknown and not takes_any:
            valid = ", ".join(sorted(known)) or "(none)"
            raise PassOptionError(
                f"{cls.name}: unknown option {', '.join(map(repr, unknown))}; valid options: {valid}"
            )
        try:
            return cls(**options)
        except PassOptionError:
            raise
        except (TypeError, ValueError) as exc:
            raise PassOptionError(f"{cls.name}: {exc}") from None
        except Exception as exc:  # OverflowError, OSError, RecursionError, ...: still a bad option
            raise PassOptionError(f"{cls.name}: bad options: {type(exc).__name__}: {_cut(exc)}") from None

    # -- running ---------------------------------------------------------------------------------
    def preview(self, model: onnx.ModelProto) -> Any:
        """What this pass would change in ``model`` and what would stop it, changing nothing.

        Passes that can tell return a report object (``to_dict()``, ``__rich__()``), shown by
        ``onnxsurgery inspect --plan``; the default, ``None``, means the pass offers no preview.
        """
        return None

    def run(self, model: onnx.ModelProto, ctx: PassContext) -> PassResult:
        raise NotImplementedError(f"pass {self.name!r} does not implement run()")

    def __call__(self, model: onnx.ModelProto, ctx: PassContext | None = None) -> PassResult:
        result = self.run(model, ctx or PassContext())
        if not isinstance(result, PassResult):
            raise PassError(
                f"returned {type(result).__name__}, not a PassResult", pass_name=self.name
            )
        return result

    def fail(
        self,
        message: str,
        *,
        node: str | None = None,
        details: list[str] | None = None,
        report: Any = None,
    ) -> NoReturn:
        """Raise the PassError that says this pass could not do its job (``report``: what it
        found, kept in the run's JSON report)."""
        raise PassError(message, pass_name=self.name, node=node, details=details, report=report)

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options.items())
        return f"{type(self).__name__}({opts})"
