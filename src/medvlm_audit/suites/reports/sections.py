"""The report audit's page: number formats, the strategy table and the paired-similarity table (HTML), the CAD
scatter per strategy and the vocabulary-size and transition bars. matplotlib (``report.figures``) is imported
inside the figure functions: the analysis imports this module."""

from __future__ import annotations

import math
from collections.abc import Mapping
from html import escape as html_escape
from typing import Any

import numpy as np
import pandas as pd

from medvlm_audit.report.html import format_interval, format_number, format_p
from medvlm_audit.report.sections import Section, compact_table_html, figure_to_html, table_to_html
from medvlm_audit.suites.reports.decoding import STRATEGIES

PAIRED_LABELS = {"bleu": "BLEU", "rouge1": "ROUGE-1", "rougeL": "ROUGE-L", "bertscore_precision": "BERTScore P",
                 "bertscore_recall": "BERTScore R", "bertscore_f1": "BERTScore F1"}


def _fixed(v: Any, digits: int) -> str:
    """``v`` to ``digits`` decimals, or "—" when undefined (NaN)."""
    return f"{float(v):.{digits}f}" if _defined(v) else format_number(None)


def _g(v: Any) -> str:
    """``v`` to 3 significant digits, or "—" when undefined (NaN)."""
    return f"{float(v):.3g}" if _defined(v) else format_number(None)


def _defined(v: Any) -> bool:
    try:
        return math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


def _int(v: Any) -> str:
    return str(int(v)) if _defined(v) else format_number(None)


def _ci(point: Any, lo: Any, hi: Any) -> str:
    """``point [lo, hi]`` at the shared interval decimals (``report.html.format_interval``: a nonzero width never
    prints as zero width); the point alone when no interval that contains it was found (never an interval that
    excludes its point: DESIGN.md, report audit).

    >>> _ci(0.0039, 0.00055, 0.0092), _ci(0.0828, 0.0784, 0.0833), _ci(0.004, float("nan"), float("nan"))
    ('0.0039 [0.0006, 0.0092]', '0.0828 [0.0784, 0.0833]', '0.0040 (no interval)')
    """
    if math.isnan(point):
        return "not estimable"
    if any(map(math.isnan, (lo, hi))) or not lo <= point <= hi or lo == hi:
        return f"{format_interval(point, None, None, 'z')} (no interval)"
    return format_interval(point, lo, hi, "z")


def _perm(wae: dict[tuple[str, str], pd.DataFrame], model: str, strategy: str, key: tuple[str, str]) -> str:
    """'p 0.012 (null 0.41 / 0.93)': the permutation test of one WAE, with the null's median and 95th percentile."""
    f = wae.get((model, strategy))
    if f is None:
        return "—"
    r = f.set_index(["weighting", "group"]).loc[key]
    return f"p {format_p(r['p_perm'])} (null {_g(r['null_median'])} / {_g(r['null_p95'])})"


