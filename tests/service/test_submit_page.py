"""The upload page in a real browser (headless Chromium driven by Selenium) against a real
server and worker: a bundle archive chosen, test sets picked, the status followed without a
reload, then the results with intervals, the submission on the population's trend and the
provenance."""

from __future__ import annotations

import signal
import tarfile
import time

import pytest

from tests.conftest import FIRST_WORD, write_command_bundle
from tests.service.test_service import start_server, worker
from tests.support.browser import MISSING, chromium

pytestmark = [pytest.mark.slow, pytest.mark.skipif(bool(MISSING), reason=MISSING or "")]


@pytest.fixture
def browser():
    with chromium() as driver:
        yield driver


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
def test_a_bundle_uploaded_through_the_page_is_followed_to_its_results_and_trend(
        database, browser, tmp_path, workspace):
    from selenium.webdriver.common.by import By

    url, token = database
    folder = write_command_bundle(tmp_path / "mine", "first-word", FIRST_WORD)
    archive = tmp_path / "first-word.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname="first-word")
    proc, base = start_server(url)
    running = worker()
    try:
        browser.get(f"{base}/pages/submit")
        browser.execute_script("window.notReloaded = true")
        browser.find_element(By.ID, "token").send_keys(token)
        browser.find_element(By.ID, "archive").send_keys(str(archive))
        for testset in ("squad-dev-heldout", "reddit-test"):
            browser.find_element(By.CSS_SELECTOR, f"input[value='{testset}']").click()
        browser.find_element(By.ID, "send").click()
        seen, deadline = [], time.monotonic() + 300
        while "every job has ended" not in (status := browser.find_element(
                By.ID, "status").text):
            if status and (not seen or seen[-1] != status):
                seen.append(status)
            assert not status.startswith("refused"), status
            assert time.monotonic() < deadline, seen
            time.sleep(0.1)
        while not browser.find_elements(By.ID, "submission-link"):  # its page, read in
            status = browser.find_element(By.ID, "status").text
            assert not status.startswith("refused") and time.monotonic() < deadline, status
            time.sleep(0.2)
        assert browser.execute_script("return window.notReloaded") is True
        assert any("queued" in s or "running" in s for s in seen), seen
        rows = browser.find_elements(By.CSS_SELECTOR, "#jobs tbody tr")
        cells = [[c.text for c in row.find_elements(By.TAG_NAME, "td")] for row in rows]
        assert sorted(c[2] for c in cells) == ["reddit-test", "squad-dev-heldout"]
        assert all(c[3] == "finished" and " [" in c[5] and " [" in c[6] for c in cells), cells
        plots = browser.find_elements(By.CSS_SELECTOR, "#placed img.trend-plot")
        assert len(plots) == 1, browser.find_element(By.ID, "placed").text[:2000]
        assert browser.execute_script("return arguments[0].naturalWidth", plots[0]) > 200
        trend = browser.find_element(By.CSS_SELECTOR, "#placed table.trend").text
        assert "reddit-test" in trend and "/ " in trend
        text = browser.find_element(By.ID, "placed").text
        assert "Provenance" in text and "bundle digest" in text
        browser.execute_script("document.getElementById('status').scrollIntoView()")
        browser.save_screenshot(str(tmp_path / "submit-page.png"))
    finally:
        running.send_signal(signal.SIGTERM)
        running.wait(timeout=30)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
