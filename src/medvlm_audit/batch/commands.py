"""`medvlm-audit batch export|ingest`: the run's missing inputs as OpenAI batch JSONL, and the output back.

Wired into the CLI with one line: ``app.add_typer(batch_app, name="batch")``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from medvlm_audit.cliutil import console, emit, fail
from medvlm_audit.errors import AuditError

__all__ = ["batch_app"]

batch_app = typer.Typer(no_args_is_help=True, help="Batch inference: export missing inputs as OpenAI batch JSONL "
                        "(a provider's batch API or vLLM run_batch), ingest the output.")


@batch_app.command("export")
def export_cmd(
    run: Annotated[Path, typer.Argument(help="Run directory (its recorded config) or a run config file.")],
    model: Annotated[list[str] | None, typer.Option("--model", help="Model name (repeatable with --dry-run; one to export).")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Output JSONL (split into OUT-001.jsonl, ... beyond the limits).")] = None,
    retry_errors: Annotated[bool, typer.Option("--retry-errors", help="Also export inputs whose stored answer is an error.")] = False,
    max_lines: Annotated[int, typer.Option(min=1, help="Requests per file (OpenAI: 50,000).")] = 50_000,
    max_bytes: Annotated[int, typer.Option(min=1, help="Bytes per file (OpenAI: 200 MB).")] = 200_000_000,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print per model the missing inputs and tokens estimated; write nothing.")] = False,
) -> None:
    """Write every input of a model that the run store does not hold yet as OpenAI batch request lines
    (custom_id = the input's content key, body = exactly the online request). Nothing is written to the store."""
    from medvlm_audit.batch import offline

    try:
        if dry_run:
            for line in offline.dry_run_lines(offline.dry_run(run, model or None, retry_errors=retry_errors)):
                console.print(line, markup=False, highlight=False)
            return
        if not model or len(model) != 1 or out is None:
            raise AuditError("batch export needs one --model NAME and --out FILE.jsonl (or --dry-run)")
        paths, n = offline.export(run, model[0], out, retry_errors=retry_errors, max_lines=max_lines,
                                  max_bytes=max_bytes)
    except (AuditError, ValueError) as e:
        fail(e)
    console.print(f"{n:,} requests of model {model[0]!r} in {len(paths)} file(s)" + ("" if n else ": nothing is missing"),
                  markup=False, highlight=False)
    emit(*paths)


@batch_app.command("ingest")
def ingest_cmd(
    run: Annotated[Path, typer.Argument(help="Run directory (its recorded config) or a run config file.")],
    files: Annotated[list[Path], typer.Argument(help="Batch output / error files (OpenAI) or vLLM run_batch output.")],
    model: Annotated[list[str] | None, typer.Option("--model", help="Only these models (default: every openai model of the run).")] = None,
    retry_errors: Annotated[bool, typer.Option("--retry-errors", help="Replace stored errors with the files' answers.")] = False,
) -> None:
    """Commit batch output lines to the run store, parsed exactly as online answers. Unknown or repeated
    custom_ids refuse the whole ingest; ingesting the same files twice changes nothing."""
    from medvlm_audit.batch import offline

    try:
        res = offline.ingest(run, files, models=model or None, retry_errors=retry_errors)
    except (AuditError, ValueError) as e:
        fail(e)
    for name, n in res.committed.items():
        console.print(f"{name}: {n:,} answers committed", markup=False, highlight=False)
    if res.already:
        console.print(f"{res.already:,} lines were already in the store (or not asked by this run): unchanged",
                      markup=False, highlight=False)
    if res.errors:
        console.print("stored as errors (re-asked by --retry-errors): "
                      + ", ".join(f"{k} {v:,}" for k, v in sorted(res.errors.items())), markup=False, highlight=False)
