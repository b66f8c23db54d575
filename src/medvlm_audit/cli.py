"""The `medvlm-audit` command line: build, run, export, report, import-results, demo."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from medvlm_audit import __version__
from medvlm_audit.errors import AuditError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Audit whether medical VLMs read the image.")
build_app = typer.Typer(no_args_is_help=True, help="Build a probe set (phantom, mimic, chexpert, nih, vindr, folder).")
app.add_typer(build_app, name="build")
console = Console(stderr=True)


def _fail(e: Exception) -> None:
    console.print(f"[bold red]error:[/] {e}")
    raise typer.Exit(2)


@app.callback()
def _main(version: Annotated[bool, typer.Option("--version", help="Print the version.")] = False) -> None:
    if version:
        print(__version__)
        raise typer.Exit(0)


@build_app.command("phantom")
def build_phantom_cmd(
    out: Annotated[Path, typer.Option(help="Output folder (images/, probeset/, train/).")] = Path("phantom"),
    n_cases: Annotated[int, typer.Option(help="Number of test cases.")] = 800,
    n_train: Annotated[int, typer.Option(help="Number of training studies for the reference panel.")] = 1500,
    seed: Annotated[int, typer.Option(help="Construction seed.")] = 42,
) -> None:
    """Build the embedded synthetic chest-radiograph probe set (deterministic)."""
    from medvlm_audit.phantom import build_phantom

    try:
        test, train = build_phantom(out, n_cases=n_cases, n_train=n_train, seed=seed)
    except AuditError as e:
        _fail(e)
    console.print(f"phantom probe set: {len(test)} cases -> {out / 'probeset'} (hash {test.content_hash[:12]})")
    console.print(f"training split: {len(train)} cases -> {out / 'train'}")


@app.command("run")
def run_cmd(
    config: Annotated[Path, typer.Argument(help="Run config (YAML or TOML).")],
    run_dir: Annotated[Optional[Path], typer.Option(help="Override run_dir of the config.")] = None,
    retry_errors: Annotated[bool, typer.Option("--retry-errors", help="Re-ask inputs whose answer was an error.")] = False,
    no_progress: Annotated[bool, typer.Option("--no-progress", help="No progress bar.")] = False,
    report: Annotated[bool, typer.Option("--report/--no-report", help="Write the HTML report after the run.")] = True,
) -> None:
    """Execute a suite (resumes an existing run directory: only missing answers are asked)."""
    from medvlm_audit import api
    from medvlm_audit.config import load_config

    try:
        cfg = load_config(config, {"run_dir": str(run_dir) if run_dir else None})
        res = api.run(cfg, retry_errors=retry_errors, progress=not no_progress)
    except (AuditError, ValueError, KeyError) as e:
        _fail(e)
    _print_summary(res.summary.as_dict())
    console.print(f"results: {res.results_parquet} and {res.results_csv}")
    if report:
        _report(res.run_dir)


def _print_summary(summary: dict) -> None:
    from rich.table import Table

    t = Table(title=f"{summary['n_trials']} trials, {summary['n_skipped']} skipped conditions")
    for col in ("model", "trials", "distinct inputs", "asked now", "errors"):
        t.add_column(col)
    for name, m in summary["per_model"].items():
        t.add_row(name, str(m["trials"]), str(m["distinct_inputs"]), str(m.get("asked", 0)), str(m.get("errors", 0)))
    console.print(t)


@app.command("export")
def export_cmd(
    run_dir: Annotated[Path, typer.Argument(help="Run directory.")],
    out: Annotated[Optional[Path], typer.Option(help="Output folder (default: the run directory).")] = None,
) -> None:
    """Write the tidy results table (Parquet + CSV): one row per model x case x condition x sample."""
    from medvlm_audit import api

    try:
        pq, csv = api.export(run_dir, out)
    except AuditError as e:
        _fail(e)
    console.print(f"wrote {pq} and {csv}")


def _report(run_dir: Path, out: Path | None = None) -> Path | None:
    try:
        from medvlm_audit.report_run import report_run
    except ImportError:  # pragma: no cover - the report module lands with the analysis
        console.print("[yellow]report module not available[/]")
        return None
    path = report_run(run_dir, out)
    console.print(f"report: {path}")
    return path


@app.command("report")
def report_cmd(
    run_dir: Annotated[Path, typer.Argument(help="Run directory.")],
    out: Annotated[Optional[Path], typer.Option(help="Output folder (default: RUN/report).")] = None,
) -> None:
    """Analyse a run and write report.html, metrics.parquet/csv, comparisons.csv and summary.json."""
    try:
        _report(run_dir, out)
    except AuditError as e:
        _fail(e)


@app.command("import-results")
def import_results_cmd(
    manifest: Annotated[Path, typer.Argument(help="The released manifest CSV.")],
    results_dir: Annotated[Path, typer.Argument(help="Folder with one sub-folder of condition CSVs per model.")],
    out: Annotated[Path, typer.Option(help="New run directory to create.")] = Path("runs/imported"),
    text_only: Annotated[list[str], typer.Option("--text-only", help="Model folder that is a text-only baseline (repeatable).")] = [],  # noqa: B006
    vision_only: Annotated[list[str], typer.Option("--vision-only", help="Model folder that is a vision-only probe (repeatable).")] = [],  # noqa: B006
    report: Annotated[bool, typer.Option("--report/--no-report", help="Write the HTML report after importing.")] = True,
) -> None:
    """Import the paper's released result layout into a run store that `report` analyses like any other."""
    from medvlm_audit.import_results import import_results

    try:
        run_dir = import_results(manifest, results_dir, out, text_only=tuple(text_only), vision_only=tuple(vision_only))
        from medvlm_audit import api

        api.export(run_dir)
    except AuditError as e:
        _fail(e)
    console.print(f"imported into {run_dir}")
    if report:
        _report(run_dir)


@app.command("demo")
def demo_cmd(
    out: Annotated[Path, typer.Option(help="Output folder.")] = Path("demo-run"),
    n_cases: Annotated[int, typer.Option(help="Phantom test cases.")] = 800,
    gemma: Annotated[bool, typer.Option("--gemma", help="Add Gemma 3 270M as a text-only baseline (extra 'gemma').")] = False,
    no_progress: Annotated[bool, typer.Option("--no-progress", help="No progress bar.")] = False,
) -> None:
    """Build the phantom probe set, fit the reference panel, run the grounding audit, export and report."""
    from medvlm_audit.demo import run_demo

    try:
        res = run_demo(out, n_cases=n_cases, gemma=gemma, progress=not no_progress, log=console.print)
    except AuditError as e:
        _fail(e)
    _print_summary(res.summary.as_dict())
    console.print(f"results: {res.results_parquet}")
    _report(res.run_dir)


def main() -> None:  # pragma: no cover
    sys.exit(app())
