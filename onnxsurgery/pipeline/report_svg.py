"""Geometry of the HTML report's two drawings, computed from the report's dict: an output's
error histogram and a localized node's neighbourhood (its inputs, op and outputs).

Only coordinates and labels are computed here; the markup is the template's (``templates/``),
so every name a drawing shows is escaped by the template like any other text.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["histogram_geometry", "neighbourhood_geometry"]

#: Histogram plot: width, height, left margin (count axis), bottom margin (error axis).
HIST_W, HIST_H, HIST_LEFT, HIST_BOTTOM = 420, 130, 44, 30
#: Width of the zero bin drawn apart at the left of the error axis; the widest bin.
ZERO_W, MAX_BAR = 18, 30
#: Neighbourhood drawing: width, row height, name box width, op box width.
SKETCH_W, ROW_H, NAME_W, OP_W = 660, 34, 220, 130
#: Characters of a tensor or node name a box shows (the whole name is its tooltip).
NAME_CHARS = 30


def _bar_height(count: int, top: int, plot_h: float) -> float:
    """Counts on a log scale (a tail of a few elements beside millions stays visible)."""
    if count <= 0:
        return 0.0
    return max(2.0, plot_h * math.log10(1 + count) / math.log10(1 + top))


def histogram_geometry(hist: dict[str, Any], atol: float | None) -> dict[str, Any]:
    """Bars (zeros apart, then one per power of two; empty bins added out to ``atol``, so its
    line shows where the errors stand against it) and decade ticks on the error axis."""
    counts, edges, zeros = list(hist["counts"]), list(hist["edges"]), hist["zeros"]
    while counts and atol and edges[-1] <= atol and len(edges) < 64:  # empty bins up to atol
        edges, counts = [*edges, edges[-1] * 2], [*counts, 0]
    while counts and atol and edges[0] > atol and len(edges) < 64:  # and down to it
        edges, counts = [edges[0] / 2, *edges], [0, *counts]
    plot_h = HIST_H - HIST_BOTTOM - 8
    x0 = HIST_LEFT + ZERO_W + 8
    bw = min(MAX_BAR, (HIST_W - x0 - 6) / max(1, len(counts)))
    top = max([zeros, *counts, 1])
    bars = [{"index": -1, "x": HIST_LEFT + 2, "w": ZERO_W - 4, "count": zeros, "label": "0"}]
    for k, count in enumerate(counts):
        label = f"[{edges[k]:.3g}, {edges[k + 1]:.3g})"
        bars.append({"index": k, "x": x0 + k * bw + 0.5, "w": max(1.0, bw - 1), "count": count, "label": label})
    for bar in bars:
        bar["h"] = _bar_height(bar["count"], top, plot_h)
        bar["y"] = HIST_H - HIST_BOTTOM - bar["h"]
    ticks: list[dict[str, Any]] = []
    atol_x = None
    if counts:
        low = math.log2(edges[0])

        def at(value: float) -> float:
            return x0 + (math.log2(value) - low) * bw

        decades = range(math.ceil(math.log10(edges[0])), math.floor(math.log10(edges[-1])) + 1)
        step = max(1, math.ceil(len(decades) / 6))
        ticks = [{"x": at(10.0**d), "label": f"1e{d}"} for d in decades if d % step == 0]
        if atol and edges[0] <= atol <= edges[-1]:
            atol_x = at(atol)
    return {
        "w": HIST_W, "h": HIST_H, "left": HIST_LEFT, "base": HIST_H - HIST_BOTTOM, "top": top,
        "bars": bars, "ticks": ticks, "atol_x": atol_x,
    }  # fmt: skip


def _short(name: str) -> str:
    """The end of a long name (where exporters put what tells tensors apart)."""
    return name if len(name) <= NAME_CHARS else "..." + name[3 - NAME_CHARS :]


def _column(names: list[str], x: float, rows: int, states: dict[str, str]) -> list[dict[str, Any]]:
    """Boxes for ``names`` in a column, centred on the drawing's rows."""
    pad = (rows - len(names)) * ROW_H / 2
    return [
        {"x": x, "y": 10 + pad + k * ROW_H, "name": n, "short": _short(n), "state": states.get(n, "plain")}
        for k, n in enumerate(names)
    ]


def neighbourhood_geometry(node: dict[str, Any], states: dict[str, str]) -> dict[str, Any]:
    """One node (``{"name", "op", "inputs", "outputs"}``) drawn as input boxes, an op box and
    output boxes with arrows between them; ``states`` colours a tensor (``bad``, ``ok``, ``changed``)."""
    inputs = [n for n in node["inputs"] if n]
    rows = max(len(inputs), len(node["outputs"]), 1)
    height = rows * ROW_H + 14
    op_x = (SKETCH_W - OP_W) / 2
    op = {"x": op_x, "y": height / 2 - 16, "w": OP_W, "h": 32, "op": node["op"], "name": node["name"] or ""}
    left = _column(inputs, 6, rows, states)
    right = _column(node["outputs"], SKETCH_W - NAME_W - 6, rows, states)
    mid = height / 2
    edges = [(b["x"] + NAME_W, b["y"] + ROW_H / 2 - 4, op_x, mid) for b in left]
    edges += [(op_x + OP_W, mid, b["x"], b["y"] + ROW_H / 2 - 4) for b in right]
    return {"w": SKETCH_W, "h": height, "box_w": NAME_W, "box_h": ROW_H - 8, "op": op,
            "inputs": left, "outputs": right, "edges": edges}  # fmt: skip
