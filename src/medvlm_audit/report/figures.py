"""Figure helpers shared by every suite's figures: a canvas without a layout engine, margins from label lengths,
batched points with whiskers, one house style, and the title and caption a figure function attaches to its Figure
(read back by :func:`caption_of` / :func:`figure_title` when the report embeds it)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import matplotlib
import numpy as np
import pandas as pd
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


class _FontFiles:
    """``matplotlib.ft2font`` as ``matplotlib.font_manager`` sees it, but the fonts it opens for drawing come from
    memory: FreeType reads a font through its file object a few bytes at a time, each read a seek and a read
    system call (the paper-sized grounding report: ~70,000 calls on DejaVuSans.ttf, issue 23), where every call
    is dearer in a sandbox such as gVisor. The same bytes, so the same glyphs. Only the fonts ``_get_font`` opens
    for drawing (it passes ``_kerning_factor``); fonts opened to be listed keep their path as ``fname``."""

    def __init__(self, module: Any) -> None:
        self._module = module
        self._data: dict[str, bytes] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)

    def FT2Font(self, filename: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N802 (matplotlib's name)
        import io
        import os

        if "_kerning_factor" in kwargs and isinstance(filename, (str, os.PathLike)):
            path = os.fspath(filename)
            if path not in self._data:
                with open(path, "rb") as f:
                    self._data[path] = f.read()
            filename = io.BytesIO(self._data[path])
        return self._module.FT2Font(filename, *args, **kwargs)


def fonts_from_memory() -> None:
    """Let matplotlib read the fonts it draws with from memory (:class:`_FontFiles`); once per process, before
    the first figure (a forked worker inherits the fonts already opened)."""
    from matplotlib import font_manager

    module = getattr(font_manager, "ft2font", None)
    if module is not None and not isinstance(module, _FontFiles) and callable(getattr(module, "FT2Font", None)):
        font_manager.ft2font = _FontFiles(module)  # type: ignore[assignment]
    # else: a matplotlib laid out otherwise reads its font files itself, as before (same glyphs, more reads)


fonts_from_memory()


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


@functools.lru_cache(maxsize=4096)
def text_width_in(text: str, size: float = 7.5) -> float:
    """Width in inches of one line of text in the house font (DejaVu Sans), measured from its glyphs."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    w, _, _ = TextToPath().get_text_width_height_descent(str(text), FontProperties(size=size), ismath=False)
    return float(w) / 72.0


def wrap_label(label: object, width: float, size: float = 7.5) -> str:
    r"""A label broken into lines at spaces (and after hyphens) so that each line is at most ``width`` inches wide
    at font ``size``; a word wider than that stays whole on its own line. Existing line breaks are kept.

    >>> wrap_label("occlusion-unstable\n(n = 300)", 0.9)
    'occlusion-\nunstable\n(n = 300)'
    >>> wrap_label("pulmonary edema", 0.8)
    'pulmonary\nedema'
    >>> wrap_label("Top-p 0.9, T = 1.0", 0.7)
    'Top-p 0.9,\nT = 1.0'
    >>> wrap_label("atelectasis", 0.2)
    'atelectasis'
    """
    import re

    def shown(text: str) -> str:
        return text.replace("\u00a0", " ").replace("\u0001", "-")

    out: list[str] = []
    for para in str(label).split("\n"):
        line = ""
        # "T = 1.0" and "n = 300" stay on one line, and so do "top-p" and "Top-k" (breaks only between longer parts)
        para = re.sub(r"(?<!\w{3})-|-(?!\w{3})", "\u0001", para.replace(" = ", "\u00a0=\u00a0"))
        for chunk in re.findall(r"[^ -]+-?[ ]*|-[ ]*", para):  # each word with its hyphen or following space
            trial = line + chunk.rstrip() if line else chunk.rstrip()
            if line and text_width_in(shown(trial), size) > width:
                out.append(line.rstrip())
                line = chunk
            else:
                line += chunk
        out.append(line.rstrip())
    return shown("\n".join(out))


