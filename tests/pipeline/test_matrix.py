"""A parallel matrix gives each cell running at once its own slice of this host's cores, so
that predictors which start a thread per visible core do not oversubscribe the machine; one
cell at a time may use them all."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from evaluator.bundles import spec as bundles
from evaluator.cli.main import evaluate_cmd
from evaluator.data import testsets
from evaluator.jobs.job import Job
from evaluator.pipeline import matrix
from evaluator.runners.dispatch import Dispatcher
from evaluator.runners.docker import daemon_available
from evaluator.store.store import Store
from tests.conftest import BUSY_THEN_IDLE, FIRST_WORD, tiny_registry

SEES_CORES = """import json, os, sys
doc = json.load(open(sys.argv[1]))
cores = ",".join(map(str, sorted(os.sched_getaffinity(0))))
json.dump({q["id"]: cores for a in doc["data"] for p in a["paragraphs"] for q in p["qas"]},
          open(sys.argv[2], "w"))
"""  # answers every question with the cores it may run on

CORES = sorted(os.sched_getaffinity(0))


def test_cpu_slots_are_equal_disjoint_slices_of_this_process_cores():
    assert matrix.cpu_slots(1) == []
    two = matrix.cpu_slots(2)
    assert len(two) == 2 and all(len(s) == max(1, len(CORES) // 2) for s in two)
    if len(CORES) >= 2:
        assert not set(two[0]) & set(two[1])
    many = matrix.cpu_slots(len(CORES) + 1)  # more cells than cores: shared round-robin
    assert len(many) == len(CORES) + 1 and all(len(s) == 1 for s in many)
    assert {s[0] for s in many} == set(CORES)


@pytest.mark.parametrize("runner", [
    "local",
    pytest.param("docker", marks=pytest.mark.skipif(not daemon_available(),
                                                    reason="no Docker daemon answers")),
])
@pytest.mark.parametrize("jobs", [1, 2])
def test_cells_at_once_each_see_only_their_own_cores(runner, jobs, tmp_path, monkeypatch,
                                                     workspace, small_dev):
    tiny_registry(tmp_path, monkeypatch, {"tiny": small_dev, "tiny-too": small_dev},
                  {"cores": SEES_CORES})
    result = CliRunner().invoke(evaluate_cmd, ["-b", "cores", "-t", "tiny", "-t", "tiny-too",
                                               "--runner", runner, "--jobs", str(jobs),
                                               "--json"])
    assert result.exit_code == 0, result.output
    seen = sorted(set(json.loads(Path(row["predictions"]).read_text()).values()).pop()
                  for row in json.loads(result.stdout)["results"])
    everything = CORES if runner == "local" else range(os.cpu_count())  # a container: the host's
    expected = [",".join(map(str, s)) for s in matrix.cpu_slots(jobs)] or \
        [",".join(map(str, everything))] * 2
    assert seen == sorted(expected)


def test_a_cell_another_live_controller_holds_is_left_to_it_when_asked(
        tmp_path, monkeypatch, workspace, small_dev):
    """A study goes on to its next system instead of waiting for cells another controller is
    scoring; the matrix lists them as busy and runs the rest."""
    other = {**small_dev, "data": small_dev["data"][:1]}  # other data: another cell
    tiny_registry(tmp_path, monkeypatch, {"tiny": small_dev, "tiny-too": other},
                  {"first": FIRST_WORD})
    store = Store.open_default()
    held, free = (Job(bundles.get("first"), testsets.get(t)) for t in ("tiny", "tiny-too"))
    assert store.acquire(held.key, "first", "tiny", owner="another-host:1")
    report = matrix.run([held, free], Dispatcher("local"), store, wait_for_busy=False)
    assert report.busy == [held] and [o.job for o in report.outcomes] == [free]
    assert store.get(held.key) is None and store.get(free.key) is not None
    store.release(held.key, owner="another-host:1")
    again = matrix.run([held, free], Dispatcher("local"), store, wait_for_busy=False)
    assert again.busy == [] and all(o.result for o in again.outcomes)
    assert [o.result.cached for o in again.outcomes] == [False, True]


def test_a_report_counts_the_cpu_time_of_the_cells_it_ran_not_of_those_it_found(
        tmp_path, monkeypatch, workspace, small_dev):
    """The CPU time a matrix reports is that of its own runs: a cell found stored cost
    this run nothing."""
    other = {**small_dev, "data": small_dev["data"][:1]}
    tiny_registry(tmp_path, monkeypatch, {"tiny": small_dev, "tiny-too": other},
                  {"busy": BUSY_THEN_IDLE})
    store = Store.open_default()
    first, second = (Job(bundles.get("busy"), testsets.get(t)) for t in ("tiny", "tiny-too"))
    report = matrix.run([first], Dispatcher("local"), store)
    cpu, counted, uncounted = report.cpu_seconds()
    assert 1.0 <= cpu < 10 and (counted, uncounted) == (1, 0)
    both = matrix.run([first, second], Dispatcher("local"), store)
    assert [o.result.cached for o in both.outcomes] == [True, False]
    again, counted, _ = both.cpu_seconds()
    assert counted == 1 and again == json.loads(
        store.get(second.key)["run_record"])["cpu_s"]


def test_the_eta_weighs_the_cells_left_by_their_expected_cost(
        tmp_path, monkeypatch, workspace, small_dev):
    """Cells of a population differ a hundredfold: after a cheap cell, an expensive one left
    is an ETA of hours, not of one more cheap cell; by default every cell counts alike; a
    cell found stored is no measure of the others."""
    other = {**small_dev, "data": small_dev["data"][:1]}
    tiny_registry(tmp_path, monkeypatch, {"tiny": small_dev, "tiny-too": other},
                  {"first": FIRST_WORD})
    jobs = [Job(bundles.get("first"), testsets.get(t)) for t in ("tiny", "tiny-too")]
    weighed, alike = [], []
    matrix.run(jobs, Dispatcher("local"), Store(tmp_path / "a"), progress=weighed.append,
               cost=lambda job: 1.0 if job is jobs[0] else 1e6)
    matrix.run(jobs, Dispatcher("local"), Store(tmp_path / "b"), progress=alike.append)
    assert re.search(r"\[1/2\].*eta \d+ h \d+ min$", weighed[0])
    assert re.search(r"\[1/2\].*eta \d+ s$", alike[0])
    found = []  # cells found stored took no time: they say nothing of the time left
    matrix.run(jobs, Dispatcher("local"), Store(tmp_path / "a"), progress=found.append)
    assert [line.endswith("eta -") for line in found] == [True, True]


def test_the_time_left_shares_the_work_left_among_the_workers():
    """At 2 s a unit of cost and no start: two waiting cells of 1 unit and a running one 1.5 s
    into its 2 s are 4.5 s of work, 2.25 s on two workers; a running cell past its estimate
    adds nothing; one cell left keeps one worker busy, whatever the parallelism; each unit
    pays the start once."""
    assert matrix._time_left(0.0, 2.0, [1.0, 1.0], [(1.0, 1.5)], parallel=2) == 2.25
    assert matrix._time_left(0.0, 2.0, [1.0], [(1.0, 9.0)], parallel=2) == 1.0
    assert matrix._time_left(0.0, 2.0, [3.0], [], parallel=4) == 6.0
    assert matrix._time_left(3.0, 1.0, [1.0, 2.0], [], parallel=1) == 9.0


def test_the_pace_learns_the_start_every_run_pays_beside_its_cost():
    """Runs of 3 s start plus their cost: from costs far apart both are found; from one, or
    costs alike, the costs are taken at their word and the rest is start; units quicker than
    their costs scale the costs down; a noisy slope is held within bounds, and the start is
    never below zero."""
    start, scale = matrix.pace([(0.5, 3.5), (8.0, 11.0), (1.0, 4.0)])
    assert start == pytest.approx(3.0) and scale == pytest.approx(1.0)
    assert matrix.pace([(0.5, 3.5)]) == (3.0, 1.0)
    assert matrix.pace([(0.5, 3.0), (0.6, 4.1)]) == pytest.approx((3.0, 1.0))
    assert matrix.pace([(4.0, 2.0)]) == (0.0, 0.5)
    assert matrix.pace([(1.0, 9.0), (4.0, 1.0)]) == (3.75, 0.5)  # held at the lower bound
    assert matrix.pace([(1.0, 0.1), (4.0, 0.4)]) == (0.0, 0.5)  # no negative start
    assert matrix.pace([]) == (0.0, 1.0)
