"""A report section: a title plus ready HTML, so any suite can add its own figures and tables to a report."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from medvlm_audit.report.html import figure_to_html, is_missing, table_to_html

__all__ = ["Section", "compact_table_html", "figure_to_html", "table_to_html"]


@dataclass(frozen=True)
class Section:
    """One titled block of a report; ``html`` is trusted markup built with figure_to_html / table_to_html."""

    title: str
    html: str
    anchor: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.title, str) or not self.title.strip():
            raise ValueError("Section.title must be a non-empty string")
        if not isinstance(self.html, str):
            raise TypeError(f"Section {self.title!r}: html must be a str, got {type(self.html).__name__}")
        if not self.anchor:
            slug = re.sub(r"[^a-z0-9]+", "-", self.title.lower()).strip("-") or "section"
            object.__setattr__(self, "anchor", slug)


def compact_table_html(
    df: pd.DataFrame,
    *,
    keys: Sequence[str] = ("model",),
    notes: Sequence[str] = ("note", "reason"),
    max_columns: int = 8,
    groups: Sequence[tuple[str, Sequence[str]]] = (),
    drop_constant: bool = True,
    caption: str | None = None,
    table_id: str | None = None,
    formatters: Mapping[str, Callable[[Any], str]] | None = None,
    html_columns: Iterable[str] = (),
) -> str:
    """A table that fits a 1280 px page: the one way every suite shows a wide table.

    - columns with one value in every row (and at least two rows) are dropped and named once above the table;
    - long note columns (``notes``: any cell over 40 characters) become numbered markers, the notes a list under
      the table (identical notes share a number), so no row grows tall around a wrapped note;
    - more than ``max_columns`` columns are split into several tables, each repeating the ``keys`` columns;
      ``groups`` ((caption, columns) pairs) choose the split and its captions instead.

    ``drop_constant=False`` keeps one-valued columns (e.g. a metric that happens to be equal for every model).

    The CSV files keep every column; this only shapes the page.
    """
    d = df.copy()
    blank = [c for c in d.columns if d[c].map(lambda v: is_missing(v) or not str(v).strip()).all()]
    d = d.drop(columns=blank) if len(d) else d  # a column with nothing in it says nothing
    keys = [k for k in keys if k in d.columns]
    intro: list[str] = []
    if len(d) >= 2 and drop_constant:
        for c in list(d.columns):
            if c in keys:
                continue
            vals = d[c].map(lambda v: "" if is_missing(v) else str(v))
            if vals.nunique() == 1:
                if vals.iloc[0]:
                    intro.append(f"{c}: {vals.iloc[0]}")
                d = d.drop(columns=c)
    foot: dict[str, int] = {}
    for c in [c for c in notes if c in d.columns]:
        texts = d[c].map(lambda v: "" if is_missing(v) else str(v).strip())
        if texts.map(len).max() <= 40:
            continue
        marks = []
        for t in texts:
            if t:
                foot.setdefault(t, len(foot) + 1)
                marks.append(f"[{foot[t]}]")
            else:
                marks.append("")
        d[c] = marks
    others = [c for c in d.columns if c not in keys]
    width = max(1, max_columns - len(keys))
    if groups:
        named = [(cap, [c for c in cols if c in others]) for cap, cols in groups]
        rest = [c for c in others if not any(c in cols for _, cols in named)]
        named = [(cap, cols) for cap, cols in named if cols] + ([("Other columns", rest)] if rest else [])
    else:
        named = [("", others[i:i + width]) for i in range(0, len(others), width)] or [("", [])]
    chunks = [cols for _, cols in named]
    from medvlm_audit.report.render import macro

    out: list[str] = []
    if intro:
        out.append(str(macro("same_in_every_row")("; ".join(intro))))
    for k, (group_cap, cols) in enumerate(named, 1):
        cap = caption
        if group_cap:
            cap = f"{caption}: {group_cap}" if caption else group_cap
        elif len(chunks) > 1:
            cap = f"{caption or 'Table'} (part {k} of {len(chunks)})"
        tid = table_id if k == 1 or not table_id else f"{table_id}-{k}"
        out.append(table_to_html(d[[*keys, *cols]], caption=cap, table_id=tid, formatters=formatters,
                                 html_columns=html_columns))
    if foot:
        out.append(str(macro("table_notes")(list(foot))))
    return "".join(out)
