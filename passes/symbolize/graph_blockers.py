"""symbolize's blockers the graph shows as a whole, each kind a declared unit, as
:data:`~.rules.CONST_RULES` are for one constant read: shape constraints that hold only at the
traced size (the solver's conflicts), loops Python ran at trace time (one slice per index, or a
chain of identical appends along a symbolic axis), and strided windows padded by TensorFlow's
'same' rule for the traced length (:mod:`.baked`).

Each :class:`GraphRule` has a ``kind``, ``sites`` (the places it looks at: the conflicts, the
nodes that take one index of a tensor, chains of Concat, window ops), ``check(site)`` returning
None where it applies or a short reason why not, ``produce(site)``: the :class:`~.blockers.Blocker`
(its words from :mod:`.wording` under its kind), and ``alternative(site)``: a rewrite reference
cases may choose instead (None for most kinds). :data:`GRAPH_RULES` lists them; rules over the
same sites are tried in order, the first that applies deciding, and :func:`find_blockers` gives
what they found in that order for :func:`~.plan.plan_symbolize`:

    for found in find_blockers(analysis, solution):
        found.blocker, found.rule.alternative(found.site)
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from itertools import groupby
from typing import Any

import numpy as np
import onnx

from onnxsurgery.passes.symbolize.baked import (
    Window,
    baked_axes,
    same_everywhere,
    tf_padding,
    window,
)
from onnxsurgery.passes.symbolize.blockers import Blocker
from onnxsurgery.passes.symbolize.wording import (
    fix_text,
    fixed_text,
    sym_tuple,
    symbol_hint,
    why_text,
)
from onnxsurgery.shapes.analysis import UNSIZED, ShapeAnalysis
from onnxsurgery.shapes.dims import Dim
from onnxsurgery.shapes.solver import Conflict, Solution

__all__ = [
    "GraphRule",
    "Found",
    "GRAPH_RULES",
    "find_blockers",
    "ConflictSite",
    "IndexSite",
    "ChainSite",
    "WindowSite",
]


class GraphRule:
    """One blocker kind the graph shows as a whole: ``sites`` the places it looks at, ``check``
    whether it applies at one, ``produce`` the blocker there."""

    kind = ""
    #: its blockers come before the constants' in the plan (the solver's conflicts: what other
    #: blockers often follow from)
    leads = False

    @staticmethod
    def sites(a: ShapeAnalysis, sol: Solution) -> Iterable[Any]:
        raise NotImplementedError

    def check(self, site: Any) -> str | None:
        """None where the rule applies at ``site``, else a short reason why not."""
        raise NotImplementedError

    def produce(self, site: Any) -> Blocker:
        raise NotImplementedError

    def alternative(self, site: Any) -> tuple[str, tuple[str, str | None]] | None:
        """A rewrite reference cases may choose instead of the blocker: (blocker node, what the
        plan records for it); None where there is none."""
        return None


@dataclass
class Found:
    """A blocker, the rule that produced it and the site it was found at."""

    rule: GraphRule
    site: Any
    blocker: Blocker


def find_blockers(
    a: ShapeAnalysis, sol: Solution, rules: list[GraphRule] | None = None
) -> list[Found]:
    """What ``rules`` (:data:`GRAPH_RULES`) find: consecutive rules over the same sites are
    tried in order at each, the first that applies deciding; in the rules', then the sites'
    order."""
    found: list[Found] = []
    for sites, group in groupby(GRAPH_RULES if rules is None else rules, key=lambda r: r.sites):
        tried = list(group)
        for site in sites(a, sol):
            rule = next((r for r in tried if r.check(site) is None), None)
            if rule is not None:
                found.append(Found(rule, site, rule.produce(site)))
    return found


# -- the solver's conflicts ---------------------------------------------------------------------


@dataclass
class ConflictSite:
    """One constraint the solver could not satisfy, its sides resolved and their common factor
    cancelled (``batch*12 == batch*seq*3`` reads ``4 == seq``)."""

    analysis: ShapeAnalysis
    solution: Solution
    conflict: Conflict

    @cached_property
    def cancelled(self) -> tuple[Dim, Dim]:
        sol, c = self.solution, self.conflict.constraint
        lhs = sol.resolve(c.lhs) if c.lhs is not None else self.conflict.residual
        rhs = sol.resolve(c.rhs) if c.rhs is not None else Dim.const(0)
        return _cancel(lhs, rhs)

    @cached_property
    def twins(self) -> bool:
        """Whether the sides are two different input symbols (``seq == tgt``)."""
        pair = {str(d) for d in self.cancelled}
        return pair <= set(self.analysis.symbols) and len(pair) == 2

    @cached_property
    def sides(self) -> tuple[Dim, Dim]:
        """The sides as said: twins in one order, so ``seq == tgt`` and ``tgt == seq`` are one
        kind of blocker."""
        lhs, rhs = self.cancelled
        if self.twins:
            lhs, rhs = sorted((lhs, rhs), key=str)
        return lhs, rhs

    @cached_property
    def syms(self) -> str:
        lhs, rhs = self.cancelled
        return symbol_hint(self.analysis.symbols, lhs.atoms() | rhs.atoms())

    @cached_property
    def unsized_only(self) -> bool:
        """Whether the sides name no symbol that symbolize generalizes, only sizes that stem
        (through the graph's divisions) from input dims declared without a size or already
        dynamic: those are traced at a stand-in (PP-OCRv4's recognizer: height '?' pooled to 0
        against its Squeeze's 1), so the conflict says nothing of a traced size and symbolize
        leaves those axes as the model declares them."""
        a = self.analysis
        # the unknowns as written too: a stand-in may have resolved them to constants
        todo = (
            set().union(*(d.atoms() for d in self.cancelled))
            | self.conflict.constraint.expr.atoms()
        )
        seen: set[str] = set()
        unsized = False
        while todo:
            x = todo.pop()
            seen.add(x)
            if x in a.symbols and x not in a.dynamic:
                return False
            atom = a.atoms.get(x)
            unsized |= x in a.dynamic or (atom is not None and atom.note == UNSIZED)
            parts = a.value_divs.get(x) or a.floor_parts.get(x, ())[:2]
            todo |= {y for p in parts for y in p.atoms()} - seen
        return unsized

    @cached_property
    def fixed(self) -> int | None:
        """The size the model pins an input axis to, where the constraint reads ``symbol ==
        N`` (a weight's channels, a Gemm's features: no export makes that vary); else None."""
        for sym, const in (self.sides, self.sides[::-1]):
            if const.is_const() and len(sym.atoms()) == 1 and str(sym) in self.analysis.symbols:
                return const.value
        return None

    def blocker(self, fix: str, kind: str) -> Blocker:
        """The conflict's blocker: where, the sides at the traced size, why; ``fix`` and ``kind``."""
        a, c = self.analysis, self.conflict.constraint
        lhs, rhs = self.cancelled
        traced_values = a.traced_values()
        try:
            tv = f"{lhs} = {lhs.evaluate(traced_values)}, {rhs} = {rhs.evaluate(traced_values)}"
        except KeyError:
            tv = f"{lhs}, {rhs}"
        x, y = self.sides
        why = why_text("traced-size-constraint", why=c.why, lhs=_pretty(x), rhs=_pretty(y))
        if self.twins:
            first = sorted(str(d) for d in self.sides)
            if a.atoms[first[0]].traced == a.atoms[first[1]].traced:
                why += why_text("shared-tensor", traced=a.atoms[first[0]].traced)
        return Blocker(c.node, c.op, None, tv, why, fix, sym_tuple(self.syms), kind)


def conflicts(a: ShapeAnalysis, sol: Solution) -> Iterator[ConflictSite]:
    for conflict in sol.conflicts:
        yield ConflictSite(a, sol, conflict)


class SizeBakedIntoWeight(GraphRule):
    """``symbol == N`` where N is a weight's or attribute's size: no export makes it vary."""

    kind = "size-baked-into-weight"
    leads = True
    sites = staticmethod(conflicts)

    def check(self, site: ConflictSite) -> str | None:
        return None if site.fixed is not None else "no side is one symbol against a constant"

    def produce(self, site: ConflictSite) -> Blocker:
        assert site.fixed is not None
        return site.blocker(fixed_text(site.analysis, site.syms, site.fixed), self.kind)


class TracedSizeConstraint(GraphRule):
    """A constraint between sizes that holds only at the traced size."""

    kind = "traced-size-constraint"
    leads = True
    sites = staticmethod(conflicts)

    def check(self, site: ConflictSite) -> str | None:
        if site.unsized_only:
            return "it names only sizes of input dims declared without one"
        lhs, rhs = site.cancelled
        if lhs.is_const() and rhs.is_const():
            # two constants that differ do not hold at the traced size either, where the model
            # runs (the check runs it there first): a size the analysis lost (silero-vad's, read
            # through an If from a stand-in), which the check, not a blocker, judges
            return "its sides are constants, unequal at the traced size too"
        return None if site.fixed is None else f"the model fixes {site.syms} at {site.fixed}"

    def produce(self, site: ConflictSite) -> Blocker:
        return site.blocker(fix_text(site.analysis, site.syms), self.kind)


def _cancel(lhs: Dim, rhs: Dim) -> tuple[Dim, Dim]:
    """Divide both sides by their common monomial factor: ``batch*12 == batch*seq*3`` is
    ``4 == seq``, which names the symbol that cannot vary."""
    if not (lhs.is_monomial() and rhs.is_monomial()) or lhs.value == 0 or rhs.value == 0:
        return lhs, rhs
    ((lm, lc),) = lhs.terms.items()
    ((rm, rc),) = rhs.terms.items()
    common = list(lm)
    shared = []
    for atom in rm:
        if atom in common:
            common.remove(atom)
            shared.append(atom)
    g = math.gcd(lc, rc)
    factor = Dim({tuple(shared): g})
    a, b = lhs.exact_div(factor), rhs.exact_div(factor)
    return (a, b) if a is not None and b is not None else (lhs, rhs)


def _pretty(d: Dim) -> str:
    text = str(d)
    return text.replace("$", "?")


# -- loops unrolled at trace time ---------------------------------------------------------------


@dataclass
class IndexSite:
    """The nodes that each take one index (a Gather of one index, a Slice of length 1) along
    ``axis`` (``dim``) of ``tensor``: the indices they take, the first of them."""

    analysis: ShapeAnalysis
    tensor: str
    axis: int
    dim: Dim
    indices: set[int]
    first: onnx.NodeProto

    @cached_property
    def syms(self) -> set[str]:
        return {x for x in self.dim.atoms() if x in self.analysis.symbols}


def one_index_reads(a: ShapeAnalysis, sol: Solution) -> Iterator[IndexSite]:
    """Each axis of each tensor that nodes read one index of, in the graph's order."""
    consumers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in a.model.graph.node:
        for name in node.input:
            if name:
                consumers[name].append(node)
    for tensor, nodes in consumers.items():
        info = a.tensors.get(tensor)
        if info is None or info.shape is None:
            continue
        shape = [sol.resolve(d) for d in info.shape]
        picks: dict[int, set[int]] = defaultdict(set)
        first: dict[int, onnx.NodeProto] = {}
        for node in nodes:
            hit = _single_index(a, node, tensor, len(shape))
            if hit is not None:
                picks[hit[0]].add(hit[1])
                first.setdefault(hit[0], node)
        for axis, idx in picks.items():
            yield IndexSite(a, tensor, axis, shape[axis], idx, first[axis])


class UnrolledSlices(GraphRule):
    """A loop over a symbolic axis unrolled at trace time: one node per index."""

    kind = "unrolled-loop"
    sites = staticmethod(one_index_reads)

    def check(self, site: IndexSite) -> str | None:
        if not site.syms:
            return f"axis {site.axis} of {site.tensor!r} is no symbolic axis"
        n = site.analysis.traced(site.dim)
        if n < 2:
            return f"{site.dim} is traced at {n}: one index is no loop"
        if not set(range(n)) <= {i % n for i in site.indices}:
            return f"the indices taken leave some of 0..{n - 1} out"
        return None

    def produce(self, site: IndexSite) -> Blocker:
        node, d, n = site.first, site.dim, site.analysis.traced(site.dim)
        why = why_text("unrolled-slices", count=n, axis=site.axis, dim=d, tensor=site.tensor)
        syms = ", ".join(sorted(site.syms))
        fix = fix_text(site.analysis, syms)
        return Blocker(
            node.name, node.op_type, site.tensor, f"{d} = {n}", why, fix, tuple(sorted(site.syms)),
            self.kind,
        )  # fmt: skip


def _single_index(
    a: ShapeAnalysis, node: onnx.NodeProto, tensor: str, rank: int
) -> tuple[int, int] | None:
    if not node.input or node.input[0] != tensor:
        return None
    attrs = {x.name: onnx.helper.get_attribute_value(x) for x in node.attribute}
    if node.op_type == "Gather" and len(node.input) > 1:
        idx = a.consts.get(node.input[1])
        if idx is None or idx.size != 1:
            return None
        axis = attrs.get("axis", 0)
        return (axis + rank if axis < 0 else axis, int(idx.reshape(-1)[0]))
    if node.op_type == "Slice" and len(node.input) >= 3:
        st, en = a.consts.get(node.input[1]), a.consts.get(node.input[2])
        axes = a.consts.get(node.input[3]) if len(node.input) > 3 and node.input[3] else None
        if st is None or en is None or st.size != 1 or en.size != 1:
            return None
        s, e = int(st.reshape(-1)[0]), int(en.reshape(-1)[0])
        if e - s != 1 or s < 0:
            return None
        axis = int(axes.reshape(-1)[0]) if axes is not None and axes.size == 1 else 0
        return (axis + rank if axis < 0 else axis, s)
    return None


@dataclass
class ChainSite:
    """Two-input Concat nodes each appending the same piece to the one before (``chain``: the
    last first), the result's shape solved."""

    analysis: ShapeAnalysis
    solution: Solution
    chain: list[onnx.NodeProto]

    @cached_property
    def shape(self) -> list[Dim] | None:
        info = self.analysis.tensors.get(self.chain[0].output[0])
        return None if info is None or info.shape is None else list(info.shape)

    @cached_property
    def axis(self) -> int:
        node = self.chain[0]
        axis = onnx.helper.get_attribute_value(next(x for x in node.attribute if x.name == "axis"))
        return axis + len(self.shape or ()) if axis < 0 else axis

    @cached_property
    def dim(self) -> Dim:
        assert self.shape is not None
        return self.solution.resolve(self.shape[self.axis])

    @cached_property
    def syms(self) -> str:
        return ", ".join(sorted(x for x in self.dim.atoms() if x in self.analysis.symbols))


def append_chains(a: ShapeAnalysis, sol: Solution) -> Iterator[ChainSite]:
    """Each longest chain of Concat nodes appending the same piece, from the graph's end."""
    produced: dict[str, onnx.NodeProto] = {o: n for n in a.model.graph.node for o in n.output}
    seen: set[str] = set()
    for node in reversed(a.model.graph.node):
        if node.op_type != "Concat" or len(node.input) != 2 or node.output[0] in seen:
            continue
        chain = [node]
        while (prev := produced.get(chain[-1].input[0])) is not None and _same_append(
            a, prev, chain[-1]
        ):
            chain.append(prev)
        seen.update(n.output[0] for n in chain)
        yield ChainSite(a, sol, chain)


class UnrolledAppends(GraphRule):
    """A loop unrolled at trace time: identical appends along a symbolic axis."""

    kind = "unrolled-loop"
    sites = staticmethod(append_chains)

    def check(self, site: ChainSite) -> str | None:
        if len(site.chain) < 2:
            return "one Concat is no chain"
        if site.shape is None:
            return "the shape of what the chain makes is unknown"
        return None if site.syms else f"it appends along axis {site.axis}, which is no symbol's"

    def produce(self, site: ChainSite) -> Blocker:
        first, count = site.chain[-1], len(site.chain)
        why = why_text("unrolled-appends", count=count, axis=site.axis, dim=site.dim)
        return Blocker(
            first.name, "Concat", first.input[1], f"{count} copies", why,
            fix_text(site.analysis, site.syms), symbols=sym_tuple(site.syms), kind=self.kind,
        )  # fmt: skip


def _same_append(a: ShapeAnalysis, prev: onnx.NodeProto, cur: onnx.NodeProto) -> bool:
    if prev.op_type != "Concat" or len(prev.input) != 2:
        return False
    if [x.SerializeToString() for x in prev.attribute] != [
        x.SerializeToString() for x in cur.attribute
    ]:
        return False
    if prev.input[1] == cur.input[1]:
        return True
    x, y = a.consts.get(prev.input[1]), a.consts.get(cur.input[1])
    return x is not None and y is not None and x.shape == y.shape and np.array_equal(x, y)


# -- 'same' padding baked at the traced size ----------------------------------------------------


@dataclass
class WindowSite:
    """A strided convolution or pool (:func:`~.baked.window`), its input's shape solved."""

    analysis: ShapeAnalysis
    solution: Solution
    window: Window

    @cached_property
    def baked(self) -> list[tuple[int, Dim, int, tuple[int, int], str]]:
        return baked_axes(self.analysis, self.solution, self.window)

    @property
    def where(self) -> onnx.NodeProto:
        """The node a blocker names: the Pad before the window op, else the op."""
        w = self.window
        return w.pad_node if w.pad_node is not None else w.node


def windows(a: ShapeAnalysis, sol: Solution) -> Iterator[WindowSite]:
    for node in a.model.graph.node:
        w = window(a, node)
        if w is not None:
            yield WindowSite(a, sol, w)


class SamePadding(GraphRule):
    """A strided convolution or pool on a symbolic axis padded by TensorFlow's 'same' rule for
    the traced length: by a Pad node before it, or by uneven pads of its own (an exporter folds
    such a Pad into the Conv). 'Same' padding changes with the length modulo the stride, so the
    padding is either computed from the size in the source (the export baked the traced
    size's) or fixed (then right at every size): the graph cannot tell which.

    Where every spatial axis is padded as ``auto_pad=SAME_UPPER`` pads it at the traced size,
    that rewrite is the alternative for reference cases to confirm: blocker node -> (the window
    op, its Pad or None)."""

    kind = "tf-padding"
    sites = staticmethod(windows)

    def check(self, site: WindowSite) -> str | None:
        if site.baked:
            return None
        return "no strided symbolic axis is padded as 'same' pads its traced length alone"

    def produce(self, site: WindowSite) -> Blocker:
        return tf_padding(site.analysis, site.solution, site.window, site.baked)

    def alternative(self, site: WindowSite) -> tuple[str, tuple[str, str | None]] | None:
        w = site.window
        if not same_everywhere(site.analysis, w):
            return None
        return site.where.name, (w.node.name, w.pad_node.name if w.pad_node is not None else None)


#: The blocker kinds the graph shows as a whole, in the order the plan lists what they find
#: (those that ``lead``, before the constants' blockers; the others after).
GRAPH_RULES: list[GraphRule] = [
    SizeBakedIntoWeight(),
    TracedSizeConstraint(),
    UnrolledSlices(),
    UnrolledAppends(),
    SamePadding(),
]

# their rules register themselves in GRAPH_RULES
from onnxsurgery.passes.symbolize import block_padding, rounded_lengths  # noqa: E402, F401
