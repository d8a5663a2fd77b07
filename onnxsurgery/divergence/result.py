"""What the search for the first diverging node found: plain dataclasses with ``to_dict()`` /
``to_json()`` and ``view()`` (the terminal, lines that wrap at 80 columns)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from onnxsurgery.validation.arrays import OutputComparison

if TYPE_CHECKING:  # rich is imported where a result is rendered
    from rich.console import Group

__all__ = ["InputOrigin", "Localization"]


@dataclass
class InputOrigin:
    """One input of the diverging node: where it comes from (``graph input``, ``initializer``,
    ``constant``, ``node``: then ``producer`` names it) and how far it is from its counterpart
    (``comparison``; None with ``note`` saying why it was not compared)."""

    name: str
    origin: str
    producer: str | None = None
    comparison: OutputComparison | None = None
    note: str | None = None

    def text(self) -> str:
        where = f"{self.origin} {self.producer}" if self.producer else self.origin
        if self.comparison is not None:
            said = self.comparison.describe().split(": ", 1)[-1]
            return f"{self.name!r} ({where}): {said}"
        return f"{self.name!r} ({where}): {self.note or 'not compared'}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "origin": self.origin,
            "producer": self.producer,
            "comparison": self.comparison.to_dict() if self.comparison is not None else None,
            "note": self.note,
        }


@dataclass
class Localization:
    """The first node of ``model`` (in topological order) whose output differs from its
    counterpart in ``reference`` beyond tolerance, on one case. Falsy when none was found."""

    model: str | None
    reference: str | None
    case: str | None
    found: bool = False
    node: str | None = None
    op: str | None = None
    index: int | None = None
    outputs: list[OutputComparison] = field(default_factory=list)
    inputs: list[InputOrigin] = field(default_factory=list)
    #: the node's inputs agree (or are the same graph inputs): the node itself diverges
    inputs_agree: bool = False
    compared: int = 0
    batches: int = 0
    unmatched: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: why nothing was searched (the original takes none of the cases, ORT failed), or None
    reason: str | None = None
    #: the node and its counterpart in the reference as ``{"after": ..., "before": ...}``, each
    #: ``{"name", "op", "inputs", "outputs"}`` (before: None where no node matched); what the
    #: HTML report draws
    neighbourhood: dict[str, Any] | None = None
    #: which ONNX Runtime provider ran ``model`` and which ran ``reference``, and why (each
    #: choice's note, ``"CPU (asked for)"``); None where nothing ran
    provider: str | None = None
    reference_provider: str | None = None

    def __bool__(self) -> bool:
        return self.found

    @property
    def headline(self) -> str:
        """One line: where it diverges, or that nothing did."""
        on = f" on case {self.case}" if self.case else ""
        if self.reason is not None:
            return f"not localized: {self.reason}"
        if not self.found:
            return (
                f"no diverging node{on}: all {self.compared} matched tensors agree "
                f"with {self.reference or 'the reference'}"
            )
        name = self.node or f"(unnamed, node {self.index})"
        return f"first diverging node{on}: {self.op} {name!r} (node {self.index})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "reference": self.reference,
            "case": self.case,
            "found": self.found,
            "node": self.node,
            "op": self.op,
            "index": self.index,
            "inputs_agree": self.inputs_agree,
            "outputs": [c.to_dict() for c in self.outputs],
            "inputs": [i.to_dict() for i in self.inputs],
            "compared": self.compared,
            "batches": self.batches,
            "unmatched": list(self.unmatched),
            "notes": list(self.notes),
            "reason": self.reason,
            "neighbourhood": self.neighbourhood,
            "provider": self.provider,
            "reference_provider": self.reference_provider,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def __rich__(self) -> Group:
        return self.view()

    def view(self, verbose: bool = False, runtime: bool = True) -> Group:
        """The headline and what it found; ``runtime``: with a line saying which provider ran
        each side where they differ (False below a validation report that says so already)."""
        from rich.console import Group
        from rich.text import Text

        style = "red" if self.found else "green"
        parts: list[Any] = [Text(self.headline, style=style)]
        for c in self.outputs:
            parts.append(Text(f"  output {c.describe()}"))
        for origin in self.inputs:
            parts.append(Text(f"  input {origin.text()}"))
        if self.found:
            verdict = (
                "its inputs agree: the node itself computes something else"
                if self.inputs_agree
                else "an input differs already (see above)"
            )
            parts.append(Text(f"  {verdict}", style="dim"))
        shown = self.unmatched if verbose else self.unmatched[:3]
        if self.unmatched:
            more = f" ... {len(self.unmatched) - len(shown)} more (-v)" if len(shown) < len(self.unmatched) else ""
            parts.append(
                Text(
                    f"  {len(self.unmatched)} tensor(s) with no counterpart, not compared: "
                    + ", ".join(map(repr, shown))
                    + more,
                    style="dim",
                )
            )
        parts.extend(Text(f"  {n}", style="dim") for n in self.notes)
        if runtime and self.provider and self.reference_provider and self.reference_provider != self.provider:
            from onnxsurgery.validation.against_model import sides_note

            parts.append(Text(f"  runtime: {sides_note(self.provider, self.reference_provider)}", style="dim"))
        return Group(*parts)
