"""Analysis of a reader study's exported reads (papers 000, 001, 003).

- finding presence: human accuracy, sensitivity, specificity, CGR and IS by exactly the model definitions
  (the run's suite's ``model_vectors`` on one panel holding models and readers);
  model minus reader paired bootstrap differences on shared cases with Benjamini-Hochberg within each metric
  and reader (paper 000: "FDR correction within each metric across the models"); Cohen's kappa and percent
  agreement between readers on shared judgments (case x condition) with bootstrap intervals.
- box validation: share of boxes rated accurate (and accurate-or-partial) per finding with Wilson intervals;
  CGR of every model restricted to boxes rated accurate / at least partial (Supplementary Table 7); quadratic-
  weighted kappa between readers on the ordinal rating (inaccurate < partial < accurate; not assessable left out).
- failure modes: share of each mode per audited model (Wilson intervals).
- CoT rating: mean per axis and reader; quadratic-weighted kappa and percent agreement between readers, Fleiss'
  kappa per axis.
- visual necessity: the agreed image-required items (every reader who rated the item said the image is needed,
  and at least ``min_readers`` rated it) as an item list for the stress suite's T2; agreement.
- benchmark profile: median per benchmark and axis, Fleiss' kappa per axis with a bootstrap interval over
  benchmarks, and the reasoning x visual-complexity landscape.
Everything lands in the shared long metrics schema (suite = "readers") plus report Sections.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from medvlm_audit import stats
from medvlm_audit.errors import AuditError
from medvlm_audit.readers.export import EXPORT_MANIFEST

__all__ = ["METRIC_COLUMNS", "ReaderAnalysis", "analyse_exports", "find_exports", "reader_sections",
           "write_analysis"]

METRIC_COLUMNS = ["suite", "probe_set", "model", "metric", "subset", "point", "se", "ci_low", "ci_high", "n", "unit",
                  "method", "note"]
COMPARISON_COLUMNS = ["family", "probe_set", "metric", "subset", "model_a", "model_b", "diff", "sd", "ci_low",
                      "ci_high", "p", "p_adj", "n", "test", "note"]
BOX_ORDER = ["inaccurate", "partial", "accurate"]
FAILURE_MODES = ["ambiguous_case", "poor_image_quality", "plausible_confounder", "clear_model_failure", "other"]


@dataclass
class ReaderAnalysis:
    metrics: pd.DataFrame
    comparisons: pd.DataFrame
    sections: list[Any] = field(default_factory=list)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    item_lists: dict[str, list[str]] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)


# ------------------------------------------------------------------------------------------------ helpers


def _row(probe_set: str, model: str, metric: str, subset: str, point: float, se: float, lo: float, hi: float,
         n: int, unit: str, method: str, note: str = "") -> dict[str, Any]:
    return {"suite": "readers", "probe_set": probe_set, "model": model, "metric": metric, "subset": subset,
            "point": point, "se": se, "ci_low": lo, "ci_high": hi, "n": int(n), "unit": unit, "method": method,
            "note": note}


def _wilson_row(ps: str, model: str, metric: str, subset: str, k: int, n: int, note: str = "") -> dict[str, Any]:
    if n == 0:
        return _row(ps, model, metric, subset, np.nan, np.nan, np.nan, np.nan, 0, "%", "", "not estimable (n = 0)")
    p = k / n
    lo, hi = stats.rate_interval(k, n)
    return _row(ps, model, metric, subset, 100 * p, 100 * math.sqrt(p * (1 - p) / n), 100 * lo, 100 * hi, n, "%",
                f"{k}/{n}; analytic SE sqrt(p(1-p)/n); {stats.rate_interval_method(k, n)}", note)


def _estimate_row(ps: str, model: str, metric: str, subset: str, est: stats.Estimate, unit: str,
                  note: str = "", scale: float = 1.0) -> dict[str, Any]:
    return _row(ps, model, metric, subset, scale * est.point, scale * est.se, scale * est.ci_low,
                scale * est.ci_high, est.n, unit, est.method, note or ("not estimable (n = 0)" if est.n == 0 else ""))


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


def _agreement_rows(ps: str, label: str, wide: pd.DataFrame, *, weights: str | None, categories: Sequence[Any] | None,
                    B: int) -> list[dict[str, Any]]:
    """Pairwise Cohen's kappa and percent agreement between readers (columns of ``wide``: one row per judgment)."""
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
        rows.append(_estimate_row(ps, pair, kname, label, est, "kappa"))
        agree = (both[a] == both[b]).to_numpy().astype(np.int8)
        pa = stats.proportion(agree, B=B, interval="rate") if len(agree) else None
        if pa is None:
            rows.append(_row(ps, pair, "percent_agreement", label, np.nan, np.nan, np.nan, np.nan, 0, "%", "",
                             "not estimable (n = 0)"))
        else:
            rows.append(_estimate_row(ps, pair, "percent_agreement", label, pa, "%", scale=100.0))
    return rows


