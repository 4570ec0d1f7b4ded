"""Headless Chromium, one way: the browser tests (tests/testbed.py, fixture ``browser``) and
scripts/status_page_screenshot.py both start it here, so the page they see is the same.

Test-only (it needs selenium, from the ``test`` extra); nothing under src/ imports it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")  # Debian's (scripts/slurm-testbed.sh install --browser)
CHROMEDRIVER = Path("/usr/bin/chromedriver")

# Headless without a sandbox (CI runs as root) or a GPU; no network of its own (QUIC, background
# requests, component updates, sync), so a test sees only the page it loads; no first-run UI;
# /tmp instead of the small /dev/shm of containers.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage")


def start_chromium(profile: Path, *extra: str) -> Any:
    """A Selenium webdriver for headless Chromium with a fresh profile in `profile` and the
    `extra` flags (e.g. a window size); the caller quits it. (Returns selenium's WebDriver.)"""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, f"--user-data-dir={profile}", *extra):
        opts.add_argument(flag)
    return webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=opts)
