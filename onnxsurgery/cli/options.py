"""The options several ``onnxsurgery`` commands take, and the panels their help is grouped in."""

from __future__ import annotations

from typing import Annotated

import typer

from onnxsurgery.validation.runtime import PROVIDERS

__all__ = [
    "PANEL_CHAIN",
    "PANEL_IO",
    "PANEL_VALIDATE",
    "AtolOpt",
    "ProviderOpt",
    "QuietOpt",
    "RtolOpt",
    "TolOpt",
    "TracebackOpt",
    "VerboseOpt",
]

PANEL_IO = "Input and output"
PANEL_CHAIN = "Pass chain"
PANEL_VALIDATE = "Validation"


QuietOpt = Annotated[bool, typer.Option("-q", "--quiet", help="Print nothing but errors.")]
TracebackOpt = Annotated[bool, typer.Option("--traceback", help="On an error, print the Python stack too.")]


ProviderOpt = Annotated[
    str,
    typer.Option(
        "--provider",
        help=f"ONNX Runtime provider: {', '.join(PROVIDERS)} (auto = CUDA when it really loads).",
        rich_help_panel=PANEL_VALIDATE,
    ),
]


VerboseOpt = Annotated[
    bool, typer.Option("-v", "--verbose", help="Show the detail: each pass's options and notes, the whole validation table, min atol of every row.")
]


AtolOpt = Annotated[
    float, typer.Option("--atol", help="Absolute tolerance of floating outputs.", rich_help_panel=PANEL_VALIDATE)
]
RtolOpt = Annotated[
    float, typer.Option("--rtol", help="Relative tolerance of floating outputs.", rich_help_panel=PANEL_VALIDATE)
]
TolOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--tol",
        help="Tolerance of one output, NAME=ATOL[,RTOL] (repeatable); the only way to loosen bool/int outputs.",
        rich_help_panel=PANEL_VALIDATE,
    ),
]
