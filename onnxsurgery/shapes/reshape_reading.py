"""How the solver reads a Reshape: which input dims each output dim keeps, merges or splits.

A Reshape keeps row-major order and its element count; its constant target and the unknowns the
export left in it say little else. :class:`ReshapeReading` holds the solver's steps that read
one (``_Solver`` in :mod:`.solver` runs them, with the state they share):

- :meth:`~ReshapeReading.align`: leading and trailing dims that keep their size stay the same
  dim (hints), with the dims traced at 1 between them (``_ends_of_ones``);
- :meth:`~ReshapeReading.factor`: an unknown's product split over the symbols it must hold, in
  row-major order where equal traced sizes would let a factor jump across (``_split``,
  ``_split_sized``, ``_walk``), known symbols cancelled first on the output's side;
- :meth:`~ReshapeReading.factor_pending`: the splits that had to wait for other dims.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from onnxsurgery.shapes.analysis import Constraint, ShapeAnalysis
from onnxsurgery.shapes.dims import Dim
from onnxsurgery.shapes.solution import Solution

__all__ = ["ReshapeReading"]


class ReshapeReading:
    """The solver's Reshape steps, over the state ``_Solver`` keeps (declared below)."""

    a: ShapeAnalysis
    traced: dict[str, int]
    sol: Solution
    hard: list[Constraint]
    divs: list[tuple[Dim, Dim]]  # ``lhs`` and ``rhs`` of the hard constraints of exact Divs
    exprs: list[Dim]
    done: set[int]

    if TYPE_CHECKING:  # the solver's own steps these call

        def unknowns(self, d: Dim) -> set[str]: ...
        def resolve(self, d: Dim) -> Dim: ...
        def assign(self, atom: str, value: Dim, how: str) -> None: ...
        def solve_for(self, expr: Dim) -> tuple[str, Dim] | None: ...
        def drain(self) -> None: ...
        def breaks_hard(self, atom: str, value: Dim) -> bool: ...
        def try_hint(self, lhs: Dim, rhs: Dim) -> None: ...

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
        for lhs, rhs in self.divs:
            counts = [x for x in lhs.atoms() if self._is_count_of_one(x)]
            if counts and any(self.resolve(rhs) == self.resolve(d) for d in sides):
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
        a dim on both sides (``1 = h*w``), except a pair that is one known dim on both sides
        (the batch at batch 1, decided upstream): the middle would join it only to be hinted 1
        for good (CANINE's ``[batch, n - 1, 4, C] -> [batch, -1, C]`` read ``n - 1 = 1``, its
        slice start 1 as ``n - 1``, and came back wrong); it reads as at batch 2. Where no pair traced at 1 is next to the middle, a
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

        def one_to_give(i: int) -> bool:  # a pair traced at 1 that is not one dim on both sides
            return self._traced_at(src[i]) == 1 and not (
                src[i] == dst[i] and not self.unknowns(src[i])
            )

        if not (loose(src) and not middle(dst)) and not (loose(dst) and not middle(src)):
            return free
        while not (middle(src) and middle(dst)):
            if lead and one_to_give(lead - 1):
                lead -= 1
            elif trail and one_to_give(-trail):
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
