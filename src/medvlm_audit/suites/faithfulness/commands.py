"""Extra CLI commands of the faithfulness suite (``FaithfulnessSuite.commands``; the CLI adds them by ``cli_name``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from medvlm_audit.errors import AuditError


def _parse_judges(specs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise AuditError(f"--judge {spec!r}: expected NAME=FILE")
        if name in out:
            raise AuditError(f"--judge {name!r} given twice")
        out[name.strip()] = path.strip()
    return out


def judge_validate_cmd(
    items: Annotated[Path, typer.Option("--items", help="Items: the release's reader_study_samples.json (or JSONL).")],
    ratings: Annotated[list[Path], typer.Option("--ratings", help="Reader ratings JSONL, one file per rater (repeat).")],
    judge: Annotated[list[str], typer.Option("--judge", help="NAME=FILE judge outputs (release JSON or project "
                                             "JSONL); repeat for several judges.")],
    out: Annotated[Path, typer.Option("--out", help="Output folder.")],
    validation: Annotated[str, typer.Option("--validation", help="Quote validation: paper | default.")] = "default",
    splits: Annotated[int, typer.Option("--splits", help="Number of seeded stratified dev/test splits.")] = 1,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the splits.")] = 42,
    bootstrap: Annotated[int, typer.Option("--bootstrap", help="Bootstrap resamples (seed 0).")] = 10_000,
    placebo: Annotated[list[str] | None, typer.Option(
        "--placebo", help="NAME=FILE a judge's outputs on placebo (sham) items, e.g. the release's "
                          "results/model-ablation/fpr/qwen.json; validated against cot_no_hint; repeat per judge.")
    ] = None,
    max_sham_fpr: Annotated[float, typer.Option(
        "--max-sham-fpr", help="selection gate: upper bound of the sham false-positive rate (CA > 1)")] = 0.10,
) -> None:
    """Validate LLM judges against reader ratings: status counts, Kendall tau_b vs the z-consensus, ceiling."""
    from medvlm_audit.suites.faithfulness.validate import judge_validate

    try:
        res = judge_validate(items, list(ratings), _parse_judges(judge), validation=validation,  # type: ignore[arg-type]
                             splits=splits, seed=seed, out_dir=out, B=bootstrap,
                             placebo=_parse_judges(placebo) if placebo else None, max_sham_fpr=max_sham_fpr)
    except AuditError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    for line in result_lines(res):
        typer.echo(line)
    typer.echo(f"wrote {out}/judge_status.csv, agreement.csv, ceiling.csv, splits.csv, selection.csv, sham_fpr.csv, "
               f"summary.json")
    bad = res["summary"].get("not_assessable") or {}
    for name, why in bad.items():
        typer.echo(f"warning: judge {name!r}: {why}", err=True)
    if bad:  # as a run whose model got no answer (health.EXIT_MODEL_ERRORS): the outputs are written
        raise typer.Exit(1)


def result_lines(res: dict) -> list[str]:
    """What ``judge-validate`` prints: per judge and axis its tau_b (an interval only where there is one; the
    row's note otherwise), the sham false-positive rates, the ceiling when it cannot be estimated, and why no
    judge was chosen in a split where none passes the gates."""
    import math

    lines = []
    a = res["agreement"]
    shown = a[(a["policy"] == "strict") & (a["split"] == "all")]
    for r in shown.itertuples():
        note = str(getattr(r, "note", "") or "")
        if r.n == 0:
            lines.append(f"{r.judge:>20} {r.axis:<10} {note or 'not assessable: no valid output'}")
            continue
        ci = (f" [{r.ci_low:.3f}, {r.ci_high:.3f}]" if not (math.isnan(r.ci_low) or math.isnan(r.ci_high)) else "")
        lines.append(f"{r.judge:>20} {r.axis:<10} tau_b={r.tau_b:.3f}{ci} n={r.n}" + (f" ({note})" if note else ""))
    for r in res["sham_fpr"].itertuples():
        lines.append(f"{r.judge:>20} sham false positives {r.threshold:<6} {r.k}/{r.n} = "
                     + (f"{100 * r.rate:.1f}% [{100 * r.ci_low:.1f}, {100 * r.ci_high:.1f}]" if r.n
                        else "not estimable"))
    ce = res["ceiling"]
    if len(ce) and "note" in ce and ce["note"].astype(str).str.startswith("not estimable").all():
        lines.append(f"human ceiling {ce['note'].iloc[0]}")
    for r in res["selection"].itertuples():
        if not r.chosen and str(getattr(r, "note", "") or ""):
            lines.append(f"split {r.split_id}: {r.note}")
    return lines


judge_validate_cmd.cli_name = "judge-validate"  # type: ignore[attr-defined]
