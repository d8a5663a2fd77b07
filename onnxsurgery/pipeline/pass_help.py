"""A pass's help, read from one place: its class docstring.

The docstring holds a one-line summary, a short paragraph, one entry per option and, optionally,
example chains::

    class Cleanup(Pass):
        \"\"\"Remove dead nodes and unused inputs/initializers; sort nodes topologically.

        A node whose outputs reach no graph output is removed, in subgraphs too, and so are
        initializers and graph inputs that no node reads.

        Options:
            inputs (bool): Remove graph inputs that no node reads; false keeps the signature.

        Example:
            cleanup(inputs=false)
        \"\"\"

An entry is ``NAME (TYPE)`` or ``NAME (TYPE, default TEXT)``, a colon and one sentence
(continued on lines indented further); ``Attributes:`` is read like ``Options:``. The default
shown is TEXT where given (for a ``None`` that means something: "all outputs"), else the
signature's, in the chain syntax. Entries whose name is no keyword of ``__init__`` document the
free-form keys of its ``**kwargs`` (symbolize's ``INPUT:AXIS``). :func:`doc_problems` says where
a docstring and its signature disagree (a test holds every registered pass to none).
``onnxsurgery passes`` shows :func:`passes_table`; ``onnxsurgery passes NAME`` a :class:`PassHelp`.
"""

from __future__ import annotations

import inspect
import re
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from onnxsurgery.pipeline.chain import format_value
from onnxsurgery.pipeline.contract import OptionInfo, Pass

if TYPE_CHECKING:  # rich is imported where help is shown
    from rich.console import Group
    from rich.table import Table

    from onnxsurgery.pipeline.registry import PassEntry

__all__ = ["OptionHelp", "PassHelp", "describe", "doc_problems", "passes_table"]

_SECTION = re.compile(r"^(Options|Attributes|Examples?):\s*$")
_ENTRY = re.compile(r"^(?P<name>\S+)\s+\((?P<kind>.*?)\):\s*(?P<text>.*)$")
_DEFAULT = re.compile(r",?\s*default:?\s+(?P<default>.+)$")


@dataclass(frozen=True)
class OptionHelp:
    """One option as ``onnxsurgery passes NAME`` shows it."""

    name: str
    kind: str
    default: str
    text: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "type": self.kind, "default": self.default, "help": self.text}


@dataclass
class PassHelp:
    """A pass's help: summary, paragraph, options, example chains, where it comes from."""

    name: str
    summary: str
    details: str = ""
    options: list[OptionHelp] = field(default_factory=list)
    examples: list[str] = field(default_factory=list)
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "help": self.summary,
            "details": self.details,
            "options": [o.to_dict() for o in self.options],
            "examples": self.examples,
            "source": self.source,
        }

    def __rich__(self) -> Group:
        from rich.console import Group
        from rich.padding import Padding
        from rich.table import Table
        from rich.text import Text

        parts: list[Any] = [Text.assemble((self.name, "bold"), "  ", self.summary)]
        if self.details:
            parts += [Text(""), Text(self.details)]
        parts += [Text(""), Text("Options", style="bold")]
        if not self.options:
            parts.append(Text("  (none)"))
        else:
            table = Table(box=None, show_header=False, padding=(0, 1, 0, 2), expand=False)
            table.add_column("option", style="bold", no_wrap=True)
            table.add_column("type", style="dim", overflow="fold")
            table.add_column("what it does", overflow="fold")
            for o in self.options:
                table.add_row(o.name, o.kind, Text(o.text + (f"\n[default: {o.default}]" if o.default else "")))
            parts.append(table)
        parts += [Text(""), Text("Examples", style="bold")]
        parts += [
            Padding(Text(f"onnxsurgery run model.onnx --passes {_quoted(chain)}"), (0, 0, 0, 2))
            for chain in self.examples
        ]
        parts += [Text(""), Text(f"from {self.source}", style="dim")]
        return Group(*parts)


def _quoted(chain: str) -> str:
    return f"'{chain}'" if '"' in chain else f'"{chain}"'


def _sections(doc: str) -> tuple[str, str, dict[str, str]]:
    """(summary, paragraph, {section: dedented body}) of a docstring."""
    lines = inspect.cleandoc(doc).replace("``", "`").splitlines() or [""]
    head: list[str] = []
    sections: dict[str, list[str]] = {}
    current = head
    for line in lines[1:]:
        match = _SECTION.match(line)
        if match:
            current = sections.setdefault(match.group(1).rstrip("s").replace("Attribute", "Option"), [])
        else:
            current.append(line)
    details = "\n\n".join(" ".join(p.split()) for p in "\n".join(head).split("\n\n") if p.strip())
    return lines[0].strip(), details, {k: textwrap.dedent("\n".join(v)) for k, v in sections.items()}


