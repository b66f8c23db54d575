"""The grounding report's sections: verdicts with category badges, figures, key metrics, categories, comparisons,
threshold sweep, robustness and every metric row, as :class:`~medvlm_audit.report.sections.Section` blocks for
the one report page."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import pandas as pd

from medvlm_audit.report.html import (
    _format_n,
    escape,
    figure_to_html,
    format_estimate,
    format_number,
    format_p,
    is_missing,
    table_to_html,
)
from medvlm_audit.report.html import badge as _badge
from medvlm_audit.report.sections import Section, compact_table_html
from medvlm_audit.suites.grounding.categories import CATEGORY_COLORS, CATEGORY_LABELS

#: columns of categories.csv, in this order
CATEGORIES_COLUMNS = ("probe_set", "model", "modality", "category", "support", "reason", "cgr", "cgr_low", "cgr_high", "n_cgr",
                      "uar", "uar_low", "uar_high", "n_uar", "is_", "is_low", "is_high", "n_is", "accuracy",
                      "acc_low", "acc_high", "n_acc", "gsp")

#: the headline metrics of the key-metrics table, in display order.
KEY_METRICS: tuple[tuple[str, str], ...] = (
    ("accuracy", "Accuracy"),
    ("sensitivity", "Sensitivity"),
    ("specificity", "Specificity"),
    ("parse_rate", "Parse rate"),
    ("cgr", "CGR"),
    ("uar", "UAR"),
    ("is", "IS"),
    ("gsp", "GSP"),
    ("auroc", "AUROC"),
    ("ece", "ECE"),
)



#: the key-metrics table in three narrow tables: (caption, metric labels)
KEY_METRIC_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Answers", ("modality", "Accuracy", "Sensitivity", "Specificity", "Parse rate")),
    ("Grounding", ("CGR", "UAR", "IS", "GSP")),
    ("Calibration", ("AUROC", "ECE")),
)


def badge(category: object) -> str:
    """A coloured category badge (trusted markup)."""
    return _badge(category, CATEGORY_COLORS, CATEGORY_LABELS)


#: the grounding report's "how to read this" paragraph (shown under the verdicts)
INTRO = (
    "<p>Each model gets one category from three image edits of the same question. <b>CGR</b> (causal grounding "
    "rate): of the answers that were correct on the original image, the share that flip when the finding's own "
    "region is masked; <b>IS</b> (irrelevant-mask stability): the share that stay put when a region of the same "
    "size elsewhere is masked; <b>UAR</b> (unrelated-image answer rate): the share that stay put when the image "
    "is swapped for another patient's. Every category reads the 95% intervals, never a point alone. "
    "<b>Uses image</b>: CGR's interval excludes 0 and IS's interval lies above 70, with IS at least 90; "
    "<b>ignores image</b>: CGR 0, UAR 100 and IS 100 on at least 100 cases each; <b>unstable</b>: IS's interval "
    "lies below 70, so flips under the finding's mask are not evidence of grounding; anything else is "
    "<b>indeterminate</b>, with the reason (e.g. too few cases to call it); <b>not assessable</b>: fewer than half "
    "of the original-image answers parsed. Beside each category, its <b>support</b>: the share of 1,000 "
    "case-resampling draws (every rate and interval recomputed) that give the same category; a support near 50% "
    "means the call was close.</p><p>Rates are percentages with one decimal, followed by their 95% "
    "interval in brackets and the number of cases n they rest on; differences are in percentage points (pp). "
    "A model's category never depends on its accuracy. The figures follow, then every table (all are also in the "
    "CSV files beside this page).</p>"
)


#: one number format per robustness column: rates in percent with one decimal, rho and p with three
_ROBUSTNESS_FORMAT = {
    **{c: (lambda v: format_number(v, "%")) for c in ("point", "ci_low", "ci_high", "parse_rate", "reference_point")},
    "rho": lambda v: format_number(v, "prob"),
    "p": format_p,
}


def _verdicts_html(analysis: Any, designed: Mapping[str, str] | None = None) -> str:
    cats = analysis.categories
    designed = dict(designed or {})
    items: list[str] = []
    from medvlm_audit.suites.grounding.figures import model_order, probe_sets_of

    multi = len(probe_sets_of(analysis)) > 1
    matches: list[tuple[str, str, list[str]]] = []
    for model in model_order(analysis):
        rows = cats[cats["model"] == model] if len(cats) else cats
        badges = []
        observed = []
        for _, row in rows.iterrows():
            b = badge(row["category"])
            sup = row.get("support")
            if sup is not None and not is_missing(sup):
                b = f'{b}<span class="muted">support {100 * float(sup):.0f}%</span> '
            observed.append(str(row["category"]))
            if multi:
                b = f'{b}<span class="muted">({escape(row["probe_set"])})</span> '
            badges.append(b)
        if not badges:
            badges.append(badge("indeterminate"))
        verdict = (analysis.verdicts or {}).get(model)
        text = escape(verdict) if verdict and not is_missing(verdict) else "no verdict recorded"
        des = ""
        if model in designed:
            matches.append((model, designed[model], observed))
            des = f'<div class="designed">designed as {badge(designed[model])}</div>'
        items.append(f'<li><span class="model">{escape(model)}</span>{"".join(badges)} {text}{des}</li>')
    head = ""
    if matches:
        rows_html = "".join(
            f"<tr><td>{escape(m)}</td><td>{badge(d)}</td><td>{''.join(badge(o) for o in obs) or badge('indeterminate')}"
            f"</td><td>{'yes' if obs and all(o == d for o in obs) else 'no'}</td></tr>"
            for m, d, obs in matches)
        head = ('<p class="muted">Reference models with a designed behaviour: the category each was built to land '
                "in (recorded by the model in the run store) beside the one this run observed.</p>"
                '<div class="tblwrap"><table class="tbl" id="designed"><thead><tr><th>model</th><th>designed</th>'
                f"<th>observed</th><th>as designed</th></tr></thead><tbody>{rows_html}</tbody></table></div>")
    return f'<ul class="verdicts">{"".join(items)}</ul>{head}'


def _est_from_row(row: Mapping[str, Any]) -> str:
    return format_estimate(row.get("point"), row.get("se"), row.get("ci_low"), row.get("ci_high"),
                           row.get("n"), str(row.get("unit") or "%"), row.get("note", ""))


def key_metrics_table(metrics: pd.DataFrame, probe_set: str, models: Sequence[str]) -> pd.DataFrame:
    """Wide table of the headline metrics (subset 'all') for one probe set: one row per model, formatted."""
    m = metrics[(metrics["probe_set"] == probe_set) & (metrics["subset"] == "all")]
    present = [(k, lab) for k, lab in KEY_METRICS if (m["metric"] == k).any()]
    rows = []
    for model in models:
        mm = m[m["model"] == model]
        if mm.empty:
            continue
        rec: dict[str, str] = {"model": model, "modality": str(mm["modality"].iloc[0])}
        for key, label in present:
            hit = mm[mm["metric"] == key]
            rec[label] = _est_from_row(hit.iloc[0].to_dict()) if len(hit) else "not computed"
        rows.append(rec)
    return pd.DataFrame(rows, columns=["model", "modality", *[lab for _, lab in present]])


def metrics_long_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """All metric rows (one per model x metric x subset) with the estimate formatted; same row count as the CSV."""
    est = [_est_from_row(r) for r in metrics.to_dict("records")]
    return pd.DataFrame({
        "probe_set": metrics["probe_set"].to_numpy(),
        "model": metrics["model"].to_numpy(),
        "metric": metrics["metric"].to_numpy(),
        "subset": metrics["subset"].to_numpy(),
        "estimate": est,
        "unit": metrics["unit"].to_numpy(),
        "method": metrics["method"].to_numpy(),
        "note": metrics["note"].to_numpy(),
    })


def categories_table(categories: pd.DataFrame) -> pd.DataFrame:
    """Categories with their reasons and the CGR / UAR / IS / accuracy / GSP each rests on, formatted."""
    rows = []
    for r in categories.to_dict("records"):
        rows.append({
            "probe_set": r["probe_set"],
            "model": r["model"],
            "modality": r["modality"],
            "category": r["category"],
            "support": (f"{100 * float(r['support']):.0f}%" if not is_missing(r.get("support")) else "n/a"),
            "reason": r["reason"] if not is_missing(r["reason"]) else "no reason recorded",
            "CGR": format_estimate(r["cgr"], None, r["cgr_low"], r["cgr_high"], r["n_cgr"]),
            "UAR": format_estimate(r["uar"], None, r["uar_low"], r["uar_high"], r["n_uar"]),
            "IS": format_estimate(r["is_"], None, r["is_low"], r["is_high"], r["n_is"]),
            "accuracy": format_estimate(r["accuracy"], None, r["acc_low"], r["acc_high"], r["n_acc"]),
            "GSP (pp)": format_number(r["gsp"], "pp") if not is_missing(r["gsp"]) else "not estimable",
        })
    cols = ["probe_set", "model", "modality", "category", "support", "reason", "CGR", "UAR", "IS", "accuracy", "GSP (pp)"]
    return pd.DataFrame(rows, columns=cols)


def comparisons_table(comparisons: pd.DataFrame) -> pd.DataFrame:
    """Paired comparisons with family, difference (pp for rates) and raw and BH-adjusted p, formatted."""
    rows = []
    for r in comparisons.to_dict("records"):
        diff = r["diff"]
        if is_missing(diff):
            d = str(r["note"]).strip() if not is_missing(r["note"]) and str(r["note"]).strip() else "not estimable"
        else:
            d = format_estimate(diff, r["sd"], r["ci_low"], r["ci_high"], None, "pp")
        rows.append({
            "family": r["family"], "metric": r["metric"], "subset": r["subset"],
            "model_a": r["model_a"], "model_b": r["model_b"], "difference": d,
            "p": format_p(r["p"]), "p_adj (BH)": format_p(r["p_adj"]),
            "n": _format_n(r["n"]) if not is_missing(r["n"]) else "0", "test": r["test"],
            "note": "" if is_missing(r["note"]) else r["note"],
        })
    cols = ["family", "metric", "subset", "model_a", "model_b", "difference", "p", "p_adj (BH)", "n", "test", "note"]
    return pd.DataFrame(rows, columns=cols)






def _slow_figures() -> tuple[Any, ...]:
    """The figure functions that take longest to draw (several panels; the subgroup figure's nine take ~30% of a
    paper-sized report's figure time): handed to the worker processes first."""
    from medvlm_audit.suites.grounding import figures as F

    return (F.subgroup_figure, F.accuracy_figure, F.calibration_figure, F.finding_heatmap_figure)


def _given(fig: Any) -> Any:
    return fig


def _figure_html(number: int, build: Callable[[], Any], fmt: str) -> str:
    from medvlm_audit.suites.grounding.figures import figure_title

    fig = build()
    return figure_to_html(fig, number=number, title=figure_title(fig), fmt=fmt)


def grounding_sections(analysis: Any, *, figures: Sequence[Any] | None = None, fmt: str = "svg",
                       designed: Mapping[str, str] | None = None,
                       figure_workers: int | None = None) -> list[Section]:
    """Verdicts, Figures and Tables of a GroundingAnalysis (figures built from the analysis if not given).

    The figures are built and drawn in ``figure_workers`` forked processes (None: one per CPU, at most
    ``report.parallel.MAX_WORKERS``; 1: in this process) while this process renders the tables."""
    from medvlm_audit.report.parallel import map_forked
    from medvlm_audit.suites.grounding.figures import (
        family_words,
        figure_builders,
        model_order,
        probe_sets_of,
    )

    models = model_order(analysis)
    probe_sets = probe_sets_of(analysis)
    builders = figure_builders(analysis) if figures is None else [partial(_given, f) for f in figures]
    slow = [k for k, b in enumerate(builders) if getattr(b, "func", None) in _slow_figures()]
    waiting = map_forked([partial(_figure_html, i, b, fmt) for i, b in enumerate(builders, 1)],
                         workers=figure_workers, first=slow)
    tables: list[str] = []
    met = analysis.metrics
    for ps in probe_sets:
        km = key_metrics_table(met, ps, models)
        if len(km):
            tables.append(f"<h3>Key metrics — {escape(ps)}</h3>")
            tables.append(compact_table_html(km, keys=("model",), groups=KEY_METRIC_GROUPS, drop_constant=False,
                                             table_id=f"key-metrics-{ps}"))
    if len(analysis.categories):
        tables.append("<h3>Categories and their reasons</h3>")
        ct = categories_table(analysis.categories)
        ct["category"] = [badge(c) for c in ct["category"]]
        tables.append(compact_table_html(
            ct, keys=("model",), html_columns=["category"], table_id="categories",
            groups=(("Category and reason", ("modality", "category", "support", "reason", "GSP (pp)")),
                    ("The rates each category rests on", ("CGR", "UAR", "IS", "accuracy")))))
    tables.append("<h3>Paired comparisons and tests</h3>")
    if len(analysis.comparisons):
        tables.append('<p class="muted">Differences in percentage points for rates; p_adj is Benjamini–Hochberg '
                      "within each family (one table per family).</p>")
        ct = comparisons_table(analysis.comparisons)
        for k, fam in enumerate(dict.fromkeys(ct["family"].astype(str))):
            sub = ct[ct["family"].astype(str) == fam].drop(columns="family")
            tables.append(compact_table_html(sub, keys=("model_a", "model_b"), max_columns=10,
                                             caption=family_words(fam), table_id="comparisons" if k == 0 else None))
    else:
        tables.append('<p class="muted">No comparisons were computed for this run.</p>')
    sweep = analysis.threshold_sweep
    if isinstance(sweep, pd.DataFrame) and len(sweep):
        tables.append("<h3>Category under the IS threshold sweep</h3>")
        for ps in [p for p in probe_sets if (sweep["probe_set"] == p).any()]:
            piv = sweep[sweep["probe_set"] == ps].pivot_table(
                index="model", columns="threshold", values="category", aggfunc="first")
            piv = piv.reindex([m for m in models if m in piv.index])
            piv.columns = [f"IS<{int(c)}" if float(c).is_integer() else f"IS<{c}" for c in piv.columns]
            tables.append(table_to_html(piv.reset_index(), caption=f"{ps}: category at each unstable threshold"))
    rob = analysis.robustness
    if isinstance(rob, pd.DataFrame) and len(rob):
        tables.append("<h3>Robustness</h3>")
        kinds = rob["kind"].dropna().unique().tolist() if "kind" in rob.columns else [None]
        for kind in kinds:
            sub = rob if kind is None else rob[rob["kind"] == kind]
            sub = sub.dropna(axis=1, how="all")
            tables.append(compact_table_html(sub, keys=("model",) if "model" in sub.columns else (), max_columns=9,
                                             caption=f"Robustness: {kind}" if kind else "Robustness",
                                             formatters=_ROBUSTNESS_FORMAT))
    tables.append(f"<details><summary>All metrics ({len(met):,} rows: model × metric × subset)</summary>")
    tables.append(compact_table_html(metrics_long_table(met), keys=("model", "metric", "subset"), max_columns=8,
                                     notes=("method", "note"), table_id="metrics-all"))
    tables.append("</details>")
    fig_html = waiting()
    return [
        Section("Verdicts", _verdicts_html(analysis, designed), "verdicts"),
        Section("Figures", "".join(fig_html) or '<p class="muted">No figures.</p>', "figures"),
        Section("Tables", "".join(tables), "tables"),
    ]
