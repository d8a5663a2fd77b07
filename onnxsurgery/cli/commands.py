"""What every ``onnxsurgery`` command is made with: its help reflowed the way typer shows it,
and a usage line that names arguments as their help does."""

from __future__ import annotations

from collections.abc import Callable
from inspect import cleandoc

from typer.core import TyperCommand

__all__ = ["Command", "help_text", "reflowed"]


def reflowed(text: str) -> str:
    """Help text as typer shows it: each paragraph one line, so the terminal wraps it (typer's
    rich mode keeps a docstring's line breaks, which would break sentences mid-line); indented
    lines (examples) stay lines of their own."""
    paragraphs = []
    for paragraph in cleandoc(text).split("\n\n"):
        lines: list[str] = []
        for line in paragraph.splitlines():
            if lines and not line[:1].isspace() and not lines[-1][:1].isspace():
                lines[-1] = f"{lines[-1]} {line.strip()}"
            else:
                lines.append(line.rstrip())
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)


def help_text(command: Callable[..., None]) -> Callable[..., None]:
    """Give a command its docstring reflowed (:func:`reflowed`) before typer reads it."""
    command.__doc__ = reflowed(command.__doc__ or "")
    return command


class Command(TyperCommand):
    """A command whose usage line names its arguments as their help does: ``MODEL``, not the
    ``{MODEL}`` typer 0.2x writes for a required argument."""

    def collect_usage_pieces(self, ctx) -> list[str]:
        pieces = super().collect_usage_pieces(ctx)
        return [p[1:-1] if p.startswith("{") and p.endswith("}") else p for p in pieces]
