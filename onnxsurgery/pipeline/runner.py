"""The pipeline: run passes in order, check after each, validate, then write atomically.

    Pipeline([Symbolize(dynamic_axes={"x": {0: "batch"}}), ConcatOutputs()]).run("in.onnx", "out.onnx")
    onnxsurgery.run("in.onnx", passes="symbolize, concat-outputs", output="out.onnx", references="fixtures/net")

The run holds the model in a :class:`~onnxsurgery.model.handle.ModelHandle` (large weights left
on disk until read; each pass's result takes the place of its input). After every pass the model
goes through ``onnx.checker`` and strict shape inference (on the handle's weightless view); each
pass is timed and its node counts recorded. On any failure the pipeline stops, names the pass and the
cause, and writes nothing. With references, the model is validated on ONNX Runtime after the
last pass (unless the chain already ends in a validating pass); the output is written only when
everything passed, so a failed run never leaves a file ``make`` would take as up to date.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import onnx

from onnxsurgery._version import __version__
from onnxsurgery.errors import (
    ModelLoadError,
    OnnxSurgeryError,
    PassError,
    UsageError,
    ValidationMismatch,
)
from onnxsurgery.files import check_targets, shown
from onnxsurgery.limits import LimitExceeded, Limits, check_sizes, use_limits
from onnxsurgery.limits import current as current_limits
from onnxsurgery.model.dtypes import dtype_name
from onnxsurgery.model.handle import ModelHandle
from onnxsurgery.model.io import (
    check_model,
    infer_shapes,
    prepare_model,
    read_model_file,
    save_model,
    sync_initializer_inputs,
)
from onnxsurgery.model.signature import dims_of
from onnxsurgery.model.walk import count_nodes
from onnxsurgery.model.weights_on_disk import has_weights_on_disk
from onnxsurgery.pipeline.chain import PassSpec, build_passes, format_value, parse_passes
from onnxsurgery.pipeline.contract import Diagnostic, Pass, PassContext
from onnxsurgery.pipeline.report import PassRecord, PipelineReport
from onnxsurgery.validation.against_references import validate
from onnxsurgery.validation.references import CaseStream
from onnxsurgery.validation.runtime import PROVIDERS, resolve_provider

__all__ = ["Pipeline", "run", "default_output_path", "pass_failure", "PIPELINE_METADATA_KEY"]

#: metadata_props key recording which chain produced a model (no timestamps: output stays byte-identical).
PIPELINE_METADATA_KEY = "onnxsurgery.pipeline"


def default_output_path(source: str | os.PathLike) -> Path:
    """``model.onnx`` -> ``model.surgery.onnx`` beside it; never the input itself."""
    p = Path(source)
    stem = p.name[: -len(".onnx")] if p.name.endswith(".onnx") else p.name
    return p.with_name(f"{stem}.surgery.onnx")


def _failing_node(tb: TracebackType | None) -> str | None:
    """The innermost frame of a traceback that holds a ``node`` (a NodeProto): where a pass was."""
    found = None
    while tb is not None:
        node = tb.tb_frame.f_locals.get("node")
        if isinstance(node, onnx.NodeProto):
            found = node.name or f"{node.op_type} (unnamed)"
        tb = tb.tb_next
    return found


def pass_failure(pass_name: str, exc: BaseException) -> PassError:
    """The PassError for any exception a pass raised: names the pass, the node it was at (where
    the traceback shows one), and the exception. ``--traceback`` shows the original stack."""
    if isinstance(exc, RecursionError):
        message = "cannot handle this graph: it nests too deeply (Python recursion limit)"
    elif isinstance(exc, MemoryError):
        message = "cannot handle this graph: out of memory"
    else:
        text = " ".join(str(exc).split())
        text = text[:300] + " ..." if len(text) > 300 else text
        message = f"cannot handle this graph: {type(exc).__name__}: {text}"
    node = _failing_node(exc.__traceback__)
    error = PassError(message, pass_name=pass_name, node=shown(node)[1:-1] if node else None)
    error.cause_type = type(exc).__name__
    return error


def _describe(p: Pass) -> str:
    given = {k: v for k, v in p.options.items() if v is not None}
    if not given:
        return p.name
    inner = ", ".join(f"{k}={format_value(v)}" for k, v in given.items())
    return f"{p.name}({inner})"


def _stamp(model: onnx.ModelProto, chain: str) -> None:
    for prop in model.metadata_props:
        if prop.key == PIPELINE_METADATA_KEY:
            prop.value = f"{prop.value}; {chain}"
            return
    model.metadata_props.add(key=PIPELINE_METADATA_KEY, value=f"onnxsurgery {__version__}: {chain}")


class Pipeline:
    """An ordered list of passes, plus how to check and validate what they produce.

    ``passes`` may hold Pass instances, :class:`PassSpec` objects or chain text
    (``"cleanup, symbolize(x:0=batch)"``); every option of every pass is checked here, before any
    model is read. ``check`` runs the ONNX checker and shape inference after each pass.
    ``references`` (a folder/file of reference cases) validates the result after the last pass,
    within ``atol``/``rtol`` and per output ``tolerances`` (``{name: (atol, rtol)}``, either
    None to keep the default), as ``validate`` does.
    A mismatch there is localized against the input model where it takes a failing case
    (``report.localized``). ``diffs`` records what each pass changed (``PassRecord.diff``).
    """

    def __init__(
        self,
        passes: Iterable[Pass | PassSpec | str] | str,
        *,
        check: bool = True,
        references: str | os.PathLike | None = None,
        provider: str = "auto",
        atol: float | None = None,
        rtol: float | None = None,
        limits: Limits | Mapping[str, Any] | None = None,
        tolerances: Mapping[str, tuple[float | None, float | None]] | None = None,
        diffs: bool = False,
        histograms: bool = False,
    ) -> None:
        self.limits = limits if isinstance(limits, Limits) else current_limits().updated(limits)
        items = parse_passes(passes) if isinstance(passes, str) else list(passes)
        self.passes: list[Pass] = build_passes(items)
        if not self.passes:
            raise UsageError("a pipeline needs at least one pass")
        if provider not in PROVIDERS:
            raise UsageError(f"provider {provider!r} is not one of {', '.join(PROVIDERS)}")
        self.check = check
        self.references = Path(references) if references is not None else None
        self.provider = provider
        self.atol = atol
        self.rtol = rtol
        self.tolerances = dict(tolerances or {})
        #: record what each pass changed (``PassRecord.diff``; ``run --report`` asks for it)
        self.diffs = diffs
        #: count each output's errors into a histogram (``--report FILE.html`` draws them)
        self.histograms = histograms

    def __repr__(self) -> str:
        return f"Pipeline([{', '.join(map(repr, self.passes))}])"

    @property
    def chain(self) -> str:
        return ", ".join(_describe(p) for p in self.passes)

    def run(
        self,
        model: onnx.ModelProto | str | os.PathLike,
        output: str | os.PathLike | None = None,
        *,
        external_data: bool | None = None,
        base_dir: str | os.PathLike | None = None,
        progress: Callable[[str, str, int | None, int | None], None] | None = None,
    ) -> PipelineReport:
        """Run the chain on ``model`` (path or ModelProto); write ``output`` if given.

        A ModelProto goes through the same checks as a file; external data it refers to is
        resolved against ``base_dir`` (refused without one). ``progress(where, stage, done,
        total)`` hears where the run is: ``where`` is a pass's name (or ``load``, ``validate``,
        ``write``), ``stage`` what it is doing, ``done`` of ``total`` where steps are counted
        (validation cases). Returns the report (``report.model`` is the final model). Raises an
        :class:`~onnxsurgery.errors.OnnxSurgeryError` on the first failure, with the partial
        report attached as ``error.pipeline_report`` (its ``model`` is the last model a pass
        produced); nothing is written then. Any other exception a pass raises becomes a
        :class:`~onnxsurgery.errors.PassError` naming the pass and, where known, the node.
        """
        with use_limits(self.limits):
            return self._run(
                model, output, external_data=external_data, base_dir=base_dir, progress=progress
            )

    def _run(
        self,
        model: onnx.ModelProto | str | os.PathLike,
        output: str | os.PathLike | None,
        *,
        external_data: bool | None,
        base_dir: str | os.PathLike | None,
        progress: Callable[[str, str, int | None, int | None], None] | None = None,
    ) -> PipelineReport:
        start = time.perf_counter()
        try:
            return self._load_and_run(model, output, external_data, base_dir, start, progress)
        except OnnxSurgeryError as exc:
            if exc.pipeline_report is None:  # refused before any pass: still a report to write
                exc.pipeline_report = PipelineReport(
                    source=None if isinstance(model, onnx.ModelProto) else str(model),
                    output=None,
                    error=str(exc),
                    seconds=time.perf_counter() - start,
                )
            raise

    def _load_and_run(
        self,
        model: onnx.ModelProto | str | os.PathLike,
        output: str | os.PathLike | None,
        external_data: bool | None,
        base_dir: str | os.PathLike | None,
        start: float,
        progress: Callable[[str, str, int | None, int | None], None] | None = None,
    ) -> PipelineReport:
        source_path: Path | None = None
        out_path = Path(output) if output is not None else None
        where = ["load"]

        def stage(text: str, done: int | None = None, total: int | None = None) -> None:
            if progress is not None:
                progress(where[0], text, done, total)

        if isinstance(model, onnx.ModelProto):
            current = onnx.ModelProto()
            current.CopyFrom(model)
            source_external = prepare_model(
                current, where="model:", base_dir=base_dir, weights_on_disk=True
            )
        else:
            source_path = Path(model)
            check_targets({"input model": source_path}, {"output": out_path})
            stage(f"reading {source_path.name}")
            # Large weights in external data stay in their file until a pass needs their bytes
            # (passes that declare `weights_on_disk` do not; ORT maps them) or the save copies them.
            loaded = read_model_file(source_path, weights_on_disk=True)
            current, source_external = loaded.model, loaded.external_data
            # `current` is the one reference the run keeps: a pass's input is freed once the
            # pass returns (a model and its successor never both stay, nor the file's).
            del loaded
        try:
            check_sizes(current)
        except LimitExceeded as exc:
            raise ModelLoadError(f"{source_path or 'model'}: {exc}") from None
        report = PipelineReport(
            source=str(source_path) if source_path else None,
            output=str(out_path) if out_path else None,
        )
        # The handle owns the model: each pass's input is dropped for its result.
        handle = ModelHandle(current, owned=True, external_data=source_external, path=source_path)
        ctx = PassContext(
            provider=self.provider,
            references=self.references,
            source=source_path,
            progress=stage,
            handle=handle,
        )
        del current  # the handle's reference is the one the run keeps
        try:
            if self.references is not None:
                ctx.cases = _bound_cases(self.references, handle.model)
            # (pass name, session over the model it returned: its check's), held in a list
            # that validation empties, so the session goes before the localization or the write
            offered: list[tuple[str, Any]] = []
            for p in self.passes:
                where[0] = p.name
                offered.clear()  # no pass runs beside an earlier pass's session
                offered += self._run_pass(p, handle, ctx, report)
            if self.references is not None and not any(p.validates for p in self.passes):
                where[0] = "validate"
                self._validate(handle.model, ctx, report, original=model, offered=offered)
            offered.clear()
            _stamp(handle.model, self.chain)
            if out_path is not None:
                where[0] = "write"
                stage(str(out_path))
                use_external = True if handle.external_data and external_data is None else external_data
                save_model(handle.model, out_path, external_data=use_external)
        except OnnxSurgeryError as exc:
            report.error = str(exc)
            report.seconds = time.perf_counter() - start
            report.output = None
            report.model = handle.model
            exc.pipeline_report = report
            raise
        report.seconds = time.perf_counter() - start
        report.model = handle.model
        return report

    def _run_pass(
        self, p: Pass, handle: ModelHandle, ctx: PassContext, report: PipelineReport
    ) -> list[tuple[str, Any]]:
        """Run ``p`` on the model ``handle`` holds; its result takes the model's place there.
        Returns the session the pass offers over that model (``PassResult.session``), if any."""
        before = count_nodes(handle.model)
        # what the model was, without the weights' data (cheap): what the pass changed
        kept = handle.weightless() if self.diffs else None
        t0 = time.perf_counter()
        record = PassRecord(p.name, dict(p.options), 0.0, before, before, False)
        report.passes.append(record)
        try:
            if not p.weights_on_disk and has_weights_on_disk(handle.model):
                ctx.stage("reading the weights it needs from the data file")
                handle.full()
            # value_info the pass is handed: checked below only where the pass changed it
            given = {vi.SerializeToString() for vi in handle.model.graph.value_info}
            dropped: list[Diagnostic] = []
            ctx.stage("running")
            # Passes get the model itself: the pipeline keeps no other reference to it, and a
            # failed pass ends the run, so a copy per pass would only cost time and memory.
            result = p(handle.model, ctx)
            handle.model = result.model
            # IR < 4 lists initializers as inputs; passes need not know (one place restores it)
            sync_initializer_inputs(result.model)
            try:
                check_sizes(result.model)
            except LimitExceeded as exc:
                raise PassError(f"its output model: {exc}") from None
            if self.check:
                ctx.stage("checking its output (ONNX checker, shape inference)")
                dropped = _check_output(handle, given, result.modified)
        except OnnxSurgeryError as exc:
            record.seconds = time.perf_counter() - t0
            if isinstance(exc, PassError) and exc.pass_name is None:
                exc.pass_name = p.name
            record.error = str(exc)
            if isinstance(exc, PassError) and exc.report is not None:
                record.report = exc.report
            if isinstance(exc, ValidationMismatch) and exc.report is not None:
                record.report = exc.report
                report.validation = exc.report if p.validates else None
            raise
        except Exception as exc:  # whatever a pass raises on the graph it was given
            record.seconds = time.perf_counter() - t0
            error = pass_failure(p.name, exc)
            record.error = str(error)
            raise error from exc
        record.seconds = time.perf_counter() - t0
        record.nodes_after = count_nodes(result.model)
        record.modified = result.modified
        record.diagnostics = list(result.diagnostics) + dropped
        record.report = result.report
        if p.validates and result.report is not None:
            report.validation = result.report
            report.provider = result.report.provider
        if result.output_map is not None:
            ctx.output_maps.append(result.output_map)
        if kept is not None:
            record.diff = _pass_diff(kept, handle.model)
        return [] if result.session is None else [(p.name, result.session)]

    def _validate(
        self,
        model: onnx.ModelProto,
        ctx: PassContext,
        report: PipelineReport,
        original: onnx.ModelProto | str | os.PathLike,
        offered: list[tuple[str, Any]] | None = None,
    ) -> None:
        """Validate ``model`` against the run's cases. ``offered``: the last pass's name and the
        session its check built over exactly this model (ONNX Runtime loading a large model is
        most of a validation's time), taken out of the list: the cases run on it where it is on
        the provider chosen, and the report says so."""
        kwargs: dict[str, Any] = {}
        if self.atol is not None:
            kwargs["atol"] = self.atol
        if self.rtol is not None:
            kwargs["rtol"] = self.rtol
        cases = ctx.cases if ctx.cases is not None else ctx.references
        assert cases is not None  # the run validates only where references were given
        choice = resolve_provider(ctx.provider)
        by, session = offered.pop() if offered else (None, None)
        if session is not None and session.get_providers()[0] != choice.provider:
            by, session = None, None
        try:
            result = validate(
                model,
                cases,
                provider=choice,
                session=session,
                output_map=ctx.map_outputs,
                label=str(ctx.references),
                progress=ctx.stage,
                tolerances=self.tolerances,
                histograms=self.histograms,
                **kwargs,
            )
        except OnnxSurgeryError:
            raise
        except Exception as exc:  # ONNX Runtime refusing the graph, or worse: say where
            raise pass_failure("validation", exc) from exc
        del session
        if by is not None:
            result.notes.append(f"cases run on the session {by}'s check built over this model")
        report.validation = result
        report.provider = result.provider
        if not result:
            from onnxsurgery.divergence import localize_failure  # only a failing run needs it

            ctx.stage("localizing the mismatch against the input model")
            failing = [c.name for c in result.cases if not c]
            # per-output tolerances name outputs, not the intermediate tensors compared here
            report.localized = localize_failure(
                model, original, ctx.cases or [], failing, provider=ctx.provider,
                fallback=False, **kwargs,
            )  # fmt: skip
            if report.localized.reason is None and not report.localized:
                report.localized.notes.append(
                    "the input model computes the same there: the passes did not cause the mismatch"
                )
            raise ValidationMismatch(
                f"validation against {ctx.references} failed: {result.summary}", report=result
            )


def _check_output(handle: ModelHandle, given: set[bytes], modified: bool) -> list[Diagnostic]:
    """The ONNX checker and strict shape inference on a pass's output (``handle.model``).

    value_info the pass was given (``given``) is left out of the check: a stale shape the input
    already had (ORT only warns) is not this pass's doing. Where the pass changed the graph, the
    given entries that contradict inference are dropped from its output (said in the returned
    diagnostic): whether ORT tolerates one depends on the graph around it (an If branch reading
    the value from the outer scope is refused once the graph's outputs change).
    """
    where = "its output model"
    # One weightless copy for both: they see every weight's type and shape, not its data.
    bare = handle.weightless()
    check_model(bare, where=where, error=PassError)
    kept = [vi for vi in bare.graph.value_info if vi.SerializeToString() not in given]
    del bare.graph.value_info[:]
    bare.graph.value_info.extend(kept)
    try:
        inferred = infer_shapes(bare, data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as exc:
        first = str(exc).strip().splitlines()[0]
        raise PassError(f"{where} fails shape inference: {first}") from None
    if not modified or not given:
        return []
    fresh = {vi.name: vi for vi in inferred.graph.value_info}
    graph = handle.model.graph
    stale = [
        (vi, fresh[vi.name]) for vi in graph.value_info
        if vi.name in fresh and vi.SerializeToString() in given and _contradicts(vi, fresh[vi.name])
    ]  # fmt: skip
    if not stale:
        return []
    names = {vi.name for vi, _ in stale}
    kept = [vi for vi in graph.value_info if vi.name not in names]
    del graph.value_info[:]
    graph.value_info.extend(kept)
    listed = ", ".join(f"{vi.name} {_typed(vi)} (inferred {_typed(new)})" for vi, new in stale)
    return [Diagnostic.warning(f"dropped value_info the input carried that contradicts shape inference: {listed}")]


def _contradicts(declared: onnx.ValueInfoProto, inferred: onnx.ValueInfoProto) -> bool:
    """Whether two tensor types cannot both hold: elem types, ranks or fixed dims differ (a
    symbol against a size is no contradiction)."""
    a, b = declared.type, inferred.type
    if not (a.HasField("tensor_type") and b.HasField("tensor_type")):
        return False
    if a.tensor_type.elem_type and b.tensor_type.elem_type and a.tensor_type.elem_type != b.tensor_type.elem_type:
        return True
    da, db = dims_of(declared), dims_of(inferred)
    if da is None or db is None:
        return False
    if len(da) != len(db):
        return True
    return any(isinstance(x, int) and isinstance(y, int) and x != y for x, y in zip(da, db, strict=True))


def _typed(vi: onnx.ValueInfoProto) -> str:
    elem, dims = vi.type.tensor_type.elem_type, dims_of(vi)
    shape = "?" if dims is None else ", ".join("?" if d is None else str(d) for d in dims)
    return f"{dtype_name(elem) if elem else '?'}[{shape}]"


def _pass_diff(before: onnx.ModelProto, after: onnx.ModelProto) -> Any:
    """What a pass changed (a graphdiff.ModelDiff); a diff that fails says so in the report and
    never fails the run it describes."""
    from onnxsurgery.graphdiff import diff  # only a run asked for diffs needs it

    try:
        return diff(before, after)
    except Exception as exc:  # noqa: BLE001 - a report's extra, not the run's result
        return {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"}


def _bound_cases(references: Path, model: onnx.ModelProto) -> CaseStream:
    """The reference cases, unnamed tensors bound to ``model``'s inputs and outputs by position,
    each read from disk when a pass asks for it (validation holds one case at a time)."""
    inits = {t.name for t in model.graph.initializer}
    inputs = [i.name for i in model.graph.input if i.name not in inits]
    return CaseStream(references, inputs, [o.name for o in model.graph.output])


def run(
    model: onnx.ModelProto | str | os.PathLike,
    passes: Sequence[Pass | PassSpec | str] | str,
    *,
    output: str | os.PathLike | None = None,
    references: str | os.PathLike | None = None,
    provider: str = "auto",
    check: bool = True,
    atol: float | None = None,
    rtol: float | None = None,
    external_data: bool | None = None,
    base_dir: str | os.PathLike | None = None,
    limits: Limits | Mapping[str, Any] | None = None,
    tolerances: Mapping[str, tuple[float | None, float | None]] | None = None,
    diffs: bool = False,
    histograms: bool = False,
) -> PipelineReport:
    """Run ``passes`` on ``model`` and write ``output``: the Python form of ``onnxsurgery run``.
    A ModelProto with external data needs ``base_dir``, the folder its data files are in;
    ``diffs`` records what each pass changed (``report.passes[i].diff``), ``histograms`` each
    validated output's error histogram (both what ``--report FILE.html`` shows)."""
    pipeline = Pipeline(
        passes,
        check=check,
        references=references,
        provider=provider,
        atol=atol,
        rtol=rtol,
        limits=limits,
        tolerances=tolerances,
        diffs=diffs,
        histograms=histograms,
    )
    return pipeline.run(model, output, external_data=external_data, base_dir=base_dir)
