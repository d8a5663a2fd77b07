"""Fold constants with onnxsim, falling back to onnx-graphsurgeon, without pinning symbolic dims.

    options.py        the option table (OPTION_CHECKS); onnxsim settings; size, input-shape, optimizer names
    capture.py        native console output to a log; FolderFailed
    onnxsim_import.py import onnxsim without the torch import only its PPQ bridge makes
    onnxsim_child.py  onnxsim in a forked child (or in-process), by path for models near 2 GB
    held_weights.py   over 2 GB: weights no folding reads go to onnxsim as graph inputs
    graphsurgeon.py   the fallback folder; Constant nodes to initializers
    changes.py        what a fold changed: pinned dims, op counts, sizes

Rules:
- ``onnxsim.simplify`` folds every subgraph that depends only on constants (shape arithmetic on
  static shapes included) and runs onnx-optimizer's default fusions and eliminations;
  ``fuse_bn=false`` keeps BatchNormalization, ``skip=[...]`` names optimizers not to run,
  ``size_threshold=1MB`` keeps tensors larger than that unfolded (default: onnxsim's 1.5GB).
  onnxsim's MatMul+Add -> Reshape/Gemm/Reshape rewrite of rank-3 inputs runs only with
  ``batched_gemm=true``: on a symbolized model it adds Shape/Slice/Concat around every Gemm;
- input shapes are never overwritten: only ``input_shapes=[x:1x3x224x224]`` pins them.
  Intermediate ``value_info`` (inside subgraphs too) is dropped before folding (onnxsim
  re-infers shapes), so a stale static shape cannot be folded into a constant. A result in which
  a symbolic dim of a graph input or output became a number counts as an onnxsim failure;
- with ``isolate=true`` onnxsim runs in a forked child process, so a crash in native code is a
  failure of this pass (then the fallback), not the end of the program; ``isolate=auto``
  (default) forks only models over 2 GB (below, a fork costs more than onnxsim itself),
  ``isolate=false`` never. Native console output never reaches the terminal;
- when onnxsim fails (raises, crashes, pins a dim, fails its own ``check=N``), onnx-graphsurgeon
  ``fold_constants`` + ``cleanup`` folds instead (never folding random ops) and a warning carries
  onnxsim's error; ``fallback=false`` makes that failure an error. With If/Loop/Scan subgraphs it
  tries: everything, then keeping If nodes, then the main graph only, taking the first result
  that passes the checker; when none does, nothing is folded, a warning says why and the model
  comes back unchanged (folding never fails a model that runs);
- on a model over 2 GB, a weight of 1 MiB or more that only nodes also reading a runtime value
  read (``MatMul(x, W)``) reaches onnxsim as a graph input and comes back afterwards: onnxsim
  never loads, writes or reads back the bulk of the model, and in a pipeline those weights stay
  where they are in the input model, which becomes the result (the model's handle, ``model/handle.py``).
  Folding is unchanged (a weight a constant-only node reads, ``Transpose(W)``, ``Mul(W, 0.5)``,
  still goes to onnxsim); optimizer fusions that rewrite such a weight's values (BatchNorm into
  Conv, Q/K/V packed into one attention op) are not made on such models: ``hold_weights=false``
  gives onnxsim every weight (its fusions then run, at the cost of it loading, writing and
  reading back the whole model);
- every Constant node of the main graph becomes an initializer (onnxsim writes folded values as
  Constant nodes), so a model saved with external data keeps them in the data file;
- ``modified`` is false when the result computes the same graph the same way: renamed tensors or
  nodes, reordered nodes or new ``value_info`` are no change; a Constant node turned into an
  initializer is one.

    s = Shape(w) ─ Gather(0) ─ Unsqueeze ─ Concat(-1) ─┐
    x ──────────────────────────────────────────────── Reshape     =>   x ─ Reshape([16, -1])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import onnx

from onnxsurgery.errors import PassError
from onnxsurgery.model.equality import same_graph
from onnxsurgery.model.io import check_model, infer_shapes, tensor_bytes
from onnxsurgery.model.tensors import on_disk
from onnxsurgery.model.walk import graphs_by_path, subgraphs
from onnxsurgery.model.weights_on_disk import load_tensor, load_weights
from onnxsurgery.passes.fold_constants.capture import first_line
from onnxsurgery.passes.fold_constants.changes import format_bytes, op_delta, pinned_dims
from onnxsurgery.passes.fold_constants.graphsurgeon import (
    ATTEMPTS,
    constants_to_initializers,
    fold_with_graphsurgeon,
)
from onnxsurgery.passes.fold_constants.held_weights import held_read, held_view
from onnxsurgery.passes.fold_constants.onnxsim_child import (
    FolderFailed,
    fork_available,
    run_onnxsim,
    wants_isolation,
    weights_to_hold,
)
from onnxsurgery.passes.fold_constants.options import (
    OnnxsimSettings,
    onnxsim_version,
    read_options,
)
from onnxsurgery.pipeline.contract import Diagnostic, Pass, PassContext, PassResult

__all__ = ["FoldConstants"]

_MODEL_FIELDS = ("producer_name", "producer_version", "domain", "model_version", "doc_string")


class FoldConstants(Pass):
    """Fold constant subgraphs and simplify with onnxsim; symbolic dims stay symbolic.

    onnxsim folds what depends only on constants and runs onnx-optimizer's fusions; input shapes
    are never overwritten, and a result that pins a symbolic dim counts as a failure. When
    onnxsim fails, onnx-graphsurgeon folds instead, with a warning carrying onnxsim's error.
    Models over 2 GB work: weights no folding reads stay where they are.

    Options:
        fuse_bn (bool): Fuse BatchNormalization into the Conv before it.
        size_threshold (size, default: onnxsim's 1.5GB): Keep folded tensors larger than this
            (1MB, 512KB or bytes) unfolded.
        skip (list of names, default: none): onnx-optimizer passes not to run.
        check (int): Runs of onnxsim's own comparison on random inputs (0 to 1000).
        input_shapes (list of NAME:DIMS, default: none): Pin these inputs' shapes, e.g.
            [x:1x3x224x224]; nothing else pins a dim.
        fallback (bool): Fold with onnx-graphsurgeon when onnxsim fails; false makes it an error.
        isolate (true, false or auto): Run onnxsim in a forked child process, so a native crash
            is a failure of the pass; auto forks for models over 2 GB only.
        batched_gemm (bool): Let onnxsim rewrite MatMul+Add of rank-3 inputs to
            Reshape/Gemm/Reshape (adds shape nodes around every Gemm of a symbolized model).
        hold_weights (bool): Over 2 GB, keep weights no folding reads out of onnxsim; false
            gives it every weight, so its fusions run on them.

    Example:
        fold-constants(fuse_bn=false, size_threshold=1MB)
    """

    name = "fold-constants"
    #: Weights onnxsim holds back (over 2 GB) stay in their data file; it reads in the rest.
    weights_on_disk = True

    def __init__(
        self,
        *,
        fuse_bn: bool = True,
        size_threshold: int | str | None = None,
        skip: Sequence[str] | None = None,
        check: int = 0,
        input_shapes: str | Sequence[str] | Mapping[str, Sequence[int]] | None = None,
        fallback: bool = True,
        isolate: bool | str = "auto",
        batched_gemm: bool = False,
        hold_weights: bool = True,
    ) -> None:
        super().__init__(
            fuse_bn=fuse_bn,
            size_threshold=size_threshold,
            skip=skip,
            check=check,
            input_shapes=input_shapes,
            fallback=fallback,
            isolate=isolate,
            batched_gemm=batched_gemm,
            hold_weights=hold_weights,
        )
        values = read_options(self.options)
        self.settings = OnnxsimSettings(
            fuse_bn=values["fuse_bn"],
            size_threshold=values["size_threshold"],
            skip=values["skip"],
            check=values["check"],
            input_shapes=values["input_shapes"],
            batched_gemm=values["batched_gemm"],
        )
        self.fallback = values["fallback"]
        self.isolate = values["isolate"]
        self.hold_weights = values["hold_weights"]

    def run(self, model: onnx.ModelProto, ctx: PassContext) -> PassResult:
        pinned_inputs = set(self.settings.input_shapes or ())
        if pinned_inputs:
            names = {vi.name for vi in model.graph.input}
            missing = sorted(pinned_inputs - names)
            if missing:
                self.fail(
                    f"input_shapes names {', '.join(map(repr, missing))}, but the model's inputs "
                    f"are {', '.join(map(repr, sorted(names))) or '(none)'}"
                )
        diagnostics: list[Diagnostic] = []
        ctx.stage("reading the weights folding reads from the data file")
        self._read_weights_onnxsim_gets(model)
        original = model
        model = _without_subgraph_value_info(model)
        ctx.stage(f"onnxsim {onnxsim_version()}")
        # Held weights come back as placeholders: the handle gives them back (in a pipeline,
        # where they are in the input model, never copied).
        folded, failure, log, held = self._onnxsim(model, pinned_inputs, diagnostics)
        if folded is None:
            if not self.fallback:
                self.fail(f"onnxsim failed: {failure}", details=log)
            ctx.stage("onnx-graphsurgeon (onnxsim failed)")
            load_weights(model)  # the fallback folds in this process, every weight in
            folded, how = self._graphsurgeon(model, pinned_inputs)
            if folded is None:
                # Folding is an optimization: a model that runs is never refused for it.
                diagnostics.append(
                    Diagnostic.warning(
                        f"folded nothing: onnxsim failed ({failure}) and the onnx-graphsurgeon "
                        f"fallback failed too ({how}); the model is unchanged"
                    )
                )
                return PassResult(original, modified=False, diagnostics=diagnostics)
            diagnostics.append(
                Diagnostic.warning(f"onnxsim failed ({failure}); folded with onnx-graphsurgeon {how}")
            )
        ctx.stage("comparing the folded graph")
        assert ctx.handle is not None  # Pass.__call__ sets it
        before = ctx.handle.weightless() if held else original
        return self._result(original, before, folded, diagnostics, model, held)

    def _read_weights_onnxsim_gets(self, model: onnx.ModelProto) -> None:
        """Read, in place, each weight left on disk that onnxsim gets: all but those it holds
        back (``weights_to_hold``), which stay where they lie until the model is saved."""
        held = set(weights_to_hold(model, self.hold_weights))
        for tensor in model.graph.initializer:
            if on_disk(tensor) and tensor.name not in held:
                load_tensor(tensor)

    def _graphsurgeon(
        self, model: onnx.ModelProto, pinned_inputs: set[str]
    ) -> tuple[onnx.ModelProto | None, str]:
        """The fallback's first attempt (of ``ATTEMPTS``) whose result is a valid model and
        pins no dim, and how it folded; or ``(None, why the last attempt failed)``."""
        has_subgraphs = any(subgraphs(node) for node in model.graph.node)
        attempts = ATTEMPTS if has_subgraphs else ATTEMPTS[:1]
        why = ""
        for fold_subgraphs, inline_ifs in attempts:
            try:
                folded = fold_with_graphsurgeon(
                    model,
                    size_threshold=self.settings.size_threshold,
                    subgraphs=fold_subgraphs,
                    inline_ifs=inline_ifs,
                )
            except FolderFailed as exc:
                why = str(exc)
                continue
            pinned = pinned_dims(model, folded, ignore=pinned_inputs)
            if pinned:  # graphsurgeon never rewrites the graph inputs; checked all the same
                why = f"it pinned {'; '.join(pinned)}"
                continue
            unusable = _unusable(model, folded)
            if unusable:
                why = unusable
                continue
            if not has_subgraphs:
                return folded, "instead"
            if fold_subgraphs and inline_ifs:
                return folded, "instead (subgraphs included)"
            if fold_subgraphs:
                return folded, f"instead, If nodes kept ({why} when inlining them)"
            return folded, f"instead, main graph only ({why} when folding subgraphs)"
        return None, why

    # -- steps -----------------------------------------------------------------------------------
    def _onnxsim(
        self,
        model: onnx.ModelProto,
        pinned_inputs: set[str],
        diagnostics: list[Diagnostic],
    ) -> tuple[onnx.ModelProto | None, str, list[str], list[str]]:
        """``(onnxsim's result, "", its log, held weights it still has as inputs)``, or
        ``(None, why it failed, its log, [])``."""
        if not fork_available() and wants_isolation(model, self.isolate):
            diagnostics.append(Diagnostic.info("onnxsim ran in-process: no fork on this platform"))
        try:
            result = run_onnxsim(
                model,
                self.settings,
                isolate=self.isolate,
                hold_weights=self.hold_weights,
                restore=False,
            )
        except FolderFailed as exc:
            return None, str(exc), exc.log, []
        if not result.check_ok:
            why = (
                f"its own check with {self.settings.check} random input(s) found outputs that "
                "differ from the original model"
            )
            return None, why, result.log, []
        pinned = pinned_dims(model, result.model, ignore=pinned_inputs)  # held inputs: not in model
        if pinned:
            return None, f"it pinned symbolic dims: {'; '.join(pinned)}", result.log, []
        unusable = _unusable(model, result.model)
        if unusable:
            return None, unusable, result.log, []
        where = result.where
        if result.held:  # as onnxsim_child says it where it gives them back itself
            where += f", {len(held_read(result.model, result.held))} came back"
        diagnostics.append(Diagnostic.info(f"folded with onnxsim {onnxsim_version()} ({where})"))
        return result.model, "", result.log, result.held

    def _result(
        self,
        model: onnx.ModelProto,
        before: onnx.ModelProto,
        folded: onnx.ModelProto,
        diagnostics: list[Diagnostic],
        source: onnx.ModelProto,
        held: list[str],
    ) -> PassResult:
        """The pass's result from ``folded``. ``held``: weights ``folded`` still has as inputs;
        they come back as placeholders (of ``source``'s: ``model``, or this pass's copy of it)
        for the handle to fill, so the comparisons below see them as placeholders on both
        sides (``before``: ``model``, or its weightless view where weights were held)."""
        constants_to_initializers(folded)
        after = held_view(folded, source, held) if held else folded
        if same_graph(before, after, constant_storage=True):
            diagnostics.append(
                Diagnostic.info(
                    f"nothing to fold: the folded graph computes the same thing "
                    f"({len(model.graph.node)} nodes)"
                )
            )
            return PassResult(model, modified=False, diagnostics=diagnostics)
        # The folder's graph, opsets and functions; the model's own identity and metadata.
        for name in _MODEL_FIELDS:
            setattr(after, name, getattr(model, name))
        del after.metadata_props[:]
        after.metadata_props.extend(model.metadata_props)
        diagnostics.append(
            Diagnostic.info(f"nodes: {len(model.graph.node)} -> {len(folded.graph.node)}")
        )
        if not self.settings.input_shapes:
            # Inputs kept their symbols, yet shape inference proved an output size fixed: the
            # graph computes it whatever the input size (a traced size baked into the graph).
            fixed = pinned_dims(model, after, kind="output")
            if fixed:
                diagnostics.append(
                    Diagnostic.warning(
                        f"declared symbolic, but the graph computes a fixed size: "
                        f"{'; '.join(fixed)} (a traced size baked into the graph; symbolize it)"
                    )
                )
        delta = op_delta(model, after)
        if delta:
            diagnostics.append(Diagnostic.info(f"op counts: {delta}"))
        diagnostics.append(
            Diagnostic.info(
                f"constant data: {format_bytes(tensor_bytes(model))} -> "
                f"{format_bytes(tensor_bytes(after))}"
            )
        )
        return PassResult(after, modified=True, diagnostics=diagnostics)


def _without_subgraph_value_info(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with no ``value_info`` inside If/Loop/Scan bodies (a copy, only when it has some).

    Like the main graph's (dropped where onnxsim runs), shapes recorded inside subgraphs go stale
    once folding rewrites the graph: ONNX's data propagation then refuses the folded model
    ("Data for input 0 already exists", silero-vad after infer-shapes).
    """
    bodies = [g for path, g in graphs_by_path(model.graph).items() if path]
    if not any(len(g.value_info) for g in bodies):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for path, graph in graphs_by_path(copy.graph).items():
        if path:
            del graph.value_info[:]
    return copy


def _unusable(model: onnx.ModelProto, folded: onnx.ModelProto) -> str | None:
    """Why a folder's result would fail the pipeline's check after this pass (the ONNX checker,
    strict shape inference with data propagation), or None. Such a result is a failure of
    that folder: the next one is tried, and at worst nothing is folded.

    Checked for models with If/Loop/Scan bodies, where both folders were seen to write such
    results; elsewhere the pipeline's own check follows (this check costs a serialization of
    the folded model).
    """
    if not any(subgraphs(node) for node in model.graph.node):
        return None
    try:
        check_model(folded, where="its result", error=PassError)
        infer_shapes(folded, data_prop=True)
    except PassError as exc:
        return str(exc)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as exc:
        return f"its result fails shape inference: {first_line(str(exc))}"
    return None
