"""Report figures, one function per figure, each taking the analysis DataFrames and returning a matplotlib Figure.

Figures follow the paper's conventions (000_5cd7a5cf59b2e346, Figs. 2-5, Supplementary Fig. 1): fill colour is the
behavioural category, marker shape the modality, error bars 95% intervals. Every figure carries its n, in the
axis labels and in the caption attached to it (read it with caption_of). Figures are built on the Agg canvas
without pyplot, so building them has no global state and needs no display.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.collections import LineCollection
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle
from matplotlib.transforms import blended_transform_factory

from medvlm_audit.findings import DISPLAY_NAMES, MS_CXR_FINDINGS
from medvlm_audit.report.figures import caption_of, figure_title, key_in_words
from medvlm_audit.report.figures import captioned as _captioned
from medvlm_audit.report.figures import label_lines_in as _label_lines_in
from medvlm_audit.report.figures import margins as _margins
from medvlm_audit.report.figures import marks as _marks
from medvlm_audit.report.figures import new_figure as _new_figure
from medvlm_audit.report.figures import styled as _styled
from medvlm_audit.report.figures import text_in as _text_in
from medvlm_audit.report.figures import x_tick_labels as _x_tick_labels
from medvlm_audit.report.html import format_p, is_missing
from medvlm_audit.suites.grounding.categories import CATEGORY_COLORS, CATEGORY_LABELS

__all__ = [
    "accuracy_figure",
    "build_figures",
    "calibration_figure",
    "caption_of",
    "cross_dataset_figure",
    "figure_title",
    "finding_heatmap_figure",
    "forest_figure",
    "gsp_figure",
    "prompt_figure",
    "resolution_figure",
    "sens_spec_figure",
    "subgroup_figure",
    "threshold_sweep_figure",
    "triad_figure",
    "uar_figure",
]

#: modality -> marker: circle multimodal, square text-only, diamond vision-only probe (paper Fig. 2).
MODALITY_MARKERS: dict[str, str] = {"multimodal": "o", "text_only": "s", "vision_only": "D"}
MODALITY_LABELS: dict[str, str] = {"multimodal": "multimodal", "text_only": "text-only", "vision_only": "vision-only"}
#: the category rule's IS thresholds (DESIGN.md, "Grounding audit").
UNSTABLE_IS = 70.0
USES_IS = 90.0
_GREY = "#7f7f7f"
_POS = "#2ca02c"
_NEG = "#d62728"
def _fin(x: object) -> bool:
    if is_missing(x):
        return False
    try:
        return math.isfinite(float(x))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


def _n(x: object) -> int:
    return int(x) if _fin(x) else 0  # type: ignore[call-overload]


def _nfmt(x: object) -> str:
    return f"{_n(x):,}"


def _ordered_models(*frames: pd.DataFrame) -> list[str]:
    seen: dict[str, None] = {}
    for df in frames:
        if isinstance(df, pd.DataFrame) and "model" in df.columns:
            for m in df["model"].tolist():
                if not is_missing(m):
                    seen.setdefault(str(m), None)
    return list(seen)


def _info(categories: pd.DataFrame, metrics: pd.DataFrame | None, probe_set: str) -> dict[str, tuple[str, str]]:
    """model -> (category, modality) for one probe set; models without a category are 'indeterminate'."""
    out: dict[str, tuple[str, str]] = {}
    if metrics is not None and len(metrics):
        mm = metrics[metrics["probe_set"] == probe_set].drop_duplicates("model")
        for m, mod in zip(mm["model"], mm["modality"]):
            out[str(m)] = ("indeterminate", str(mod))
    if len(categories):
        cc = categories[categories["probe_set"] == probe_set]
        for m, cat, mod in zip(cc["model"], cc["category"], cc["modality"]):
            out[str(m)] = (str(cat) if not is_missing(cat) else "indeterminate", str(mod))
    return out


def _style_of(info: dict[str, tuple[str, str]], model: str) -> tuple[str, str]:
    cat, mod = info.get(model, ("indeterminate", "multimodal"))
    return CATEGORY_COLORS.get(cat, _GREY), MODALITY_MARKERS.get(mod, "o")


def _metric_rows(metrics: pd.DataFrame, probe_set: str, metric: str, subset: str = "all") -> pd.DataFrame:
    """Rows of one metric and subset for one probe set, indexed by model (first row per model)."""
    mask = ((metrics["probe_set"].to_numpy() == probe_set) & (metrics["metric"].to_numpy() == metric)
            & (metrics["subset"].to_numpy() == subset))
    m = metrics[mask]
    return m.drop_duplicates("model").set_index("model")


def _has_metric(metrics: pd.DataFrame, probe_set: str, metric: str, subset: str = "all") -> bool:
    return bool(len(_metric_rows(metrics, probe_set, metric, subset)))


def _legend_handles(info: dict[str, tuple[str, str]]) -> list[Any]:
    cats = [c for c in CATEGORY_COLORS if any(v[0] == c for v in info.values())]
    mods = [m for m in MODALITY_MARKERS if any(v[1] == m for v in info.values())]
    handles: list[Any] = [Patch(facecolor=CATEGORY_COLORS[c], label=CATEGORY_LABELS[c]) for c in cats]
    handles += [Line2D([], [], marker=MODALITY_MARKERS[m], color="#444444", linestyle="", markersize=6,
                       label=MODALITY_LABELS[m]) for m in mods]
    return handles


def _stars(p_adj: object) -> str:
    if not _fin(p_adj):
        return "n/a"
    p = float(p_adj)  # type: ignore[arg-type]
    return "***" if p < 0.001 else "**" if p < 0.01 else "*" if p < 0.05 else "n.s."


def _empty_axes(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color=_GREY, style="italic")
    ax.set_xticks([])
    ax.set_yticks([])


def _not_estimable_text(row: pd.Series | None) -> str:
    if row is None:
        return "not computed"
    note = row.get("note", "")
    note = "" if is_missing(note) else str(note).strip()
    if note and not note.lower().startswith("wilson"):
        return note if "n =" in note else f"{note} (n = {_nfmt(row.get('n'))})"
    return f"not estimable (n = {_nfmt(row.get('n'))})"


def _interval_rows(
    ax: Any,
    models: Sequence[str],
    rows: pd.DataFrame,
    info: dict[str, tuple[str, str]],
    *,
    xlim: tuple[float, float],
    label_n: bool = True,
    value_fmt: str = "{:.1f}",
) -> list[str]:
    """Horizontal point-and-interval rows, top to bottom; undefined points print their note. Returns those models."""
    missing: list[str] = []
    ys = np.arange(len(models))[::-1]
    span = xlim[1] - xlim[0]
    px, py, plo, phi, pc, pm = [], [], [], [], [], []
    for y, model in zip(ys, models):
        row = rows.loc[model] if model in rows.index else None
        color, marker = _style_of(info, model)
        if row is None or not _fin(row["point"]):
            ax.text(xlim[0] + 0.02 * span, y, _not_estimable_text(row), va="center", ha="left", fontsize=7,
                    color=_GREY, style="italic")
            missing.append(model)
            continue
        x = float(row["point"])
        lo, hi = row.get("ci_low"), row.get("ci_high")
        px.append(x)
        py.append(y)
        pc.append(color)
        pm.append(marker)
        plo.append(float(lo) if _fin(lo) else np.nan)
        phi.append(float(hi) if _fin(hi) else np.nan)
        ax.text(x, y + 0.18, value_fmt.format(x), ha="center", va="bottom", fontsize=7, color="#333333")
    _marks(ax, px, py, pc, pm, x_lo=plo, x_hi=phi)
    ax.set_yticks(ys)
    if label_n:
        labels = [f"{m} (n = {_nfmt(rows.loc[m]['n'])})" if m in rows.index else f"{m} (n = 0)" for m in models]
    else:
        labels = list(models)
    ax.set_yticklabels(labels)
    ax.set_ylim(-0.7, len(models) - 0.3)
    ax.set_xlim(*xlim)
    ax.grid(axis="x", color="#e5e5e5", linewidth=0.6)
    ax.set_axisbelow(True)
    return missing


def _row_labels(models: Sequence[str], rows: pd.DataFrame) -> list[str]:
    return [f"{m} (n = {_nfmt(rows.loc[m]['n'])})" if m in rows.index else f"{m} (n = 0)" for m in models]


def _models_for(rows: pd.DataFrame, info: dict[str, tuple[str, str]]) -> list[str]:
    return [m for m in info if m in rows.index] + [m for m in rows.index if m not in info]


#: words for the parts of grounding keys (comparison families, metrics, tests) in titles, labels and legends
KEY_LABELS: dict[str, str] = {
    "accuracy": "accuracy", "uar": "UAR", "cgr": "CGR", "is": "IS", "gsp": "GSP", "parse_rate": "parse rate",
    "sensitivity": "sensitivity", "specificity": "specificity", "auroc": "AUROC", "ece": "ECE", "brier": "Brier score",
    "mcnemar": "exact McNemar test", "resolution": "resolution", "sex": "sex", "view": "view", "age": "age",
}
#: how a family key reads: {1} probe set, {2} metric, {3} the baseline / model / metric after them
KEY_TEMPLATES: dict[str, str] = {
    "baseline": "{2} on {1}: each model vs text-only baseline {3}",
    "pairs": "{2} on {1}: every pair of models",
    "subgroups": "subgroup differences on {1}: {2}",
    "robustness": "{3} on {1}: {2} robustness",
}


def family_words(family: object) -> str:
    """A grounding comparison family in words: 'baseline:phantom:accuracy:finding-prior' -> 'Accuracy on phantom:
    each model vs text-only baseline finding-prior'."""
    return key_in_words(family, KEY_LABELS, KEY_TEMPLATES)


