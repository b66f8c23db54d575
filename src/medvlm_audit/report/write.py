"""The one report writer: a suite's :class:`~medvlm_audit.results.SuiteResult` -> a report folder.

Writes ``metrics.parquet`` / ``metrics.csv`` (the shared long schema, one row per model x metric x subset),
``comparisons.csv`` (family, raw and BH-adjusted p), one ``NAME.csv`` (and ``NAME.parquet`` when asked) per extra
table of the suite, ``summary.json`` and ``report.html`` (one page template and stylesheet for every suite).
Everything is rendered in memory first, then written atomically, so a failure leaves no partial report.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from medvlm_audit.atomic import csv_bytes, parquet_bytes, write_folder_atomic
from medvlm_audit.report.html import _jsonable, render_page, verdict_list
from medvlm_audit.report.sections import Section
from medvlm_audit.results import COMPARISONS_COLUMNS, METRICS_COLUMNS, SuiteResult

__all__ = ["COMPARISONS_COLUMNS", "METRICS_COLUMNS", "report_files", "validate_result", "write_report"]


def _check_frame(df: Any, field: str, columns: Sequence[str], *, allow_empty_untyped: bool = False) -> None:
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"result.{field} must be a pandas DataFrame, got {type(df).__name__}")
    if allow_empty_untyped and df.empty and len(df.columns) == 0:
        return
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"result.{field} lacks column(s) {missing}; has {list(df.columns)}")


def validate_result(result: SuiteResult) -> None:
    """Check that a suite's result carries the shared schemas; errors name the field and the column."""
    _check_frame(result.metrics, "metrics", [c for c in METRICS_COLUMNS if c != "suite"])
    _check_frame(result.comparisons, "comparisons", COMPARISONS_COLUMNS, allow_empty_untyped=True)
    for name, df in result.tables.items():
        _check_frame(df, f"tables[{name!r}]", ())
        if name in ("metrics", "comparisons", "summary", "report") or not name.replace("_", "").isalnum():
            raise ValueError(f"result.tables: {name!r} is not a valid table name")
    for sec in result.sections:
        if not isinstance(sec, Section):
            raise TypeError(f"result.sections must hold Section objects, got {type(sec).__name__}")
    if not isinstance(result.verdicts, Mapping):
        raise TypeError(f"result.verdicts must be a dict of model -> verdict, got {type(result.verdicts).__name__}")
    if not isinstance(result.summary, Mapping):
        raise TypeError(f"result.summary must be a dict, got {type(result.summary).__name__}")


def _ordered(df: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    if df.empty and len(df.columns) == 0:
        return pd.DataFrame(columns=list(columns))
    return df[[*columns, *[c for c in df.columns if c not in columns]]]


def report_files(result: SuiteResult, parquet_tables: bool = False) -> list[str]:
    """The files :func:`write_report` writes, in the order they are renamed into place (report.html last)."""
    extra = [f"{n}.{ext}" for n in result.tables for ext in (("csv", "parquet") if parquet_tables else ("csv",))]
    return ["metrics.parquet", "metrics.csv", "comparisons.csv", *extra, "summary.json", "report.html"]


def _plain(df: pd.DataFrame) -> pd.DataFrame:
    """Object columns with only Parquet-friendly scalars (tuples and other objects as text)."""
    d = df.copy()
    for c in d.columns:
        if d[c].dtype == object:
            d[c] = d[c].map(lambda v: v if v is None or isinstance(v, str | int | float | bool) else str(v))
    return d


def write_report(
    result: SuiteResult,
    out_dir: str | os.PathLike[str],
    *,
    suite: str,
    title: str,
    run_info: Mapping[str, Any] | None = None,
    parquet_tables: bool = False,
) -> Path:
    """Render a suite's result into ``out_dir`` and return the path of report.html."""
    validate_result(result)
    run_info = dict(run_info or {})
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    metrics = result.metrics.copy()
    if "suite" not in metrics.columns:
        metrics.insert(0, "suite", suite)
    metrics = _ordered(metrics, METRICS_COLUMNS)
    files = report_files(result, parquet_tables)
    payloads: list[tuple[str, bytes]] = [
        ("metrics.parquet", parquet_bytes(metrics)),
        ("metrics.csv", csv_bytes(metrics)),
        ("comparisons.csv", csv_bytes(_ordered(result.comparisons, COMPARISONS_COLUMNS))),
    ]
    for name, df in result.tables.items():
        payloads.append((f"{name}.csv", csv_bytes(df)))
        if parquet_tables:
            payloads.append((f"{name}.parquet", parquet_bytes(_plain(df))))
    summary = _jsonable(dict(result.summary))
    summary.setdefault("verdicts", _jsonable(dict(result.verdicts)))
    from medvlm_audit import __version__

    summary["report"] = {"title": title, "run_info": _jsonable(run_info), "files": files,
                         "package_version": __version__}
    payloads.append(("summary.json", (json.dumps(summary, indent=2, allow_nan=False) + "\n").encode("utf-8")))
    derived = {"models": sorted({str(m) for m in metrics["model"].dropna()}) if len(metrics) else None}
    sections = list(result.sections)
    if result.verdicts and not any(sec.anchor == "verdicts" for sec in sections):  # every page opens on them
        items = [(str(m), "", str(v)) for m, v in result.verdicts.items()]
        sections.insert(0, Section("Verdicts", verdict_list(items), "verdicts"))
    page = render_page(title=title, sections=sections, run_info=run_info, summary=result.summary,
                       intro=result.intro, derived=derived)
    payloads.append(("report.html", page.encode("utf-8")))
    write_folder_atomic(out, payloads)  # the whole folder swapped in at once: never old and new mixed
    return out / "report.html"
