"""`medvlm-audit view RUN`: serve the run explorer on this machine, behind a random token printed in the URL."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Annotated

import typer

from medvlm_audit.cliutil import console, fail
from medvlm_audit.errors import AuditError


def view_cmd(
    run_dir: Annotated[Path, typer.Argument(help="Run folder (the one holding run.sqlite and results.parquet).")],
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1 (0: any free port).")] = 8770,
) -> None:
    """Explore a run's cases in the browser (read-only, this machine only): filter by model, condition, category,
    flipped / parsed and the suite's own columns; a case shows every condition side by side, the image exactly as
    the model saw it (rendered in memory from the source, checked against the stored pixel hash), the question, the
    raw answer, the parsed value, confidence and flip. Ctrl-C stops it."""
    import socket

    import uvicorn

    from medvlm_audit import api
    from medvlm_audit.view.app import create_app
    from medvlm_audit.view.data import load_run

    token = secrets.token_urlsafe(24)
    try:
        app = create_app(load_run(run_dir, api.suite_of_run(run_dir)), token)  # the run's suite, from dispatch
    except AuditError as e:
        fail(e)
    if port == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
    url = f"http://127.0.0.1:{port}/v/{token}/"
    if not any((run_dir / f).is_file() for f in ("results.parquet", "results.csv")):
        console.print(f"{run_dir} has no results.parquet: its table was built in memory from the run store "
                      "(nothing written)", markup=False, highlight=False)
    console.print(f"run explorer of {run_dir} (read-only; Ctrl-C to stop):", markup=False, highlight=False)
    print(url, flush=True)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
