"""CLI commands of the reports suite (wired by the CLI as ``medvlm-audit corpus-audit`` and
``medvlm-audit build iu-reports``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def corpus_audit_cmd(
    reference: Annotated[Path, typer.Option("--reference", help="reference corpus, JSONL {id, text, group F/M}")],
    predictions: Annotated[Path, typer.Option("--predictions", help="predicted reports, JSONL {id, text, group}")],
    out: Annotated[Path, typer.Option("--out", help="output folder (cad.csv, wae.csv, diversity.csv, ...)")],
    B: Annotated[int, typer.Option("--bootstrap", help="bootstrap resamples over reports")] = 1000,
    n_perm: Annotated[int, typer.Option("--permutations", help="label-permutation resamples")] = 1000,
    seed: Annotated[int, typer.Option(help="resampling seed")] = 0,
    alpha: Annotated[float, typer.Option(help="Dirichlet smoothing of word counts")] = 0.1,
    p_star: Annotated[float, typer.Option("--p-star", help="BH-FDR level of the category gate")] = 0.05,
    semantic: Annotated[str, typer.Option(help="auto | on | off: semantic diversity and WEAT")] = "auto",
) -> None:
    """Clinical Association Displacement, WAE and diversity of PREDICTIONS against REFERENCE (paper 002)."""
    from medvlm_audit.errors import AuditError
    from medvlm_audit.suites.reports.audit import corpus_audit

    sem = {"auto": "auto", "on": True, "off": False}.get(semantic)
    if sem is None:
        raise typer.BadParameter(f"--semantic must be auto, on or off, got {semantic!r}")
    try:
        res = corpus_audit(reference, predictions, out, B=B, n_perm=n_perm, seed=seed, alpha=alpha, p_star=p_star,
                           semantic=sem)
    except AuditError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from e
    s = res.summary
    typer.echo(f"vocabulary {s['vocabulary']} words; categories ungated {s['categories_ungated']}; "
               f"gated {s['categories_gated']}")
    w = res.wae.set_index(["weighting", "group"])["value"]
    typer.echo(f"WAE pred {w[('pred', 'all')]:.3f}, ref {w[('ref', 'all')]:.3f}, "
               f"delta pred {w[('pred', 'delta')]:.3f}; files in {out}")


def build_iu_reports_cmd(
    out: Annotated[Path, typer.Option("--out", help="output folder for iu_reports.jsonl")],
) -> None:
    """Write the IU X-ray reference corpus (JSONL {id, text, group}) from the installed torchxrayvision package."""
    from medvlm_audit.errors import AuditError
    from medvlm_audit.suites.reports.corpus import build_iu_reports

    try:
        s = build_iu_reports(out)
    except AuditError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from e
    typer.echo(f"{s['written']} of {s['reports']} IU X-ray reports with a sex in the INDICATION "
               f"({s['groups']['F']} F, {s['groups']['M']} M) -> {Path(out) / 'iu_reports.jsonl'}")