def _fleiss_row(ps: str, label: str, wide: pd.DataFrame, categories: Sequence[Any], B: int) -> dict[str, Any]:
    counts, _ = stats.ratings_to_counts(wide.astype(object).where(wide.notna(), None).to_numpy().tolist(),
                                        categories)
    est = stats.fleiss_kappa_interval(counts, B=B)
    return _estimate_row(ps, "readers", "fleiss_kappa", label, est, "kappa")


# ------------------------------------------------------------------------------------------------ tasks


def _finding_presence(reads: pd.DataFrame, run_tidy: pd.DataFrame | None, B: int,
                      out: ReaderAnalysis, support: Any) -> None:
    adjust_families, paired_row = support.adjust_families, support.paired_row
    Options, build_panels, model_vectors, rate_row = (  # noqa: N806
        support.Options, support.build_panels, support.model_vectors, support.rate_row)

    opts = Options(B=B)
    reads = reads.copy()
    readers = sorted(reads["model"].unique())
    ps_list = sorted(reads["probe_set"].unique())
    frames = [reads]
    if run_tidy is not None and len(run_tidy):
        t = run_tidy[run_tidy["probe_set"].isin(ps_list) & run_tidy["case_id"].isin(reads["case_id"].unique())]
        if "resolution" in t.columns:
            t = t[t["resolution"].fillna(224) == 224]
        if "prompt_variant" in t.columns:
            t = t[t["prompt_variant"].fillna("default") == "default"]
        frames.append(t[[c for c in t.columns if c in reads.columns]])
    both = pd.concat(frames, ignore_index=True)
    panels, notes = build_panels(both)
    rows, comps = [], []
    shape: dict[str, dict[str, dict[str, Any]]] = {}
    for (ps, res, variant), panel in panels.items():
        if res != 224 or variant != "default":
            continue
        vecs = {m: model_vectors(panel, i, "correct") for i, m in enumerate(panel.models)}
        for m in panel.models:
            for metric in ("accuracy", "sensitivity", "specificity", "cgr", "is"):
                r = rate_row(vecs[m][metric].take()[0], None, opts)
                rows.append(_row(ps, m, metric, "reader-sample", r["point"], r["se"], r["ci_low"], r["ci_high"],
                                 r["n"], "%", r["method"], r["note"]))
                shape.setdefault(m, {})[metric] = r
            for f in sorted({str(x) for x in panel.finding if x is not None}):  # per-finding CGR (Fig. 7e)
                vals, _ = vecs[m]["cgr"].take(panel.finding == f)
                r = rate_row(vals, None, opts)
                rows.append(_row(ps, m, "cgr", f"reader-sample:finding={f}", r["point"], r["se"], r["ci_low"],
                                 r["ci_high"], r["n"], "%", r["method"], r["note"]))
        out.summary.setdefault("modality", {}).update(panel.modality)
        for rd in readers:
            if rd not in panel.models:
                continue
            for metric in ("accuracy", "cgr", "is"):
                fam = f"readers:{ps}:{metric}:{rd}"
                for m in panel.models:
                    if m.startswith("reader:"):
                        continue
                    c = paired_row(fam, panel, metric, m, rd, vecs[m][metric], vecs[rd][metric], opts)
                    comps.append(c)
    if len(readers) > 1:  # reader agreement on shared judgments (case x condition)
        wide = reads.pivot_table(index=["probe_set", "case_id", "condition"], columns="model", values="parsed",
                                 aggfunc="first")
        for ps in ps_list:
            sub = wide.loc[ps] if ps in wide.index.get_level_values(0) else wide.iloc[:0]
            rows += _agreement_rows(ps, "finding-presence", sub, weights=None, categories=None, B=B)
    out.metrics = pd.concat([out.metrics, pd.DataFrame(rows)], ignore_index=True)
    comp = adjust_families(pd.DataFrame(comps)) if comps else pd.DataFrame(columns=COMPARISON_COLUMNS)
    out.comparisons = pd.concat([out.comparisons, comp[[c for c in COMPARISON_COLUMNS if c in comp.columns]]],
                                ignore_index=True)
    out.summary.setdefault("notes", []).extend(notes)
    out.figures["finding-presence"] = _fig7_abc(out.metrics, comp, readers)
    models_frame = pd.DataFrame([{"model": m, **{k: v["point"] for k, v in d.items()}} for m, d in shape.items()])
    out.tables["reader_vs_models"] = models_frame


