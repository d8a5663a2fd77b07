"""The :class:`Layout` record of a merged output: its parts, their dims and extents, and its JSON.

See :mod:`onnxsurgery.merged_outputs` for how parts are packed and what the JSON holds.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from onnxsurgery.errors import UsageError
from onnxsurgery.model.dtypes import np_dtype, parse_dtype
from onnxsurgery.shapes.dims import Dim, const_ints, dim_product, dim_sum

__all__ = [
    "METADATA_KEY",
    "LAYOUT_VERSION",
    "Layout",
    "PartDim",
    "PartLayout",
    "has_unknown",
    "render_dim",
    "show_symbol",
]

#: ``metadata_props`` key holding the layout JSON.
METADATA_KEY = "onnxsurgery.concat-outputs"
#: Version of the JSON record; bumped when its meaning changes.
LAYOUT_VERSION = 1

#: One dim of an original output as recorded: a size, a symbol (``dim_param``), or unknown.
PartDim = int | str | None

# --------------------------------------------------------------------------------------------
# dims as polynomials (onnxsurgery.shapes.dims): the extents along the concat axis are sums of
# products of dims; the JSON writes them in its own compact form (render_dim).

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def unknown_symbol(part: str, axis: int) -> str:
    """The internal symbol of an unknown dim: one per tensor and axis, never a dim_param."""
    return f"?{axis}:{part}"


def show_symbol(sym: str) -> str:
    """A symbol as the layout writes it: ``batch``; ``name.shape[1]`` for an unknown dim; a
    dim_param that is no identifier in parentheses (``(s0 + 1)``)."""
    if sym.startswith("?"):
        axis, _, part = sym[1:].partition(":")
        return f"{part}.shape[{axis}]"
    return sym if _IDENT.fullmatch(sym) else f"({sym})"


def render_dim(dim: Dim) -> int | str:
    """A dim as the layout JSON writes it: an int when constant, else ``batch*5+2`` (terms in
    the sorted order of their atoms, coefficient last, the constant term last, no spaces)."""
    if dim.value is not None:
        return dim.value
    terms = dim.terms
    pieces = [
        "*".join([*map(show_symbol, mono), *([str(coef)] if coef != 1 else [])])
        for mono, coef in sorted(terms.items())
        if mono
    ]
    if () in terms:
        pieces.append(str(terms[()]))
    return "+".join(pieces)


def has_unknown(dim: Dim) -> bool:
    """Whether ``dim`` holds an unknown dim (:func:`unknown_symbol`)."""
    return any(s.startswith("?") for s in dim.atoms())


# --------------------------------------------------------------------------------------------
# the record


def _check_dim(value: Any, where: str) -> PartDim:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise UsageError(f"{where}: a dim must be a non-negative int, a symbol or null, got {value!r}")


@dataclass(frozen=True)
class PartLayout:
    """One merged output: its name, original dtype and dims, and where it sits on the axis."""

    name: str
    dtype: str
    dims: tuple[PartDim, ...]
    start: int | str = 0
    stop: int | str = 0
    cast: bool = False

    @property
    def rank(self) -> int:
        return len(self.dims)

    def dim_polys(self) -> list[Dim]:
        """The original dims as polynomials (an unknown dim is a symbol of its own)."""
        return [
            Dim.const(d)
            if isinstance(d, int)
            else Dim.sym(unknown_symbol(self.name, i) if d is None else d)
            for i, d in enumerate(self.dims)
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "dtype": self.dtype,
            "dims": list(self.dims),
            "start": self.start,
            "stop": self.stop,
            "cast": self.cast,
        }


@dataclass(frozen=True)
class Layout:
    """How concat-outputs packed its parts into the merged output (see the module docstring).

    ``axis`` is non-negative, counted in the merged ``rank``; ``flatten`` is the ``flatten=N``
    option or None; ``padded_axes`` are the axes padded with ``pad`` up to the largest part;
    ``shapes`` names the extra int64 output holding the parts' original shapes, when the model
    has one; ``lossy`` says some Cast loses information, so splitting is exact only for values
    the merged dtype holds.
    """

    name: str
    axis: int
    rank: int
    dtype: str
    parts: tuple[PartLayout, ...]
    keep: bool = False
    flatten: int | None = None
    pad: float | int | None = None
    padded_axes: tuple[int, ...] = ()
    shapes: str | None = None
    lossy: bool = False
    version: int = LAYOUT_VERSION
    _aligned: list[list[Dim]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_aligned", [self._align(p) for p in self.parts])

    # -- derived facts ---------------------------------------------------------------------------
    @property
    def part_names(self) -> list[str]:
        """Distinct part names, in order (a name listed twice is one output)."""
        return list(dict.fromkeys(p.name for p in self.parts))

    def _align(self, part: PartLayout) -> list[Dim]:
        dims = part.dim_polys()
        if self.flatten is not None:
            dims = dims[: self.flatten] + [dim_product(dims[self.flatten :])]
        return dims + [Dim.const(1)] * (self.rank - len(dims))

    def aligned(self, index: int) -> list[Dim]:
        """Part ``index``'s dims once flattened and unsqueezed to the merged rank."""
        return self._aligned[index]

    def extents(self) -> list[Dim]:
        """Each part's extent along the concat axis."""
        return [dims[self.axis] for dims in self._aligned]

    def bounds(self) -> list[tuple[Dim, Dim]]:
        """Each part's ``(start, stop)`` along the concat axis."""
        out, at = [], Dim()
        for extent in self.extents():
            out.append((at, at + extent))
            at = at + extent
        return out

    def merged_dims(self) -> list[int | str | None]:
        """The merged output's dims for humans: ints, expressions, ``max(...)`` when padded."""
        dims: list[int | str | None] = []
        for j in range(self.rank):
            column = [a[j] for a in self._aligned]
            if j == self.axis:
                dims.append(render_dim(dim_sum(column)))
            elif j in self.padded_axes:
                distinct = list(dict.fromkeys(column))
                sizes = const_ints(distinct)
                if sizes is not None:
                    dims.append(max(sizes))
                else:
                    dims.append("max(" + ",".join(str(render_dim(d)) for d in distinct) + ")")
            else:
                known = [d for d in column if not has_unknown(d)]
                dims.append(render_dim((known or column)[0]))
        return dims

    def np_dtype(self) -> np.dtype:
        return np_dtype(self.dtype)

    # -- JSON ------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "name": self.name,
            "axis": self.axis,
            "rank": self.rank,
            "dtype": self.dtype,
            "shape": self.merged_dims(),
            "keep": self.keep,
            "flatten": self.flatten,
            "pad": _pad_to_json(self.pad),
            "padded_axes": list(self.padded_axes),
            "shapes": self.shapes,
            "lossy": self.lossy,
            "parts": [p.to_dict() for p in self.parts],
        }

    def to_json(self) -> str:
        """Deterministic JSON (sorted keys, no spaces): the same layout gives the same bytes."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), allow_nan=False)

    @classmethod
    def from_json(cls, text: str | Mapping[str, Any]) -> Layout:
        """Read the record back; a malformed one raises UsageError saying what is wrong."""
        where = f"metadata {METADATA_KEY!r}"
        if isinstance(text, Mapping):
            data: Any = dict(text)
        else:
            try:
                data = json.loads(text)
            except (TypeError, ValueError) as exc:
                raise UsageError(f"{where} is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise UsageError(f"{where} must be a JSON object, got {type(data).__name__}")
        version = data.get("version")
        if version != LAYOUT_VERSION:
            raise UsageError(
                f"{where} has layout version {version!r}; this onnxsurgery reads version "
                f"{LAYOUT_VERSION}"
            )
        try:
            raw_parts = data["parts"]
            if not isinstance(raw_parts, list) or not raw_parts:
                raise UsageError(f"{where}: 'parts' must be a non-empty list")
            parts = []
            for i, raw in enumerate(raw_parts):
                dims = tuple(_check_dim(d, f"{where} part {i}") for d in raw["dims"])
                parts.append(
                    PartLayout(
                        name=str(raw["name"]),
                        dtype=str(raw["dtype"]),
                        dims=dims,
                        start=raw["start"],
                        stop=raw["stop"],
                        cast=bool(raw.get("cast", False)),
                    )
                )
            layout = cls(
                name=str(data["name"]),
                axis=int(data["axis"]),
                rank=int(data["rank"]),
                dtype=str(data["dtype"]),
                parts=tuple(parts),
                keep=bool(data.get("keep", False)),
                flatten=None if data.get("flatten") is None else int(data["flatten"]),
                pad=_pad_from_json(data.get("pad")),
                padded_axes=tuple(int(a) for a in data.get("padded_axes", [])),
                shapes=data.get("shapes"),
                lossy=bool(data.get("lossy", False)),
                version=version,
            )
        except KeyError as exc:
            raise UsageError(f"{where} lacks the field {exc.args[0]!r}") from None
        except (TypeError, ValueError) as exc:
            raise UsageError(f"{where} has a field of the wrong type: {exc}") from None
        layout.check()
        return layout

    def check(self) -> None:
        """Raise UsageError when the record contradicts itself (a corrupted or hand-made one)."""
        where = f"metadata {METADATA_KEY!r}"
        if not 0 <= self.axis < self.rank:
            raise UsageError(f"{where}: axis {self.axis} is outside rank {self.rank}")
        try:
            parse_dtype(self.dtype)
            for p in self.parts:
                parse_dtype(p.dtype)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"{where}: {exc}") from None
        if self.flatten is not None and self.rank != self.flatten + 1:
            raise UsageError(f"{where}: flatten {self.flatten} gives rank {self.flatten + 1}, not {self.rank}")
        for p in self.parts:
            if self.flatten is not None and p.rank < self.flatten:
                raise UsageError(f"{where}: part {p.name!r} has rank {p.rank} < flatten {self.flatten}")
            if self.flatten is None and p.rank > self.rank:
                raise UsageError(f"{where}: part {p.name!r} has rank {p.rank} > rank {self.rank}")
        for (start, stop), p in zip(self.bounds(), self.parts, strict=True):
            if (render_dim(start), render_dim(stop)) != (p.start, p.stop):
                raise UsageError(
                    f"{where}: part {p.name!r} claims {p.start}..{p.stop} along axis "
                    f"{self.axis}, but its dims put it at {render_dim(start)}..{render_dim(stop)}"
                )

    # -- resolving dims ----------------------------------------------------------------------
    def equations(self, merged_shape: Sequence[int] | None) -> list[tuple[Dim, int | None]]:
        """What the merged array's extents say: per unpadded non-concat axis, every part's dim
        equals it; along the concat axis, the extents add up to it."""
        eqs: list[tuple[Dim, int | None]] = []
        for j in range(self.rank):
            target = None if merged_shape is None else int(merged_shape[j])
            if j == self.axis:
                eqs.append((dim_sum(self.extents()), target))
            elif j not in self.padded_axes:
                eqs.extend((a[j], target) for a in self._aligned)
        return eqs

    def symbols(self) -> set[str]:
        return {s for p in self.parts for d in p.dim_polys() for s in d.atoms()}

    def unresolved(self) -> set[str]:
        """Symbols the merged array's shape alone cannot bind (then a shapes output is needed)."""
        _, known = _solve(self.equations(None))
        return self.symbols() - known

    def part_shapes(
        self, merged_shape: Sequence[int], shapes: np.ndarray | None = None
    ) -> list[tuple[int, ...]]:
        """Every part's original shape, from the merged array's shape (and the shapes output)."""
        if shapes is not None:
            flat = [int(v) for v in np.asarray(shapes).reshape(-1)]
            need = sum(p.rank for p in self.parts)
            if len(flat) != need:
                raise UsageError(
                    f"{self.shapes!r} holds {len(flat)} values; the layout's parts have {need} dims"
                )
            out, at = [], 0
            for p in self.parts:
                out.append(tuple(flat[at : at + p.rank]))
                at += p.rank
        else:
            values, _ = _solve(self.equations(merged_shape))
            missing = sorted(self.symbols() - set(values))
            if missing:
                names = ", ".join(show_symbol(s) for s in missing)
                hint = (
                    f"; pass the model's outputs as a mapping that includes {self.shapes!r}"
                    if self.shapes
                    else ""
                )
                raise UsageError(
                    f"cannot recover {names} from a merged array of shape {tuple(merged_shape)}"
                    f"{hint}"
                )
            out = [tuple(d.evaluate(values) for d in p.dim_polys()) for p in self.parts]
        self._check_fits(merged_shape, out)
        return out

    def aligned_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        """A concrete original shape once flattened and unsqueezed to the merged rank."""
        dims = [int(d) for d in shape]
        if self.flatten is not None:
            dims = dims[: self.flatten] + [math.prod(dims[self.flatten :])]
        return tuple(dims + [1] * (self.rank - len(dims)))

    def _check_fits(self, merged_shape: Sequence[int], shapes: list[tuple[int, ...]]) -> None:
        merged_shape = tuple(int(d) for d in merged_shape)
        aligned = [self.aligned_shape(s) for s in shapes]
        total = sum(a[self.axis] for a in aligned)
        problems = []
        for p, orig, a in zip(self.parts, shapes, aligned, strict=True):
            if len(orig) != p.rank or any(
                isinstance(d, int) and d != v for d, v in zip(p.dims, orig, strict=True)
            ):
                problems.append(f"part {p.name!r} would have shape {orig}, its dims are {list(p.dims)}")
                continue
            for j in range(self.rank):
                if j == self.axis:
                    continue
                if j in self.padded_axes and a[j] > merged_shape[j]:
                    problems.append(f"part {p.name!r} extends {a[j]} > {merged_shape[j]} on axis {j}")
                elif j not in self.padded_axes and a[j] != merged_shape[j]:
                    problems.append(f"part {p.name!r} is {a[j]} on axis {j}, merged is {merged_shape[j]}")
        if total != merged_shape[self.axis]:
            problems.append(f"the parts add up to {total} on axis {self.axis}")
        if problems:
            raise UsageError(
                f"a merged array of shape {merged_shape} does not fit the layout of {self.name!r}: "
                + "; ".join(problems)
            )


