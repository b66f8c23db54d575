"""Reports: one page template, one stylesheet and one writer for every suite.

A suite's analysis returns a :class:`~medvlm_audit.results.SuiteResult` (metrics in the shared long schema,
comparisons, ``Section(title, html)`` blocks built with :func:`figure_to_html` / :func:`table_to_html`, extra
tables, a summary); :func:`write_report` renders it to a self-contained report.html (inline figures, no
network) plus the tables and summary.json. Every page renders from ``report/templates/`` through the one Jinja2
environment of :mod:`medvlm_audit.report.render` (autoescape on); a section's own markup is best written with
:func:`snippet`, which escapes every value.
"""

from __future__ import annotations

from medvlm_audit.report.html import format_estimate, format_p, render_page
from medvlm_audit.report.render import snippet, trusted
from medvlm_audit.report.sections import Section, figure_to_html, table_to_html
from medvlm_audit.report.write import report_files, validate_result, write_report

__all__ = [
    "Section",
    "figure_to_html",
    "format_estimate",
    "format_p",
    "render_page",
    "report_files",
    "snippet",
    "table_to_html",
    "trusted",
    "validate_result",
    "write_report",
]