def _box_validation(ans: pd.DataFrame, run_tidy: pd.DataFrame | None, B: int, out: ReaderAnalysis,
                    support: Any) -> None:
    Options, build_panels, model_vectors, rate_row = (  # noqa: N806
        support.Options, support.build_panels, support.model_vectors, support.rate_row)

    a = ans[ans["scale"] == "answer"]
    rows = []
    ps = str(a["probe_set"].dropna().iloc[0]) if a["probe_set"].notna().any() else ""
    for rd, g in a.groupby("reader"):
        for f, gf in [("all", g), *[(str(k), v) for k, v in g.groupby("finding")]]:
            sub = "all" if f == "all" else f"finding={f}"
            n_na = int((gf["answer"] == "not_assessable").sum())
            note = f"{n_na} rated not assessable (in the denominator)" if n_na else ""
            rows.append(_wilson_row(ps, f"reader:{rd}", "box_valid", sub, int((gf["answer"] == "accurate").sum()),
                                    len(gf), note))
            rows.append(_wilson_row(ps, f"reader:{rd}", "box_valid_partial", sub,
                                    int(gf["answer"].isin(["accurate", "partial"]).sum()), len(gf), note))
    # CGR of every model restricted to the boxes a reader rated accurate / at least partial (Supp. Table 7)
    if run_tidy is not None and len(run_tidy):
        opts = Options(B=B)
        panels, _ = build_panels(run_tidy)
        panel = panels.get((ps, 224, "default"))
        if panel is not None:
            rated = set(a["case_id"])
            for i, m in enumerate(panel.models):  # CGR on every box rated (the unrestricted column)
                vals, _pos = model_vectors(panel, i)["cgr"].take(np.isin(panel.case_ids, list(rated)))
                r = rate_row(vals, None, opts)
                rows.append(_row(ps, m, "cgr", "box=rated", r["point"], r["se"], r["ci_low"], r["ci_high"], r["n"],
                                 "%", r["method"], r["note"]))
            for rd, g in a.groupby("reader"):
                strata = {"box=accurate": set(g.loc[g["answer"] == "accurate", "case_id"]),
                          "box>=partial": set(g.loc[g["answer"].isin(["accurate", "partial"]), "case_id"])}
                for i, m in enumerate(panel.models):
                    vec = model_vectors(panel, i)["cgr"]
                    for label, cases in strata.items():
                        vals, _pos = vec.take(np.isin(panel.case_ids, list(cases)))
                        r = rate_row(vals, None, opts)  # stats.rate_interval (Supp. Table 7: Wilson at these n)
                        rows.append(_row(ps, m, "cgr", f"{label}:reader:{rd}", r["point"], r["se"], r["ci_low"],
                                         r["ci_high"], r["n"], "%", r["method"], r["note"]))
    readers = sorted(a["reader"].unique())
    if len(readers) > 1:
        wide = a.pivot_table(index="case_id", columns="reader", values="answer", aggfunc="first")
        rows += _agreement_rows(ps, "box-validation", wide, weights="quadratic", categories=BOX_ORDER, B=B)
    out.metrics = pd.concat([out.metrics, pd.DataFrame(rows)], ignore_index=True)
    out.figures["box-validation"] = _fig7d(pd.DataFrame(rows))


