"""CLI commands of the reports suite (wired by the CLI as ``medvlm-audit corpus-audit`` and
``medvlm-audit build iu-reports``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer


def _read(path: Path, what: str, allow_duplicate_ids: bool) -> Any:
    """A corpus read before anything is written (streamed; errors name the file and row)."""
    from medvlm_audit.suites.reports.corpus import CorpusError, read_corpus

    try:
        return read_corpus(path, allow_duplicate_ids=allow_duplicate_ids)
    except CorpusError as e:
        raise CorpusError(f"{what}: {e}") from None


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
    bertscore: Annotated[str, typer.Option(help="auto | on | off: BERTScore of id-paired reports")] = "auto",
    bertscore_model: Annotated[Path | None, typer.Option(
        "--bertscore-model", help="local Hugging Face encoder folder for BERTScore (default: the packaged MiniLM)")
    ] = None,
    bertscore_layers: Annotated[int | None, typer.Option(
        "--bertscore-layers", help="encoder layer BERTScore reads (default: the last)")] = None,
    clinical: Annotated[list[str] | None, typer.Option(
        "--clinical", help="NAME=PATH: a clinical metric (chexbert, radgraph, ratescore, green) loaded from a "
                           "local model path; repeat for several")] = None,
    surface_max: Annotated[int, typer.Option(
        "--surface-max", help="at most this many id pairs for the paired metrics (seeded sample; 0: all)")] = 1000,
    allow_duplicate_ids: Annotated[bool, typer.Option(
        "--allow-duplicate-ids", help="keep reports that repeat an id (refused by default, naming both rows)")
    ] = False,
) -> None:
    """Clinical Association Displacement, WAE and diversity of PREDICTIONS against REFERENCE (paper 002)."""
    from medvlm_audit.errors import AuditError
    from medvlm_audit.suites.reports.audit import corpus_audit
    from medvlm_audit.suites.reports.clinical import load_clinical_metric

    flags = {"auto": "auto", "on": True, "off": False}
    sem, bs = flags.get(semantic), flags.get(bertscore)
    if sem is None:
        raise typer.BadParameter(f"--semantic must be auto, on or off, got {semantic!r}")
    if bs is None:
        raise typer.BadParameter(f"--bertscore must be auto, on or off, got {bertscore!r}")
    try:
        metrics = [load_clinical_metric(*_name_path(spec), where="--clinical") for spec in clinical or ()]
        ref_c = _read(reference, "reference", allow_duplicate_ids)
        pred_c = _read(predictions, "predictions", allow_duplicate_ids)
        res = corpus_audit(ref_c, pred_c, out, B=B, n_perm=n_perm, seed=seed, alpha=alpha, p_star=p_star,
                           semantic=sem, bertscore=bs, bertscore_model=bertscore_model,
                           bertscore_layers=bertscore_layers, clinical=metrics, surface_max=surface_max or None)
    except AuditError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from e
    from medvlm_audit.report.html import format_p

    s = res.summary
    typer.echo(f"vocabulary {s['vocabulary']} words; headline categories {s['categories_headline']} "
               f"(null, the reference split in two: {s['categories_null']}); {s['absent_strong']} words strong in "
               f"the reference never written; gated {s['categories_gated']}; ungated {s['categories_ungated']}")
    w = res.wae.set_index(["weighting", "group"])
    parts = [f"{name} {w.loc[k, 'value']:.3f} (permutation p {format_p(w.loc[k, 'p_perm'])}, null median "
             f"{w.loc[k, 'null_median']:.3f}, 95th percentile {w.loc[k, 'null_p95']:.3f})"
             for name, k in (("pred", ("pred", "all")), ("ref", ("ref", "all")), ("delta pred", ("pred", "delta")))]
    typer.echo(f"WAE {'; '.join(parts)}; WAE falls when associated words are erased; files in {out}")


def _name_path(spec: str) -> tuple[str, str]:
    name, sep, path = spec.partition("=")
    if not sep or not name or not path:
        raise typer.BadParameter(f"--clinical takes NAME=PATH (e.g. chexbert=/models/chexbert), got {spec!r}")
    return name.strip(), path.strip()


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