def _entries(body: str) -> dict[str, tuple[str, str]]:
    """``{name: (type and default, sentence)}`` of an Options section."""
    entries: dict[str, list[str]] = {}
    for line in body.splitlines():
        match = _ENTRY.match(line) if line[:1].strip() else None
        if match:
            entries[match.group("name")] = [match.group("kind"), match.group("text")]
        elif line.strip() and entries:
            last = entries[next(reversed(entries))]
            last[1] = f"{last[1]} {line.strip()}".strip()
    return {name: (kind, text) for name, (kind, text) in entries.items()}


def _default(info: OptionInfo | None, given: str | None) -> str:
    if given is not None:
        return given
    if info is None or info.variadic:
        return ""
    if info.default is inspect.Parameter.empty:
        return "required"
    return format_value(info.default)


def describe(cls: type[Pass], source: str = "") -> PassHelp:
    """The help of pass class ``cls``: documented options in the docstring's order, then any
    option of its signature the docstring leaves out (shown without a sentence)."""
    summary, details, sections = _sections(inspect.getdoc(cls) or "")
    infos = {i.name: i for i in cls.option_infos()}
    options = []
    for name, (kind, text) in _entries(sections.get("Option", "")).items():
        match = _DEFAULT.search(kind)
        kind_only = kind[: match.start()].strip() if match else kind.strip()
        default = _default(infos.get(name), match.group("default").strip() if match else None)
        options.append(OptionHelp(name, kind_only, default, text))
    documented = {o.name for o in options}
    for info in infos.values():
        if info.name not in documented and not info.variadic:
            kind = re.sub(r"<class '(?:builtins\.)?([\w.]+)'>", r"\1", info.annotation)  # a plugin's str
            options.append(OptionHelp(info.name, kind, _default(info, None), ""))
    examples = [line.strip() for line in sections.get("Example", "").splitlines() if line.strip()]
    return PassHelp(cls.name, summary, details, options, examples or [cls.name], source)


def doc_problems(cls: type[Pass]) -> list[str]:
    """Where ``cls``'s docstring and ``__init__`` disagree: an option without an entry, an entry
    for no option, free-form keys (``**kwargs``) without an entry, a default that differs."""
    _, _, sections = _sections(inspect.getdoc(cls) or "")
    entries = _entries(sections.get("Option", ""))
    infos = {i.name: i for i in cls.option_infos()}
    named = {n for n, i in infos.items() if not i.variadic}
    takes_any = len(named) < len(infos)
    problems = [f"option {n!r} has no entry under Options:" for n in named - entries.keys()]
    extra = entries.keys() - named
    if extra and not takes_any:
        problems += [f"entry {n!r} documents no option" for n in sorted(extra)]
    if takes_any and not extra:
        problems.append("its free-form options (**kwargs) have no entry under Options:")
    for name in named & entries.keys():
        match = _DEFAULT.search(entries[name][0])
        actual = _default(infos[name], None)
        if match and infos[name].default is not None and actual not in match.group("default"):
            problems.append(f"option {name!r}: the entry says default {match.group('default')!r}, the signature {actual}")
    return problems


def _listed_options(cls: type[Pass]) -> str:
    names = [o.name for o in describe(cls).options]
    infos = cls.option_infos()
    if any(i.variadic for i in infos) and set(names) <= {i.name for i in infos}:
        names.append("KEY=VALUE ...")  # free-form options its docstring does not name
    return ", ".join(names) or "(none)"


def passes_table(entries: Mapping[str, PassEntry]) -> Table:
    """``onnxsurgery passes``: one row per pass, wrapped to the terminal, nothing cut."""
    from rich.table import Table
    from rich.text import Text

    table = Table(
        title="passes (entry-point group onnxsurgery.passes)",
        title_justify="left",
        caption="onnxsurgery passes NAME: one pass, every option, its default, examples",
        caption_justify="left",
    )
    table.add_column("pass", style="bold", no_wrap=True)
    table.add_column("what it does", overflow="fold", ratio=3)
    table.add_column("options", overflow="fold", ratio=2)
    for e in entries.values():
        if e.cls is None:
            table.add_row(Text(e.name, style="red"), Text(f"unavailable: {e.error}", style="red"), "")
            continue
        what = Text(e.cls.summary())
        if not e.source.startswith("onnxsurgery.passes."):
            what.append(f"\nfrom {e.source}", style="dim")
        table.add_row(e.name, what, Text(_listed_options(e.cls)))
    return table
