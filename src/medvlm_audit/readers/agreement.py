"""Metric rows of reads in the shared long schema (suite = "readers") and the agreement statistics between
readers (Cohen's and weighted kappa, percent agreement, Fleiss' kappa), used by every reader task's analysis."""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import combinations
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from medvlm_audit.results import COMPARISONS_COLUMNS, METRICS_COLUMNS, MetricRow

if TYPE_CHECKING:  # pragma: no cover
    from medvlm_audit import stats
    from medvlm_audit.readers.tasks import ReaderAnalysis

__all__ = ["COMPARISON_COLUMNS", "METRIC_COLUMNS", "agreement_figure", "agreement_rows", "estimate_row",
           "fleiss_row", "metric_row", "new_figure", "ordinal_ratings", "wilson_row"]

#: the shared long metrics and comparisons schemas (:mod:`medvlm_audit.results`) as lists
METRIC_COLUMNS = list(METRICS_COLUMNS)
COMPARISON_COLUMNS = list(COMPARISONS_COLUMNS)


def metric_row(probe_set: str, model: str, metric: str, subset: str, point: float, se: float, lo: float,
               hi: float, n: int, unit: str, method: str, note: str = "") -> dict[str, Any]:
    """One row of the long metrics schema (``METRIC_COLUMNS``) with suite = "readers", as a dict."""
    return MetricRow("readers", probe_set, model, metric, subset, point, se, lo, hi, int(n), unit, method,
                     note).as_dict()


def wilson_row(ps: str, model: str, metric: str, subset: str, k: int, n: int, note: str = "") -> dict[str, Any]:
    """A share k/n in percent with its analytic SE and the one rate interval (:func:`stats.rate_interval`)."""
    from medvlm_audit import stats

    if n == 0:
        return metric_row(ps, model, metric, subset, np.nan, np.nan, np.nan, np.nan, 0, "%", "",
                          "not estimable (n = 0)")
    p = k / n
    lo, hi = stats.rate_interval(k, n)
    return metric_row(ps, model, metric, subset, 100 * p, 100 * math.sqrt(p * (1 - p) / n), 100 * lo, 100 * hi, n,
                      "%", f"{k}/{n}; analytic SE sqrt(p(1-p)/n); {stats.rate_interval_method(k, n)}", note)


def estimate_row(ps: str, model: str, metric: str, subset: str, est: stats.Estimate, unit: str,
                 note: str = "", scale: float = 1.0) -> dict[str, Any]:
    """A row from a :class:`~medvlm_audit.stats.Estimate` (point and interval times ``scale``)."""
    return metric_row(ps, model, metric, subset, scale * est.point, scale * est.se, scale * est.ci_low,
                      scale * est.ci_high, est.n, unit, est.method,
                      note or ("not estimable (n = 0)" if est.n == 0 else ""))


def agreement_rows(ps: str, label: str, wide: pd.DataFrame, *, weights: str | None, categories: Sequence[Any] | None,
                   B: int) -> list[dict[str, Any]]:
    """Pairwise Cohen's kappa and percent agreement between readers (columns of ``wide``: one row per judgment)."""
    from medvlm_audit import stats

    rows = []
    readers = list(wide.columns)
    for a, b in combinations(readers, 2):
        both = wide[[a, b]].dropna()
        if categories is not None:
            both = both[both[a].isin(categories) & both[b].isin(categories)]
        pair = f"{str(a).removeprefix('reader:')} vs {str(b).removeprefix('reader:')}"
        kname = "kappa_w" if weights == "quadratic" else "kappa"
        est = stats.cohen_kappa_interval(both[a].to_numpy(dtype=object), both[b].to_numpy(dtype=object),
                                         weights=weights, categories=categories, B=B)
        rows.append(estimate_row(ps, pair, kname, label, est, "kappa"))
        agree = (both[a] == both[b]).to_numpy().astype(np.int8)
        pa = stats.proportion(agree, B=B, interval="rate") if len(agree) else None
        if pa is None:
            rows.append(metric_row(ps, pair, "percent_agreement", label, np.nan, np.nan, np.nan, np.nan, 0, "%", "",
                                   "not estimable (n = 0)"))
        else:
            rows.append(estimate_row(ps, pair, "percent_agreement", label, pa, "%", scale=100.0))
    return rows


