"""How symbolize's blockers spell what they found: dims in the input symbols, the axes a symbol
names, and the fix a user can make (re-export with dynamic axes, or leave the axes out)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence, Set

from onnxsurgery.shapes.analysis import ShapeAnalysis
from onnxsurgery.shapes.dims import Dim
from onnxsurgery.shapes.solver import Solution

# How a size is spelled in the input symbols is the engine's (the diff of two models spells the
# rewritten constants the same way); re-exported here for symbolize's modules.
from onnxsurgery.shapes.spelling import dim_text, input_symbols

__all__ = [
    "fmt_values",
    "symbol_hint",
    "sym_tuple",
    "input_symbols",
    "dim_text",
    "axes_text",
    "fix_text",
    "fixed_text",
    "values_text",
    "WHY",
    "FIX",
    "why_text",
    "fix_lead",
    "least_text",
    "at_least_text",
    "PLAN_WORDS",
    "plan_words",
    "plan_fix_text",
    "ADVICE_WORDS",
    "BOUND_HINT",
]


def fmt_values(values: list[Dim | int]) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"


def values_text(a: ShapeAnalysis, sol: Solution, values: list[Dim]) -> str:
    """``values`` as :func:`fmt_values` writes them, each dim in the input symbols
    (:func:`dim_text`): the solver's own unknowns (``$o1``) never reach the user."""
    return "[" + ", ".join(dim_text(a, sol, v) for v in values) + "]"


def symbol_hint(plan_syms: dict[str, list[tuple[str, int]]], atoms: set[str]) -> str:
    names = sorted(a for a in atoms if a in plan_syms)
    return ", ".join(names)


def traced_words(sym: str, traced: int, dynamic: Set[str]) -> str:
    """How a symbol's traced size is said: ``traced 8``, or ``already dynamic`` for a symbol on
    axes that were dynamic already (its traced value is a placeholder, never shown)."""
    return "already dynamic" if sym in dynamic else f"traced {traced}"


def sym_tuple(syms: str) -> tuple[str, ...]:
    return tuple(x for x in syms.split(", ") if x)


def axes_text(analysis: ShapeAnalysis, syms: str) -> str:
    """The input axes (``input:axis``) the symbols ``syms`` name, the first four listed."""
    where = [f"{i}:{a}" for s in syms.split(", ") for i, a in analysis.symbols.get(s, [])]
    return ", ".join(where[:4]) + (f" and {len(where) - 4} more axes" if len(where) > 4 else "")


def fix_text(analysis: ShapeAnalysis, syms: str) -> str:
    """What to do about a size the trace fixed: re-export with dynamic axes, or leave them out."""
    if not syms:
        return "this size is data-dependent or fixed by the model; no renaming of constants generalizes it"
    axes = axes_text(analysis, syms)
    return (
        f"re-export with dynamic axes for {syms} (dynamic_axes= in torch.onnx.export, or "
        f"dynamic_shapes= with dynamo=True), or leave {axes} out of the symbolized axes"
    )


def fixed_text(analysis: ShapeAnalysis, syms: str, size: int) -> str:
    """What to do about an axis the model itself fixes (a channel or feature axis that a weight's
    shape pins): re-exporting cannot help, only leaving the axis out."""
    axes = axes_text(analysis, syms)
    return (
        f"the model fixes {syms} at {size} (a weight's or attribute's size, a channel or feature "
        f"axis), so no export can make it vary: leave {axes} out of the symbolized axes"
    )


