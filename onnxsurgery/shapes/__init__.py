"""Symbolic shapes: dims as polynomials, propagation through a graph, and the solver.

    dims.py         :class:`Dim`, a polynomial in named atoms with integer coefficients
    analysis.py     what propagation knows: atoms, tensor infos, constraints, constant uses
    rules/          per-op shape rules by op family, in a registry keyed by domain and op
    propagation.py  :func:`propagate`: every tensor's symbolic shape, with provenance
    solver.py       :func:`solve`: unify the constraints propagation recorded
    reshape_reading.py  the solver's Reshape steps: dims kept, merged or split, in row-major order
    solution.py     what the solver returns (:class:`Solution`, :class:`Conflict`)
    spelling.py     a size in the input symbols, as users read it (``(height - 8)//8 + 1``)

Each stage only reads the one before it: dims <- analysis <- rules <- propagation <- solver.
"""

from __future__ import annotations

from onnxsurgery.shapes.analysis import Atom, Constraint, ConstUse, ShapeAnalysis, TensorInfo
from onnxsurgery.shapes.dims import Dim, as_dim, dim_product, dim_sum
from onnxsurgery.shapes.propagation import propagate
from onnxsurgery.shapes.solver import Conflict, Solution, solve

__all__ = [
    "Atom",
    "Conflict",
    "Constraint",
    "ConstUse",
    "Dim",
    "ShapeAnalysis",
    "Solution",
    "TensorInfo",
    "as_dim",
    "dim_product",
    "dim_sum",
    "propagate",
    "solve",
]
