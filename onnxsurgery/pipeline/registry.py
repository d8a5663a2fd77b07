"""Finding passes: the ``onnxsurgery.passes`` entry-point group, built-in and third-party alike.

A package adds a pass by declaring, in its pyproject.toml::

    [project.entry-points."onnxsurgery.passes"]
    my-pass = "my_package.my_module:MyPass"

The engine never imports a pass by name. A pass whose import fails, or whose name two packages
declare, shows up as unavailable with the reason (``onnxsurgery passes`` still works); using it is
a :class:`~onnxsurgery.errors.PluginError`.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from onnxsurgery.errors import PassOptionError, PluginError
from onnxsurgery.files import shown
from onnxsurgery.pipeline.contract import Pass

__all__ = [
    "ENTRY_POINT_GROUP",
    "PassEntries",
    "PassEntry",
    "discover",
    "get_pass",
    "create_pass",
    "pass_names",
]

ENTRY_POINT_GROUP = "onnxsurgery.passes"


@dataclass(frozen=True)
class PassEntry:
    """One registered pass: where it comes from and either its class or why it is unavailable."""

    name: str
    source: str
    cls: type[Pass] | None = None
    error: str | None = None

    @property
    def available(self) -> bool:
        return self.cls is not None


def _entry_points() -> Iterable[metadata.EntryPoint]:
    return metadata.entry_points(group=ENTRY_POINT_GROUP)


def _source(ep: metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    where = f" ({dist.name} {dist.version})" if dist is not None else ""
    return f"{ep.value}{where}"


def _load(ep: metadata.EntryPoint) -> PassEntry:
    try:
        obj = ep.load()
    except Exception as exc:  # a broken plugin must not break the tool
        return PassEntry(ep.name, _source(ep), error=f"import failed: {type(exc).__name__}: {exc}")
    if not (isinstance(obj, type) and issubclass(obj, Pass)):
        return PassEntry(ep.name, _source(ep), error=f"{ep.value} is not a subclass of Pass")
    if obj.name != ep.name:
        return PassEntry(
            ep.name,
            _source(ep),
            error=f"{ep.value} calls itself {obj.name!r}, but its entry point says {ep.name!r}",
        )
    return PassEntry(ep.name, _source(ep), cls=obj)


class PassEntries(Mapping[str, PassEntry]):
    """The declared passes by name, sorted; each pass's module is imported the first time its
    entry is looked up, so a chain naming one pass imports that pass only."""

    def __init__(self, declared: dict[str, metadata.EntryPoint], duplicates: dict[str, list[str]]):
        self._declared = declared
        self._duplicates = duplicates
        self._loaded: dict[str, PassEntry] = {}

    def __getitem__(self, name: str) -> PassEntry:
        entry = self._loaded.get(name)
        if entry is None:
            if name in self._duplicates:
                sources = " and ".join(self._duplicates[name])
                entry = PassEntry(
                    name, sources, error=f"pass name {name!r} is declared twice: by {sources}"
                )
            else:
                entry = _load(self._declared[name])  # KeyError for an undeclared name
            self._loaded[name] = entry
        return entry

    def __iter__(self) -> Iterator[str]:
        return iter(self._declared)

    def __len__(self) -> int:
        return len(self._declared)


def discover() -> PassEntries:
    """Every pass the installed packages declare, sorted by name (imported when looked up)."""
    seen: dict[str, metadata.EntryPoint] = {}
    duplicates: dict[str, list[str]] = {}
    for ep in _entry_points():
        previous = seen.get(ep.name)
        if previous is None:
            seen[ep.name] = ep
        elif previous.value != ep.value:
            duplicates.setdefault(ep.name, [_source(previous)]).append(_source(ep))
    return PassEntries({name: seen[name] for name in sorted(seen)}, duplicates)


def pass_names() -> list[str]:
    return list(discover())


def get_pass(name: str, entries: Mapping[str, PassEntry] | None = None) -> type[Pass]:
    """The class registered as ``name``; unknown or unavailable names raise with the valid ones."""
    entries = discover() if entries is None else entries
    entry = entries.get(name)
    if entry is None:
        names = [n for n, e in entries.items() if e.available]
        close = difflib.get_close_matches(str(name), names, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise PassOptionError(
            f"unknown pass {shown(name)}; {hint}available passes: {', '.join(names) or '(none installed)'}"
        )
    if entry.cls is None:
        raise PluginError(f"pass {name!r} is unavailable: {entry.error}")
    return entry.cls


def create_pass(
    name: str, options: Mapping[str, Any] | None = None, entries: Mapping[str, PassEntry] | None = None
) -> Pass:
    """Instantiate pass ``name`` with ``options``; wrong options raise PassOptionError."""
    return get_pass(name, entries).from_options(dict(options or {}))
