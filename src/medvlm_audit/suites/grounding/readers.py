"""Grounding's reader tasks (paper 000): finding presence under the run's masks, validation of the target boxes,
and the failure modes of model errors. Each samples its items from a grounding run (its stored cases and tidy
table) and scores the reads by exactly the model definitions (the suite's conditions render a read's image as
the models saw it; human CGR and IS are the models' CGR and IS).

- finding presence: human accuracy, sensitivity, specificity, CGR and IS by exactly the model definitions
  (``model_vectors`` on one panel holding models and readers); model minus reader paired bootstrap differences
  on shared cases with Benjamini-Hochberg within each metric and reader (paper 000: "FDR correction within
  each metric across the models"); Cohen's kappa and percent agreement between readers on shared judgments
  (case x condition) with bootstrap intervals.
- box validation: share of boxes rated accurate (and accurate-or-partial) per finding with Wilson intervals;
  CGR of every model restricted to boxes rated accurate / at least partial (Supplementary Table 7); quadratic-
  weighted kappa between readers on the ordinal rating (inaccurate < partial < accurate; not assessable left out).
- failure modes: share of each mode per audited model (Wilson intervals).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from medvlm_audit.images import ImageRecipe
from medvlm_audit.readers.agreement import (
    COMPARISON_COLUMNS,
    agreement_rows,
    metric_row,
    new_figure,
    wilson_row,
)
from medvlm_audit.readers.sampling import item_id, need_columns, resolver, run_items, run_results, stratified
from medvlm_audit.readers.tasks import (
    YES_NO,
    AnalysisRequest,
    ReaderAnalysis,
    ReaderTask,
    SampleRequest,
    Scale,
    StudyError,
    TaskSpec,
    numbered,
)
from medvlm_audit.suites.grounding.conditions import Condition
from medvlm_audit.suites.grounding.probeset import row_to_case

if TYPE_CHECKING:  # pragma: no cover
    from medvlm_audit.readers.study import Study

__all__ = ["BOX_VALIDATION", "FAILURE_MODES", "FAILURE_MODE_TASK", "FINDING_PRESENCE", "READER_TASKS", "reads_tidy"]

BOX_ORDER = ["inaccurate", "partial", "accurate"]
FAILURE_MODES = ["ambiguous_case", "poor_image_quality", "plausible_confounder", "clear_model_failure", "other"]

# ------------------------------------------------------------------------------------------------ sampling

def _display(finding: str | None) -> str:
    from medvlm_audit.findings import DISPLAY_NAMES

    return DISPLAY_NAMES.get(str(finding), str(finding).replace("_", " "))


def _finding_question(finding: str | None) -> str:
    return f"Is {_display(finding)} present in this chest X-ray?"


def _grounding_main(tidy: pd.DataFrame, probe_set: str | None, where: str) -> tuple[pd.DataFrame, str]:
    need_columns(tidy, ["probe_set", "model", "case_id", "condition", "label", "finding"], where)
    df = tidy
    if "resolution" in df.columns:
        df = df[df["resolution"].fillna(224) == 224]
    if "prompt_variant" in df.columns:
        df = df[df["prompt_variant"].fillna("default") == "default"]
    if "kind" in df.columns:
        df = df[df["kind"].fillna("finding_presence") == "finding_presence"]
    sets = sorted(df["probe_set"].dropna().astype(str).unique())
    if probe_set is None:
        if len(sets) != 1:
            raise StudyError(f"{where}: the run holds probe sets {sets}; name one with --probe-set")
        probe_set = sets[0]
    elif probe_set not in sets:
        raise StudyError(f"{where}: probe set {probe_set!r} not in the run (has {sets})")
    return df[df["probe_set"] == probe_set], probe_set


def _case_view(row: dict[str, Any]) -> str | None:
    v = row.get("view")
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)


def _expected_sha(tidy: pd.DataFrame) -> dict[tuple[str, str], str]:
    """(case_id, condition) -> the pixel sha256 the run's image models were given (resolution 224)."""
    if "image_sha256" not in tidy.columns:
        return {}
    d = tidy.dropna(subset=["image_sha256"])
    return {(str(c), str(k)): str(s) for c, k, s in
            d[["case_id", "condition", "image_sha256"]].drop_duplicates(["case_id", "condition"]).itertuples(
                index=False, name=None)}


