"""Every registered suite's embedded-default report in a real headless Chromium at 1280 px: no horizontal page
scrolling, no figure text under 10 px (an SVG text's font size times the SVG's rendered scale), no table wider
than its box (no table scrolls sideways) and no table row taller than ROW_MAX_PX (a long note squeezed into a
narrow column), captions of a sentence or two (n lists go to the counts table under the figure), no figure
text that is a raw key (``baseline:phantom:accuracy:finding-prior``), no drawn placeholder figure ("not
computed", "not run": those are one-line notes) and no two texts of one figure overlapping on the page (OVERLAPS:
their rendered boxes share more than 1 x 2 px). The first screen of each report is saved as
docs/report-SUITE.png when MEDVLM_REPORT_SCREENSHOTS is set (a folder).

Needs Debian's chromium and chromium-driver and selenium; skipped with the reason when the browser is missing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from headless import BROWSER_MARKS, chromium

pytestmark = BROWSER_MARKS
webdriver = pytest.importorskip("selenium.webdriver")


from medvlm_audit import api
from medvlm_audit.suites import suite_names

SCREENSHOTS = os.environ.get("MEDVLM_REPORT_SCREENSHOTS")  # e.g. docs
#: small embedded defaults, so each suite's report renders in seconds
FLAGS: dict[str, dict[str, int]] = {"grounding": {"n_cases": 300, "n_train": 900}}

#: the longest figure caption (characters after "Figure N. Title."): a sentence or two, n lists in a table
MAX_CAPTION = 500
#: the tallest table row: two or three lines of text, not a note wrapped into a narrow column
ROW_MAX_PX = 60

MEASURE = r"""
const doc = document.documentElement;
const rawKey = /^[\w.-]+:[\w.-]+:[\w.-]+/;
const placeholder = /not computed|not run\b|no comparisons were computed/i;
const small = [], raw = [], longCaps = [], wide = [], tall = [], drawnEmpty = [];
for (const t of document.querySelectorAll('svg text')) {
  if (rawKey.test(t.textContent.trim())) raw.push(t.textContent.slice(0, 60));
}
for (const c of document.querySelectorAll('figure.fig > figcaption')) {
  const head = c.querySelector('strong') ? c.querySelector('strong').textContent : '';
  const body = c.textContent.slice(head.length).trim();
  if (body.length > MAX_CAPTION) longCaps.push([head, body.length]);
  if (placeholder.test(body)) drawnEmpty.push(head + ' ' + body.slice(0, 80));
}
for (const t of document.querySelectorAll('table')) {
  const box = t.closest('.tblwrap') || t.parentElement;
  const name = t.id || (t.querySelector('caption') || t.querySelector('th') || {textContent: '?'}).textContent;
  const visible = t.getBoundingClientRect().width > 0;  // tables in closed <details> are not laid out
  if (visible && t.getBoundingClientRect().width > box.clientWidth + 1)
    wide.push([name.slice(0, 50), Math.round(t.getBoundingClientRect().width), box.clientWidth]);
  for (const tr of t.querySelectorAll('tbody tr')) {
    const h = tr.getBoundingClientRect().height;
    if (h > ROW_MAX_PX) { tall.push([name.slice(0, 50), Math.round(h), tr.textContent.slice(0, 60)]); break; }
  }
}
for (const svg of document.querySelectorAll('svg')) {
  const fig = svg.closest('figure');
  const cap = fig && fig.querySelector('figcaption') ? fig.querySelector('figcaption').textContent : '';
  for (const t of svg.querySelectorAll('text')) {
    if (!t.textContent.trim()) continue;
    const m = t.getScreenCTM();
    if (!m) continue;
    const px = parseFloat(getComputedStyle(t).fontSize) * Math.hypot(m.a, m.b);
    if (px < 10) small.push([cap.slice(0, 40), t.textContent.slice(0, 30), Math.round(px * 10) / 10]);
  }
}
return {scrollWidth: doc.scrollWidth, clientWidth: doc.clientWidth, small: small, raw: raw, longCaps: longCaps,
        wide: wide, tall: tall, drawnEmpty: drawnEmpty, svgs: document.querySelectorAll('svg').length};
""".replace("MAX_CAPTION", str(MAX_CAPTION)).replace("ROW_MAX_PX", str(ROW_MAX_PX))


#: pairs of texts of one figure whose rendered boxes overlap (more than 1 px across and 2 px down: a glyph box's
#: ascent and descent padding may touch its neighbour's on a tight line)
OVERLAPS = r"""
const out = [];
for (const svg of document.querySelectorAll('svg')) {
  const fig = svg.closest('figure');
  const cap = fig ? fig.querySelector('figcaption') : null;
  const first = svg.querySelector('text');
  const head = cap ? (cap.querySelector('strong') || cap).textContent : first ? first.textContent : '';
  const boxes = [];
  for (const t of svg.querySelectorAll('text')) {
    if (!t.textContent.trim()) continue;
    const r = t.getBoundingClientRect();
    if (r.width > 0) boxes.push([t.textContent.slice(0, 30), r]);
  }
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const a = boxes[i][1], b = boxes[j][1];
    const w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
    const h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
    if (w > 1 && h > 2) out.push([head.slice(0, 40), boxes[i][0], boxes[j][0]]);
  }
}
return out;
"""


def _browser() -> webdriver.Chrome:
    return chromium("1280,900", "--hide-scrollbars", "--force-device-scale-factor=1")


@pytest.fixture(scope="module")
def browser():
    b = _browser()
    yield b
    b.quit()


def _embedded_report(suite: str, out: Path) -> Path:
    res = api.demo(suite, out, progress=False, log=lambda *_: None, with_report=False, **FLAGS.get(suite, {}))
    return api.report(res.run_dir, B=200)


@pytest.mark.slow
@pytest.mark.parametrize("suite", suite_names())
def test_embedded_report_fits_1280_px_and_figure_text_is_readable_without_overlaps(suite: str, tmp_path: Path, browser) -> None:
    page = _embedded_report(suite, tmp_path / suite)
    browser.set_window_size(1280, 900)
    browser.get(page.resolve().as_uri())
    browser.execute_script("for (const d of document.querySelectorAll('details')) d.open = true;")
    got = browser.execute_script(MEASURE)
    assert got["svgs"] > 0, "the report has no figure"
    assert got["scrollWidth"] <= got["clientWidth"], f"horizontal page scrolling: {got['scrollWidth']} px wide"
    assert not got["small"], f"figure text under 10 px (caption, text, px): {got['small'][:10]}"
    assert not got["wide"], f"tables wider than the page (table, px, box px): {got['wide']}"
    assert not got["tall"], f"table rows taller than {ROW_MAX_PX} px (table, px, row): {got['tall']}"
    assert not got["longCaps"], f"captions over {MAX_CAPTION} characters (figure, length): {got['longCaps']}"
    assert not got["raw"], f"raw keys in figure text: {got['raw'][:10]}"
    assert not got["drawnEmpty"], f"placeholder figures drawn instead of a one-line note: {got['drawnEmpty']}"
    overlaps = browser.execute_script(OVERLAPS)
    assert not overlaps, f"overlapping figure texts (figure, text, text): {overlaps[:10]}"
    # the page opens on the verdicts, not on run metadata
    first_h2 = browser.execute_script("return document.querySelector('h2').textContent")
    assert first_h2 == "Verdicts"
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        browser.get(page.resolve().as_uri())  # as a reader first sees it: collapsed blocks closed
        browser.save_screenshot(str(Path(SCREENSHOTS) / f"report-{suite}.png"))
