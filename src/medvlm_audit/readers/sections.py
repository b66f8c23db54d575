"""The reader-study report sections, written like every suite's: a verdict per reader in words, the metrics as
compact tables (one row per reader or model and subset, one column per metric, each method said once under the
table) and the model-minus-reader comparisons as a compact table. The run report's reader section and the
``readers analyse`` page both use these (the CSV files keep the long metrics schema)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from medvlm_audit.report.html import (
    badge,
    escape,
    format_estimate,
    format_interval,
    format_p,
    is_missing,
)

__all__ = ["comparisons_html", "kappa_words", "metrics_html", "reader_verdicts", "verdicts_html"]

#: Landis and Koch's words for a kappa (upper bounds of each band)
_KAPPA_WORDS: tuple[tuple[float, str], ...] = (
    (0.0, "poor"), (0.2, "slight"), (0.4, "fair"), (0.6, "moderate"), (0.8, "substantial"), (math.inf, "almost perfect"))

#: reader verdict categories and their badge colours
READER_COLORS = {"consistent reference": "#2ca02c", "uncertain agreement": "#ff7f0e",
                 "inconsistent reference": "#d62728", "single reader": "#7f7f7f"}

_KAPPAS = ("kappa", "kappa_w")


def kappa_words(kappa: float) -> str:
    """A kappa in Landis and Koch's words.

    >>> kappa_words(0.71), kappa_words(0.05), kappa_words(-0.1), kappa_words(0.93)
    ('substantial', 'slight', 'poor', 'almost perfect')
    """
    for top, word in _KAPPA_WORDS:
        if kappa <= top:
            return word
    return "almost perfect"  # pragma: no cover


def _unit(u: object) -> str:
    """The formatting unit of a metric row (a kappa at 3 decimals, like a probability)."""
    return "prob" if str(u) == "kappa" else "" if is_missing(u) else str(u)


def _estimate(r: Any, with_n: bool = True) -> str:
    return format_estimate(r["point"], None, r["ci_low"], r["ci_high"], r["n"] if with_n else None,
                           _unit(r["unit"]), r["note"])


_MIN_KN = re.compile(r"min\(k, n - k\) = \d+ < (\d+)")


def _method_text(m: object) -> str:
    """A method without its row's own counts, so one text serves every row of a metric.

    >>> _method_text("3/4; analytic SE sqrt(p(1-p)/n); Wilson 95% score interval (min(k, n - k) = 1 < 10)")
    'analytic SE sqrt(p(1-p)/n); Wilson 95% score interval (min(k, n - k) < 10)'
    """
    if is_missing(m):
        return ""
    return _MIN_KN.sub(r"min(k, n - k) < \1", re.sub(r"^\d+/\d+;\s*", "", str(m))).strip()


def _wide(g: pd.DataFrame, columns: str, strip: str = "") -> pd.DataFrame:
    """Rows of one table: a row per model (reader, model or reader pair), a column per ``columns`` value."""
    g = g.copy()
    g["cell"] = [_estimate(r) for r in g.to_dict("records")]
    g["col"] = g[columns].astype(str).map(lambda c: (c[len(strip):] if strip and c.startswith(strip) else c)
                                          .replace("_", " ") or c)
    wide = g.pivot_table(index="model", columns="col", values="cell", aggfunc="first", sort=False)
    wide = wide[list(dict.fromkeys(g["col"]))].fillna("")
    ok = g["point"].map(lambda v: not is_missing(v) and math.isfinite(float(v)))
    has_note = g["note"].map(lambda v: not is_missing(v) and bool(str(v).strip()))
    note_of = g[ok & has_note].groupby("model", sort=False)["note"].agg(
        lambda x: "; ".join(dict.fromkeys(_method_text(v) for v in x)))
    wide["note"] = [note_of.get(ix, "") for ix in wide.index]
    return wide.reset_index()


def _footnoted(df: pd.DataFrame, keys: tuple[str, ...]) -> tuple[pd.DataFrame, tuple[str, ...], str]:
    """A table's ``note`` column as short numbered markers kept beside the key columns (so a split table never
    puts the notes in a part of their own), the notes listed once under it; one note shared by every row is a
    line under the table instead of a column."""
    from medvlm_audit.report.render import macro

    if "note" not in df.columns:
        return df, keys, ""
    texts = df["note"].map(lambda v: "" if is_missing(v) else str(v).strip())
    df = df.drop(columns="note")
    if not texts.str.len().any():
        return df, keys, ""
    if texts.nunique() == 1:
        return df, keys, f'<p class="muted">Every row: {escape(texts.iloc[0])}.</p>'
    foot: dict[str, int] = {}
    marks = []
    for t in texts:
        if t:
            foot.setdefault(t, len(foot) + 1)
        marks.append(f"[{foot[t]}]" if t else "")
    df.insert(len(keys), "note", marks)
    return df, (*keys, "note"), str(macro("table_notes")(list(foot)))


def _comparison_note(note: object) -> str:
    """A comparison's note without what its row already shows (n, the two values), so equal notes share a
    footnote.

    >>> _comparison_note("no test: 4 shared case(s), fewer than 10 (too few); m 100.0 vs reader:a 75.0")
    'no test: fewer than 10 shared cases (too few)'
    >>> _comparison_note("m 100.0 vs reader:a 83.3 on shared cases")
    ''
    """
    if is_missing(note):
        return ""
    t = re.sub(r"(^|;\s*)\S+ -?[\d.]+ vs \S+ -?[\d.]+( on shared cases)?\s*$", "", str(note))
    return re.sub(r"^no test: \d+ shared case\(s\), fewer than (\d+)", r"no test: fewer than \1 shared cases", t).strip()


def _common_prefix(values: Sequence[str]) -> str:
    """The shared prefix of subset keys up to its last ':' or '=' ('reader-sample:finding=')."""
    import os

    pre = os.path.commonprefix(list(values)) if len(values) > 1 else ""
    cut = max(pre.rfind(":"), pre.rfind("="))
    return pre[:cut + 1] if cut >= 0 else ""


def metrics_html(metrics: pd.DataFrame, *, table_id: str = "reader-metrics") -> str:
    """The reader-study metrics (long schema) as compact tables, per probe set: a table per subset that several
    metrics share (a row per reader, model or reader pair, a column per metric; the subset most metrics share,
    e.g. ``reader-sample``, first as the headline), then a table per metric over its other subsets (a column
    per subset: finding, box rating, failure mode). A cell is 'point [low, high] (n = k)'; each metric's method is said once in a list under the
    tables and a row's notes are numbered footnotes."""
    from medvlm_audit.report.sections import compact_table_html

    if metrics.empty:
        return '<p class="muted">No reader-study metric was computed.</p>'
    out: list[str] = []
    k = 0

    def table(df: pd.DataFrame, caption: str) -> None:
        nonlocal k
        k += 1
        df, keys, foot = _footnoted(df, ("model",))
        out.append(compact_table_html(df, keys=keys, max_columns=7, drop_constant=False, caption=caption,
                                      table_id=table_id if k == 1 else f"{table_id}-{k}") + foot)

    for ps, g in metrics.groupby(metrics["probe_set"].fillna("").astype(str), sort=False):
        where = f" ({ps})" if ps else ""
        subset = g["subset"].astype(str)
        per_subset = g.groupby(subset, sort=False)["metric"].nunique()
        shared = [str(x) for x in per_subset[per_subset > 1].sort_values(ascending=False, kind="stable").index]
        for j, sub in enumerate(shared):  # a subset several metrics share: a column per metric
            table(_wide(g[subset == sub], "metric"), f"{'Headline metrics' if j == 0 else 'Metrics'} on {sub}{where}")
        rest = g[~subset.isin(shared)]
        for metric, h in rest.groupby("metric", sort=False):
            subsets = list(dict.fromkeys(h["subset"].astype(str)))
            strip = _common_prefix(subsets)
            words = str(metric).replace("_", " ")
            table(_wide(h, "subset", strip), f"{words} by {strip.rstrip(':=') or 'subset'}{where}")
        methods = {str(m).replace("_", " "): "; ".join(dict.fromkeys(t for t in (_method_text(x) for x in s) if t))
                   for m, s in g.groupby("metric", sort=False)["method"]}
        items = "".join(f"<li><strong>{escape(m)}</strong>: {escape(t)}</li>" for m, t in methods.items() if t)
        if items:
            out.append(f'<details class="methods"><summary>How each metric is estimated{escape(where)}</summary>'
                       f"<ul>{items}</ul></details>")
    return "".join(out)


