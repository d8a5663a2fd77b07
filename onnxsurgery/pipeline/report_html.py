"""The ``--report FILE.html`` form: one self-contained page rendered from the same dict the JSON
report is (``report.to_dict()``), so the page and the JSON cannot disagree.

    write_report(report.to_dict(), "run.html")   # .html/.htm: the page; anything else: JSON

The page is a Jinja2 template (``templates/report.html.j2``, autoescaped: node names and paths
stay text) with inline CSS and inline SVG drawn from the data (``report_svg.py``); it holds no
script and its Content-Security-Policy forbids fetching anything, so it reads the same offline.
Every number it shows carries ``data-json`` (its path in the JSON) and ``data-fmt`` (how it was
rounded), so a test can check the page against the JSON number by number. Jinja2 is imported
only when a page is written.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from onnxsurgery.files import write_atomic
from onnxsurgery.pipeline.report import write_json
from onnxsurgery.pipeline.report_svg import histogram_geometry, neighbourhood_geometry
from onnxsurgery.validation.arrays import format_number

__all__ = ["HTML_SUFFIXES", "is_page", "render_html", "write_report"]

#: File name endings that get the page; every other name (``-`` included) gets the JSON.
HTML_SUFFIXES = (".html", ".htm")


def is_page(path: str | os.PathLike | None) -> bool:
    """Whether a report written to ``path`` is the page rather than JSON."""
    return path is not None and os.fspath(path).lower().endswith(HTML_SUFFIXES)


def write_report(data: dict[str, Any], path: str | os.PathLike) -> Path:
    """Write a report's dict as the page where ``path`` ends in .html/.htm, else as JSON."""
    if is_page(path):
        page = render_html(data)

        def write(staged: Path) -> None:
            staged.write_text(page, encoding="utf-8")

        return write_atomic(path, write, what="report", text=True)
    return write_json(data, path)


def page_kind(data: dict[str, Any]) -> str:
    """``run`` (a pipeline report), ``diff`` (two models) or ``validation``."""
    if "passes" in data:
        return "run"
    if "ops" in data and "constants" in data:
        return "diff"
    return "validation"


def shown_number(value: Any, fmt: str = "sig") -> str:
    """A number as the page shows it: ``sig`` 3 significant digits (as the terminal),
    ``fixed3`` 3 decimals (seconds), ``int`` as it is; ``-`` for none."""
    if value is None or isinstance(value, str):
        return "-" if value is None else value
    if fmt == "int":
        return str(int(value))
    if fmt == "fixed3":
        return f"{value:.3f}"
    return format_number(float(value))


def by_output(validation: dict[str, Any]) -> list[tuple[str, list[tuple[int, Any, int, Any]]]]:
    """Each output name with its (case index, case, output index, output) that have a histogram."""
    rows: dict[str, list[tuple[int, Any, int, Any]]] = {}
    for ci, case in enumerate(validation.get("cases") or []):
        for k, out in enumerate(case.get("outputs") or []):
            if out.get("histogram"):
                rows.setdefault(out["name"], []).append((ci, case, k, out))
    return list(rows.items())


def _input_states(localized: dict[str, Any]) -> dict[str, str]:
    """How each tensor around the localized node compares: ``bad``, ``ok`` or unknown."""
    states: dict[str, str] = {}
    for origin in localized.get("inputs") or []:
        comparison = origin.get("comparison")
        if comparison is not None:
            states[origin["name"]] = "ok" if comparison["passed"] else "bad"
        elif origin.get("note") == "fed the same values":
            states[origin["name"]] = "ok"
    for out in localized.get("outputs") or []:
        states[out["name"]] = "ok" if out["passed"] else "bad"
    return states


def sketches(localized: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The localized node drawn before (its counterpart in the reference) and after."""
    hood = (localized or {}).get("neighbourhood")
    if not hood or not hood.get("after"):
        return []
    after = hood["after"]
    states = _input_states(localized or {})
    drawn = []
    before = hood.get("before")
    if before is not None:
        changed = {}
        for k, name in enumerate(before["inputs"]):
            now = after["inputs"][k] if k < len(after["inputs"]) else None
            if now != name or states.get(now or "") == "bad":
                changed[name] = "changed"
        drawn.append({"title": "before (reference)", **neighbourhood_geometry(before, changed)})
    drawn.append({"title": "after (this model)", **neighbourhood_geometry(after, states)})
    return drawn


def render_html(data: dict[str, Any]) -> str:
    """The page for a report's dict (a run, a validation, a diff)."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("onnxsurgery.pipeline", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals.update(shown=shown_number, histogram=histogram_geometry, sketches=sketches, by_output=by_output)
    page = env.get_template("report.html.j2").render(data=data, kind=page_kind(data))
    return page.lstrip()  # the macros above the page leave blank lines
