"""Unification of the constraints collected by :mod:`onnxsurgery.shapes.propagation`.

Unknowns are the ``var`` atoms (elements of size constants), the ``data`` atoms (dims of data
constants) and the ``derived`` atoms (dims a rule could not write in closed form). The solver
decides each one by structure, in this order:

1. hard constraints, repeatedly: one that is linear in a single unknown fixes it
   (``$v3 - batch == 0`` gives ``$v3 = batch``; ``$q1*$v2 - batch*64 == 0`` with ``$q1 = 64``
   gives ``$v2 = batch``);
2. soft hints (Reshape keeps leading/trailing dims, a Slice bound equal to its axis, a Scatter
   buffer the size of its index set) fix what hard constraints left free, unless that
   contradicts a hard constraint;
3. products of unknowns holding a data dim that must equal a product of symbols none of which
   is 1 at the traced size are split (a position index tiled and multiplied with the keys);
   data-constant dims nobody forced keep their traced size (masks that only broadcast); then
   the soft hints are tried again (a Slice end equal to its axis ``$d + $v``, a cls token's
   data dim and the token count, is solvable only once the data dim is decided); then
   products of unknowns that must equal a product of symbols (a Resize to the patch grid) are
   split symbol by symbol, in axis order;
4. size elements nobody forced keep their traced value: a ``1`` that equals the traced batch but
   only ever broadcasts stays ``1``; before one does, the Reshapes it belongs to (in their
   input or their output) are aligned again: a size kept upstream may have just decided their
   middle (``cls.expand(batch, -1, -1)``, whose ``-1`` is such a size, and the token count
   ``1 + h*w`` decide a position grid's ``[1, h', w', C] -> [1, -1, C]``);
5. derived dims still free become opaque runtime dims (read back with ``Shape`` at run time;
   listed in ``Solution.opaque``; the analysis itself is never modified, so it can be solved
   again with more constraints).

A hard constraint between symbols alone that makes one of them a sum or product of the
others (``total == past + seq``: a KV cache concatenated to the new keys, against an attention
mask of length ``total``) is a *relation*: that symbol is expressed in the others
(``Solution.relations``), after the first round and again before conflicts are listed. A hard
constraint that still does not hold once nothing is unknown is a *conflict*: the graph needs that
equality at every size, and it holds only at the traced one.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from onnxsurgery.shapes.analysis import Constraint, ShapeAnalysis
from onnxsurgery.shapes.dims import Dim

__all__ = ["Conflict", "Solution", "solve"]


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


class _Solver:
    def __init__(self, analysis: ShapeAnalysis) -> None:
        self.a = analysis
        self.traced = analysis.traced_values()
        self.sol = Solution()
        self.dependents: dict[str, set[str]] = defaultdict(set)
        self.hard = [c for c in analysis.constraints if not c.soft]
        self.soft = [c for c in analysis.constraints if c.soft]
        self.watch: dict[str, set[int]] = defaultdict(set)
        self.exprs: list[Dim] = [c.expr for c in self.hard]
        self.done: set[int] = set()
        self.queue: deque[int] = deque(range(len(self.hard)))
        self.floor_atoms: dict[tuple[str, str, int], str] = {}
        self.aligns: dict[str, list[Constraint]] = defaultdict(list)
        for c in self.soft:  # a Reshape's unknowns, in its input or its output
            for x in {x for d in (c.src or []) + (c.dst or []) for x in d.atoms()}:
                self.aligns[x].append(c)

    def unknowns(self, d: Dim) -> set[str]:
        return {
            x
            for x in d.atoms()
            if self.a.atoms[x].kind in ("var", "data", "derived") and x not in self.sol.opaque
        }

    def resolve(self, d: Dim) -> Dim:
        return self.sol.resolve(d)

    def assign(self, atom: str, value: Dim, how: str) -> None:
        vals = self.sol.values
        vals[atom] = value
        self.sol.how[atom] = how
        for dep in self.dependents.pop(atom, set()):
            if dep in vals:
                vals[dep] = vals[dep].subs({atom: value})
                for x in vals[dep].atoms():
                    self.dependents[x].add(dep)
        for x in value.atoms():
            self.dependents[x].add(atom)
        self.queue.extend(self.watch.pop(atom, set()))

    def solve_for(self, expr: Dim) -> tuple[str, Dim] | None:
        """``(u, value)`` when ``expr == 0`` can be solved for one unknown ``u``.

        With one unknown, ``u`` is what ``expr`` is linear in. Two unknowns tied by a factor
        (``$v7 == $v3``, a dim carried through a transpose) become one: the downstream one (created
        last) is expressed in the other.
        """
        unknown = self.unknowns(expr)
        if not unknown:
            return None
        if len(unknown) > 1:
            # Only ``a*u - b*w == 0``: two unknowns tied by a factor, nothing else.
            terms = expr.terms
            if len(unknown) != 2 or len(terms) != 2 or any(len(m) != 1 for m in terms):
                return None
        for u in sorted(unknown, key=self._created, reverse=True)[:1]:
            lin = expr.linear_in(u)
            if lin is None or lin[0].value == 0:
                continue
            a, r = lin
            if self.unknowns(a):
                continue
            value = (-r).exact_div(a)
            if value is None:
                continue
            try:
                if value.evaluate(self.traced) != self.traced[u]:
                    continue
            except KeyError:
                continue
            return u, value
        return None

    def _created(self, atom: str) -> int:
        return int(atom[2:]) if atom[2:].isdigit() else -1

    def settle_floors(self) -> None:
        """A floor division whose operands are decided becomes a constant or a polynomial."""
        for atom, num, den, plus in self.a.pending_floors:
            if atom in self.sol.values:
                continue
            n, d = self.resolve(num), self.resolve(den)
            if self.unknowns(n) or self.unknowns(d):
                continue
            q = n.exact_div(d)
            key = (str(n), str(d), plus)
            if q is not None:
                self.assign(atom, q + plus, "forced")
            elif n.value is not None and d.value:
                self.assign(atom, Dim.const(n.value // d.value + plus), "forced")
            elif key in self.floor_atoms and self.floor_atoms[key] != atom:
                self.assign(atom, Dim.sym(self.floor_atoms[key]), "forced")  # the same division
            elif atom not in self.sol.opaque:
                # Symbols or run-time dims, not exact: a dim read at run time from now on.
                self.floor_atoms[key] = atom
                self.sol.opaque.add(atom)
                self.queue.extend(self.watch.pop(atom, set()))

    def drain(self) -> None:
        self._drain()
        if self.a.pending_floors:
            self.settle_floors()
            self._drain()

    def _drain(self) -> None:
        while self.queue:
            cid = self.queue.popleft()
            if cid in self.done:
                continue
            expr = self.resolve(self.exprs[cid])
            self.exprs[cid] = expr
            if expr.value == 0:
                self.done.add(cid)
                continue
            unknown = self.unknowns(expr)
            if not unknown:
                continue  # judged at the end
            found = self.solve_for(expr)
            if found is not None:
                self.done.add(cid)
                self.assign(found[0], found[1], "forced")
                continue
            for x in unknown:
                self.watch[x].add(cid)

    def default(self, kind: str) -> None:
        """Keep the traced value of each still-free unknown, in dataflow order, one at a time:
        deciding an upstream constant first lets hard constraints carry it downstream."""
        for name, atom in list(self.a.atoms.items()):
            if atom.kind == kind and name not in self.sol.values:
                # Upstream decisions may have settled a Reshape this unknown belongs to (in its
                # input or its output): align it again (it knows which position the unknown
                # holds) before giving up.
                for c in self.aligns.get(name, ()):
                    self.align(c)
                if name not in self.sol.values:
                    self.assign(name, Dim.const(atom.traced), "kept")
                    self.drain()

    def _breaks(self, atom: str, value: Dim) -> bool:
        for cid in self.watch.get(atom, ()):
            expr = self.resolve(self.exprs[cid]).subs({atom: value})
            if not self.unknowns(expr) and expr.value != 0:
                return True
        return False

    def breaks_hard(self, atom: str, value: Dim) -> bool:
        """Whether a hint would turn a hard constraint into a conflict that keeping the traced
        value would not (a hint no worse than the default is taken: its conflict names the
        symbol that really cannot vary)."""
        return self._breaks(atom, value) and not self._breaks(atom, Dim.const(self.traced[atom]))

    def apply_hints(self) -> None:
        for _ in range(2):
            for c in self.soft:
                if c.src is not None:
                    self.align(c)
                    continue
                if c.when_free and c.rhs is not None:
                    rhs = self.resolve(c.rhs)
                    if rhs.is_const() or self.unknowns(rhs):
                        continue
                expr = self.resolve(c.expr)
                found = self.solve_for(expr)
                if found is None or self.breaks_hard(*found):
                    if found is None and c.lhs is not None and c.rhs is not None:
                        self.factor(c.lhs, c.rhs)
                    continue
                self.assign(found[0], found[1], "hint")
                self.drain()

    def try_hint(self, lhs: Dim, rhs: Dim) -> None:
        found = self.solve_for(self.resolve(lhs - rhs))
        if found is not None and not self.breaks_hard(*found):
            self.assign(found[0], found[1], "hint")
            self.drain()

    def align(self, c: Constraint) -> None:
        """Reshape hints: leading and trailing dims that keep their size stay the same dim.

        A merged dim such as ``batch*seq`` is matched with a single dim only when none of its
        symbols is 1 at the traced size (at batch 1, ``batch*seq`` and ``seq`` look alike); the
        middle is left to a product hint, which :meth:`factor` splits symbol by symbol.
        """
        if c.src is None or c.dst is None:
            return
        src = [self.resolve(d) for d in c.src]
        dst = [self.resolve(d) for d in c.dst]
        if not any(self.unknowns(d) for d in dst + src):
            return

        def merged_one(d: Dim) -> bool:
            return (
                not d.is_atom()
                and not d.is_const()
                and any(self.traced.get(x) == 1 for x in d.atoms())
            )

        def same(a: Dim, b: Dim) -> bool:
            if a == b:  # one product on both sides (``batch*4`` at batch 1) is that dim
                return True
            try:
                if a.evaluate(self.traced) != b.evaluate(self.traced):
                    return False
            except KeyError:
                return False
            return not (merged_one(a) or merged_one(b))

        def same_lead(i: int) -> bool:
            return (same(src[i], dst[i]) or self._spans(src, dst, i)) and not self._block_of_one(
                src[i], dst[i]
            )

        most = self._ends_of_ones(src, dst, same, self._own_minus_one(c), same_lead)
        lead = 0
        while lead < min(len(src), len(dst), most[0]) and same_lead(lead):
            self.try_hint(dst[lead], src[lead])
            lead += 1
        trail = 0
        while (
            len(src) - trail - 1 >= lead
            and len(dst) - trail - 1 >= lead
            and trail < most[1]
            and same(src[-1 - trail], dst[-1 - trail])
            and not self._block_of_one(src[-1 - trail], dst[-1 - trail])
        ):
            self.try_hint(dst[-1 - trail], src[-1 - trail])
            trail += 1
        mid_src = src[lead : len(src) - trail]
        mid_dst = dst[lead : len(dst) - trail]
        if mid_src or mid_dst:
            lhs, rhs = Dim.const(1), Dim.const(1)
            for d in mid_dst:
                lhs = lhs * d
            for d in mid_src:
                rhs = rhs * d
            diff = self.resolve(lhs - rhs)
            found = self.solve_for(diff)
            if found is not None:
                if not self.breaks_hard(*found):
                    self.assign(found[0], found[1], "hint")
                    self.drain()
            elif diff != Dim.const(0):  # equal already: nothing to split
                self.factor(lhs, rhs, mid_dst, mid_src)

    def _block_of_one(self, src: Dim, dst: Dim) -> bool:
        """Whether matching a Reshape's ``src`` dim with ``dst`` would read a constant block
        size as the length it divides only because the count is 1 at the traced size.

        ``n = padded / 128`` traced ``128 / 128`` and ``[b, padded, f] -> [b, n, 128, f]``: the
        trailing 128 looks like ``padded``, but taking it fixes the count at 1 at every size. The
        constant stays a constant; the count follows the length (at run time if need be).
        """
        sides = (src, dst)
        if not any(d.is_atom() and self.unknowns(d) and self._is_var(d) for d in sides):
            return False
        for c in self.hard:
            if c.op != "Div" or c.lhs is None or c.rhs is None:
                continue
            counts = [x for x in c.lhs.atoms() if self._is_count_of_one(x)]
            if counts and any(self.resolve(c.rhs) == self.resolve(d) for d in sides):
                return True
        return False

    def _is_var(self, d: Dim) -> bool:
        return all(self.a.atoms[x].kind == "var" for x in d.atoms())

    def _is_count_of_one(self, atom: str) -> bool:
        """An exact Div's quotient still undecided and traced at 1 (one block)."""
        info = self.a.atoms[atom]
        return (
            info.kind == "derived" and info.note == "Div" and self.traced.get(atom) == 1
            and atom not in self.sol.values
        )

    def _spans(self, src: list[Dim], dst: list[Dim], i: int) -> bool:
        """Whether a Reshape's ``i``-th input and output dims hold the same elements at the
        traced sizes (same size, same product before them), one of them a single unknown and
        the other a product with a symbol traced at 1: row-major, the unknown is that whole
        product. Traced at batch 1, ``[batch*4, q+1, 96] -> [$v, $w, 3, 4, 8]`` reads
        ``$v = batch*4`` (:meth:`align` matches no product holding a 1 by size alone, where
        ``batch*seq`` and ``seq`` look alike)."""
        traced = [[self._traced_at(d) for d in side[: i + 1]] for side in (src, dst)]
        sizes = [[x for x in side if x is not None] for side in traced]
        if len(sizes[0]) != i + 1 or len(sizes[1]) != i + 1:
            return False
        if sizes[0][i] != sizes[1][i] or math.prod(sizes[0][:i]) != math.prod(sizes[1][:i]):
            return False
        a, b = src[i], dst[i]
        for one, other in ((a, b), (b, a)):
            if one.is_atom() and self.unknowns(one) and not self.unknowns(other):
                return not other.is_atom() and any(self.traced.get(x) == 1 for x in other.atoms())
        return False

    def _own_minus_one(self, c: Constraint) -> int | None:
        """The position of the Reshape's own ``-1`` in its output, while still undecided."""
        for k, d in enumerate(c.dst or []):
            if not d.is_atom() or self.resolve(d) != d:
                continue
            atom = self.a.atoms[d.atoms().pop()]
            origin = atom.origin
            if atom.kind != "derived" or not isinstance(origin, tuple) or len(origin) != 3:
                continue
            made_by = self.a.producers.get(origin[1])
            if origin[2] == k and made_by is not None and made_by[1].name == c.node:
                return k
        return None

    def _ends_of_ones(
        self,
        src: list[Dim],
        dst: list[Dim],
        same: Callable[[Dim, Dim], bool],
        minus_one: int | None = None,
        same_lead: Callable[[int], bool] | None = None,
    ) -> tuple[int, int]:
        """How many leading and trailing dims :meth:`align` may match one to one.

        Where matching every equal end would leave, on one side only, dims that are 1 at the
        traced size but not constants (a strided conv's ``h``, ``w`` at its last stage), they
        would be hinted to 1 for good; a flatten ``[b, c, h, w] -> [b, c, 1]`` merges them
        instead. So the matched ends give back their pairs traced at 1 until the middle holds
        a dim on both sides (``1 = h*w``). Where no pair traced at 1 is next to the middle, a
        middle left alone before every matched dim joins the first pair, the only dim the
        row-major order lets it join (``[batch, 16, q, 4] -> [16, q, 4]`` at batch 1 is
        ``[batch*16, q, 4]``; a real 1 there merges just as well, and an output middle
        ``[1, 8, 16] <- [$v, 16]`` is left to :meth:`factor` once ``$v`` is known). With a pair
        on each side, an input middle joins the pair whose output dim is the Reshape's own
        ``-1`` (``minus_one``), the dim the model left to the element count: ``[s, batch, 4, 8]
        -> [s, -1, 8]`` is ``[s, batch*4, 8]``, not ``-1 = 4`` with the batch left to match
        nothing; one after every matched dim is a real 1 (a reduced dim squeezed out,
        ``[1, 4, 1] -> [1, 4]``), hinted to 1 as before; else the pairs of dims still unknown on
        both sides are given back, to be split once they are known (``[8, $q, 2] ->
        [8, 1, 4, 2]``: ``$q`` is ``batch*4`` once an upstream Reshape is decided, and matching
        it with the 4 would put the batch beside the heads for good). Unbounded (as many as
        match) otherwise.
        """
        free = (len(src) + len(dst), len(src) + len(dst))
        lead = 0
        while lead < min(len(src), len(dst)) and (
            same_lead(lead) if same_lead else same(src[lead], dst[lead])
        ):
            lead += 1
        trail = 0
        while min(len(src), len(dst)) - trail - 1 >= lead and same(src[-1 - trail], dst[-1 - trail]):
            trail += 1

        def middle(side: list[Dim]) -> list[Dim]:
            return side[lead : len(side) - trail]

        def loose(side: list[Dim]) -> bool:
            mid = middle(side)
            return bool(mid) and all(not d.is_const() and self._traced_at(d) == 1 for d in mid)

        def open_pair(i: int, j: int) -> bool:
            return bool(self.unknowns(src[i]) and self.unknowns(dst[j]))

        if not (loose(src) and not middle(dst)) and not (loose(dst) and not middle(src)):
            return free
        while not (middle(src) and middle(dst)):
            if lead and self._traced_at(src[lead - 1]) == 1:
                lead -= 1
            elif trail and self._traced_at(src[-trail]) == 1:
                trail -= 1
            elif not lead:  # the middle leads: it joins the one pair next to it
                if not trail:
                    return free
                trail -= 1
            elif not trail:  # a 1 last, after every matched dim: a real 1, hinted so
                return free
            elif not middle(dst) and minus_one == lead - 1:
                lead -= 1
            elif not middle(dst) and minus_one == len(dst) - trail:
                trail -= 1
            elif open_pair(lead - 1, lead - 1) or open_pair(-trail, -trail):
                lead -= open_pair(lead - 1, lead - 1)
                trail -= open_pair(-trail, -trail)
            else:
                return free
        return lead, trail

    def _traced_at(self, d: Dim) -> int | None:
        try:
            return d.evaluate(self.traced)
        except KeyError:
            return None

    def _order(self, atom: str) -> tuple[int, int, str]:
        """Symbols in the order of the input axes they name; then everything else."""
        origin = self.a.atoms[atom].origin
        if self.a.atoms[atom].kind == "sym" and origin:
            return (0, min(axis for _, axis in origin), atom)
        return (1, 0, atom)

    def factor(
        self,
        lhs: Dim,
        rhs: Dim,
        positions: list[Dim] | None = None,
        sources: list[Dim] | None = None,
    ) -> None:
        """Split a known product over a product of unknowns, outer symbols first.

        ``$v1*$v2 == batch*seq`` (a Reshape unflattening ``batch*seq`` into two dims) gives
        ``$v1 = batch, $v2 = seq`` when the traced sizes agree, taking the symbols in the order
        of the input axes they name (flattening keeps that order). ``positions`` and
        ``sources``: a Reshape's output and input dims holding the two products (see
        :meth:`_fits`).
        """
        sides = [self.resolve(lhs), self.resolve(rhs)]
        for unknown_side, known_side in (sides, sides[::-1]):
            if not unknown_side.is_monomial() or not known_side.is_monomial():
                continue
            ((umono, ucoef),) = unknown_side.terms.items() or [((), 0)]
            ((kmono, kcoef),) = known_side.terms.items() or [((), 0)]
            if ucoef == 0 or kcoef % ucoef or self.unknowns(known_side):
                continue
            if known_side is sides[1]:  # only an output's unknowns: see :meth:`_cancel_known`
                umono, kmono = self._cancel_known(umono, kmono)
            if len(umono) < 2 or any(
                self.a.atoms[x].kind not in ("var", "data", "derived") for x in umono
            ):
                continue
            if len(set(umono)) != len(umono):
                continue
            order = sorted(umono, key=lambda x: int(x[2:]) if x[2:].isdigit() else 0)
            if positions is not None:  # a Reshape's output dims: outer dims take outer symbols
                rank = {x: i for i, d in enumerate(positions) for x in d.atoms()}
                order = sorted(umono, key=lambda x: rank.get(x, len(positions)))
            atoms = sorted(kmono, key=self._order)
            coef = kcoef // ucoef
            ones = [x for x in order if self._dropped_one(x)]
            rest = [x for x in order if x not in ones]
            fits = self._fits(positions or [], sources or [])
            row = self._row(sources, kmono, kcoef) if known_side is sides[1] else None
            plan = self._walk(positions, rest, row) if row is not None and not ones else None
            if plan is None and rest:
                plan = self._split(rest, atoms, coef, fits, row if ucoef == 1 else None)
            if plan is None:
                return
            plan.update({x: Dim.const(1) for x in ones})
            for var, value in plan.items():
                if self.breaks_hard(var, value):
                    return
            for var, value in plan.items():
                if var not in self.sol.values:
                    self.assign(var, value, "hint")
            self.drain()
            return

    def _cancel_known(
        self, umono: tuple[str, ...], kmono: tuple[str, ...]
    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Drop from both products the symbols already known on the unknown side: a Reshape
        ``[batch*4, h*w] -> [batch, $a, $b, $c]`` whose ``batch`` matched is the split
        ``$a*$b*$c == 4*h*w``, still in the Reshape's order (:meth:`_fits`). Only where the
        unknowns are the output's dims (``positions``): unknowns of its input (a -1 dim of an
        earlier Reshape, ``[batch, $q, $c] -> [batch*seq*2, 8]``) have no place in that order,
        and a split of what is left by traced size alone (``$q = seq``) would pre-empt the
        constraints that decide them (ConvBERT's unfold, whose window count is ``seq + pad -
        (k - 1)``: its constants, traced at ``seq``'s size, then fitted ``seq`` too and were
        refused as ambiguous); a known symbol there leaves the product unsplit, as before."""
        rest = list(kmono)
        left = []
        for x in umono:
            if self.a.atoms[x].kind not in ("var", "data", "derived") and x in rest:
                rest.remove(x)
            else:
                left.append(x)
        return tuple(left), tuple(rest)

    def _dropped_one(self, atom: str) -> bool:
        """Whether a broadcast dropped ``atom`` (every operand traced at 1) for a dim that is
        now the constant 1: the analysis wrote that broadcast's output as 1, which holds only if
        ``atom`` is 1 too (a key's heads dim, beside a query's heads count of 1)."""
        kept = self.a.dropped_ones.get(atom)
        return kept is not None and self.resolve(kept) == Dim.const(1)

    def _fits(self, dst: list[Dim], src: list[Dim]) -> Callable[[str, str], bool]:
        """Whether a Reshape can hand input symbol ``x`` whole to the output dim holding
        unknown ``u``: a Reshape keeps the row-major order, so the elements inside that output
        dim (its stride) must be a divisor of those inside ``x``, and the output dim must span
        all of ``x``. Checked at the traced sizes, where a right split holds too. At batch 1,
        ``[batch, seq, 18] -> [-1, 9, 1]`` reads ``1 = batch`` by size alone; but a last dim of
        1 cannot hold the outermost input dim (its stride 1 does not span ``seq*18``): ``batch``
        goes to the ``-1``. A symbol inside a product dim (``batch*4``) may sit at any stride
        the dim's other factors leave it (:meth:`_strides`); one traced at 1 there has no place
        the traced sizes show, and fits anywhere, like anything else."""
        if not dst or not src:
            return lambda u, x: True
        try:
            dst_sizes = [d.evaluate(self.traced) for d in dst]
            src_sizes = [d.evaluate(self.traced) for d in src]
        except KeyError:
            return lambda u, x: True
        where = {x: i for i, d in enumerate(dst) for x in d.atoms()}
        strides = self._strides(src, src_sizes)

        def fits(u: str, x: str) -> bool:
            if u not in where or x not in strides:
                return True
            i = where[u]
            inner_dst = math.prod(dst_sizes[i + 1 :])
            span = inner_dst * dst_sizes[i]
            return inner_dst > 0 and any(
                s % inner_dst == 0 and span % (s * self.traced[x]) == 0 for s in strides[x]
            )

        return fits

    def _strides(self, src: list[Dim], sizes: list[int]) -> dict[str, list[int]]:
        """The strides (elements inside, at the traced sizes) each symbol of a Reshape's input
        may have: a dim that is one symbol alone has its own; a symbol once in a product dim
        (``batch*4``, flattened from ``[batch, 4]`` or ``[4, batch]``) the dim's stride times
        any divisor of the rest of the dim; one traced at 1 there (or twice) is left out."""
        out: dict[str, list[int]] = {}
        for k, d in enumerate(src):
            inner = math.prod(sizes[k + 1 :])
            if d.is_atom():
                out[d.atoms().pop()] = [inner]
                continue
            if not d.is_monomial() or sizes[k] <= 0:
                continue
            ((mono, _),) = d.terms.items()
            for x in set(mono):
                size = self.traced.get(x, 0)
                if mono.count(x) != 1 or size <= 1 or sizes[k] % size:
                    continue
                rest = sizes[k] // size
                out[x] = [inner * q for q in range(1, rest + 1) if rest % q == 0]
        return out

    def _split(
        self,
        order: list[str],
        atoms: list[str],
        coef: int,
        fits: Callable[[str, str], bool] = lambda u, x: True,
        row: list[str | int] | None = None,
    ) -> dict[str, Dim] | None:
        """Give each unknown (in order) a sub-product of ``coef * atoms`` with its traced value.

        Symbols traced at 1 go to the unknowns traced at 1, one each in order, the last of them
        taking the rest: joining one to an unknown of another size (``$q*8``) would merge an
        axis of the input into a feature axis, which the traced sizes cannot show. A Reshape
        ``[b, h*w, 16] -> [b, 1, -1, 2]`` traced at ``h = w = 1`` keeps ``h*w`` whole
        (``[b, h*w, 8, 2]``, heads beside the tokens), not ``[b, h, w*8, 2]``. The other
        symbols are split by :meth:`_split_sized`.
        """
        ones = [x for x in atoms if self.traced[x] == 1]
        slots = [v for v in order if self.traced[v] == 1]
        if not ones or not slots or len(ones) <= len(slots):
            return self._split_sized(order, atoms, coef, fits, row)
        others = [v for v in order if v not in slots]
        big = [x for x in atoms if x not in ones]
        plan: dict[str, Dim] | None = {}
        if others:
            plan = self._split_sized(others, big, coef, fits)
        elif big or coef != 1:
            return None
        if plan is None:
            return None
        for i, var in enumerate(slots):
            took = ones[i:] if i == len(slots) - 1 else ones[i : i + 1]
            value = Dim.const(1)
            for x in took:
                value = value * Dim.sym(x)
            plan[var] = value
        return plan

    def _split_sized(
        self,
        order: list[str],
        atoms: list[str],
        coef: int,
        fits: Callable[[str, str], bool] = lambda u, x: True,
        row: list[str | int] | None = None,
    ) -> dict[str, Dim] | None:
        """Give each unknown (in order) a sub-product of ``coef * atoms`` with its traced value.

        A symbol whose traced value equals an unknown's exactly goes to that unknown first (at
        batch 1, ``batch`` divides every size, so "takes what divides" alone would hand it to
        whichever unknown comes first), and a symbol traced at 1 only where the Reshape's order
        lets it (``fits``: any unknown traced at 1 matches it by size); the rest is taken greedily, outer symbols first, and the
        last unknown takes what is left. With ``row`` (the input's factors in row-major order,
        :meth:`_row`), the greedy walk takes them in that order, constants in their place.
        """
        plan: dict[str, Dim] = {}
        atoms = list(atoms)
        for var in order if len(order) > 1 else ():  # a lone unknown takes the whole product
            exact = self._exact(var, order, atoms, coef, fits)
            if exact is not None:
                plan[var] = Dim.sym(exact)
                atoms.remove(exact)
                if row is not None:
                    row.remove(exact)
        rest = [v for v in order if v not in plan]
        if not rest:
            return plan if not atoms and coef == 1 else None
        if row is not None:
            return self._take_in_order(rest, row, plan)
        for i, var in enumerate(rest):
            want = self.traced[var]
            if i == len(rest) - 1:
                value = Dim.const(coef)
                for x in atoms:
                    value = value * Dim.sym(x)
            else:
                prod, took = 1, 0
                while took < len(atoms) and want % (prod * self.traced[atoms[took]]) == 0:
                    prod *= self.traced[atoms[took]]
                    took += 1
                if want % prod or coef % (want // prod):
                    return None
                factor = want // prod
                value = Dim.const(factor)
                for x in atoms[:took]:
                    value = value * Dim.sym(x)
                atoms = atoms[took:]
                coef //= factor
            try:
                if value.evaluate(self.traced) != want:
                    return None
            except KeyError:
                return None
            plan[var] = value
        return plan

    def _row(
        self, sources: list[Dim] | None, kmono: tuple[str, ...], coef: int
    ) -> list[str | int] | None:
        """The factors of a Reshape's input dims ``sources`` in row-major order, outer first (a
        dim's symbols in :meth:`_order`, then its constant), holding exactly ``kmono`` and
        ``coef`` (the input product's, known symbols cancelled); None where they do not (a
        dim still unknown, a sum, a product from elsewhere)."""
        if not sources:
            return None
        row: list[str | int] = []
        for d in sources:
            d = self.resolve(d)
            if not d.is_monomial() or self.unknowns(d):
                return None
            ((mono, c),) = d.terms.items() or [((), 0)]
            names: list[str] = sorted(mono, key=self._order)
            row.extend(names)
            row += [c] if c != 1 else []
        extra = Counter(x for x in row if isinstance(x, str)) - Counter(kmono)
        for x in extra.elements():
            row.remove(x)
        consts = [x for x in row if isinstance(x, int)]
        if Counter(x for x in row if isinstance(x, str)) != Counter(kmono):
            return None
        if math.prod(consts) != coef or any(c <= 0 for c in consts):
            return None
        return row

    def _walk(
        self, positions: list[Dim] | None, rest: list[str], row: list[str | int]
    ) -> dict[str, Dim] | None:
        """The split of a Reshape's output dims ``positions`` (unknowns ``rest`` and constants)
        walking the input's factors ``row`` in order, where two factors share a traced size
        above 1 that an unknown has too (the size cannot say which is which), no unknown is
        traced at 1 (those keep :meth:`_split`'s rules) and every output dim is one unknown or a
        constant; else None. Dynamo's TimeSformer views ``[batch, h*w*4, C]`` as
        ``[batch*h*w, 4, C]`` in one Reshape: traced at ``h = w = 4``, the frames' dim took
        ``h`` by its size; in order it is the 4 frames, last in the row."""
        sizes = Counter(self._size(x) for x in row)
        if not positions or not any(sizes[self.traced[v]] > 1 for v in rest if self.traced[v] > 1):
            return None
        if any(self.traced[v] == 1 for v in rest):
            return None
        items: list[str | int] = []
        for d in positions:
            d = self.resolve(d)
            if d.is_const() and (d.value or 0) > 0:
                items.append(d.value or 0)
            elif d.is_atom() and d.atoms() <= set(rest):
                items.append(d.atoms().pop())
            else:
                return None
        if sorted(x for x in items if isinstance(x, str)) != sorted(rest):
            return None
        return self._take_in_order(items, row, {})

    def _take_in_order(
        self, rest: Sequence[str | int], row: list[str | int], plan: dict[str, Dim]
    ) -> dict[str, Dim] | None:
        """Give each unknown of ``rest`` (in order; a constant there is an output dim of that
        size, taken but not planned) the next factors of ``row`` whose product is its traced
        size, a constant split where only part of it fits; the last takes what is left.
        ``[batch, 4, h, w] -> [8, 16]`` traced at ``h = 4``: ``batch*4`` and ``h*w``, not
        ``batch*h`` (the 4 frames lie between them)."""
        row = list(row)
        for i, var in enumerate(rest):
            want, value, prod = self._size(var), Dim.const(1), 1
            while row and (i == len(rest) - 1 or want % (prod * self._size(row[0])) == 0):
                prod *= self._size(row[0])
                value = value * (Dim.const(row[0]) if isinstance(row[0], int) else Dim.sym(row[0]))
                row.pop(0)
            if prod != want and row and isinstance(row[0], int) and row[0] % (want // prod) == 0:
                value, row[0] = value * Dim.const(want // prod), row[0] // (want // prod)
                prod = want
            if prod != want:
                return None
            if isinstance(var, str):
                plan[var] = value
        return plan

    def _size(self, item: str | int) -> int:
        return item if isinstance(item, int) else self.traced[item]

    def _exact(
        self,
        var: str,
        order: list[str],
        atoms: list[str],
        coef: int,
        fits: Callable[[str, str], bool],
    ) -> str | None:
        """The symbol of ``atoms`` traced at ``var``'s size that goes to ``var`` whole, if any.

        One traced at 1 goes only where the Reshape's order lets it (``fits``: any unknown
        traced at 1 matches it by size). Above 1, the order decides where equal traced sizes
        make the size alone ambiguous (two symbols, or one and the constant factor, of that
        size): the first symbol that fits, else none where the constant can fill ``var``
        (``[batch*4, h*w, C] -> [batch, 4, h, w, C]`` traced at ``h = w = 4``: the 4 frames
        sit between the batch and ``h``, where neither ``h`` nor ``w`` can, each fitting a later
        dim of its size). A symbol that fits no other dim of its size, and a size only one symbol
        has, are matched as before, whatever the order says (XLNet's relative shift ``[b, n, k, q] ->
        [b, n, q, k]`` reinterprets its rows, and no reading fits it).
        """
        want = self.traced[var]
        same = [x for x in atoms if self.traced[x] == want]
        if want == 1:
            return next((x for x in same if fits(var, x)), None)
        if len(same) + (coef % want == 0) < 2:
            return same[0] if same else None
        placed = next((x for x in same if fits(var, x)), None)
        if placed is not None:
            return placed
        elsewhere = [
            x for x in same if any(fits(u, x) for u in order if u != var and self.traced[u] == want)
        ]
        if coef % want == 0 and elsewhere == same:
            return None
        return same[0] if same else None

    def factor_pending(self, *, data_only: bool = False) -> None:
        """Hard products of unknowns still open (``$v1*$v2 == height*width``, a Resize to the
        patch grid) are split symbol by symbol, like a Reshape's middle dims.

        ``data_only``: only products holding a data dim, against symbols none of which is 1 at
        the traced size (so the split cannot hand a symbol to the wrong factor). Run before data
        dims keep their traced size: a position index ``[1, seq]`` tiled by a repeat of 1 and
        multiplied with the keys (``$d2*$v5 == seq``) takes ``seq`` on its data dim; keeping
        the data dim first would leave ``seq`` to the repeat, and no integer repeat is ``seq/8``.
        """
        for cid, c in enumerate(self.hard):
            if cid in self.done or c.lhs is None or c.rhs is None:
                continue
            expr = self.resolve(self.exprs[cid])
            unknown = self.unknowns(expr)
            if len(unknown) < 2:
                continue
            if data_only and not self._clear_data_split(expr, unknown):
                continue
            self.factor(c.lhs, c.rhs)

    def _clear_data_split(self, expr: Dim, unknown: set[str]) -> bool:
        """Whether ``expr`` holds a data dim and only symbols traced above 1 besides unknowns."""
        known = expr.atoms() - unknown
        return any(self.a.atoms[x].kind == "data" for x in unknown) and all(
            self.traced.get(x, 0) > 1 for x in known
        )

    def relate(self) -> None:
        """Turn hard constraints among symbols alone into relations (module docstring)."""
        syms = {n for n, a in self.a.atoms.items() if a.kind == "sym"}
        changed = True
        while changed:
            changed = False
            for cid, c in enumerate(self.hard):
                if cid in self.done:
                    continue
                expr = self.resolve(self.exprs[cid])
                if expr.value == 0 or not expr.atoms() or not expr.atoms() <= syms:
                    continue
                found = self._relation(expr, syms)
                if found is None:
                    continue
                sym, value = found
                self.assign(sym, value, "relation")
                self.sol.relations[sym] = (value, c)
                self.done.add(cid)
                self.drain()
                changed = True

    def _relation(self, expr: Dim, syms: set[str]) -> tuple[str, Dim] | None:
        """``(s, value)`` when ``expr == 0`` reads ``s == value`` with ``value`` a sum of products
        of the other symbols (positive coefficients, no constant, not a lone symbol), true at the
        traced sizes."""
        terms = list(expr.terms.items())
        if any(not m for m, _ in terms):
            return None
        common = Counter(terms[0][0])
        for m, _ in terms[1:]:
            common &= Counter(m)  # the atoms every term holds, with repetition
        g = 0
        for _, coef in terms:
            g = math.gcd(g, coef)
        shared = tuple(sorted(common.elements()))
        reduced = expr.exact_div(Dim({shared: g})) if shared or g > 1 else expr
        if reduced is None:
            return None
        options = []
        for m, coef in reduced.terms.items():
            if len(m) != 1 or abs(coef) != 1 or m[0] not in syms:
                continue
            sym = m[0]
            value = Dim.sym(sym) - reduced if coef == 1 else reduced + Dim.sym(sym)
            vt = value.terms
            if sym in value.atoms() or not vt or any(not mm or c <= 0 for mm, c in vt.items()):
                continue
            if value.is_atom():
                # ``seq == tgt``: two names traced at one value, and which of them a traced
                # constant stands for is a guess; that stays a conflict naming both.
                continue
            try:
                if value.evaluate(self.traced) != self.traced[sym]:
                    continue
            except KeyError:
                continue
            options.append((-len(vt), self._order(sym), sym, value))
        if not options:
            return None
        _, _, sym, value = min(options, key=lambda o: (o[0], o[1]))
        return sym, value

    def run(self) -> Solution:
        self.drain()
        self.relate()
        self.apply_hints()
        self.factor_pending(data_only=True)
        self.default("data")
        self.apply_hints()
        self.factor_pending()
        self.default("var")
        for name, atom in self.a.atoms.items():
            if atom.kind == "derived" and name not in self.sol.values:
                self.sol.opaque.add(name)
        self.queue.extend(range(len(self.hard)))
        self.drain()
        self.relate()
        self.unify_runtime()
        self.judge_value_divs()
        for cid, c in enumerate(self.hard):
            if cid in self.done:
                continue
            expr = self.resolve(self.exprs[cid])
            if expr.value != 0:
                self.sol.conflicts.append(Conflict(c, expr))
        return self.sol

    def judge_value_divs(self) -> None:
        """A run-time division whose operands were all decided constants is that constant when
        constraints are judged (torchscript's chunk size ``(12 + 2) // 3`` is 4 at every size).
        Only judging: every unknown is decided by now, so this can only show a constraint holds;
        the rewritten graph still computes the division at run time."""
        for atom, (num, den) in self.a.value_divs.items():
            if atom in self.sol.values:
                continue
            n, d = self.resolve(num), self.resolve(den)
            nv, dv = n.value, d.value
            if nv is not None and dv is not None and dv > 0 and nv >= 0:
                self.assign(atom, Dim.const(nv // dv), "forced")

    def unify_runtime(self) -> None:
        """Two run-time dims the graph requires equal are one dim (ONNX Runtime checks it).

        ``ceil(H/2)`` and ``ceil((H-1)/2)`` (Swin's patch merging slices) agree for every even
        ``H``; the static graph already assumes an even height, so the symbolized one may too.
        """
        runtime = {n for n, a in self.a.atoms.items() if a.kind == "opaque"} | self.sol.opaque
        for cid, c in enumerate(self.hard):
            if cid in self.done:
                continue
            expr = self.resolve(self.exprs[cid])
            terms = expr.terms
            if len(terms) != 2 or sorted(terms.values()) != [-1, 1]:
                continue
            atoms = [m[0] for m in terms if len(m) == 1 and m[0] in runtime]
            if len(atoms) != 2 or self.traced[atoms[0]] != self.traced[atoms[1]]:
                continue
            keep, drop = sorted(atoms, key=self._created)
            self.assign(drop, Dim.sym(keep), "assumed")
            self.done.add(cid)
            self.sol.assumed.append((c, drop, keep))


def solve(analysis: ShapeAnalysis) -> Solution:
    """Decide every unknown of ``analysis`` (see the module docstring for the order)."""
    return _Solver(analysis).run()