def fleiss_row(ps: str, label: str, wide: pd.DataFrame, categories: Sequence[Any], B: int) -> dict[str, Any]:
    """Fleiss' kappa over the readers (columns of ``wide``) with a bootstrap interval."""
    from medvlm_audit import stats

    counts, _ = stats.ratings_to_counts(wide.astype(object).where(wide.notna(), None).to_numpy().tolist(),
                                        categories)
    est = stats.fleiss_kappa_interval(counts, B=B)
    return estimate_row(ps, "readers", "fleiss_kappa", label, est, "kappa")


def ordinal_ratings(ans: pd.DataFrame, man: dict[str, Any], task: str, B: int, out: ReaderAnalysis,
                    categories: list[str]) -> None:
    """Ratings on ordinal scales: the mean per scale and reader, and between readers quadratic-weighted kappa,
    percent agreement and Fleiss' kappa per scale."""
    from medvlm_audit import stats

    rows = []
    readers = sorted(ans["reader"].unique())
    for scale in man["scales"]:
        a = ans[ans["scale"] == scale]
        for rd, g in a.groupby("reader"):
            est = stats.mean_estimate(g["answer"].astype(int).to_numpy(dtype=float), B=B)
            rows.append(estimate_row(task, f"reader:{rd}", f"mean:{scale}", "all", est, "score"))
        if len(readers) > 1:
            wide = a.pivot_table(index="item_id", columns="reader", values="answer", aggfunc="first")
            rows += agreement_rows(task, f"axis={scale}", wide, weights="quadratic", categories=categories, B=B)
            rows.append(fleiss_row(task, f"axis={scale}", wide, categories, B))
    out.metrics = pd.concat([out.metrics, pd.DataFrame(rows)], ignore_index=True)


def new_figure(w: float, h: float) -> Any:
    """A matplotlib Figure of w x h inches (no pyplot state)."""
    from matplotlib.figure import Figure

    return Figure(figsize=(w, h))


def agreement_figure(metrics: pd.DataFrame) -> Any | None:
    """Inter-rater agreement (as in paper 000's Fig. 7f): percent agreement, kappa and weighted kappa with
    their intervals; None when no agreement was computed."""
    a = metrics[metrics["metric"].isin(["percent_agreement", "kappa", "kappa_w"])]
    if a.empty:
        return None
    keys = a[["model", "subset"]].drop_duplicates().reset_index(drop=True)
    fig = new_figure(7.0, 1.2 + 0.3 * len(keys))
    axes = fig.subplots(1, 2, sharey=True)
    y_of = {(r.model, r.subset): k for k, r in enumerate(keys.itertuples())}
    for ax, unit, xlabel in ((axes[0], "%", "percent agreement (%)"), (axes[1], "kappa", "kappa (w: quadratic)")):
        d = a[a["unit"] == unit]
        y = np.array([y_of[(r.model, r.subset)] for r in d.itertuples()])
        ax.errorbar(d["point"], y, xerr=[(d["point"] - d["ci_low"]).clip(lower=0),
                                         (d["ci_high"] - d["point"]).clip(lower=0)], fmt="o", capsize=2)
        for yy, r in zip(y, d.itertuples()):
            if r.metric == "kappa_w":
                ax.annotate("w", (r.point, yy), fontsize=6, xytext=(3, 3), textcoords="offset points")
        ax.set_xlabel(xlabel)
    axes[0].set_yticks(np.arange(len(keys)), [f"{r.model}\n{r.subset}" for r in keys.itertuples()], fontsize=6)
    axes[0].set_ylim(-0.6, len(keys) - 0.4)
    axes[0].set_title("f  Inter-rater agreement (bootstrap 95%)", loc="left", fontsize=9)
    fig.subplots_adjust(left=0.3, wspace=0.15, bottom=0.3)
    return fig


