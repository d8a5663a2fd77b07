"""What a fold changed: a symbolic dim of the signature turned into a number, op counts, sizes.

:func:`~onnxsurgery.model.equality.same_graph` (in the engine) decides whether anything that
matters changed at all.
"""

from __future__ import annotations

from collections.abc import Iterable

import onnx

from onnxsurgery.model.walk import op_counts

__all__ = ["format_bytes", "op_delta", "pinned_dims"]


def _dims(vi: onnx.ValueInfoProto) -> list[onnx.TensorShapeProto.Dimension]:
    t = vi.type.tensor_type
    return list(t.shape.dim) if t.HasField("shape") else []


def pinned_dims(
    before: onnx.ModelProto,
    after: onnx.ModelProto,
    *,
    kind: str = "input",
    ignore: Iterable[str] = (),
) -> list[str]:
    """Symbolic dims of the graph's inputs (``kind="output"``: outputs) in ``before`` that are
    numbers in ``after``, as ``"input 'x' axis 0 ('batch') became 4"``."""
    skip = set(ignore)
    problems = []
    pairs = {
        "input": (before.graph.input, after.graph.input),
        "output": (before.graph.output, after.graph.output),
    }
    if kind not in pairs:
        raise ValueError(f"kind must be 'input' or 'output', got {kind!r}")
    for old_list, new_list in [pairs[kind]]:
        new_by_name = {vi.name: vi for vi in new_list}
        for vi in old_list:
            if vi.name in skip or vi.name not in new_by_name:
                continue
            new_dims = _dims(new_by_name[vi.name])
            for axis, dim in enumerate(_dims(vi)):
                if not dim.dim_param or axis >= len(new_dims):
                    continue
                if new_dims[axis].HasField("dim_value"):
                    problems.append(
                        f"{kind} {vi.name!r} axis {axis} ({dim.dim_param!r}) became {new_dims[axis].dim_value}"
                    )
    return problems


def op_delta(before: onnx.ModelProto, after: onnx.ModelProto) -> str:
    """Op counts that changed, biggest change first: ``"Shape -3, Gather -3, Gemm +1"``."""
    old, new = op_counts(before.graph), op_counts(after.graph)
    changes = [(op, new[op] - old[op]) for op in old.keys() | new.keys() if new[op] != old[op]]
    changes.sort(key=lambda item: (-abs(item[1]), item[0]))
    return ", ".join(f"{op} {delta:+d}" for op, delta in changes)


def format_bytes(n: int) -> str:
    """Bytes for people: ``512 B``, ``1.5 KB``, ``12.3 MB``, ``2.10 GB``."""
    if n < 1024:
        return f"{n} B"
    for unit, scale in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if n >= scale:
            value = n / scale
            return f"{value:.2f} {unit}" if unit == "GB" else f"{value:.1f} {unit}"
    return f"{n} B"
