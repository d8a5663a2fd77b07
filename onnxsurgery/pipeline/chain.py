"""Pass chains as text (``--passes``) and as TOML recipes (``--recipe``).

Grammar of the text form::

    chain   := item ("," item)*
    item    := NAME [ "(" [option ("," option)*] ")" ]
    option  := KEY "=" value            KEY may hold letters, digits and _ - : * . /
    value   := "[" [value ("," value)*] "]" | 'quoted' | "quoted" | bare
    bare    := int | float | true | false | none | any other text up to , ) ] ( [ = ' "
               (``<=`` is text: ``x:1=seq<=traced``)

    cleanup, symbolize(x:0=batch, x:1=seq), concat-outputs(axis=1, name=merged)

A recipe holds the same chain as ``[[pass]]`` tables, each with ``name`` and its options::

    [[pass]]
    name = "symbolize"
    "x:0" = "batch"

    [[pass]]
    name = "concat-outputs"
    axis = 1
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from onnxsurgery.errors import PassSpecError
from onnxsurgery.pipeline.contract import Pass
from onnxsurgery.pipeline.registry import PassEntry, create_pass, discover

__all__ = ["PassSpec", "parse_passes", "load_recipe", "build_passes", "format_value"]

#: Lists (and recipe tables) nested deeper than this are refused: no option nests that far.
MAX_NESTING = 32

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_\-.]*")
_KEY = re.compile(r"[A-Za-z0-9_\-:*./]+")
_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?|[+-]?(inf|nan)")


@dataclass(frozen=True)
class PassSpec:
    """A pass named in a chain, with its options, before it is looked up in the registry."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        if not self.options:
            return self.name
        inner = ", ".join(f"{k}={format_value(v)}" for k, v in self.options.items())
        return f"{self.name}({inner})"


