"""The stress suite's tidy table, analysis result and report sections (figures and tables) for the one report
writer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from medvlm_audit.report.sections import Section, figure_to_html, table_to_html
from medvlm_audit.suites.base import SuiteResult
from medvlm_audit.suites.stress.analysis import (
    EXCLUSION_COLUMNS,
    StressAnalysis,
    analyse_stress,
    exclusion_summary,
    score_stress,
)
from medvlm_audit.suites.stress.conditions import CONDITIONS

# ------------------------------------------------------------------------------------------------ report


def accuracy_by_condition_figure(res: StressAnalysis) -> Any:
    """Bars: accuracy per condition and model with 95% intervals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    acc = res.accuracy
    conds = [c for c in CONDITIONS if c in set(acc["condition"])]
    models = sorted(acc["model"].unique())
    fig, ax = plt.subplots(figsize=(max(6, 0.55 * len(conds) * max(1, len(models)) / 2), 3.4))
    w = 0.8 / max(1, len(models))
    x = np.arange(len(conds))
    for j, m in enumerate(models):
        g = acc[acc["model"] == m].set_index("condition").reindex(conds)
        y = g["accuracy"].to_numpy(dtype=float)
        err = np.vstack([y - g["ci_low"].to_numpy(dtype=float), g["ci_high"].to_numpy(dtype=float) - y])
        ax.bar(x + (j - (len(models) - 1) / 2) * w, y, w, yerr=np.nan_to_num(err), label=m, capsize=2)
    ax.set_xticks(x, conds, rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("accuracy")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=7, ncols=len(models), loc="upper center", bbox_to_anchor=(0.5, -0.45))
    ax.set_title("Accuracy by condition (95% item-bootstrap intervals; T2-T4 conditions on the required items, "
                 "substitution on its items)", fontsize=8)
    return fig


def distractor_curve_figure(res: StressAnalysis) -> Any:
    """Lines: accuracy at Base, UNK, 1R-4R, text-only and image+text, per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cur = res.curve
    levels = ["Base", "UNK", "1R", "2R", "3R", "4R"]
    fig, axes = plt.subplots(1, 2, figsize=(8, 3), sharey=True)
    for ax, modality in zip(axes, ("text-only", "image+text"), strict=True):
        for m, g in cur[cur["modality"] == modality].groupby("model"):
            g = g.set_index("level").reindex(levels)
            ax.plot(levels, g["accuracy"], marker="o", label=m)
            ax.fill_between(levels, g["ci_low"].astype(float), g["ci_high"].astype(float), alpha=0.15)
        ax.set_title(modality, fontsize=9)
        ax.set_ylim(0, 1.05)
    axes[0].set_ylabel("accuracy (required items)")
    axes[1].legend(fontsize=7)
    fig.suptitle("Distractor replacement (T4)", fontsize=9)
    return fig


def robustness_figure(res: StressAnalysis) -> Any:
    """Bars: R1-R5 and the mean per model with intervals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rob = res.robustness
    comps = ["R1", "R2", "R3", "R4", "R5", "mean"]
    models = sorted(rob["model"].unique())
    fig, ax = plt.subplots(figsize=(7, 3))
    w = 0.8 / max(1, len(models))
    x = np.arange(len(comps))
    for j, m in enumerate(models):
        g = rob[rob["model"] == m].set_index("component").reindex(comps)
        y = g["value"].to_numpy(dtype=float)
        err = np.vstack([y - g["ci_low"].to_numpy(dtype=float), g["ci_high"].to_numpy(dtype=float) - y])
        ax.bar(x + (j - (len(models) - 1) / 2) * w, y, w, yerr=np.nan_to_num(np.abs(err)), label=m, capsize=2)
    ax.set_xticks(x, comps)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("robustness")
    ax.legend(fontsize=7)
    ax.set_title("Robustness score R1-R5 and mean (paper 003, Appendix A)", fontsize=9)
    return fig


def _table_html(df: pd.DataFrame, cols: list[str], **kw: Any) -> str:
    return table_to_html(df[[c for c in cols if c in df.columns]], **kw)


def _robustness_overview(rob: pd.DataFrame) -> pd.DataFrame:
    """Model x component (R1-R5, mean, mean_available) as 'value [ci_low, ci_high]'."""
    comps = ["R1", "R2", "R3", "R4", "R5", "mean", "mean_available"]
    r = rob[rob["component"].isin(comps)].copy()

    def cell(x: pd.Series) -> str:
        if pd.isna(x["value"]):
            return "not estimable"
        ci = "" if pd.isna(x["ci_low"]) else f" [{x['ci_low']:.3f}, {x['ci_high']:.3f}]"
        return f"{x['value']:.3f}{ci}"

    r["cell"] = r.apply(cell, axis=1)
    out = r.pivot(index="model", columns="component", values="cell").reindex(columns=comps)
    return out.reset_index()