def x_tick_labels(ax: Any, positions: Sequence[float], labels: Sequence[object], *, size: float | None = None,
                  gap: float = 0.08) -> int:
    """Horizontal x tick labels that never overlap, fitted to the space between neighbouring ticks on the axes as
    placed now (set the figure's left and right margins, and any colour bar, first):

    1. each label wrapped (:func:`wrap_label`) to the space between two ticks, when every line then fits;
    2. otherwise staggered: every other label one row lower, each wrapped to the space between two ticks of its
       own row (twice as wide);
    3. otherwise (a single word wider than that) every label stands vertical (rotation 90).

    Returns the height of the label block in text lines (a vertical block: its longest label, in lines of the
    same font), for the bottom margin (:func:`label_lines_in`)."""
    from matplotlib.font_manager import FontProperties

    size = float(size) if size is not None else FontProperties(size=matplotlib.rcParams["xtick.labelsize"]).get_size()
    pos = [float(p) for p in positions]
    if not pos:
        ax.set_xticks([])
        return 1
    lo, hi = ax.get_xlim()
    inch_per_unit = ax.get_position().width * ax.figure.get_figwidth() / max(abs(hi - lo), 1e-9)
    step = float(np.diff(sorted(pos)).min()) if len(pos) > 1 else abs(hi - lo)

    def widest(labs: Sequence[str]) -> float:
        return max((text_width_in(line, size) for lab in labs for line in lab.split("\n")), default=0.0)

    def nlines(labs: Sequence[str]) -> int:
        return max((lab.count("\n") + 1 for lab in labs), default=0)

    room = step * inch_per_unit - gap
    wrapped = [wrap_label(lab, room, size) for lab in labels]
    if widest(wrapped) <= room:
        ax.set_xticks(pos, wrapped, fontsize=size)
        return max(1, nlines(wrapped))
    room2 = 2 * step * inch_per_unit - gap
    wrapped = [wrap_label(lab, room2, size) for lab in labels]
    if widest(wrapped) <= room2:
        upper = nlines(wrapped[0::2])
        ax.set_xticks(pos, wrapped, fontsize=size)
        order = np.argsort(pos, kind="stable")
        ticks = ax.xaxis.get_major_ticks(len(pos))
        for rank, k in enumerate(order):
            if rank % 2:  # every other label in position order one row block lower
                ticks[k].set_pad(ticks[k].get_pad() + upper * size * 1.2)
        return upper + nlines(wrapped[1::2])
    ax.set_xticks(pos, [str(lab) for lab in labels], rotation=90, ha="center", fontsize=size)
    return max(1, math.ceil(widest([str(lab) for lab in labels]) * 72.0 / (size * 1.2)))


def label_lines_in(lines: int, size: float = 7.5) -> float:
    """Height in inches of ``lines`` lines of tick text at font ``size`` (matplotlib's 1.2 line spacing)."""
    return lines * size * 1.2 / 72.0


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


def captioned(fig: Figure, title: str, caption: str, *, n_table: pd.DataFrame | None = None,
              empty: str | None = None) -> Figure:
    """Attach the figure's short title and caption (a sentence or two) to it.

    ``n_table``: the counts behind the figure (e.g. n per model and condition) as a small DataFrame; the report
    shows it as a compact table under the figure instead of a long list in the caption. ``empty``: why the
    figure carries no information in this run (e.g. "not run"); the report then prints a one-line note instead
    of the image (see :func:`information`)."""
    fig._medvlm_title = title  # type: ignore[attr-defined]
    fig._medvlm_caption = caption  # type: ignore[attr-defined]
    fig._medvlm_n_table = n_table  # type: ignore[attr-defined]
    fig._medvlm_empty = empty  # type: ignore[attr-defined]
    return fig


def caption_of(fig: Figure) -> str:
    """The caption that a figure function attached to its Figure; '' for foreign figures."""
    return str(getattr(fig, "_medvlm_caption", ""))


def figure_title(fig: Figure) -> str:
    """The short title a figure function attached to its Figure; '' for foreign figures."""
    return str(getattr(fig, "_medvlm_title", ""))


def n_table_of(fig: Figure) -> pd.DataFrame | None:
    """The table of counts a figure function attached to its Figure (None when there is none)."""
    t = getattr(fig, "_medvlm_n_table", None)
    return t if isinstance(t, pd.DataFrame) and len(t) else None


# ----------------------------------------------------------------------------------------------------------------
# the "does this figure carry information" rule


