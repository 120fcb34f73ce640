"""The site in a real browser: headless Debian Chromium driven by Selenium, pages opened
from a temporary folder over file:// (no server).

Needs `chromium`, `chromium-driver` and the selenium package: `bash .ci/chromium.sh` installs
them (CI runs it). Without them the whole module skips and says so.
Screenshots go to $QASHIFT_SITE_SCREENSHOTS when set (docs/ holds the committed ones:
`QASHIFT_SITE_SCREENSHOTS=docs python3 -m pytest tests/analysis/test_site_browser.py`), else to the
test's temporary folder.
"""

from __future__ import annotations

import csv
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from evaluator.cli.figures import report_command
from tests.conftest import REPO
from tests.support.browser import MISSING, chromium
from tests.support.site import (
    build_published_site,
    build_store_site,
    bundle_names,
    store_rows,
)

if MISSING:
    pytest.skip(MISSING, allow_module_level=True)

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

pytestmark = pytest.mark.slow  # uses the two sites built once per session (~60 s)


@pytest.fixture(scope="module")
def browser():
    with chromium() as driver:
        yield driver


@pytest.fixture(scope="module")
def published(tmp_path_factory, shared_data) -> Path:
    """The published-results site, copied to a fresh folder as a reader would get it."""
    copy = tmp_path_factory.mktemp("published-copy") / "site"
    shutil.copytree(build_published_site(tmp_path_factory, shared_data), copy)
    return copy


@pytest.fixture(scope="module")
def store_site(tmp_path_factory, shared_data) -> tuple[Path, dict]:
    site, env = build_store_site(tmp_path_factory, shared_data)
    copy = tmp_path_factory.mktemp("store-copy") / "site"
    shutil.copytree(site, copy)
    return copy, env


def open_page(driver, path: Path) -> None:
    driver.get(path.resolve().as_uri())
    assert driver.execute_script("return document.readyState") == "complete"


def column(driver, table_id: str, index: int, attr: str | None = None) -> list[str]:
    """One column of a table's body rows, in the order the browser shows them (one call)."""
    return driver.execute_script(
        "var index = arguments[1], attr = arguments[2];"
        "return Array.prototype.map.call(document.querySelectorAll("
        "'#' + arguments[0] + ' tbody tr'), function (r) {"
        "  var c = r.querySelectorAll('th, td')[index];"
        "  return attr ? c.getAttribute(attr) : c.innerText.trim(); });",
        table_id, index, attr)


def header_button(driver, table_id: str, label: str):
    return driver.find_element(
        By.XPATH, f"//table[@id='{table_id}']//thead//button[normalize-space()='{label}']")


def aria_sort(button) -> str | None:
    return button.find_element(By.XPATH, "..").get_attribute("aria-sort")


def numbers(values: list[str]) -> list[float | None]:
    return [float(v) if v else None for v in values]


def test_overview_to_testset_to_submission(browser, published):
    open_page(browser, published / "index.html")
    assert browser.title == "Overview · qashift"
    figures = browser.find_elements(By.CSS_SELECTOR, "figure.plot img")
    assert len(figures) == 4
    for img in figures:  # lazy images load from disk once scrolled to, and are not broken
        browser.execute_script("arguments[0].scrollIntoView()", img)
        WebDriverWait(browser, 10).until(
            lambda d, img=img: d.execute_script("return arguments[0].complete", img))
        assert browser.execute_script("return arguments[0].naturalWidth", img) > 500
        assert "score lower" in img.get_attribute("alt")
    browser.find_element(By.CSS_SELECTOR, "#testsets a[href='testsets/new-wiki.html']").click()
    assert browser.current_url.endswith("/testsets/new-wiki.html")
    assert browser.find_element(By.TAG_NAME, "h1").text == "New Wikipedia"
    rows = browser.find_elements(By.CSS_SELECTOR, "#board-f1 tbody tr")
    assert len(rows) == 108  # 105 models + 3 humans
    assert len(browser.find_elements(By.CSS_SELECTOR, "#board-f1 tbody tr.human")) == 3
    top = browser.find_element(By.CSS_SELECTOR, "#board-f1 tbody tr:not(.human)")
    first = top.find_element(By.CSS_SELECTOR, "th a")
    name, score = first.text, top.find_elements(By.TAG_NAME, "td")[2].text
    assert top.find_element(By.TAG_NAME, "td").text == "1"
    first.click()
    assert "/models/" in browser.current_url
    assert browser.find_element(By.TAG_NAME, "h1").text == name
    row = browser.find_element(By.CSS_SELECTOR, "#scores tr[data-testset='new-wiki']")
    assert row.find_elements(By.TAG_NAME, "td")[3].text == score  # F1 column
    row.find_element(By.CSS_SELECTOR, "th a").click()
    assert browser.current_url.endswith("/testsets/new-wiki.html")
    browser.find_element(By.LINK_TEXT, "Fits & gaps").click()
    assert len(browser.find_elements(By.CSS_SELECTOR, "#fits-table tbody tr")) == 18


