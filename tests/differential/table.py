"""The campaign's tables: per pass (tried, identical, different, exit 2, crash) and per traced
batch for symbolize's templates (pass, refused, ambiguous, wrong, crash), then what the failures were."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from differential.campaign import SINGLES
from differential.oracle import KINDS, TEMPLATE_KINDS

__all__ = ["pass_table", "template_table", "classes"]


def pass_table(counts: Counter, dropped: int, models: int) -> str:
    rows = [*SINGLES, "chain"]
    lines = [
        f"differential: {models} generated models, {models - dropped} kept (ONNX Runtime runs them)",
        f"{'pass':16} {'tried':>7} " + " ".join(f"{k:>9}" for k in KINDS),
    ]
    for row in rows:
        tried = sum(counts[(row, k)] for k in KINDS)
        lines.append(f"{row:16} {tried:7} " + " ".join(f"{counts[(row, k)]:9}" for k in KINDS))
    total = sum(counts.values())
    lines.append(f"{'total':16} {total:7} " + " ".join(f"{sum(counts[(r, k)] for r in rows):9}" for k in KINDS))
    return "\n".join(lines)


def template_table(counts: Counter, templates: int) -> str:
    lines = [
        f"symbolize templates: {templates}, each traced at batch 2 and at batch 1",
        f"{'traced at':16} {'tried':>7} " + " ".join(f"{k:>9}" for k in TEMPLATE_KINDS),
    ]
    for batch in (2, 1):
        tried = sum(counts[(batch, k)] for k in TEMPLATE_KINDS)
        lines.append(f"{'batch ' + str(batch):16} {tried:7} " + " ".join(f"{counts[(batch, k)]:9}" for k in TEMPLATE_KINDS))
    return "\n".join(lines)


def classes(details: Iterable[str], limit: int = 12) -> str:
    """The distinct messages, most frequent first, digits and quoted names folded together."""
    import re

    folded = Counter(re.sub(r"'[^']*'|\d+", "#", d)[:150] for d in details)
    return "\n".join(f"  {n:5}  {text}" for text, n in folded.most_common(limit))
