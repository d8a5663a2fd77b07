"""What a pipeline run reports: per pass options, seconds, node counts, diagnostics.

Reports are plain dataclasses with ``to_dict()`` (the ``--report FILE.json`` form) and
``__rich__()`` (the terminal form), so the CLI renders them and Python users read fields.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import onnx

from onnxsurgery.files import write_atomic
from onnxsurgery.model.io import load_weights
from onnxsurgery.pipeline.contract import Diagnostic

if TYPE_CHECKING:  # rich is imported where a report is rendered: a quiet run never loads it
    from rich.console import Group

__all__ = ["PassRecord", "PipelineReport", "write_json"]


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if hasattr(value, "to_dict"):
        return value.to_dict()
    return repr(value)


@dataclass
class PassRecord:
    """One pass as it ran."""

    name: str
    options: dict[str, Any]
    seconds: float
    nodes_before: int
    nodes_after: int
    modified: bool
    diagnostics: list[Diagnostic] = field(default_factory=list)
    report: Any = None
    error: str | None = None
    #: what the pass changed (a graphdiff.ModelDiff), when the run was asked for diffs
    diff: Any = None

    def to_dict(self) -> dict[str, Any]:
        out = {
            "name": self.name,
            "options": _jsonable(self.options),
            "seconds": round(self.seconds, 6),
            "nodes_before": self.nodes_before,
            "nodes_after": self.nodes_after,
            "modified": self.modified,
            "diagnostics": [d.to_dict() for d in self.diagnostics],
            "error": self.error,
        }
        if self.report is not None:
            out["report"] = _jsonable(self.report)
        if self.diff is not None:
            out["diff"] = _jsonable(self.diff)
        return out


@dataclass
class PipelineReport:
    """Everything a run did, in order; ``ok`` is False when it stopped on an error."""

    source: str | None
    output: str | None = None
    passes: list[PassRecord] = field(default_factory=list)
    validation: Any = None
    provider: str | None = None
    error: str | None = None
    seconds: float = 0.0
    #: where a failing validation first diverges from the original model (a
    #: divergence.Localization), when the run could localize it
    localized: Any = None
    #: The final model as the run holds it: large weights may still lie in the data file they
    #: were loaded from (see :attr:`model`).
    held_model: onnx.ModelProto | None = field(default=None, repr=False)

    @property
    def model(self) -> onnx.ModelProto | None:
        """The final model (or, after a failure, the last one a pass produced), every weight in
        it: weights the run left in their data file are read in on first access."""
        if self.held_model is not None:
            load_weights(self.held_model)
        return self.held_model

    @model.setter
    def model(self, value: onnx.ModelProto | None) -> None:
        self.held_model = value

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def modified(self) -> bool:
        return any(p.modified for p in self.passes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "output": self.output,
            "ok": self.ok,
            "error": self.error,
            "seconds": round(self.seconds, 6),
            "provider": self.provider,
            "passes": [p.to_dict() for p in self.passes],
            "validation": _jsonable(self.validation) if self.validation is not None else None,
            "localized": _jsonable(self.localized) if self.localized is not None else None,
        }

    def __rich__(self) -> Group:
        return self.view()

    def view(self, verbose: bool = False) -> Group:
        """The terminal form: one line per pass (seconds, nodes, what it changed), each warning
        once, the validation's verdict with its worst case, where the model went. ``verbose``
        adds each pass's options and notes and the validation's whole table; a failed
        validation shows its table either way."""
        from rich.console import Group
        from rich.text import Text

        parts: list[Any] = [_pass_table(self), *(_notes(self) if verbose else [])]
        for name, diag in self.warnings():
            colour = "red" if diag.level == "blocker" else "yellow"
            parts.append(Text(f"{name} {diag.level}: ", style=colour) + Text(str(diag)))
        validation = self.validation
        if validation is not None and hasattr(validation, "view"):
            # it says which runtime it ran on
            if verbose or not validation:
                parts.append(validation.view(verbose))
            else:
                parts.append(Text(validation.verdict, style="green"))
                parts.append(Text(f"runtime: {validation.provider}", style="dim"))
        elif validation is not None and hasattr(validation, "__rich__"):
            parts.append(validation)
        elif self.provider:
            parts.append(Text(f"runtime: {self.provider}", style="dim"))
        if self.localized is not None:
            parts.append(self.localized.view(verbose))
        if self.output and self.ok:
            where = "the model to standard output" if self.output == "-" else self.output
            parts.append(Text(f"wrote {where}", style="green"))
        return Group(*parts)

    def warnings(self) -> list[tuple[str, Diagnostic]]:
        """(pass name, diagnostic) of every warning and blocker, each said once."""
        seen: set[tuple[str, str]] = set()
        out = []
        for rec in self.passes:
            for diag in rec.diagnostics:
                key = (rec.name, str(diag))
                if diag.level != "info" and key not in seen:
                    seen.add(key)
                    out.append((rec.name, diag))
        return out


def _changed(rec: PassRecord) -> str:
    """What a pass changed, in a few words: its first note where it changed the model."""
    if rec.error:
        return "failed"
    if not rec.modified:
        return "unchanged"
    first = next((d for d in rec.diagnostics if d.level == "info"), None)
    return first.message if first is not None else "changed"


def _pass_table(report: PipelineReport) -> Any:
    """One row per pass; the last column wraps, the others never need to."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    table = Table(
        title=Text(f"onnxsurgery: {report.source or 'model'}"),
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
    )
    table.add_column("pass", style="bold", no_wrap=True)
    table.add_column("seconds", justify="right", no_wrap=True)
    table.add_column("nodes", justify="right", no_wrap=True)
    table.add_column("what changed", overflow="fold")
    for rec in report.passes:
        what = Text(_changed(rec), style="red" if rec.error else "")
        nodes = f"{rec.nodes_before} -> {rec.nodes_after}"
        table.add_row(Text(rec.name), f"{rec.seconds:.3f}", nodes, what)
    return table


def _notes(report: PipelineReport) -> list[Any]:
    """``-v``: each pass's options and every note it made (warnings are listed apart, once),
    one paragraph per pass that wraps as a paragraph."""
    from rich.text import Text

    notes = []
    for rec in report.passes:
        opts = ", ".join(f"{k}={v}" for k, v in rec.options.items() if v is not None)
        line = Text(rec.name, style="bold") + Text(f"({opts})" if opts else "", style="dim")
        infos = [str(d) for d in rec.diagnostics if d.level == "info"]
        if rec.error:
            line += Text(": ") + Text(rec.error, style="red")
        elif infos:
            text = "; ".join(infos[:4])
            if len(infos) > 4:
                text += f"; ... {len(infos) - 4} more (see --report)"
            line += Text(": " + text)
        notes.append(line)
    return notes


def write_json(data: Any, path: str | os.PathLike) -> Path:
    """Write a report as JSON atomically (temp file + rename; ``-``, a device or a FIFO: written
    through, see files.py)."""
    text = json.dumps(_jsonable(data), indent=2, sort_keys=False) + "\n"

    def write(staged: Path) -> None:
        staged.write_text(text, encoding="utf-8")

    return write_atomic(path, write, what="report", text=True)
