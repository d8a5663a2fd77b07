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

from onnxsurgery.shapes.analysis import BroadcastSite, Constraint, ShapeAnalysis
from onnxsurgery.shapes.dims import Dim
from onnxsurgery.shapes.reshape_reading import ReshapeReading
from onnxsurgery.shapes.runtime_values import RuntimeValues
from onnxsurgery.shapes.solution import Conflict, Solution

__all__ = ["Conflict", "Solution", "misfollowed", "solve", "unmatched_ones"]


class _Solver(ReshapeReading, RuntimeValues):
    def __init__(self, analysis: ShapeAnalysis) -> None:
        self.a = analysis
        self.traced = analysis.traced_values()
        self.sol = Solution()
        self.dependents: dict[str, set[str]] = defaultdict(set)
        self.hard = [c for c in analysis.constraints if not c.soft]
        self.soft = [c for c in analysis.constraints if c.soft]
        self.divs = [
            (c.lhs, c.rhs)
            for c in self.hard
            if c.op == "Div" and c.lhs is not None and c.rhs is not None
        ]
        self.watch: dict[str, set[int]] = defaultdict(set)
        self.exprs: list[Dim] = [c.expr for c in self.hard]
        self.done: set[int] = set()
        self.queue: deque[int] = deque(range(len(self.hard)))
        self.floor_atoms: dict[tuple[str, str, int], str] = {}
        #: run-time divisions decided as polynomials by :meth:`settle_value_divs`
        self.floor_divs: dict[str, Dim] = {}
        self.multipliers: dict[str, set[str]] | None = None  # :meth:`_chunk_indices`
        self.aligns: dict[str, list[Constraint]] = defaultdict(list)
        self.hinting: Constraint | None = None  # the soft constraint being read, for hinted_by
        for c in self.soft:  # a Reshape's unknowns, in its input or its output
            for x in {x for d in (c.src or []) + (c.dst or []) for x in d.atoms()}:
                self.aligns[x].append(c)

    def unknowns(self, d: Dim) -> set[str]:
        return {
            x
            for x in d.atom_set()
            if self.a.atoms[x].kind in ("var", "data", "derived") and x not in self.sol.opaque
        }

    def resolve(self, d: Dim) -> Dim:
        return self.sol.resolve(d)

    def assign(self, atom: str, value: Dim, how: str) -> None:
        vals = self.sol.values
        changed = {atom}
        new = atom not in vals
        vals[atom] = value
        self.sol.how[atom] = how
        if how == "hint" and self.hinting is not None:
            self.sol.hinted_by[atom] = self.hinting
        for dep in self.dependents.pop(atom, set()):
            if dep in vals:
                vals[dep] = vals[dep].subs({atom: value})
                changed.add(dep)
                for x in vals[dep].atoms():
                    self.dependents[x].add(dep)
        self.sol.changed(changed, new)
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
        if self.a.value_divs and self.settle_value_divs():
            self._drain()
        if self.a.value_mods and self.settle_value_mods():
            self._drain()
        if self.a.value_mods and self.relate_remainders():
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
                    self.hinting = c
                    self.align(c)
                self.hinting = None
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
                self.hinting = c
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
        self.hinting = None

    def try_hint(self, lhs: Dim, rhs: Dim) -> None:
        found = self.solve_for(self.resolve(lhs - rhs))
        if found is not None and not self.breaks_hard(*found):
            self.assign(found[0], found[1], "hint")
            self.drain()

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
        for read, (value, _) in self.a.read_as.items():
            self.assign(read, value, "read")
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
        self.relate_remainders()
        self.unify_value_mods()
        for cid, c in enumerate(self.hard):
            if cid in self.done:
                continue
            expr = self.resolve(self.exprs[cid])
            if expr.value != 0:
                self.sol.conflicts.append(Conflict(c, expr))
        return self.sol

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


def misfollowed(analysis: ShapeAnalysis, sol: Solution) -> dict[BroadcastSite, int]:
    """Broadcasts whose every operand is 1 at the traced size, whose output the analysis wrote
    following an unknown ``sol`` made the constant 1, while an operand it dropped
    (``dropped_ones``) is a size that varies: at run time the output is that size, not 1, and
    the shapes written downstream hold only at the traced size (SwiftFormer's global query
    ``[batch, 1, C]`` tiled by a repeat of 1 and multiplied with the keys ``[batch, h*w, C]``
    at a 1x1 grid: the product followed the repeat, and the Reshape back to the grid read
    ``[batch, 1, 1, C]``, which ONNX Runtime refused at a 2x2 grid). Each such broadcast and
    the place of the operand to follow (:attr:`~.analysis.ShapeAnalysis.follow`), for
    :func:`~.propagation.propagate` to follow it; none when every broadcast holds."""
    one = Dim.const(1)
    found: dict[BroadcastSite, int] = {}
    for atom, kept in analysis.dropped_ones.items():
        at = analysis.dropped_at.get(atom)
        if at is None or at[0] in analysis.follow or sol.resolve(kept) != one:
            continue
        if not sol.resolve(Dim.sym(atom)).is_const():
            found.setdefault(*at)
    return found


def unmatched_ones(analysis: ShapeAnalysis, sol: Solution) -> list[Constraint]:
    """Where every operand of a broadcast axis is 1 at the traced size, the graph writes no
    equality (a 1 fits either side); but an unknown there that ``sol`` made a size that varies,
    other than the size the output follows, breaks that broadcast at every other size (ONNX
    Runtime refuses ``2`` against ``4``): the equalities that make them one, for the caller
    to add and solve again. SwiftFormer at batch 1 views its tokens ``[batch, h*w, C]`` back
    as ``[batch, $a, $b, C]`` at a 1x1 grid and adds it to ``[batch, C, h, w]``: the split
    ``$a = 1, $b = h*w`` fits the element count, not the Add."""
    found: list[Constraint] = []
    for node, dims, out in analysis.ones_met:
        target = sol.resolve(out)
        if target.is_const():
            continue
        for d in dims:
            got = sol.resolve(d)
            if d == out or got.is_const() or got == target:
                continue
            if not any(analysis.atoms[x].kind in ("var", "data", "derived") for x in d.atoms()):
                continue  # two symbols: which one the graph means, the check shows
            why = f"broadcast: {d} meets {out} where both are 1 at the traced size"
            found.append(Constraint(d - out, node, "", why, False, d, out))
    return found


def solve(analysis: ShapeAnalysis) -> Solution:
    """Decide every unknown of ``analysis`` (see the module docstring for the order)."""
    return _Solver(analysis).run()
