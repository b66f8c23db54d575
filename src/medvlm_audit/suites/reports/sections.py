"""Figures of the report audit: the CAD scatter per strategy and the vocabulary-size and transition bars.
matplotlib (``report.figures``) is imported inside the figure functions: the analysis imports this module."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

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
            stable = (g["category"] == "stable").to_numpy()
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
                     "no displacement. Colour: ungated category; hollow: not significant after BH (gated 'stable'). "
                     "n: the words in each panel, in the table below.", n_table=counts)


def vocabulary_transition_figure(table: pd.DataFrame, reference_vocab: int, model: str,
                                 labels: Mapping[str, str] | None = None) -> Any:
    """Bars per strategy: vocabulary size of the model's reports (line: the reference's), and the CAD category
    counts (ungated, solid; gated, hatched)."""
    from medvlm_audit.report.figures import captioned, margins, new_figure

    d = table[table["model"] == model]
    strategies = [_label(s, labels) for s in d["strategy"].tolist()]
    x = np.arange(len(strategies))
    fig = new_figure(min(9.0, max(6.0, 1.5 * len(strategies))), 3.0)
    margins(fig, left=0.65, right=0.1, bottom=0.75, top=0.35, wspace=0.35)
    ax = fig.add_subplot(1, 2, 1)
    ax.bar(x, d["vocabulary_size"].to_numpy(dtype=float), color="#5d6d7e")
    ax.axhline(reference_vocab, color="#c0392b", lw=0.8, ls="--", label="reference corpus")
    ax.set_xticks(x, strategies, rotation=40, ha="right")
    ax.set_ylabel("distinct words")
    ax.set_title("Vocabulary size", fontsize=8)
    ax.legend(fontsize=7, frameon=False)
    ax2 = fig.add_subplot(1, 2, 2)
    w = 0.8 / len(CATEGORY_ORDER)
    for j, cat in enumerate(CATEGORY_ORDER):
        off = (j - (len(CATEGORY_ORDER) - 1) / 2) * w
        ax2.bar(x + off, d[f"{cat}_count_ungated"].to_numpy(dtype=float), w, color=CATEGORY_COLORS[cat],
                label=cat.replace("_", " "))
        ax2.bar(x + off, d[f"{cat}_count"].to_numpy(dtype=float), w, color="none", edgecolor="black", hatch="///",
                lw=0.4)
    ax2.set_xticks(x, strategies, rotation=40, ha="right")
    ax2.set_ylabel("words")
    ax2.set_title("CAD transitions (hatched: BH-gated)", fontsize=8)
    ax2.legend(fontsize=7.5, frameon=False, ncols=2)
    return captioned(fig, f"Vocabulary and CAD transitions by strategy, {model}",
                     "Left: distinct words in the model's reports per strategy against the reference corpus. "
                     "Right: words per CAD category, ungated (bars) and significant after BH (hatched).")
