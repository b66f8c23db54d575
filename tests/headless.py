"""The headless Chromium every browser test drives: Debian's ``chromium`` and ``chromium-driver`` binaries, the
marks that skip a module (with the reason) where they are missing and put it in the slow lane, and one driver
factory with the flags a container needs (imported by module name: ``from headless import chromium``)."""

from __future__ import annotations

import shutil
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
BROWSER_MARKS = [
    pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None,
                       reason="no chromium / chromedriver binary (apt-get install -y chromium chromium-driver)"),
    pytest.mark.slow,
]
_FLAGS = ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--disable-extensions",
          "--no-first-run")


def chromium(window: str = "1360,820", *extra: str, capabilities: dict[str, Any] | None = None) -> Any:
    """A headless Chromium WebDriver at ``window`` (``"W,H"``) with ``extra`` flags; the caller quits it."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    opts = Options()
    opts.binary_location = CHROMIUM
    for a in (*_FLAGS, f"--window-size={window}", *extra):
        opts.add_argument(a)
    for k, v in (capabilities or {}).items():
        opts.set_capability(k, v)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