# What each kind of blocker says, keyed by kind: the rules decide, these templates word it
# (``str.format`` fields). A blocker's ``fix`` is its kind's lead (if any) followed by
# :func:`fix_text`, except where the kind's fix says everything itself (``tf-padding``).
WHY: dict[str, str] = {
    "one-point": (
        "constant {tensor!r} {old} has size 1 on axis {axis}, where it meets {met} traced "
        "at 1: one point cannot tell one row repeated from a table of that length, so "
        "symbolize cannot know what it holds at another size"
    ),
    "relative-position-bias": (
        "constant {tensor!r} {old} has the traced size on {axes} and "
        "depends only on j - i along axes {i}, {j}: a relative-position "
        "bias (T5, WavLM) the exporter folded for distances -{far}..{far}; "
        "longer sizes need farther distances, whose values (and the bucket "
        "embedding that gives them) are not in the graph"
    ),
    "table-cut": (
        "constant {tensor!r} {old} has the traced size on {axes} and its "
        "values follow no pattern symbolize can extend (a table or mask made for "
        "the traced size: cut or folded there by the exporter, or a weight that "
        "torch resizes or rejects at other sizes in code the export did not record, "
        "as DINOv2 interpolates its position embeddings), so it cannot be rebuilt "
        "at another size"
    ),
    "cache-position-table": (
        " (the graph has a cache of length {cache}: a learned "
        "position table gathered at the traced positions and folded by the exporter "
        "looks like this, and its weight is no longer in the graph to gather from)"
    ),
    "unpinned": (
        "constant {tensor!r} {old} fits {pattern}, but its traced values "
        "do not pin that down: {gap}"
    ),
    "traced-size-constraint": ("{why}: needs {lhs} == {rhs}, which holds only at the traced size"),
    "shared-tensor": (
        " (both {traced} when traced: the exporter may have shared "
        "one tensor between them, as dynamo does with T5's encoder mask in its "
        "cross-attention)"
    ),
    "unrolled-slices": (
        "a loop unrolled at trace time: {count} nodes take one index each along "
        "axis {axis} ({dim}) of {tensor!r}; at another size torch runs a different "
        "number of iterations"
    ),
    "unrolled-appends": (
        "a loop unrolled at trace time: {count} identical Concat nodes append the same "
        "piece along axis {axis}, giving {dim}; at another size torch runs a different number "
        "of iterations"
    ),
    "coincident-size": (
        "constant {tensor!r}{via} sets the size of {op} {node!r} to {values}: the value "
        "is fixed at {fixed} (as traced) or follows {readings}, and the graph fits both (nothing "
        "downstream forces either); a wrong guess gives wrong values at other sizes, not an error"
    ),
    "tf-padding-pad": "pads {pads} before the stride-{stride} {op} {node!r} (kernel {kernel})",
    "tf-padding-folded": (
        "a stride-{stride} {op} (kernel {kernel}) with uneven pads {pads} (a Pad folded in)"
    ),
    "tf-padding": (
        "{lead}: TensorFlow 'same' padding at the traced "
        "size, which pads {alternatives}; if the source model computes it from the size "
        "(transformers' tf_padding) the export baked in the traced size's, if it pads "
        "by fixed amounts it did not: the graph cannot tell which, and a wrong guess "
        "gives wrong values, not an error"
    ),
}

FIX: dict[str, str] = {
    "one-point": (
        "export at a size where {met} is 3 or more{least} so the values show their pattern, "
        "or pass reference cases (--ref) at another size, where {ref_sizes} (one row repeated "
        "is the only reading symbolize can extend: the cases confirm it or it stays refused); "
    ),
    "relative-position-bias": (
        "where the model computes it from the length (T5's relative positions), export with "
        "TorchScript (dynamo=False), whose graph computes it then (not where it is cut from a "
        "table over the model's largest length, as ProphetNet's, which TorchScript folds "
        "too), or "
    ),
    "unpinned": (
        "export at sizes that show the pattern (3 or more along each symbolic axis, "
        "no size equal to an offset or bound); "
    ),
    "tf-padding": (
        "keep {syms} static (leave {axes} out of the symbolized axes); "
        "or pass reference cases (--ref) at a {syms} of another parity: symbolize "
        "then keeps the fixed pads or rewrites them to 'same' padding, whichever matches "
        "them; or, if the source pads by fixed amounts, re-export with dynamic axes for "
        "{syms}"
    ),
    "coincident-size": (
        "pass reference cases (--ref) at another {syms}: symbolize then keeps it fixed or "
        "follows {readings}, whichever alone matches them; or keep it fixed on purpose with "
        "symbolize(keep={node}); or "
    ),
    "learned-position-table": (
        "pass reference cases (--ref) at another grid size: symbolize then "
        "resizes the table to the grid bicubically, bilinearly or to the nearest rows, whichever "
        "alone matches them; or "
    ),
    "learned-sequence-table": (
        "pass reference cases (--ref) at another {syms}: if torch resizes the table to the "
        "length, they choose the linear, cubic or nearest resize that alone matches; or "
    ),
}


