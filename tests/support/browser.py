"""Debian's headless Chromium, driven by Selenium, for the browser tests (a pytest plugin: ``browser``)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("SLURM_POOL_TEST_ARTIFACTS", REPO / "test-artifacts"))
CHROMEDRIVER = "/usr/bin/chromedriver"


@pytest.fixture
def browser() -> Iterator[object]:
    """A fresh Chromium with its own profile (no cookies shared with another test), logging the page's console."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="sp-chromium-")
    opts = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,900", f"--user-data-dir={profile}"):  # fmt: skip
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(120)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


def usable(driver, element_id: str):
    """The element ``element_id`` once it is shown and enabled, else None: a page may hold a form hidden while it
    starts (a click or keys sent then fail as "element not interactable"), so a wait asks for this, not presence."""
    from selenium.webdriver.common.by import By

    return next((e for e in driver.find_elements(By.ID, element_id) if e.is_displayed() and e.is_enabled()), None)
