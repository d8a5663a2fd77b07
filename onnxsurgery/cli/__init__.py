"""The ``onnxsurgery`` command: a thin layer over the Python API with the same names.

Each command parses its options, calls one library function with keyword arguments, and renders
the result through ``onnxsurgery/terminal.py``. Errors: every
:class:`~onnxsurgery.errors.OnnxSurgeryError` is caught at one boundary
(:func:`onnxsurgery.terminal.boundary`) and printed as one red line on stderr with its exit code
(2 for bad input or a pass that could not do its job, 1 for a validation mismatch); anything else
is a bug of ours: exit 3 with one line, the stack with ``--traceback``. User text is never read
as rich markup.

This module holds the root command with run, passes, inspect and diff; ``validate.py`` the
validate command, ``reference.py`` the reference group, ``options.py`` the options several
commands share, ``commands.py`` what every command is made with.
"""

from __future__ import annotations

import contextlib
import gc
import json
import sys
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Annotated

import typer

# What `run` needs (and the options' defaults) comes from the modules that define it; what only
# another command uses (inspect's summary, validate --against, reference record) is reached through
# the package namespaces, which import it when that command runs (see onnxsurgery/lazy.py).
import onnxsurgery
from onnxsurgery import terminal
from onnxsurgery._version import __version__
from onnxsurgery.cli.commands import Command, help_text
from onnxsurgery.cli.options import (
    PANEL_CHAIN,
    PANEL_IO,
    PANEL_VALIDATE,
    AtolOpt,
    ProviderOpt,
    QuietOpt,
    RtolOpt,
    TolOpt,
    TracebackOpt,
    VerboseOpt,
)
from onnxsurgery.cli.reference import reference_app
from onnxsurgery.cli.validate import validate_command
from onnxsurgery.errors import OnnxSurgeryError, UsageError, ValidationMismatch
from onnxsurgery.files import check_targets, to_stdout
from onnxsurgery.limits import Limits, parse_limit
from onnxsurgery.model.io import load_model, save_model
from onnxsurgery.pipeline.chain import (
    PassSpec,
    build_passes,
    format_value,
    load_recipe,
    parse_passes,
)
from onnxsurgery.pipeline.registry import discover, get_pass
from onnxsurgery.pipeline.report_html import write_report
from onnxsurgery.pipeline.runner import Pipeline, default_output_path, pass_failure
from onnxsurgery.validation.tolerances import DEFAULT_ATOL, DEFAULT_RTOL, parse_tolerance_spec

__all__ = ["app", "main", "script"]

app = typer.Typer(
    name="onnxsurgery",
    rich_markup_mode="rich",
    context_settings={"help_option_names": ["-h", "--help"]},
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _version_callback(value: bool) -> None:
    if value:
        terminal.out.print(f"onnxsurgery {__version__}")
        raise typer.Exit(0)


@app.callback()
@help_text
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version_callback, is_eager=True, help="Show the version and exit."
        ),
    ] = False,
    traceback: TracebackOpt = False,
) -> None:
    """Repair ONNX models exported from PyTorch: symbolize traced sizes, merge outputs,
    fold constants, and validate against stored torch outputs.

    [bold]onnxsurgery COMMAND -h[/bold] describes a command; [bold]onnxsurgery passes NAME[/bold]
    describes a pass and its options.

    Examples:
      onnxsurgery inspect model.onnx
      onnxsurgery run model.onnx --passes "symbolize, fold-constants" --ref refs
      onnxsurgery validate model.dyn.onnx --ref refs
      onnxsurgery passes symbolize
    """
    terminal.state["traceback"] = traceback