def _failure_modes(ans: pd.DataFrame, out: ReaderAnalysis) -> None:
    a = ans[ans["scale"] == "answer"]
    rows = []
    ps = str(a["probe_set"].dropna().iloc[0]) if a["probe_set"].notna().any() else ""
    for (m, rd), g in a.groupby(["model", "reader"]):
        for mode in FAILURE_MODES:
            rows.append(_wilson_row(ps, str(m), "failure_mode_share", f"mode={mode}",
                                    int((g["answer"] == mode).sum()), len(g), f"classified by reader {rd}"))
    out.metrics = pd.concat([out.metrics, pd.DataFrame(rows)], ignore_index=True)
    out.figures["failure-modes"] = _fig7g(pd.DataFrame(rows))


def _ordinal_ratings(ans: pd.DataFrame, man: dict[str, Any], task: str, B: int, out: ReaderAnalysis,
                     categories: list[str]) -> None:
    rows = []
    readers = sorted(ans["reader"].unique())
    for scale in man["scales"]:
        a = ans[ans["scale"] == scale]
        for rd, g in a.groupby("reader"):
            est = stats.mean_estimate(g["answer"].astype(int).to_numpy(dtype=float), B=B)
            rows.append(_estimate_row(task, f"reader:{rd}", f"mean:{scale}", "all", est, "score"))
        if len(readers) > 1:
            wide = a.pivot_table(index="item_id", columns="reader", values="answer", aggfunc="first")
            rows += _agreement_rows(task, f"axis={scale}", wide, weights="quadratic", categories=categories, B=B)
            rows.append(_fleiss_row(task, f"axis={scale}", wide, categories, B))
    out.metrics = pd.concat([out.metrics, pd.DataFrame(rows)], ignore_index=True)


def _visual_necessity(ans: pd.DataFrame, B: int, out: ReaderAnalysis, min_readers: int) -> None:
    a = ans[ans["scale"] == "answer"]
    readers = sorted(a["reader"].unique())
    per = a.groupby(["case_id", "benchmark"]).agg(n=("answer", "size"),
                                                  n_required=("answer", lambda s: int((s == "no").sum())))
    per = per.reset_index()
    need = min(min_readers, len(readers))
    per["needs_image"] = (per["n"] >= need) & (per["n_required"] == per["n"])
    out.item_lists["image_required"] = sorted(per.loc[per["needs_image"], "case_id"].astype(str))
    out.tables["needs_image"] = per.rename(columns={"case_id": "item_id"})
    rows = []
    for bench, g in per.groupby("benchmark"):
        rows.append(_wilson_row(str(bench), "readers", "image_required_share", "agreed",
                                int(g["needs_image"].sum()), len(g), f"all of at least {need} readers said the "
                                                                     f"image is required"))
    if len(readers) > 1:
        wide = a.pivot_table(index="case_id", columns="reader", values="answer", aggfunc="first")
        rows += _agreement_rows("visual-necessity", "visual-necessity", wide, weights=None, categories=None, B=B)
        rows.append(_fleiss_row("visual-necessity", "visual-necessity", wide, ["yes", "no"], B))
    out.metrics = pd.concat([out.metrics, pd.DataFrame(rows)], ignore_index=True)