#: the chance table's columns as the report labels them
CHANCE_LABELS = {
    "model": "model", "condition": "condition", "n_items": "items", "correct_items": "items right (modal answer)",
    "accuracy_modal_items": "modal accuracy (items; tested)", "n_trials": "trials",
    "correct_trials": "trials right", "accuracy_trials": "trial accuracy", "chance": "chance", "p": "p", "q": "q",
}


def _chance_table_html(chance: pd.DataFrame) -> str:
    cols = [c for c in CHANCE_LABELS if c in chance.columns]
    return table_to_html(chance[cols].rename(columns=CHANCE_LABELS))


def _t4_variant_html(res: StressAnalysis) -> str:
    """Which T4 variant the replaced:k conditions (and so F4) used, in words."""
    from html import escape

    from medvlm_audit.suites.stress.analysis import T4_VARIANT_TEXT

    v = str(res.meta.get("t4_variant") or "not recorded")
    what = T4_VARIANT_TEXT.get(v, "")
    return (f"<p>T4 variant used by the replaced:k conditions and F4: <b>{escape(v)}</b>"
            + (f" ({escape(what)})" if what else "") + ". The 'Unknown' distractor is replaced in place in both "
            "variants (run option <code>t4_variant</code>: <code>replace_then_reorder</code> or "
            "<code>in_place</code>).</p>")


def stress_sections(res: StressAnalysis, *, fmt: str = "svg") -> list[Section]:
    """The stress report as report :class:`~medvlm_audit.report.Section` blocks (figures and tables built with
    the report module's helpers), so any report can carry them as ``extra_sections``."""
    meta = res.meta
    intro = ("<p>Accuracy is over all items, as in the paper: refusals, abstentions (\"Unknown\", \"N/A\", "
             "...) and unparsed answers count as wrong (their rates are shown); the parsed-only accuracy, over "
             "trials that chose an option, is beside it. Calls without a response are left out (every such "
             f"trial and every unparsed answer is in <code>exclusions.csv</code>). Intervals: item bootstrap "
             f"(B = {meta.get('B')}, seed {meta.get('seed')}; an item's repeats stay together). Changes are paired "
             "on the same items; q: Benjamini-Hochberg over each model's family (all its T-changes and chance "
             "tests).</p>")
    secs = [
        Section("Stress tests (T1-T6)", intro + figure_to_html(accuracy_by_condition_figure(res), fmt=fmt)
                + _table_html(res.accuracy, ["model", "condition", "n_items", "n_trials", "accuracy", "ci_low",
                                             "ci_high", "accuracy_parsed", "refusal_rate", "abstain_rate",
                                             "unparsed_rate", "chance"])),
        Section("Paired changes", _table_html(res.changes, ["model", "test", "comparison", "n_items", "acc_base",
                                                            "acc_perturbed", "diff", "ci_low", "ci_high", "p",
                                                            "q"])),
        Section("Accuracy against chance without the image (T2)",
                "<p>Two accuracies, each labelled. <b>Modal accuracy (items)</b>, the one tested: items are the "
                "unit, each item's modal answer over its repeats (ties broken by a seeded draw that does not look "
                "at the gold), exact one-sided binomial test on the items right (Poisson-binomial when items have "
                "different numbers of options). <b>Trial accuracy</b>: the mean over every scored trial, the "
                "accuracy the other tables print. With one repeat per item the two are equal.</p>"
                + _chance_table_html(res.chance)),
        Section("Distractor replacement (T4)", _t4_variant_html(res) + figure_to_html(distractor_curve_figure(res), fmt=fmt)
                + _table_html(res.curve, ["model", "modality", "level", "accuracy", "ci_low", "ci_high", "n_items",
                                          "note"])),
        Section("Robustness score", figure_to_html(robustness_figure(res), fmt=fmt)
                + "<p>R1-R5 and their mean as in the authors' code; each F-term's two accuracies on the items "
                  "that have both conditions (n and notes below). <code>mean_available</code> averages the "
                  "estimable components when the mean is not estimable.</p>"
                + table_to_html(_robustness_overview(res.robustness))
                + _table_html(res.robustness[res.robustness["component"].str.startswith("F")],
                              ["model", "component", "value", "ci_low", "ci_high", "n_items", "note"])),
        Section("Accuracy per benchmark", _table_html(res.accuracy_by_benchmark, [
            "model", "benchmark", "condition", "n_items", "accuracy", "ci_low", "ci_high"])),
    ]
    if "n_models_text_solvable" in res.items.columns:
        top = (res.items.drop_duplicates("item_id").sort_values("n_models_text_solvable", ascending=False)
               .head(20))
        secs.append(Section("Items answered without the image",
                            "<p>Likely text-solvable or memorised (the 20 items most models answer correctly "
                            "without the image).</p>" + _table_html(top, ["item_id", "benchmark",
                                                                           "n_models_text_solvable"])))
    ex = exclusion_summary(res.exclusions)
    body = (f"<p>{len(res.exclusions)} exclusion(s), one row each in <code>exclusions.csv</code> (item, "
            "condition, reason): items or conditions left out at loading or planning, and trials left out of "
            "accuracy (unparsed answers, calls without a response).</p>")
    secs.append(Section("Exclusions", body + (_table_html(ex, list(ex.columns), max_rows=50) if len(ex) else "")))
    return secs