def _solve(equations: list[tuple[Dim, int | None]]) -> tuple[dict[str, int], set[str]]:
    """Bind symbols one at a time from equations with a single unknown, to the first power.

    With targets (ints) it returns the values; without (``None``) only which symbols would be
    known: the binding is decided by structure alone, so the pass can tell in advance whether
    the merged shape will suffice.
    """
    values: dict[str, int] = {}
    known: set[str] = set()
    progress = True
    while progress:
        progress = False
        for dim, target in equations:
            unknown = dim.atoms() - known
            if len(unknown) != 1:
                continue
            (sym,) = unknown
            if target is None:
                if dim.linear_in(sym) is not None:
                    known.add(sym)
                    progress = True
                continue
            try:
                value = dim.solve_for(sym, target, values, nonnegative=True)
            except ValueError:
                raise UsageError(
                    f"the merged extent {target} does not fit {render_dim(dim)} for any size of "
                    f"{show_symbol(sym)}"
                ) from None
            if value is None:
                continue  # squared, or zero-size elsewhere: this equation says nothing about sym
            values[sym] = value
            known.add(sym)
            progress = True
    return values, known


def _pad_to_json(pad: float | int | None) -> float | int | str | None:
    if isinstance(pad, float) and not math.isfinite(pad):
        return str(pad)  # "nan", "inf", "-inf": JSON has no literal for them
    return pad


def _pad_from_json(value: Any) -> float | int | None:
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return value
    if isinstance(value, str) and value in ("nan", "inf", "-inf"):
        return float(value)
    raise ValueError(f"pad {value!r} is not a number")