def metric_words(metric: object) -> str:
    """A metric key in words with a capital: 'accuracy' -> 'Accuracy', 'uar' -> 'UAR'."""
    return key_in_words(metric, KEY_LABELS)


# ----------------------------------------------------------------------------------------------------------------
# Fig. 2a: the causal triad


@_styled
def triad_figure(categories: pd.DataFrame, *, probe_set: str) -> Figure:
    """CGR against IS with 95% intervals on both axes and the category regions shaded (paper Fig. 2a)."""
    fig = _new_figure(7.2, 5.0)
    ax = fig.add_subplot()
    cats = categories[categories["probe_set"] == probe_set] if len(categories) else categories
    info = _info(categories, None, probe_set)
    ok = cats[[(_fin(c) and _fin(i)) for c, i in zip(cats["cgr"], cats["is_"])]] if len(cats) else cats
    skipped = [str(m) for m in cats["model"] if str(m) not in set(ok["model"].astype(str))] if len(cats) else []

    xlo = 50.0
    ytop = 10.0
    if len(ok):
        xlo = min(50.0, math.floor((np.nanmin(pd.to_numeric(ok["is_low"], errors="coerce").fillna(ok["is_"]))
                                   - 5) / 10) * 10)
        ytop = max(10.0, float(np.nanmax(pd.to_numeric(ok["cgr_high"], errors="coerce").fillna(ok["cgr"]))) + 6)
    xlo = max(0.0, xlo)
    ytop = min(105.0, ytop)
    ybot = -0.06 * ytop
    ax.axvspan(xlo, UNSTABLE_IS, color=CATEGORY_COLORS["unstable"], alpha=0.12, linewidth=0, zorder=0)
    ax.add_patch(Rectangle((USES_IS, 0.0), 101.5 - USES_IS, ytop, color=CATEGORY_COLORS["uses_image"], alpha=0.10,
                           linewidth=0, zorder=0))
    ax.scatter([100.0], [0.0], s=420, facecolors="none", edgecolors=CATEGORY_COLORS["ignores_image"],
               linewidths=1.6, linestyle="--", zorder=1)
    ax.text((xlo + UNSTABLE_IS) / 2, ytop * 0.97, f"unstable\nIS < {UNSTABLE_IS:g}", ha="center", va="top",
            fontsize=7.5, color=CATEGORY_COLORS["unstable"])
    ax.text((USES_IS + 100.5) / 2, ytop * 0.97, f"uses image\nCGR > 0 (CI excl. 0)\nIS ≥ {USES_IS:g}",
            ha="center", va="top", fontsize=7, color=CATEGORY_COLORS["uses_image"])
    ax.annotate("ignores image\nCGR 0, UAR 100, IS 100", (100.0, 0.0), xytext=(-95, 30), textcoords="offset points",
                fontsize=7, color=CATEGORY_COLORS["ignores_image"], ha="center",
                arrowprops={"arrowstyle": "-", "color": CATEGORY_COLORS["ignores_image"], "linewidth": 0.7})

    # coinciding points (e.g. several ignores-image systems at (100, 0)) get vertical jitter
    keys = [(round(float(i), 1), round(float(c), 1)) for i, c in zip(ok["is_"], ok["cgr"])] if len(ok) else []
    groups: dict[tuple[float, float], list[int]] = {}
    for k, key in enumerate(keys):
        groups.setdefault(key, []).append(k)
    dy = 0.035 * (ytop - ybot)
    px: list[float] = []
    py: list[float] = []
    pc: list[str] = []
    pm: list[str] = []
    xl: list[float] = []
    xh: list[float] = []
    yl: list[float] = []
    yh: list[float] = []
    for members in groups.values():
        for j, k in enumerate(members):
            r = ok.iloc[k]
            model = str(r["model"])
            color, marker = _style_of(info, model)
            x, y = float(r["is_"]), float(r["cgr"]) + (j - (len(members) - 1) / 2) * dy
            shift = y - float(r["cgr"])
            px.append(x)
            py.append(y)
            pc.append(color)
            pm.append(marker)
            xl.append(float(r["is_low"]) if _fin(r["is_low"]) else np.nan)
            xh.append(float(r["is_high"]) if _fin(r["is_high"]) else np.nan)
            yl.append(float(r["cgr_low"]) + shift if _fin(r["cgr_low"]) else np.nan)
            yh.append(float(r["cgr_high"]) + shift if _fin(r["cgr_high"]) else np.nan)
            near_left = (x - xlo) < 0.25 * (101.5 - xlo)
            ax.annotate(model, (x, y), xytext=(9 if near_left else -7, 0), textcoords="offset points",
                        ha="left" if near_left else "right", va="center", fontsize=7, zorder=4,
                        bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 0.5})
    _marks(ax, px, py, pc, pm, x_lo=xl, x_hi=xh, y_lo=yl, y_hi=yh, size=50, lw=1.1)
    ax.set_xlim(xlo, 101.5)
    ax.set_ylim(ybot, ytop)
    ax.set_xlabel("Irrelevant-mask stability, IS (%)")
    ax.set_ylabel("Causal grounding rate, CGR (%)")
    ax.set_title(f"Causal triad — {probe_set}")
    none_why = _triad_missing(cats) if not len(ok) else None
    if none_why:
        ax.text(0.5, 0.5, none_why, transform=ax.transAxes, ha="center", color=_GREY, style="italic")
    ax.legend(handles=_legend_handles(info), loc="center left", frameon=False)
    _margins(fig, left=0.6, right=0.15, bottom=0.5, top=0.3)
    ntab = pd.DataFrame({"model": [str(m) for m in ok["model"]], "CGR n": [_nfmt(v) for v in ok["n_cgr"]],
                         "IS n": [_nfmt(v) for v in ok["n_is"]]}) if len(ok) else None
    cap = (f"Causal triad on {probe_set}: causal grounding rate (CGR) against irrelevant-mask stability (IS), with 95% "
           f"intervals "
           f"on both axes; shaded: the unstable (IS < {UNSTABLE_IS:g}) and uses-image (CGR > 0, IS ≥ {USES_IS:g}) "
           f"regions, dashed ring: the ignores-image point. Colour is the category, marker the modality; coinciding "
           f"points are jittered vertically.")
    if skipped:
        cap += f" Not shown (CGR or IS not estimable, n = 0): {', '.join(skipped)}."
    return _captioned(fig, "Causal triad", cap, n_table=ntab,
                      empty=none_why)


def _triad_missing(cats: pd.DataFrame) -> str:
    """Why no model has a point in the triad: which of CGR and IS is estimable for none (n = 0).

    >>> _triad_missing(pd.DataFrame({"cgr": [40.0, float("nan")], "is_": [float("nan")] * 2}))
    'IS not estimable for any model (n = 0); CGR is for 1 of 2, but a point needs both'
    >>> _triad_missing(pd.DataFrame({"cgr": [float("nan")], "is_": [float("nan")]}))
    'CGR and IS not estimable for any model (n = 0)'
    """
    n = len(cats)
    has_cgr = sum(_fin(c) for c in cats["cgr"]) if n else 0
    has_is = sum(_fin(i) for i in cats["is_"]) if n else 0
    if not has_cgr and not has_is:
        return "CGR and IS not estimable for any model (n = 0)"
    if not has_is:
        return f"IS not estimable for any model (n = 0); CGR is for {has_cgr} of {n}, but a point needs both"
    if not has_cgr:
        return f"CGR not estimable for any model (n = 0); IS is for {has_is} of {n}, but a point needs both"
    return "no model has both CGR and IS estimable (n = 0 for one of them)"


# ----------------------------------------------------------------------------------------------------------------
# Fig. 2b / 4c: grounding-specificity premium; Fig. 2c: UAR; Fig. 2d: sensitivity vs specificity


