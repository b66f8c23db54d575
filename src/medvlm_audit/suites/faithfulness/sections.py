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


def _condition_order(key: object) -> tuple[int, int, str]:
    """Sort key of a condition (``tb_rad:misleading``): in the order of :data:`LABELS` (no cue, text cues, visual
    cues, regions, shams), aligned before misleading, unknown conditions last."""
    order = list(LABELS)
    cond, _, rest = str(key).partition(":")
    return (order.index(cond) if cond in order else len(order), ("aligned", "misleading", "").index(rest)
            if rest in ("aligned", "misleading", "") else 3, str(key))


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
    cell in a table attached to the figure; None when no condition has a value of ``metric`` (e.g. every CA row
    not assessable): an empty heatmap would say nothing (and matplotlib warns on its identical limits)."""
    import matplotlib

    from medvlm_audit.report.figures import (
        STYLE,
        captioned,
        label_lines_in,
        margins,
        new_figure,
        text_in,
        x_tick_labels,
    )

    m = metrics[(metrics["metric"] == metric) & ~metrics["subset"].str.contains(r"\||family:|^all$|/", regex=True)]
    piv = m.pivot_table(index="subset", columns="model", values="point", aggfunc="first")
    piv = piv.reindex(sorted(piv.index, key=_condition_order))  # text cues, visual cues, regions, shams last
    if piv.empty:
        return None
    nn = m.pivot_table(index="subset", columns="model", values="n", aggfunc="first").reindex_like(piv)
    rows = [words(k) for k in piv.index]
    name = words(metric)
    with matplotlib.rc_context(STYLE):  # type: ignore[arg-type]
        left = text_in(rows) + 0.3
        fig = new_figure(left + 1.3 * max(1, piv.shape[1]) + 1.2, 1.1 + 0.3 * max(1, piv.shape[0]))
        ax = fig.add_subplot()
        values = piv.to_numpy(dtype=float)
        im = ax.imshow(np.ma.masked_invalid(values), vmin=0, vmax=1, cmap="viridis", aspect="auto")
        ax.set_yticks(range(piv.shape[0]), rows)
        for (i, j), v in np.ndenumerate(values):
            if np.isfinite(v):
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, color="w" if v < 0.6 else "k")
        fig.colorbar(im, ax=ax, fraction=0.04, label=name)
        ax.set_title(f"{name} by cue and model")
        margins(fig, left=left, right=0.9, bottom=0.75, top=0.3)
        lines = x_tick_labels(ax, range(piv.shape[1]), [str(c) for c in piv.columns])
        margins(fig, left=left, right=0.9, bottom=label_lines_in(lines) + 0.25, top=0.3)
    counts = nn.reset_index().rename(columns={"subset": "condition"})
    counts["condition"] = [words(k) for k in counts["condition"]]
    for c in counts.columns[1:]:
        counts[c] = [f"{int(v):,}" if np.isfinite(v) else "—" for v in counts[c].to_numpy(dtype=float)]
    return captioned(fig, f"{name} by cue and model",
                     f"{name} (0-1) per condition (rows) and model (columns); n per cell in the table below.",
                     n_table=counts)


def _estimate(r: Any, short: bool = False) -> str:
    """One metrics row's estimate in the page's format: rates in percent with one decimal, 0-1 scores with
    three, each with its 95% interval; a zero-width interval is never printed as one (:func:`interval_text`):
    ``short`` gives 'all 0.500' for a score every answer shares (a table cell; its caption says so)."""
    from medvlm_audit.report.html import format_number

    rate = r.unit == "fraction"
    scale, unit, suffix = (100.0, "%", "%") if rate else (1.0, "prob", "")
    if pd.isna(r.point):  # not computed (not assessable: the row's note in metrics.csv says why)
        return "n/a"
    if pd.notna(r.ci_low) and r.ci_low == r.ci_high:  # zero width: the point and what it is, no interval
        if short and not rate:
            return f"all {format_number(r.point * scale, unit)}"
        what = "no interval" if rate else f"every answer scored {format_number(r.point * scale, unit)}; no interval"
        return f"{format_number(r.point * scale, unit)}{suffix} ({what})"
    text = format_number(r.point * scale, unit) + suffix
    if pd.notna(r.ci_low) and pd.notna(r.ci_high):
        text += f" [{format_number(r.ci_low * scale, unit)}, {format_number(r.ci_high * scale, unit)}]"
    return text


#: the columns of the wide scores table, in order
WIDE_METRICS = ("accuracy", "flip_rate", "cf", "ca", "tone", "cc")
#: the rows of the wide scores table, in order
WIDE_SUBSETS = ("all", "family:text", "family:visual", "family:sham", "family:text:misleading",
                "family:visual:misleading")


#: the judge table's column labels: the failure classes are shares of failed outputs, not success rates
JUDGE_LABELS = {"judge_valid_rate": "valid", "judge_parse_rate": "failed: not parsed",
                "judge_schema_rate": "failed: schema", "judge_evidence_rate": "failed: evidence",
                "judge_abstain_rate": "abstained", "judge_transport_rate": "failed: transport",
                "sham_fpr": "sham false positive", "sham_fpr_ca4": "sham false positive (CA >= 4)"}


def judge_not_assessable(metrics: pd.DataFrame) -> dict[tuple[str, str], str]:
    """(judge, axis) -> why its scores on that axis are not assessable: under half of its outputs valid.

    >>> m = pd.DataFrame({"model": ["j", "k"], "metric": ["judge_valid_rate"] * 2, "subset": ["j/ca", "k/ca"],
    ...                   "point": [0.0, 0.9], "n": [594, 10]})
    >>> judge_not_assessable(m)
    {('j', 'ca'): 'not assessable: 0.0% of 594 judgements valid, under 50%'}
    """
    from medvlm_audit.health import ASSESSABLE_PARSE_RATE

    r = metrics[metrics["metric"] == "judge_valid_rate"]
    out = {}
    for x in r.itertuples(index=False):
        if pd.notna(x.point) and float(x.point) < ASSESSABLE_PARSE_RATE:
            out[(str(x.model), str(x.subset).rpartition("/")[2])] = (
                f"not assessable: {100 * float(x.point):.1f}% of {int(x.n):,} judgements valid, "
                f"under {100 * ASSESSABLE_PARSE_RATE:g}%")
    return out


def _wide_table(rows: pd.DataFrame, metrics: tuple[str, ...] | None = None, key: str = "cues",
                n_name: str = "answers (n)", labels: dict[str, str] | None = None) -> pd.DataFrame:
    """One row per model x subset, one column per metric (``metrics``, default :data:`WIDE_METRICS` then any
    other metric of ``rows``; each as :func:`_estimate`, short), and n; a metric resting on another n than the
    row's says so in its cell; "—" where not computed. A ``judge/axis`` subset is shown as its axis."""
    order = {k: i for i, k in enumerate(WIDE_SUBSETS)}
    present = list(dict.fromkeys(rows["metric"].astype(str)))
    want = metrics if metrics is not None else WIDE_METRICS
    mets = [m for m in want if m in present] + ([m for m in present if m not in want] if metrics is None else [])
    out = []
    keys = sorted({(str(a), str(b)) for a, b in zip(rows["model"], rows["subset"], strict=True)},
                  key=lambda k: (k[0], order.get(k[1], 99), k[1]))
    for model, subset in keys:
        g = rows[(rows["model"] == model) & (rows["subset"] == subset)].drop_duplicates("metric").set_index("metric")
        n_row = int(g["n"].max()) if len(g) else 0
        rec: dict[str, Any] = {"model": model, key: words(subset.rpartition("/")[2]), n_name: f"{n_row:,}"}
        for met in mets:
            label = (labels or {}).get(met) or words(met)
            if met not in g.index:
                rec[label] = "—"
                continue
            r = g.loc[met]
            text = _estimate(_Row(r), short=True)
            if text == "n/a" and "not assessable" in str(r.get("note") or ""):
                text = "not assessable"
            if int(r["n"]) != n_row:
                text += f" (n = {int(r['n']):,})"
            rec[label] = text
        out.append(rec)
    return pd.DataFrame(out)


