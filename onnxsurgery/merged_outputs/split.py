"""Reading a model's layout record and undoing the merge: :func:`read_layout`,
:func:`split_outputs`, :func:`locate` (which original output an element of the merged one is);
:func:`concat_references` merges reference outputs the way the model does,
:func:`merge_references` only where a case holds them by their original names."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx

from onnxsurgery.errors import ReferenceDataError, UsageError
from onnxsurgery.merged_outputs.layout import METADATA_KEY, Layout, PartLayout, unknown_symbol
from onnxsurgery.model.dtypes import np_dtype
from onnxsurgery.model.io import load_model

__all__ = [
    "concat_references",
    "find_layout",
    "locate",
    "merge_references",
    "original_names",
    "read_layout",
    "split_outputs",
]


def read_layout(model_or_metadata: Any) -> Layout:
    """The layout recorded by concat-outputs.

    Accepts a ModelProto, a path to an .onnx file, a metadata mapping (``{key: json}``, such as
    ``session.get_modelmeta().custom_metadata_map``), an ONNX Runtime session, the JSON text,
    the parsed JSON object, or a Layout.
    """
    source = model_or_metadata
    if isinstance(source, Layout):
        return source
    if hasattr(source, "get_modelmeta"):  # an onnxruntime.InferenceSession
        source = dict(source.get_modelmeta().custom_metadata_map)
    if isinstance(source, onnx.ModelProto):
        meta = {p.key: p.value for p in source.metadata_props}
        return _from_metadata(meta, f"model {source.graph.name!r}")
    if isinstance(source, str) and source.lstrip().startswith("{"):
        return Layout.from_json(source)
    if isinstance(source, (str, os.PathLike)):
        model = load_model(source, check=False)
        return _from_metadata({p.key: p.value for p in model.metadata_props}, str(source))
    if isinstance(source, Mapping):
        if "parts" in source:
            return Layout.from_json(source)
        return _from_metadata(source, "metadata")
    raise TypeError(
        "split_outputs/read_layout take a ModelProto, a model path, a metadata mapping, an "
        f"InferenceSession, layout JSON or a Layout, not {type(source).__name__}"
    )


def find_layout(metadata: Mapping[str, str], where: str) -> Layout | None:
    """The layout record in a model's ``metadata_props`` (as a mapping), or None when it has
    none; ``where`` names the model in the error an unreadable record raises."""
    return _from_metadata(metadata, where) if METADATA_KEY in metadata else None


def original_names(layout: Layout, outputs: list[str]) -> list[str]:
    """The outputs of the model before the merge, from the merged model's ``outputs``: the
    merged output gives back its parts in their order, the shapes output goes."""
    names: list[str] = []
    for name in outputs:
        if name == layout.name:
            names += [p for p in layout.part_names if p not in outputs and p not in names]
        elif name != layout.shapes:
            names.append(name)
    return names


def _from_metadata(meta: Mapping[str, Any], where: str) -> Layout:
    if METADATA_KEY not in meta:
        keys = ", ".join(sorted(map(str, meta))) or "none"
        raise UsageError(
            f"{where} has no {METADATA_KEY!r} metadata (its keys: {keys}); only a model merged "
            "by concat-outputs can be split"
        )
    return Layout.from_json(meta[METADATA_KEY])


# --------------------------------------------------------------------------------------------
# splitting and merging arrays


def split_outputs(
    model_or_metadata: Any, merged: np.ndarray | Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Give back the original outputs of a model merged by concat-outputs, exactly.

    ``merged`` is the merged array, or the model's outputs by name (needed when the layout has a
    shapes output, see the module docstring). Each output comes back with its original dtype and
    shape, bit for bit (when the merge cast it, exact as long as the cast was lossless; the
    layout's ``lossy`` says otherwise), as a new array that does not share memory with ``merged``.
    A name merged twice appears once.
    """
    layout = read_layout(model_or_metadata)
    shapes = None
    if isinstance(merged, Mapping):
        if layout.name not in merged:
            raise UsageError(
                f"the outputs given hold no {layout.name!r} (they hold {', '.join(merged) or 'nothing'})"
            )
        if layout.shapes is not None:
            shapes = merged.get(layout.shapes)
        merged = merged[layout.name]
    array = np.asarray(merged)
    if array.ndim != layout.rank:
        raise UsageError(
            f"{layout.name!r} should have rank {layout.rank} (shape {layout.merged_dims()}), "
            f"got an array of shape {array.shape}"
        )
    if array.dtype != layout.np_dtype():
        raise UsageError(
            f"{layout.name!r} should be {layout.dtype}, got an array of dtype {array.dtype}"
        )
    out: dict[str, np.ndarray] = {}
    for part, shape, index in _part_slices(layout, layout.part_shapes(array.shape, shapes)):
        if part.name not in out:
            block = array[index].reshape(shape)
            out[part.name] = block.astype(np_dtype(part.dtype), copy=True)
    return out