def _table_html(t: pd.DataFrame, ref_div: dict[str, Any], wae: dict[tuple[str, str], pd.DataFrame] | None = None
                ) -> str:
    wae = wae or {}
    pair = lambda c: [f"{_int(a)} / {_int(b)}" for a, b in zip(t[f"{c}_count_headline"], t[f"{c}_count_null"])]
    show = pd.DataFrame({
        "model": t["model"], "strategy": t["strategy"], "reports": t["n_reports"].map(_int),
        "template div.": t["template_diversity"].map(lambda v: _fixed(v, 3)),
        "TTR": t["ttr"].map(lambda v: _fixed(v, 4)),
        "1 - Self-BLEU": t["one_minus_self_bleu"].map(lambda v: _fixed(v, 3)),
        "vocabulary": t["vocabulary_size"].map(_int),
        "erasure (model / null)": pair("erasure"),
        "absent strong words (chance)": [
            f"{_int(a)} ({_int(lo)}-{_int(hi)})" if _defined(hi) and _defined(lo) else _int(a)
            for a, lo, hi in zip(t["absent_strong_count"], t.get("absent_strong_null_p5", pd.Series(math.nan,
                                 index=t.index)), t.get("absent_strong_null_p95", pd.Series(math.nan, index=t.index)),
                                 strict=True)],
        "new bias": pair("new_bias"),
        "bias flip": pair("bias_flip"),
        "preservation": pair("preservation"),
        "WAE_pred permutation test": [_perm(wae, m, s, ("pred", "all")) for m, s in zip(t["model"], t["strategy"])],
        "WAE_pred [95% CI]": [_ci(*x) for x in zip(t["wae_pred"], t["wae_pred_ci_low"], t["wae_pred_ci_high"])],
        "WAE_ref [95% CI]": [_ci(*x) for x in zip(t["wae_ref"], t["wae_ref_ci_low"], t["wae_ref_ci_high"])],
        "ΔWAE [95% CI]": [_ci(*x) for x in zip(t["delta_wae"], t["delta_wae_ci_low"], t["delta_wae_ci_high"])],
    })
    ref = {"model": "reference corpus", "strategy": "—", "reports": ref_div["n_reports"],
           "template div.": _fixed(ref_div.get("template_diversity"), 3), "TTR": _fixed(ref_div.get("ttr"), 4),
           "1 - Self-BLEU": _fixed(ref_div.get("one_minus_self_bleu"), 3),
           "vocabulary": _int(ref_div.get("vocabulary_size"))}
    show = pd.concat([show, pd.DataFrame([ref])], ignore_index=True)
    intro = ("<p>Per decoding strategy, three tables. <b>Diversity</b>: share of unique reports, type-token ratio, "
             "1 − Self-BLEU and distinct words, beside the reference corpus. <b>CAD headline counts</b>, each as "
             "model / null (the null: the reference corpus split in two at random, what chance gives): erasure = "
             "BH-gated erasures plus words strong in the reference (|z_ref| &gt; 2) that the model never writes; new "
             "bias, flip and preservation BH-gated only (ungated counts are in cad.csv); absent strong words with, in "
             "brackets, the 5th-95th percentile that random reference samples of the same size leave unwritten. "
             "<b>WAE</b>, led by its label-permutation test (p, and the null's median / 95th percentile), with an "
             "interval only where one contains the point (all intervals in wae.csv). WAE falls when associated "
             "words are erased (a word never written has z_disp² &lt; 0.8): a low WAE is not 'no erasure'.</p>")
    groups = [("Diversity", ["reports", "template div.", "TTR", "1 - Self-BLEU", "vocabulary"]),
              ("CAD headline counts (model / null)", ["erasure (model / null)", "absent strong words (chance)",
                                                      "new bias", "bias flip", "preservation"]),
              ("WAE", ["WAE_pred permutation test", "WAE_pred [95% CI]", "WAE_ref [95% CI]", "ΔWAE [95% CI]"])]
    return intro + compact_table_html(show, keys=("model", "strategy"), groups=groups, drop_constant=False)


def paired_table_html(metrics: pd.DataFrame, names: set[str]) -> str:
    """Similarity of each model x strategy's reports to their paired reference reports (the paper's "clinical
    accuracy" block): one column per paired metric, mean [95% CI]; a sentence when nothing paired."""
    paired = metrics[metrics["metric"].isin(list(names))]
    if paired.empty:
        return ("<p>No report paired with a reference report (by the image set's <code>reference_id</code> or the "
                "case id), so BLEU, ROUGE and BERTScore were not computed.</p>")
    order = {s: i for i, s in enumerate(STRATEGIES)}
    cols = [m for m in PAIRED_LABELS if m in set(paired["metric"])]
    cols += sorted(set(paired["metric"]) - set(cols))
    out = []
    for (model, strategy), g in sorted(paired.groupby(["model", "subset"]), key=lambda kv: (kv[0][0],
                                                                                           order.get(kv[0][1], 99))):
        g = g.set_index("metric")
        row: dict[str, Any] = {"model": model, "strategy": strategy, "pairs": int(g["n"].max())}
        for m in cols:
            if m not in g.index:
                row[PAIRED_LABELS.get(m, m)] = "—"
                continue
            r = g.loc[m]
            row[PAIRED_LABELS.get(m, m)] = format_interval(r["point"], r["ci_low"], r["ci_high"], "prob")
        out.append(row)
    methods = paired.drop_duplicates("metric").set_index("metric")["method"]
    bs = methods.get("bertscore_f1")
    cap = ("Similarity of each report to its image's reference report: corpus BLEU, mean ROUGE and BERTScore with "
           "95% cluster-bootstrap intervals over reference reports.")
    if isinstance(bs, str):
        cap += " " + bs.split("; percentile")[0].removeprefix("mean ") + "."
    return table_to_html(pd.DataFrame(out), caption=cap)


CATEGORY_COLORS = {"erasure": "#c0392b", "new_bias": "#2471a3", "bias_flip": "#8e44ad", "preservation": "#229954",
                   "none": "#b3b6b7"}
CATEGORY_ORDER = ("erasure", "new_bias", "bias_flip", "preservation")


def _label(strategy: str, labels: Mapping[str, str] | None) -> str:
    from medvlm_audit.report.figures import key_in_words

    return key_in_words(strategy, labels)