def comparisons_html(comparisons: pd.DataFrame, *, table_id: str = "reader-comparisons") -> str:
    """Model minus reader differences as compact tables, one per reader and subset: a row per model, a column
    per metric, each cell 'difference [low, high] (n = k)' in percentage points with its BH-adjusted p when a
    test was run; the test is named once and a row's notes are numbered footnotes."""
    from medvlm_audit.report.sections import compact_table_html

    if comparisons.empty:
        return '<p class="muted">No model was compared with a reader.</p>'
    rows = []
    for r in comparisons.to_dict("records"):
        diff = r["diff"]
        if is_missing(diff) or not math.isfinite(float(diff)):
            text = "not estimable"
        else:
            text = format_interval(diff, r["ci_low"], r["ci_high"], "pp", signed=True)
            if not is_missing(r["p_adj"]) and math.isfinite(float(r["p_adj"])):
                text += f", p (BH) {format_p(r['p_adj'])}"
        if not is_missing(r["n"]):
            text += f" (n = {int(r['n']):,})"
        rows.append({"reader": str(r["model_b"]), "subset": str(r["subset"]), "model": r["model_a"],
                     "metric": str(r["metric"]).replace("_", " "), "cell": text,
                     "test": "" if is_missing(r.get("test")) else str(r["test"]),
                     "note": _comparison_note(r.get("note"))})
    long = pd.DataFrame(rows)
    out = []
    tests = sorted(t for t in long["test"].unique() if t)
    if tests:
        out.append(f'<p class="muted">Differences in percentage points (model minus reader); test: '
                   f"{escape(', '.join(tests))}; p (BH): Benjamini–Hochberg within metric and reader.</p>")
    for k, ((rd, sub), g) in enumerate(long.groupby(["reader", "subset"], sort=False)):
        wide = g.pivot_table(index="model", columns="metric", values="cell", aggfunc="first", sort=False)
        wide = wide[list(dict.fromkeys(g["metric"]))].fillna("")
        note_of = g[g["note"] != ""].groupby("model", sort=False)["note"].agg(lambda x: "; ".join(dict.fromkeys(x)))
        wide["note"] = [note_of.get(ix, "") for ix in wide.index]
        df, keys, foot = _footnoted(wide.reset_index(), ("model",))
        out.append(compact_table_html(df, keys=keys, max_columns=7, drop_constant=False,
                                      caption=f"Each model minus {rd} on {sub}",
                                      table_id=table_id if k == 0 else f"{table_id}-{k + 1}") + foot)
    return "".join(out)


