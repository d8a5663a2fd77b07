"""What the diff of two models holds: plain dataclasses with ``to_dict()``/``to_json()`` (the
``--report`` JSON, and what an HTML report renders) and ``view()`` (the terminal, 80 columns)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from onnxsurgery.graphdiff.values import Value

if TYPE_CHECKING:  # rich is imported where a diff is rendered
    from rich.console import Group

__all__ = ["IOChange", "InputChange", "ModelDiff", "NodeRef", "OpChange"]

#: Items of a list the short form shows before '... N more (-v)'.
SHORT = 6


@dataclass
class NodeRef:
    """A node by name and op (``index``: its place in its graph's node list)."""

    name: str
    op: str
    index: int

    def __str__(self) -> str:
        return f"{self.op} {self.name!r}" if self.name else f"{self.op} (unnamed, node {self.index})"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "op": self.op, "index": self.index}


@dataclass
class OpChange:
    """Nodes of one op: how many before and after, added, removed and rewired."""

    op: str
    before: int
    after: int
    added: int = 0
    removed: int = 0
    rewired: int = 0

    def __str__(self) -> str:
        parts = [f"{what}{n}" for what, n in (("+", self.added), ("-", self.removed)) if n]
        if self.rewired:
            parts.append(f"{self.rewired} rewired")
        return f"{self.op} {self.before} -> {self.after} ({', '.join(parts)})"

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class InputChange:
    """A node input that holds something else after: a constant rewritten, a constant replaced
    by a computation (symbolize), a computation folded into a constant (fold-constants)."""

    node: NodeRef
    input_index: int
    old: Value
    new: Value
    #: for a constant of the same name whose values changed: how (``1 of 256 elements differ``)
    detail: str | None = None

    def __str__(self) -> str:
        text = f"{self.node} input {self.input_index}: {self.old} -> {self.new}"
        return f"{text} ({self.detail})" if self.detail else text

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node.to_dict(),
            "input_index": self.input_index,
            "old": self.old.to_dict(),
            "new": self.new.to_dict(),
            "detail": self.detail,
        }


@dataclass
class IOChange:
    """A graph input or output with its type and dims before and after (None: not there)."""

    kind: str
    name: str
    before: str | None
    after: str | None

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def __str__(self) -> str:
        return f"{self.kind} {self.name!r}: {self.before or 'absent'} -> {self.after or 'absent'}"

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "changed": self.changed}


@dataclass
class ModelDiff:
    """What differs between model ``a`` (before) and model ``b`` (after). Falsy when nothing
    does (:attr:`empty`)."""

    a: str | None
    b: str | None
    nodes_before: int = 0
    nodes_after: int = 0
    ops: list[OpChange] = field(default_factory=list)
    added: list[NodeRef] = field(default_factory=list)
    removed: list[NodeRef] = field(default_factory=list)
    rewired: list[NodeRef] = field(default_factory=list)
    constants: list[InputChange] = field(default_factory=list)
    inputs: list[IOChange] = field(default_factory=list)
    outputs: list[IOChange] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        io = [c for c in self.inputs + self.outputs if c.changed]
        return not (self.added or self.removed or self.rewired or self.constants or io)

    def __bool__(self) -> bool:
        return not self.empty

    def to_dict(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "empty": self.empty,
            "nodes_before": self.nodes_before,
            "nodes_after": self.nodes_after,
            "ops": [o.to_dict() for o in self.ops],
            "added": [n.to_dict() for n in self.added],
            "removed": [n.to_dict() for n in self.removed],
            "rewired": [n.to_dict() for n in self.rewired],
            "constants": [c.to_dict() for c in self.constants],
            "inputs": [c.to_dict() for c in self.inputs],
            "outputs": [c.to_dict() for c in self.outputs],
            "notes": list(self.notes),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def __rich__(self) -> Group:
        return self.view()

    def view(self, verbose: bool = False) -> Group:
        """Lines that wrap at the terminal's width; lists cut to a few items unless ``verbose``."""
        from rich.console import Group
        from rich.text import Text

        title = f"diff: {self.a or 'model a'} -> {self.b or 'model b'}"
        parts: list[Any] = [Text(title, style="bold")]
        if self.empty:
            parts.append(Text(f"no difference ({self.nodes_before} nodes)", style="green"))
            return Group(*parts, *(Text(n, style="dim") for n in self.notes))
        parts.append(Text(f"nodes {self.nodes_before} -> {self.nodes_after}"))
        sections = (
            ("ops", self.ops),
            ("added", self.added),
            ("removed", self.removed),
            ("rewired", self.rewired),
            ("constants", self.constants),
            ("inputs", [c for c in self.inputs if c.changed]),
            ("outputs", [c for c in self.outputs if c.changed]),
        )
        for name, items in sections:
            parts.extend(_section(name, items, verbose))
        parts.extend(Text(n, style="dim") for n in self.notes)
        return Group(*parts)


def _section(name: str, items: list[Any], verbose: bool) -> list[Any]:
    from rich.text import Text

    if not items:
        return []
    shown = items if verbose else items[:SHORT]
    lines: list[Any] = [Text(f"{name} ({len(items)}):", style="bold")]
    lines.extend(Text(f"  {item}") for item in shown)
    if len(shown) < len(items):
        lines.append(Text(f"  ... {len(items) - len(shown)} more (-v shows all)", style="dim"))
    return lines
