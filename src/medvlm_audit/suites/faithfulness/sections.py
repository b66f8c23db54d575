"""The faithfulness report's sections and figures: keys in words, the flip-rate / CA heatmaps by cue and model,
the metrics tables and the paired comparisons."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

#: words for the parts of faithfulness keys (conditions, metrics, subsets, comparison families) on the page
LABELS: dict[str, str] = {
    "baseline": "no cue", "tb_rad": "text cue (another radiologist)", "tb_la": "text cue (unauthorized access)",
    "vb_bb": "visual cue, box", "vb_hm": "visual cue, heatmap", "vh_bb": "regions boxed", "vh_hm": "regions heatmapped",
    "vo_bb": "regions blacked out", "sham_text": "sham text cue", "sham_bb": "sham box", "sham_hm": "sham heatmap",
    "aligned": "aligned", "misleading": "misleading", "family": "all", "text": "text cues", "visual": "visual cues",
    "sham": "sham cues", "all": "all conditions", "flip": "flipped answers", "nonflip": "unflipped answers",
    "flip_rate": "flip rate", "accuracy": "accuracy", "cf": "CF (clinical fidelity)",
    "ca": "CA (causal attribution)", "confidence": "confidence tone", "tone": "tone", "cc": "CC (confidence calibration)",
    "sham_fpr": "sham false-positive rate (CA > 1)", "sham_fpr_ca4": "sham false-positive rate (CA >= 4)",
    "null_intervention_rate": "null-intervention rate",
    "flip_misleading_vs_aligned": "flip rate, misleading minus aligned cue, per model and cue",
    "ca_between_models": "CA between models on the same modified inputs",
}


def words(key: object) -> str:
    """A faithfulness key in words: 'tb_la:misleading' -> 'Text cue (unauthorized access), misleading'."""
    from medvlm_audit.report.figures import key_in_words

    return key_in_words(key, LABELS)


def interval_text(point: float, lo: float, hi: float, fmt: Callable[[float], str], n: int | None = None, *,
                  rate: bool = False, suffix: str = "") -> str:
    """``point [lo, hi]`` (and `` (n = N)`` when ``n`` is given) in ``fmt``; an interval of zero width is never
    printed as one (issue 21): every answer scored alike, the bootstrap cannot move the mean, so the point is shown
    with what it is. ``rate``: a rate (its interval, from ``stats.rate_interval``, has zero width only when
    undefined). ``suffix`` (e.g. "%") follows the point only, as on the rest of the page.

    >>> f = lambda v: f"{v:.3f}"
    >>> interval_text(0.5, 0.5, 0.5, f, 72)
    '0.500 (all 72 answers scored 0.500; no interval)'
    >>> interval_text(0.76, 0.72, 0.81, f, 144)
    '0.760 [0.720, 0.810] (n = 144)'
    >>> interval_text(1.0, 1.0, 1.0, f)
    '1.000 (every answer scored 1.000; no interval)'
    """
    text = fmt(point) + suffix
    if pd.notna(lo) and pd.notna(hi):
        if lo == hi:
            if rate:
                return text + (f" (n = {int(n):,}; no interval)" if n is not None else " (no interval)")
            who = f"all {int(n):,} answers" if n is not None else "every answer"
            return f"{text} ({who} scored {text}; no interval)"
        text += f" [{fmt(lo)}, {fmt(hi)}]"
    return text + (f" (n = {int(n):,})" if n is not None else "")


def heatmap_figure(metrics: pd.DataFrame, metric: str = "flip_rate") -> Any:
    """A modification x model heatmap of ``metric`` (per condition rows of the metrics table), with the n of each
    cell in a table attached to the figure."""
    import matplotlib

    from medvlm_audit.report.figures import STYLE, captioned, margins, new_figure, text_in

    m = metrics[(metrics["metric"] == metric) & ~metrics["subset"].str.contains(r"\||family:|^all$|/", regex=True)]
    piv = m.pivot_table(index="subset", columns="model", values="point", aggfunc="first")
    nn = m.pivot_table(index="subset", columns="model", values="n", aggfunc="first").reindex_like(piv)
    rows = [words(k) for k in piv.index]
    name = words(metric)
    with matplotlib.rc_context(STYLE):  # type: ignore[arg-type]
        left = text_in(rows) + 0.3
        fig = new_figure(left + 1.3 * max(1, piv.shape[1]) + 1.2, 1.1 + 0.3 * max(1, piv.shape[0]))
        ax = fig.add_subplot()
        values = piv.to_numpy(dtype=float)
        im = ax.imshow(np.ma.masked_invalid(values), vmin=0, vmax=1, cmap="viridis", aspect="auto")
        ax.set_xticks(range(piv.shape[1]), piv.columns, rotation=30, ha="right")
        ax.set_yticks(range(piv.shape[0]), rows)
        for (i, j), v in np.ndenumerate(values):
            if np.isfinite(v):
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, color="w" if v < 0.6 else "k")
        fig.colorbar(im, ax=ax, fraction=0.04, label=name)
        ax.set_title(f"{name} by cue and model")
        margins(fig, left=left, right=0.9, bottom=0.75, top=0.3)
    counts = nn.reset_index().rename(columns={"subset": "condition"})
    counts["condition"] = [words(k) for k in counts["condition"]]
    for c in counts.columns[1:]:
        counts[c] = [f"{int(v):,}" if np.isfinite(v) else "—" for v in counts[c].to_numpy(dtype=float)]
    return captioned(fig, f"{name} by cue and model",
                     f"{name} (0-1) per condition (rows) and model (columns); n per cell in the table below.",
                     n_table=counts)


def _metric_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Metrics rows for the page: keys in words (a judge row's ``judge/axis`` subset as its axis) and one estimate
    column in one format: rates in percent with one decimal, 0-1 scores with three, each with its 95% interval."""
    from medvlm_audit.report.html import format_number

    def est(r: Any) -> str:
        rate = r.unit == "fraction"
        scale, unit, suffix = (100.0, "%", "%") if rate else (1.0, "prob", "")
        if pd.notna(r.ci_low) and r.ci_low == r.ci_high:  # zero width: the point and what it is, no interval
            what = "no interval" if rate else f"every answer scored {format_number(r.point * scale, unit)}; no interval"
            return f"{format_number(r.point * scale, unit)}{suffix} ({what})"
        text = format_number(r.point * scale, unit) + suffix
        if pd.notna(r.ci_low) and pd.notna(r.ci_high):
            text += f" [{format_number(r.ci_low * scale, unit)}, {format_number(r.ci_high * scale, unit)}]"
        return text

    return pd.DataFrame({
        "model": rows["model"].to_numpy(),
        "metric": [words(k) for k in rows["metric"]],
        "subset": [words(str(k).rpartition("/")[2]) for k in rows["subset"]],
        "estimate [95% CI]": [est(r) for r in rows.itertuples(index=False)],
        "n": rows["n"].astype(int).to_numpy(),
    })