#: columns of the exported stress table (one row per model x item x condition x repeat)
TIDY_COLUMNS: tuple[str, ...] = (
    "run_id", "probe_set", "model", "modality", "item_id", "benchmark", "condition", "test", "sample_index",
    "key", "image_sha256", "n_options", "gold", "options", "required", "needs_image", "with_image", "t4_variant",
    "answer_text", "status", "parsed", "via", "correct", "latency_s", "error_kind", "error_message",
)


def tidy_stress(store: Any) -> pd.DataFrame:
    """The scored stress table of a run store (errored calls score as ``no_response``; not-asked rows dropped)."""
    from medvlm_audit.export import raw_table

    raw = raw_table(store)
    raw = raw[raw["error_kind"].isna() | (raw["error_kind"] != "not_asked")].copy()
    raw.loc[raw["error_kind"].notna(), "answer_text"] = None
    scored = score_stress(raw)
    for c in TIDY_COLUMNS:
        if c not in scored.columns:
            scored[c] = None
    out = scored[list(TIDY_COLUMNS)].reset_index(drop=True)
    out["options"] = [json.dumps(list(o), ensure_ascii=False) for o in out["options"]]
    return out


def plan_skips(store: Any) -> pd.DataFrame:
    """The run's planning exclusions (probe_set, case_id, condition, reason) from the store's skipped table."""
    return store.frame("SELECT probe_set, case_id, condition, reason FROM skipped ORDER BY probe_set, case_id, "
                       "condition")


def metrics_long(res: StressAnalysis, probe_set: str) -> pd.DataFrame:
    """Accuracy per model x condition and R1-R5 / mean per model in the shared long metrics schema."""
    acc = res.accuracy
    rows = [{"probe_set": probe_set, "model": r["model"], "metric": "accuracy", "subset": r["condition"],
             "point": r["accuracy"], "se": r.get("se"), "ci_low": r["ci_low"], "ci_high": r["ci_high"],
             "n": r["n_items"], "unit": "fraction", "method": "item bootstrap (percentile)", "note": ""}
            for r in acc.to_dict("records")]
    for r in res.robustness.to_dict("records"):
        rows.append({"probe_set": probe_set, "model": r["model"], "metric": "robustness", "subset": r["component"],
                     "point": r["value"], "se": None, "ci_low": r["ci_low"], "ci_high": r["ci_high"],
                     "n": r["n_items"], "unit": "fraction", "method": "item bootstrap (percentile)",
                     "note": r.get("note") or ""})
    return pd.DataFrame(rows)


def comparisons_long(res: StressAnalysis, probe_set: str) -> pd.DataFrame:
    """The paired T-changes in the shared comparisons schema (family: the model's T-tests; p_adj: BH q)."""
    ch = res.changes
    return pd.DataFrame({
        "family": "stress:" + ch["model"].astype(str), "probe_set": probe_set, "metric": "accuracy",
        "subset": ch["test"].astype(str) + ":" + ch["perturbed"].astype(str), "model_a": ch["model"],
        "model_b": ch["model"], "diff": ch["diff"], "sd": ch["sd"], "ci_low": ch["ci_low"],
        "ci_high": ch["ci_high"], "p": ch["p"], "p_adj": ch["q"], "n": ch["n_items"],
        "test": "paired item bootstrap", "note": ch["comparison"],
    })


def stress_result(res: StressAnalysis, probe_set: str = "stress", *, fmt: str = "svg") -> SuiteResult:
    """A stress analysis as the suite result the report writer renders."""
    tables = dict(res.frames())
    tables["exclusions"] = res.exclusions[list(EXCLUSION_COLUMNS)]
    return SuiteResult(metrics=metrics_long(res, probe_set), comparisons=comparisons_long(res, probe_set),
                       sections=stress_sections(res, fmt=fmt), summary=res.summary(), tables=tables)


def report_stress(store: Any, out_dir: str | Path, *, run_info: dict[str, Any] | None = None,
                  B: int = 10_000) -> Path:
    """Score and analyse a stress run store and write its report (what ``medvlm-audit report`` does for a
    stress run, through the one report writer)."""
    from medvlm_audit.report import write_report

    scored = tidy_stress(store)
    res = analyse_stress(scored, B=B, seed=0, plan_skips=plan_skips(store))
    title = f"Stress audit: {(run_info or {}).get('run_id', Path(out_dir).parent.name)}"
    probe_set = ",".join(sorted(scored["probe_set"].dropna().astype(str).unique())) or "stress"
    return write_report(stress_result(res, probe_set), out_dir, suite="stress", title=title, run_info=run_info,
                        parquet_tables=True)