# run's options
OutputOpt = Annotated[
    Path | None,
    typer.Option(
        "-o",
        "--output",
        help="Where to write the repaired model. \\[default: MODEL.surgery.onnx beside the input]",
        rich_help_panel=PANEL_IO,
    ),
]
PassesOpt = Annotated[
    str | None,
    typer.Option(
        "--passes",
        "-p",
        help='Pass chain, e.g. "cleanup, symbolize(x:0=batch), concat-outputs(axis=1)".',
        rich_help_panel=PANEL_CHAIN,
    ),
]
RecipeOpt = Annotated[
    Path | None,
    typer.Option(
        "--recipe", help="TOML file of \\[\\[pass]] tables (instead of --passes).", rich_help_panel=PANEL_CHAIN
    ),
]
RunRefOpt = Annotated[
    Path | None,
    typer.Option(
        "--ref",
        help="Reference cases (test_data_set_N folders or .npz) to validate against after the last pass.",
        rich_help_panel=PANEL_VALIDATE,
    ),
]
KeepFailedOpt = Annotated[
    Path | None,
    typer.Option(
        "--keep-failed",
        help="When validation fails, write the model here for inspection (never to -o).",
        rich_help_panel=PANEL_VALIDATE,
    ),
]
RunReportOpt = Annotated[
    Path | None,
    typer.Option("--report", help="Write the run's report here: FILE.html a page to read, else JSON.", rich_help_panel=PANEL_IO),
]
CheckOpt = Annotated[
    bool,
    typer.Option(
        "--check/--no-check",
        help="Run the ONNX checker and shape inference after every pass.",
        rich_help_panel=PANEL_CHAIN,
    ),
]
LimitOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--limit",
        help="Change a resource limit, NAME=VALUE (repeatable); the limits and their defaults: "
        + ", ".join(f"{f.name}={format_value(getattr(Limits(), f.name))}" for f in fields(Limits))
        + ".",
        rich_help_panel=PANEL_CHAIN,
    ),
]


@app.command(cls=Command)
@help_text
def run(
    model: Annotated[Path, typer.Argument(metavar="MODEL", help="The exported .onnx model (never modified).")],
    output: OutputOpt = None,
    passes: PassesOpt = None,
    recipe: RecipeOpt = None,
    ref: RunRefOpt = None,
    atol: AtolOpt = DEFAULT_ATOL,
    rtol: RtolOpt = DEFAULT_RTOL,
    tol: TolOpt = None,
    provider: ProviderOpt = "auto",
    keep_failed: KeepFailedOpt = None,
    report: RunReportOpt = None,
    check: CheckOpt = True,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    limit: LimitOpt = None,
    traceback: TracebackOpt = False,
) -> None:
    """Run a pass chain on MODEL, validate it, and write the result atomically.

    Nothing is written unless every pass and the validation succeeded. Exit 0: done. Exit 1:
    validation found a mismatch. Exit 2: bad input or a pass that could not do its job.

    Examples:
      onnxsurgery run model.onnx -o model.dyn.onnx --passes symbolize
      onnxsurgery run model.onnx --passes "symbolize(x:0=batch), fold-constants"
      onnxsurgery run model.onnx --recipe passes.toml --ref refs --tol logits=1e-3
    """
    terminal.state["traceback"] = terminal.state["traceback"] or traceback
    with terminal.boundary(report, quiet, verbose, stdout_taken=to_stdout(report) or to_stdout(output)):
        target = output if output is not None else default_output_path(model)
        # before anything runs: no output onto an input, no two outputs onto one file
        check_targets(
            {"input model": model, "--recipe file": recipe, "--ref": ref},
            {"-o": target, "--report": report, "--keep-failed": keep_failed},
            text=("--report",),
        )
        specs = _chain_specs(passes, recipe)
        limits = dict(parse_limit(text) for text in limit or [])
        tolerances = dict(parse_tolerance_spec(t) for t in tol or [])
        pipeline = Pipeline(
            specs,
            check=check,
            references=ref,
            provider=provider,
            atol=atol,
            rtol=rtol,
            tolerances=tolerances,
            limits=limits,
            diffs=report is not None,  # what each pass changed goes into the JSON
            histograms=report is not None,  # each output's errors, drawn by the page
        )
        with _keeping_failed(keep_failed), terminal.progress_line(quiet) as progress:
            result = pipeline.run(model, target, progress=progress)
        if report is not None:
            write_report(result.to_dict(), report)
        if not quiet:
            terminal.show(result, verbose)


