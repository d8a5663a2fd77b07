"""What the solver returns: each unknown's value and how it was decided, and the conflicts.

Its own module so that the solver's steps (:mod:`.solver`, :mod:`.reshape_reading`) and their
callers name it without importing the solver.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from onnxsurgery.shapes.analysis import Constraint
from onnxsurgery.shapes.dims import Dim

__all__ = ["Conflict", "Solution"]


@dataclass
class Conflict:
    """A hard constraint that holds only at the traced size: ``residual == 0`` is required."""

    constraint: Constraint
    residual: Dim


@dataclass
class Solution:
    """What every unknown became (``values``), how (``how``: 'forced', 'kept', 'hint'), and conflicts."""

    values: dict[str, Dim] = field(default_factory=dict)
    how: dict[str, str] = field(default_factory=dict)
    conflicts: list[Conflict] = field(default_factory=list)
    opaque: set[str] = field(default_factory=set)  # derived dims left to be read at run time
    assumed: list[tuple[Constraint, str, str]] = field(
        default_factory=list
    )  # unified run-time dims
    #: symbols the graph ties to others (``total`` -> ``past + seq``), with the constraint
    relations: dict[str, tuple[Dim, Constraint]] = field(default_factory=dict)
    #: the soft constraint each hint came from (one Reshape's alignment hints several dims)
    hinted_by: dict[str, Constraint] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # resolve's cache: d -> (what it resolved to, the decision count then, len(values) then)
        self._cache: dict[Dim, tuple[Dim, int, int]] = {}
        self._decisions = 0
        self._changed: dict[str, int] = {}  # an unknown -> the decision its value last changed at
        self._stale_from: int | None = None  # len(values) when an unknown was decided again

    def changed(self, atoms: set[str], new: bool) -> None:
        """Note a decision (the solver's ``assign``): ``atoms`` are the unknowns whose values it
        set or changed; ``new``: it decided an unknown not decided before."""
        self._decisions += 1
        if not new and self._stale_from is None:
            # Deciding one again left len(values) as it was, which is all this cache went by
            # before it followed each unknown: it keeps doing exactly that from now on.
            self._stale_from = len(self.values)
            self._cache = {d: e for d, e in self._cache.items() if e[2] == self._stale_from}
        for x in atoms:
            self._changed[x] = self._decisions

    def resolve(self, d: Dim) -> Dim:
        """``d`` with every decided unknown replaced (cached until one of its unknowns is
        decided or changes)."""
        size = len(self.values)
        entry = self._cache.get(d)
        if entry is not None:
            hit, at, then = entry
            if self._stale_from is not None:
                if then == size:
                    return hit
            elif all(self._changed.get(x, 0) <= at for x in d.atom_set()):
                if then != size:
                    self._cache[d] = (hit, at, size)
                return hit
        hit = d if self.values.keys().isdisjoint(d.atom_set()) else d.subs(self.values)
        self._cache[d] = (hit, self._decisions, size)
        return hit
