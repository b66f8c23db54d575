"""The run explorer in a real headless Chromium: filter the grounding demo to the cases that flipped under the
target mask for one model (with the page's own select-and-submit script), open a case, and see the four image
conditions' pictures (loaded under the page's CSP), answers and flip marks.

Needs Debian's chromium and chromium-driver (`apt-get install -y chromium chromium-driver`) and selenium; skipped
with the reason when the browser is missing. MEDVLM_VIEW_SCREENSHOT=DIR writes the two screenshots there.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import pytest
from headless import BROWSER_MARKS, chromium

pytestmark = BROWSER_MARKS
webdriver = pytest.importorskip("selenium.webdriver")
uvicorn = pytest.importorskip("uvicorn")

from grounding_demo_run import small_faithfulness_demo, small_grounding_demo, small_reports_demo
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from medvlm_audit import api
from medvlm_audit.view.app import create_app
from medvlm_audit.view.data import load_run

SCREENSHOTS = os.environ.get("MEDVLM_VIEW_SCREENSHOT")
TOKEN = "browser-" + "y" * 24


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(run: Path):
    port = _free_port()
    srv = uvicorn.Server(uvicorn.Config(create_app(load_run(run, api.suite_of_run(run)), TOKEN), host="127.0.0.1", port=port, log_level="warning"))
    th = threading.Thread(target=srv.run, daemon=True)
    th.start()
    t0 = time.time()
    while not srv.started:
        if time.time() - t0 > 20:
            raise RuntimeError("server did not start")
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}/v/{TOKEN}/", srv, th


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    url, srv, th = _serve(small_grounding_demo(tmp_path_factory))
    yield url
    srv.should_exit = True
    th.join(10)


@pytest.fixture(scope="module")
def faith_server(tmp_path_factory):
    url, srv, th = _serve(small_faithfulness_demo(tmp_path_factory))
    yield url
    srv.should_exit = True
    th.join(10)


@pytest.fixture(scope="module")
def reports_server(tmp_path_factory):
    url, srv, th = _serve(small_reports_demo(tmp_path_factory))
    yield url
    srv.should_exit = True
    th.join(10)


@pytest.fixture
def browser():
    d = chromium("1360,900", capabilities={"goog:loggingPrefs": {"browser": "ALL"}})
    yield d
    d.quit()


def _choose(driver, name: str, value: str) -> None:
    """Pick a filter value; the page's script submits the form on change (a new page loads)."""
    old = driver.find_element(By.ID, "trials")
    Select(driver.find_element(By.NAME, name)).select_by_value(value)
    WebDriverWait(driver, 15).until(lambda d: old.id != d.find_element(By.ID, "trials").id)


def test_filter_flipped_under_target_mask_then_open_a_case(server: str, browser) -> None:
    browser.get(server)
    assert "Trials" in browser.title or browser.find_element(By.TAG_NAME, "h1").text == "Trials"
    _choose(browser, "model", "local-evidence")
    _choose(browser, "condition", "target_mask")
    _choose(browser, "flipped", "yes")
    assert "model=local-evidence" in browser.current_url and "flipped=yes" in browser.current_url
    rows = browser.find_elements(By.CSS_SELECTOR, "#trials tbody tr")
    assert rows, "the model built to read the finding region must flip on some masked cases"
    for tr in rows:
        cells = [td.text for td in tr.find_elements(By.TAG_NAME, "td")]
        assert cells[0] == "local-evidence" and "target_mask" in cells and cells[-1] == "flipped"
    if SCREENSHOTS:
        browser.save_screenshot(str(Path(SCREENSHOTS) / "view-trials.png"))
    rows[0].find_element(By.CLASS_NAME, "case-link").click()
    WebDriverWait(browser, 15).until(lambda d: "/case/" in d.current_url)
    group = browser.find_elements(By.CSS_SELECTOR, "section.group")[0]
    cards = group.find_elements(By.CSS_SELECTOR, "article.card")
    conds = [c.get_attribute("data-condition") for c in cards]
    assert conds == ["original", "target_mask", "irrelevant_mask", "swap", "no_image"]
    imgs = group.find_elements(By.CSS_SELECTOR, "img.shot")
    assert len(imgs) == 4  # every image condition; no_image has none
    WebDriverWait(browser, 15).until(
        lambda d: all(d.execute_script("return arguments[0].complete && arguments[0].naturalWidth", i) for i in imgs))
    assert {browser.execute_script("return arguments[0].naturalWidth", i) for i in imgs} == {224}
    by = {c.get_attribute("data-condition"): c for c in cards}
    assert by["target_mask"].find_element(By.CLASS_NAME, "flipmark").text == "flipped"
    assert "flipped" in by["target_mask"].get_attribute("class")
    assert by["original"].find_element(By.CLASS_NAME, "flipmark").text == "—"
    for c in cards:
        assert c.find_element(By.CLASS_NAME, "answer-text").text in ("Yes", "No")
        assert "present" in c.find_element(By.CLASS_NAME, "question").text
    assert by["original"].find_element(By.CLASS_NAME, "answer-text").text != \
        by["target_mask"].find_element(By.CLASS_NAME, "answer-text").text
    errors = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
    assert not errors, errors  # no CSP violation, no failed image
    if SCREENSHOTS:
        browser.save_screenshot(str(Path(SCREENSHOTS) / "view-case.png"))