def test_every_set_shows_all_published_models(browser, published, shared_data):
    import json

    results = json.loads((shared_data / "squadshifts" / "results.json").read_text())
    for t, block in results.items():
        open_page(browser, published / "testsets" / f"{t}.html")
        for metric in ("f1", "em"):
            browser.find_element(By.ID, f"tab-{metric}").click()
            shown = browser.execute_script(
                "return Array.prototype.filter.call(document.querySelectorAll("
                "'#board-' + arguments[0] + ' tbody tr'), function (r) {"
                "  return r.offsetParent !== null; }).length;", metric)
            assert shown == len(block["models"]) + len(block["humans"]), (t, metric)


def test_sort_by_clicking_and_by_keyboard(browser, published):
    open_page(browser, published / "testsets" / "new-wiki.html")
    gap = header_button(browser, "board-f1", "Gap")
    gap.click()
    assert aria_sort(gap) == "descending"
    values = numbers(column(browser, "board-f1", 5, "data-sort"))
    known = [v for v in values if v is not None]
    assert known == sorted(known, reverse=True) and len(known) >= 80
    assert values[len(known):] == [None] * (len(values) - len(known))  # unknown gaps last
    gap.click()
    assert aria_sort(gap) == "ascending"
    known = [v for v in numbers(column(browser, "board-f1", 5, "data-sort")) if v is not None]
    assert known == sorted(known)

    rank = header_button(browser, "board-f1", "Rank")
    rank.send_keys(Keys.ENTER)  # a real button: Enter sorts, focus stays on it
    assert aria_sort(rank) == "ascending" and aria_sort(gap) is None
    assert browser.switch_to.active_element == rank
    ranks = numbers(column(browser, "board-f1", 0, "data-sort"))
    assert ranks[:105] == sorted(ranks[:105]) and ranks[0] == 1
    assert ranks[105:] == [None] * 3  # humans are not ranked
    rank.send_keys(Keys.ENTER)
    assert aria_sort(rank) == "descending"
    assert numbers(column(browser, "board-f1", 0, "data-sort"))[0] == max(ranks[:105])

    model = header_button(browser, "board-f1", "Model")
    model.send_keys(Keys.SPACE)
    names = column(browser, "board-f1", 1, "data-sort")
    assert aria_sort(model) == "ascending"
    assert browser.execute_script(
        "var a = arguments[0];"
        "return a.every(function (x, i) { return i === 0 || "
        "a[i - 1].localeCompare(x, 'en', {sensitivity: 'base', numeric: true}) <= 0; });",
        names)


def test_metric_tabs(browser, published):
    open_page(browser, published / "testsets" / "reddit.html")
    f1, em = browser.find_element(By.ID, "tab-f1"), browser.find_element(By.ID, "tab-em")
    assert f1.get_attribute("aria-selected") == "true"
    assert browser.find_element(By.ID, "panel-f1").is_displayed()
    assert not browser.find_element(By.ID, "panel-em").is_displayed()
    f1.send_keys(Keys.ARROW_RIGHT)
    assert em.get_attribute("aria-selected") == "true"
    assert browser.switch_to.active_element == em
    assert browser.find_element(By.ID, "panel-em").is_displayed()
    assert not browser.find_element(By.ID, "panel-f1").is_displayed()
    assert browser.find_element(By.CSS_SELECTOR, "#board-em thead th.score").text.startswith(
        "EM on this set")
    open_page(browser, published / "testsets" / "reddit.html")
    browser.get(browser.current_url + "#em")  # a link can name the tab
    browser.refresh()
    assert browser.find_element(By.ID, "tab-em").get_attribute("aria-selected") == "true"


