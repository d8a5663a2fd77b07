"""The fallback folder: onnx-graphsurgeon's ``fold_constants`` + ``cleanup`` + ``toposort``
(never folding random ops), and Constant nodes turned into initializers."""

from __future__ import annotations

import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import onnx
import onnx_graphsurgeon as gs

from onnxsurgery.model.equality import constant_node_tensor
from onnxsurgery.model.io import check_model, infer_shapes, sync_initializer_inputs
from onnxsurgery.passes.fold_constants.capture import (
    FolderFailed,
    captured_output,
    first_line,
    read_log,
)
from onnxsurgery.shapes.rules import op_traits
from onnxsurgery.validation.runtime import ort_limits

__all__ = ["ATTEMPTS", "constants_to_initializers", "fold_with_graphsurgeon"]

T = TypeVar("T")

#: Attempts of the fallback, most folding first: (fold subgraphs, inline If of constant condition).
#: onnx-graphsurgeon's If inlining can leave a nested If's outputs unconnected (silero-vad), and
#: folding inside subgraphs can fail where the main graph folds; each attempt's model must pass
#: the ONNX checker before it is taken.
ATTEMPTS = ((True, True), (True, False), (False, False))

#: Recursion limit and thread stack for onnx-graphsurgeon, whose toposort recurses once per node
#: of the longest unsorted chain (Python's default limit of 1000 is hit by deep graphs).
_RECURSION_LIMIT = 1_000_000
_STACK_BYTES = 256 * 1024 * 1024


def fold_with_graphsurgeon(
    model: onnx.ModelProto,
    *,
    size_threshold: int | None = None,
    subgraphs: bool = True,
    inline_ifs: bool = True,
) -> onnx.ModelProto:
    """onnx-graphsurgeon ``fold_constants`` + ``cleanup`` + ``toposort``; random ops never fold.

    Shapes are inferred first (symbolic dims stay symbolic) so static ``Shape`` ops fold.
    ``subgraphs=False`` folds the main graph only; ``inline_ifs=False`` keeps an If whose
    condition folds to a constant. Every graph is evaluated at an IR version ONNX Runtime loads
    (graphsurgeon would stamp its parts with onnx's newest), in one ORT session per graph (its
    ``basic`` partitioning recurses without end when a part fails). Raises :class:`FolderFailed`
    when graphsurgeon cannot import, fold or export the graph, or its result fails the checker.
    """
    with tempfile.TemporaryDirectory(prefix="onnxsurgery-gsfold-") as tmp:
        log_path = Path(tmp) / "native.log"
        try:
            with captured_output(log_path):
                exported = _deep_stack(
                    lambda: _fold(model, size_threshold, subgraphs, inline_ifs)
                )
        except Exception as exc:
            raise FolderFailed(
                f"{type(exc).__name__}: {first_line(str(exc)) or type(exc).__name__}",
                log=read_log(log_path),
            ) from exc
    out = onnx.ModelProto()
    out.CopyFrom(model)
    out.graph.CopyFrom(exported.graph)
    # value_info graphsurgeon wrote back came from our inference; drop it like onnxsim's
    # callers would re-infer anyway, so no intermediate shape goes stale.
    del out.graph.value_info[:]
    sync_initializer_inputs(out)
    check_model(out, where="its result", error=FolderFailed)
    return out


def _fold(
    model: onnx.ModelProto, size_threshold: int | None, subgraphs: bool, inline_ifs: bool
) -> onnx.ModelProto:
    try:
        inferred = infer_shapes(model, data_prop=True)
    except Exception:  # folding still works, only static Shape ops stay unfolded
        inferred = model
    graph = gs.import_onnx(inferred)
    ir_version = min(model.ir_version, ort_limits().ir_version)
    for g in (graph, *graph.subgraphs(recursive=True)):
        g.ir_version = ir_version
    graph.toposort(recurse_subgraphs=True)
    graph.fold_constants(
        partitioning=None,
        error_ok=True,
        recurse_subgraphs=subgraphs,
        flatten_subgraphs=inline_ifs,
        size_threshold=size_threshold,
        should_exclude_node=lambda node: op_traits(node.domain, node.op).random,
    )
    graph.cleanup(recurse_subgraphs=True)
    graph.toposort(recurse_subgraphs=True)
    return gs.export_onnx(graph, do_type_check=False)


def _deep_stack(fn: Callable[[], T]) -> T:
    """``fn()`` in a thread with a large stack and a high recursion limit."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        old = sys.getrecursionlimit()
        sys.setrecursionlimit(max(old, _RECURSION_LIMIT))
        try:
            outcome["value"] = fn()
        except BaseException as exc:  # handed to the calling thread as it is
            outcome["error"] = exc
        finally:
            sys.setrecursionlimit(old)

    old_size = threading.stack_size(_STACK_BYTES)
    try:
        worker = threading.Thread(target=target, name="onnxsurgery-graphsurgeon")
        try:
            worker.start()
        except RuntimeError:  # no room for the stack (a tight ulimit -v): run it here
            target()
        else:
            worker.join()
    finally:
        threading.stack_size(old_size)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def constants_to_initializers(model: onnx.ModelProto) -> int:
    """Turn the main graph's ``Constant`` nodes into initializers, in place; return how many.

    onnxsim writes folded values as Constant nodes. As initializers they go to the external data
    file when the model is saved with one (Constant attributes stay inline in the ``.onnx``
    file, which a multi-GB folded weight would push past 2 GB). A Constant whose output is a
    graph output stays a node.
    """
    outputs = {vi.name for vi in model.graph.output}
    existing = {t.name for t in model.graph.initializer}
    keep, moved = [], 0
    for node in model.graph.node:
        tensor = constant_node_tensor(node)
        name = node.output[0] if len(node.output) == 1 else ""
        if tensor is None or not name or name in outputs or name in existing:
            keep.append(node)
            continue
        init = model.graph.initializer.add()
        init.CopyFrom(tensor)
        init.name = name
        moved += 1
    if moved:
        del model.graph.node[:]
        model.graph.node.extend(keep)
    return moved


# ---------------------------------------------------------------------------------------------