def _benchmark_profile(ans: pd.DataFrame, man: dict[str, Any], B: int, out: ReaderAnalysis,
                       landscape: tuple[str, str]) -> None:
    rows = []
    med = ans.assign(v=ans["answer"].astype(int)).groupby(["benchmark", "scale"])["v"].agg(
        median=lambda x: stats.ordinal_median_iqr(x)[0], q1=lambda x: stats.ordinal_median_iqr(x)[1],
        q3=lambda x: stats.ordinal_median_iqr(x)[2], size="size")
    for (bench, scale), r in med.iterrows():
        rows.append(_row(str(bench), "readers", f"rubric:{scale}", "median", float(r["median"]), np.nan, np.nan,
                         np.nan, int(r["size"]), "score (1-3)",
                         "median category over readers (an ordinal scale: a category, never a midpoint)",
                         f"IQR {int(r['q1'])}-{int(r['q3'])}"))
    readers = sorted(ans["reader"].unique())
    for scale in man["scales"]:
        wide = ans[ans["scale"] == scale].pivot_table(index="benchmark", columns="reader", values="answer",
                                                      aggfunc="first")
        if len(readers) > 1:
            rows.append(_fleiss_row("benchmark-profile", f"axis={scale}", wide, ["1", "2", "3"], B))
    out.metrics = pd.concat([out.metrics, pd.DataFrame(rows)], ignore_index=True)
    table = med["median"].unstack("scale")
    out.tables["benchmark_profile"] = table.reset_index()
    out.figures["benchmark-profile"] = _landscape(table, *landscape)


# ------------------------------------------------------------------------------------------------ figures


def _fig(w: float, h: float) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(w, h))