def cad_scatter_figure(cad: pd.DataFrame, model: str, strategies: list[str],
                       labels: Mapping[str, str] | None = None) -> Any:
    """z_ref against z_pred per strategy: the diagonal (no displacement), the neutral band |z_pred| < 1 and the
    strong lines |z_ref| = 2 shaded; words coloured by their ungated category; words whose displacement is not
    significant after BH (gated category ``stable``) drawn hollow. ``labels``: strategy key -> words (panel
    titles); the words per panel are attached as the figure's counts table."""
    from medvlm_audit.report.figures import captioned, margins, new_figure

    n = len(strategies)
    cols = min(3, n)
    rows = int(np.ceil(n / cols))
    fig = new_figure(2.6 * cols + 0.4, 2.5 * rows + 0.6)
    margins(fig, left=0.55, bottom=0.75, top=0.35, hspace=0.45, wspace=0.3)
    sub = cad[cad["model"] == model]
    lim = float(np.nanmax(np.abs(sub[["z_ref", "z_pred"]].to_numpy(dtype=float)))) if len(sub) else 3.0
    lim = max(3.0, min(lim * 1.05, 12.0))
    for i, s in enumerate(strategies):
        ax = fig.add_subplot(rows, cols, i + 1)
        d = sub[sub["strategy"] == s]
        ax.axhspan(-1, 1, color="#f2f3f4", zorder=0)
        for x in (-2, 2):
            ax.axvline(x, color="#aab7b8", lw=0.6, ls=":", zorder=1)
        ax.plot([-lim, lim], [-lim, lim], color="#7f8c8d", lw=0.6, zorder=1)
        for cat in ("none", *CATEGORY_ORDER):
            g = d[d["category_ungated"] == cat]
            if g.empty:
                continue
            stable = g["category"].isin(["stable", "absent"]).to_numpy()
            x, y = g["z_ref"].to_numpy(dtype=float), g["z_pred"].to_numpy(dtype=float)
            c = CATEGORY_COLORS[cat]
            size = 4 if cat == "none" else 9
            ax.scatter(x[stable], y[stable], s=size, facecolors="none", edgecolors=c, linewidths=0.5, zorder=2)
            ax.scatter(x[~stable], y[~stable], s=size, color=c, zorder=3,
                       label=cat.replace("_", " ") if i == 0 else None)
        ax.set_xlim(-lim, lim)
        ax.set_ylim(-lim, lim)
        ax.set_title(_label(s, labels), fontsize=8)
        if i % cols == 0:
            ax.set_ylabel("z_pred (F +, M -)")
        ax.set_xlabel("z_ref")
    handles, names = fig.axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, names, loc="lower center", ncols=5, fontsize=7, frameon=False)
    counts = pd.DataFrame({"strategy": [_label(s, labels) for s in strategies],
                           "words (n)": [f"{int((sub['strategy'] == s).sum()):,}" for s in strategies]})
    return captioned(fig, f"CAD per word, {model}",
                     "Each dot is a vocabulary word: its sex association in the reference (z_ref) against the "
                     "model's reports (z_pred). Grey band: neutral |z_pred| < 1; dotted: |z_ref| = 2; diagonal: "
                     "no displacement. Colour: ungated category; hollow: not significant after BH (gated 'stable', or "
                     "'absent' for a word the model never writes). "
                     "n: the words in each panel, in the table below.", n_table=counts)