def _finite_count(values: Any) -> int:
    a = np.ma.asarray(values, dtype=float)
    if a.ndim == 0:
        a = a.reshape(1)
    data = np.ma.filled(a, np.nan)
    if data.ndim > 1 and data.shape[-1] == 2:  # (n, 2) offsets: a point counts when both coordinates are finite
        return int(np.isfinite(data).all(axis=-1).sum())
    return int(np.isfinite(data).sum())


def panel_marks(ax: Any) -> int:
    """Data marks on one panel: finite scatter points, finite heatmap cells, bars of finite size, and the finite
    vertices of lines drawn with markers or solid. Reference lines (axhline / axvline, dashed or dotted lines such
    as an identity line), whiskers, shading and text are not data marks."""
    from matplotlib.collections import PathCollection, QuadMesh
    from matplotlib.container import BarContainer
    from matplotlib.image import AxesImage

    n = 0
    for coll in ax.collections:
        if isinstance(coll, PathCollection):
            n += _finite_count(coll.get_offsets())
        elif isinstance(coll, QuadMesh):
            n += _finite_count(coll.get_array())
    for im in ax.images:
        if isinstance(im, AxesImage):
            n += _finite_count(im.get_array())
    for cont in ax.containers:
        if isinstance(cont, BarContainer):
            n += sum(1 for r in cont.patches if np.isfinite(r.get_width()) and np.isfinite(r.get_height()))
    for line in ax.lines:
        if line.get_transform() != ax.transData:
            continue  # axhline / axvline: in axes coordinates
        xy = np.asarray(line.get_xydata(), float)  # unit-converted (categorical axes give numbers)
        k = int(np.isfinite(xy).all(axis=1).sum())
        if line.get_marker() not in (None, "None", "", " ") or line.get_linestyle() in ("-", "solid"):
            n += k
    return n


def _named_axis(axis: Any) -> bool:
    """Whether an axis names positions (category ticks, or tick labels set by hand) rather than measuring."""
    from matplotlib.category import StrCategoryFormatter
    from matplotlib.ticker import FixedFormatter, FixedLocator, FuncFormatter

    fmt = axis.get_major_formatter()
    if isinstance(fmt, FixedFormatter | StrCategoryFormatter):
        return True
    # set_yticks(positions, labels) keeps the labels in a FuncFormatter over a FixedLocator
    return isinstance(fmt, FuncFormatter) and isinstance(axis.get_major_locator(), FixedLocator)


def panel_values(ax: Any) -> np.ndarray:
    """The finite data values a panel shows (the marks :func:`panel_marks` counts): heatmap cells, bar lengths,
    and the coordinates of points and data lines on each axis that measures (an axis of named positions, such as
    the model axis of a forest plot, carries none); a data line's x positions count only when its y axis names
    positions (a line's x is where, its y is what)."""
    from matplotlib.collections import PathCollection, QuadMesh
    from matplotlib.container import BarContainer
    from matplotlib.image import AxesImage

    vals: list[np.ndarray] = []

    def add(a: Any) -> None:
        d = np.ma.filled(np.ma.asarray(a, dtype=float), np.nan).ravel()
        vals.append(d[np.isfinite(d)])

    measured = [not _named_axis(ax.xaxis), not _named_axis(ax.yaxis)]
    for coll in ax.collections:
        if isinstance(coll, PathCollection):
            xy = np.asarray(np.ma.filled(np.ma.asarray(coll.get_offsets(), dtype=float), np.nan), float)
            if xy.ndim == 2 and xy.shape[-1] == 2:
                xy = xy[np.isfinite(xy).all(axis=1)]
                for k in (0, 1):
                    if measured[k]:
                        add(xy[:, k])
                if not any(measured) and coll.get_array() is not None:  # a dot grid: the colour is the value
                    add(coll.get_array())
        elif isinstance(coll, QuadMesh):
            add(coll.get_array())
    for im in ax.images:
        if isinstance(im, AxesImage):
            add(im.get_array())
    for cont in ax.containers:
        if isinstance(cont, BarContainer):
            horizontal = getattr(cont, "orientation", "vertical") == "horizontal"
            add([r.get_width() if horizontal else r.get_height() for r in cont.patches])
    for line in ax.lines:
        if line.get_transform() != ax.transData:
            continue
        if line.get_marker() in (None, "None", "", " ") and line.get_linestyle() not in ("-", "solid"):
            continue
        xy = np.asarray(line.get_xydata(), float)
        xy = xy[np.isfinite(xy).all(axis=1)]
        if measured[1]:
            add(xy[:, 1])
        elif measured[0]:
            add(xy[:, 0])
    return np.concatenate(vals) if vals else np.zeros(0)


