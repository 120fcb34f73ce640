"""One cell, one run: a result another controller stores while this one is deciding is taken
from the store, never computed a second time."""

from __future__ import annotations

from evaluator.bundles import spec as bundles
from evaluator.data import testsets
from evaluator.jobs.job import Job
from evaluator.pipeline import cell
from evaluator.runners.dispatch import Dispatcher
from evaluator.store.store import Store
from tests.conftest import FIRST_WORD, raced_store, tiny_registry


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
                        lambda: cell.evaluate(job, runner, Store.open_default()))
    result = cell.evaluate(job, runner, store)
    assert runner.runs == 1
    assert result.cached
    assert store.get(job.key)["em"] == result.em.value


def test_a_damaged_cell_is_recomputed_once(tmp_path, monkeypatch, workspace, small_dev):
    tiny_registry(tmp_path, monkeypatch, {"tiny": small_dev}, {"first": FIRST_WORD})
    job = Job(bundles.get("first"), testsets.get("tiny"))
    runner, store = CountingRunner(), Store.open_default()
    first = cell.evaluate(job, runner, store)
    store.object_path(store.get(job.key)["scores_sha256"]).write_text("{}")
    again = cell.evaluate(job, runner, store)
    assert runner.runs == 2 and not again.cached and again.em == first.em
    assert cell.evaluate(job, runner, store).cached and runner.runs == 2