def test_store_numbers_in_the_browser_and_links_to_logs(browser, store_site):
    site, env = store_site
    rows, names = store_rows(env), bundle_names(env)
    shift = {names[r["bundle"]]: r for r in rows if r["testset"] == "tiny-shift"}
    orig = {names[r["bundle"]]: r for r in rows if r["testset"] == "tiny-orig"}
    open_page(browser, site / "index.html")
    browser.find_element(By.CSS_SELECTOR, "#testsets a[href='testsets/tiny-shift.html']").click()
    models = column(browser, "board-f1", 1)
    assert sorted(models) == sorted(shift)
    shown = {m: (o, v, ci) for m, o, v, ci in zip(models, column(browser, "board-f1", 2),
                                                   column(browser, "board-f1", 3),
                                                   column(browser, "board-f1", 4))}
    for name, r in shift.items():
        assert shown[name] == (f"{orig[name]['f1']:.3f}", f"{r['f1']:.3f}",
                               f"[{r['f1_lo']:.2f}, {r['f1_hi']:.2f}]")
    button = header_button(browser, "board-f1", "F1 on this set")
    button.click()  # was descending: now ascending
    assert aria_sort(button) == "ascending"
    assert column(browser, "board-f1", 1) == sorted(shift, key=lambda m: shift[m]["f1"])

    browser.find_element(By.LINK_TEXT, "Submissions").click()
    browser.find_element(By.LINK_TEXT, "crashes").click()
    failure = browser.find_element(By.CSS_SELECTOR, "#failures tbody tr")
    assert "nonzero-exit" in failure.text
    failure.find_element(By.LINK_TEXT, "log").click()
    assert "CUDA driver not found" in browser.find_element(By.TAG_NAME, "body").text
    browser.back()
    browser.find_element(By.LINK_TEXT, "Submissions").click()
    browser.find_element(By.LINK_TEXT, names["sliding-window"]).click()
    run = browser.find_element(By.CSS_SELECTOR, "section.run[data-testset='tiny-shift']")
    assert run.find_element(By.CSS_SELECTOR, "dd.runner").text == shift[
        names["sliding-window"]]["runner"]
    assert run.find_element(By.CSS_SELECTOR, "dd.device").text == "cpu"


def screenshot(browser, name: str, tmp_path: Path) -> bytes:
    """Save the open page as `name` under $QASHIFT_SITE_SCREENSHOTS (else `tmp_path`); its
    bytes, a PNG."""
    out = Path(os.environ.get("QASHIFT_SITE_SCREENSHOTS") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    browser.execute_script("return document.fonts.ready")
    assert browser.save_screenshot(str(out / name))
    data = (out / name).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return data


def test_screenshots(browser, published, tmp_path):
    shots = {"site-overview.png": published / "index.html",
             "site-testset.png": published / "testsets" / "new-wiki.html"}
    for name, page in shots.items():
        open_page(browser, page)
        assert len(screenshot(browser, name, tmp_path)) > 20_000


def test_population_screenshots(browser, tmp_path, shared_data):
    """The own population's site as docs/site.md builds it (the committed table and approach
    matrix): every system of the table on the Reddit leaderboard, and the three pages
    docs/site.md shows."""
    site = tmp_path / "site"
    result = CliRunner().invoke(report_command, [
        "--source", str(REPO / "results" / "population.csv"), "--concurrence",
        str(REPO / "results" / "approach-matrix.csv"), "--concurrence-reference", "squad",
        "--data-dir", str(shared_data), "--bootstrap", "200", "--out", str(site)])
    assert result.exit_code == 0, result.output
    with open(REPO / "results" / "population.csv") as handle:
        systems = {row["model"] for row in csv.DictReader(handle)}
    shots = {"site-population-overview.png": site / "index.html",
             "site-population-testset.png": site / "testsets" / "reddit-test.html",
             "site-concurrence.png": site / "concurrence.html"}
    for name, page in shots.items():
        open_page(browser, page)
        if name == "site-population-testset.png":
            assert len(browser.find_elements(By.CSS_SELECTOR, "#board-f1 tbody tr")) == len(
                systems)
        screenshot(browser, name, tmp_path)
