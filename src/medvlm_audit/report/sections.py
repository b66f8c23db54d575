"""A report section: a title plus ready HTML, so any suite can add its own figures and tables to a report."""

from __future__ import annotations

import re
from dataclasses import dataclass

from medvlm_audit.report.html import figure_to_html, table_to_html

__all__ = ["Section", "figure_to_html", "table_to_html"]


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
