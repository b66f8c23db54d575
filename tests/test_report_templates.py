"""Every HTML page renders through the one Jinja2 environment (report/render.py): autoescape on, one stylesheet.

A hostile value (a model name, a note, a caption, a section title, a reader-study label) must reach every page
escaped; only markup built by the helpers passes as is. The run report and the reader-study report carry the same
stylesheet, and the reader app's templates load through the same environment.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from medvlm_audit.report import render as R
from medvlm_audit.report.html import (
    badge,
    failing_models_html,
    figure_to_html,
    render_page,
    table_to_html,
    verdict_list,
)
from medvlm_audit.report.sections import Section, compact_table_html

EVIL = '<script>alert("x")</script>'


def _no_raw_script(page: str) -> None:
    assert "<script" not in page.lower(), page[page.lower().index("<script") - 200:][:400]


def test_environment_autoescapes_and_is_shared() -> None:
    env = R.environment()
    assert env is R.environment()  # one cached environment
    assert env.autoescape is True
    out = env.from_string("{{ v }}").render(v=EVIL)
    assert out == "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;"
    assert env.from_string("{{ v }}").render(v=R.trusted("<b>ok</b>")) == "<b>ok</b>"


def test_snippet_escapes_values_and_keeps_trusted_markup() -> None:
    from medvlm_audit.report import snippet, trusted

    out = snippet("<p>{{ who }} said {{ what }}</p>{{ fig }}", who=EVIL, what="a & b", fig=trusted("<svg></svg>"))
    assert out == "<p>&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; said a &amp; b</p><svg></svg>"
    assert type(out) is str  # plain text: concatenating it with other markup does not escape it again


def test_undefined_name_in_a_template_is_an_error() -> None:
    import jinja2

    with pytest.raises(jinja2.UndefinedError):
        R.environment().from_string("{{ missing }}").render()


def test_table_escapes_cells_headers_caption_but_not_trusted_columns() -> None:
    df = pd.DataFrame({EVIL: [EVIL], "badge": [badge("ok", {"ok": "#2e7d32"})]})
    out = table_to_html(df, caption=EVIL, table_id='t"1', html_columns=["badge"])
    _no_raw_script(out)
    assert out.count("&lt;script&gt;") == 3  # header, cell, caption
    assert '<span class="badge" style="background:#2e7d32">ok</span>' in out  # trusted markup kept
    assert 'id="t&#34;1"' in out
    # a long cell wraps (class "long"), a short one stays on one line
    long = table_to_html(pd.DataFrame({"a": ["w " * 40, "short"]}))
    assert long.count('<td class="long">') == 1 and "<td>short</td>" in long


def test_table_never_prints_nan_and_says_when_rows_are_cut() -> None:
    out = table_to_html(pd.DataFrame({"x": [float("nan"), 1.5, 2.0, 3.0]}), max_rows=2)
    assert "nan" not in out.lower() and "<td>—</td>" in out
    assert '<p class="muted">First 2 of 4 rows shown; all rows are in the CSV.</p>' in out


def test_helpers_escape_their_values() -> None:
    _no_raw_script(verdict_list([(EVIL, badge(EVIL), EVIL)]))
    _no_raw_script(badge(EVIL, {EVIL: "#fff"}))
    summary = {"per_model": {EVIL: {"asked": 10, "errors": 10, "error_kinds": {
        "connection": {"n": 10, "sample": EVIL}}}}}
    failed = failing_models_html(summary)
    assert failed.startswith('<div class="failed" role="alert">') and failed.count("&lt;script&gt;") == 2
    _no_raw_script(failed)
    wide = pd.DataFrame({"model": ["a", "b"], "same": [EVIL, EVIL], "note": [EVIL * 3, ""]})
    out = compact_table_html(wide)
    _no_raw_script(out)
    assert "Same in every row: same: &lt;script&gt;" in out and '<ol class="tnotes"><li>&lt;script' in out


def test_figure_caption_and_title_escaped() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0, 1, 2], [1, 3, 2])
    out = figure_to_html(fig, caption=EVIL + " (n = 3)", title=EVIL, number=4)
    plt.close(fig)
    _no_raw_script(out)
    assert out.startswith('<figure class="fig"><svg ')
    assert "<figcaption><strong>Figure 4. &lt;script&gt;" in out


def test_page_escapes_every_value_and_inlines_the_one_stylesheet() -> None:
    run_info = {"run_id": EVIL, "config": {"models": [{"name": EVIL, "backend": EVIL}], EVIL: EVIL},
                "last_summary": {"per_model": {EVIL: {"asked": 4, "errors": 4}}}, EVIL: EVIL}
    sections = [Section(EVIL, "<p>trusted body</p>", "verdicts"), Section("Other " + EVIL, "<p>x</p>")]
    page = render_page(title=EVIL, sections=sections, run_info=run_info, summary={"notes": [EVIL]},
                       intro="<p>how</p>")
    _no_raw_script(page)
    assert page.startswith("<!DOCTYPE html>")
    assert f"<style>\n{R.stylesheet()}</style>" in page
    assert "<p>trusted body</p>" in page and "<p>how</p>" in page  # section bodies are trusted markup
    assert '<details class="runinfo">' in page and '<div class="failed" role="alert">' in page
    assert '<div class="notes"><strong>Analysis notes</strong>' in page
    assert '<nav class="toc"><a href="#other-script-alert-x-script">' in page
    assert "<link" not in page and "http" not in page.split("<footer>")[0].split("</style>")[1]


def test_stylesheet_is_one_file_not_a_string_in_python() -> None:
    css = R.stylesheet()
    assert css.lstrip().startswith(":root{") and "table.tbl" in css
    src = Path(R.__file__).with_name("html.py").read_text()
    assert "table.tbl th" not in src and "<style>" not in src


def test_reader_study_report_uses_the_run_report_page(tmp_path: Path) -> None:
    from medvlm_audit.readers.analysis import ReaderAnalysis, write_analysis

    res = ReaderAnalysis(metrics=pd.DataFrame(), comparisons=pd.DataFrame(),
                         sections=[Section("Agreement " + EVIL, table_to_html(pd.DataFrame({"r": [EVIL]})))])
    page = write_analysis(res, tmp_path)["readers-report.html"].read_text()
    _no_raw_script(page)
    assert f"<style>\n{R.stylesheet()}</style>" in page  # styled like the run report, not browser-default Times
    assert "<header><h1>Reader study</h1></header>" in page and "<footer>" in page
    assert "Run details and configuration" not in page  # not one run's report


def test_reader_app_templates_load_through_the_same_environment() -> None:
    pytest.importorskip("starlette")
    from medvlm_audit.readers.app import _env

    env = _env()
    assert env.autoescape is True and env.undefined is R.environment().undefined
    # an overlay of the shared factory's (cached) environment that reads its templates once
    assert env.linked_to is R.environment("medvlm_audit.readers") and env.auto_reload is False
    names = set(env.list_templates())
    assert {"read.html", "base.html", "page.html", "macros.html", "style.css"} <= names


def test_a_package_whose_template_shadows_the_report_is_refused(tmp_path: Path, monkeypatch) -> None:
    pkg = tmp_path / "shadowing_pkg"
    (pkg / "templates").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "templates" / "page.html").write_text("<p>mine</p>")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match=r"shadowing_pkg reuse the report's template names \['page.html'\]"):
        R.environment("shadowing_pkg")


def test_import_does_not_load_jinja2() -> None:
    code = ("import sys, medvlm_audit, medvlm_audit.report, medvlm_audit.report.html; "
            "print('jinja2' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