def _fig7_abc(metrics: pd.DataFrame, comp: pd.DataFrame, readers: list[str]) -> Any:
    """Paper 000 Fig. 7a-c: accuracy and CGR of each model beside the reader's band, and the plane."""
    m = metrics[(metrics["subset"] == "reader-sample")]
    fig = _fig(13.0, 3.8)
    axes = fig.subplots(1, 3)
    ref = readers[0] if readers else None
    for ax, metric, title in ((axes[0], "accuracy", "a  Accuracy"), (axes[1], "cgr", "b  CGR")):
        sub = m[m["metric"] == metric].sort_values("point")
        models = [x for x in sub["model"] if not str(x).startswith("reader:")]
        y = np.arange(len(models))
        pts = sub.set_index("model")
        if ref is not None and ref in pts.index and np.isfinite(pts.loc[ref, "point"]):
            ax.axvspan(pts.loc[ref, "ci_low"], pts.loc[ref, "ci_high"], color="#444444", alpha=0.25, lw=0)
            ax.axvline(pts.loc[ref, "point"], color="#222222", lw=1)
        for k, mod in enumerate(models):
            r = pts.loc[mod]
            ax.errorbar([r["point"]], [k], xerr=[[max(0, r["point"] - r["ci_low"])], [max(0, r["ci_high"] - r["point"])]],
                        fmt="o", color="#1f77b4", ms=5, capsize=2)
            c = comp[(comp["metric"] == metric) & (comp["model_a"] == mod) & (comp["model_b"] == ref)]
            if len(c):
                q = c["p_adj"].iloc[0]
                star = "" if not np.isfinite(q) else "***" if q < .001 else "**" if q < .01 else "*" if q < .05 else "ns"
                ax.annotate(f"{c['diff'].iloc[0]:+.1f} {star}", (1.0, k), xycoords=("axes fraction", "data"),
                            fontsize=7, va="center")
        ax.set_yticks(y, models, fontsize=7)
        ax.set_xlabel(f"{metric} (%)")
        ax.set_title(title, loc="left", fontsize=9)
    ax = axes[2]
    acc = m[m["metric"] == "accuracy"].set_index("model")["point"]
    cgr = m[m["metric"] == "cgr"].set_index("model")["point"]
    for mod in acc.index:
        star = str(mod).startswith("reader:")
        ax.scatter([acc[mod]], [cgr.get(mod, np.nan)], marker="*" if star else "o", s=120 if star else 30,
                   color="#d62728" if star else "#1f77b4", edgecolors="black", zorder=3)
        ax.annotate(str(mod), (acc[mod], cgr.get(mod, np.nan)), fontsize=6, xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("accuracy (%)")
    ax.set_ylabel("CGR (%)")
    ax.set_title("c  Accuracy vs CGR (star: reader)", loc="left", fontsize=9)
    fig.subplots_adjust(left=0.1, right=0.97, wspace=0.9, bottom=0.16)
    return fig


def _fig7d(rows: pd.DataFrame) -> Any:
    """Paper 000 Fig. 7d: share of boxes rated accurate per finding with Wilson intervals."""
    d = rows[(rows["metric"] == "box_valid") & rows["subset"].str.startswith("finding=")]
    fig = _fig(6.0, 3.2)
    ax = fig.subplots()
    readers = sorted(d["model"].unique())
    findings = sorted(d["subset"].str[8:].unique())
    w = 0.8 / max(1, len(readers))
    for j, rd in enumerate(readers):
        s = d[d["model"] == rd].set_index("subset")
        x = np.arange(len(findings)) + j * w
        p = [s.loc[f"finding={f}", "point"] if f"finding={f}" in s.index else np.nan for f in findings]
        lo = [s.loc[f"finding={f}", "ci_low"] if f"finding={f}" in s.index else np.nan for f in findings]
        hi = [s.loc[f"finding={f}", "ci_high"] if f"finding={f}" in s.index else np.nan for f in findings]
        ax.bar(x, p, width=w, label=rd)
        ax.errorbar(x, p, yerr=[np.subtract(p, lo), np.subtract(hi, p)], fmt="none", color="black", capsize=2)
    ax.set_xticks(np.arange(len(findings)) + 0.4 - w / 2, findings, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("boxes rated accurate (%)")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=7)
    ax.set_title("d  Box validity per finding (Wilson 95% intervals)", loc="left", fontsize=9)
    fig.subplots_adjust(bottom=0.3)
    return fig


def _fig7e(metrics: pd.DataFrame, modality: dict[str, str]) -> Any | None:
    """Paper 000 Fig. 7e: per-finding CGR against box validity; readers as stars, the mean of the models that see
    the image as circles (needs a box-validation and a finding-presence export of the same run)."""
    box = metrics[(metrics["metric"] == "box_valid") & metrics["subset"].str.startswith("finding=")]
    cgr = metrics[(metrics["metric"] == "cgr") & metrics["subset"].str.startswith("reader-sample:finding=")]
    if box.empty or cgr.empty:
        return None
    validity = box.assign(f=box["subset"].str[8:]).groupby("f")["point"].mean()
    cgr = cgr.assign(f=cgr["subset"].str.split("finding=").str[1])
    fig = _fig(4.6, 3.8)
    ax = fig.subplots()
    readers = sorted(m for m in cgr["model"].unique() if str(m).startswith("reader:"))
    models = [m for m in cgr["model"].unique() if not str(m).startswith("reader:") and modality.get(m) != "text_only"]
    for rd in readers:
        c = cgr[cgr["model"] == rd].set_index("f")["point"].reindex(validity.index)
        ax.scatter(validity, c, marker="*", s=110, color="#d62728", edgecolors="black", label=rd, zorder=3)
    if models:
        mean = cgr[cgr["model"].isin(models)].groupby("f")["point"].mean().reindex(validity.index)
        ax.scatter(validity, mean, marker="o", s=40, color="#1f77b4", edgecolors="black", label="image-model mean")
    ys = cgr[cgr["model"].isin(readers)].groupby("f")["point"].mean().reindex(validity.index)
    for f, v in validity.items():
        if np.isfinite(ys.get(f, np.nan)):
            ax.annotate(str(f).replace("_", " "), (v, ys[f]), fontsize=6, xytext=(5, 2), textcoords="offset points")
    ax.set_xlabel("boxes rated accurate (%)")
    ax.set_ylabel("CGR on the reader sample (%)")
    ax.legend(fontsize=7)
    ax.set_title("e  Per-finding CGR against box validity", loc="left", fontsize=9)
    fig.subplots_adjust(bottom=0.18)
    return fig


def _fig7f(metrics: pd.DataFrame) -> Any | None:
    """Paper 000 Fig. 7f: inter-rater agreement (percent agreement, kappa, weighted kappa) with intervals."""
    a = metrics[metrics["metric"].isin(["percent_agreement", "kappa", "kappa_w"])]
    if a.empty:
        return None
    keys = a[["model", "subset"]].drop_duplicates().reset_index(drop=True)
    fig = _fig(7.0, 1.2 + 0.3 * len(keys))
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


def _fig7g(rows: pd.DataFrame) -> Any:
    """Paper 000 Fig. 7g: failure-mode shares per model (stacked)."""
    fig = _fig(6.0, 3.0)
    ax = fig.subplots()
    models = sorted(rows["model"].unique())
    left = np.zeros(len(models))
    for mode in FAILURE_MODES:
        s = rows[rows["subset"] == f"mode={mode}"].groupby("model")["point"].mean().reindex(models).fillna(0)
        ax.barh(models, s.to_numpy(), left=left, label=mode.replace("_", " "))
        left += s.to_numpy()
    ax.set_xlabel("share of the model's errors (%)")
    ax.legend(fontsize=6, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.25))
    ax.set_title("g  Failure modes of model errors (radiologist review)", loc="left", fontsize=9)
    fig.subplots_adjust(left=0.25, bottom=0.38)
    return fig


