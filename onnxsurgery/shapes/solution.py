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
        self._cache: dict[Dim, Dim] = {}
        self._cache_size = -1

    def resolve(self, d: Dim) -> Dim:
        """``d`` with every decided unknown replaced (cached until the next decision)."""
        if self._cache_size != len(self.values):
            self._cache.clear()
            self._cache_size = len(self.values)
        hit = self._cache.get(d)
        if hit is None:
            hit = d.subs(self.values) if d.atoms() & self.values.keys() else d
            self._cache[d] = hit
        return hit
