"""``onnxsurgery reference``: record torch outputs as reference cases, show what a folder holds.

A thin layer over :func:`onnxsurgery.record_model_cases` and
:func:`onnxsurgery.validation.references.load_cases`, added to the root command as a group.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

import onnxsurgery
from onnxsurgery import terminal, validation
from onnxsurgery.cli.commands import Command, help_text, reflowed
from onnxsurgery.model.signature import parse_shape_spec
from onnxsurgery.validation.references import load_cases

__all__ = ["reference_app"]


reference_app = typer.Typer(
    help=reflowed(
        """Reference cases: torch outputs stored in the ONNX test-data layout.

        record makes them from a torch module; show lists what a folder holds. validate --ref and
        run --ref check a model against them.

        Examples:
          onnxsurgery reference record net.py:Net -m model.onnx -o refs --case x:2x8
          onnxsurgery reference show refs
        """
    ),
    rich_markup_mode="rich",
    no_args_is_help=True,
)


# reference record's arguments and options
ModuleArg = Annotated[
    str,
    typer.Argument(metavar="MODULE", help="The torch module: package.module:attr or path/to/file.py:attr (instance, class or factory)."),
]
RecordModelOpt = Annotated[
    Path, typer.Option("--model", "-m", help="The exported .onnx model: gives input names, dtypes and output names.")
]
RecordOutOpt = Annotated[Path, typer.Option("--out", "-o", help="Folder for test_data_set_N (created if missing).")]
RecordCaseOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--case",
        help='One case per option: input sizes, e.g. "x:2x3x32x32" (or x:2,3,32,32 or x:\\[2,3,32,32]) or '
        '"ids:2x8; mask:2x8". \\[default: one case at the model\'s declared sizes]',
    ),
]
RecordInputOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--input",
        help="An input's values from a file, NAME=FILE.npy or NAME=FILE.pb (a TensorProto), used in every case "
        "(repeatable).",
    ),
]
ValRangeOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--val-range",
        help="An input's random values, NAME:LOW,HIGH, both ends included (repeatable). "
        "\\[default: ids over their table, other integers 0/1, floats normal]",
    ),
]
OverwriteOpt = Annotated[
    bool, typer.Option("--overwrite", help="Replace the cases the folder holds instead of adding after them.")
]
NoCheckOpt = Annotated[
    bool,
    typer.Option(
        "--no-check", help="Do not run the ONNX model on ONNX Runtime at its traced size to compare it with the module."
    ),
]


@reference_app.command("record", cls=Command)
@help_text
def reference_record(
    module: ModuleArg,
    model: RecordModelOpt,
    out_dir: RecordOutOpt,
    case: RecordCaseOpt = None,
    input_file: RecordInputOpt = None,
    val_range: ValRangeOpt = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the random inputs.")] = 0,
    overwrite: OverwriteOpt = False,
    no_check: NoCheckOpt = False,
) -> None:
    """Run a torch module in eager mode on random inputs and store its outputs as reference cases.

    Each --case becomes one test_data_set_N folder under --out; --model gives the inputs' names
    and dtypes.

    Before anything is written, the ONNX model runs on ONNX Runtime at its traced size and must
    match the module there (a module built with fresh weights records references the model can
    never match). Exit 2: bad options, a case the model cannot take, an error in the module, or
    that mismatch.

    Examples:
      onnxsurgery reference record net.py:Net -m model.onnx -o refs --case x:2x8
      onnxsurgery reference record nets.py:make_net -m model.onnx -o refs \\
          --case "ids:2x8; mask:2x8" --case "ids:1x16; mask:1x16" --val-range ids:0,30521
    """
    from rich.text import Text

    from onnxsurgery.validation.feeds import parse_value_range
    from onnxsurgery.validation.recording import read_input_file

    with terminal.boundary():
        sizes = [
            dict(parse_shape_spec(part, flag="--case") for part in text.split(";") if part.strip())
            for text in case or [""]
        ]
        values = dict(read_input_file(t) for t in input_file or [])
        ranges = dict(parse_value_range(t) for t in val_range or [])
        net = validation.load_module(module)
        cases = onnxsurgery.record_model_cases(
            net, model, out_dir, sizes=sizes, seed=seed, values=values, value_ranges=ranges,
            check=not no_check, overwrite=overwrite,
        )  # fmt: skip
        if cases.check:
            terminal.out.print(Text(f"checked: {cases.check}"), soft_wrap=True)
        if cases.existing:
            terminal.out.print(Text(f"note: {cases.appended_note(out_dir)}"), soft_wrap=True)
        for c in cases:
            dims = ", ".join(f"{k} {'x'.join(map(str, v.shape))}" for k, v in c.inputs.items())
            terminal.out.print(Text(f"wrote {out_dir / c.name}  ({dims})"), soft_wrap=True)


@reference_app.command("show", cls=Command)
@help_text
def reference_show(
    path: Annotated[Path, typer.Argument(metavar="PATH", help="A folder of test_data_set_N, one such folder, or .npz.")],
) -> None:
    """List the cases under PATH with their inputs and outputs.

    PATH is a folder of test_data_set_N folders, one such folder, or an .npz file.

    Examples:
      onnxsurgery reference show refs
      onnxsurgery reference show refs/test_data_set_0
    """
    from rich.table import Table
    from rich.text import Text

    with terminal.boundary():
        table = Table(title=Text(f"reference cases: {path}"), title_justify="left")
        table.add_column("case", style="bold")
        table.add_column("inputs")
        table.add_column("outputs")
        for c in load_cases(path):
            fmt = lambda d: ", ".join(f"{k} {v.dtype}[{'x'.join(map(str, v.shape))}]" for k, v in d.items())  # noqa: E731
            table.add_row(c.name, fmt(c.inputs), fmt(c.outputs))
        terminal.out.print(table)