def _readers(metrics: pd.DataFrame, comparisons: pd.DataFrame) -> list[str]:
    names = [str(m) for m in metrics["model"].dropna().unique() if str(m).startswith("reader:")]
    if len(comparisons):
        names += [str(m) for m in comparisons["model_b"].dropna().unique() if str(m).startswith("reader:")]
    for pair in metrics.loc[metrics["metric"].isin(_KAPPAS), "model"].dropna().astype(str):
        names += [f"reader:{p.strip()}" for p in pair.split(" vs ")]
    return list(dict.fromkeys(names))


def _compared(comparisons: pd.DataFrame, reader: str) -> list[str]:
    if comparisons.empty:
        return []
    c = comparisons[comparisons["model_b"].astype(str) == reader]
    out = []
    for metric, g in c.groupby("metric", sort=False):
        above, below, same, untested = [], [], 0, 0
        for r in g.to_dict("records"):
            lo, hi = r["ci_low"], r["ci_high"]
            if is_missing(lo) or is_missing(hi) or not (math.isfinite(float(lo)) and math.isfinite(float(hi))):
                untested += 1
            elif float(lo) > 0:
                above.append(str(r["model_a"]))
            elif float(hi) < 0:
                below.append(str(r["model_a"]))
            else:
                same += 1
        parts = []
        if above:
            parts.append(f"above it: {', '.join(above)}")
        if below:
            parts.append(f"below it: {', '.join(below)}")
        if same:
            parts.append(f"{same} model{'s' if same != 1 else ''} not distinguishable from it")
        if untested:
            parts.append(f"{untested} model{'s' if untested != 1 else ''} not tested (too few shared cases, "
                         "see the comparisons)")
        out.append(f"on {str(metric).replace('_', ' ')}, {'; '.join(parts)}")
    return out


