"""`medvlm-audit report RUN`: tidy table -> the suite's analysis -> report.html and tables in RUN/report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from medvlm_audit import __version__
from medvlm_audit.errors import AuditError
from medvlm_audit.store import STORE_FILE, RunStore


def _run_info(meta: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    cfg = meta.get("config") or {}
    return {
        "run_id": meta.get("run_id", run_dir.name),
        "suite": meta.get("suite", "grounding"),
        "package_version": meta.get("package_version", __version__),
        "report_version": __version__,
        "seeds": meta.get("seeds"),
        "probe_sets": cfg.get("probe_sets"),
        "models": [m.get("name") for m in cfg.get("models", [])] or None,
        "conditions": cfg.get("conditions"),
        "resolutions": cfg.get("resolutions"),
        "prompt_variants": cfg.get("prompt_variants"),
        "imported_from": meta.get("imported_from"),
        "last_summary": meta.get("last_summary"),
    }


def report_run(
    run_dir: str | Path,
    out: str | Path | None = None,
    *,
    B: int = 10_000,
    mode: str = "exact-counts",
    is_denominator: str = "correct",
    cluster_by_patient: bool = False,
) -> Path:
    """Analyse a run and write report.html, metrics.parquet/.csv, comparisons.csv, summary.json."""
    run_dir = Path(run_dir)
    if not (run_dir / STORE_FILE).exists():
        raise AuditError(f"{run_dir}: no run store ({STORE_FILE}) found")
    out_dir = Path(out) if out else run_dir / "report"
    with RunStore.open_dir(run_dir, readonly=True) as store:  # works on read-only media
        meta = store.meta()
        suite = meta.get("suite", "grounding")
        if suite == "stress":
            from medvlm_audit.suites.stress.run import report_stress

            return report_stress(store, out_dir, run_info=_run_info(meta, run_dir), B=B)
        from medvlm_audit.export import tidy

        table = tidy(store)
    from medvlm_audit.analysis.grounding import analyse_grounding
    from medvlm_audit.report.write import write_report

    analysis = analyse_grounding(
        table, B=B, seed=0, mode=mode, is_denominator=is_denominator, cluster_by_patient=cluster_by_patient
    )
    return write_report(analysis, out_dir, title=f"Grounding audit: {meta.get('run_id', run_dir.name)}",
                        run_info=_run_info(meta, run_dir))