def _chain_specs(passes: str | None, recipe: Path | None) -> list[PassSpec]:
    """The pass chain from --passes or --recipe (exactly one of them)."""
    if passes and recipe:
        raise UsageError("give either --passes or --recipe, not both")
    if not passes and not recipe:
        names = ", ".join(n for n, e in discover().items() if e.available)
        raise UsageError(f"no passes given: use --passes \"...\" or --recipe FILE (passes: {names})")
    return load_recipe(recipe) if recipe else parse_passes(passes or "")


@contextlib.contextmanager
def _keeping_failed(keep_failed: Path | None) -> Iterator[None]:
    """On a validation mismatch, write the failing model to --keep-failed (and say so)."""
    try:
        yield
    except ValidationMismatch as exc:
        failed_model = exc.pipeline_report.model if exc.pipeline_report else None
        if keep_failed is not None and failed_model is not None:
            save_model(failed_model, keep_failed)
            from rich.text import Text

            terminal.err.print(Text(f"kept the failing model at {keep_failed}"))
        raise


@app.command("passes", cls=Command)
@help_text
def list_passes(
    name: Annotated[
        str | None,
        typer.Argument(metavar="[NAME]", help="Describe this pass: every option, its default, examples."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the registry (or the pass) as JSON.")] = False,
) -> None:
    """List the registered passes with their one-line help and options, or describe one.

    With NAME: what the pass does, every option with its type, default and meaning, and
    example chains.

    Examples:
      onnxsurgery passes
      onnxsurgery passes symbolize
      onnxsurgery passes fold-constants --json
    """
    from onnxsurgery.pipeline.pass_help import describe, passes_table

    with terminal.boundary():
        entries = discover()
        if name is not None:
            described = describe(get_pass(name, entries), entries[name].source)
            if as_json:
                terminal.out.print_json(json.dumps(described.to_dict()))
            else:
                terminal.out.print(described)
            return
        if as_json:
            data = [
                {
                    "name": e.name,
                    "available": e.available,
                    "help": e.cls.summary() if e.cls else None,
                    "options": [str(o) for o in e.cls.option_infos()] if e.cls else [],
                    "source": e.source,
                    "error": e.error,
                }
                for e in entries.values()
            ]
            terminal.out.print_json(json.dumps(data))
            return
        terminal.out.print(passes_table(entries))


@app.command(cls=Command)
@help_text
def inspect(
    model: Annotated[Path, typer.Argument(metavar="MODEL", help="The .onnx model to describe.")],
    plan: Annotated[
        str | None,
        typer.Option(
            "--plan",
            help='Preview what these passes would change and what would block them, e.g. "symbolize(x:0=batch, x:1=seq)". '
            "\\[default: symbolize, when an input has a fixed shape]",
        ),
    ] = None,
    no_plan: Annotated[bool, typer.Option("--no-plan", help="Describe the model only.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    verbose: VerboseOpt = False,
) -> None:
    """Describe MODEL: opset, producer, inputs/outputs with dims, op counts and weights.

    On a model with a fixed-shape input, it also shows what symbolize would change and what would
    block it (--plan previews other passes). Nothing is written.

    Examples:
      onnxsurgery inspect model.onnx
      onnxsurgery inspect model.onnx --plan "symbolize(x:0=batch, x:1=seq)"
      onnxsurgery inspect model.onnx --no-plan --json
    """
    with terminal.boundary():
        summary = onnxsurgery.summarize(model)
        if not no_plan:
            chain = plan if plan is not None else _default_plan(summary)
            if chain:
                loaded = load_model(model)
                for p in build_passes(parse_passes(chain)):
                    try:
                        try:
                            preview = p.preview(loaded)
                        except OnnxSurgeryError:
                            raise
                        except Exception as exc:  # the same boundary as a pass's run
                            raise pass_failure(p.name, exc) from exc
                    except OnnxSurgeryError as exc:
                        if plan is not None:
                            raise
                        # the default preview is a courtesy: say why it is missing, don't fail
                        from rich.text import Text

                        preview = Text(f"{p.name} preview: {exc} (choose axes with --plan)", style="yellow")
                    if preview is None:
                        raise UsageError(f"--plan: pass {p.name!r} offers no preview")
                    summary.extra.append(preview)
        if as_json:
            terminal.out.print_json(json.dumps(summary.to_dict()))
        else:
            terminal.show(summary, verbose)


def _default_plan(summary) -> str | None:
    """Preview symbolize on a model with a fixed-shape input, when symbolize is installed."""
    static = any(t.dims and all(isinstance(d, int) for d in t.dims) for t in summary.inputs)
    entry = discover().get("symbolize")
    return "symbolize" if static and entry is not None and entry.available else None


@app.command("diff", cls=Command)
@help_text
def diff_command(
    model_a: Annotated[Path, typer.Argument(metavar="MODEL_A", help="The model before (e.g. as exported).")],
    model_b: Annotated[Path, typer.Argument(metavar="MODEL_B", help="The model after (e.g. repaired).")],
    report: Annotated[
        Path | None,
        typer.Option("--report", help="Write the diff here: FILE.html a page, else JSON (- for stdout).", rich_help_panel=PANEL_IO),
    ] = None,
    verbose: VerboseOpt = False,
) -> None:
    """Show what changed from MODEL_A to MODEL_B; nothing is run.

    Nodes added, removed and rewired by op; each rewritten constant with its old value and what
    replaced it, sizes spelled in the input symbols; inputs and outputs with their dims before
    and after. Exit 0 whether or not they differ; 2 for a file that is not a model.

    Examples:
      onnxsurgery diff model.onnx model.dyn.onnx
      onnxsurgery diff model.onnx model.dyn.onnx -v --report diff.json
    """
    with terminal.boundary(stdout_taken=to_stdout(report)):
        check_targets({"model a": model_a, "model b": model_b}, {"--report": report}, text=("--report",))
        result = onnxsurgery.diff(model_a, model_b)
        if report is not None:
            write_report(result.to_dict(), report)
        terminal.show(result, verbose)


app.command("validate", cls=Command)(validate_command)
app.add_typer(reference_app, name="reference")


def main() -> None:
    """The command line (the ``onnxsurgery`` executable runs it through :func:`script`). A
    command line that does not parse (an option value of the wrong type, a missing argument,
    an unknown command) is one ``error:`` line and exit 2, not a usage box; ``-h`` shows the
    help, and so does a bare ``onnxsurgery`` (or ``onnxsurgery reference``), exiting 0."""
    try:
        code = app(prog_name="onnxsurgery", standalone_mode=False)
    except typer.Abort:
        terminal.say_error("interrupted; nothing was written")
        sys.exit(130)
    except typer.TyperException as exc:  # click's UsageError and friends
        # a group called with no arguments (click 8.2+, or the click typer vendors): its help,
        # already made, is the answer (older click printed it and exited 0 by itself)
        if type(exc).__name__ == "NoArgsIsHelpError":
            if exc.format_message().strip():  # typer's rich help printed itself already
                print(exc.format_message())
            sys.exit(0)
        ctx = getattr(exc, "ctx", None)
        hint = f"; see '{ctx.command_path} -h'" if ctx is not None else ""
        terminal.say_error(f"{exc.format_message().rstrip('.')}{hint}")
        sys.exit(getattr(exc, "exit_code", 2))
    sys.exit(code if isinstance(code, int) else 0)


def script() -> None:
    """The ``onnxsurgery`` executable (``[project.scripts]``): :func:`main`, and then the process
    ends.

    Before the command runs, every object the imports made so far (typer, rich, click, onnx,
    numpy) is frozen (``gc.freeze``): Python's shutdown otherwise runs full garbage collections
    over all of them (bench/bench_pipeline.py measures what that costs), and the collections the command itself triggers skip them too.
    What the command makes stays with the collector: freezing it as well (at exit) kept
    onnxsim's nanobind executor alive past its module, which then printed "nanobind: leaked
    ..." on every fold-constants run. Only here, where the process ends after :func:`main`:
    in-process callers of :func:`main` (tests) keep their collector untouched."""
    gc.freeze()
    main()

