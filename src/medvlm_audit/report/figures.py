"""Figure helpers shared by every suite's figures: a canvas without a layout engine, margins from label lengths,
batched points with whiskers, one house style, and the title and caption a figure function attaches to its Figure
(read back by :func:`caption_of` / :func:`figure_title` when the report embeds it)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

STYLE: dict[str, Any] = {
    "font.size": 8.5,
    "axes.titlesize": 9.5,
    "axes.labelsize": 8.5,
    "xtick.labelsize": 7.5,
    "ytick.labelsize": 7.5,
    "legend.fontsize": 7.5,
    "axes.spines.top": False,
    "axes.spines.right": False,
}


# ----------------------------------------------------------------------------------------------------------------
# captions and small helpers


def new_figure(width: float, height: float) -> Figure:
    # no layout engine: margins are set from label lengths (margins), which renders ~3x faster than constrained
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def text_in(labels: Iterable[object], size: float = 7.5) -> float:
    """Estimated width in inches of the longest label (DejaVu Sans averages ~0.6 em per character)."""
    longest = max((len(line) for lab in labels for line in str(lab).split("\n")), default=0)
    return longest * size * 0.6 / 72.0


def margins(fig: Figure, *, left: float = 0.6, right: float = 0.2, bottom: float = 0.5, top: float = 0.35,
             hspace: float | None = None, wspace: float | None = None) -> None:
    """Set the subplot margins in inches."""
    w, h = fig.get_size_inches()
    left, right = min(left, 0.6 * w), min(right, 0.35 * w)
    bottom, top = min(bottom, 0.45 * h), min(top, 0.3 * h)
    fig.subplots_adjust(left=left / w, right=1 - right / w, bottom=bottom / h, top=1 - top / h, hspace=hspace,
                        wspace=wspace)


def marks(
    ax: Any,
    xs: Sequence[float],
    ys: Sequence[float],
    colors: Sequence[str],
    markers: Sequence[str],
    *,
    x_lo: Sequence[float] | None = None,
    x_hi: Sequence[float] | None = None,
    y_lo: Sequence[float] | None = None,
    y_hi: Sequence[float] | None = None,
    size: float = 42.0,
    lw: float = 1.3,
) -> None:
    """Points with optional interval whiskers, drawn in a few batched artists (one per marker shape)."""
    if not len(xs):
        return
    x, y = np.asarray(xs, float), np.asarray(ys, float)
    cols = list(colors)
    if x_lo is not None and x_hi is not None:
        lo, hi = np.asarray(x_lo, float), np.asarray(x_hi, float)
        ok = np.isfinite(lo) & np.isfinite(hi)
        if ok.any():
            ax.hlines(y[ok], lo[ok], hi[ok], colors=[c for c, k in zip(cols, ok) if k], linewidth=lw, zorder=2)
    if y_lo is not None and y_hi is not None:
        lo, hi = np.asarray(y_lo, float), np.asarray(y_hi, float)
        ok = np.isfinite(lo) & np.isfinite(hi)
        if ok.any():
            ax.vlines(x[ok], lo[ok], hi[ok], colors=[c for c, k in zip(cols, ok) if k], linewidth=lw, zorder=2)
    for m in dict.fromkeys(markers):
        idx = [k for k, mk in enumerate(markers) if mk == m]
        ax.scatter(x[idx], y[idx], c=[cols[k] for k in idx], marker=m, s=size, edgecolors="black",
                   linewidths=0.5, zorder=3)


def captioned(fig: Figure, title: str, caption: str) -> Figure:
    fig._medvlm_title = title  # type: ignore[attr-defined]
    fig._medvlm_caption = caption  # type: ignore[attr-defined]
    return fig


def caption_of(fig: Figure) -> str:
    """The caption (with its n) that a figure function attached to its Figure; '' for foreign figures."""
    return str(getattr(fig, "_medvlm_caption", ""))


def figure_title(fig: Figure) -> str:
    """The short title a figure function attached to its Figure; '' for foreign figures."""
    return str(getattr(fig, "_medvlm_title", ""))


def styled(func: Callable[..., Figure]) -> Callable[..., Figure]:
    def wrapper(*args: Any, **kwargs: Any) -> Figure:
        with matplotlib.rc_context(STYLE):  # type: ignore[arg-type]
            return func(*args, **kwargs)

    wrapper.__name__ = func.__name__
    wrapper.__doc__ = func.__doc__
    wrapper.__wrapped__ = func  # type: ignore[attr-defined]
    return wrapper


