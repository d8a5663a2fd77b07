"""Models as files and graphs: what every pass and the CLI need to read, walk and write a model.

    handle.py      the model a run holds and where its weights lie (weightless views, adopt)
    io.py          load/save with external data (atomic, byte-identical), checker, shape inference
    file_checks.py every way a model file can be wrong that onnx's checker lets through
    tensors.py     what tensors weigh (from dims, never data), is_large, the weight placeholders,
                   which weights are left on disk (on_disk)
    weights_on_disk.py  weights left in their data file (or in the .onnx): read, load, copy
    wire.py        protobuf's wire format read directly: where a field's bytes lie
    walk.py        the one subgraph walk, graph paths, every name a graph uses, node/op counts
    dtypes.py      the one dtype table: parse, name, numpy <-> ONNX, lossless casts
    signature.py   declared inputs, whether feeds fit them, the NAME:DIMS parser
    equality.py    whether two models compute the same thing (up to names and order)
    summary.py     what ``onnxsurgery inspect`` shows
    bounds.py      symbol bounds a model records in metadata_props (``seq<=8``)
"""

from __future__ import annotations

from onnxsurgery.lazy import lazy_exports

# Each name imports its module when first used (see onnxsurgery/lazy.py).
__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "onnxsurgery.model.bounds": (
            "BOUND_KEY",
            "bounds_text",
            "over_bound",
            "read_bounds",
            "record_bounds",
        ),
        "onnxsurgery.model.dtypes": (
            "dtype_name",
            "elem_type_of",
            "is_lossless_cast",
            "np_dtype",
            "parse_dtype",
        ),
        "onnxsurgery.model.equality": ("same_graph",),
        "onnxsurgery.model.handle": ("ModelHandle", "adopt_in_place"),
        "onnxsurgery.model.io": (
            "ModelFile",
            "as_model",
            "check_model",
            "infer_shapes",
            "load_model",
            "load_weights",
            "read_model_file",
            "save_model",
        ),
        "onnxsurgery.model.signature": (
            "CaseFailure",
            "InputSpec",
            "check_inputs",
            "model_inputs",
            "parse_shape_spec",
        ),
        "onnxsurgery.model.summary": ("ModelSummary", "summarize"),
        "onnxsurgery.model.tensors": ("is_large", "on_disk", "tensor_bytes"),
        "onnxsurgery.model.weights_on_disk": ("tensor_array",),
        "onnxsurgery.model.walk": (
            "all_names",
            "count_nodes",
            "default_opset",
            "graphs_by_path",
            "op_counts",
            "subgraphs",
        ),
    },
    modules=(
        "bounds",
        "dtypes",
        "equality",
        "file_checks",
        "handle",
        "io",
        "signature",
        "summary",
        "tensors",
        "walk",
        "weights_on_disk",
        "wire",
    ),
)