@_styled
def gsp_figure(metrics: pd.DataFrame, categories: pd.DataFrame, *, probe_set: str) -> Figure:
    """Grounding-specificity premium GSP = CGR - (100 - IS) per model with its 95% interval (paper Fig. 2b)."""
    info = _info(categories, metrics, probe_set)
    rows = _metric_rows(metrics, probe_set, "gsp")
    models = _models_for(rows, info)
    fig = _new_figure(_text_in(_row_labels(models, rows)) + 5.6, 1.2 + 0.32 * max(1, len(models)))
    ax = fig.add_subplot()
    vals = [v for m in models for v in (rows.loc[m, "point"], rows.loc[m, "ci_low"], rows.loc[m, "ci_high"])
            if _fin(v)]
    lo = min([0.0, *vals]) if vals else -10.0
    hi = max([0.0, *vals]) if vals else 10.0
    pad = max(3.0, 0.08 * (hi - lo))
    missing = _interval_rows(ax, models, rows, info, xlim=(lo - pad, hi + pad), value_fmt="{:+.1f}")
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_xlabel("GSP = CGR − (100 − IS) (percentage points)")
    _margins(fig, left=_text_in(_row_labels(models, rows)) + 0.2, bottom=0.5, top=0.3)
    ax.set_title(f"Grounding-specificity premium — {probe_set}")
    if not models:
        _empty_axes(ax, "GSP not computed")
    cap = (f"Grounding-specificity premium on {probe_set}: CGR minus the flip rate under an irrelevant mask "
           f"(100 − IS), in percentage points, with 95% intervals; the vertical line marks zero (grounding no more "
           f"specific than generic occlusion); n per model on its row label.")
    if missing:
        cap += f" Not estimable: {', '.join(missing)}."
    return _captioned(fig, "Grounding-specificity premium", cap,
                      empty=None if models else "GSP not computed")


@_styled
def uar_figure(metrics: pd.DataFrame, categories: pd.DataFrame, *, probe_set: str) -> Figure:
    """Unrelated-image answer rate per model with 95% intervals and the line at 100 (paper Fig. 2c)."""
    info = _info(categories, metrics, probe_set)
    rows = _metric_rows(metrics, probe_set, "uar")
    models = _models_for(rows, info)
    fig = _new_figure(_text_in(_row_labels(models, rows)) + 5.6, 1.2 + 0.32 * max(1, len(models)))
    ax = fig.add_subplot()
    vals = [float(v) for m in models for v in (rows.loc[m, "ci_low"], rows.loc[m, "point"]) if _fin(v)]
    lo = max(0.0, math.floor((min(vals) - 5) / 10) * 10) if vals else 0.0
    missing = _interval_rows(ax, models, rows, info, xlim=(lo, 102.0))
    ax.axvline(100, color="black", linestyle="--", linewidth=0.8)
    ax.set_xlabel("Unrelated-image answer rate, UAR (%)")
    _margins(fig, left=_text_in(_row_labels(models, rows)) + 0.2, bottom=0.5, top=0.3)
    ax.set_title(f"UAR — {probe_set}")
    if not models:
        _empty_axes(ax, "UAR not computed (no swap condition)")
    cap = (f"Unrelated-image answer rate on {probe_set}: share of correct-on-original answers unchanged when the "
           f"image is swapped for another patient's image with the same label, with 95% intervals; the dashed "
           f"line marks 100 (answers never depend on the image); n per model on its row label.")
    if missing:
        cap += f" Not estimable: {', '.join(missing)}."
    return _captioned(fig, "Unrelated-image answer rate", cap,
                      empty=None if models else "UAR not computed (no swap condition)")


@_styled
def sens_spec_figure(metrics: pd.DataFrame, categories: pd.DataFrame, *, probe_set: str) -> Figure:
    """Sensitivity against specificity (point estimates) with the always-Yes / always-No anti-diagonal (Fig. 2d)."""
    info = _info(categories, metrics, probe_set)
    sens = _metric_rows(metrics, probe_set, "sensitivity")
    spec = _metric_rows(metrics, probe_set, "specificity")
    models = [m for m in _models_for(sens, info) if m in spec.index]
    fig = _new_figure(5.6, 5.0)
    ax = fig.add_subplot()
    ax.plot([0, 100], [100, 0], linestyle="--", color=_GREY, linewidth=0.8)
    ax.text(2, 98, "always Yes", color=_GREY, fontsize=7.5, va="top")
    ax.text(98, 2, "always No", color=_GREY, fontsize=7.5, ha="right")
    shown, missing = [], []
    px, py, pc, pm = [], [], [], []
    for m in models:
        se, sp = sens.loc[m, "point"], spec.loc[m, "point"]
        if not (_fin(se) and _fin(sp)):
            missing.append(m)
            continue
        color, marker = _style_of(info, m)
        px.append(float(sp))
        py.append(float(se))
        pc.append(color)
        pm.append(marker)
        ax.text(float(sp) + 1.5, float(se) + 1.0, m, fontsize=7)
        shown.append(m)
    _marks(ax, px, py, pc, pm, size=50)
    ax.set_xlim(-3, 103)
    ax.set_ylim(-3, 103)
    ax.set_aspect("equal")
    ax.set_xlabel("Specificity (%)")
    ax.set_ylabel("Sensitivity (%)")
    ax.set_title(f"Sensitivity vs specificity — {probe_set}")
    ax.legend(handles=_legend_handles(info), loc="lower left", frameon=False)
    _margins(fig, left=0.6, bottom=0.5, top=0.3)
    ntab = pd.DataFrame({"model": shown, "n label-positive": [_nfmt(sens.loc[m, "n"]) for m in shown],
                         "n label-negative": [_nfmt(spec.loc[m, "n"]) for m in shown]})
    cap = (f"Sensitivity against specificity on {probe_set} (point estimates, original images); the dashed "
           f"anti-diagonal joins the always-Yes and always-No extremes. n: parsed cases per model, in the table "
           f"below.")
    if missing:
        cap += f" Not estimable: {', '.join(missing)}."
    return _captioned(fig, "Sensitivity vs specificity", cap, n_table=ntab)


# ----------------------------------------------------------------------------------------------------------------
# Fig. 2e / 3a: accuracy with paired-comparison brackets


def _assign_levels(spans: list[tuple[int, int]]) -> list[int]:
    """Greedy non-overlapping bracket levels, shortest spans lowest."""
    order = sorted(range(len(spans)), key=lambda k: (spans[k][1] - spans[k][0], spans[k][0]))
    levels: list[list[tuple[int, int]]] = []
    out = [0] * len(spans)
    for k in order:
        a, b = spans[k]
        for lvl, used in enumerate(levels):
            if all(b < c or d < a for c, d in used):
                used.append((a, b))
                out[k] = lvl
                break
        else:
            levels.append([(a, b)])
            out[k] = len(levels) - 1
    return out


