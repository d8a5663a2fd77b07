"""What the command line shows on a terminal: its two consoles, made when first used (a run
that prints nothing never imports rich), the one boundary where errors become a red line and an
exit code (:func:`boundary`), and the progress line (:func:`progress_line`). User text is never
read as rich markup. ``onnxsurgery/cli/`` holds the commands.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import typer

from onnxsurgery._version import __version__
from onnxsurgery.errors import OnnxSurgeryError, ValidationMismatch
from onnxsurgery.pipeline.report_html import write_report

__all__ = ["LazyConsole", "boundary", "err", "out", "progress_line", "say_error", "show", "state"]


class LazyConsole:
    """A rich Console made when first used: a run that prints nothing (``-q``, success in a
    pipe) never imports rich. Each command starts with a new one
    (:meth:`reset`), made for the environment it runs in (``COLUMNS`` sets the width)."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._current = options
        self._console: Any = None

    def reset(self, **options: Any) -> None:
        """Forget the console; the next one is made with ``options`` over the defaults."""
        self._console = None
        self._current = {**self._options, **options}

    @property
    def console(self) -> Any:
        """The rich Console itself, made now if it was not yet: what rich's own machinery
        (a live display, a progress line) needs, since this proxy is no context manager."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(highlight=False, **self._current)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.console, name)


out = LazyConsole()
err = LazyConsole(stderr=True)


#: Set by ``--traceback``: print the stack of an error, not just its line.
state = {"traceback": False}


def say_error(message: str) -> None:
    from rich.text import Text

    err.print(Text("error: ", style="red") + Text(message), soft_wrap=True, highlight=False)


def show(report: Any, verbose: bool = False) -> None:
    """Print a report on stdout: its short form, or with ``verbose`` (``-v``) its detail, where
    it has both (``view(verbose)``)."""
    out.print(report.view(verbose) if hasattr(report, "view") else report)


@contextlib.contextmanager
def boundary(
    report_path: Path | None = None, quiet: bool = False, verbose: bool = False, *,
    stdout_taken: bool = False
) -> Iterator[None]:
    """The one place errors become a red line and an exit code: an OnnxSurgeryError exits
    with its code (2 bad input, 1 validation mismatch), anything else is a bug of ours and
    exits 3 with one line. ``--traceback`` adds the stack. numpy's warnings stay off stderr.
    A validation mismatch shows its report first (in detail with ``verbose``). ``stdout_taken``:
    an output (``--report -``) is standard output, so ``out`` prints on stderr."""
    for console, options in ((out, {"stderr": True} if stdout_taken else {}), (err, {})):
        if isinstance(console, LazyConsole):  # (a test may have put a Console of its own there)
            console.reset(**options)
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    except OnnxSurgeryError as exc:
        pipeline_report = exc.pipeline_report
        if report_path is not None and pipeline_report is not None:
            try:
                write_report(pipeline_report.to_dict(), report_path)
            except OnnxSurgeryError as report_exc:
                say_error(f"{report_exc} (the report of the failed run)")
        if isinstance(exc, ValidationMismatch) and not quiet:
            shown = pipeline_report if pipeline_report is not None else exc.report
            if shown is not None:
                show(shown, verbose)
        if state["traceback"]:
            err.print_exception(show_locals=False)
        message = str(exc).strip() or type(exc).__name__
        say_error(message)
        raise typer.Exit(exc.exit_code) from None
    except (typer.Exit, typer.Abort, typer.TyperException):  # the command line's own errors
        raise
    except KeyboardInterrupt:
        say_error("interrupted; nothing was written")
        raise typer.Exit(130) from None
    except Exception as exc:  # a bug of ours: one line, the stack on request
        if state["traceback"]:
            err.print_exception(show_locals=False)
        text = " ".join(str(exc).split())[:300]
        say_error(
            f"internal error (a bug in onnxsurgery {__version__}; please report it): "
            f"{type(exc).__name__}: {text}; rerun with --traceback for the stack"
        )
        raise typer.Exit(3) from None


@contextlib.contextmanager
def progress_line(quiet: bool) -> Iterator[Callable[..., None] | None]:
    """On a terminal (and without -q): a transient line on stderr with where the run is, its
    stage, a bar where steps are counted, and the elapsed time. Yields the callback the library
    calls (``(where, stage, done, total)``), or None where nothing is to be shown (pipes, -q)."""
    if quiet or not err.is_terminal:
        yield None
        return
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}", markup=False),
        BarColumn(bar_width=20),
        TimeElapsedColumn(),
        console=err.console if isinstance(err, LazyConsole) else err,
        transient=True,
        redirect_stdout=False,  # the library's own output handling stays as it is
        redirect_stderr=False,
    ) as line:
        task = line.add_task("starting", total=None)

        def update(where: str, stage: str, done: int | None = None, total: int | None = None) -> None:
            line.update(
                task, description=f"{where}: {stage}", completed=done or 0, total=total, refresh=True
            )

        yield update
