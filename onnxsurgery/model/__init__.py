"""Models as files and graphs: what every pass and the CLI need to read, walk and write a model.

    io.py          load/save with external data (atomic, byte-identical), checker, shape inference
    walk.py        the one subgraph walk, graph paths, every name a graph uses, node/op counts
    dtypes.py      the one dtype table: parse, name, numpy <-> ONNX, lossless casts
    signature.py   declared inputs, whether feeds fit them, the NAME:DIMS parser
    equality.py    whether two models compute the same thing (up to names and order)
    summary.py     what ``onnxsurgery inspect`` shows
"""

from __future__ import annotations

from onnxsurgery.model.dtypes import (
    dtype_name,
    elem_type_of,
    is_lossless_cast,
    np_dtype,
    parse_dtype,
)
from onnxsurgery.model.equality import same_graph
from onnxsurgery.model.io import (
    ModelFile,
    as_model,
    check_model,
    infer_shapes,
    is_large,
    load_model,
    read_model_file,
    save_model,
    tensor_bytes,
)
from onnxsurgery.model.signature import (
    CaseFailure,
    InputSpec,
    check_inputs,
    model_inputs,
    parse_shape_spec,
)
from onnxsurgery.model.summary import ModelSummary, summarize
from onnxsurgery.model.walk import (
    all_names,
    count_nodes,
    default_opset,
    graphs_by_path,
    op_counts,
    subgraphs,
)

__all__ = [
    "CaseFailure",
    "InputSpec",
    "ModelFile",
    "ModelSummary",
    "all_names",
    "as_model",
    "check_inputs",
    "check_model",
    "count_nodes",
    "default_opset",
    "dtype_name",
    "elem_type_of",
    "graphs_by_path",
    "infer_shapes",
    "is_large",
    "is_lossless_cast",
    "load_model",
    "model_inputs",
    "np_dtype",
    "op_counts",
    "parse_dtype",
    "parse_shape_spec",
    "read_model_file",
    "same_graph",
    "save_model",
    "subgraphs",
    "summarize",
    "tensor_bytes",
]
