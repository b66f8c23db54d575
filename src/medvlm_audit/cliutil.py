"""What every command shares: the stderr console and the one-line ``error:`` exit (no traceback)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

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


class _Terminated:
    """Whether the last interruption was a SIGTERM (set by :func:`sigterm_as_interrupt`'s handler)."""

    seen = False


def interrupted_exit_code() -> int:
    """130 (128 + SIGINT) after Ctrl-C, 143 (128 + SIGTERM) after a SIGTERM, as a shell reports them."""
    from medvlm_audit.health import EXIT_INTERRUPTED, EXIT_TERMINATED

    return EXIT_TERMINATED if _Terminated.seen else EXIT_INTERRUPTED


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block a SIGTERM (``kill PID``, a job scheduler's stop, ``docker stop``) stops the command as Ctrl-C
    does: the SIGINT handler in force is called (asyncio's cancels the run's main task; Python's raises
    KeyboardInterrupt), or, where SIGINT is ignored (a background job of a script), KeyboardInterrupt is raised.
    So answers received are committed, the run's lock is released and the "interrupted" line is printed; the exit
    status is then :func:`interrupted_exit_code`. Only in the main thread; elsewhere the block runs unchanged.
    A process forked within the block (a worker of a process pool) inherits the handler but ends on SIGTERM as
    any process does: its pool ends it so, and a KeyboardInterrupt there would print a traceback."""
    import os
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    owner = os.getpid()

    def on_term(signum: int, frame: Any) -> None:
        if os.getpid() != owner:  # a forked worker: the default action (end quietly, exit status -SIGTERM)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        _Terminated.seen = True
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler):
            handler(signal.SIGINT, frame)
        else:
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
