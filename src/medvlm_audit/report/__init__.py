"""Reports: self-contained HTML (inline SVG figures, no network) plus tidy tables and a JSON summary.

Other suites add their own material as ``Section(title, html)`` built with ``figure_to_html`` / ``table_to_html``.
"""

from __future__ import annotations

from medvlm_audit.suites.grounding.figures import build_figures, caption_of, figure_title
from medvlm_audit.report.html import format_estimate, format_p, render_report_html
from medvlm_audit.report.sections import Section, figure_to_html, table_to_html
from medvlm_audit.report.write import REPORT_FILES, validate_analysis, write_report

__all__ = [
    "REPORT_FILES",
    "Section",
    "build_figures",
    "caption_of",
    "figure_title",
    "figure_to_html",
    "format_estimate",
    "format_p",
    "render_report_html",
    "table_to_html",
    "validate_analysis",
    "write_report",
]