def _null_interventions(metrics: pd.DataFrame) -> str:
    """One sentence with each model's null-intervention rate on visual cues ('' when none was computed)."""
    r = metrics[(metrics["metric"] == "null_intervention_rate") & (metrics["subset"] == "family:visual")]
    if r.empty:
        return ""
    from medvlm_audit.report.html import escape

    each = "; ".join(f"{escape(x.model)} {_estimate(x)} of {int(x.n):,}" for x in r.itertuples(index=False))
    return (f"<p>Null interventions (visual cues that drew nothing, so a flip there cannot come from the cue): "
            f"{each}.</p>")


def _comparison_table(sub: pd.DataFrame) -> pd.DataFrame:
    """A paired-comparison family for the page: one model column when each row compares a model with itself,
    the difference with its 95% interval in one column (a zero-width interval, every pair differing alike, is
    not printed as one), p and BH-adjusted p as p-values, n."""
    from medvlm_audit.report.html import format_p

    d = pd.DataFrame()
    if (sub["model_a"].astype(str) == sub["model_b"].astype(str)).all():
        d["model"] = sub["model_a"].to_numpy()
    else:
        d["model A"], d["model B"] = sub["model_a"].to_numpy(), sub["model_b"].to_numpy()
    d["subset"] = [words(k) for k in sub["subset"]]

    def diff(r: Any) -> str:
        if pd.isna(r.diff):
            return "—"
        if pd.notna(r.ci_low) and r.ci_low == r.ci_high:
            return f"{r.diff:+.3f} (every pair alike; no interval)"
        ci = f" [{r.ci_low:+.3f}, {r.ci_high:+.3f}]" if pd.notna(r.ci_low) and pd.notna(r.ci_high) else ""
        return f"{r.diff:+.3f}{ci}"

    d["difference [95% CI]"] = [diff(r) for r in sub.itertuples(index=False)]
    d["p"] = [format_p(v) for v in sub["p"]]
    d["p (BH)"] = [format_p(v) for v in sub["p_adj"]]
    d["n"] = sub["n"].astype(int).to_numpy()
    for c in ("test", "note"):
        if c in sub:
            d[c] = sub[c].to_numpy()
    return d


