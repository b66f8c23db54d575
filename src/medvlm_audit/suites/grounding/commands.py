"""The grounding suite's own command: ``medvlm-audit import-results`` (the paper's released result files)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from medvlm_audit.cliutil import console, fail
from medvlm_audit.errors import AuditError


def import_results_cmd(
    manifest: Annotated[Path, typer.Argument(help="The released manifest CSV.")],
    results_dir: Annotated[Path, typer.Argument(help="Folder with one sub-folder of condition CSVs per model.")],
    out: Annotated[Path, typer.Option(help="New run directory to create.")] = Path("runs/imported"),
    text_only: Annotated[list[str], typer.Option("--text-only", help="Model folder that is a text-only baseline (repeatable).")] = [],  # noqa: B006
    vision_only: Annotated[list[str], typer.Option("--vision-only", help="Model folder that is a vision-only probe (repeatable).")] = [],  # noqa: B006
    report: Annotated[bool, typer.Option("--report/--no-report", help="Write the HTML report after importing.")] = True,
) -> None:
    """Import the paper's released result layout into a run store that `report` analyses like any other."""
    from medvlm_audit.suites.grounding.import_results import import_results

    try:
        run_dir = import_results(manifest, results_dir, out, text_only=tuple(text_only), vision_only=tuple(vision_only),
                                 log=console.print)
        from medvlm_audit import api

        api.export(run_dir)
        console.print(f"imported into {run_dir}")
        if report:
            console.print(f"report: {api.report(run_dir)}")
    except AuditError as e:
        fail(e)


