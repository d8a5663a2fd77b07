"""The layout of a merged output: how concat-outputs packed several outputs into one, and back.

``concat-outputs`` concatenates a model's outputs into one tensor and records a :class:`Layout`
in the model's ``metadata_props`` under :data:`METADATA_KEY` (deterministic JSON). This package
reads that record and undoes the merge without the pass (``layout.py``: the record;
``split.py``: reading it and splitting arrays)::

    session = onnxruntime.InferenceSession("model.merged.onnx")
    merged, = session.run(["merged"], feeds)
    outputs = split_outputs("model.merged.onnx", merged)     # {"logits": ..., "score": ...}
    outputs = split_outputs(session.get_modelmeta().custom_metadata_map, merged)

How a part is packed (in this order): Cast to the merged dtype (``dtype=``); Reshape to rank
``flatten+1`` keeping its first ``flatten`` axes (``flatten=N``); Unsqueeze trailing axes up to
the merged rank; Pad at the end of every axis in ``padded_axes`` with ``pad`` up to the largest
part (``pad=VALUE``); then Concat on ``axis``. Parts sit at index 0 of every padded axis, so the
padding is stripped by slicing each part to its true extent.

Recovering the parts from the merged array alone: every part's original dims are ints, symbols
(``dim_param`` strings such as ``"batch"``) or unknown (``null``). Symbols are bound from the
merged array's extents: a non-concat axis that was not padded gives its extent to every part's
dim there, and the concat axis gives the sum of the part extents (one unknown at a time, solved
as a linear equation, e.g. ``2*seq + 5 = 11``). When some dim cannot be bound that way (two
independent unknowns along the concat axis, a flattened product of two symbols, a padded dim
that appears nowhere else), concat-outputs adds a second, small output ``<name>_shapes``: int64,
every part's original shape one after another; :func:`split_outputs` then takes the model's
outputs as a mapping holding both. The metadata names that output in ``"shapes"``.

The JSON record (keys sorted; ``start``/``stop`` and ``shape`` are ints, or expressions in the
symbols when the dims are symbolic, e.g. ``"batch*5"``; an unknown dim appears as
``name.shape[1]``)::

    {"axis": 1, "dtype": "float32", "flatten": null, "keep": false, "lossy": false,
     "name": "merged", "pad": null, "padded_axes": [], "rank": 2, "shape": ["batch", 6],
     "shapes": null, "version": 1,
     "parts": [{"cast": false, "dims": ["batch", 5], "dtype": "float32", "name": "logits",
                "start": 0, "stop": 5}, ...]}
"""

from __future__ import annotations

from onnxsurgery.merged_outputs.layout import (
    LAYOUT_VERSION,
    METADATA_KEY,
    Layout,
    PartDim,
    PartLayout,
    has_unknown,
    render_dim,
    show_symbol,
    unknown_symbol,
)
from onnxsurgery.merged_outputs.split import (
    concat_references,
    find_layout,
    locate,
    merge_references,
    original_names,
    read_layout,
    split_outputs,
)

__all__ = [
    "METADATA_KEY",
    "LAYOUT_VERSION",
    "Layout",
    "PartDim",
    "PartLayout",
    "has_unknown",
    "read_layout",
    "render_dim",
    "show_symbol",
    "unknown_symbol",
    "split_outputs",
    "concat_references",
    "find_layout",
    "locate",
    "merge_references",
    "original_names",
]