def _part_slices(
    layout: Layout, part_shapes: list[tuple[int, ...]]
) -> list[tuple[PartLayout, tuple[int, ...], tuple[slice, ...]]]:
    """Each part, its original shape, and the slices of the merged array that hold it."""
    bindings = _bindings(layout, part_shapes)
    found = []
    for part, shape, (start, _) in zip(layout.parts, part_shapes, layout.bounds(), strict=True):
        aligned = layout.aligned_shape(shape)
        index: list[slice] = [slice(None)] * layout.rank
        begin = start.evaluate(bindings)
        index[layout.axis] = slice(begin, begin + aligned[layout.axis])
        for j in layout.padded_axes:
            index[j] = slice(0, aligned[j])
        found.append((part, shape, tuple(index)))
    return found


def locate(layout: Layout | Any, merged_shape: tuple[int, ...], index: tuple[int, ...]) -> str | None:
    """Which original output element ``index`` of a merged array of ``merged_shape`` is:
    ``"'a' at [3, 1, 1]"``, or ``"padding"``; None when the merged shape alone cannot tell (the
    layout needs its shapes output) or ``index`` is outside the array."""
    layout = read_layout(layout)
    try:
        part_shapes = layout.part_shapes(merged_shape)
    except UsageError:
        return None
    if len(index) != layout.rank or len(merged_shape) != layout.rank:
        return None
    for part, shape, slices in _part_slices(layout, part_shapes):
        begin = slices[layout.axis].start
        if not begin <= index[layout.axis] < begin + layout.aligned_shape(shape)[layout.axis]:
            continue
        local = [i - (s.start or 0) for i, s in zip(index, slices, strict=True)]
        aligned = layout.aligned_shape(shape)
        if any(not 0 <= i < n for i, n in zip(local, aligned, strict=True)):
            return "padding"
        flat = int(np.ravel_multi_index(local, aligned)) if aligned else 0
        where = [int(i) for i in np.unravel_index(flat, shape)] if shape else []
        return f"{part.name!r} at {where}"
    return None


def _bindings(layout: Layout, shapes: list[tuple[int, ...]]) -> dict[str, int]:
    values: dict[str, int] = {}
    for part, shape in zip(layout.parts, shapes, strict=True):
        for i, d in enumerate(part.dims):
            if d is None:
                values[unknown_symbol(part.name, i)] = shape[i]
            elif isinstance(d, str):
                values[d] = shape[i]
    return values


def merge_references(layout: Layout | Any, outputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One case's outputs as the merged model gives them: keyed by the original names, they are
    merged by :func:`concat_references`; a case holding the merged output already (recorded from
    the merged model) comes back as it is. How standalone validation compares a merged model
    with the references of the model before the merge."""
    layout = read_layout(layout)
    if layout.name in outputs:
        return dict(outputs)
    return concat_references(layout, outputs)


def concat_references(
    layout: Layout | Any, outputs: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Map one case's outputs (by original name) onto the merged model's outputs, exactly as
    the graph does: Cast, flatten, unsqueeze, pad, concatenate. This is concat-outputs'
    ``output_map``; outputs it did not merge pass through, merged ones stay only with ``keep``.
    """
    layout = read_layout(layout)
    missing = [n for n in layout.part_names if n not in outputs]
    if missing:
        raise ReferenceDataError(
            f"concat-outputs merged {', '.join(map(repr, missing))}, but the reference outputs "
            f"hold only {', '.join(map(repr, outputs)) or 'nothing'}"
        )
    target = layout.np_dtype()
    blocks = []
    for part in layout.parts:
        array = np.asarray(outputs[part.name])
        if array.ndim != part.rank:
            raise ReferenceDataError(
                f"reference output {part.name!r} has shape {array.shape}; the model's is "
                f"{list(part.dims)} (rank {part.rank})"
            )
        if array.dtype != target:
            array = array.astype(target)
        blocks.append(array.reshape(layout.aligned_shape(array.shape)))
    if layout.padded_axes:
        top = [max(b.shape[j] for b in blocks) for j in range(layout.rank)]
        blocks = [
            np.pad(
                b,
                [
                    (0, top[j] - b.shape[j] if j in layout.padded_axes else 0)
                    for j in range(layout.rank)
                ],
                constant_values=np.asarray(layout.pad).astype(target),
            )
            for b in blocks
        ]
    try:
        merged = np.concatenate(blocks, axis=layout.axis)
    except ValueError as exc:
        shapes = ", ".join(f"{p.name} {b.shape}" for p, b in zip(layout.parts, blocks, strict=True))
        raise ReferenceDataError(
            f"reference outputs do not concatenate on axis {layout.axis} ({shapes}): {exc}"
        ) from None
    new: dict[str, np.ndarray] = {layout.name: merged}
    if layout.shapes is not None:
        dims = [d for p in layout.parts for d in np.shape(outputs[p.name])]
        new[layout.shapes] = np.asarray(dims, dtype=np.int64)
    result: dict[str, np.ndarray] = {}
    merged_in = set(layout.part_names)
    for key, value in outputs.items():
        if key in merged_in and not layout.keep:
            result.update(new)
            new = {}
            continue
        result[key] = value
    result.update(new)
    return result