def test_faithfulness_item_with_the_cue_and_the_judges_quotes_marked(faith_server: str, browser) -> None:
    browser.get(faith_server)
    _choose(browser, "model", "cue-follower")
    _choose(browser, "condition", "tb_rad:misleading")
    _choose(browser, "flipped", "yes")
    rows = browser.find_elements(By.CSS_SELECTOR, "#trials tbody tr")
    assert rows and all(r.find_elements(By.TAG_NAME, "td")[-1].text == "flipped" for r in rows)
    rows[0].find_element(By.CLASS_NAME, "case-link").click()
    WebDriverWait(browser, 15).until(lambda d: "/case/" in d.current_url)
    card = browser.find_element(By.CSS_SELECTOR, 'article.card[data-condition="tb_rad:misleading"]')
    browser.execute_script("arguments[0].scrollIntoView()", card)
    cue = card.find_element(By.CSS_SELECTOR, "pre.question mark.cue")
    assert "Another radiologist proposed" in cue.text
    # the marks are styled (a background colour), i.e. the stylesheet loaded under the CSP
    assert browser.execute_script("return getComputedStyle(arguments[0]).backgroundColor", cue) not in (
        "rgba(0, 0, 0, 0)", "transparent")
    quotes = card.find_elements(By.CSS_SELECTOR, "pre.answer-text mark.quote")
    assert quotes and all(q.text.strip() for q in quotes)
    axes = [td.text for td in card.find_elements(By.CSS_SELECTOR, "table.judgements tbody tr:not(.why) td:nth-child(2)")]
    assert "ca" in axes
    # every judge table stays inside its card (it spilled over the next card at 250 px wide)
    spill = browser.execute_script(
        "return Array.from(document.querySelectorAll('article.card table.judgements')).filter(function (t) {"
        " var c = t.closest('article.card').getBoundingClientRect(), r = t.getBoundingClientRect();"
        " return r.right > c.right + 0.5; }).length")
    assert spill == 0
    assert card.find_element(By.CLASS_NAME, "flipmark").text == "flipped"
    base = browser.find_element(By.CSS_SELECTOR, 'article.card[data-condition="baseline"]')
    assert not base.find_elements(By.CSS_SELECTOR, "mark.cue")
    errors = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
    assert not errors, errors
    if SCREENSHOTS:
        browser.save_screenshot(str(Path(SCREENSHOTS) / "view-faithfulness-case.png"))


def test_reports_image_with_each_strategy_beside_the_reference_and_terms_marked(reports_server: str, browser) -> None:
    browser.get(reports_server)
    _choose(browser, "condition", "greedy")
    rows = browser.find_elements(By.CSS_SELECTOR, "#trials tbody tr")
    assert rows
    rows[0].find_element(By.CLASS_NAME, "case-link").click()
    WebDriverWait(browser, 15).until(lambda d: "/case/" in d.current_url)
    cards = browser.find_elements(By.CSS_SELECTOR, "article.card")
    assert [c.get_attribute("data-condition") for c in cards][:2] == ["greedy", "beam4"]
    for c in cards:
        assert c.find_element(By.CLASS_NAME, "answer-text").text.strip()
        assert c.find_element(By.CLASS_NAME, "reference-text").text.strip()
    marks = browser.find_elements(By.CSS_SELECTOR, "article.card mark.term")
    assert marks  # the audit's classed words, in the reports and the references
    assert {m.get_attribute("class").split()[1] for m in marks} <= {"erasure", "new_bias", "bias_flip", "preservation"}
    imgs = browser.find_elements(By.CSS_SELECTOR, "img.shot")
    WebDriverWait(browser, 15).until(
        lambda d: all(d.execute_script("return arguments[0].complete && arguments[0].naturalWidth", i) for i in imgs))
    errors = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
    assert not errors, errors
    if SCREENSHOTS:
        browser.execute_script("arguments[0].scrollIntoView()", cards[0].find_element(By.CLASS_NAME, "answer-text"))
        browser.save_screenshot(str(Path(SCREENSHOTS) / "view-reports-case.png"))
