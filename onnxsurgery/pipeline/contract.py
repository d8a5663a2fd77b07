"""The pass contract: what a pass is, what it gets, and what it gives back.

A pass is a small class with a registry ``name``, keyword options validated in ``__init__`` (a
wrong option fails before any model is touched) and a docstring whose first line is its one-line
help, followed by a short paragraph and an ``Options:`` entry per option (the one place its help
comes from: :mod:`onnxsurgery.pipeline.pass_help`). Calling it on a model returns a
:class:`PassResult`::

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

A pass declares how it treats the model it is given (the pipeline hands it the model it holds,
not a copy: copying every weight per pass cost more than the passes themselves): ``in_place =
True``, it edits that model and returns it; ``in_place = False`` (the default, for a pass that
declares nothing), it returns a new model and leaves its input untouched, or returns its input
itself with ``modified=False``. :meth:`Pass.__call__` checks the declaration after every run (as
onnx-ir's ``passes/_pass_infra.py`` does): an in-place pass that returns another model, or a
functional pass that returns its input as modified or changed it (its nodes, initializers,
inputs or outputs differ), is a :class:`~onnxsurgery.errors.PassError` naming the pass.

Weights are the handle's, not the pass's: ``PassContext.handle``
(:class:`~onnxsurgery.model.handle.ModelHandle`) holds the model and where its weights lie. A pass
that edits structure works on ``ctx.handle.weightless()`` and returns what it made of it,
placeholders and all; ``__call__`` has the handle fill them (in place where the pipeline owns the
model). A pass never returns a half-edited graph as success: when it cannot do its job it raises
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
    from onnxsurgery.model.handle import ModelHandle
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
    #: The model the pass is given and where its weights lie (:class:`ModelHandle`): set by the
    #: pipeline (``owned``: it drops the pass's input), else by :meth:`Pass.__call__` for the
    #: model it is called on.
    handle: ModelHandle | None = None

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
    #: An ONNX Runtime session over exactly ``model`` (a check's, which ran the run's reference
    #: cases on it): the pipeline's validation right after this pass, the last, runs on it
    #: instead of building another; dropped before any later pass runs.
    session: Any = field(default=None, repr=False)


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
    #: ``ctx.handle.array`` (or ``model.weights_on_disk.tensor_array``), runs the model only
    #: through ``validation.runtime.create_session``, and sees the graph through
    #: ``ctx.handle.weightless()``. The pipeline reads every weight into the model
    #: (``ModelHandle.full``) before a pass that leaves this False.
    weights_on_disk: ClassVar[bool] = False
    #: True for a pass that edits the model it is given and returns it; False (default) for one
    #: that returns a new model (or, changing nothing, its input) and leaves its input as it
    #: was. :meth:`__call__` checks it.
    in_place: ClassVar[bool] = False

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
        """Run the pass on ``model``, check its ``in_place`` declaration, and give its result
        the weights its placeholders stand for (``ctx.handle``'s, or those of ``model``)."""
        from onnxsurgery.model.handle import ModelHandle  # the model's modules, once a pass runs

        ctx = ctx or PassContext()
        given = ctx.handle
        handle = given if given is not None and given.model is model else ModelHandle(model)
        ctx.handle = handle
        try:
            before = None if self.in_place else _fingerprint(model)
            result = self.run(model, ctx)
            if not isinstance(result, PassResult):
                raise PassError(
                    f"returned {type(result).__name__}, not a PassResult", pass_name=self.name
                )
            self._check_declaration(model, before, result)
            result.model = handle.adopt(result.model)
        finally:
            ctx.handle = given
        return result

    def _check_declaration(
        self, model: onnx.ModelProto, before: int | None, result: PassResult
    ) -> None:
        """Raise the PassError that says the pass broke its ``in_place`` declaration."""
        if self.in_place and result.model is not model:
            why = (
                "declares in_place but returned another model than the one it was given; "
                "return that one, or declare in_place = False"
            )
        elif not self.in_place and result.model is model and result.modified:
            why = (
                "declares in_place false (functional) but returned the model it was given as "
                "modified; return a new model, or declare in_place = True"
            )
        elif before is not None and _fingerprint(model) != before:
            why = (
                "declares in_place false (functional) but changed the model it was given; "
                "edit a copy, or declare in_place = True"
            )
        else:
            return
        raise PassError(f"broke the pass contract: {why}", pass_name=self.name)

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


def _fingerprint(model: onnx.ModelProto) -> int:
    """What tells, without reading a weight's bytes, whether a model changed: its main graph's
    nodes (op, inputs, outputs), initializers (name, type, dims), inputs and outputs by name,
    and how many value_info, metadata and opset entries it has. An edit of an attribute or of a
    weight's values goes unseen (``ByteSize()`` would serialize every weight to tell)."""
    graph = model.graph
    return hash(
        (
            tuple((n.op_type, tuple(n.input), tuple(n.output)) for n in graph.node),
            tuple((t.name, t.data_type, tuple(t.dims)) for t in graph.initializer),
            tuple(i.name for i in graph.input),
            tuple(o.name for o in graph.output),
            (len(graph.value_info), len(model.metadata_props), len(model.opset_import)),
        )
    )