def vocabulary_transition_figure(table: pd.DataFrame, reference_vocab: int, model: str,
                                 labels: Mapping[str, str] | None = None) -> Any:
    """Bars per strategy: vocabulary size of the model's reports (line: the reference's), and the CAD headline
    counts (solid; the null's count as a black tick) beside the ungated counts (outline only: not a headline)."""
    from medvlm_audit.report.figures import captioned, label_lines_in, margins, new_figure, x_tick_labels

    d = table[table["model"] == model]
    strategies = [_label(s, labels) for s in d["strategy"].tolist()]
    x = np.arange(len(strategies))
    fig = new_figure(min(10.0, max(7.5, 1.6 * len(strategies))), 3.8)
    margins(fig, left=0.65, right=1.2, bottom=0.75, top=0.35, wspace=0.35)
    ax = fig.add_subplot(1, 2, 1)
    ax.bar(x, d["vocabulary_size"].to_numpy(dtype=float), color="#5d6d7e")
    ax.axhline(reference_vocab, color="#c0392b", lw=0.8, ls="--", label="reference corpus")
    ax.set_ylabel("distinct words")
    ax.set_title("Vocabulary size", fontsize=8)
    ax.legend(fontsize=7.5, frameon=False, loc="upper left", bbox_to_anchor=(0.0, 0.94))
    ax2 = fig.add_subplot(1, 2, 2)
    w = 0.8 / len(CATEGORY_ORDER)
    for j, cat in enumerate(CATEGORY_ORDER):
        off = (j - (len(CATEGORY_ORDER) - 1) / 2) * w
        ax2.bar(x + off, d[f"{cat}_count_ungated"].to_numpy(dtype=float), w, color="none",
                edgecolor=CATEGORY_COLORS[cat], lw=0.6)
        ax2.bar(x + off, d[f"{cat}_count_headline"].to_numpy(dtype=float), w, color=CATEGORY_COLORS[cat],
                label=cat.replace("_", " "))
        ax2.scatter(x + off, d[f"{cat}_count_null"].to_numpy(dtype=float), marker="_", s=40, color="black",
                    zorder=3, label="null" if j == 0 else None)
    ax2.set_ylabel("words")
    ax2.set_title("CAD headline counts (outline: ungated)", fontsize=8)
    ax2.legend(fontsize=7.5, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    lines = max(x_tick_labels(ax, x, strategies, size=7.5), x_tick_labels(ax2, x, strategies, size=7.5))
    margins(fig, left=0.65, right=1.2, bottom=label_lines_in(lines) + 0.3, top=0.35, wspace=0.35)
    return captioned(fig, f"Vocabulary and CAD counts by strategy, {model}",
                     "Left: distinct words in the model's reports per strategy against the reference corpus. "
                     "Right: words per CAD category, the headline count (solid) with the null's count (black tick) "
                     "and, in outline, the ungated count (not a headline: chance alone reaches it).")


def nothing_to_audit_section(skipped: Mapping[str, str]) -> Section:
    """The one section of a run with nothing to audit: each model x strategy left out and why."""
    why = "".join(f"<li>{html_escape(k)}: {html_escape(v)}</li>" for k, v in skipped.items())
    return Section("Nothing to audit", (
        "<p>No model x strategy can be audited (it needs assessable reports of both groups, F and M), so every "
        f"quantity of this suite is undefined:</p><ul>{why}</ul>"))


def strategy_sections(table: pd.DataFrame, ref_div: dict[str, Any], wae_by: dict[tuple[str, str], pd.DataFrame],
                      metrics: pd.DataFrame, paired_names: set[str], cad: pd.DataFrame, *, fmt: str = "svg"
                      ) -> list[Section]:
    """The strategy table, the similarity to the reference reports, and per model the CAD scatter and the
    vocabulary and transition bars."""
    sections = [Section("By decoding strategy", _table_html(table, ref_div, wae_by)),
                Section("Similarity to the reference reports", paired_table_html(metrics, paired_names))]
    for model in table["model"].unique():
        # strategies with CAD rows only (a not-assessable one has none: assess.py)
        strategies = [s for s in table.loc[table["model"] == model, "strategy"]
                      if ((cad["model"] == model) & (cad["strategy"] == s)).any()]
        if not strategies:
            continue
        labels = {s: STRATEGIES[s].label for s in strategies if s in STRATEGIES}
        sections.append(Section(f"CAD scatter: {model}", figure_to_html(
            cad_scatter_figure(cad, model, strategies, labels), fmt=fmt)))
        sections.append(Section(f"Vocabulary and CAD counts: {model}", figure_to_html(
            vocabulary_transition_figure(table[table["strategy"].isin(strategies)],
                                         int(ref_div.get("vocabulary_size", 0)), model, labels), fmt=fmt)))
    return sections


def decoding_section(eff: pd.DataFrame) -> Section:
    """What each engine was asked per model and strategy (:func:`~.decoding.effective_table`); a model that
    records no decoding (an in-process generator) is named in a sentence, not shown as a row of 'server default'."""
    silent = eff[eff["mismatch"] == "not recorded"]
    shown = eff[eff["mismatch"] != "not recorded"]
    parts = []
    if len(silent):
        who = "; ".join(f"{html_escape(str(m))} ({', '.join(html_escape(str(s)) for s in g['strategy'])})"
                        for m, g in silent.groupby("model", sort=True))
        parts.append(f"<p>No decoding recorded (the model does not report the request it ran, e.g. an "
                     f"in-process generator), so nothing to check against the strategies' labels: {who}.</p>")
    if len(shown):
        show = shown.drop(columns=["stop"]).rename(columns={"answers": "answers recorded"}).fillna("server default")
        cap = ("What each engine was asked per model and strategy, read off the sent request as that engine reads "
               "it (top_k 0 = off; 'server default' = not sent, left to the server or the model's generation "
               "config). 'mismatch' lists the fields that differ from the strategy's label: a flagged row is not "
               "the strategy its label names.")
        parts.append(compact_table_html(show, keys=("model", "strategy"), caption=cap, drop_constant=False))
    return Section("Decoding as run", "".join(parts))