def _landscape(table: pd.DataFrame, x: str, y: str) -> Any:
    """Paper 003 Fig. 5: benchmarks in the reasoning x visual-complexity plane (medians of the readers)."""
    fig = _fig(4.2, 4.0)
    ax = fig.subplots()
    if x in table.columns and y in table.columns:
        rng = np.random.default_rng(0)
        for bench, r in table.iterrows():
            jx, jy = rng.uniform(-0.06, 0.06, 2)
            ax.scatter([r[x] + jx], [r[y] + jy], s=60, edgecolors="black")
            ax.annotate(str(bench), (r[x] + jx, r[y] + jy), fontsize=8, xytext=(4, 4), textcoords="offset points")
    ax.set_xlim(0.5, 3.5)
    ax.set_ylim(0.5, 3.5)
    ax.set_xlabel(x.replace("_", " ") + " (median, 1-3)")
    ax.set_ylabel(y.replace("_", " ") + " (median, 1-3)")
    ax.set_title("Benchmark landscape", loc="left", fontsize=9)
    return fig


# ------------------------------------------------------------------------------------------------ entry points


def analyse_exports(export_dirs: Sequence[str | Path], *, run_dir: str | Path | None = None,
                    run_tidy: pd.DataFrame | None = None, B: int = 10_000, min_readers: int = 2,
                    landscape: tuple[str, str] = ("reasoning_complexity", "visual_detail_required")) -> ReaderAnalysis:
    """Analyse one or more study exports; ``run_tidy`` (or the run's results.parquet) supplies the models."""
    out = ReaderAnalysis(pd.DataFrame(columns=METRIC_COLUMNS), pd.DataFrame(columns=COMPARISON_COLUMNS))
    if not export_dirs:
        raise AuditError("no reader-study export given")
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
        if task in ("finding-presence", "box-validation"):
            from medvlm_audit.readers.support import reader_support

            support = reader_support(rd, man.get("suite"))
            if task == "finding-presence":
                _finding_presence(reads, tidy, B, out, support)
            else:
                _box_validation(ans, tidy, B, out, support)
        elif task == "failure-modes":
            _failure_modes(ans, out)
        elif task == "cot-rating":
            _ordinal_ratings(ans, man, "cot-rating", B, out, ["1", "2", "3", "4", "5"])
        elif task == "visual-necessity":
            _visual_necessity(ans, B, out, min_readers)
        elif task == "benchmark-profile":
            _benchmark_profile(ans, man, B, out, landscape)
    out.metrics = out.metrics[METRIC_COLUMNS].reset_index(drop=True)
    fig_e = _fig7e(out.metrics, out.summary.get("modality", {}))
    if fig_e is not None:
        out.figures["box-vs-cgr"] = fig_e
    fig_f = _fig7f(out.metrics)
    if fig_f is not None:
        out.figures["agreement"] = fig_f
    out.sections = _sections(out)
    return out


