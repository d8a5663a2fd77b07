"""How the solver reads sizes the graph computes at run time: divisions and remainders of
sizes (``Div``, ``Mod`` over ``Shape`` values) whose result the export left to the run.
:class:`RuntimeValues` holds the solver's steps for them (``_Solver`` in :mod:`.solver` runs
them, with the state they share):

- :meth:`~RuntimeValues.settle_value_divs`: a run-time division that is a polynomial at every
  size once the size constants in it keep their traced values (TorchScript's chunk bounds);
- :meth:`~RuntimeValues.settle_value_mods`, :meth:`~RuntimeValues.relate_remainders`: a
  remainder whose literals keep their values, and a length padded by its remainder, divided
  by the block at run time (window and block pads);
- :meth:`~RuntimeValues.judge_value_divs`, :meth:`~RuntimeValues.unify_value_mods`: once
  everything is decided, divisions and remainders that are constants, or one value.
"""

from __future__ import annotations

from collections import defaultdict, deque
from typing import TYPE_CHECKING

from onnxsurgery.shapes.analysis import Constraint, ShapeAnalysis
from onnxsurgery.shapes.dims import Dim
from onnxsurgery.shapes.solution import Conflict, Solution

__all__ = ["RuntimeValues"]


class RuntimeValues:
    """The solver's steps over run-time divisions and remainders, over the state ``_Solver``
    keeps (declared below)."""

    a: ShapeAnalysis
    traced: dict[str, int]
    sol: Solution
    hard: list[Constraint]
    queue: deque[int]
    watch: dict[str, set[int]]
    floor_divs: dict[str, Dim]
    multipliers: dict[str, set[str]] | None

    if TYPE_CHECKING:  # the solver's own steps these call

        def unknowns(self, d: Dim) -> set[str]: ...
        def resolve(self, d: Dim) -> Dim: ...
        def assign(self, atom: str, value: Dim, how: str) -> None: ...
        def _created(self, atom: str) -> int: ...

    def settle_value_divs(self) -> bool:
        """A run-time division ``num // den`` that is a polynomial at every size where the size
        constants still free in it keep their traced values (:func:`_floor_div`: TorchScript's
        ``chunk(n)`` of ``n*t`` rows slices at ``(n*t + n-1) // n``, ``t``): that polynomial,
        so the sizes downstream of the chunk follow ``t`` while the rest is decided. Checked
        again once everything is (:meth:`judge_value_divs`): a conflict where it no longer holds."""
        settled = False
        for atom, (num, den) in self.a.value_divs.items():
            if atom in self.sol.values:
                continue
            n, d = self.resolve(num), self.resolve(den)
            if atom in n.atoms() and self._hinted_through(num, atom):
                # a hint wrote the numerator's size constant in the quotient itself (a Reshape
                # keeping dims through the chunk it sizes): the constant keeps its traced value,
                # and the quotient is the constant it gives
                n = num.subs(
                    {x: Dim.const(self.traced[x]) for x in num.atoms() if x not in self.a.symbols}
                )
                if n.value is not None and d.value is not None and d.value > 0 and n.value >= 0:
                    self.assign(atom, Dim.const(n.value // d.value), "forced")
                    settled = True
                    continue
            free = self.unknowns(n) | self.unknowns(d)
            if any(self.a.atoms[x].kind != "var" for x in free):
                continue
            kept = {x: Dim.const(self.traced[x]) for x in free}
            dv = d.subs(kept).value
            q = _floor_div(n.subs(kept), dv) if dv is not None and dv > 1 else None
            if q is None or self.unknowns(q):
                continue
            for x in sorted(free | self._chunk_indices(atom), key=self._created):
                if x not in self.sol.values:
                    self.assign(x, Dim.const(self.traced[x]), "kept")
            self.assign(atom, q, "forced")
            self.floor_divs[atom] = q
            settled = True
        return settled

    def _hinted_through(self, num: Dim, atom: str) -> bool:
        """Whether every unknown of ``num`` is a size (a constant, or a dim a Reshape's -1 left)
        that a hint decided in terms of ``atom``, the run-time quotient ``num`` is divided into: quantized ShuffleNetV2 by
        TorchScript chunks ``channels`` at ``(channels + 1) // 2``, and the Reshape that shuffles
        the channels back keeps ``2 * chunk`` of them, so the hint read ``channels`` as twice
        the quotient computed from it, and the quotient stayed a run-time value where it is 58."""
        unknown = {x for x in num.atoms() if self.a.atoms[x].kind != "sym"}
        return bool(unknown) and all(
            self.a.atoms[x].kind in ("var", "derived")
            and self.sol.how.get(x) == "hint"
            and atom in self.resolve(Dim.sym(x)).atoms()
            for x in unknown
        )

    def settle_value_mods(self) -> bool:
        """The size constants written in a run-time remainder's arithmetic keep their traced
        values (:meth:`_literal`); a remainder left with no unknown is then a constant. SAM pads
        its feature map to whole windows, ``(14 - h % 14) % 14``: the window size 14 is a literal
        of the torch code, and a map whose height is fixed by the model pads by one number at
        every batch, which the window count, and the batch recovered from it, rely on while the
        rest is decided (at a trace at batch 1, where every other reading of that batch is 1
        too). The divisor of a division of a padded length is such a literal too (the window
        count ``(h + pad) / 14``), for :meth:`relate_remainders`."""
        settled = False
        literals: set[str] = set()
        for num, _ in self.a.value_mods.values():
            literals |= {x for x in self.unknowns(self.resolve(num)) if self._literal(x)}
        for qnum, qden in (*self.a.value_divs.values(), *self.a.exact_divs.values()):
            if self.resolve(qnum).atoms() & self.a.value_mods.keys():
                literals |= {x for x in self.unknowns(self.resolve(qden)) if self._literal(x)}
        for x in sorted(literals, key=self._created):
            if x not in self.sol.values:
                self.assign(x, Dim.const(self.traced[x]), "kept")
                settled = True
        for atom, (num, den) in self.a.value_mods.items():
            if atom in self.sol.values:
                continue
            value = self.resolve(num).value
            if value is not None:
                self.assign(atom, Dim.const(value % den), "forced")  # ONNX Mod: the divisor's sign
                settled = True
        return settled

    def _literal(self, atom: str) -> bool:
        """A size constant written in the arithmetic of sizes (the window 14 of
        ``(14 - h % 14) % 14``), not a view's dim (a height that may follow a run-time grid)."""
        info = self.a.atoms[atom]
        use = info.origin[0] if isinstance(info.origin, tuple) and info.origin else None
        return info.kind == "var" and getattr(use, "op", None) in (
            "Add",
            "Sub",
            "Mul",
            "Div",
            "Mod",
        )

    def _chunk_indices(self, atom: str) -> set[str]:
        """The size constants still free that multiply ``atom`` in a hard constraint: the chunk
        indices ``k`` of the slice bounds ``q*k`` of a chunk of size ``q``."""
        if self.multipliers is None:  # every run-time division's, in one pass
            self.multipliers = defaultdict(set)
            for c in self.hard:
                for m in c.expr.terms:
                    for x in set(m) & self.a.value_divs.keys():
                        self.multipliers[x] |= {
                            y for y in m if y != x and self.a.atoms[y].kind == "var"
                        }
        return {x for x in self.multipliers.get(atom, ()) if x not in self.sol.values}

    def judge_value_divs(self) -> None:
        """A run-time division whose operands were all decided constants is that constant when
        constraints are judged (torchscript's chunk size ``(12 + 2) // 3`` is 4 at every size).
        Only judging: every unknown is decided by now, so this can only show a constraint holds;
        the rewritten graph still computes the division at run time."""
        for atom, (num, den) in self.a.value_divs.items():
            if atom in self.floor_divs:
                n, d = self.resolve(num), self.resolve(den)
                q = _floor_div(n, d.value) if d.value is not None and d.value > 1 else None
                got = self.resolve(Dim.sym(atom))
                if q != got:  # a size constant in it was decided otherwise than as traced
                    why = f"Div {n} / {d} is {got} at every size"
                    c = Constraint(d * got - n, self._producer(atom), "Div", why)
                    self.sol.conflicts.append(Conflict(c, d * got - n))
                continue
            if atom in self.sol.values:
                continue
            n, d = self.resolve(num), self.resolve(den)
            nv, dv = n.value, d.value
            if nv is not None and dv is not None and dv > 0 and nv >= 0:
                self.assign(atom, Dim.const(nv // dv), "forced")
            elif dv is not None and dv > 1:
                q = _floor_div(n, dv)
                if q is not None:
                    self.assign(atom, q, "forced")

    def _producer(self, atom: str) -> str:
        """The node whose output holds the run-time value ``atom`` (its origin's tensor)."""
        origin = self.a.atoms[atom].origin
        tensor = origin[1] if isinstance(origin, tuple) and len(origin) > 1 else None
        return next((n.name for n in self.a.model.graph.node if tensor in n.output), "")

    def relate_remainders(self) -> bool:
        """A size padded by its run-time remainder, ``n + (-n) % b``, then divided by ``b`` at
        run time (TorchScript's block count ``padded / 128`` after a pad it computes): the
        quotient ``q`` makes the remainder ``b*q - n`` at every size, so the block count times
        the block is the padded length, not only at the traced size. Only the graph's own run-
        time values are related: both stay computed by it. Whether any was."""
        related = False
        for r, (num, den) in self.a.value_mods.items():
            if r in self.sol.values:
                continue
            n = -self.resolve(num)
            if n.terms.get((), 0) % den == 0:  # (c - n) % b with c a multiple of b: (-n) % b
                n = n - n.terms.get((), 0)
            divs = {**self.a.value_divs, **self.a.exact_divs}
            for q, (qnum, qden) in divs.items():
                if self.resolve(qden).value != den or q in self.sol.values:
                    continue
                if self.resolve(qnum) - Dim.sym(r) == n:
                    self.assign(r, Dim.sym(q) * den - n, "forced")
                    if q not in self.sol.opaque:  # the block count, read where it is computed
                        self.sol.opaque.add(q)
                        self.queue.extend(self.watch.pop(q, set()))
                    related = True
                    break
        return related

    def unify_value_mods(self) -> None:
        """Two run-time remainders of one size by one block are one value (LongT5's local
        attention computes ``(-seq) % 128`` for its query, key and value apart: three Mods of
        sizes the solver decided equal). Only judging, as :meth:`judge_value_divs`: the graph
        still computes each."""
        first: dict[tuple[str, int], str] = {}
        for atom, (num, den) in self.a.value_mods.items():
            if atom in self.sol.values:
                continue
            key = (str(self.resolve(num)), den)
            if key in first:
                self.assign(atom, Dim.sym(first[key]), "forced")
            else:
                first[key] = atom


def _floor_div(num: Dim, den: int) -> Dim | None:
    """``num // den`` as a polynomial where it is one at every size: ``num`` is ``den*q + r``
    with ``0 <= r < den`` and ``q``'s coefficients positive (``num >= 0``, so ONNX's truncating
    Div is a floor). TorchScript's ``chunk(n)`` of a length ``n*t`` slices at ``(n*t + n-1) // n``,
    which is ``t`` at every ``t``; None where ``num`` is not of that form."""
    r = num.terms.get((), 0)
    if not 0 <= r < den:
        return None
    q = (num - r).exact_div(den)
    if q is None or q.is_const() or any(c <= 0 for m, c in q.terms.items() if m):
        return None
    return q
