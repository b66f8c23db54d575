"""What every command shares: the stderr console and the one-line ``error:`` exit (no traceback)."""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console

#: progress, logs and errors go to stderr; stdout carries only the paths of what was written
console = Console(stderr=True)


def fail(e: BaseException | str, code: int = 2) -> NoReturn:
    """Print ``error: <message>`` on stderr and exit with ``code``."""
    from rich.markup import escape

    console.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)  # one line
    raise typer.Exit(code)