@_styled
def accuracy_figure(
    metrics: pd.DataFrame,
    categories: pd.DataFrame,
    comparisons: pd.DataFrame,
    *,
    probe_set: str,
    max_brackets: int = 24,
) -> Figure:
    """Accuracy with 95% intervals, ordered, with brackets to each text-only baseline and BH-adjusted stars."""
    info = _info(categories, metrics, probe_set)
    rows = _metric_rows(metrics, probe_set, "accuracy")
    models = _models_for(rows, info)
    est = [m for m in models if _fin(rows.loc[m, "point"])]
    missing = [m for m in models if m not in est]
    est.sort(key=lambda m: -float(rows.loc[m, "point"]))
    pos = {m: k for k, m in enumerate(est)}

    comp = comparisons
    if len(comp):
        comp = comp[comp["family"].astype(str).str.startswith(f"baseline:{probe_set}:accuracy:")
                    & (comp["metric"] == "accuracy")]
        if "subset" in comp.columns:
            comp = comp[comp["subset"].isin(["all", ""]) | comp["subset"].isna()]
        comp = comp[comp["model_a"].isin(pos) & comp["model_b"].isin(pos) & comp["diff"].map(_fin)]
        comp = comp.drop_duplicates(["model_a", "model_b"])
    dropped = 0
    if len(comp) > max_brackets:
        dropped = len(comp) - max_brackets
        comp = comp.sort_values("p_adj", na_position="last").head(max_brackets)
    spans = [tuple(sorted((pos[a], pos[b]))) for a, b in zip(comp["model_a"], comp["model_b"])] if len(comp) else []
    levels = _assign_levels(spans) if spans else []  # type: ignore[arg-type]
    nlev = (max(levels) + 1) if levels else 0

    fig = _new_figure(max(6.0, 0.75 * len(models) + 2.0), 4.2 + 0.22 * nlev)
    ax = fig.add_subplot()
    top = max([float(rows.loc[m, "ci_high"]) for m in est if _fin(rows.loc[m, "ci_high"])]
              + [float(rows.loc[m, "point"]) for m in est] + [50.0])
    px, py, pc, pm, plo, phi = [], [], [], [], [], []
    for m in est:
        color, marker = _style_of(info, m)
        y = float(rows.loc[m, "point"])
        lo, hi = rows.loc[m, "ci_low"], rows.loc[m, "ci_high"]
        px.append(pos[m])
        py.append(y)
        pc.append(color)
        pm.append(marker)
        plo.append(float(lo) if _fin(lo) else np.nan)
        phi.append(float(hi) if _fin(hi) else np.nan)
        if info.get(m, ("", ""))[1] == "text_only":
            ax.axhline(y, color=_GREY, linestyle="--", linewidth=0.8, zorder=0)
    _marks(ax, px, py, pc, pm, y_lo=plo, y_hi=phi, size=60, lw=1.5)
    step = max(2.5, 0.045 * top)
    base = top + step * 0.8
    segs = []
    for (a, b), lvl, (_, r) in zip(spans, levels, comp.iterrows()):
        h = base + lvl * step
        segs.append([(a, h - step * 0.25), (a, h), (b, h), (b, h - step * 0.25)])
        ax.text((a + b) / 2, h + step * 0.05, f"{float(r['diff']):+.1f} {_stars(r['p_adj'])}", ha="center",
                va="bottom", fontsize=7)
    if segs:
        ax.add_collection(LineCollection(segs, colors="#333333", linewidths=0.8))
    ax.set_xlim(-0.6, max(0, len(est) - 1) + 0.6)
    ybot = max(0.0, math.floor((min([float(rows.loc[m, "ci_low"]) for m in est if _fin(rows.loc[m, "ci_low"])]
                                   + [float(rows.loc[m, "point"]) for m in est] + [60.0]) - 15) / 10) * 10)
    ax.set_yticks([t for t in range(0, 101, 10) if ybot <= t <= top + 1])
    ax.set_ylim(ybot, base + nlev * step + step * 0.6)
    ax.set_ylabel("Accuracy (%)")
    ax.set_title(f"Accuracy — {probe_set}")
    ax.legend(handles=_legend_handles(info), loc="lower left", frameon=False, ncol=2)
    if not est:
        _empty_axes(ax, "accuracy not estimable for any model (n = 0)")
    _margins(fig, left=0.6, top=0.3)
    lines = _x_tick_labels(ax, range(len(est)), [f"{m}\n(n = {_nfmt(rows.loc[m, 'n'])})" for m in est])
    _margins(fig, left=0.6, bottom=_label_lines_in(lines) + 0.2, top=0.3)
    cap = (f"Accuracy on {probe_set} with 95% intervals, ordered by value; dashed lines mark text-only baselines. "
           f"Brackets join each model to a text-only baseline: paired bootstrap difference on shared parsed cases "
           f"(percentage points, first model minus second) with Benjamini–Hochberg adjusted significance "
           f"(* p_adj < 0.05, ** < 0.01, *** < 0.001, n.s. otherwise); n per model on its tick label, shared n "
           f"per bracket in the table below.")
    ntab = pd.DataFrame({"bracket": [f"{a} vs {b}" for a, b in zip(comp["model_a"], comp["model_b"])],
                         "shared n": [_nfmt(v) for v in comp["n"]]}) if len(comp) else None
    if dropped:
        cap += f" {dropped} further comparisons are in the comparisons table."
    if missing:
        cap += f" Not estimable: {', '.join(missing)}."
    return _captioned(fig, "Accuracy with paired comparisons", cap, n_table=ntab,
                      empty=None if est else "accuracy not estimable for any model (n = 0)")


# ----------------------------------------------------------------------------------------------------------------
# Fig. 5a: per-finding CGR heatmap


def _finding_order(findings: Iterable[str]) -> list[str]:
    fs = list(dict.fromkeys(findings))
    return [f for f in MS_CXR_FINDINGS if f in fs] + sorted(f for f in fs if f not in MS_CXR_FINDINGS)


@_styled
def finding_heatmap_figure(metrics: pd.DataFrame, *, probe_set: str, min_n: int = 10) -> Figure:
    """Per-finding CGR, models x findings, value and n per cell; hatched grey where not estimable or n < min_n."""
    m = metrics[(metrics["probe_set"] == probe_set) & (metrics["metric"] == "cgr")
                & metrics["subset"].astype(str).str.startswith("finding=")]
    m = m.assign(finding=m["subset"].astype(str).str.slice(len("finding=")))
    models = _ordered_models(m)
    findings = _finding_order(m["finding"].tolist())
    fig = _new_figure(min(9.6, max(5.5, 0.8 * len(findings) + 2.5)), 1.4 + 0.5 * max(1, len(models)))
    ax = fig.add_subplot()
    if not models or not findings:
        _empty_axes(ax, "per-finding CGR not computed")
        return _captioned(fig, "Per-finding CGR", f"Per-finding CGR on {probe_set}: not computed (n = 0).",
                          empty="per-finding CGR not computed (n = 0)")
    val = np.full((len(models), len(findings)), np.nan)
    nn = np.zeros_like(val)
    low = np.full_like(val, np.nan)
    ridx = {mm: k for k, mm in enumerate(models)}
    cidx = {f: k for k, f in enumerate(findings)}
    present = np.zeros_like(val, dtype=bool)
    for r in m.itertuples(index=False):
        i, j = ridx[r.model], cidx[r.finding]
        present[i, j] = True
        val[i, j] = float(r.point) if _fin(r.point) else np.nan
        nn[i, j] = _n(r.n)
        low[i, j] = float(r.ci_low) if _fin(r.ci_low) else np.nan
    finite = val[np.isfinite(val)]
    vmax = max(10.0, math.ceil(float(finite.max()) / 10) * 10) if finite.size else 10.0
    cmap = matplotlib.colormaps["Blues"].with_extremes(bad="#eeeeee")
    im = ax.imshow(np.ma.masked_invalid(val), cmap=cmap, vmin=0, vmax=vmax, aspect="auto")
    n_na = n_small = 0
    for i in range(len(models)):
        for j in range(len(findings)):
            v, n = val[i, j], int(nn[i, j])
            if not np.isfinite(v):
                n_na += 1
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor="#e6e6e6", edgecolor="#bbbbbb",
                                       hatch="///", linewidth=0.3))
                label = f"N/A\nn = {n:,}" if present[i, j] else "not run"
                ax.text(j, i, label, ha="center", va="center", fontsize=7, color="#555555")
                continue
            if n < min_n:
                n_small += 1
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor="none", edgecolor="#999999",
                                       hatch="...", linewidth=0.0))
            if np.isfinite(low[i, j]) and low[i, j] > 0:
                ax.add_patch(Rectangle((j - 0.47, i - 0.47), 0.94, 0.94, facecolor="none", edgecolor="black",
                                       linewidth=1.2))
            color = "white" if v > 0.6 * vmax else "black"
            ax.text(j, i, f"{v:.1f}\nn = {n:,}", ha="center", va="center", fontsize=7, color=color)
    ax.set_yticks(range(len(models)))
    ax.set_yticklabels(models)
    ax.spines[:].set_visible(False)
    _margins(fig, left=_text_in(models) + 0.2, right=0.3, top=0.3)
    fig.colorbar(im, ax=ax, label="CGR (%)", shrink=0.8, fraction=0.05, pad=0.02)
    lines = _x_tick_labels(ax, range(len(findings)), [DISPLAY_NAMES.get(f, f) for f in findings])
    _margins(fig, left=_text_in(models) + 0.2, right=0.3, bottom=_label_lines_in(lines) + 0.2, top=0.3)
    ax.set_title(f"Per-finding CGR — {probe_set}")
    cap = (f"Per-finding causal grounding rate on {probe_set}: upper number CGR (%), lower number the case count "
           f"n on which it rests (correct-on-original cases with a parsed target-mask answer); 95% intervals "
           f"from stats.rate_interval (Wilson where fewer than 10 flips or non-flips). Outlined cells have a 95% lower bound above 0; dotted cells have n < {min_n} and are not "
           f"interpreted; hatched grey cells are not estimable ({n_na} cells, N/A with their n).")
    return _captioned(fig, "Per-finding CGR", cap)


# ----------------------------------------------------------------------------------------------------------------
# forest plots of paired differences (Figs. 3b,c and 4d)


