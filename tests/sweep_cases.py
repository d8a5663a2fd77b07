"""A row of ``bench/sweep.py`` scored as the sweep scores it, for the tests of what the sweep
found: built from its shrunk config, exported statically, symbolized by the CLI and checked
against torch eager at held-out sizes (exports cached under ``build/sweep/``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest


def scored_cases(
    name: str, exporters: Sequence[str], batches: Sequence[int]
) -> list[dict[str, Any]]:
    """Row ``name``'s cases (exporter x traced batch), through the sweep's own worker; skipped
    where transformers is not installed."""
    pytest.importorskip("transformers")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import sweep
    import sweep_rows

    rows, _ = sweep_rows.enumerate_rows()
    [row] = sweep.select(rows, only=[name])
    result = sweep.score_row(row, list(exporters), list(batches), timeout=120, memory_gb=8)
    assert result["build"] == "ok", result
    return result["cases"]


def scored_case(name: str, exporter: str, batch: int) -> dict[str, Any]:
    """The one case of row ``name`` by ``exporter`` traced at ``batch``."""
    [case] = scored_cases(name, [exporter], [batch])
    return case