def _items_finding_presence(run_dir: Path, n: int, seed: int, probe_set: str | None, boxed_only: bool,
                            resolution: int) -> list[dict[str, Any]]:
    tidy, probe_set = _grounding_main(run_results(run_dir), probe_set, f"{run_dir}/results.parquet")
    cases, sets = run_items(run_dir)
    resolve = resolver(sets.get(probe_set, ""))
    orig = tidy[tidy["condition"] == "original"].drop_duplicates("case_id")
    rows = []
    for r in orig.itertuples(index=False):
        row = cases.get((probe_set, str(r.case_id)))
        if row is None or not row.get("image_path"):
            continue
        case = row_to_case(row)
        boxed = case.tbox is not None and case.ibox is not None
        if boxed_only and not boxed:
            continue
        rows.append({"case_id": case.case_id, "finding": case.finding, "view": _case_view(row), "boxed": boxed})
    if not rows:
        raise StudyError(f"{run_dir}: no finding-presence case with an image in probe set {probe_set!r}")
    pool = pd.DataFrame(rows)
    rng = np.random.default_rng(seed)
    sample = stratified(pool, ["finding", "view"], n, rng)
    sha = _expected_sha(tidy[tidy["modality"].fillna("") != "text_only"] if "modality" in tidy.columns else tidy)
    items = []
    for r in sample.itertuples(index=False):
        row = cases[(probe_set, r.case_id)]
        case = row_to_case(row)
        conds = ["original"] + (["target_mask", "irrelevant_mask"] if r.boxed else [])
        for cond in conds:
            recipe = Condition(cond, resolution).recipe(case, resolve)
            src = {"probe_set": probe_set, "case_id": case.case_id, "condition": cond, "finding": case.finding,
                   "view": r.view, "label": case.label, "has_box": bool(r.boxed),
                   "ibox_overlaps": bool(case.ibox_overlaps), "resolution": resolution,
                   "images": [_recipe_dict(recipe)],
                   "image_sha256": sha.get((case.case_id, cond)) if resolution == 224 else None}
            for k in ("patient_id", "study_id", "age", "sex", "source", "split", "kind"):
                src[k] = row.get(k)
            view = {"question": _finding_question(case.finding), "n_images": 1}
            items.append({"item_id": item_id(seed, "fp", probe_set, case.case_id, cond), "unit": case.case_id,
                          "view": view, "source": src})
    return items


def _recipe_dict(recipe: Any) -> dict[str, Any]:
    return recipe.to_record()


def _items_box_validation(run_dir: Path, n: int, seed: int, probe_set: str | None) -> list[dict[str, Any]]:
    tidy, probe_set = _grounding_main(run_results(run_dir), probe_set, f"{run_dir}/results.parquet")
    cases, sets = run_items(run_dir)
    resolve = resolver(sets.get(probe_set, ""))
    rows = []
    for cid in tidy["case_id"].astype(str).unique():
        row = cases.get((probe_set, cid))
        if row is None or not row.get("image_path"):
            continue
        case = row_to_case(row)
        if case.target_box is None and case.tbox is None:
            continue
        rows.append({"case_id": cid, "finding": case.finding, "view": _case_view(row)})
    if not rows:
        raise StudyError(f"{run_dir}: no boxed case with an image in probe set {probe_set!r}")
    pool = pd.DataFrame(rows)
    rng = np.random.default_rng(seed)
    parts = [stratified(g, ["view"], n, rng) for _, g in pool.groupby("finding", sort=True)]
    sample = pd.concat(parts)
    items = []
    for r in sample.itertuples(index=False):
        row = cases[(probe_set, r.case_id)]
        case = row_to_case(row)
        if case.target_box is not None:  # native pixels, the radiologist's box in source pixels
            res, box = None, [float(v) for v in case.target_box]
        else:
            res, box = 224, [float(v) for v in case.tbox]  # type: ignore[union-attr]
        path = resolve(case.image)
        src = {"probe_set": probe_set, "case_id": case.case_id, "condition": "original", "finding": case.finding,
               "view": r.view, "label": case.label, "box": box,
               "images": [ImageRecipe.standard(path, res).to_record()]}
        view = {"question": f"Does the marked region contain the visual evidence for {_display(case.finding)}?",
                "box": box, "n_images": 1}
        items.append({"item_id": item_id(seed, "box", probe_set, case.case_id), "unit": case.case_id,
                      "view": view, "source": src})
    return items