def _same_value(v: float) -> str:
    return f"{v:.1f}" if abs(v) >= 1 or v == 0 else f"{v:.3g}"


def information(fig: Figure) -> tuple[str, str]:
    """How much a figure tells in this run, the one rule every report applies (report.html.figure_to_html):

    - ``("none", why)``: the figure function declared it empty (``captioned(..., empty=why)``: not run, not
      computed), or no panel holds a data mark (every value nan or missing). Not drawn: a one-line note instead.
    - ``("none", why)`` too when the figure holds at least two data marks and every value it shows is one and
      the same number (e.g. every cell 100.0): nothing varies, so one sentence says the value instead
      (values: :func:`panel_values`).
    - ``("little", why)``: no panel holds more than one data mark (a single point per panel). Drawn, but
      collapsed in a ``<details>`` block.
    - ``("full", "")``: anything else; drawn as usual.

    Data marks are counted by :func:`panel_marks` (colour bars and legends are not panels with data)."""
    declared = getattr(fig, "_medvlm_empty", None)
    if declared:
        return "none", str(declared)
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    counts = [panel_marks(ax) for ax in panels]
    if not counts or max(counts) == 0:
        return "none", "no estimable value in this run"
    if sum(counts) >= 2:
        vals = np.concatenate([panel_values(ax) for ax in panels])
        if len(vals) >= 2 and np.allclose(vals, vals[0], rtol=0, atol=1e-9 * max(1.0, abs(float(vals[0])))):
            return "none", f"every value it would show is {_same_value(float(vals[0]))} (nothing varies)"
    if max(counts) == 1:
        return "little", "one value per panel"
    return "full", ""


# ----------------------------------------------------------------------------------------------------------------
# keys in words


def key_in_words(key: object, labels: Mapping[str, str] | None = None,
                 templates: Mapping[str, str] | None = None) -> str:
    """A machine key (a comparison family, a condition, a metric) in words, for titles, axis labels and legends.

    The key is split at ``|`` (a variant, shown in parentheses) and ``:`` (its parts); each part is looked up in
    ``labels`` (unknown parts: underscores become spaces). When the first part names one of ``templates``, the
    template formats the labelled parts ({1}, {2}, ... after the first); otherwise the parts are joined with ", ".

    >>> key_in_words("baseline:phantom:accuracy:finding-prior|mcnemar",
    ...              {"accuracy": "Accuracy", "mcnemar": "exact McNemar test", "finding-prior": "finding prior"},
    ...              {"baseline": "{2} on {1}: each model vs {3}"})
    'Accuracy on phantom: each model vs finding prior (exact McNemar test)'
    >>> key_in_words("flip_rate")
    'Flip rate'
    """
    labels = dict(labels or {})
    templates = dict(templates or {})
    text = str(key)
    base, _, variant = text.partition("|")
    if base in labels:
        words = labels[base]
    else:
        parts = base.split(":")
        named = [labels.get(p, p.replace("_", " ")) for p in parts]
        if parts[0] in templates:
            words = templates[parts[0]].format(*named, *[""] * 8).strip(" :,")
        else:
            words = ", ".join(named) if len(parts) > 1 else named[0]
    if variant:
        words += f" ({labels.get(variant, variant.replace('_', ' '))})"
    return words[:1].upper() + words[1:]


def styled(func: Callable[..., Figure]) -> Callable[..., Figure]:
    def wrapper(*args: Any, **kwargs: Any) -> Figure:
        with matplotlib.rc_context(STYLE):  # type: ignore[arg-type]
            return func(*args, **kwargs)

    wrapper.__name__ = func.__name__
    wrapper.__doc__ = func.__doc__
    wrapper.__wrapped__ = func  # type: ignore[attr-defined]
    return wrapper


