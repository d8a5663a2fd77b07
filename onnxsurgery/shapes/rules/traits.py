"""What the passes know about an op beside its shape rule: :class:`OpTraits`, one per op.

Traits are declared once, beside the op's rule (``@rule("Reshape", size_inputs=(1,))``) or, for
an op that has no rule or shares one with ops that differ, by a sibling :func:`traits` call in the
same family module. The registry is keyed like the rules by ``(domain, op_type)`` and refuses a
second declaration for the same key, naming both places. Every per-op table a pass needs (which
inputs are sizes, which axes mix rows, which ops broadcast, which may be folded) is a query of
:func:`op_traits`; an op declared nowhere has the default traits (no sizes, mixes no rows, does
not broadcast, foldable).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np

__all__ = [
    "ALL", "DEFAULT", "MixAxis", "OpTraits", "TRAITS", "declare", "domain_key", "op_traits",
    "traits", "traits_from",
]  # fmt: skip

#: :attr:`MixAxis.default` for a reduction: with no axes given, every axis.
ALL = "all"


def domain_key(domain: str | None) -> str:
    """The registry's spelling of a domain: ``ai.onnx`` (and none) is ``""``."""
    return "" if domain is None or domain == "ai.onnx" else domain


@dataclass(frozen=True)
class MixAxis:
    """An axis along which an op combines values of different rows of input ``input`` (a
    contraction, a softmax, a recurrence, a reduction), so that rows sized by a symbol on that
    axis are not independent. It is found one of two ways:

    - ``axis``: a fixed axis (negative counts from the end), ``swapped`` instead when the node's
      attribute ``swap`` is set (an RNN's ``layout``, Gemm's ``transA``);
    - else the axis, or list of axes, that attribute ``attr`` holds, else the constant input
      ``axes_input`` holds, else ``default``: one axis, :data:`ALL` or None (no axis).
    """

    input: int = 0
    axis: int | None = None
    swap: str = ""
    swapped: int = 0
    attr: str = ""
    axes_input: int | None = None
    default: int | str | None = None

    def axes(self, attrs: Mapping[str, object], rank: int, const: np.ndarray | None) -> list[int]:
        """The axes in ``[0, rank)`` for a node with ``attrs``; ``const``: the constant value of
        input ``axes_input`` where it has one."""
        if self.axis is not None:
            listed: object = self.swapped if self.swap and attrs.get(self.swap) else self.axis
        else:
            listed = attrs.get(self.attr) if self.attr else None
            if listed is None and self.axes_input is not None and const is not None:
                listed = const.reshape(-1).tolist()
            if listed is None or (isinstance(listed, list) and not listed):
                listed = range(rank) if self.default == ALL else self.default
        if isinstance(listed, int):
            listed = [listed]
        if not isinstance(listed, (list, tuple, range)):
            return []  # no axis given and none by default
        return [int(a) % rank for a in listed if -rank <= int(a) < rank]


@dataclass(frozen=True)
class OpTraits:
    """What symbolize and the folders know about one op.

    Attributes:
        size_inputs: input indices read as sizes or shape vectors (a Reshape target, Slice
            bounds, Squeeze axes): symbolize's check takes a graph input there from the
            references instead of making one up.
        mixes_rows: the axes along which the op combines rows (:class:`MixAxis`); a symbol sizing
            one is no batch whose rows are independent.
        broadcasts: the op broadcasts its inputs against each other (symbolize's rewrite then
            leaves a size-1 axis of a rebuilt constant to it instead of adding an Expand).
        foldable: a node of it with constant inputs may be computed ahead of time.
        random: its output differs between runs (never folded, by any folder); never foldable.
        place: where it was declared (``module.rule`` or ``module:line``), set by the registry.
    """

    size_inputs: tuple[int, ...] = ()
    mixes_rows: tuple[MixAxis, ...] = ()
    broadcasts: bool = False
    foldable: bool = True
    random: bool = False
    place: str = field(default="", compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.random and self.foldable:
            raise ValueError("a random op is never foldable: declare it with foldable=False")


DEFAULT = OpTraits()
#: (domain, op_type) -> traits; the default domain is ``""``.
TRAITS: dict[tuple[str, str], OpTraits] = {}
_OPTIONS = frozenset(OpTraits.__dataclass_fields__) - {"place"}


def declare(ops: tuple[str, ...], domain: str, declared: OpTraits, place: str) -> None:
    """Record ``declared`` for ``ops`` of ``domain``; a second declaration for one of them is an
    error naming both places."""
    keys = [(domain_key(domain), op) for op in ops]
    for key in keys:
        if key in TRAITS:
            raise ValueError(
                f"traits for {key[0] or 'ai.onnx'}::{key[1]} declared twice: "
                f"{TRAITS[key].place} and {place}"
            )
    for key in keys:
        TRAITS[key] = replace(declared, place=place)


def traits_from(options: Mapping[str, object]) -> OpTraits:
    """An :class:`OpTraits` from keyword options (its fields); an unknown one is a TypeError."""
    unknown = sorted(set(options) - _OPTIONS)
    if unknown:
        raise TypeError(f"unknown op traits {unknown}; known: {sorted(_OPTIONS)}")
    return OpTraits(**options)  # type: ignore[arg-type]  # names checked above; values as declared


def traits(*ops: str, domain: str = "", **options: object) -> None:
    """Declare the traits of ``ops`` (keyword options: the fields of :class:`OpTraits`) where no
    rule of their own carries them. Call it in the op's family module, beside its rule if any."""
    caller = sys._getframe(1)
    place = f"{caller.f_globals['__name__']}:{caller.f_lineno}"
    declare(ops, domain, traits_from(options), place)


def op_traits(domain: str | None, op: str) -> OpTraits:
    """The traits of ``op`` in ``domain`` (the defaults for an op declared nowhere)."""
    return TRAITS.get((domain_key(domain), op), DEFAULT)
