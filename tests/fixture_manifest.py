"""Typed access to ``fixtures/manifest.toml`` for tests: ``from fixture_manifest import ...``.

Each ``[[fixture]]`` table becomes a :class:`FixtureEntry` with absolute paths and the dynamic
axes in the ``torch.onnx.export(dynamic_axes=...)`` format (integer axis keys)::

    from fixture_manifest import load_manifest

    @pytest.mark.parametrize("entry", [e for e in load_manifest() if e.exported], ids=str)
    def test_something(entry): ...
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from onnxsurgery.validation.recording import import_file

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

__all__ = [
    "FIXTURES_DIR",
    "MANIFEST_PATH",
    "FixtureEntry",
    "load_manifest",
    "get_entry",
    "fixture_generate",
    "fixture_models",
]

FIXTURES_DIR = Path(__file__).resolve().parent.parent / "fixtures"
MANIFEST_PATH = FIXTURES_DIR / "manifest.toml"


@dataclass(frozen=True)
class FixtureEntry:
    """One fixture model as exported by one exporter (see the header of manifest.toml)."""

    name: str
    exporter: Literal["torchscript", "dynamo"]
    summary: str
    model_path: Path  # fixtures/<name>/<exporter>/model.onnx (absent when not exported)
    references_dir: Path  # holds test_data_set_0 (traced size), test_data_set_1.. (other sizes)
    exported: bool
    export_error: str | None
    opset: int | None
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    traced: dict[str, list[int]]  # input -> shape at export
    case_sizes: list[dict[str, int]]  # named sizes per test_data_set_N, [0] = traced
    dynamic_axes: dict[str, dict[int, str]]  # input -> {axis: symbol}
    symbolize: Literal["expected", "blocked"]
    blocked_reason: str | None
    multi_output: bool
    concat: Literal["expected", "blocked", "n/a"]
    concat_reason: str | None
    # Outcome per test_data_set_1.. of the static graph with its I/O declarations relaxed:
    # "error" | "wrong_shape" | "wrong_values" | "ok". Empty when not exported.
    static_other_sizes: tuple[str, ...] = field(default=())
    static_fails_other_sizes: bool | None = None

    @property
    def id(self) -> str:
        """``"<name>-<exporter>"``, for pytest ids."""
        return f"{self.name}-{self.exporter}"

    @property
    def error_path(self) -> Path:
        """``export_error.txt`` beside where the model would be."""
        return self.model_path.with_name("export_error.txt")

    def __str__(self) -> str:
        return self.id


def _entry(raw: dict[str, Any]) -> FixtureEntry:
    return FixtureEntry(
        name=raw["name"],
        exporter=raw["exporter"],
        summary=raw.get("summary", ""),
        model_path=FIXTURES_DIR / raw["model"],
        references_dir=FIXTURES_DIR / raw["references"],
        exported=bool(raw["exported"]),
        export_error=raw.get("export_error"),
        opset=raw.get("opset"),
        input_names=tuple(raw["inputs"]),
        output_names=tuple(raw["outputs"]),
        traced={k: list(v) for k, v in raw["traced"].items()},
        case_sizes=[dict(s) for s in raw["case_sizes"]],
        dynamic_axes={
            name: {int(axis): symbol for axis, symbol in axes.items()}
            for name, axes in raw["dynamic_axes"].items()
        },
        symbolize=raw["symbolize"],
        blocked_reason=raw.get("blocked_reason"),
        multi_output=bool(raw["multi_output"]),
        concat=raw.get("concat", "n/a"),
        concat_reason=raw.get("concat_reason"),
        static_other_sizes=tuple(raw.get("static_other_sizes", ())),
        static_fails_other_sizes=raw.get("static_fails_other_sizes"),
    )


@cache
def _load(path: Path) -> tuple[FixtureEntry, ...]:
    with path.open("rb") as fh:
        data = tomllib.load(fh)
    return tuple(_entry(raw) for raw in data["fixture"])


def load_manifest(path: Path = MANIFEST_PATH) -> list[FixtureEntry]:
    """Every fixture entry, in manifest order (model by model, torchscript before dynamo)."""
    return list(_load(Path(path)))


def get_entry(name: str, exporter: str = "torchscript") -> FixtureEntry:
    """The entry for one fixture and exporter; ``KeyError`` if there is none."""
    for entry in load_manifest():
        if entry.name == name and entry.exporter == exporter:
            return entry
    raise KeyError(f"no fixture {name!r} for exporter {exporter!r} in {MANIFEST_PATH}")


def fixture_generate() -> ModuleType:
    """``fixtures/generate.py`` as a module (export helpers, ``relax_io``, ``run_ort``)."""
    return import_file(FIXTURES_DIR / "generate.py", "_onnxsurgery_fixtures_generate")


def fixture_models() -> ModuleType:
    """``fixtures/models.py`` as a module (``SPECS``, ``build_module``, ``make_inputs``); imports torch."""
    return fixture_generate().fixture_models()