def format_value(value: Any) -> str:
    """Write a value back in the chain syntax (the inverse of parsing it)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    if isinstance(value, str):
        if value and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_\-:*./]*", value) and _scalar(value) == value:
            return value
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)


def _scalar(text: str) -> Any:
    low = text.lower()
    if low == "true":
        return True
    if low == "false":
        return False
    if low in ("none", "null"):
        return None
    if _INT.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text):
        return float(text)
    return text


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def error(self, what: str, pos: int | None = None) -> PassSpecError:
        at = self.pos if pos is None else pos
        # one line: at most 60 characters each side of the column, the column marked <<HERE>>
        before = self.text[max(0, at - 60) : at]
        after = self.text[at : at + 60]
        pointer = (
            f"{'...' if at > 60 else ''}{before}<<HERE>>{after}"
            f"{'...' if len(self.text) > at + 60 else ''}"
        )
        return PassSpecError(f"--passes: {what} at column {at + 1}: {pointer}")

    def skip_ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def peek(self) -> str:
        self.skip_ws()
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def expect(self, char: str) -> None:
        if self.peek() != char:
            found = repr(self.peek()) if self.peek() else "end of text"
            raise self.error(f"expected {char!r}, found {found}")
        self.pos += 1

    def match(self, pattern: re.Pattern[str], what: str) -> str:
        self.skip_ws()
        m = pattern.match(self.text, self.pos)
        if not m:
            found = repr(self.text[self.pos]) if self.pos < len(self.text) else "end of text"
            raise self.error(f"expected {what}, found {found}")
        self.pos = m.end()
        return m.group(0)

    def chain(self) -> list[PassSpec]:
        specs = [self.item()]
        while self.peek() == ",":
            self.pos += 1
            if self.peek() == "":
                break  # a trailing comma is harmless
            specs.append(self.item())
        if self.peek():
            raise self.error(f"unexpected {self.peek()!r}; passes are separated by ','")
        return specs

    def item(self) -> PassSpec:
        name = self.match(_NAME, "a pass name")
        options: dict[str, Any] = {}
        if self.peek() == "(":
            self.pos += 1
            if self.peek() != ")":
                while True:
                    self.skip_ws()
                    start = self.pos
                    key = self.match(_KEY, "an option name")
                    self.expect("=")
                    if key in options:
                        raise self.error(f"option {key!r} given twice for {name!r}", start)
                    options[key] = self.value()
                    if self.peek() == ",":
                        self.pos += 1
                        continue
                    break
            self.expect(")")
        return PassSpec(name, options)

    def value(self, depth: int = 0) -> Any:
        char = self.peek()
        if char == "[":
            if depth >= MAX_NESTING:
                raise self.error(f"lists nested deeper than {MAX_NESTING} levels")
            self.pos += 1
            items: list[Any] = []
            if self.peek() != "]":
                items.append(self.value(depth + 1))
                while self.peek() == ",":
                    self.pos += 1
                    items.append(self.value(depth + 1))
            self.expect("]")
            return items
        if char in ("'", '"'):
            return self.quoted(char)
        start = self.pos
        while self.pos < len(self.text) and (
            self.text[self.pos] not in ",)]([='\"" or self.text[self.pos - 1 : self.pos + 1] == "<="
        ):
            self.pos += 1
        raw = self.text[start : self.pos].strip()
        if not raw:
            raise self.error("expected a value")
        return _scalar(raw)

    def quoted(self, quote: str) -> str:
        start = self.pos
        self.pos += 1
        out = []
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if char == "\\" and self.pos + 1 < len(self.text):
                out.append(self.text[self.pos + 1])
                self.pos += 2
                continue
            if char == quote:
                self.pos += 1
                return "".join(out)
            out.append(char)
            self.pos += 1
        raise self.error("unterminated string", start)


def _depth(value: Any, level: int = 0) -> int:
    """How deeply lists and tables nest (stops counting past MAX_NESTING)."""
    if level > MAX_NESTING:
        return level
    if isinstance(value, dict):
        return max((_depth(v, level + 1) for v in value.values()), default=level + 1)
    if isinstance(value, list):
        return max((_depth(v, level + 1) for v in value), default=level + 1)
    return level


def parse_passes(text: str) -> list[PassSpec]:
    """Parse ``"cleanup, symbolize(x:0=batch)"`` into pass specs; errors point at the column."""
    if not text or not text.strip():
        raise PassSpecError("--passes: empty pass list; name at least one pass")
    return _Parser(text).chain()


def load_recipe(path: str | os.PathLike) -> list[PassSpec]:
    """Read a TOML recipe of ``[[pass]]`` tables into pass specs."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PassSpecError(f"{p}: recipe file not found") from None
    except IsADirectoryError:
        raise PassSpecError(f"{p}: is a directory, expected a .toml recipe") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PassSpecError(f"{p}: cannot read recipe: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise PassSpecError(f"{p}: not valid TOML: {exc}") from None
    except RecursionError:
        raise PassSpecError(f"{p}: arrays or tables nested too deeply to read") from None
    if _depth(data) > MAX_NESTING:
        raise PassSpecError(f"{p}: values nested deeper than {MAX_NESTING} levels")
    tables = data.get("pass")
    extra = sorted(set(data) - {"pass"})
    if extra:
        raise PassSpecError(f"{p}: unknown top-level key(s) {extra}; a recipe holds [[pass]] tables")
    if not isinstance(tables, list) or not tables:
        raise PassSpecError(f"{p}: no [[pass]] tables; each needs name = \"...\" and its options")
    specs = []
    for i, table in enumerate(tables, 1):
        if not isinstance(table, dict) or not isinstance(table.get("name"), str):
            raise PassSpecError(f"{p}: [[pass]] number {i} has no name = \"...\"")
        options = {k: v for k, v in table.items() if k not in ("name", "options")}
        nested = table.get("options", {})
        if not isinstance(nested, dict):
            raise PassSpecError(f"{p}: [[pass]] number {i} ({table['name']}): options must be a table")
        both = sorted(set(options) & set(nested))
        if both:
            raise PassSpecError(f"{p}: [[pass]] number {i} ({table['name']}): {both} given twice")
        options.update(nested)
        specs.append(PassSpec(table["name"], options))
    return specs


def build_passes(
    specs: Iterable[PassSpec | str | Pass], entries: Mapping[str, PassEntry] | None = None
) -> list[Pass]:
    """Turn specs (or chain text, or ready passes) into pass instances, checking every option
    of every pass before any of them runs."""
    entries = discover() if entries is None else entries
    passes: list[Pass] = []
    for spec in specs:
        if isinstance(spec, Pass):
            passes.append(spec)
        elif isinstance(spec, str):
            passes.extend(create_pass(s.name, s.options, entries) for s in parse_passes(spec))
        else:
            passes.append(create_pass(spec.name, spec.options, entries))
    return passes