def reader_verdicts(metrics: pd.DataFrame, comparisons: pd.DataFrame) -> list[tuple[str, str, str]]:
    """One verdict per reader in words, (reader, category, sentence): how far the other readers agree with it
    (its kappas' 95% intervals with the other readers: every lower bound above 0.6 is a *consistent reference*,
    an upper bound below 0.4 an *inconsistent reference* (agreement at most fair, established), anything else
    *uncertain agreement* (too wide to tell); no second reader: *single reader*), and where the models stand
    against it (a difference whose 95% interval excludes 0)."""
    out = []
    for rd in _readers(metrics, comparisons):
        name = rd.removeprefix("reader:")
        own = metrics[metrics["model"].astype(str) == rd]
        head = own[own["subset"].astype(str).isin(["reader-sample", "all"])].drop_duplicates("metric")
        bits = [f"{str(r['metric']).replace('_', ' ')} {_estimate(r)}" for r in head.head(3).to_dict("records")
                if not is_missing(r["point"])]
        in_pair = [name in [x.strip() for x in str(p).split(" vs ")] for p in metrics["model"]]
        pairs = metrics[metrics["metric"].isin(_KAPPAS).to_numpy(dtype=bool) & np.asarray(in_pair, dtype=bool)]
        pairs = pairs[[not is_missing(v) and math.isfinite(float(v)) for v in pairs["point"]]]
        sentences = []
        if bits:
            sentences.append("; ".join(bits) + ".")
        if pairs.empty:
            category = "single reader"
            sentences.append("No second reader read the same items, so its consistency is not known.")
        else:
            worst = pairs.loc[pairs["ci_low"].astype(float).idxmin()]
            lo = float(worst["ci_low"])
            lowest_high = pairs.loc[pairs["ci_high"].astype(float).idxmin()]
            if float(lowest_high["ci_high"]) < 0.4:
                category, worst = "inconsistent reference", lowest_high
            else:
                category = "consistent reference" if lo > 0.6 else "uncertain agreement"
            others = ", ".join(dict.fromkeys(p.replace(name, "").replace(" vs ", "").strip()
                                             for p in pairs["model"].astype(str)))
            text = (f"Agreement with {others}: {kappa_words(float(worst['point']))} at worst "
                    f"(κ {format_interval(worst['point'], worst['ci_low'], worst['ci_high'], 'prob')} on "
                    f"{worst['subset']}, n = {int(worst['n'])})")
            if category == "uncertain agreement":
                text += (f", but its interval reaches down to {kappa_words(lo)}: more items read by both are "
                         "needed to call this reader a consistent reference")
            elif category == "inconsistent reference":
                text += (": its interval stays below 0.4, so the readers disagree too often for this reader to "
                         "serve as a reference")
            sentences.append(text + ".")
        compared = _compared(comparisons, rd)
        if compared and all(" not tested " in c and ";" not in c for c in compared):
            sentences.append("No model could be tested against this reader (too few shared cases; the "
                             "differences are in the model-minus-reader table).")
        elif compared:
            sentences.append("Models against this reader: " + "; ".join(compared) + ".")
        out.append((name, category, " ".join(sentences)))
    return out


def verdicts_html(metrics: pd.DataFrame, comparisons: pd.DataFrame) -> str:
    """The verdict list of :func:`reader_verdicts` with a badge per reader ('' when no reader is named)."""
    from medvlm_audit.report.html import verdict_list

    items = [(f"reader {n}", badge(c, READER_COLORS), t) for n, c, t in reader_verdicts(metrics, comparisons)]
    return verdict_list(items) if items else ""
