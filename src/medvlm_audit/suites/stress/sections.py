"""The stress suite's result and report sections (figures and tables) for the one report writer (its tidy table
and ``report_stress``: :mod:`.suite`; the long metrics and comparisons rows: :mod:`.analysis`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from medvlm_audit.report.sections import Section, compact_table_html, figure_to_html, table_to_html
from medvlm_audit.suites.base import SuiteResult
from medvlm_audit.suites.stress.analysis import (
    EXCLUSION_COLUMNS,
    StressAnalysis,
    comparisons_long,
    exclusion_summary,
    metrics_long,
)
from medvlm_audit.suites.stress.conditions import CONDITIONS
from medvlm_audit.suites.stress.verdicts import NO_EFFECT, VERDICT_Q

# ------------------------------------------------------------------------------------------------ report

#: shortcut -> badge colour (the legend of the verdicts)
SHORTCUT_COLORS: dict[str, str] = {
    "reads the image": "#1f77b4",
    "text shortcut": "#d62728",
    "position bias": "#ff7f0e",
    "no shortcut found": "#7f7f7f",
    "indeterminate": "#bcbd22",
    "not assessable": "#8c564b",
}
#: designed behaviour of the reference answerers (their ``designed`` attribute) in the verdicts' words
_DESIGNED_WORDS = {"position_bias": "position bias", "text_prior": "text shortcut", "reads_image": "reads the image"}

#: what R1-R5 measure (paper 003, Appendix A): R_t = 1 - F_t, 1 = no sign of the shortcut
R_EXPLAINED: tuple[tuple[str, str], ...] = (
    ("R1", "image reliance (T1): 1 minus the accuracy the image adds over text-only, benchmark-weighted"),
    ("R2", ("no text-only shortcut (T2): 1 minus how far text-only accuracy on image-required items rises above "
           "chance, scaled to the room above chance")),
    ("R3", ("position robustness (T3): 1 minus the relative text-only accuracy lost when the options are "
           "reordered")),
    ("R4", ("distractor robustness (T4): 1 minus a weighted sum of text-only accuracy lost with 4 distractors "
           "replaced (0.5), image+text accuracy gained with them replaced (0.3) and text-only accuracy gained "
           "with an 'Unknown' option (0.2)")),
    ("R5", ("visual-substitution robustness (T5): 1 minus the accuracy lost when the image is swapped for one "
           "showing another finding")),
)


def condition_label(cond: str) -> str:
    """A condition in words, saying whether the model saw the image: 'options reordered (text only)'."""
    base, _, mod = cond.partition("+")
    text_only = mod == "no_image" or base == "no_image"
    words = {"original": "original", "no_image": "original", "reordered": "options reordered",
             "unknown": "'Unknown' option added", "substitution": "substituted image", "cot": "chain of thought"}
    if base.startswith("replaced:"):
        k = base.split(":", 1)[1]
        what = f"{k} distractor{'s' if k != '1' else ''} replaced"
    else:
        what = words.get(base, base)
    return f"{what} ({'text only' if text_only else 'image + text'})"


def _pct(x: object, digits: int = 1) -> str:
    return "—" if x is None or pd.isna(x) else f"{100 * float(x):.{digits}f}"


def _pct_ci(point: object, lo: object, hi: object, n: object, unit: str = "%") -> str:
    if point is None or pd.isna(point):
        return f"not estimable (n = {int(n) if n is not None and not pd.isna(n) else 0})"
    sign = "+" if unit == " pp" else ""
    ci = "" if lo is None or pd.isna(lo) else f" [{100 * float(lo):{sign}.1f}, {100 * float(hi):{sign}.1f}]"
    return f"{100 * float(point):{sign}.1f}{unit}{ci} (n = {int(n)})"


def stress_verdicts(res: StressAnalysis) -> dict[str, tuple[list[str], str]]:
    """model -> (tags, verdict text), from the analysis' verdict table (:mod:`.verdicts`: each test read from its
    interval and q; indeterminate with the reason when the interval straddles a threshold; each test's and the
    verdict's bootstrap support in the text): reads the image (T1), text shortcut (T2), position bias (T3), no
    shortcut found, indeterminate or not assessable."""
    return {r["model"]: (str(r["verdict"]).split(", "), str(r["reason"]))
            for r in res.verdicts.sort_values("model").to_dict("records")}


def _support_html(v: object) -> str:
    from medvlm_audit.report.html import escape

    return "" if v is None or pd.isna(v) else f'<span class="muted">support {escape(f"{100 * float(v):.0f}")}%</span> '


def _badge(tag: str) -> str:
    from medvlm_audit.report.html import badge

    return badge(tag, SHORTCUT_COLORS)


def verdicts_html(res: StressAnalysis, designed: dict[str, str] | None = None) -> str:
    from medvlm_audit.report.html import escape

    designed = designed or {}
    legend = ('<p class="legend">Badges: ' + " ".join(
        f"{_badge(t)} {escape(w)}" for t, w in (
            ("reads the image", "accuracy falls when the image is removed (T1)"),
            ("text shortcut", "above chance without the image on image-required items (T2)"),
            ("position bias", "accuracy moves when the options are reordered (T3)"),
            ("no shortcut found", f"T2 and T3 each ruled out: the interval lies within {100 * NO_EFFECT:g} pp of "
                                  "chance / of no change"),
            ("indeterminate", "no shortcut found, but an interval straddles a threshold (the reason says which)"),
            ("not assessable", "parse rate below 50% in a condition a test needs: no verdict from it"))) +
        f" (a finding needs its 95% interval beyond the threshold and q &lt; {VERDICT_Q:g}; support: the share of "
        "item-bootstrap draws giving the same verdict).</p>")
    items = []
    rows = []
    support = dict(zip(res.verdicts["model"], res.verdicts["support"], strict=True))
    for model, (tags, text) in stress_verdicts(res).items():
        des = ""
        d = designed.get(model)
        if d:
            dw = _DESIGNED_WORDS.get(d, d.replace("_", " "))
            des = f'<div class="designed">designed as {_badge(dw)}</div>'
            rows.append(f"<tr><td>{escape(model)}</td><td>{_badge(dw)}</td><td>{''.join(_badge(t) for t in tags)}"
                        f"</td><td>{'yes' if dw in tags else 'no'}</td></tr>")
        items.append(f'<li><span class="model">{escape(model)}</span>{"".join(_badge(t) for t in tags)} '
                     f"{_support_html(support.get(model))}{escape(text)}{des}</li>")
    table = ""
    if rows:
        table = ('<div class="tblwrap"><table class="tbl" id="designed"><thead><tr><th>model</th><th>designed</th>'
                 "<th>observed</th><th>designed shortcut observed</th></tr></thead><tbody>" + "".join(rows)
                 + "</tbody></table></div>")
    return legend + f'<ul class="verdicts">{"".join(items)}</ul>' + table


def _intro(meta: dict[str, Any]) -> str:
    r_items = "".join(f"<li><b>{k}</b>: {v}.</li>" for k, v in R_EXPLAINED)
    return (
        "<p>Multiple-choice items asked under controlled changes: T1 the image removed, T2 text only on the items "
        "that need the image, T3 the options reordered, T4 distractors replaced (or an 'Unknown' option added), "
        "T5 the image swapped for one showing another finding, T6 a chain-of-thought prompt. Every condition label "
        "says whether the model saw the image (<i>image + text</i>) or not (<i>text only</i>).</p>"
        "<p>Accuracies are percentages with one decimal, over all items as in the paper: refusals, abstentions "
        "(\"Unknown\", \"N/A\", ...) and unparsed answers count as wrong (their rates are shown); changes are in "
        "percentage points (pp), paired on the same items. Brackets hold 95% item-bootstrap intervals "
        f"(B = {meta.get('B')}, seed {meta.get('seed')}; an item's repeats stay together) and n is the number of "
        "items; q is Benjamini-Hochberg over each model's family (its T-changes and chance test). Calls without a "
        "response are left out (every such trial and every unparsed answer is in <code>exclusions.csv</code>).</p>"
        "<p>The robustness score (paper 003, Appendix A) has five components between 0 and 1, where 1 means no sign "
        f"of the shortcut, and their mean:</p><ul>{r_items}</ul>"
    )


def _style() -> dict[str, Any]:
    return {"font.size": 9, "axes.titlesize": 10, "axes.labelsize": 9, "xtick.labelsize": 8.5,
            "ytick.labelsize": 8.5, "legend.fontsize": 8.5, "axes.spines.top": False, "axes.spines.right": False}


def accuracy_by_condition_figure(res: StressAnalysis) -> Any:
    """Horizontal bars: accuracy (%) per condition and model with 95% intervals, conditions labelled image+text
    or text only."""
    import matplotlib

    from medvlm_audit.report.figures import captioned, new_figure

    acc = res.accuracy
    conds = [c for c in CONDITIONS if c in set(acc["condition"])]
    models = sorted(acc["model"].unique())
    with matplotlib.rc_context(_style()):
        fig = new_figure(8.5, 1.0 + 0.13 * len(conds) * max(1, len(models)))
        ax = fig.add_subplot()
        h = 0.8 / max(1, len(models))
        y = np.arange(len(conds))
        for j, m in enumerate(models):
            g = acc[acc["model"] == m].set_index("condition").reindex(conds)
            v = 100 * g["accuracy"].to_numpy(dtype=float)
            err = np.vstack([v - 100 * g["ci_low"].to_numpy(dtype=float), 100 * g["ci_high"].to_numpy(dtype=float) - v])
            ax.barh(y + (j - (len(models) - 1) / 2) * h, v, h, xerr=np.nan_to_num(np.abs(err)), label=m,
                    capsize=2, error_kw={"linewidth": 0.8})
        ax.set_yticks(y, [condition_label(c) for c in conds])
        ax.invert_yaxis()
        ax.set_xlim(0, 105)
        ax.set_xlabel("accuracy (%)")
        ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=len(models), frameon=False)
        fig.subplots_adjust(left=0.36, right=0.97, top=1 - 0.45 / fig.get_figheight(),
                            bottom=0.5 / fig.get_figheight())
    n = ", ".join(f"{c}: {int(acc[acc['condition'] == c]['n_items'].max())}" for c in conds[:1])
    return captioned(fig, "Accuracy by condition",
                     "Accuracy (%) per condition and model with 95% item-bootstrap intervals; T3 and T4 conditions "
                     "on the image-required items, the substitution on its own items. The number of items n of "
                     f"each bar is in the table below ({n}, ...).")


def distractor_curve_figure(res: StressAnalysis) -> Any:
    """Lines: accuracy (%) at Base, UNK, 1R-4R, text only and image+text, per model."""
    import matplotlib

    from medvlm_audit.report.figures import captioned, new_figure

    cur = res.curve
    levels = ["Base", "UNK", "1R", "2R", "3R", "4R"]
    with matplotlib.rc_context(_style()):
        fig = new_figure(8.5, 3.4)
        axes = [fig.add_subplot(1, 2, 1)]
        axes.append(fig.add_subplot(1, 2, 2, sharey=axes[0]))
        for ax, modality, title in zip(axes, ("text-only", "image+text"), ("text only", "image + text"),
                                       strict=True):
            for m, g in cur[cur["modality"] == modality].groupby("model"):
                g = g.set_index("level").reindex(levels)
                ax.plot(levels, 100 * g["accuracy"].astype(float), marker="o", label=m)
                ax.fill_between(levels, 100 * g["ci_low"].astype(float), 100 * g["ci_high"].astype(float),
                                alpha=0.15)
            ax.set_title(title)
            ax.set_ylim(0, 105)
            ax.set_xlabel("distractors replaced (UNK: 'Unknown' option added)")
        axes[0].set_ylabel("accuracy (%), image-required items")
        axes[1].legend(loc="lower right", frameon=False)
        fig.subplots_adjust(left=0.09, right=0.98, top=0.88, bottom=0.17, wspace=0.15)
    return captioned(fig, "Distractor replacement (T4)",
                     "Accuracy (%) with 0-4 distractors replaced by options of other items, and with an 'Unknown' "
                     "option added, without (left) and with (right) the image; shaded: 95% item-bootstrap "
                     "intervals. n per point is in the table below.")


def robustness_figure(res: StressAnalysis) -> Any:
    """Bars: R1-R5 and the mean per model with intervals."""
    import matplotlib

    from medvlm_audit.report.figures import captioned, new_figure

    rob = res.robustness
    comps = ["R1", "R2", "R3", "R4", "R5", "mean"]
    labels = ["R1 image\nreliance", "R2 no text\nshortcut", "R3 option\norder", "R4\ndistractors",
              "R5 image\nsubstitution", "mean"]
    models = sorted(rob["model"].unique())
    with matplotlib.rc_context(_style()):
        fig = new_figure(8.5, 3.4)
        ax = fig.add_subplot()
        w = 0.8 / max(1, len(models))
        x = np.arange(len(comps))
        for j, m in enumerate(models):
            g = rob[rob["model"] == m].set_index("component").reindex(comps)
            y = g["value"].to_numpy(dtype=float)
            err = np.vstack([y - g["ci_low"].to_numpy(dtype=float), g["ci_high"].to_numpy(dtype=float) - y])
            ax.bar(x + (j - (len(models) - 1) / 2) * w, y, w, yerr=np.nan_to_num(np.abs(err)), label=m, capsize=2,
                   error_kw={"linewidth": 0.8})
        ax.set_xticks(x, labels)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("robustness (1 = no shortcut)")
        ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=len(models), frameon=False)
        fig.subplots_adjust(left=0.09, right=0.98, top=0.86, bottom=0.2)
    return captioned(fig, "Robustness score",
                     "R1-R5 and their mean per model (paper 003, Appendix A) with 95% item-bootstrap intervals; "
                     "what each component measures is listed under 'How to read this report'. n per component "
                     "is in the table below.")


def _table_html(df: pd.DataFrame, cols: list[str], **kw: Any) -> str:
    """The columns ``cols`` (those present) as a table; a long note column (a collapsed interval's bound, a
    not-assessable reason) becomes numbered markers with the notes listed under the table, so no row grows tall
    (``report.sections.compact_table_html``; every column is kept: the stress tables are narrow)."""
    d = df[[c for c in cols if c in df.columns]]
    if "note" in d.columns and not kw:
        return compact_table_html(d, notes=("note",), max_columns=len(d.columns), drop_constant=False)
    return table_to_html(d, **kw)


def _pct_frame(df: pd.DataFrame, cols: Sequence[str]) -> pd.DataFrame:
    """Fractions as percentages with one decimal (columns renamed 'NAME (%)'); condition names in words."""
    d = df.copy()
    for c in cols:
        if c in d.columns:
            d[c] = [_pct(v) for v in d[c]]
            d = d.rename(columns={c: f"{c} (%)"})
    for c in ("condition", "perturbed", "base"):
        if c in d.columns:
            d[c] = [condition_label(str(v)) if isinstance(v, str) else v for v in d[c]]
    return d


def _estimate_frame(df: pd.DataFrame, point: str, n: str, unit: str = "%") -> list[str]:
    return [_pct_ci(r[point], r.get("ci_low"), r.get("ci_high"), r[n], unit) for r in df.to_dict("records")]


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
    "verdict": "text shortcut (interval rule)", "verdict_support": "support",
}


def _chance_table_html(chance: pd.DataFrame) -> str:
    cols = [c for c in CHANCE_LABELS if c in chance.columns]
    t = chance[cols].copy()
    for c in ("accuracy_modal_items", "accuracy_trials", "chance", "verdict_support"):  # one unit: percent
        if c in t:
            t[c] = (100 * pd.to_numeric(t[c], errors="coerce")).round(1)
    labels = {k: (f"{v} (%)" if k in ("accuracy_modal_items", "accuracy_trials", "chance", "verdict_support") else v)
              for k, v in CHANCE_LABELS.items()}
    return table_to_html(t.rename(columns=labels))


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


def stress_sections(res: StressAnalysis, *, fmt: str = "svg", designed: dict[str, str] | None = None
                    ) -> list[Section]:
    """The stress report as report :class:`~medvlm_audit.report.Section` blocks (figures and tables built with
    the report module's helpers), so any report can carry them as ``extra_sections``."""
    acc = res.accuracy.copy()
    acc.insert(2, "accuracy (%) [95% CI] (n items)", _estimate_frame(acc, "accuracy", "n_items"))
    acc_t = _pct_frame(acc, ["accuracy_parsed", "refusal_rate", "abstain_rate", "unparsed_rate", "chance"])
    ch = res.changes.copy()
    ch.insert(3, "change (pp) [95% CI] (n items)", _estimate_frame(ch, "diff", "n_items", " pp"))
    ch_t = _pct_frame(ch, ["acc_base", "acc_perturbed"])
    curve = res.curve.copy()
    curve.insert(3, "accuracy (%) [95% CI] (n items)", _estimate_frame(curve, "accuracy", "n_items"))
    by_b = res.accuracy_by_benchmark.copy()
    by_b.insert(3, "accuracy (%) [95% CI] (n items)", _estimate_frame(by_b, "accuracy", "n_items"))
    secs = [
        Section("Verdicts", verdicts_html(res, designed), "verdicts"),
        Section("Stress tests (T1-T6)", figure_to_html(accuracy_by_condition_figure(res), number=1,
                                                       title="Accuracy by condition", fmt=fmt)
                + _table_html(acc_t, ["model", "condition", "accuracy (%) [95% CI] (n items)", "n_trials",
                                      "accuracy_parsed (%)", "refusal_rate (%)", "abstain_rate (%)",
                                      "unparsed_rate (%)", "chance (%)"])),
        Section("Paired changes", '<p class="muted">Perturbed minus base accuracy on the same items, in percentage '
                "points; q: Benjamini-Hochberg over the model's family.</p>"
                + _table_html(ch_t, ["model", "test", "comparison", "change (pp) [95% CI] (n items)", "acc_base (%)",
                                     "acc_perturbed (%)", "p", "q", "note"])),
        Section("Accuracy against chance without the image (T2)",
                "<p>Two accuracies, each labelled. <b>Modal accuracy (items)</b>, the one tested: items are the "
                "unit, each item's modal answer over its repeats (ties broken by a seeded draw that does not look "
                "at the gold), exact one-sided binomial test on the items right (Poisson-binomial when items have "
                "different numbers of options). <b>Trial accuracy</b>: the mean over every scored trial, the "
                "accuracy the other tables print. With one repeat per item the two are equal.</p>"
                + _chance_table_html(res.chance)),
        Section("Distractor replacement (T4)", _t4_variant_html(res)
                + figure_to_html(distractor_curve_figure(res), number=2, title="Distractor replacement (T4)", fmt=fmt)
                + _table_html(curve, ["model", "modality", "level", "accuracy (%) [95% CI] (n items)", "note"])),
        Section("Robustness score", figure_to_html(robustness_figure(res), number=3, title="Robustness score",
                                                   fmt=fmt)
                + "<p>R1-R5 and their mean as in the authors' code (between 0 and 1; 1 = no sign of the "
                  "shortcut); each F-term's two accuracies on the items that have both conditions (n and notes "
                  "below). <code>mean_available</code> averages the estimable components when the mean is not "
                  "estimable.</p>"
                + table_to_html(_robustness_overview(res.robustness))
                + _table_html(res.robustness[res.robustness["component"].str.startswith("F")],
                              ["model", "component", "value", "ci_low", "ci_high", "n_items", "note"])),
        Section("Accuracy per benchmark", _table_html(_pct_frame(by_b, []), [
            "model", "benchmark", "condition", "accuracy (%) [95% CI] (n items)"])),
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


def stress_result(res: StressAnalysis, probe_set: str = "stress", *, fmt: str = "svg",
                  designed: dict[str, str] | None = None) -> SuiteResult:
    """A stress analysis as the suite result the report writer renders."""
    tables = dict(res.frames())
    tables["exclusions"] = res.exclusions[list(EXCLUSION_COLUMNS)]
    # the tags, then the text; a text that already opens with its tag (a "not assessable (...)" verdict) says it once
    verdicts = {m: text if text.startswith(", ".join(tags)) else f"{', '.join(tags)}: {text}"
                for m, (tags, text) in stress_verdicts(res).items()}
    return SuiteResult(metrics=metrics_long(res, probe_set), comparisons=comparisons_long(res, probe_set),
                       sections=stress_sections(res, fmt=fmt, designed=designed), summary=res.summary(),
                       tables=tables, verdicts=verdicts, intro=_intro(res.meta))