_TITLES = {"finding-presence": "Readers beside the models (finding presence)",
           "box-vs-cgr": "Per-finding CGR against box validity", "agreement": "Inter-rater agreement",
           "box-validation": "Box validation and CGR on validated boxes",
           "failure-modes": "Failure modes of model errors", "benchmark-profile": "Benchmark profile"}


def _sections(res: ReaderAnalysis) -> list[Any]:
    from medvlm_audit.report.sections import Section, figure_to_html, table_to_html

    secs = []
    for key, fig in res.figures.items():
        secs.append(Section(_TITLES.get(key, key), figure_to_html(fig, caption=_TITLES.get(key, key))))
    if len(res.metrics):
        secs.append(Section("Reader-study metrics", table_to_html(res.metrics.drop(columns=["suite"]),
                                                                 table_id="reader-metrics")))
    if len(res.comparisons):
        secs.append(Section("Model minus reader (paired bootstrap, BH within metric and reader)",
                            table_to_html(res.comparisons, table_id="reader-comparisons")))
    if res.item_lists.get("image_required") is not None:
        ids = res.item_lists["image_required"]
        secs.append(Section("Agreed image-required items (stress T2 subset)",
                            table_to_html(pd.DataFrame({"item_id": ids}), table_id="image-required")
                            if ids else "<p>No item was agreed to require its image.</p>"))
    return secs


def reader_sections(run_dir: str | Path, run_tidy: pd.DataFrame | None = None, B: int = 10_000) -> list[Any]:
    """Report hook: the reader-study sections for a run, from the exports in RUN_DIR/readers/ (none: [])."""
    dirs = find_exports(run_dir)
    if not dirs:
        return []
    return analyse_exports(dirs, run_dir=run_dir, run_tidy=run_tidy, B=B).sections


def write_analysis(res: ReaderAnalysis, out: str | Path) -> dict[str, Path]:
    """metrics.parquet/.csv, comparisons.csv, tables, item lists and readers-report.html, atomically."""
    from medvlm_audit.atomic import csv_bytes, parquet_bytes, write_files_atomic
    from medvlm_audit.report.html import escape

    out = Path(out)
    payloads = [("metrics.parquet", parquet_bytes(res.metrics)), ("metrics.csv", csv_bytes(res.metrics)),
                ("comparisons.csv", csv_bytes(res.comparisons))]
    for name, df in res.tables.items():
        payloads.append((f"{name}.csv", csv_bytes(df)))
    if "image_required" in res.item_lists:
        ids = res.item_lists["image_required"]
        payloads.append(("image_required.txt", "".join(f"{i}\n" for i in ids).encode()))
        if "needs_image" in res.tables:
            nd = res.tables["needs_image"]
            payloads.append(("needs_image.jsonl", "".join(
                json.dumps({"item_id": str(r.item_id), "needs_image": bool(r.needs_image)}) + "\n"
                for r in nd.itertuples(index=False)).encode()))
    html = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>Reader study</title></head><body>",
            "<h1>Reader study</h1>"]
    for s in res.sections:
        html.append(f"<section id='{escape(s.anchor)}'><h2>{escape(s.title)}</h2>{s.html}</section>")
    html.append("</body></html>")
    payloads.append(("readers-report.html", "".join(html).encode()))
    write_files_atomic(out, payloads)
    return {name: out / name for name, _ in payloads}
