"""What every command shares: the stderr console and the one-line ``error:`` exit (no traceback)."""

from __future__ import annotations

import sys
from typing import NoReturn

import typer
from rich.console import Console

#: progress, logs and errors go to stderr; stdout carries only the paths of what was written
#: (without a terminal, a wide console: tables in logs keep their counts instead of truncating them)
console = Console(stderr=True, width=None if sys.stderr.isatty() else 200)


def emit(*paths: object) -> None:
    """Print the paths of what a command wrote, one per line, on stdout (so `$(medvlm-audit export RUN)` works)."""
    for p in paths:
        print(p, flush=True)


def fail(e: BaseException | str, code: int = 2) -> NoReturn:
    """Print ``error: <message>`` on stderr and exit with ``code``."""
    from rich.markup import escape

    console.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)  # one line
    raise typer.Exit(code)
