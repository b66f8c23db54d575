"""The `readers analyse` page in a real headless Chromium at 1280 px, under the same rules as every suite's report
(test_report_layout_browser.MEASURE: no horizontal scrolling, no figure text under 10 px, no table wider than its
box, no tall rows) and with no two texts of a figure overlapping on the page. Saves its first screen as
docs/readers-report.png when MEDVLM_REPORT_SCREENSHOTS is set (a folder)."""

from __future__ import annotations

from pathlib import Path

from headless import BROWSER_MARKS
from test_readers_sections import B, _exports
from test_report_layout_browser import MEASURE, OVERLAPS, SCREENSHOTS, _browser

from medvlm_audit.readers.analysis import analyse_exports, write_analysis

pytestmark = BROWSER_MARKS



def test_readers_page_fits_and_reads(tmp_path: Path) -> None:
    dirs, run = _exports(tmp_path / "reads")
    write_analysis(analyse_exports(dirs, run_tidy=run, B=B), tmp_path / "out")
    page = tmp_path / "out" / "readers-report.html"
    browser = _browser()
    try:
        browser.set_window_size(1280, 900)
        browser.get(page.resolve().as_uri())
        browser.execute_script("for (const d of document.querySelectorAll('details')) d.open = true;")
        got = browser.execute_script(MEASURE)
        assert got["svgs"] >= 4
        assert got["scrollWidth"] <= got["clientWidth"], f"horizontal page scrolling: {got['scrollWidth']} px"
        assert not got["small"], f"figure text under 10 px: {got['small'][:10]}"
        assert not got["wide"], f"tables wider than the page: {got['wide']}"
        assert not got["tall"], f"tall table rows: {got['tall']}"
        overlaps = browser.execute_script(OVERLAPS)
        assert not overlaps, f"overlapping figure texts (figure, text, text): {overlaps[:10]}"
        assert browser.execute_script("return document.querySelector('h2').textContent") == "Readers: verdicts"
        if SCREENSHOTS:
            Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
            browser.get(page.resolve().as_uri())
            browser.save_screenshot(str(Path(SCREENSHOTS) / "readers-report.png"))
    finally:
        browser.quit()
