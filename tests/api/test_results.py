"""README's promise, in every view: the result of a cell is its newest full run of the bundle
as it is today on the test set's current bytes. Once a test set's data changes, no view shows
a result made on the old bytes: `evaluate` runs the cell again, `status` calls it pending,
`results list/show`, `compare`, the Python API, a study's table and the site hold none."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

import evaluator
from evaluator.api.results import Results
from evaluator.cli.main import evaluate_cmd, main
from evaluator.runners.dispatch import Dispatcher
from evaluator.store.store import Store
from evaluator.training import table
from evaluator.training.run import train
from tests.conftest import SLIDING_WINDOW
from tests.support.approaches import train_job


def qashift(*argv: str):
    return CliRunner().invoke(main, list(argv))


def scored(bundle: str, testset: str = "tiny-test") -> dict:
    done = CliRunner().invoke(evaluate_cmd, ["-b", bundle, "-t", testset, "--runner",
                                             "local", "--json"])
    assert done.exit_code == 0, done.output
    [result] = json.loads(done.stdout)["results"]
    return result


@pytest.fixture
def changed(words, workspace):
    """A trained system and the sliding window scored on tiny-test, whose data then changes
    (one question reworded: the same ids and count, other bytes); (store, system id)."""
    shutil.copytree(SLIDING_WINDOW, words["subs"] / "sliding-window")
    store = Store(workspace)
    system = train(train_job("words"), Dispatcher("local"), store).bundle.id
    for bundle in ("sliding-window", system):
        assert scored(bundle)["cached"] is False
        scored(bundle, "tiny-train")  # a set that does not change: the site has a page
    assert len(Results(store).rows(testset="tiny-test")) == 2  # shown before the change
    raw = json.loads(words["gold"].read_text())
    raw["data"][0]["paragraphs"][0]["qas"][0]["question"] += " (reworded)"
    words["gold"].write_text(json.dumps(raw))
    return store, system


def test_after_a_sets_bytes_change_no_view_shows_a_result_on_the_old_bytes(changed):
    store, system = changed
    assert Results(store).rows(testset="tiny-test") == []
    assert evaluator.results(testset="tiny-test").empty  # the Python API
    status = qashift("status", "-b", "sliding-window", "-b", system, "-t", "tiny-test")
    assert status.exit_code == 0, status.output
    assert "pending 2" in status.output and "done" not in status.output.replace(
        "(done cells show F1)", "")
    listed = qashift("results", "list", "--testset", "tiny-test")
    assert "sliding-window" not in listed.output and system not in listed.output
    shown = qashift("results", "show", "sliding-window", "tiny-test")
    assert shown.exit_code == 1 and "no stored result for sliding-window x tiny-test" in \
        shown.output
    compared = qashift("compare", "-b", "sliding-window", "-b", system, "-t", "tiny-test")
    assert compared.exit_code == 1 and "no stored result" in compared.output
    rows = table.rows(store, Results(store).rows(), {}, {})  # a study's table
    assert not [r for r in rows if r["testset"] == "tiny-test"]
    # the site: the other set's page names both, the changed set's neither
    out = store.workspace.parent / "site"
    site = qashift("report", "--source", "store", "--out", str(out))
    assert site.exit_code == 0, site.output
    pages = {p.name: p.read_text() for p in out.rglob("*.html")}
    assert any("tiny-train" in name and system in text for name, text in pages.items())
    assert not any("tiny-test" in name and system in text for name, text in pages.items())
    # evaluate runs the cell again, on today's bytes
    again = scored("sliding-window")
    assert again["cached"] is False
    [row] = Results(store).rows(bundle="sliding-window", testset="tiny-test")
    assert row["key"] == again["key"]
