"""``onnxsurgery validate``: the command, its own options and their checks.

A thin layer over :func:`onnxsurgery.validation.against_references.validate` (``--ref``) and
:func:`onnxsurgery.compare_models` (``--against``); the root command registers it as ``validate``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

# --against and --localize are reached through the package namespaces, which import what they
# need when they are used (see onnxsurgery/lazy.py).
import onnxsurgery
from onnxsurgery import terminal
from onnxsurgery.cli.commands import help_text
from onnxsurgery.cli.options import (
    PANEL_IO,
    PANEL_VALIDATE,
    AtolOpt,
    ProviderOpt,
    QuietOpt,
    RtolOpt,
    TolOpt,
    VerboseOpt,
)
from onnxsurgery.errors import UsageError, ValidationMismatch
from onnxsurgery.files import check_targets, to_stdout
from onnxsurgery.model.signature import parse_shape_spec
from onnxsurgery.pipeline.report_html import write_report
from onnxsurgery.validation.against_references import validate
from onnxsurgery.validation.tolerances import DEFAULT_ATOL, DEFAULT_RTOL, parse_tolerance_spec

__all__ = ["validate_command"]


# validate's options
ValidateRefOpt = Annotated[
    Path | None,
    typer.Option(
        "--ref",
        help="Reference cases (test_data_set_N folders or .npz). With --against, only their inputs are used.",
        rich_help_panel=PANEL_VALIDATE,
    ),
]
AgainstOpt = Annotated[
    Path | None,
    typer.Option(
        "--against",
        help="Compare with this model instead of stored outputs (on --ref inputs, else random ones).",
        rich_help_panel=PANEL_VALIDATE,
    ),
]
AgainstProviderOpt = Annotated[
    str | None,
    typer.Option(
        "--against-provider",
        help="Provider for the --against model (cuda against cpu on the same file: where CUDA departs from CPU). "
        "\\[default: --provider's]",
        rich_help_panel=PANEL_VALIDATE,
    ),
]
ShapeOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--shape",
        help="Size of a random input for --against, e.g. x:3x3x224x224 (repeatable).",
        rich_help_panel=PANEL_VALIDATE,
    ),
]
AgainstSeedOpt = Annotated[
    int, typer.Option("--seed", help="Seed of the random inputs for --against.", rich_help_panel=PANEL_VALIDATE)
]
CasesOpt = Annotated[
    int,
    typer.Option("--cases", min=1, help="Number of random input sets for --against.", rich_help_panel=PANEL_VALIDATE),
]
LocalizeOpt = Annotated[
    bool,
    typer.Option(
        "--localize",
        help="On a mismatch, find the first node whose output differs from --against, or with "
        "--ref from --original (on a failing case the original takes).",
        rich_help_panel=PANEL_VALIDATE,
    ),
]
OriginalOpt = Annotated[
    Path | None,
    typer.Option(
        "--original",
        help="The model as exported, for --ref --localize (a repaired model does not record "
        "where it came from).",
        rich_help_panel=PANEL_VALIDATE,
    ),
]
ValidateReportOpt = Annotated[
    Path | None,
    typer.Option("--report", help="Write every case and output here: FILE.html a page, else JSON.", rich_help_panel=PANEL_IO),
]


@help_text
def validate_command(
    model: Annotated[Path, typer.Argument(metavar="MODEL", help="The .onnx model to check.")],
    ref: ValidateRefOpt = None,
    against: AgainstOpt = None,
    shape: ShapeOpt = None,
    seed: AgainstSeedOpt = 0,
    cases: CasesOpt = 1,
    atol: AtolOpt = DEFAULT_ATOL,
    rtol: RtolOpt = DEFAULT_RTOL,
    tol: TolOpt = None,
    provider: ProviderOpt = "auto",
    against_provider: AgainstProviderOpt = None,
    localize: LocalizeOpt = False,
    original: OriginalOpt = None,
    report: ValidateReportOpt = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Check MODEL on ONNX Runtime against stored torch outputs (--ref) or another model (--against).

    Exit 0: every case and output within tolerance. Exit 1: a mismatch, or a case the model does
    not accept. Exit 2: bad options, or a model or reference that cannot be read.

    Examples:
      onnxsurgery validate model.dyn.onnx --ref refs
      onnxsurgery validate model.dyn.onnx --ref refs --tol logits=1e-3,1e-2
      onnxsurgery validate model.dyn.onnx --against model.onnx --shape x:2x3x32x32
    """
    with terminal.boundary(None, quiet, verbose, stdout_taken=to_stdout(report)):
        check_targets(
            {"model": model, "--ref": ref, "--against": against}, {"--report": report}, text=("--report",)
        )
        tolerances = dict(parse_tolerance_spec(t) for t in tol or [])
        shapes = dict(parse_shape_spec(s) for s in shape or [])
        _check_validate_usage(
            ref, against, original, localize, random=bool(shapes or seed or cases != 1), against_provider=against_provider
        )
        inputs = {"feeds_or_cases": ref, "shapes": shapes, "seed": seed, "cases": cases}
        within: dict[str, Any] = {"provider": provider, "atol": atol, "rtol": rtol}
        if against is None:
            assert ref is not None  # _check_validate_usage: --ref or --against
            with terminal.progress_line(quiet) as progress:
                result = validate(
                    model, ref, **within, tolerances=tolerances, progress=_as_stage("validate", progress),
                    histograms=report is not None,
                )  # fmt: skip
        else:
            within["reference_provider"] = against_provider
            result = onnxsurgery.compare_models(
                model, against, **inputs, **within, tolerances=tolerances, histograms=report is not None
            )
        shown = result
        if localize and not result:
            from onnxsurgery import divergence

            shown = divergence.localize_validation(
                model, result, against=against, original=original, **inputs, **within
            )
        if report is not None:
            write_report(shown.to_dict(), report)
        if not result:
            what = str(against if against is not None else ref)
            raise ValidationMismatch(f"validation against {what} failed: {result.summary}", report=shown)
        if not quiet:
            terminal.show(result, verbose)


def _as_stage(where: str, progress: Callable[..., None] | None) -> Callable[..., None] | None:
    """The progress line's callback for a library call that reports ``(stage, done, total)``."""
    if progress is None:
        return None
    return lambda stage, done, total: progress(where, stage, done, total)


def _check_validate_usage(
    ref: Path | None, against: Path | None, original: Path | None, localize: bool, *, random: bool,
    against_provider: str | None = None,
) -> None:  # fmt: skip
    """Refuse option combinations validate cannot act on; ``random``: --shape, --seed or --cases given."""
    if against_provider is not None and against is None:
        raise UsageError("--against-provider is for --against OTHER.onnx: the provider that model runs on")
    if original is not None and (against is not None or not localize):
        raise UsageError("--original is for --ref with --localize (with --against, that model is the reference)")
    if localize and against is None and original is None:
        raise UsageError(
            "--localize with --ref needs the model as exported: give --original ORIG.onnx "
            "(or compare with --against ORIG.onnx)"
        )
    if against is None:
        if ref is None:
            raise UsageError("nothing to validate against: give --ref PATH or --against OTHER.onnx")
        if random:
            raise UsageError("--shape, --seed and --cases are for random inputs with --against")
    elif ref is not None and random:
        raise UsageError("--shape, --seed and --cases are for random inputs; --ref gives stored inputs")
