"""One cell, one run: a result another controller stores while this one is deciding is taken
from the store, never computed a second time; a run's CPU time is stored with it."""

from __future__ import annotations

import json

from click.testing import CliRunner

from evaluator.bundles import spec as bundles
from evaluator.cli.main import main
from evaluator.data import testsets
from evaluator.jobs.job import Job
from evaluator.pipeline import cell
from evaluator.runners.dispatch import Dispatcher
from evaluator.store.store import Store
from tests.conftest import BUSY_THEN_IDLE, FIRST_WORD, raced_store, tiny_registry


class CountingRunner:
    """The local runner, counting the submissions it really runs."""

    def __init__(self):
        self.inner, self.runs = Dispatcher("local"), 0
        self.name = self.inner.name

    def run(self, request):
        self.runs += 1
        return self.inner.run(request)


def test_a_cell_finished_elsewhere_after_the_first_look_is_not_run_again(
        tmp_path, monkeypatch, workspace, small_dev):
    tiny_registry(tmp_path, monkeypatch, {"tiny": small_dev}, {"first": FIRST_WORD})
    job = Job(bundles.get("first"), testsets.get("tiny"))
    runner = CountingRunner()
    store = raced_store(Store.open_default().workspace, "get",
                        lambda: cell.run_cell(job, runner, Store.open_default()))
    result = cell.run_cell(job, runner, store)
    assert runner.runs == 1
    assert result.cached
    assert store.get(job.key)["em"] == result.em.value


def test_a_damaged_cell_is_recomputed_once(tmp_path, monkeypatch, workspace, small_dev):
    tiny_registry(tmp_path, monkeypatch, {"tiny": small_dev}, {"first": FIRST_WORD})
    job = Job(bundles.get("first"), testsets.get("tiny"))
    runner, store = CountingRunner(), Store.open_default()
    first = cell.run_cell(job, runner, store)
    store.object_path(store.get(job.key)["scores_sha256"]).write_text("{}")
    again = cell.run_cell(job, runner, store)
    assert runner.runs == 2 and not again.cached and again.em == first.em
    assert cell.run_cell(job, runner, store).cached and runner.runs == 2


def test_a_cell_stores_the_cpu_seconds_its_run_used(tmp_path, monkeypatch, workspace,
                                                    small_dev):
    """The local runner counts the submission's CPU time (a busy second, not an idle one)
    into the cell's run record, and `results show` prints it."""
    tiny_registry(tmp_path, monkeypatch, {"tiny": small_dev}, {"busy": BUSY_THEN_IDLE})
    result = cell.run_cell(Job(bundles.get("busy"), testsets.get("tiny")), Dispatcher("local"),
                           Store.open_default())
    record = json.loads(result.row["run_record"])
    assert 1.0 <= record["cpu_s"] < record["wall_s"] - 0.5
    shown = CliRunner().invoke(main, ["results", "show", "busy", "tiny"])
    assert shown.exit_code == 0 and f"cpu_s: {record['cpu_s']}" in shown.output