def why_text(kind: str, **fields: object) -> str:
    """What a blocker of ``kind`` found, in its kind's words (:data:`WHY`)."""
    return WHY[kind].format(**fields)


def least_text(least: list[str]) -> str:
    """`` (height 192 or more)``: the input sizes ``least`` names, in brackets; empty for none."""
    return f" ({', '.join(least)})" if least else ""


def at_least_text(sizes: list[str], n: int, least: list[str]) -> str:
    """``height is 2 or more (height 2 or more)``, or ``A and B are 2 or more (...)``: where
    ``sizes`` are each ``n`` or more, with the input sizes that give it (``least``)."""
    verb = "is" if len(sizes) == 1 else "are"
    return f"{' and '.join(sizes)} {verb} {n} or more{least_text(least)}"


def fix_lead(kind: str, **fields: object) -> str:
    """The start of a blocker's "what to do" (:data:`FIX`; empty for a kind that has none),
    before :func:`fix_text`; empty where it would name symbols and there are none)."""
    lead = FIX.get(kind, "")
    return "" if "{syms}" in lead and not fields.get("syms") else lead.format(**fields)


# How a failed check names the plan's decision that broke (:mod:`.ort_failure`), in the form a
# blocker takes: where, what the plan did (old -> new), what happened, what to do.
PLAN_WORDS: dict[str, str] = {
    "run": (
        "check {what}: the plan's rewrite broke {op} {node!r}: {rewrites}{kept}; ONNX Runtime "
        "failed there: {reason}; {fix}"
    ),
    "values": (
        "{error}; the plan's rewrite(s) these outputs depend on ({count}): {rewrites}{kept}; {fix}"
    ),
    "kept": "; upstream, {tensor!r} {shape} kept its traced length on axis {axis} ({length} = {hit})",
    "fix": (
        "a planning bug of symbolize (please report it with the model); meanwhile keep {syms} "
        "static: leave {axes} out of the symbolized axes"
    ),
}


def plan_words(kind: str, **fields: object) -> str:
    """A check failure in :data:`PLAN_WORDS`' words under ``kind``."""
    return PLAN_WORDS[kind].format(**fields)


def plan_fix_text(axes: Mapping[str, Mapping[int, str]], syms: Sequence[str]) -> str:
    """What to do about a planning bug that broke ``syms``: keep them static (their input axes,
    from ``axes``: {input: {axis: symbol}}, the first four named)."""
    where = [
        f"{i}:{a}" for s in syms for i, named in axes.items() for a, t in named.items() if t == s
    ]
    text = ", ".join(where[:4]) + (f" and {len(where) - 4} more axes" if len(where) > 4 else "")
    return plan_words("fix", syms=", ".join(syms), axes=text)


WHY["indexed-table"] = (
    "its constant indices count along {count} and would be rewritten to grow with it, but they "
    "read axis {axis} of a tensor that stays {size} there, computed from constant {table!r} "
    "{shape} whose {length} entries on axis {table_axis} are {hit}: a table the trace folded at "
    "the traced size (XLNet's relative positions over klen + qlen), whose values at other sizes "
    "the graph does not compute; at a larger {count} the indices leave it"
)

WHY["bounded-table"] = (
    "constant {tensor!r} {old} holds a table folded at the traced length, which symbolize slices "
    "to the size under a bound, but {bounds} needs {size} entries on axis {axis} and it has "
    "{length}: the values past the traced size are not in the graph, so the bound can be at most "
    "the traced size ({traced})"
)
#: Each kind of advice a blocker's "what to do" may give that a user follows by running
#: symbolize again (reference cases; a bound, from :data:`BOUND_HINT` or the one-block pad's),
#: as the words that give it: a refusal whose message cuts blockers names those of the cut ones
#: it does not show (:func:`~.blockers.blocker_summary`)
ADVICE_WORDS = (
    re.compile(r"pass reference cases \(--ref\)[^:;]*"),
    re.compile(r"bound [\w, ]+ \(like \w+<=traced[^)]*\)"),
)

#: added to a relative-position-bias or table-cut blocker where a bound would let it through
BOUND_HINT = (
    "if no size you need is over the traced one, bound {syms} (like {example}<=traced in "
    "symbolize's axes): the table is then sliced to the size, and a larger size fails; or "
)