@_styled
def forest_figure(comparisons: pd.DataFrame, *, families: Sequence[str], title: str) -> Figure:
    """Paired differences with 95% intervals, one panel per comparison family, coloured by sign and BH significance."""
    comp = comparisons[comparisons["family"].isin(list(families))] if len(comparisons) else comparisons
    fams = [f for f in families if len(comp) and (comp["family"] == f).any()]
    sizes = [int((comp["family"] == f).sum()) for f in fams]
    height = 0.8 + sum(0.26 * s + 0.55 for s in sizes) if fams else 2.0
    row_labels = [f"{a} − {b} [{m}]" for a, b, m in zip(comp["model_a"], comp["model_b"], comp["metric"])]
    fig = _new_figure(_text_in(row_labels) + 6.3, height)
    if not fams:
        ax = fig.add_subplot()
        _empty_axes(ax, "no comparisons")
        return _captioned(fig, title, f"{title}: no comparisons were computed.",
                          empty="no comparisons were computed")
    axes = fig.subplots(len(fams), 1, sharex=True, gridspec_kw={"height_ratios": [max(1, s) + 1.2 for s in sizes]},
                        squeeze=False)[:, 0]
    finite = [float(v) for v in pd.concat([comp["ci_low"], comp["ci_high"], comp["diff"]]) if _fin(v)]
    lo, hi = (min([0.0, *finite]), max([0.0, *finite])) if finite else (-10.0, 10.0)
    pad = max(2.0, 0.06 * (hi - lo))
    n_missing = 0
    all_labels: list[str] = []
    for ax, fam in zip(axes, fams):
        sub = comp[comp["family"] == fam]
        ys = np.arange(len(sub))[::-1]
        metrics_in = sub["metric"].astype(str).unique()
        labels: list[str] = []
        px, py, pc, plo, phi = [], [], [], [], []  # type: ignore[var-annotated]
        for y, (_, r) in zip(ys, sub.iterrows()):
            lab = f"{r['model_a']} − {r['model_b']}"
            if len(metrics_in) > 1:
                lab += f" [{r['metric']}]"
            labels.append(lab)
            trans = blended_transform_factory(ax.transAxes, ax.transData)
            if not _fin(r["diff"]):
                n_missing += 1
                note = "" if is_missing(r["note"]) else str(r["note"]).strip()
                ax.text(0.5, y, note or f"not estimable (n = {_nfmt(r['n'])})", transform=trans, ha="center",
                        va="center", fontsize=7, color=_GREY, style="italic")
                continue
            d = float(r["diff"])
            sig = _fin(r["p_adj"]) and float(r["p_adj"]) < 0.05
            color = (_POS if d > 0 else _NEG) if sig else _GREY
            px.append(d)
            py.append(y)
            pc.append(color)
            plo.append(float(r["ci_low"]) if _fin(r["ci_low"]) else np.nan)
            phi.append(float(r["ci_high"]) if _fin(r["ci_high"]) else np.nan)
            ax.text(1.01, y, f"{d:+.1f}, p_adj {format_p(r['p_adj'])}, n = {_nfmt(r['n'])}", transform=trans,
                    va="center", fontsize=7, clip_on=False)
        _marks(ax, px, py, pc, ["o"] * len(px), x_lo=plo, x_hi=phi, size=28)
        all_labels += labels
        ax.set_yticks(ys)
        ax.set_yticklabels(labels)
        ax.set_ylim(-0.7, len(sub) - 0.3)
        ax.axvline(0, color="black", linewidth=0.8)
        ax.set_title(family_words(fam), fontsize=8, loc="left")
        ax.grid(axis="x", color="#e5e5e5", linewidth=0.6)
        ax.set_xlim(lo - pad, hi + pad)
    axes[-1].set_xlabel("Paired difference (percentage points for rates)")
    gap, top, bottom = 0.45, 0.3, 0.5
    avg_h = max(0.2, (height - top - bottom - gap * (len(fams) - 1)) / len(fams))
    _margins(fig, left=_text_in(all_labels) + 0.2, right=_text_in(["+10.0, p_adj < 0.001, n = 2,575"], 6.5) + 0.1,
             bottom=bottom, top=top, hspace=gap / avg_h)
    tests = ", ".join(sorted(comp["test"].astype(str).unique()))
    cap = (f"{title}: difference (first minus second model) with 95% interval per comparison, on cases shared by "
           f"both models ({tests}); green / red: positive / negative with Benjamini–Hochberg p_adj < 0.05 within "
           f"the family titled above each panel, grey: not significant. Shared n printed per row "
           f"({sum(sizes)} comparisons in {len(fams)} famil{'y' if len(fams) == 1 else 'ies'}).")
    if n_missing:
        cap += f" {n_missing} comparisons not estimable."
    return _captioned(fig, title, cap)


# ----------------------------------------------------------------------------------------------------------------
# threshold sweep, calibration, subgroups, robustness