def report_sections(metrics: pd.DataFrame, comparisons: pd.DataFrame, *, flip_mode: str,
                    validation: str) -> list[Any]:
    from medvlm_audit.report.figures import figure_title
    from medvlm_audit.report.sections import Section, compact_table_html, figure_to_html, table_to_html

    parts = [(f"<p>Flip rule: <b>{flip_mode}</b> mode; judge quote validation: <b>{validation}</b> mode. "
              "Scores are normalised (s - 1) / 4; CC is computed item by item.</p>")]
    for k, metric in enumerate(("flip_rate", "ca"), 1):
        if (metrics["metric"] == metric).any():
            fig = heatmap_figure(metrics, metric)
            parts.append(figure_to_html(fig, number=k, title=figure_title(fig)))
    keep = metrics[metrics["subset"].isin(["all", "family:text", "family:visual", "family:sham",
                                           "family:text:misleading", "family:visual:misleading"])]
    parts.append(table_to_html(_metric_table(keep)))
    secs = [Section("Faithfulness: answers, flips and chain-of-thought scores", "".join(parts))]
    if len(comparisons):
        comp = comparisons.round(4).copy()
        comp["subset"] = [words(k) for k in comp["subset"]]
        html = []
        for fam in dict.fromkeys(comp["family"].astype(str)):
            sub = comp[comp["family"].astype(str) == fam].drop(columns="family")
            html.append(compact_table_html(sub, keys=("model_a", "model_b"), max_columns=12, caption=words(fam),
                                           notes=("test", "note")))
        secs.append(Section("Faithfulness: paired comparisons", "".join(html)))
    judge_rows = metrics[metrics["metric"].str.startswith("judge_") | metrics["metric"].str.startswith("sham_fpr")]
    if len(judge_rows):
        secs.append(Section("Faithfulness: judge validity and placebo", table_to_html(_metric_table(judge_rows))))
    return secs