class _Row:
    """Attribute access to a metrics row (a Series) for :func:`_estimate`."""

    def __init__(self, r: Any) -> None:
        self.point, self.ci_low, self.ci_high, self.unit = r["point"], r["ci_low"], r["ci_high"], r["unit"]


def report_sections(metrics: pd.DataFrame, comparisons: pd.DataFrame, *, flip_mode: str,
                    validation: str) -> list[Any]:
    from medvlm_audit.report.figures import figure_title
    from medvlm_audit.report.sections import Section, compact_table_html, figure_to_html

    parts = [(f"<p>Flip rule: <b>{flip_mode}</b> mode; judge quote validation: <b>{validation}</b> mode. "
              "Scores are normalised (s - 1) / 4; CC is computed item by item.</p>")]
    for k, metric in enumerate(("flip_rate", "ca"), 1):
        if (metrics["metric"] == metric).any():
            fig = heatmap_figure(metrics, metric)
            if fig is None:
                parts.append(f"<p>No {words(metric)} value per cue and model was computed (each row's note in "
                             "metrics.csv says why), so there is no figure of it.</p>")
                continue
            parts.append(figure_to_html(fig, number=k, title=figure_title(fig)))
    keep = metrics[metrics["subset"].isin(list(WIDE_SUBSETS)) & metrics["metric"].isin(list(WIDE_METRICS))]
    parts.append(compact_table_html(
        _wide_table(keep), keys=("model", "cues"), drop_constant=False, max_columns=10,
        caption=("Per model and cue family: rates in percent, scores 0-1 (higher CF and CC are better; CA is read "
                 "on flipped answers, see the verdicts), each with its 95% interval; 'all 0.500': every answer "
                 "scored 0.500, so there is no interval; 'not assessable' / 'n/a': no value (the row's note in "
                 "metrics.csv says why). Every subset is in metrics.csv.")))
    parts.append(_null_interventions(metrics))
    secs = [Section("Faithfulness: answers, flips and chain-of-thought scores", "".join(parts))]
    if len(comparisons):
        html = []
        for fam in dict.fromkeys(comparisons["family"].astype(str)):
            sub = _comparison_table(comparisons[comparisons["family"].astype(str) == fam])
            keys = ("model",) if "model" in sub else ("model A", "model B")
            html.append(compact_table_html(sub, keys=keys, max_columns=12, caption=words(fam),
                                           notes=("test", "note")))
        secs.append(Section("Faithfulness: paired comparisons", "".join(html)))
    judge_rows = metrics[metrics["metric"].str.startswith("judge_") | metrics["metric"].str.startswith("sham_fpr")]
    if len(judge_rows):
        from medvlm_audit.report.html import escape

        table = _wide_table(judge_rows, key="axis", n_name="judgements (n)", labels=JUDGE_LABELS)
        bad = judge_not_assessable(judge_rows)
        if bad:
            shown = {(j, words(a)): why for (j, a), why in bad.items()}  # the table shows the axis in words
            table["note"] = [shown.get((str(m), str(a)), "") for m, a in zip(table["model"], table["axis"],
                                                                            strict=True)]
        warn = ""
        if bad:
            each = "; ".join(f"{escape(j)} on {escape(words(a))} ({why.partition(': ')[2]})" for (j, a), why in bad.items())
            warn = (f"<p><b>Judge scores not assessable</b> (under half of the judge's outputs valid): {each}. "
                    "The scores these judges gave on these axes are not read as evidence.</p>")
        secs.append(Section("Faithfulness: judge validity and placebo", warn + compact_table_html(
            table, keys=("model", "axis"),
            drop_constant=False, max_columns=8,
            caption="Per judge and axis: the share of its outputs valid, the share failed by class (not parsed, "
                    "schema, evidence, transport) and abstained (each a share of all its outputs, so lower is "
                    "better), and the sham false-positive rate (a sham answer the judge still credits to a cue), "
                    "each with its 95% interval.")))
    return secs