def _items_failure_modes(run_dir: Path, n: int, seed: int, probe_set: str | None,
                         models: Sequence[str] | None) -> list[dict[str, Any]]:
    tidy, probe_set = _grounding_main(run_results(run_dir), probe_set, f"{run_dir}/results.parquet")
    cases, sets = run_items(run_dir)
    resolve = resolver(sets.get(probe_set, ""))
    orig = tidy[(tidy["condition"] == "original") & (tidy["parsed"] >= 0)]
    orig = orig[orig["parsed"].astype(int) != orig["label"].astype(int)]
    known = sorted(tidy["model"].astype(str).unique())
    if models:
        bad = [m for m in models if m not in known]
        if bad:
            raise StudyError(f"{run_dir}: model(s) {bad} not in the run (has {known})")
        chosen = list(models)
    else:
        mod = tidy.drop_duplicates("model").set_index("model")["modality"] if "modality" in tidy.columns else None
        chosen = [m for m in known if mod is None or mod.get(m) != "text_only"]
    rng = np.random.default_rng(seed)
    items = []
    for m in chosen:
        errs = orig[orig["model"] == m]
        errs = errs[[cases.get((probe_set, str(c)), {}).get("image_path") is not None for c in errs["case_id"]]]
        if errs.empty:
            continue
        pool = errs[["case_id", "finding", "parsed", "label"]].reset_index(drop=True)
        for r in stratified(pool, ["finding"], n, rng).itertuples(index=False):
            row = cases[(probe_set, str(r.case_id))]
            case = row_to_case(row)
            ans = "Yes" if int(r.parsed) == 1 else "No"
            truth = "Yes" if int(r.label) == 1 else "No"
            src = {"probe_set": probe_set, "case_id": case.case_id, "condition": "original", "model": m,
                   "finding": case.finding, "view": _case_view(row), "label": case.label, "model_answer": ans,
                   "images": [ImageRecipe.standard(resolve(case.image)).to_record()]}
            view = {"question": _finding_question(case.finding), "n_images": 1,
                    "facts": [["System answer", ans], ["Reference label", truth]]}
            items.append({"item_id": item_id(seed, "err", probe_set, case.case_id, m), "unit": case.case_id,
                          "view": view, "source": src})
    if not items:
        raise StudyError(f"{run_dir}: no error of model(s) {chosen} on cases with an image")
    return items


# ------------------------------------------------------------------------------------------------ analysis


