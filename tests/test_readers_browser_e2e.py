"""End to end in a real headless Chromium: a study from a small demo run, a reader finishing her session with the
keyboard (with a reload mid-session and a step back), the export, the analysis and the report beside the models.

Needs Debian's chromium and chromium-driver (`apt-get install -y chromium chromium-driver`) and selenium;
skipped with the reason when the browser binary is missing.
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
from headless import BROWSER_MARKS, chromium

pytestmark = BROWSER_MARKS
webdriver = pytest.importorskip("selenium.webdriver")
uvicorn = pytest.importorskip("uvicorn")

from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait
from typer.testing import CliRunner

from medvlm_audit.readers.app import create_app
from medvlm_audit.readers.commands import readers_app
from medvlm_audit.readers.study import Study

SCREENSHOT = os.environ.get("MEDVLM_READERS_SCREENSHOT")  # e.g. docs/readers-reading-view.png


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Server:
    def __init__(self, study_dir: Path) -> None:
        self.port = _free_port()
        cfg = uvicorn.Config(create_app(study_dir), host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(cfg)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> _Server:  # noqa: PYI034
        self.thread.start()
        t0 = time.time()
        while not self.server.started:
            if time.time() - t0 > 20:
                raise RuntimeError("server did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def _browser() -> webdriver.Chrome:
    return chromium("1360,820")


def _item(driver) -> str:
    return driver.find_element(By.TAG_NAME, "body").get_attribute("data-item") or ""


def _wait_loaded(driver) -> None:
    WebDriverWait(driver, 15).until(
        lambda d: d.find_element(By.ID, "viewer").get_attribute("data-loaded") == "true")


def _press(driver, key: str) -> None:
    ActionChains(driver).send_keys(key).perform()


@pytest.mark.slow
def test_reader_session_in_a_real_browser(tmp_path: Path) -> None:
    from medvlm_audit.readers.analysis import reader_sections
    from medvlm_audit.suites.grounding.analysis import analyse_grounding
    from medvlm_audit.suites.grounding.embedded import run_demo
    from medvlm_audit.suites.grounding.suite import write_grounding_report as write_report

    run_dir = run_demo(tmp_path / "demo", n_cases=60, n_train=300, progress=False, log=lambda *_: None).run_dir
    study_dir = tmp_path / "study"
    cli = CliRunner()
    res = cli.invoke(readers_app, ["create", str(run_dir), "--task", "finding-presence", "--n", "4", "--option",
                                   "boxed_only=true",                                    "--reader", "ana", "--reader", "ben", "--out", str(study_dir)])
    assert res.exit_code == 0, res.output
    urls = dict(re.findall(r"^(\w+)\t(http://127\.0\.0\.1:8765/\S+)$", res.stdout, flags=re.MULTILINE))
    assert set(urls) == {"ana", "ben", "admin"}
    ana_path = urls["ana"].split("8765", 1)[1]
    st = Study(study_dir)
    ana = st.readers()[0]
    order = st.order(ana)
    n = len(order)
    assert n == 12  # 4 boxed cases x (original, target mask, irrelevant mask)

    pressed: dict[str, str] = {}
    driver = _browser()
    try:
        with _Server(study_dir) as srv:
            base = f"http://127.0.0.1:{srv.port}"
            driver.get(base + ana_path)
            _wait_loaded(driver)
            assert "Item 1 of 12" in driver.find_element(By.ID, "position").text
            # window/level and zoom from the keyboard
            wl0, z0 = driver.find_element(By.ID, "wl").text, driver.find_element(By.ID, "zoom").text
            for k in ("+", "+", "]", "."):
                _press(driver, k)
            assert driver.find_element(By.ID, "zoom").text != z0 and driver.find_element(By.ID, "wl").text != wl0
            _press(driver, "r")
            if SCREENSHOT:
                driver.save_screenshot(SCREENSHOT)
            for k in range(n):
                if k == 5:  # reload mid-session: nothing lost, the view resumes at the first open item
                    driver.get(base + ana_path)
                    _wait_loaded(driver)
                    assert _item(driver) == order[5]
                    assert "Item 6 of 12" in driver.find_element(By.ID, "position").text
                    assert driver.find_element(By.ID, "n-complete").text == "5"
                    # step back with the keyboard: the earlier answer is shown as chosen
                    _press(driver, Keys.ARROW_LEFT)
                    WebDriverWait(driver, 10).until(lambda d: _item(d) == order[4])
                    chosen = driver.find_element(By.CSS_SELECTOR, "button.choice.selected").get_attribute("data-value")
                    assert chosen == pressed[order[4]]
                    _press(driver, Keys.ARROW_RIGHT)
                    WebDriverWait(driver, 10).until(lambda d: _item(d) == order[5])
                    _wait_loaded(driver)
                cur = _item(driver)
                assert cur == order[k]
                key = "y" if k % 3 else "n"
                _press(driver, key)
                pressed[cur] = "yes" if key == "y" else "no"
                if k + 1 < n:
                    WebDriverWait(driver, 10).until(lambda d, want=order[k + 1]: _item(d) == want)
                    _wait_loaded(driver)
            WebDriverWait(driver, 10).until(lambda d: d.current_url.endswith("/done"))
            assert "All 12 items are answered" in driver.find_element(By.ID, "all-done").text
            logs = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
            assert not logs, logs  # no script error, no CSP violation
            admin = urls["admin"].split("8765", 1)[1]
            driver.get(base + admin)
            cells = [td.text for td in driver.find_elements(By.CSS_SELECTOR, "#progress td")]
            assert cells[:3] == ["ana", "12", "12"] and cells[5:8] == ["ben", "0", "12"]
    finally:
        driver.quit()

    # every key press was saved, with its time
    saved = {i: a["answer"] for i, a in Study(study_dir).answers(ana).items()}
    assert saved == pressed
    assert (Study(study_dir).answer_table()["elapsed_s"] > 0).all()

    # export (into the run, where the report hook finds it), then the report shows the reader beside the models
    exp = run_dir / "readers" / "finding-presence"
    res = cli.invoke(readers_app, ["export", str(study_dir), "--out", str(exp)])
    assert res.exit_code == 0, res.output
    answers = pd.read_csv(exp / "answers.csv")
    assert {"reader", "item_id", "condition", "answer", "time_s"} <= set(answers.columns) and len(answers) == 12
    reads = pd.read_parquet(exp / "reads.parquet")
    assert set(reads["model"]) == {"reader:ana"} and len(reads) == 12
    res = cli.invoke(readers_app, ["analyse", str(exp), "--out", str(tmp_path / "ana"), "--B", "500"])
    assert res.exit_code == 0, res.output
    metrics = pd.read_csv(tmp_path / "ana" / "metrics.csv")
    acc = metrics[(metrics.model == "reader:ana") & (metrics.metric == "accuracy")]
    orig = reads[reads.condition == "original"]
    assert acc["point"].iloc[0] == pytest.approx(100 * (orig.parsed == orig.label).mean())

    tidy = pd.read_parquet(run_dir / "results.parquet")
    analysis = analyse_grounding(tidy, B=300)
    report = write_report(analysis, run_dir / "report", extra_sections=reader_sections(run_dir, tidy, B=300))
    html = report.read_text()
    assert "Readers beside the models" in html and "reader:ana" in html and "local-evidence" in html


@pytest.mark.slow
def test_a_refused_answer_says_why_keeps_the_page_and_is_not_resent(tmp_path: Path) -> None:
    """The server refuses an impossible reading time (here forced into the request): the page names the field,
    keeps the reader on the item with her choice shown, sends nothing again, and the same choice saves once the
    request is sound."""
    from medvlm_audit.readers.study import create_study

    items = pd.DataFrame({"item_id": ["c1", "c2"], "question": ["Is the heart enlarged?", "Effusion side?"],
                          "cot_text": ["Step 1: look.", "Step 1: compare."], "model_name": ["m1", "m1"]})
    res = create_study(None, "cot-rating", 2, ["ana"], out=tmp_path / "cot", items=items)
    driver = _browser()
    try:
        with _Server(tmp_path / "cot") as srv:
            driver.get(f"http://127.0.0.1:{srv.port}/r/{res['tokens']['ana']}")
            WebDriverWait(driver, 15).until(lambda d: _item(d) != "")
            item = _item(driver)
            driver.execute_script(
                "window.__posts = 0; window.__bad = true; var f = window.fetch;"
                "window.fetch = function (u, o) { window.__posts += 1;"
                " if (window.__bad) { o.body.set('elapsed_ms', '0.0001'); } return f(u, o); };")
            button = driver.find_element(By.CSS_SELECTOR, "fieldset.scale button.choice")
            button.click()
            status = driver.find_element(By.ID, "status")
            WebDriverWait(driver, 10).until(lambda d: "Not saved: elapsed_ms" in status.text)
            time.sleep(1.5)  # a retry would come within 0.8 s
            assert driver.execute_script("return window.__posts") == 1
            assert _item(driver) == item and "selected" in button.get_attribute("class")
            assert Study(tmp_path / "cot").answer_table().empty
            driver.execute_script("window.__bad = false;")
            button.click()
            WebDriverWait(driver, 10).until(lambda d: status.text.startswith("Saved"))
    finally:
        driver.quit()
    table = Study(tmp_path / "cot").answer_table()
    assert len(table) == 1 and table["item_id"].iloc[0] == item and (table["elapsed_s"] > 0).all()
