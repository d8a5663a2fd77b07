"""How a :class:`~.plan.SymbolizePlan` looks in the terminal (``inspect`` and the report):
what would change, one table row per constant; each kind of blocker in a few lines; the
symbolic outputs; the verification levels; the notes. Cells wrap and fold, never cut, and
every text is plain (a shape like ``[batch, -1]`` is no markup)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from onnxsurgery.passes.symbolize.blockers import group_blockers
from onnxsurgery.passes.symbolize.wording import traced_words

if TYPE_CHECKING:
    from onnxsurgery.passes.symbolize.plan import SymbolizePlan
    from onnxsurgery.passes.symbolize.reads import Change

__all__ = ["plan_view"]


def plan_view(plan: SymbolizePlan, verbose: bool = False) -> Any:
    """The terminal form (``inspect``): what would change, one table row per constant, and
    each blocker in a few lines; ``verbose`` adds the constants' input names. Cells wrap
    (node names fold whole), never cut."""
    from rich.console import Group
    from rich.text import Text

    dynamic = plan.analysis.dynamic
    syms = ", ".join(f"{s} ({traced_words(s, v, dynamic)})" for s, v in plan.symbols.items())
    parts: list[Any] = [Text(f"symbolize: {syms}", style="bold")]
    if plan.changes:
        parts.append(_changes_table(plan.changes, verbose))
    else:
        parts.append(Text("no constant carries a traced size"))
    if plan.blockers:
        parts += _blocker_lines(group_blockers(plan.blockers))
    outs = "; ".join(
        f"{name} [{', '.join('?' if d is None else str(d) for d in dims)}]"
        if dims is not None
        else f"{name} [?]"
        for name, dims in plan.outputs.items()
    )
    parts.append(Text(f"outputs: {outs}"))
    if plan.verification is not None:
        parts.append(_verified_table(plan))
    for note in plan.notes:
        parts.append(Text(f"note: {note}", style="dim"))
    return Group(*parts)


def _table(title: str, columns: list[str], **style: Any) -> Any:
    """A plan table whose cells wrap and fold (a node name is never cut short)."""
    from rich.table import Table

    table = Table(title=title, title_justify="left", **style)
    for col in columns:
        table.add_column(col, overflow="fold", no_wrap=col == "op")
    return table


def _changes_table(changes: list[Change], verbose: bool) -> Any:
    from rich.text import Text

    table = _table("would change", ["node", "op", *(["input"] if verbose else []), "old -> new"])
    for c in changes:
        cells = [c.node, c.op, *([f"{c.input_index}: {c.input}"] if verbose else [])]
        # plain text: shapes like [batch, -1] are no markup
        table.add_row(*(Text(x) for x in cells), Text(f"{c.old} -> {c.new}"))
    return table


def _blocker_lines(groups: list) -> list[Any]:
    """Each kind of blocker in a few lines: where (nodes, op, input, traced value), why, what to
    do; every blocker with its node is in the JSON report."""
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    parts: list[Any] = [Text(f"blockers ({len(groups)} kind(s))", style="bold red")]
    for g in groups:
        b = g.blockers[0]
        nodes = g.nodes[0] or "(unnamed)"
        if len(g.nodes) > 1:
            nodes = f"{len(g.nodes)} alike: {', '.join(g.nodes[:3])}" + (
                ", ..." if len(g.nodes) > 3 else ""
            )
        where = f" ({b.op}" + (f", input {b.input}" if b.input else "") + f", traced {b.traced})"
        parts.append(Text(nodes, style="red") + Text(where))
        grid = Table.grid(padding=(0, 1))
        grid.add_column(style="dim", no_wrap=True)
        grid.add_column(overflow="fold")
        grid.add_row("why", Text(b.why))
        grid.add_row("fix", Text(b.fix))
        parts.append(Padding(grid, (0, 0, 0, 2)))
    return parts


def _verified_table(plan: SymbolizePlan) -> Any:
    from rich.text import Text

    table = _table("verified", ["symbol", "traced", "level", "oracle"])
    for sym, level in plan.verification.levels.items():
        oracle = plan.verification.oracles.get(sym, "")
        cells = (sym, plan.symbols.get(sym, ""), level, oracle)
        table.add_row(*(Text(str(x)) for x in cells))
    return table
