"""Symbolic dimensions: polynomials in named atoms with integer coefficients.

A :class:`Dim` is an int or a polynomial such as ``batch*16``, ``seq + 1`` or ``batch*heads``.
Atoms are plain strings (the symbol names of input axes, or internal unknowns); a monomial is the
sorted tuple of its atoms with repetition (``("batch", "batch")`` is ``batch**2``)::

    >>> b, s = Dim.sym("batch"), Dim.sym("seq")
    >>> str(b * 16 + s - 1)
    'batch*16 + seq - 1'
    >>> (b * s * 48).exact_div(b * 3)
    Dim('seq*16')
    >>> (b * 6).exact_div(4) is None
    True
    >>> (b + 1).evaluate({"batch": 4})
    5

Dims are immutable and hashable; equality is structural (``batch*2 == 2*batch``), and a constant
Dim equals the int it holds. Division is exact or nothing: :meth:`Dim.exact_div` returns ``None``
when the quotient is not a polynomial with integer coefficients, so callers decide what an inexact
quotient means (usually a fresh opaque dim).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Union

from onnxsurgery.limits import LimitExceeded
from onnxsurgery.limits import current as current_limits

__all__ = ["Dim", "DimLike", "as_dim", "const_ints", "dim_product", "dim_sum"]

Monomial = tuple[str, ...]
DimLike = Union["Dim", int]


def _mono_key(m: Monomial) -> tuple[int, Monomial]:
    """Graded order: higher degree first, then more of the alphabetically smaller atoms first."""
    return (-len(m), m)


def _mono_mul(a: Monomial, b: Monomial) -> Monomial:
    if not a:
        return b
    if not b:
        return a
    return tuple(sorted(a + b))


def _mono_div(a: Monomial, b: Monomial) -> Monomial | None:
    """``a / b`` when ``b`` divides ``a`` (as multisets), else None."""
    if not b:
        return a
    rest = list(a)
    for atom in b:
        try:
            rest.remove(atom)
        except ValueError:
            return None
    return tuple(rest)


class Dim:
    """An immutable polynomial over named atoms with int coefficients (see module docstring)."""

    __slots__ = ("_terms", "_hash", "_atomset")

    def __init__(self, terms: Mapping[Monomial, int] | None = None) -> None:
        items = [(m, c) for m, c in (terms or {}).items() if c != 0]
        if len(items) > 64 and len(items) > current_limits().max_dim_terms:
            raise LimitExceeded(
                f"a symbolic size grew to {len(items)} terms (a long chain of shape arithmetic), "
                f"over {current_limits().hint('max_dim_terms')}"
            )
        if len(items) > 1:
            items.sort(key=lambda t: _mono_key(t[0]))
        self._terms: tuple[tuple[Monomial, int], ...] = tuple(items)
        self._hash = hash(self._terms)
        self._atomset: frozenset[str] | None = None

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def const(cls, value: int) -> Dim:
        return cls({(): int(value)})

    @classmethod
    def sym(cls, name: str) -> Dim:
        return cls({(name,): 1})

    # -- inspection --------------------------------------------------------------------------
    @property
    def terms(self) -> dict[Monomial, int]:
        return dict(self._terms)

    def is_const(self) -> bool:
        return all(not m for m, _ in self._terms)

    @property
    def value(self) -> int | None:
        """The int this Dim holds when constant, else None."""
        if not self._terms:
            return 0
        if len(self._terms) == 1 and not self._terms[0][0]:
            return self._terms[0][1]
        return None

    def atoms(self) -> set[str]:
        return set(self.atom_set())

    def atom_set(self) -> frozenset[str]:
        """:meth:`atoms`, computed once (a Dim is immutable): for the solver's hot paths."""
        found = self._atomset
        if found is None:
            found = self._atomset = frozenset(a for m, _ in self._terms for a in m)
        return found

    def is_atom(self) -> bool:
        """True for a bare atom (``batch``), not ``2*batch`` or ``batch + 1``."""
        return len(self._terms) == 1 and len(self._terms[0][0]) == 1 and self._terms[0][1] == 1

    def is_monomial(self) -> bool:
        """One term: ``c * a * b ...`` (constants included)."""
        return len(self._terms) <= 1

    def degree(self, atom: str) -> int:
        return max((m.count(atom) for m, _ in self._terms), default=0)

    # -- arithmetic --------------------------------------------------------------------------
    def __add__(self, other: DimLike) -> Dim:
        o = as_dim(other)
        terms = dict(self._terms)
        for m, c in o._terms:
            terms[m] = terms.get(m, 0) + c
        return Dim(terms)

    __radd__ = __add__

    def __neg__(self) -> Dim:
        return Dim({m: -c for m, c in self._terms})

    def __sub__(self, other: DimLike) -> Dim:
        return self + (-as_dim(other))

    def __rsub__(self, other: DimLike) -> Dim:
        return as_dim(other) - self

    def __mul__(self, other: DimLike) -> Dim:
        o = as_dim(other)
        terms: dict[Monomial, int] = {}
        for m1, c1 in self._terms:
            for m2, c2 in o._terms:
                m = _mono_mul(m1, m2)
                terms[m] = terms.get(m, 0) + c1 * c2
        return Dim(terms)

    __rmul__ = __mul__

    def exact_div(self, other: DimLike) -> Dim | None:
        """``self / other`` when it is a polynomial with int coefficients, else None."""
        o = as_dim(other)
        if not o._terms:
            return None
        if not self._terms:
            return Dim()
        lead_m, lead_c = o._terms[0]
        if len(o._terms) == 1:
            out: dict[Monomial, int] = {}
            for m, c in self._terms:
                q = _mono_div(m, lead_m)
                if q is None or c % lead_c:
                    return None
                out[q] = c // lead_c
            return Dim(out)
        # Multivariate division by one divisor: exact division leaves remainder 0.
        rest = self
        quotient: dict[Monomial, int] = {}
        for _ in range(10_000):
            if not rest._terms:
                return Dim(quotient)
            m, c = rest._terms[0]
            q = _mono_div(m, lead_m)
            if q is None or c % lead_c:
                return None
            step = Dim({q: c // lead_c})
            quotient[q] = quotient.get(q, 0) + c // lead_c
            rest = rest - step * o
        return None

    def linear_in(self, atom: str) -> tuple[Dim, Dim] | None:
        """``(a, r)`` with ``self == a*atom + r`` and neither holding ``atom``; None if nonlinear."""
        a: dict[Monomial, int] = {}
        r: dict[Monomial, int] = {}
        for m, c in self._terms:
            n = m.count(atom)
            if n > 1:
                return None
            if n == 1:
                rest = list(m)
                rest.remove(atom)
                a[tuple(rest)] = c
            else:
                r[m] = c
        return Dim(a), Dim(r)

    def solve_for(
        self, atom: str, target: int, values: Mapping[str, int], *, nonnegative: bool = False
    ) -> int | None:
        """The int ``atom`` must take for ``self == target``, every other atom set by ``values``.

        None when the equation does not tell (``atom`` appears squared, or its coefficient is 0
        at these values); ValueError when no int (no non-negative int with ``nonnegative``) fits::

            >>> (Dim.sym("seq") * 2 + 5).solve_for("seq", 11, {})
            3
        """
        split = self.linear_in(atom)
        if split is None:
            return None
        a, r = (d.evaluate(values) for d in split)
        if a == 0:
            return None
        q, rem = divmod(target - r, a)
        if rem or (nonnegative and q < 0):
            kind = "non-negative int" if nonnegative else "int"
            raise ValueError(f"no {kind} {atom} gives {self} = {target}")
        return q

    # -- evaluation and substitution ---------------------------------------------------------
    def evaluate(self, values: Mapping[str, int]) -> int:
        """The int this Dim takes when every atom has a value; KeyError names a missing atom."""
        total = 0
        for m, c in self._terms:
            term = c
            for atom in m:
                term *= values[atom]
            total += term
        return total

    def subs(self, mapping: Mapping[str, DimLike]) -> Dim:
        """Replace atoms by Dims (or ints); atoms not in ``mapping`` stay."""
        if not mapping or mapping.keys().isdisjoint(self.atom_set()):
            return self
        # The product and sum on plain dicts (a Dim per step cost most of the solver's time);
        # where one grows past 64 terms, the step by step Dims below check the size limit.
        total: dict[Monomial, int] = {}
        for m, c in self._terms:
            term: dict[Monomial, int] = {(): c}
            for atom in m:
                factor = as_dim(mapping[atom])._terms if atom in mapping else (((atom,), 1),)
                product: dict[Monomial, int] = {}
                for m1, c1 in term.items():
                    for m2, c2 in factor:
                        mm = _mono_mul(m1, m2)
                        product[mm] = product.get(mm, 0) + c1 * c2
                term = product
                if len(term) > 64:
                    return self._subs_stepwise(mapping)
            for mm, cc in term.items():
                total[mm] = total.get(mm, 0) + cc
            if len(total) > 64:
                return self._subs_stepwise(mapping)
        return Dim(total)

    def _subs_stepwise(self, mapping: Mapping[str, DimLike]) -> Dim:
        total = Dim()
        for m, c in self._terms:
            term = Dim.const(c)
            for atom in m:
                term = term * (as_dim(mapping[atom]) if atom in mapping else Dim.sym(atom))
            total = total + term
        return total

    # -- comparison and text -----------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if isinstance(other, int):
            return self.value == other
        if isinstance(other, Dim):
            return self._terms == other._terms
        return NotImplemented

    def __hash__(self) -> int:
        return self._hash

    def __str__(self) -> str:
        if not self._terms:
            return "0"
        parts: list[str] = []
        for i, (m, c) in enumerate(self._terms):
            sign = "-" if c < 0 else "+"
            mag = abs(c)
            body = "*".join(m)
            if not m:
                text = str(mag)
            elif mag == 1:
                text = body
            else:
                text = f"{body}*{mag}"
            if i == 0:
                parts.append(f"-{text}" if sign == "-" else text)
            else:
                parts.append(f"{sign} {text}")
        return " ".join(parts)

    def __repr__(self) -> str:
        return f"Dim({str(self)!r})"


def as_dim(x: DimLike) -> Dim:
    """An int or Dim as a Dim."""
    if isinstance(x, Dim):
        return x
    if isinstance(x, bool) or not isinstance(x, int):
        try:
            import numpy as np

            if isinstance(x, np.integer):
                return Dim.const(int(x))
        except ImportError:  # pragma: no cover
            pass
        raise TypeError(f"not a dimension: {x!r}")
    return Dim.const(x)


def dim_product(dims: Iterable[DimLike]) -> Dim:
    out = Dim.const(1)
    for d in dims:
        out = out * d
    return out


def dim_sum(dims: Iterable[DimLike]) -> Dim:
    out = Dim()
    for d in dims:
        out = out + d
    return out


def const_ints(dims: Sequence[Dim]) -> list[int] | None:
    """The ints ``dims`` hold when every one is constant, else None."""
    ints = [v for v in (d.value for d in dims) if v is not None]
    return ints if len(ints) == len(dims) else None
