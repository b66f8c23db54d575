"""Write a grounding report to a folder: report.html, metrics.parquet/.csv, comparisons.csv, categories.csv,
summary.json. Everything is rendered in memory, written to temporary files, then renamed into place, so a failure
at any point leaves no partial report.html (and no half-written table) behind.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from medvlm_audit.atomic import csv_bytes, parquet_bytes, write_folder_atomic
from medvlm_audit.report.html import _jsonable, render_report_html
from medvlm_audit.report.sections import Section

__all__ = ["REPORT_FILES", "AnalysisLike", "validate_analysis", "write_report"]


class AnalysisLike(Protocol):
    """What a report needs: the fields of analysis.grounding.GroundingAnalysis (duck-typed; shared schema)."""

    metrics: pd.DataFrame
    comparisons: pd.DataFrame
    categories: pd.DataFrame
    threshold_sweep: pd.DataFrame
    robustness: pd.DataFrame
    verdicts: dict[str, str]
    summary: dict[str, Any]

#: the files write_report produces, in the order they are renamed into place (report.html last).
REPORT_FILES: tuple[str, ...] = (
    "metrics.parquet", "metrics.csv", "comparisons.csv", "categories.csv", "summary.json", "report.html",
)

METRICS_COLUMNS = ("probe_set", "model", "modality", "metric", "subset", "point", "se", "ci_low", "ci_high", "n",
                   "unit", "method", "note")
COMPARISONS_COLUMNS = ("family", "probe_set", "metric", "subset", "model_a", "model_b", "diff", "sd", "ci_low",
                       "ci_high", "p", "p_adj", "n", "test", "note")
CATEGORIES_COLUMNS = ("probe_set", "model", "modality", "category", "reason", "cgr", "cgr_low", "cgr_high", "n_cgr",
                      "uar", "uar_low", "uar_high", "n_uar", "is_", "is_low", "is_high", "n_is", "accuracy",
                      "acc_low", "acc_high", "n_acc", "gsp")


def _check_frame(analysis: Any, field: str, columns: Sequence[str], *, allow_empty_untyped: bool = False) -> None:
    df = getattr(analysis, field, None)
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"analysis.{field} must be a pandas DataFrame, got {type(df).__name__}")
    if allow_empty_untyped and df.empty and len(df.columns) == 0:
        return
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"analysis.{field} lacks column(s) {missing}; has {list(df.columns)}")


def validate_analysis(analysis: Any) -> None:
    """Check that an analysis carries the fields and columns of the shared schema; errors name field and column."""
    for field in ("metrics", "comparisons", "categories", "threshold_sweep", "robustness", "verdicts", "summary"):
        if not hasattr(analysis, field):
            raise ValueError(f"analysis lacks field {field!r} (expected a GroundingAnalysis)")
    _check_frame(analysis, "metrics", METRICS_COLUMNS)
    _check_frame(analysis, "comparisons", COMPARISONS_COLUMNS, allow_empty_untyped=True)
    _check_frame(analysis, "categories", CATEGORIES_COLUMNS, allow_empty_untyped=True)
    _check_frame(analysis, "threshold_sweep", ("probe_set", "model", "threshold", "category"),
                 allow_empty_untyped=True)
    _check_frame(analysis, "robustness", ("probe_set", "kind"), allow_empty_untyped=True)
    if not isinstance(analysis.verdicts, Mapping):
        raise TypeError(f"analysis.verdicts must be a dict of model -> verdict, got {type(analysis.verdicts).__name__}")
    if not isinstance(analysis.summary, Mapping):
        raise TypeError(f"analysis.summary must be a dict, got {type(analysis.summary).__name__}")


def _ordered(df: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    if df.empty and len(df.columns) == 0:
        return pd.DataFrame(columns=list(columns))
    return df[[*columns, *[c for c in df.columns if c not in columns]]]


def _summary_bytes(analysis: Any, title: str, run_info: Mapping[str, Any]) -> bytes:
    from medvlm_audit import __version__

    summary = _jsonable(dict(analysis.summary))
    summary.setdefault("verdicts", _jsonable(dict(analysis.verdicts)))
    summary["report"] = {"title": title, "run_info": _jsonable(dict(run_info)), "files": list(REPORT_FILES),
                         "package_version": __version__}
    return (json.dumps(summary, indent=2, sort_keys=False, allow_nan=False) + "\n").encode("utf-8")


def write_report(
    analysis: AnalysisLike,
    out_dir: str | os.PathLike[str],
    *,
    title: str = "medvlm-audit grounding report",
    run_info: Mapping[str, Any] | None = None,
    extra_sections: Sequence[Section] | None = None,
    fmt: str = "svg",
) -> Path:
    """Render the report of a GroundingAnalysis into out_dir and return the path of report.html.

    Writes report.html (self-contained), metrics.parquet + metrics.csv (one row per model x metric x subset),
    comparisons.csv (family, raw and adjusted p), categories.csv and summary.json, each atomically.
    """
    validate_analysis(analysis)
    for sec in extra_sections or []:
        if not isinstance(sec, Section):
            raise TypeError(f"extra_sections must hold Section objects, got {type(sec).__name__}")
    run_info = dict(run_info or {})
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    metrics = _ordered(analysis.metrics, METRICS_COLUMNS)
    payloads: list[tuple[str, bytes]] = [
        ("metrics.parquet", parquet_bytes(metrics)),
        ("metrics.csv", csv_bytes(metrics)),
        ("comparisons.csv", csv_bytes(_ordered(analysis.comparisons, COMPARISONS_COLUMNS))),
        ("categories.csv", csv_bytes(_ordered(analysis.categories, CATEGORIES_COLUMNS))),
        ("summary.json", _summary_bytes(analysis, title, run_info)),
    ]
    page = render_report_html(analysis, title=title, run_info=run_info, extra_sections=extra_sections, fmt=fmt)
    payloads.append(("report.html", page.encode("utf-8")))
    write_folder_atomic(out, payloads)  # the whole folder swapped in at once: never old and new mixed
    return out / "report.html"
