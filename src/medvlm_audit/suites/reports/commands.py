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
    """Clinical Association Displacement, WAE and diversity of PREDICTIONS against REFERENCE (paper 002).

    The summary goes to stderr, the paths written to stdout. Exit 0: audited; 1: the predictions are not
    assessable (mostly empty, refusals, too short or without a reference word: a warning with the counts, and
    the tables keep their header only); 2: bad input (nothing written)."""
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
    for line in corpus_audit_summary(res, out):
        typer.echo(line, err=True)
    for path in res.written:  # only the paths written go to stdout (README: `... | xargs ls -l`)
        typer.echo(str(path))
    if not res.assessable:
        raise typer.Exit(1)


def corpus_audit_summary(res: Any, out: Path) -> list[str]:
    """The human summary of a corpus audit (stderr): a warning and the counts where the predictions are not
    assessable; else the categories and WAE, an undefined WAE with its reason (never a bare nan)."""
    from medvlm_audit.report.html import format_p

    s = res.summary
    if not res.assessable:
        counts = ", ".join(f"{k} {v}" for k, v in s["statuses"].items())
        return [f"warning: predictions {s['predictions']['source']}: {s['reason']}; statuses: {counts}; no CAD "
                f"category, WAE or diversity is given (exit 1); files in {out}"]
    w = res.wae.set_index(["weighting", "group"])

    def why_undefined(weighting: str, group: str) -> str:
        corpus = "predictions" if weighting == "pred" else "reference"
        groups = ["F", "M"] if group == "delta" else [group] if group in ("F", "M") else []
        lost = [g for g in groups if not _finite(w.loc[(weighting, g), "value"])]
        if lost:
            return (f"the {corpus} {'write' if weighting == 'pred' else 'writes'} no word the reference associates with "
                    f"{' or '.join(lost)} (z_ref {'> 0' if lost == ['F'] else '< 0' if lost == ['M'] else '!= 0'})")
        return f"no word of the {corpus} carries a weight"

    def part(name: str, key: tuple[str, str]) -> str:
        v = w.loc[key, "value"]
        if not _finite(v):
            return f"{name} undefined ({why_undefined(*key)})"
        return (f"{name} {v:.3f} (permutation p {format_p(w.loc[key, 'p_perm'])}, null median "
                f"{w.loc[key, 'null_median']:.3f}, 95th percentile {w.loc[key, 'null_p95']:.3f})")

    parts = [part(name, k) for name, k in (("pred", ("pred", "all")), ("ref", ("ref", "all")),
                                           ("delta pred", ("pred", "delta")))]
    return [f"vocabulary {s['vocabulary']} words; headline categories {s['categories_headline']} "
            f"(null, the reference split in two: {s['categories_null']}); {s['absent_strong']} words strong in "
            f"the reference never written; gated {s['categories_gated']}; ungated {s['categories_ungated']}",
            f"WAE {'; '.join(parts)}; WAE falls when associated words are erased; files in {out}"]


def _finite(v: Any) -> bool:
    try:
        return not (v is None or v != v)  # nan != nan
    except TypeError:
        return False


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


