"""Glue between a run config / run store and the stress suite: plan from a config, report from a store.

``probe_sets`` entries of a stress config are item files (``.jsonl`` / ``.csv``), folders holding an
``items.jsonl``, ``<benchmark>:<folder>`` for a local benchmark copy (``vqa-rad``, ``slake``, ``pmc-vqa``,
``omnimedvqa``), or ``phantom`` for the embedded phantom MCQ set (built into ``<run_dir>/phantom_mcq``).
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from medvlm_audit.atomic import csv_bytes, parquet_bytes, write_folder_atomic
from medvlm_audit.errors import ConfigError
from medvlm_audit.report.sections import Section, figure_to_html, table_to_html
from medvlm_audit.suites.base import Plan
from medvlm_audit.suites.stress.analysis import (
    EXCLUSION_COLUMNS,
    StressAnalysis,
    analyse_stress,
    exclusion_summary,
    score_stress,
)
from medvlm_audit.suites.stress.conditions import CONDITIONS, DEFAULT_CONDITIONS, StressOptions
from medvlm_audit.suites.stress.conditions import plan_stress as _plan_items
from medvlm_audit.suites.stress.items import ItemSet, load_items
from medvlm_audit.suites.stress.loaders import LOADERS, load_benchmark, merge_item_sets


def load_item_source(spec: str, *, run_dir: str | Path = ".", seed: int = 42) -> ItemSet:
    """One ``probe_sets`` entry -> an ItemSet (see the module docstring for the forms)."""
    if spec == "phantom":
        from medvlm_audit.suites.stress.phantom_mcq import build_phantom_mcq

        out = Path(run_dir) / "phantom_mcq"
        if (out / "items.jsonl").exists():
            return load_items(out / "items.jsonl")
        return build_phantom_mcq(out, seed=seed)
    name, sep, rest = spec.partition(":")
    if sep and name.lower().replace("_", "-") in LOADERS:
        return load_benchmark(name, rest)
    p = Path(spec)
    if p.is_dir():
        p = p / "items.jsonl"
    return load_items(p)


_GROUNDING_DEFAULT = {"original", "swap", "target_mask", "irrelevant_mask", "no_image"}


def plan_stress(cfg: Any) -> Plan:
    """Plan a stress run from a RunConfig (conditions default to all T1-T6 conditions)."""
    conds = list(getattr(cfg, "conditions", []) or [])
    if not conds or set(conds) == _GROUNDING_DEFAULT:
        conds = list(DEFAULT_CONDITIONS)  # the config's default is the grounding list
    unknown = [c for c in conds if c not in CONDITIONS]
    if unknown:
        raise ConfigError(f"unknown stress condition(s) {unknown}; known: {list(CONDITIONS)}")
    sets = [load_item_source(s, run_dir=cfg.run_dir, seed=cfg.seed) for s in cfg.probe_sets]
    items = sets[0] if len(sets) == 1 else merge_item_sets(sets)
    opts = StressOptions(conditions=tuple(conds), repeats=int(cfg.repeats), seed=int(cfg.seed))
    return _plan_items(items, opts)


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


def stress_sections(res: StressAnalysis, *, run_info: dict[str, Any] | None = None, fmt: str = "svg"
                    ) -> list[Section]:
    """The stress report as report :class:`~medvlm_audit.report.Section` blocks (figures and tables built with
    the report module's helpers), so any report can carry them as ``extra_sections``."""
    meta = res.meta
    intro = ("<p>Accuracy counts a refusal as a wrong answer and leaves unparsed answers out (their rates are "
             f"shown; every left-out trial is in <code>exclusions.csv</code>). Intervals: item bootstrap "
             f"(B = {meta.get('B')}, seed {meta.get('seed')}; an item's repeats stay together). Changes are paired "
             "on the same items; q: Benjamini-Hochberg over each model's family (all its T-changes and chance "
             "tests).</p>")
    secs = [
        Section("Stress tests (T1-T6)", intro + figure_to_html(accuracy_by_condition_figure(res), fmt=fmt)
                + _table_html(res.accuracy, ["model", "condition", "n_items", "n_trials", "accuracy", "ci_low",
                                             "ci_high", "refusal_rate", "unparsed_rate", "chance"])),
        Section("Paired changes", _table_html(res.changes, ["model", "test", "comparison", "n_items", "acc_base",
                                                            "acc_perturbed", "diff", "ci_low", "ci_high", "p",
                                                            "q"])),
        Section("Accuracy against chance without the image (T2)",
                "<p>Items are the unit: each item's modal answer over its repeats (ties broken by a seeded draw "
                "that does not look at the gold), exact one-sided binomial test on the items right "
                "(Poisson-binomial when items have different numbers of options).</p>"
                + _table_html(res.chance, ["model", "condition", "n", "correct", "accuracy", "accuracy_trials",
                                           "chance", "p", "q"])),
        Section("Distractor replacement (T4)", figure_to_html(distractor_curve_figure(res), fmt=fmt)
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
    if run_info:
        secs.append(Section("Run", f"<pre>{html.escape(json.dumps(run_info, indent=1, default=str))}</pre>"))
    return secs


def stress_html(res: StressAnalysis, *, title: str, run_info: dict[str, Any] | None = None, fmt: str = "svg"
                ) -> str:
    """A self-contained HTML page (figures inlined): the title, a table of contents and the stress sections."""
    secs = stress_sections(res, run_info=run_info, fmt=fmt)
    nav = "".join(f'<a href="#{html.escape(s.anchor)}">{html.escape(s.title)}</a> ' for s in secs)
    body = "".join(f'<section id="{html.escape(s.anchor)}"><h2>{html.escape(s.title)}</h2>{s.html}</section>'
                   for s in secs)
    style = ("body{font-family:sans-serif;max-width:1100px;margin:auto}table{border-collapse:collapse;font-size:12px}"
             "td,th{border:1px solid #ccc;padding:2px 6px}img,svg{max-width:100%}nav a{margin-right:8px}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body><h1>{html.escape(title)}</h1><nav>{nav}</nav>{body}</body></html>")


def write_stress_report(res: StressAnalysis, out_dir: str | Path, *, title: str = "Stress audit",
                        run_info: dict[str, Any] | None = None) -> Path:
    """report.html, one Parquet + CSV per table, exclusions.csv, summary.json (all written atomically)."""
    out = Path(out_dir)
    payloads: list[tuple[str, bytes]] = []
    for name, df in res.frames().items():
        d = df.copy()
        for c in d.columns:
            if d[c].dtype == object:
                d[c] = d[c].map(lambda v: v if v is None or isinstance(v, str | int | float | bool) else str(v))
        payloads += [(f"{name}.parquet", parquet_bytes(d)), (f"{name}.csv", csv_bytes(d))]
    payloads.append(("exclusions.csv", csv_bytes(res.exclusions[list(EXCLUSION_COLUMNS)])))
    payloads.append(("summary.json", json.dumps(res.summary(), indent=1, default=str).encode()))
    payloads.append(("report.html", stress_html(res, title=title, run_info=run_info).encode()))
    write_folder_atomic(out, payloads)  # the whole folder swapped in at once: never old and new mixed
    return out / "report.html"


#: columns of the exported stress table (one row per model x item x condition x repeat)
TIDY_COLUMNS: tuple[str, ...] = (
    "run_id", "probe_set", "model", "modality", "item_id", "benchmark", "condition", "test", "sample_index",
    "key", "image_sha256", "n_options", "gold", "options", "required", "needs_image", "with_image",
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


def report_stress(store: Any, out_dir: str | Path, *, run_info: dict[str, Any] | None = None,
                  B: int = 10_000) -> Path:
    """Score and analyse a stress run store and write its report (called by ``medvlm-audit report``)."""
    scored = tidy_stress(store)
    res = analyse_stress(scored, B=B, seed=0, plan_skips=plan_skips(store))
    title = f"Stress audit: {(run_info or {}).get('run_id', Path(out_dir).parent.name)}"
    return write_stress_report(res, out_dir, title=title, run_info=run_info)
