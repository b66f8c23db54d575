"""Analysis of a reader study's exported reads: each export is analysed by its task (a suite's
:class:`~medvlm_audit.readers.tasks.ReaderTask`: finding presence, box validation, failure modes, CoT rating,
visual necessity, benchmark profile, ...), then the agreement figure and the report sections are drawn over all
of them. Everything lands in the shared long metrics schema (suite = "readers") plus report Sections.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from medvlm_audit.errors import AuditError
from medvlm_audit.readers.agreement import COMPARISON_COLUMNS, METRIC_COLUMNS, agreement_figure
from medvlm_audit.readers.export import EXPORT_MANIFEST
from medvlm_audit.readers.tasks import AnalysisRequest, ReaderAnalysis, ReaderTask

__all__ = ["METRIC_COLUMNS", "ReaderAnalysis", "analyse_exports", "find_exports", "reader_sections",
           "write_analysis"]


def _load_export(d: Path) -> tuple[dict[str, Any], pd.DataFrame, pd.DataFrame]:
    man_p = d / EXPORT_MANIFEST
    if not man_p.exists():
        raise AuditError(f"{d}: not a reader-study export ({EXPORT_MANIFEST} missing); run `readers export`")
    man = json.loads(man_p.read_text())
    ans = pd.read_parquet(d / "answers.parquet")
    reads = pd.read_parquet(d / "reads.parquet") if (d / "reads.parquet").exists() else pd.DataFrame()
    return man, ans, reads


def find_exports(run_dir: str | Path) -> list[Path]:
    """Reader-study exports kept with a run: ``RUN_DIR/readers/*/readers_export.json``."""
    base = Path(run_dir) / "readers"
    return sorted(p.parent for p in base.glob(f"*/{EXPORT_MANIFEST}")) if base.is_dir() else []


def analyse_exports(export_dirs: Sequence[str | Path], *, run_dir: str | Path | None = None,
                    run_tidy: pd.DataFrame | None = None, B: int = 10_000, min_readers: int = 2,
                    landscape: tuple[str, str] = ("reasoning_complexity", "visual_detail_required")) -> ReaderAnalysis:
    """Analyse one or more study exports; ``run_tidy`` (or the run's results.parquet) supplies the models."""
    out = ReaderAnalysis(pd.DataFrame(columns=METRIC_COLUMNS), pd.DataFrame(columns=COMPARISON_COLUMNS))
    if not export_dirs:
        raise AuditError("no reader-study export given")
    analysed: list[ReaderTask] = []
    for d in export_dirs:
        man, ans, reads = _load_export(Path(d))
        task = man["task"]
        tidy = run_tidy
        rd = run_dir or man.get("run_dir")
        if tidy is None and rd and (Path(rd) / "results.parquet").exists():
            tidy = pd.read_parquet(Path(rd) / "results.parquet")
        out.summary.setdefault("studies", []).append({"task": task, "export": str(d), "readers": man["readers"]})
        if ans.empty:
            out.summary.setdefault("notes", []).append(f"{d}: no answers yet")
            continue
        from medvlm_audit.readers.catalog import reader_task

        rtask = reader_task(task, man.get("task_suite"))
        rtask.analyse(AnalysisRequest(man, ans, reads, tidy, B, {"min_readers": min_readers, "landscape": landscape}),
                      out)
        if all(t is not rtask for t in analysed):
            analysed.append(rtask)
    out.metrics = out.metrics[METRIC_COLUMNS].reset_index(drop=True)
    for rtask in analysed:  # figures and sections that need every export's metrics (e.g. two tasks of one run)
        if rtask.finish is not None:
            rtask.finish(out)
    fig_f = agreement_figure(out.metrics)
    if fig_f is not None:
        out.figures["agreement"] = fig_f
        out.figure_titles["agreement"] = "Inter-rater agreement"
    out.sections = _sections(out)
    return out


def _sections(res: ReaderAnalysis) -> list[Any]:
    """Verdicts per reader, the figures, the metrics and comparisons as compact tables, then the tasks' own."""
    from medvlm_audit.readers.sections import comparisons_html, metrics_html, verdicts_html
    from medvlm_audit.report.sections import Section, figure_to_html

    secs = []
    verdicts = verdicts_html(res.metrics, res.comparisons)
    if verdicts:
        secs.append(Section("Readers: verdicts", verdicts, "reader-verdicts"))
    for key, fig in res.figures.items():
        title = res.figure_titles.get(key, key)
        secs.append(Section(title, figure_to_html(fig, title=title)))
    if len(res.metrics):
        secs.append(Section("Reader-study metrics", metrics_html(res.metrics)))
    if len(res.comparisons):
        secs.append(Section("Model minus reader (paired bootstrap, BH within metric and reader)",
                            comparisons_html(res.comparisons)))
    secs.extend(res.task_sections)
    return secs


def reader_sections(run_dir: str | Path, run_tidy: pd.DataFrame | None = None, B: int = 10_000) -> list[Any]:
    """Report hook: the reader-study sections for a run, from the exports in RUN_DIR/readers/ (none: [])."""
    dirs = find_exports(run_dir)
    if not dirs:
        return []
    return analyse_exports(dirs, run_dir=run_dir, run_tidy=run_tidy, B=B).sections


def write_analysis(res: ReaderAnalysis, out: str | Path) -> dict[str, Path]:
    """metrics.parquet/.csv, comparisons.csv, tables, item lists (NAME.txt), the tasks' extra files and
    readers-report.html, atomically."""
    from medvlm_audit.atomic import csv_bytes, parquet_bytes, write_files_atomic
    from medvlm_audit.report.html import render_page

    out = Path(out)
    payloads = [("metrics.parquet", parquet_bytes(res.metrics)), ("metrics.csv", csv_bytes(res.metrics)),
                ("comparisons.csv", csv_bytes(res.comparisons))]
    for name, df in res.tables.items():
        payloads.append((f"{name}.csv", csv_bytes(df)))
    for name, ids in res.item_lists.items():
        payloads.append((f"{name}.txt", "".join(f"{i}\n" for i in ids).encode()))
    payloads += list(res.files.items())
    page = render_page(title="Reader study", sections=res.sections, run_details=False)  # the run report's page
    payloads.append(("readers-report.html", page.encode("utf-8")))
    write_files_atomic(out, payloads)
    return {name: out / name for name, _ in payloads}
