"""The fallback folder: onnx-graphsurgeon's ``fold_constants`` + ``cleanup`` + ``toposort``
(never folding random ops), and Constant nodes turned into initializers."""

from __future__ import annotations

import tempfile
from pathlib import Path

import onnx

from onnxsurgery.model.equality import constant_node_tensor
from onnxsurgery.model.io import infer_shapes
from onnxsurgery.passes.fold_constants.capture import (
    FolderFailed,
    captured_output,
    first_line,
    read_log,
)

__all__ = ["RANDOM_OPS", "constants_to_initializers", "fold_with_graphsurgeon"]

#: Ops whose output differs between runs: folding them would freeze one draw into the model.
RANDOM_OPS = frozenset(
    {
        "RandomNormal",
        "RandomNormalLike",
        "RandomUniform",
        "RandomUniformLike",
        "Multinomial",
        "Bernoulli",
    }
)


def fold_with_graphsurgeon(
    model: onnx.ModelProto, *, size_threshold: int | None = None
) -> onnx.ModelProto:
    """onnx-graphsurgeon ``fold_constants`` + ``cleanup`` + ``toposort``; random ops never fold.

    Shapes are inferred first (symbolic dims stay symbolic) so static ``Shape`` ops fold. Raises
    :class:`FolderFailed` when graphsurgeon cannot import, fold or export the graph.
    """
    import onnx_graphsurgeon as gs

    with tempfile.TemporaryDirectory(prefix="onnxsurgery-gsfold-") as tmp:
        log_path = Path(tmp) / "native.log"
        try:
            with captured_output(log_path):
                try:
                    inferred = infer_shapes(model, data_prop=True)
                except Exception:  # folding still works, only static Shape ops stay unfolded
                    inferred = model
                graph = gs.import_onnx(inferred)
                graph.toposort(recurse_subgraphs=True)
                graph.fold_constants(
                    partitioning="basic",
                    size_threshold=size_threshold,
                    should_exclude_node=lambda node: node.op in RANDOM_OPS,
                )
                graph.cleanup(recurse_subgraphs=True)
                graph.toposort(recurse_subgraphs=True)
                exported = gs.export_onnx(graph, do_type_check=False)
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
    return out


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
