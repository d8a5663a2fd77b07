"""What keeps symbolize from generalizing a model, and how that is said.

A :class:`Blocker` is one node that holds only at the traced size (node, op, input, traced value,
why, what to do). :func:`group_blockers` merges those that say the same thing about different
nodes, and :func:`blocker_summary` writes them in one message that fits a screen; every blocker
stays in the JSON report.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from onnxsurgery.passes.symbolize.wording import ADVICE_WORDS

__all__ = ["Blocker", "BlockerGroup", "blocker_summary", "group_blockers"]


@dataclass
class Blocker:
    """Something that holds only at the traced size and cannot be rewritten."""

    node: str
    op: str
    input: str | None
    traced: str
    why: str
    fix: str
    symbols: tuple[str, ...] = ()  # the symbols it keeps from being generalized
    #: the rule that found it (``table-cut``, ``tf-padding``, ...: :mod:`.rules`); its words come
    #: from :mod:`.wording` under that kind. Not in ``to_dict``: the report says why, not how
    kind: str = field(default="", compare=False)

    def __str__(self) -> str:
        where = f"{self.op} {self.node!r}" + (f" (input {self.input!r})" if self.input else "")
        return f"{where}: {self.why} [traced: {self.traced}]; {self.fix}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "op": self.op,
            "input": self.input,
            "traced": self.traced,
            "why": self.why,
            "fix": self.fix,
            "symbols": list(self.symbols),
        }


_NAMES = re.compile(r"'[^']*'|\[[^\]]*\]")  # tensor names and shapes: left out of a kind


@dataclass
class BlockerGroup:
    """Blockers that say the same thing about different nodes (8 Mul nodes reading tables cut
    to the traced length): one entry, its nodes listed."""

    blockers: list[Blocker]

    @property
    def nodes(self) -> list[str]:
        return [b.node for b in self.blockers]

    def text(self, fix: bool | str = True) -> str:
        """One line; ``fix`` False leaves "what to do" out, a string says it instead."""
        first = self.blockers[0]
        tail = f"; {fix}" if isinstance(fix, str) else (f"; {first.fix}" if fix else "")
        if len(self.blockers) == 1:
            where = f"{first.op} {first.node!r}" + (
                f" (input {first.input!r})" if first.input else ""
            )
            return f"{where}: {first.why} [traced: {first.traced}]{tail}"
        shown = ", ".join(n or "(unnamed)" for n in self.nodes[:3])
        more = ", ..." if len(self.blockers) > 3 else ""
        return (
            f"{len(self.blockers)} {first.op} nodes ({shown}{more}) alike, the first: "
            f"{first.why} [traced: {first.traced}]{tail}"
        )

    def __str__(self) -> str:
        return self.text()

    def to_dict(self) -> dict[str, Any]:
        first = self.blockers[0]
        return {
            "count": len(self.blockers),
            "op": first.op,
            "nodes": self.nodes,
            "why": first.why,
            "traced": first.traced,
            "fix": first.fix,
            "symbols": list(first.symbols),
        }


def group_blockers(blockers: list[Blocker]) -> list[BlockerGroup]:
    """Blockers grouped by what they say (op, reason, fix, symbols), node and tensor names and
    shapes left out; groups in the order their first blocker came."""
    groups: dict[tuple, BlockerGroup] = {}
    for b in blockers:
        key = (b.op, _NAMES.sub("*", b.why), _NAMES.sub("*", b.fix), b.symbols)
        groups.setdefault(key, BlockerGroup([])).blockers.append(b)
    return list(groups.values())


def blocker_summary(blockers: list[Blocker], budget: int = 1500) -> str:
    """The blockers in one message that fits a screen: identical ones as one entry, a shared
    "what to do" said once, entries past ``budget`` characters counted, not listed (every one
    is in the JSON report)."""
    groups = group_blockers(blockers)
    fixes = {g.blockers[0].fix for g in groups}
    shared = len(fixes) == 1 and len(groups) > 1
    head = f"{len(blockers)} blocker(s) keep the model from being symbolized"
    if len(groups) != len(blockers):
        head += f" ({len(groups)} kind(s))"
    report = "every blocker with its node is in the JSON report (--report FILE)"
    room = budget - len(head) - len(report) - (len(next(iter(fixes))) + 25 if shared else 0)
    entries: list[str] = []
    said: dict[str, int] = {}  # a fix already written -> the entry that wrote it
    for k, g in enumerate(groups, start=1):
        fix = g.blockers[0].fix
        again = f"what to do: as ({said[fix]})" if fix in said else True
        entry = f"({k}) {g.text(fix=False if shared else again)}"
        if entries and sum(len(e) + 2 for e in entries) + len(entry) > room:
            break
        entries.append(entry)
        said.setdefault(fix, k)
    text = f"{head}: {'; '.join(entries)}"
    left = groups[len(entries) :]
    if left:
        n = sum(len(g.blockers) for g in left)
        text += f"; and {len(left)} more kind(s) ({n} blocker(s))" + _advice_left(left, text)
    if shared:
        text += f"; what to do for all: {next(iter(fixes))}"
    if left or len(groups) != len(blockers):
        text += f"; {report}"
    return text


def _advice_left(left: list[BlockerGroup], shown: str) -> str:
    """The kinds of advice (:data:`~.wording.ADVICE_WORDS`) the blockers ``left`` out of a
    message give that the message ``shown`` does not: a refusal cut short still names every
    step that could let the model through (LongT5 by TorchScript showed only the bound, the
    reference cases its other blockers need cut off)."""
    said: list[str] = []
    for words in ADVICE_WORDS:
        if words.search(shown):
            continue
        found = next((m.group(0) for g in left if (m := words.search(g.blockers[0].fix))), None)
        if found:
            said.append(found.strip().rstrip(","))
    return f", whose what to do includes: {'; '.join(said)}" if said else ""