@_styled
def threshold_sweep_figure(threshold_sweep: pd.DataFrame, categories: pd.DataFrame, *, probe_set: str) -> Figure:
    """Category of each model as the IS 'unstable' threshold sweeps 50..90: stability of the rule."""
    sw = threshold_sweep[threshold_sweep["probe_set"] == probe_set] if len(threshold_sweep) else threshold_sweep
    models = [m for m in _ordered_models(categories[categories["probe_set"] == probe_set] if len(categories)
                                         else categories, sw) if len(sw) and (sw["model"] == m).any()]
    ths = sorted(pd.to_numeric(sw["threshold"]).unique().tolist()) if len(sw) else []
    fig = _new_figure(max(5.5, 0.32 * len(ths) + 3.0), 1.3 + 0.38 * max(1, len(models)))
    ax = fig.add_subplot()
    if not models or not ths:
        _empty_axes(ax, "threshold sweep not computed")
        return _captioned(fig, "Category stability under the threshold sweep",
                          f"Threshold sweep on {probe_set}: not computed.", empty="threshold sweep not computed")
    codes = list(CATEGORY_COLORS)
    grid = np.full((len(models), len(ths)), codes.index("indeterminate"))
    piv = sw.pivot_table(index="model", columns="threshold", values="category", aggfunc="first")
    for i, mdl in enumerate(models):
        for j, t in enumerate(ths):
            c = piv.loc[mdl].get(t) if mdl in piv.index else None
            grid[i, j] = codes.index(c) if isinstance(c, str) and c in codes else codes.index("indeterminate")
    ax.imshow(grid, cmap=ListedColormap([CATEGORY_COLORS[c] for c in codes]), vmin=-0.5, vmax=len(codes) - 0.5,
              aspect="auto")
    ax.set_xticks(range(len(ths)))
    ax.set_xticklabels([f"{t:g}" for t in ths], rotation=90 if len(ths) > 12 else 0)
    ax.set_yticks(range(len(models)))
    ax.set_yticklabels(models)
    if UNSTABLE_IS in ths:
        j = ths.index(UNSTABLE_IS)
        ax.add_patch(Rectangle((j - 0.5, -0.5), 1, len(models), facecolor="none", edgecolor="black", linewidth=1.5))
    ax.set_xlabel("IS threshold for 'unstable' (%)")
    ax.set_title(f"Category under the IS threshold sweep — {probe_set}")
    present = sorted({codes[k] for k in grid.ravel()}, key=codes.index)
    ax.legend(handles=[Patch(facecolor=CATEGORY_COLORS[c], label=CATEGORY_LABELS[c]) for c in present],
              loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    _margins(fig, left=_text_in(models) + 0.2, right=1.3, bottom=0.55, top=0.3)
    stable = [mdl for i, mdl in enumerate(models) if len(set(grid[i].tolist())) == 1]
    changed = [mdl for mdl in models if mdl not in stable]
    cap = (f"Category of each model on {probe_set} when the rule is re-run with the IS 'unstable' threshold at each "
           f"value from {ths[0]:g} to {ths[-1]:g} (the outlined column is the default, {UNSTABLE_IS:g}). "
           f"{len(stable)} of {len(models)} models keep one category across all {len(ths)} thresholds")
    cap += f"; changing: {', '.join(changed)}." if changed else "."
    cc = categories[categories["probe_set"] == probe_set] if len(categories) else categories
    ntab = None
    if len(cc):
        cap += " IS n per model in the table below."
        ntab = pd.DataFrame({"model": [str(m) for m in cc["model"]], "IS n": [_nfmt(v) for v in cc["n_is"]]})
    one = {int(k) for k in grid.ravel()}
    same = (f"every model is '{CATEGORY_LABELS[codes[one.pop()]]}' at every threshold (nothing varies)"
            if len(one) == 1 and grid.size >= 2 else None)
    return _captioned(fig, "Category stability under the threshold sweep", cap, n_table=ntab, empty=same)


@_styled
def calibration_figure(metrics: pd.DataFrame, categories: pd.DataFrame, *, probe_set: str) -> Figure:
    """AUROC, ECE and Brier of P(yes) per model with intervals, and mean confidence by decision regime."""
    info = _info(categories, metrics, probe_set)
    panels = [("auroc", "AUROC of P(yes) vs label", (0.0, 1.0), 0.5), ("ece", "ECE", None, None),
              ("brier", "Brier score", None, None)]
    panels = [p for p in panels if _has_metric(metrics, probe_set, p[0])]
    regimes = [("conf_grounded_correct", "grounded-correct", "#1f77b4"),
               ("conf_ungrounded_correct", "ungrounded-correct", "#9e9e9e"),
               ("conf_incorrect", "incorrect", "#d62728")]
    regimes = [r for r in regimes if _has_metric(metrics, probe_set, r[0])]
    rows_by = {p[0]: _metric_rows(metrics, probe_set, p[0]) for p in panels}
    models = _ordered_models(*[r.reset_index() for r in rows_by.values()],
                             *[_metric_rows(metrics, probe_set, r[0]).reset_index() for r in regimes])
    models = [m for m in info if m in models] + [m for m in models if m not in info]
    ncol = len(panels) + (1 if regimes else 0)
    fig = _new_figure(min(9.6, max(6.0, 2.1 * ncol + _text_in(models) + 0.4)), 1.3 + 0.34 * max(1, len(models)))
    if ncol == 0:
        ax = fig.add_subplot()
        _empty_axes(ax, "no calibration metrics")
        return _captioned(fig, "Calibration", f"Calibration on {probe_set}: not computed.",
                          empty="no calibration metric computed")
    axes = fig.subplots(1, ncol, squeeze=False)[0]
    caps = []
    for k, (metric, label, xlim, ref) in enumerate(panels):
        rows = rows_by[metric]
        if xlim is None:
            vals = [float(v) for v in pd.concat([rows["ci_high"], rows["point"]]) if _fin(v)]
            xlim = (0.0, max(0.05, min(1.0, (max(vals) if vals else 0.5) * 1.15)))
        _interval_rows(axes[k], models, rows, info, xlim=xlim, label_n=False, value_fmt="{:.2f}")
        if ref is not None:
            axes[k].axvline(ref, color="black", linestyle="--", linewidth=0.8)
        axes[k].set_xlabel(label)
        if k:
            axes[k].tick_params(labelleft=False)
        caps.append((label, {m: _nfmt(rows.loc[m, "n"]) for m in models if m in rows.index}))
    if regimes:
        ax = axes[-1]
        ys = np.arange(len(models))[::-1]
        for off, (metric, label, color) in zip((0.22, 0.0, -0.22), regimes):
            rows = _metric_rows(metrics, probe_set, metric)
            px, py, plo, phi = [], [], [], []
            for y, m in zip(ys, models):
                if m not in rows.index or not _fin(rows.loc[m, "point"]):
                    continue
                lo, hi = rows.loc[m, "ci_low"], rows.loc[m, "ci_high"]
                px.append(float(rows.loc[m, "point"]))
                py.append(y + off)
                plo.append(float(lo) if _fin(lo) else np.nan)
                phi.append(float(hi) if _fin(hi) else np.nan)
            _marks(ax, px, py, [color] * len(px), ["o"] * len(px), x_lo=plo, x_hi=phi, size=16, lw=1.0)
            caps.append((f"confidence, {label}", {m: _nfmt(rows.loc[m, "n"]) for m in models if m in rows.index}))
        ax.set_yticks(ys)
        ax.set_yticklabels(models)
        if panels:
            ax.tick_params(labelleft=False)
        ax.set_ylim(-0.7, len(models) - 0.3)
        ax.set_xlim(-0.02, 1.02)
        ax.set_xlabel("Mean confidence in the given answer")
        fig.legend(handles=[Line2D([], [], marker="o", color=c, linestyle="", label=lab) for _, lab, c in regimes],
                   loc="upper right", frameon=False, ncol=len(regimes), fontsize=7)
    fig.suptitle(f"Calibration and confidence — {probe_set}", fontsize=9.5, x=0.02, ha="left")
    _margins(fig, left=_text_in(models) + 0.2, right=0.2, bottom=0.5, top=0.45, wspace=0.12)
    cap = (f"Calibration of first-token P(yes) on {probe_set}: AUROC against the label (dashed line: chance, 0.5), "
           f"expected calibration error (10 equal-width bins) and Brier score, with 95% intervals, and mean "
           f"confidence by decision regime. Rows without a point read 'N/A (degenerate confidence)' when more than "
           f"90% of confidences are exactly 0 or 1, or 'not estimable' when no confidence is available; n per "
           f"model and panel in the table below.")
    ntab = pd.DataFrame({"model": models, **{f"n {lab}": [ns.get(m, "—") for m in models] for lab, ns in caps}})
    return _captioned(fig, "Calibration", cap, n_table=ntab)


_SUBGROUP_DIMS = ("sex", "view", "age")
_LEVEL_ORDER = ["sex=M", "sex=F", "view=PA", "view=AP", "age=<50", "age=50-70", "age=>70"]


def _subgroup_q(comparisons: pd.DataFrame, probe_set: str) -> Callable[[str, str, str], object]:
    """q(model, metric, dim): the BH-adjusted p of the first subgroup test of ``probe_set`` on that metric whose
    family is the model's (or whose model_a is the model) and whose subset names ``dim``; None without one.
    The probe set's subgroup rows are selected once, then looked up per panel and model."""
    if not len(comparisons):
        return lambda model, metric, dim: None
    c = comparisons[comparisons["family"].astype(str).str.startswith(f"subgroups:{probe_set}:")]
    rows = list(zip(c["family"].astype(str), c["metric"], c["model_a"], c["subset"].astype(str)))
    p_adj = c["p_adj"]

    def q(model: str, metric: str, dim: str) -> object:
        own = f"subgroups:{probe_set}:{model}"
        for i, (fam, met, model_a, subset) in enumerate(rows):
            if met == metric and (fam == own or model_a == model) and dim in subset:
                return p_adj.iloc[i]
        return None

    return q


@_styled
def subgroup_figure(metrics: pd.DataFrame, comparisons: pd.DataFrame, categories: pd.DataFrame, *,
                    probe_set: str) -> Figure:
    """CGR and UAR per subgroup (sex, view, age band) per model with 95% intervals and the BH-adjusted q."""
    m = metrics[(metrics["probe_set"] == probe_set)
                & metrics["subset"].astype(str).str.match(r"^(sex|view|age)=")]
    mets = [x for x in ("cgr", "uar", "accuracy", "is") if (m["metric"] == x).any()][:3]
    dims = [d for d in _SUBGROUP_DIMS if m["subset"].astype(str).str.startswith(d + "=").any()]
    info = _info(categories, metrics, probe_set)
    models = [x for x in info if (m["model"] == x).any()]
    left = _text_in(models) + 0.2
    fig = _new_figure(min(9.8, left + 2.1 * max(1, len(dims)) + 0.2), 0.6 + len(mets) * (0.3 * len(models) + 0.9))
    if not mets or not dims:
        ax = fig.add_subplot()
        _empty_axes(ax, "no subgroup results")
        return _captioned(fig, "Subgroups", f"Subgroup results on {probe_set}: not computed.",
                          empty="no subgroup results")
    axes = fig.subplots(len(mets), len(dims), squeeze=False)
    palette = ["#4c72b0", "#dd8452", "#55a868"]
    ys = np.arange(len(models))[::-1]
    caps = []
    subgroup_q = _subgroup_q(comparisons, probe_set)
    for i, metric in enumerate(mets):
        for j, dim in enumerate(dims):
            ax = axes[i, j]
            sub = m[(m["metric"] == metric) & m["subset"].astype(str).str.startswith(dim + "=")]
            levels = sorted(sub["subset"].astype(str).unique(),
                            key=lambda s: (_LEVEL_ORDER.index(s) if s in _LEVEL_ORDER else 99, s))
            handles = []
            for k, lev in enumerate(levels):
                rows = sub[sub["subset"] == lev].drop_duplicates("model")
                # each model's row position and the columns as arrays (what rows.loc gave, without its cost)
                at = {mdl: r for r, mdl in enumerate(rows["model"])}
                point, low, high, n = (rows[c].to_numpy() for c in ("point", "ci_low", "ci_high", "n"))
                off = (k - (len(levels) - 1) / 2) * 0.22
                px, py, plo, phi = [], [], [], []
                for y, mdl in zip(ys, models):
                    if mdl in at and _fin(point[at[mdl]]):
                        lo, hi = low[at[mdl]], high[at[mdl]]
                        px.append(float(point[at[mdl]]))
                        py.append(y + off)
                        plo.append(float(lo) if _fin(lo) else np.nan)
                        phi.append(float(hi) if _fin(hi) else np.nan)
                color = palette[k % len(palette)]
                _marks(ax, px, py, [color] * len(px), ["o"] * len(px), x_lo=plo, x_hi=phi, size=14, lw=0.9)
                handles.append(Line2D([], [], marker="o", color=color, linestyle="", label=lev.split("=", 1)[1]))
                caps.append((f"{metric_words(metric)} {lev.replace('=', ' ')}",
                             {mdl: _nfmt(n[at[mdl]]) for mdl in models if mdl in at}))
            trans = blended_transform_factory(ax.transAxes, ax.transData)
            for y, mdl in zip(ys, models):
                q = subgroup_q(mdl, metric, dim)
                if q is not None:
                    txt = f"q {format_p(q)}" + ("†" if _fin(q) and float(q) < 0.05 else "")  # type: ignore[arg-type]
                    ax.text(0.99, y + 0.3, txt, transform=trans, ha="right", va="center", fontsize=7,
                            color="#333333")
            ax.set_yticks(ys)
            ax.set_yticklabels(models)
            if j:
                ax.tick_params(labelleft=False)
            ax.set_ylim(-0.7, len(models) - 0.3)
            ax.set_xlim(-2, 102)
            ax.grid(axis="x", color="#e5e5e5", linewidth=0.6)
            ax.set_xlabel(f"{metric_words(metric)} (%)")
            ax.set_title(metric_words(dim), fontsize=8, loc="left")
            ax.legend(handles=handles, loc="lower right", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=7,
                      ncol=len(levels), borderaxespad=0.1, handletextpad=0.1, columnspacing=0.6)
    fig.suptitle(f"Subgroups — {probe_set}", fontsize=9.5, x=0.02, ha="left")
    _margins(fig, left=left, right=0.2, bottom=0.45, top=0.5, hspace=0.9 / (0.3 * len(models) + 0.1),
             wspace=0.1)
    cap = (f"Subgroup rates on {probe_set} with 95% intervals by sex, view and age band; q beside each model is the "
           f"Benjamini–Hochberg adjusted permutation p within that model's family of subgroup tests († q < 0.05); "
           f"n per subgroup and model in the table below.")
    ntab = pd.DataFrame([{"subgroup": lab, **{mdl: ns.get(mdl, "—") for mdl in models}} for lab, ns in caps])
    return _captioned(fig, "Subgroups", cap, n_table=ntab)


def _robust_value(robustness: pd.DataFrame, probe_set: str, kind: str, needle: str) -> float | None:
    if not len(robustness) or "kind" not in robustness.columns:
        return None
    r = robustness[robustness["kind"] == kind]
    if "probe_set" in r.columns:
        r = r[r["probe_set"] == probe_set]
    cols = [c for c in r.columns if needle in str(c).lower()]
    for c in cols:
        vals = [float(v) for v in r[c].tolist() if _fin(v)]
        if vals:
            return vals[0]
    return None


@_styled
def resolution_figure(metrics: pd.DataFrame, categories: pd.DataFrame, robustness: pd.DataFrame, *,
                      probe_set: str) -> Figure:
    """CGR at 512 px against CGR at 224 px with intervals and the identity line (Supplementary Fig. 1a)."""
    info = _info(categories, metrics, probe_set)
    a = _metric_rows(metrics, probe_set, "cgr", "all")
    b = _metric_rows(metrics, probe_set, "cgr", "res=512")
    models = [m for m in info if m in a.index and m in b.index]
    fig = _new_figure(5.4, 5.0)
    ax = fig.add_subplot()
    shown, missing = [], []
    px: list[float] = []
    py: list[float] = []
    pc: list[str] = []
    pm: list[str] = []
    xl: list[float] = []
    xh: list[float] = []
    yl: list[float] = []
    yh: list[float] = []
    for m in models:
        x, y = a.loc[m, "point"], b.loc[m, "point"]
        if not (_fin(x) and _fin(y)):
            missing.append(m)
            continue
        color, marker = _style_of(info, m)
        px.append(float(x))
        py.append(float(y))
        pc.append(color)
        pm.append(marker)
        xl.append(float(a.loc[m, "ci_low"]) if _fin(a.loc[m, "ci_low"]) else np.nan)
        xh.append(float(a.loc[m, "ci_high"]) if _fin(a.loc[m, "ci_high"]) else np.nan)
        yl.append(float(b.loc[m, "ci_low"]) if _fin(b.loc[m, "ci_low"]) else np.nan)
        yh.append(float(b.loc[m, "ci_high"]) if _fin(b.loc[m, "ci_high"]) else np.nan)
        shown.append(m)
    _marks(ax, px, py, pc, pm, x_lo=xl, x_hi=xh, y_lo=yl, y_hi=yh, size=40, lw=1.0)
    top = max([10.0] + [float(v) for v in pd.concat([a["ci_high"], b["ci_high"]]) if _fin(v)]) + 3
    spots: dict[tuple[float, float], list[str]] = {}  # coinciding points share one label (no overprinted names)
    for x, y, m in zip(px, py, shown):
        spots.setdefault((round(x, 1), round(y, 1)), []).append(m)
    for (x, y), names in spots.items():  # labels inside the axes: left of points in the right third
        right = x > 0.66 * top
        ax.annotate(", ".join(names), (x, y), xytext=(-6 if right else 6, 5), textcoords="offset points",
                    ha="right" if right else "left", fontsize=7)
    ax.plot([0, top], [0, top], linestyle="--", color=_GREY, linewidth=0.8)
    ax.set_xlim(-2, top)
    ax.set_ylim(-2, top)
    ax.set_xlabel("CGR at 224 × 224 (%)")
    ax.set_ylabel("CGR at 512 × 512 (%)")
    _margins(fig, left=0.6, bottom=0.5, top=0.3)
    ax.set_title(f"Resolution — {probe_set}")
    rho = _robust_value(robustness, probe_set, "resolution", "rho")
    if rho is not None:
        ax.text(0.03, 0.97, f"Spearman ρ = {float(rho):.3f}", transform=ax.transAxes, va="top", fontsize=7.5)
    ntab = pd.DataFrame({"model": shown, "n at 224 px": [_nfmt(a.loc[m, "n"]) for m in shown],
                         "n at 512 px": [_nfmt(b.loc[m, "n"]) for m in shown]})
    cap = (f"Causal grounding rate on {probe_set} at 512 × 512 against the 224 × 224 default, with 95% intervals on "
           f"both axes and the identity line" + (f"; Spearman rank correlation {float(rho):.3f}" if rho is not None
                                                 else "") + "; n per model in the table below.")
    if missing:
        cap += f" Not estimable: {', '.join(missing)}."
    return _captioned(fig, "Resolution robustness", cap, n_table=ntab)


@_styled
def prompt_figure(metrics: pd.DataFrame, *, probe_set: str) -> Figure:
    """Parse rate per model and prompt phrasing (default, terse, radiologist) as an annotated heatmap."""
    m = metrics[(metrics["probe_set"] == probe_set) & (metrics["metric"] == "parse_rate")]
    variants = [("prompt=default", "default")] if (m["subset"] == "prompt=default").any() else [("all", "default")]
    variants += [(s, s.split("=", 1)[1]) for s in sorted(m["subset"].astype(str).unique())
                 if s.startswith("prompt=") and s != "prompt=default"]
    models = _ordered_models(m[m["subset"].astype(str).str.startswith("prompt=")])
    fig = _new_figure(max(4.5, 1.3 * len(variants) + 2.5), 1.3 + 0.4 * max(1, len(models)))
    ax = fig.add_subplot()
    if not models:
        _empty_axes(ax, "prompt variants not run")
        return _captioned(fig, "Prompt phrasing", f"Prompt phrasing on {probe_set}: not run.",
                          empty="prompt variants not run")
    val = np.full((len(models), len(variants)), np.nan)
    nn = np.zeros_like(val)
    for j, (subset, _) in enumerate(variants):
        rows = _metric_rows(metrics, probe_set, "parse_rate", subset)
        for i, mdl in enumerate(models):
            if mdl in rows.index:
                val[i, j] = float(rows.loc[mdl, "point"]) if _fin(rows.loc[mdl, "point"]) else np.nan
                nn[i, j] = _n(rows.loc[mdl, "n"])
    cmap = matplotlib.colormaps["Greens"].with_extremes(bad="#eeeeee")
    im = ax.imshow(np.ma.masked_invalid(val), cmap=cmap, vmin=0, vmax=100, aspect="auto")
    for i in range(len(models)):
        for j in range(len(variants)):
            v = val[i, j]
            txt = f"{v:.1f}\nn = {int(nn[i, j]):,}" if np.isfinite(v) else f"N/A\nn = {int(nn[i, j]):,}"
            ax.text(j, i, txt, ha="center", va="center", fontsize=7,
                    color="white" if np.isfinite(v) and v > 60 else "black")
    ax.set_xticks(range(len(variants)))
    ax.set_xticklabels([v for _, v in variants])
    ax.set_yticks(range(len(models)))
    ax.set_yticklabels(models)
    _margins(fig, left=_text_in(models) + 0.2, right=0.3, bottom=0.4, top=0.3)
    fig.colorbar(im, ax=ax, label="parse rate (%)", shrink=0.8, fraction=0.08, pad=0.03)
    ax.set_title(f"Parse rate by prompt phrasing — {probe_set}")
    cap = (f"Parse rate (%) on {probe_set} for each prompt phrasing; the lower number in each cell is n, the cases "
           f"asked with that phrasing" + (" (default: all cases)" if variants[0][0] == "all" else "") + ".")
    return _captioned(fig, "Prompt phrasing", cap)


def _cross_rho(robustness: pd.DataFrame | None, metric: str) -> list[str]:
    if robustness is None or not len(robustness) or not {"kind", "metric", "rho"} <= set(robustness.columns):
        return []
    r = robustness[(robustness["kind"] == "cross_dataset") & (robustness["metric"] == metric)]
    out = []
    for _, row in r.iterrows():
        if _fin(row["rho"]):
            label = str(row["variant"]) if "variant" in r.columns and not is_missing(row["variant"]) else ""
            p = f", p {format_p(row['p'])}" if "p" in r.columns and _fin(row["p"]) else ""
            out.append(f"ρ = {float(row['rho']):.3f}{p}" + (f" ({label})" if label else ""))
    return out


@_styled
def cross_dataset_figure(metrics: pd.DataFrame, categories: pd.DataFrame, *, probe_sets: Sequence[str],
                         robustness: pd.DataFrame | None = None) -> Figure:
    """UAR and accuracy on the second probe set against the first, with intervals and the identity line (Fig. 6a,b)."""
    p1, p2 = probe_sets[0], probe_sets[1]
    info = _info(categories, metrics, p1)
    fig = _new_figure(9.0, 4.4)
    axes = fig.subplots(1, 2)
    caps = []
    ns: dict[str, dict[str, str]] = {}
    for ax, metric in zip(axes, ("uar", "accuracy")):
        a, b = _metric_rows(metrics, p1, metric), _metric_rows(metrics, p2, metric)
        both = [m for m in info if m in a.index and m in b.index and _fin(a.loc[m, "point"]) and _fin(b.loc[m, "point"])]
        px: list[float] = []
        py: list[float] = []
        pc: list[str] = []
        pm: list[str] = []
        xl: list[float] = []
        xh: list[float] = []
        yl: list[float] = []
        yh: list[float] = []
        for m in both:
            x, y = float(a.loc[m, "point"]), float(b.loc[m, "point"])
            color, marker = _style_of(info, m)
            px.append(x)
            py.append(y)
            pc.append(color)
            pm.append(marker)
            for lst, v in ((xl, a.loc[m, "ci_low"]), (xh, a.loc[m, "ci_high"]), (yl, b.loc[m, "ci_low"]),
                           (yh, b.loc[m, "ci_high"])):
                lst.append(float(v) if _fin(v) else np.nan)
            ax.text(x + 1.0, y + 1.0, m, fontsize=7)
        _marks(ax, px, py, pc, pm, x_lo=xl, x_hi=xh, y_lo=yl, y_hi=yh, size=40, lw=0.9)
        finite = [v for v in (*xl, *yl, *px, *py) if math.isfinite(v)]
        lo = max(0.0, math.floor((min(finite) - 5) / 10) * 10) if finite else 0.0
        ax.plot([lo, 100], [lo, 100], linestyle="--", color=_GREY, linewidth=0.8)
        ax.set_xlim(lo, 102)
        ax.set_ylim(lo, 102)
        ax.set_xlabel(f"{metric.upper() if metric == 'uar' else 'Accuracy'} on {p1} (%)")
        ax.set_ylabel(f"{metric.upper() if metric == 'uar' else 'Accuracy'} on {p2} (%)")
        rhos = _cross_rho(robustness, metric)
        if rhos:
            ax.text(0.03, 0.97, "Spearman " + "\n".join(rhos), transform=ax.transAxes, va="top", fontsize=7)
        if rhos:
            caps.append(f"{metric_words(metric)}: Spearman {'; '.join(rhos)}")
        for m in both:
            ns.setdefault(m, {})[f"{metric_words(metric)} n on {p1}"] = _nfmt(a.loc[m, "n"])
            ns[m][f"{metric_words(metric)} n on {p2}"] = _nfmt(b.loc[m, "n"])
    fig.suptitle(f"Cross-dataset transfer — {p1} vs {p2}", fontsize=9.5)
    _margins(fig, left=0.6, right=0.2, bottom=0.5, top=0.4, wspace=0.3)
    cap = (f"UAR and accuracy on {p2} against {p1}, with 95% intervals on both axes and the identity line; colour is "
           f"the category assigned on {p1}" + "".join(f". {c}" for c in caps) + "; n per model in the table below.")
    ntab = pd.DataFrame([{"model": m, **v} for m, v in ns.items()]).fillna("—") if ns else None
    return _captioned(fig, "Cross-dataset transfer", cap, n_table=ntab)


# ----------------------------------------------------------------------------------------------------------------


def model_order(analysis: Any) -> list[str]:
    """Models in first-seen order over categories, metrics and verdicts."""
    seen: dict[str, None] = {}
    for df in (analysis.categories, analysis.metrics):
        if isinstance(df, pd.DataFrame) and "model" in df.columns:
            for m in df["model"].tolist():
                if not is_missing(m):
                    seen.setdefault(str(m), None)
    for m in (analysis.verdicts or {}):
        seen.setdefault(str(m), None)
    return list(seen)


def probe_sets_of(analysis: Any) -> list[str]:
    """Probe sets in first-seen order over categories and metrics."""
    seen: dict[str, None] = {}
    for df in (analysis.categories, analysis.metrics):
        if isinstance(df, pd.DataFrame) and "probe_set" in df.columns:
            for p in df["probe_set"].tolist():
                if not is_missing(p):
                    seen.setdefault(str(p), None)
    return list(seen)


def figure_builders(analysis: Any) -> list[Callable[[], Figure]]:
    """A builder (no-argument callable) of every figure the analysis supports, per probe set, in report order;
    figures without data are left out. Nothing is drawn until a builder is called (the report may call them in
    worker processes: :func:`medvlm_audit.report.parallel.map_forked`)."""

    met, cats, comp = analysis.metrics, analysis.categories, analysis.comparisons
    if len(comp) and "test" in comp.columns:  # exact McNemar rows (p only) sit beside the tests, in the tables
        comp = comp[comp["test"] != "mcnemar-exact"]
    sweep, rob = analysis.threshold_sweep, analysis.robustness
    if not isinstance(sweep, pd.DataFrame):
        sweep = pd.DataFrame()
    if not isinstance(rob, pd.DataFrame):
        rob = pd.DataFrame()
    figs: list[Callable[[], Figure]] = []
    probe_sets = probe_sets_of(analysis)
    for ps in probe_sets:
        cps = cats[cats["probe_set"] == ps] if len(cats) else cats
        # occlusion figures need boxed cases: a box-free probe set (e.g. CheXpert) has CGR and IS on n = 0 for all
        boxed = len(cps) and (pd.to_numeric(cps["n_cgr"], errors="coerce").fillna(0).gt(0).any()
                              or pd.to_numeric(cps["n_is"], errors="coerce").fillna(0).gt(0).any())
        if boxed:
            figs.append(partial(triad_figure, cats, probe_set=ps))
        if boxed and _has_metric(met, ps, "gsp"):
            figs.append(partial(gsp_figure, met, cats, probe_set=ps))
        if _has_metric(met, ps, "uar"):
            figs.append(partial(uar_figure, met, cats, probe_set=ps))
        if _has_metric(met, ps, "sensitivity") and _has_metric(met, ps, "specificity"):
            figs.append(partial(sens_spec_figure, met, cats, probe_set=ps))
        if _has_metric(met, ps, "accuracy"):
            figs.append(partial(accuracy_figure, met, cats, comp, probe_set=ps))
        fc = met[(met["probe_set"] == ps) & (met["metric"] == "cgr")
                 & met["subset"].astype(str).str.startswith("finding=")]
        if len(fc) and pd.to_numeric(fc["n"], errors="coerce").fillna(0).gt(0).any():
            figs.append(partial(finding_heatmap_figure, met, probe_set=ps))
        fams = comp["family"].astype(str).unique().tolist() if len(comp) else []
        for metric, label in (("accuracy", "accuracy"), ("uar", "UAR")):
            fs = [f for f in fams if f.startswith(f"baseline:{ps}:{metric}:")]
            if fs:
                figs.append(partial(forest_figure, comp, families=fs, title=f"Paired {label} differences vs text-only "
                                                                   f"baselines — {ps}"))
        fs = [f for f in fams if f.startswith(f"pairs:{ps}:")]
        if fs:
            figs.append(partial(forest_figure, comp, families=fs, title=f"All pairwise differences — {ps}"))
        known = ("baseline:", "pairs:", "subgroups:", "robustness:")  # robustness rows are rank correlations
        fs = [f for f in fams if not f.startswith(known) and f":{ps}:" in f":{f}:"
              and comp.loc[comp["family"] == f, "diff"].map(_fin).any()]
        if fs:
            figs.append(partial(forest_figure, comp, families=fs, title=f"Other paired comparisons — {ps}"))
        if len(sweep) and "probe_set" in sweep.columns and (sweep["probe_set"] == ps).any():
            figs.append(partial(threshold_sweep_figure, sweep, cats, probe_set=ps))
        if any(_has_metric(met, ps, k) for k in ("auroc", "ece", "brier", "conf_grounded_correct",
                                                  "conf_ungrounded_correct", "conf_incorrect")):
            figs.append(partial(calibration_figure, met, cats, probe_set=ps))
        if ((met["probe_set"] == ps) & met["subset"].astype(str).str.match(r"^(sex|view|age)=")).any():
            figs.append(partial(subgroup_figure, met, comp, cats, probe_set=ps))
        if _has_metric(met, ps, "cgr", "res=512"):
            figs.append(partial(resolution_figure, met, cats, rob, probe_set=ps))
        if ((met["probe_set"] == ps) & (met["metric"] == "parse_rate")
                & met["subset"].astype(str).str.startswith("prompt=")).any():
            figs.append(partial(prompt_figure, met, probe_set=ps))
    if len(probe_sets) >= 2:
        figs.append(partial(cross_dataset_figure, met, cats, probe_sets=probe_sets, robustness=rob))
    return figs


def build_figures(analysis: Any) -> list[Figure]:
    """Every figure the analysis supports, per probe set, in report order; figures without data are left out."""
    return [build() for build in figure_builders(analysis)]
