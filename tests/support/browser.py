"""Headless Debian Chromium driven by Selenium, for the tests that open pages in a real
browser (the site's, the server's). Needs `chromium`, `chromium-driver` and the selenium
package: `bash .ci/chromium.sh` installs them (CI runs it); `MISSING` says what is not here."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
try:
    import selenium  # noqa: F401
except ImportError:
    selenium = None
MISSING = None if CHROMIUM and DRIVER and selenium else (
    "headless Chromium not installed (need chromium, chromium-driver and selenium): run "
    "`bash .ci/chromium.sh`")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--window-size=1280,1000",
         "--force-device-scale-factor=1", "--hide-scrollbars")


@contextmanager
def chromium() -> Iterator:
    """A headless Chromium with a profile of its own, removed afterwards."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="qashift-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(DRIVER))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