def _finding_presence(reads: pd.DataFrame, run_tidy: pd.DataFrame | None, B: int,
                      out: ReaderAnalysis) -> None:
    from medvlm_audit.suites.grounding.comparisons import adjust_families, paired_row
    from medvlm_audit.suites.grounding.metrics import Options, build_panels, model_vectors, rate_row

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
                rows.append(metric_row(ps, m, metric, "reader-sample", r["point"], r["se"], r["ci_low"], r["ci_high"],
                                 r["n"], "%", r["method"], r["note"]))
                shape.setdefault(m, {})[metric] = r
            for f in sorted({str(x) for x in panel.finding if x is not None}):  # per-finding CGR (Fig. 7e)
                vals, _ = vecs[m]["cgr"].take(panel.finding == f)
                r = rate_row(vals, None, opts)
                rows.append(metric_row(ps, m, "cgr", f"reader-sample:finding={f}", r["point"], r["se"], r["ci_low"],
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
            rows += agreement_rows(ps, "finding-presence", sub, weights=None, categories=None, B=B)
    out.metrics = pd.concat([out.metrics, pd.DataFrame(rows)], ignore_index=True)
    comp = adjust_families(pd.DataFrame(comps)) if comps else pd.DataFrame(columns=COMPARISON_COLUMNS)
    out.comparisons = pd.concat([out.comparisons, comp[[c for c in COMPARISON_COLUMNS if c in comp.columns]]],
                                ignore_index=True)
    out.summary.setdefault("notes", []).extend(notes)
    out.figures["finding-presence"] = readers_beside_models_figure(out.metrics, comp, readers)
    out.figure_titles["finding-presence"] = "Readers beside the models (finding presence)"
    models_frame = pd.DataFrame([{"model": m, **{k: v["point"] for k, v in d.items()}} for m, d in shape.items()])
    out.tables["reader_vs_models"] = models_frame


def _box_validation(ans: pd.DataFrame, run_tidy: pd.DataFrame | None, B: int, out: ReaderAnalysis) -> None:
    from medvlm_audit.suites.grounding.metrics import Options, build_panels, model_vectors, rate_row

    a = ans[ans["scale"] == "answer"]
    rows = []
    ps = str(a["probe_set"].dropna().iloc[0]) if a["probe_set"].notna().any() else ""
    for rd, g in a.groupby("reader"):
        for f, gf in [("all", g), *[(str(k), v) for k, v in g.groupby("finding")]]:
            sub = "all" if f == "all" else f"finding={f}"
            n_na = int((gf["answer"] == "not_assessable").sum())
            note = f"{n_na} rated not assessable (in the denominator)" if n_na else ""
            rows.append(wilson_row(ps, f"reader:{rd}", "box_valid", sub, int((gf["answer"] == "accurate").sum()),
                                    len(gf), note))
            rows.append(wilson_row(ps, f"reader:{rd}", "box_valid_partial", sub,
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
                rows.append(metric_row(ps, m, "cgr", "box=rated", r["point"], r["se"], r["ci_low"], r["ci_high"], r["n"],
                                 "%", r["method"], r["note"]))
            for rd, g in a.groupby("reader"):
                strata = {"box=accurate": set(g.loc[g["answer"] == "accurate", "case_id"]),
                          "box>=partial": set(g.loc[g["answer"].isin(["accurate", "partial"]), "case_id"])}
                for i, m in enumerate(panel.models):
                    vec = model_vectors(panel, i)["cgr"]
                    for label, cases in strata.items():
                        vals, _pos = vec.take(np.isin(panel.case_ids, list(cases)))
                        r = rate_row(vals, None, opts)  # stats.rate_interval (Supp. Table 7: Wilson at these n)
                        rows.append(metric_row(ps, m, "cgr", f"{label}:reader:{rd}", r["point"], r["se"], r["ci_low"],
                                         r["ci_high"], r["n"], "%", r["method"], r["note"]))
    readers = sorted(a["reader"].unique())
    if len(readers) > 1:
        wide = a.pivot_table(index="case_id", columns="reader", values="answer", aggfunc="first")
        rows += agreement_rows(ps, "box-validation", wide, weights="quadratic", categories=BOX_ORDER, B=B)
    out.metrics = pd.concat([out.metrics, pd.DataFrame(rows)], ignore_index=True)
    out.figures["box-validation"] = box_validity_figure(pd.DataFrame(rows))
    out.figure_titles["box-validation"] = "Box validation and CGR on validated boxes"


def _failure_modes(ans: pd.DataFrame, out: ReaderAnalysis) -> None:
    a = ans[ans["scale"] == "answer"]
    rows = []
    ps = str(a["probe_set"].dropna().iloc[0]) if a["probe_set"].notna().any() else ""
    for (m, rd), g in a.groupby(["model", "reader"]):
        for mode in FAILURE_MODES:
            rows.append(wilson_row(ps, str(m), "failure_mode_share", f"mode={mode}",
                                    int((g["answer"] == mode).sum()), len(g), f"classified by reader {rd}"))
    out.metrics = pd.concat([out.metrics, pd.DataFrame(rows)], ignore_index=True)
    out.figures["failure-modes"] = failure_mode_figure(pd.DataFrame(rows))
    out.figure_titles["failure-modes"] = "Failure modes of model errors"


# ------------------------------------------------------------------------------------------------ figures


def readers_beside_models_figure(metrics: pd.DataFrame, comp: pd.DataFrame, readers: list[str]) -> Any:
    """Accuracy and CGR of each model beside the reader's band, and the accuracy x CGR plane (as in paper 000's
    Fig. 7a-c). Panels a and b side by side, panel c under them with a legend naming each point (no name is
    written beside a point, so none overlaps another); every text at least 7.5 pt (>= 10 px on the page)."""
    from medvlm_audit.report.figures import text_in

    m = metrics[(metrics["subset"] == "reader-sample")]
    names = [str(x) for x in dict.fromkeys(m["model"])]
    models_all = [x for x in names if not x.startswith("reader:")]
    width = 9.5
    lab = text_in(models_all, 7.5) + 0.15
    ann = 0.75  # the "+12.3 **" text right of panels a and b
    pw = max(1.2, (width - 2 * lab - 2 * ann - 0.1) / 2)
    top_h = max(1.4, 0.3 * len(models_all) + 0.3)
    c_h = 2.6
    height = 0.55 + c_h + 0.95 + top_h + 0.4
    fig = new_figure(width, height)

    def rect(x: float, y: float, w: float, h: float) -> list[float]:
        return [x / width, y / height, w / width, h / height]

    y_top = 0.55 + c_h + 0.95
    axes = [fig.add_axes(rect(lab, y_top, pw, top_h)), fig.add_axes(rect(2 * lab + pw + ann, y_top, pw, top_h))]
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
                q, d = c["p_adj"].iloc[0], c["diff"].iloc[0]
                star = "" if not np.isfinite(q) else "***" if q < .001 else "**" if q < .01 else "*" if q < .05 else "ns"
                # a model without scorable reads on the shared cases has no difference: "n/a", never "+nan"
                label = f"{d:+.1f} {star}".strip() if np.isfinite(d) else "n/a"
                ax.annotate(label, (1.02, k), xycoords=("axes fraction", "data"), fontsize=7.5, va="center")
        ax.set_yticks(y, models, fontsize=7.5)
        ax.set_ylim(-0.6, max(len(models), 1) - 0.4)
        ax.tick_params(axis="x", labelsize=7.5)
        ax.set_xlabel(f"{metric} (%)", fontsize=8)
        ax.set_title(title, loc="left", fontsize=9)
    ax = fig.add_axes(rect(0.75, 0.55, 3.4, c_h))
    acc = m[m["metric"] == "accuracy"].set_index("model")["point"]
    cgr = m[m["metric"] == "cgr"].set_index("model")["point"]
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"]
    shapes = ["o", "s", "^", "D", "v", "P", "X"]
    k_model = 0
    for mod in acc.index:
        star = str(mod).startswith("reader:")
        if star:
            color, marker = "#d62728", "*"
        else:
            color, marker = palette[k_model % len(palette)], shapes[(k_model // len(palette)) % len(shapes)]
            k_model += 1
        ax.scatter([acc[mod]], [cgr.get(mod, np.nan)], marker=marker, s=130 if star else 36, color=color,
                   edgecolors="black", linewidths=0.5, zorder=4 if star else 3, label=str(mod))  # readers on top
    ax.set_xlabel("accuracy (%)", fontsize=8)
    ax.set_ylabel("CGR (%)", fontsize=8)
    ax.tick_params(labelsize=7.5)
    ax.set_title("c  Accuracy vs CGR (star: reader)", loc="left", fontsize=9)
    if len(acc):
        ax.legend(fontsize=7.5, loc="upper left", bbox_to_anchor=(1.03, 1.0), frameon=False,
                  ncol=max(1, math.ceil(len(acc) / 11)), borderaxespad=0.0)
    return fig


def box_validity_figure(rows: pd.DataFrame) -> Any:
    """Share of boxes rated accurate per finding with Wilson intervals (as in paper 000's Fig. 7d)."""
    from medvlm_audit.report.figures import label_lines_in, x_tick_labels

    d = rows[(rows["metric"] == "box_valid") & rows["subset"].str.startswith("finding=")]
    fig = new_figure(6.0, 3.2)
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
    ax.set_ylabel("boxes rated accurate (%)")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=7.5)
    ax.set_title("d  Box validity per finding (Wilson 95% intervals)", loc="left", fontsize=9)
    fig.subplots_adjust(bottom=0.3)
    lines = x_tick_labels(ax, np.arange(len(findings)) + 0.4 - w / 2, findings, size=7.5)
    fig.subplots_adjust(bottom=min(0.45, (label_lines_in(lines, 7.5) + 0.25) / fig.get_figheight()))
    return fig


def cgr_against_box_validity_figure(metrics: pd.DataFrame, modality: dict[str, str]) -> Any | None:
    """Per-finding CGR against box validity (as in paper 000's Fig. 7e); readers as stars, the mean of the models that see
    the image as circles (needs a box-validation and a finding-presence export of the same run)."""
    box = metrics[(metrics["metric"] == "box_valid") & metrics["subset"].str.startswith("finding=")]
    cgr = metrics[(metrics["metric"] == "cgr") & metrics["subset"].str.startswith("reader-sample:finding=")]
    if box.empty or cgr.empty:
        return None
    validity = box.assign(f=box["subset"].str[8:]).groupby("f")["point"].mean()
    cgr = cgr.assign(f=cgr["subset"].str.split("finding=").str[1])
    fig = new_figure(4.6, 3.8)
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
            ax.annotate(str(f).replace("_", " "), (v, ys[f]), fontsize=7.5, xytext=(5, 2), textcoords="offset points")
    ax.set_xlabel("boxes rated accurate (%)")
    ax.set_ylabel("CGR on the reader sample (%)")
    ax.legend(fontsize=7.5)
    ax.set_title("e  Per-finding CGR against box validity", loc="left", fontsize=9)
    fig.subplots_adjust(bottom=0.18)
    return fig


def failure_mode_figure(rows: pd.DataFrame) -> Any:
    """Failure-mode shares of each model's errors, stacked (as in paper 000's Fig. 7g)."""
    fig = new_figure(6.0, 3.0)
    ax = fig.subplots()
    models = sorted(rows["model"].unique())
    left = np.zeros(len(models))
    for mode in FAILURE_MODES:
        s = rows[rows["subset"] == f"mode={mode}"].groupby("model")["point"].mean().reindex(models).fillna(0)
        ax.barh(models, s.to_numpy(), left=left, label=mode.replace("_", " "))
        left += s.to_numpy()
    ax.set_xlabel("share of the model's errors (%)")
    ax.legend(fontsize=7.5, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.25))
    ax.set_title("g  Failure modes of model errors (radiologist review)", loc="left", fontsize=9)
    from medvlm_audit.report.figures import text_in

    lab = text_in(models, 10.0) + 0.2  # the y tick labels at the default 10 pt
    if lab > 2.2:  # widen the canvas rather than clip a long model name
        fig.set_size_inches(6.0 + lab - 2.2, fig.get_figheight())
    fig.subplots_adjust(left=lab / fig.get_figwidth(), bottom=0.38)
    return fig


# ------------------------------------------------------------------------------------------------ export


def reads_tidy(study: Study) -> pd.DataFrame:
    """Finding-presence reads in the tidy run-table shape (docs/tidy-schema.md), one row per reader x case x
    condition; ``model = reader:<name>``, ``modality = reader``."""
    if study.task != "finding-presence":
        return pd.DataFrame()
    raw = study.answer_table()
    raw = raw[raw["scale"] == "answer"]
    run_id = f"study-{hashlib.sha256(str(study.dir.resolve()).encode()).hexdigest()[:8]}"
    rows = []
    for r in raw.itertuples(index=False):
        s = json.loads(r.source)
        parsed = 1 if r.answer == "yes" else 0
        label = s.get("label")
        rows.append({
            "run_id": run_id, "probe_set": s["probe_set"], "model": f"reader:{r.reader}", "modality": "reader",
            "case_id": s["case_id"], "kind": s.get("kind") or "finding_presence", "finding": s.get("finding"),
            "label": label, "source": s.get("source"), "patient_id": s.get("patient_id"),
            "study_id": s.get("study_id"), "age": _num(s.get("age")), "sex": s.get("sex"), "view": s.get("view"),
            "split": s.get("split"), "has_box": bool(s.get("has_box")), "ibox_overlaps": bool(s.get("ibox_overlaps")),
            "condition": s["condition"], "resolution": int(s.get("resolution") or 224), "prompt_variant": "default",
            "sample_index": 0,
            "key": hashlib.sha256(f"{r.reader}\x00{r.item_id}".encode()).hexdigest(),
            "image_sha256": s.get("image_sha256"), "answer_text": "Yes" if parsed else "No", "parsed": parsed,
            "confidence": np.nan, "correct": float(parsed == int(label)) if label is not None else np.nan,
            "latency_s": _num(r.elapsed_s), "error_kind": None, "error_message": None})
    df = pd.DataFrame(rows)
    if len(df):
        df["label"] = df["label"].astype("Int64")
        df["parsed"] = df["parsed"].astype("int8")
    return df


def _num(v: Any) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return math.nan
    return f




# ------------------------------------------------------------------------------------------------ the tasks


def _sample_finding_presence(req: SampleRequest) -> list[dict[str, Any]]:
    return _items_finding_presence(req.need_run(), req.n, req.seed, req.probe_set, bool(req.options["boxed_only"]),
                                   int(req.options["resolution"]))


def _sample_box_validation(req: SampleRequest) -> list[dict[str, Any]]:
    return _items_box_validation(req.need_run(), req.n, req.seed, req.probe_set)


def _sample_failure_modes(req: SampleRequest) -> list[dict[str, Any]]:
    return _items_failure_modes(req.need_run(), req.n, req.seed, req.probe_set, req.models)


def _analyse_finding_presence(req: AnalysisRequest, out: ReaderAnalysis) -> None:
    _finding_presence(req.reads, req.run_tidy, req.B, out)


def _analyse_box_validation(req: AnalysisRequest, out: ReaderAnalysis) -> None:
    _box_validation(req.answers, req.run_tidy, req.B, out)


def _analyse_failure_modes(req: AnalysisRequest, out: ReaderAnalysis) -> None:
    _failure_modes(req.answers, out)


def _finish_box_validation(out: ReaderAnalysis) -> None:
    """With a finding-presence export of the same run: per-finding CGR against box validity."""
    fig_e = cgr_against_box_validity_figure(out.metrics, out.summary.get("modality", {}))
    if fig_e is not None:
        out.figures["box-vs-cgr"] = fig_e
        out.figure_titles["box-vs-cgr"] = "Per-finding CGR against box validity"


def _export_reads(study: Any) -> list[tuple[str, bytes]]:
    """reads.csv / reads.parquet: the reads in the run's tidy shape (model = reader:<name>)."""
    from medvlm_audit.atomic import csv_bytes, parquet_bytes

    reads = reads_tidy(study)
    return [("reads.csv", csv_bytes(reads)), ("reads.parquet", parquet_bytes(reads))] if len(reads) else []


FINDING_PRESENCE = ReaderTask(
    TaskSpec("finding-presence", "Finding presence",
             "Answer whether the finding is present in the radiograph. Parts of some images may be blacked out; "
             "answer from what you see.",
             (Scale("answer", "", YES_NO),)),
    sample=_sample_finding_presence, analyse=_analyse_finding_presence, export=_export_reads,
    answer_fields=("finding",),
    #: boxed_only: sample only cases with a target box; resolution: image size shown (224 = the models' pixels)
    options={"boxed_only": False, "resolution": 224},
    n_means="cases (a boxed case gives three items: original, target mask, irrelevant mask)")
BOX_VALIDATION = ReaderTask(
    TaskSpec("box-validation", "Region validation",
             "Rate whether the marked region contains the visual evidence for the named finding.",
             (Scale("answer", "", numbered([("accurate", "Accurate"), ("partial", "Partial"),
                                            ("inaccurate", "Inaccurate"), ("not_assessable", "Not assessable")]),
                    ordinal=False),)),
    sample=_sample_box_validation, analyse=_analyse_box_validation, finish=_finish_box_validation,
    answer_fields=("finding",), n_means="boxes per finding")
FAILURE_MODE_TASK = ReaderTask(
    TaskSpec("failure-modes", "Error review",
             "A system answered this question wrongly. Classify the error.",
             (Scale("answer", "", numbered([("ambiguous_case", "Ambiguous case"),
                                            ("poor_image_quality", "Poor image quality"),
                                            ("plausible_confounder", "Plausible image confounder"),
                                            ("clear_model_failure", "Clear model failure"), ("other", "Other")])),)),
    sample=_sample_failure_modes, analyse=_analyse_failure_modes, answer_fields=("finding",),
    n_means="errors per model (--model: whose; default every model that sees the image)")

#: grounding's reader tasks (``GroundingSuite.reader_tasks()``)
READER_TASKS: tuple[ReaderTask, ...] = (FINDING_PRESENCE, BOX_VALIDATION, FAILURE_MODE_TASK)
