"""What ``onnxsurgery inspect`` shows: opsets, producer, signature, op counts, weights."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import onnx

from onnxsurgery.model.bounds import bounds_text, read_bounds
from onnxsurgery.model.dtypes import dtype_name
from onnxsurgery.model.io import read_model_file, tensor_bytes
from onnxsurgery.model.signature import dims_of
from onnxsurgery.model.walk import op_counts

if TYPE_CHECKING:  # rich is imported where a summary is rendered
    from rich.console import Group

__all__ = ["TensorSummary", "ModelSummary", "summarize"]


def _type_name(vi: onnx.ValueInfoProto) -> str:
    if vi.type.HasField("tensor_type"):
        elem = vi.type.tensor_type.elem_type
        return dtype_name(elem) if elem else "?"
    return vi.type.WhichOneof("value") or "?"


def _fmt_dims(dims: list[int | str | None] | None) -> str:
    if dims is None:
        return "?"
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


@dataclass
class TensorSummary:
    name: str
    dtype: str
    dims: list[int | str | None] | None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "dims": self.dims}


@dataclass
class ModelSummary:
    path: str | None
    ir_version: int
    opsets: dict[str, int]
    producer: str
    inputs: list[TensorSummary]
    outputs: list[TensorSummary]
    nodes: int
    op_counts: dict[str, int]
    initializers: int
    initializer_bytes: int
    external_data: bool
    metadata: dict[str, str] = field(default_factory=dict)
    #: symbol bounds the model records (symbolize's ``seq<=traced``): larger sizes fail
    bounds: dict[str, int] = field(default_factory=dict)
    extra: list[Any] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "path": self.path,
            "ir_version": self.ir_version,
            "opsets": self.opsets,
            "producer": self.producer,
            "inputs": [t.to_dict() for t in self.inputs],
            "outputs": [t.to_dict() for t in self.outputs],
            "nodes": self.nodes,
            "op_counts": self.op_counts,
            "initializers": self.initializers,
            "initializer_bytes": self.initializer_bytes,
            "external_data": self.external_data,
            "metadata": self.metadata,
            "bounds": self.bounds,
        }
        for item in self.extra:
            if hasattr(item, "to_dict"):
                out.setdefault("analysis", []).append(item.to_dict())
        return out

    def __rich__(self) -> Group:
        return self.view()

    def view(self, verbose: bool = False) -> Group:
        """The terminal form; ``verbose`` is handed to the analyses in ``extra`` that take it
        (symbolize's preview). Names, dims and metadata wrap, never cut."""
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        head = Table.grid(padding=(0, 2))
        head.add_column(no_wrap=True)
        head.add_column(overflow="fold")
        # every cell is Text: paths, names and metadata are user text, never markup
        head.add_row("model", Text(str(self.path or "(in memory)")))
        head.add_row("producer", Text(self.producer or "?"))
        head.add_row("ir / opsets", Text(f"ir {self.ir_version}; " + ", ".join(f"{d or 'ai.onnx'} {v}" for d, v in self.opsets.items())))
        head.add_row("nodes", str(self.nodes))
        head.add_row(
            "weights",
            f"{self.initializers} initializers, {self.initializer_bytes:,} bytes"
            + (" (external data)" if self.external_data else ""),
        )
        if self.bounds:
            head.add_row("bounds", Text(f"{bounds_text(self.bounds)} (a larger size fails)"))
        io = Table(title="signature", title_justify="left")
        io.add_column("")
        io.add_column("name", style="bold", overflow="fold")
        io.add_column("dtype")
        io.add_column("dims", overflow="fold")
        for kind, items in (("input", self.inputs), ("output", self.outputs)):
            for t in items:
                io.add_row(kind, Text(t.name), Text(t.dtype), Text(_fmt_dims(t.dims)))
        ops = Table(title="ops", title_justify="left")
        ops.add_column("op", overflow="fold")
        ops.add_column("count", justify="right")
        for op, n in sorted(self.op_counts.items(), key=lambda kv: (-kv[1], kv[0])):
            ops.add_row(Text(op), str(n))
        parts: list[Any] = [head, io, ops]
        if self.metadata:
            meta = Table(title="metadata", title_justify="left")
            meta.add_column("key", overflow="fold")
            meta.add_column("value", overflow="fold")
            for k, v in self.metadata.items():
                meta.add_row(Text(k), Text(v))
            parts.append(meta)
        parts.extend(x.view(verbose) if hasattr(x, "view") else x for x in self.extra)
        if not self.extra:
            parts.append(Text(""))
        return Group(*parts)


def summarize(model: onnx.ModelProto | str | os.PathLike) -> ModelSummary:
    """Read a model (path or ModelProto) and describe it."""
    path: Path | None = None
    external = False
    if not isinstance(model, onnx.ModelProto):
        loaded = read_model_file(model)
        path, model, external = loaded.path, loaded.model, loaded.external_data
    graph = model.graph
    init_names = {i.name for i in graph.initializer}
    return ModelSummary(
        path=str(path) if path else None,
        ir_version=model.ir_version,
        opsets={o.domain: o.version for o in model.opset_import},
        producer=" ".join(x for x in (model.producer_name, model.producer_version) if x),
        inputs=[
            TensorSummary(i.name, _type_name(i), dims_of(i))
            for i in graph.input
            if i.name not in init_names
        ],
        outputs=[TensorSummary(o.name, _type_name(o), dims_of(o)) for o in graph.output],
        nodes=len(graph.node),
        op_counts=dict(sorted(op_counts(graph).items())),
        initializers=len(graph.initializer),
        initializer_bytes=tensor_bytes(model),
        external_data=external,
        metadata={p.key: p.value for p in model.metadata_props},
        bounds=read_bounds(model),
    )
