"""The reading view's keys in a real headless Chromium: answering moves on by itself and says so; a → pressed out of
habit after an answer does not skip the item the answer opened (a second → does); the end page lists the open items
and Enter opens the first of them.

Needs Debian's chromium and chromium-driver and selenium; skipped with the reason when the browser is missing.
"""

from __future__ import annotations

import re
import socket
import threading
import time

import pytest
from headless import BROWSER_MARKS, chromium

pytestmark = BROWSER_MARKS
webdriver = pytest.importorskip("selenium.webdriver")
uvicorn = pytest.importorskip("uvicorn")

from grounding_demo_run import small_grounding_demo
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait
from typer.testing import CliRunner

from medvlm_audit.readers.app import create_app
from medvlm_audit.readers.commands import readers_app
from medvlm_audit.readers.study import Study


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _item(driver) -> str:
    return driver.find_element(By.TAG_NAME, "body").get_attribute("data-item") or ""


def _press(driver, key: str) -> None:
    ActionChains(driver).send_keys(key).perform()


def _position(driver) -> str:
    return driver.find_element(By.ID, "position").text


@pytest.mark.slow
def test_answer_then_arrow_does_not_skip_and_the_end_page_lists_open_items(tmp_path_factory) -> None:
    run = small_grounding_demo(tmp_path_factory)
    study_dir = tmp_path_factory.mktemp("keys") / "study"
    res = CliRunner().invoke(readers_app, ["create", str(run), "--task", "finding-presence", "--n", "2",
                                           "--option", "boxed_only=true", "--reader", "ana", "--out", str(study_dir)])
    assert res.exit_code == 0, res.output
    path = re.search(r"^ana\thttp://127\.0\.0\.1:8765(/\S+)$", res.stdout, flags=re.MULTILINE).group(1)
    order = Study(study_dir).order(Study(study_dir).readers()[0])
    assert len(order) == 6

    port = _free_port()
    srv = uvicorn.Server(uvicorn.Config(create_app(study_dir), host="127.0.0.1", port=port, log_level="warning"))
    th = threading.Thread(target=srv.run, daemon=True)
    th.start()
    t0 = time.time()
    while not srv.started:
        assert time.time() - t0 < 20, "server did not start"
        time.sleep(0.05)
    driver = chromium("1360,820")
    base = f"http://127.0.0.1:{port}"
    try:
        driver.get(base + path)
        WebDriverWait(driver, 15).until(lambda d: _item(d) == order[0])
        keys = driver.find_element(By.ID, "keys").text
        assert "move on to the next item" in keys and "no need to press" in keys
        # Y then → (the old hint's habit): Y answers item 1 and opens item 2; → stays on item 2 and says why
        _press(driver, "y")
        WebDriverWait(driver, 10).until(lambda d: _item(d) == order[1])
        _press(driver, Keys.ARROW_RIGHT)
        time.sleep(1.0)
        assert _item(driver) == order[1] and "Item 2 of 6" in _position(driver)
        assert "press → again to skip" in driver.find_element(By.ID, "status").text
        _press(driver, "n")  # answering item 2 opens item 3
        WebDriverWait(driver, 10).until(lambda d: _item(d) == order[2])
        _press(driver, Keys.ARROW_RIGHT)  # guarded ...
        time.sleep(0.5)
        assert _item(driver) == order[2]
        _press(driver, Keys.ARROW_RIGHT)  # ... a second press skips item 3 on purpose
        WebDriverWait(driver, 10).until(lambda d: _item(d) == order[3])
        _press(driver, Keys.ARROW_RIGHT)  # reached by →, not by answering: → skips at once
        WebDriverWait(driver, 10).until(lambda d: _item(d) == order[4])
        driver.get(base + path + "/done")
        items = driver.find_element(By.ID, "open-items").text
        assert [int(x) for x in re.findall(r"Item (\d+) of 6", items)] == [3, 4, 5, 6]
        assert "2 of 6 items are complete" in driver.find_element(By.ID, "done").text
        _press(driver, Keys.ENTER)  # one key opens the first open item
        WebDriverWait(driver, 10).until(lambda d: "/done" not in d.current_url and _item(d) == order[2])
        assert "Item 3 of 6" in _position(driver)
        logs = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
        assert not logs, logs
    finally:
        driver.quit()
        srv.should_exit = True
        th.join(10)
