"""A population study is one plan file: run, it trains and scores every system it lists;
killed with `kill -9` at random points and run again, it ends with the same table as an
uninterrupted run; run once more, it trains and evaluates nothing; a bad plan is one line."""

from __future__ import annotations

import csv
import os
import random
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from evaluator import study as plans
from evaluator.api import evaluation
from evaluator.cli.main import main
from evaluator.core import console
from evaluator.data import testsets
from evaluator.jobs.job import Job
from evaluator.pipeline import matrix
from evaluator.runners.dispatch import Dispatcher
from evaluator.store.store import Store
from evaluator.study.loop import _eta
from evaluator.study.pace import Rates, _seconds
from evaluator.training import table as tables
from evaluator.training.run import progress_numbers, progress_text, train
from tests.conftest import REPO, write_testset
from tests.support.approaches import approach_registry, word_position_folder
from tests.training.tiny import tiny_folders

PLAN = """\
id: tiny-population
name: a learned word position, two settings x two seeds
split: tiny-train
testsets: [tiny-test, tiny-train]
approaches:
  word-position:
    settings: [{epochs: 1}, {epochs: 1, l2: 0.001}]
    seeds: [0, 1]
"""
VOLATILE = ("wall_s", "train_wall_s", "runner")  # how long and where, not what


@pytest.fixture
def plan(tmp_path, dev_raw, monkeypatch, workspace):
    tiny_folders(tmp_path, dev_raw, monkeypatch, train_paragraphs=20, test_paragraphs=10)
    word_position_folder(tmp_path / "subs")
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN)
    return path


def study(*args: str, workspace, **popen):
    argv = ["qashift", "study", *args, "--workspace", str(workspace)]
    if popen:
        return subprocess.Popen(argv, env=os.environ.copy(), start_new_session=True, **popen)
    return subprocess.run(argv, env=os.environ.copy(), capture_output=True, text=True,
                          timeout=900)


def table(path) -> list[dict]:
    with open(path, newline="") as handle:
        return [{k: v for k, v in row.items() if k not in VOLATILE}
                for row in csv.DictReader(handle)]


@pytest.mark.slow
def test_an_interrupted_study_ends_with_the_same_table_and_reruns_nothing(plan, tmp_path):
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    started = time.monotonic()
    done = study("run", str(plan), "--runner", "local", "--table", str(tmp_path / "a.csv"),
                 "--jobs", "2", workspace=whole)  # the same table as the one-at-a-time run
    duration = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert "trained 4, training failed 0 | evaluated 8, evaluation failed 0 | 0 cells" in \
        done.stdout
    assert "eta" in done.stderr and "[4/4] word-position@tiny-train/s1/h" in done.stderr
    expected = table(tmp_path / "a.csv")
    assert len(expected) == 4 * 2 * 2  # systems x test sets x metrics
    assert len({r["model"] for r in expected}) == 4

    rng = random.Random(20261123)
    for _ in range(2):  # two kill -9 at random points of a run
        proc = study("run", str(plan), "--runner", "local", workspace=killed,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.2, 0.6) * duration)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    middle = study("status", str(plan), workspace=killed)
    assert middle.returncode == 0 and "cells to go" in middle.stdout
    resumed = study("run", str(plan), "--runner", "local", "--table", str(tmp_path / "b.csv"),
                    workspace=killed)
    assert resumed.returncode == 0, resumed.stderr
    assert table(tmp_path / "b.csv") == expected

    again = study("run", str(plan), "--runner", "local", workspace=killed)
    assert again.returncode == 0
    assert again.stderr.count("stored earlier") == 4 and "trained;" not in again.stderr
    assert "0 cells to go" in again.stdout


@pytest.mark.slow
def test_a_run_saves_after_each_system_it_stores_and_not_after_one_done_before(plan):
    """The table is rewritten after every system a run trains or scores, and not after the
    systems it finds done (a resumed run over a large plan passes hundreds of those)."""
    found, store, runner = plans.load(plan), Store.open_default(), Dispatcher("local")
    saves: list[int] = []
    said: list[str] = []
    plans.run(found, runner, store, only=("*/s0/*",), saved=lambda: saves.append(1),
              say=said.append)
    assert len(saves) == 2  # the two seed-0 systems, trained and scored
    # cells to go count the systems this run does (1 training + 2 test sets each)
    assert [line.split(" | ")[1].split(",")[0] for line in said] == [
        "3 cells to go", "0 cells to go"]
    saves.clear()
    said.clear()
    final = plans.run(found, runner, store, saved=lambda: saves.append(1), say=said.append)
    assert len(saves) == 2 and final.pending == 0  # the seed-1 systems only
    assert sum("stored earlier" in line for line in said) == 2


@pytest.mark.slow
def test_two_controllers_each_count_the_cells_left_to_both(plan):
    """Cells to go (and the ETA worked out from them) are counted in the store, so a run
    counts the work another controller of the plan did meanwhile; a system that controller
    finished is reported as found scored, not as scored by this run."""
    found, store, runner = plans.load(plan), Store.open_default(), Dispatcher("local")
    last = found.trainings[-1].system_id
    said: list[str] = []

    def say(line: str) -> None:  # the other controller does the last system meanwhile
        if not said:
            plans.run(found, runner, store, only=(last,))
        said.append(line)

    plans.run(found, runner, store, say=say)
    assert [line.split(" | ")[1].split(",")[0] for line in said] == [
        "9 cells to go", "3 cells to go", "0 cells to go", "0 cells to go"]
    assert all("eta" in line for line in said)
    assert said[-1].startswith(f"[4/4] {last}: stored earlier; scored on 2/2 test sets, "
                               f"2 of them found scored already |")
    assert sum("found scored" in line for line in said) == 1


def test_a_system_another_controller_trains_is_skipped_and_a_failing_store_stops_the_run(
        plan, monkeypatch):
    """A busy lease means another controller has the system: the run goes on to the next.
    A store that fails (disk full, locked database) would fail every system: the run stops
    with that error instead of reporting each system as skipped."""
    from evaluator.store.store import StoreError
    from evaluator.study import loop
    from evaluator.training.run import TrainingBusy
    found, store, runner = plans.load(plan), Store.open_default(), Dispatcher("local")

    def busy(job, *args, **kwargs):
        raise TrainingBusy(f"{job.system_id} is being trained by another controller right now")

    said: list[str] = []
    monkeypatch.setattr(loop, "train", busy)
    plans.run(found, runner, store, say=said.append)
    assert len(said) == 4 and all(": skipped: " in line for line in said)

    def broken(job, *args, **kwargs):
        raise StoreError("the results store is full")

    said.clear()
    monkeypatch.setattr(loop, "train", broken)
    with pytest.raises(StoreError, match="full"):
        plans.run(found, runner, store, say=said.append)
    assert said == []


def test_a_failure_counts_for_its_own_cell_only(plan):
    """A scoring failure recorded for an earlier version of a cell (other weights, other
    bytes) leaves today's cell pending; one of today's cell counts it as failed."""
    found, store, runner = plans.load(plan), Store.open_default(), Dispatcher("local")
    job = found.trainings[0]
    system = train(job, runner, store)
    testset = found.testsets_for(job)[0]
    store.record_failure("an-earlier-cell", system.bundle.id, testset.id, "nonzero-exit",
                         "exited with status 1", "", "local")
    first = plans.status(found, store)
    assert (first.trained, first.evaluation_failed, first.pending) == (1, 0, 2 + 3 * 3)
    store.record_failure(Job(system.bundle, testset).key, system.bundle.id, testset.id,
                         "nonzero-exit", "exited with status 1", "", "local")
    second = plans.status(found, store)
    assert (second.evaluation_failed, second.pending) == (1, 1 + 3 * 3)


def test_status_estimates_the_time_left_at_the_pace_its_table_measured(plan):
    """Cells to go are weighed by the times the table measured for their approach: training
    seconds per question and epoch, scoring seconds per question."""
    found = plans.load(plan)
    done, *left = found.trainings
    train_questions = done.split.questions
    rows = [{"model": done.system_id, "train_key": done.key, "testset": t.id,
             "testset_sha256": t.sha256, "weights_digest": "w", "metric": metric,
             "n": 1, "wall_s": 0.01 * t.questions,  # 0.01 s per question scored
             "train_device": "cpu", "train_wall_s": 0.02 * train_questions}  # 1 epoch
            for t in found.testsets for metric in ("em", "f1")]
    counts = plans.status(found, Store(Path(os.environ["QASHIFT_WORKSPACE"])), rows)
    assert counts.pending == 3 * 3 and counts.trained == 1  # three systems: 1 training + 2 sets
    scored = sum(t.questions for t in found.testsets)
    assert counts.pending_s == pytest.approx(3 * (0.02 * train_questions + 0.01 * scored))
    assert counts.line(found).endswith(
        f"9 cells to go, about {console.duration(counts.pending_s)} of one core")
    assert plans.status(found, Store(Path(os.environ["QASHIFT_WORKSPACE"]))).pending_s == 0

    for name in ("bidaf", "_libraries"):  # an approach the table has not timed
        shutil.copytree(REPO / "submissions" / name,
                        Path(os.environ["QASHIFT_SUBMISSIONS"]) / name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    plan.write_text(PLAN + "  bidaf: {settings: [{epochs: 1}]}\n")
    wider = plans.status(plans.load(plan), Store(Path(os.environ["QASHIFT_WORKSPACE"])), rows)
    assert wider.pending == 12 and wider.untimed == 3 and wider.pending_s == counts.pending_s
    about = console.duration(counts.pending_s)
    assert wider.line(found).endswith(
        f"12 cells to go, about {about} of one core for 9 of them; 3 are of approaches not "
        "timed yet")


def test_a_sets_cost_measured_by_one_approach_carries_over_to_another():
    """Rates are an approach's speed times a set's cost: an approach timed on short stories
    only is estimated slower on a set where another approach measured long passages, and a
    paused cell (a rate ten times its fellows) does not move the fit."""
    rates = Rates.fitted([("fast", "stories", 1.0), ("fast", "posts", 3.0),
                          ("slow", "stories", 2.0), ("slow", "stories", 2.0),
                          ("slow", "stories", 20.0)])
    assert rates.rate("slow", "posts") == pytest.approx(6.0)
    assert rates.rate("fast", "posts") == pytest.approx(3.0)
    assert rates.rate("slow", "stories") == pytest.approx(2.0)
    assert rates.rate("untimed", "posts") is None
    stories, posts = rates.rate("slow", "stories"), rates.rate("slow", "posts")
    assert stories < rates.rate("slow", "a set nobody timed") < posts  # the median set


def test_the_eta_weighs_the_cells_to_go_by_their_estimated_time():
    before = plans.StudyStatus(pending=10, pending_s=1000.0, untimed=2)
    now = plans.StudyStatus(pending=9, pending_s=400.0, untimed=2)
    # 600 estimated seconds of work went in 300 s: the 400 left take 200 s
    assert _eta(300.0, before, now, todo=10) == ", eta 3 min and 2 cells not timed yet"
    untimed = plans.StudyStatus(pending=10)  # by count: 2 cells in 60 s, 8 left
    assert _eta(60.0, untimed, plans.StudyStatus(pending=8), todo=10) == ", eta 4 min"
    assert _eta(60.0, untimed, plans.StudyStatus(pending=10), todo=10) == ""  # nothing done


def test_status_by_approach_says_where_the_work_left_lies(plan):
    for name in ("bidaf", "_libraries"):
        shutil.copytree(REPO / "submissions" / name,
                        Path(os.environ["QASHIFT_SUBMISSIONS"]) / name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    plan.write_text(PLAN + "  bidaf: {settings: [{epochs: 1}]}\n")
    result = CliRunner().invoke(main, ["study", "status", str(plan), "--by-approach"])
    assert result.exit_code == 0, result.output
    total, mine, bidaf = result.stdout.strip().splitlines()
    assert total.endswith("| 15 cells to go")  # 5 systems x (a training + 2 test sets)
    assert mine.split() == ["word-position", "4", "systems", "|", "trained", "0,", "failed",
                              "0", "|", "evaluated", "0,", "failed", "0", "|", "12", "cells",
                              "to", "go"]
    assert bidaf.split()[:3] == ["bidaf", "1", "systems"] and bidaf.split()[-4] == "3"


@pytest.mark.parametrize("original, broken", [
    ("seeds: [0, 1]", "seedz: [0, 1]"),
    ("word-position:", "word-positon:"),
    ("split: tiny-train", "split: tiny-test"),
    ("{epochs: 1, l2: 0.001}", "{epochs: 1}"),
    ("split: tiny-train", "split: [tiny-train, tiny-train]"),
    ("split: tiny-train", "split: [tiny-train, tiny-test]"),
])
def test_a_bad_plan_is_one_line(plan, original, broken):
    plan.write_text(PLAN.replace(original, broken))
    result = CliRunner().invoke(main, ["study", "status", str(plan)])
    assert result.exit_code == 1, result.output
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error:") and "Traceback" not in result.output


def test_a_plan_over_several_splits_trains_each_approach_plan_on_each(plan, tmp_path, dev_raw):
    from evaluator.study import load

    folder = write_testset(tmp_path / "sets", "tiny-train-2", {"version": "1.1", "data": [
        dict(dev_raw["data"][2], paragraphs=dev_raw["data"][2]["paragraphs"][:5])]})
    (folder / "testset.yaml").write_text((folder / "testset.yaml").read_text().replace(
        "kind: derived", "kind: training"))
    plan.write_text(PLAN.replace("split: tiny-train", "split: [tiny-train, tiny-train-2]"))
    found = load(plan)
    assert [t.id for t in found.splits] == ["tiny-train", "tiny-train-2"]
    assert len(found.trainings) == 8 and found.cells == 8 * 3
    assert sum("@tiny-train-2/" in job.system_id for job in found.trainings) == 4


def test_an_approach_may_list_several_grids(plan):
    from evaluator.study import load

    plan.write_text(PLAN.replace(
        "    settings: [{epochs: 1}, {epochs: 1, l2: 0.001}]\n    seeds: [0, 1]\n",
        "    - {settings: [{epochs: 1}], seeds: [0, 1]}\n"
        "    - {settings: [{epochs: 1, l2: 0.001}], sizes: [50, 100]}\n"))
    found = load(plan)
    assert len(found.trainings) == 4
    assert [job.size for job in found.trainings] == [None, None, 50, 100]
    assert [job.seed for job in found.trainings] == [0, 1, 0, 0]
    plan.write_text(PLAN.replace("    seeds: [0, 1]\n", "    seeds: [0, 1]\n    sizes: [50, 50]\n"))
    with pytest.raises(Exception, match="names a system twice"):
        load(plan)


@pytest.mark.slow
def test_the_table_says_which_scores_are_approach_level(plan, tmp_path):
    """A score of a system on the test set whose training split it was trained on is
    approach-level (Liu et al.'s concurrence); on any other set, system-level."""
    folder = tmp_path / "sets" / "tiny-test"
    (folder / "testset.yaml").write_text((folder / "testset.yaml").read_text()
                                         + "train: tiny-train\n")
    plan.write_text(PLAN.replace("settings: [{epochs: 1}, {epochs: 1, l2: 0.001}]",
                                 "settings: [{epochs: 1}]").replace("seeds: [0, 1]",
                                                                   "seeds: [0]"))
    done = study("run", str(plan), "--runner", "local", "--table", str(tmp_path / "t.csv"),
                 workspace=tmp_path / "ws")
    assert done.returncode == 0, done.stderr
    modes = {(r["testset"], r["mode"]) for r in table(tmp_path / "t.csv")}
    assert modes == {("tiny-test", "approach-level"), ("tiny-train", "system-level")}


@pytest.mark.slow
def test_the_table_leaves_out_systems_of_an_earlier_version_of_their_approach(plan, tmp_path):
    plan.write_text(PLAN.replace("settings: [{epochs: 1}, {epochs: 1, l2: 0.001}]",
                                 "settings: [{epochs: 1}]").replace("seeds: [0, 1]",
                                                                   "seeds: [0]"))
    done = study("run", str(plan), "--runner", "local", workspace=tmp_path / "ws")
    assert done.returncode == 0, done.stderr
    first = study("table", str(plan), "--out", str(tmp_path / "a.csv"),
                  workspace=tmp_path / "ws")
    assert first.returncode == 0 and len(table(tmp_path / "a.csv")) == 4
    code = tmp_path / "subs" / "word-position" / "approach.py"
    code.write_text(code.read_text() + "\n# a changed approach is another approach\n")
    again = study("table", str(plan), "--out", str(tmp_path / "b.csv"),
                  workspace=tmp_path / "ws")
    assert again.returncode == 0 and table(tmp_path / "b.csv") == []


@pytest.mark.slow
def test_a_table_from_an_earlier_run_spares_training_its_systems_again(plan, tmp_path):
    """A study that spans machines: the committed table stands for the systems it holds in
    full while their train keys and test sets are unchanged; the rest is trained again."""
    plan.write_text(PLAN.replace("settings: [{epochs: 1}, {epochs: 1, l2: 0.001}]",
                                 "settings: [{epochs: 1}]"))
    path = tmp_path / "t.csv"
    first = study("run", str(plan), "--runner", "local", "--table", str(path),
                  workspace=tmp_path / "one")
    assert first.returncode == 0, first.stderr
    written = path.read_text()
    assert len(table(path)) == 2 * 2 * 2

    elsewhere = study("run", str(plan), "--runner", "local", "--table", str(path),
                      workspace=tmp_path / "two")  # an empty store
    assert elsewhere.returncode == 0, elsewhere.stderr
    assert elsewhere.stderr.count("in the table from an earlier run") == 2
    assert "trained;" not in elsewhere.stderr and path.read_text() == written
    status = study("status", str(plan), "--table", str(path), workspace=tmp_path / "two")
    assert "trained 2 (from the table: 2)" in status.stdout and "0 cells to go" in status.stdout

    rows = list(csv.DictReader(written.splitlines()))
    gone = [r for r in rows if not ("/s1" in r["model"] and r["testset"] == "tiny-test")]
    with open(path, "w", newline="") as handle:  # one system is no longer held in full
        out = csv.DictWriter(handle, fieldnames=list(rows[0]))
        out.writeheader()
        out.writerows(gone)
    partial = study("status", str(plan), "--table", str(path), workspace=tmp_path / "two")
    # its training and the one test set the table lacks are to do; the other is held
    assert "trained 1 (from the table: 1)" in partial.stdout and "2 cells to go" in partial.stdout
    rewritten = study("table", str(plan), "--out", str(path), workspace=tmp_path / "two")
    assert rewritten.returncode == 0, rewritten.stderr  # the part it holds is kept, not dropped
    assert [(r["model"], r["testset"], r["metric"]) for r in table(path)] == [
        (r["model"], r["testset"], r["metric"]) for r in gone]
    # trained again, to the same weights: only the missing test set is scored, and the table
    # is the one the first machine wrote
    resumed = study("run", str(plan), "--runner", "local", "--table", str(path),
                    workspace=tmp_path / "two")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stderr.count("trained; scored on 1/1 test sets (1 more in the table)") == 1
    assert "0 cells to go" in resumed.stdout
    whole = tmp_path / "whole.csv"
    whole.write_text(written)
    assert table(path) == table(whole)

    code = tmp_path / "subs" / "word-position" / "approach.py"
    code.write_text(code.read_text() + "\n# a changed approach is another approach\n")
    changed = study("status", str(plan), "--table", str(path), workspace=tmp_path / "two")
    assert "trained 0," in changed.stdout and "6 cells to go" in changed.stdout


@pytest.mark.slow
def test_a_system_trained_again_to_other_weights_keeps_the_earlier_rows_until_scored_as_fully(
        plan, tmp_path, monkeypatch):
    """Weights that come out otherwise on this machine replace the earlier table's rows of
    their system only once they are scored on every test set those rows cover: a table
    written halfway (by another controller, or when a session ends) loses no row, and a
    system's rows are always those of one set of weights."""
    found, runner = plans.load(plan), Dispatcher("local")
    job = found.trainings[0]
    plans.run(found, runner, Store.open_default(), only=(job.system_id,))
    elsewhere = [dict(row, weights_digest="0" * 64)  # as if trained on another machine
                 for row in plans.rows(found, Store.open_default())]
    assert {(r["testset"], r["metric"]) for r in elsewhere} == {
        ("tiny-test", "em"), ("tiny-test", "f1"), ("tiny-train", "em"), ("tiny-train", "f1")}

    monkeypatch.setenv("QASHIFT_WORKSPACE", str(tmp_path / "here"))
    store = Store.open_default()
    system = train(job, runner, store)
    first, second = found.testsets_for(job)
    matrix.run([Job(system.bundle, first)], runner, store)
    assert plans.rows(found, store, elsewhere) == elsewhere
    matrix.run([Job(system.bundle, second)], runner, store)
    here = plans.rows(found, store, elsewhere)
    assert {r["weights_digest"] for r in here} == {system.row["weights_digest"]}
    assert [(r["model"], r["testset"], r["metric"]) for r in here] == [
        (r["model"], r["testset"], r["metric"]) for r in elsewhere]


@pytest.mark.slow
def test_only_runs_the_systems_whose_names_match(plan, tmp_path):
    done = study("run", str(plan), "--runner", "local", "--only", "*/s1", "--only", "*/s1/h*",
                 workspace=tmp_path / "ws")
    assert done.returncode == 0, done.stderr
    assert "trained 2," in done.stdout and "6 cells to go" in done.stdout
    assert "/s0" not in done.stderr


def test_a_table_is_worked_out_and_written_by_one_controller_at_a_time(plan, tmp_path,
                                                                       workspace):
    """Two controllers of one plan each rewrite its table from the store; holding the
    table's lock while one works it out and writes it keeps the other from writing an older
    picture over it."""
    from evaluator.training import table as tables

    path = tmp_path / "t.csv"
    started = time.monotonic()
    assert study("table", str(plan), "--out", str(path), workspace=workspace).returncode == 0
    alone = time.monotonic() - started  # how long writing it takes with nobody in the way
    path.unlink()
    with tables.lock(path):
        writer = study("table", str(plan), "--out", str(path), workspace=workspace,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(3 * alone + 1)
        waited = writer.poll() is None and not path.exists()  # waits for the lock
    assert writer.wait(timeout=300) == 0 and path.exists()  # released: it finishes
    assert waited and "waiting for a controller to finish writing" in writer.stderr.read().decode()


def test_a_table_lock_that_cannot_be_taken_is_one_line(plan, tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "locks").write_text("")  # a file where the lock folder belongs
    result = study("table", str(plan), "--out", str(tmp_path / "t.csv"), workspace=workspace)
    assert result.returncode == 1 and "cannot create the lock" in result.stderr
    assert result.stderr.strip().count("\n") == 0 and not (tmp_path / "t.csv").exists()


@pytest.mark.parametrize("content", [b"model,testset\nx,y\n", b"model,testset\n",
                                     b"\nmodel,testset\nx,y\n",
                                     "model,testset\n\xe9t\xe9,y\n".encode("latin-1")])
def test_a_file_that_is_not_a_results_table_is_one_line(plan, tmp_path, content):
    path = tmp_path / "t.csv"
    path.write_bytes(content)
    result = study("status", str(plan), "--table", str(path), workspace=tmp_path / "ws")
    assert result.returncode == 1 and result.stderr.strip().count("\n") == 0
    assert "not a results table" in result.stderr and "Traceback" not in result.stderr
    run = study("run", str(plan), "--runner", "local", "--table", str(path),
                workspace=tmp_path / "ws")
    assert run.returncode == 1 and path.read_bytes() == content  # left as it was


def one_system_table(plan: Path, tmp_path: Path) -> Path:
    """The plan cut to one system, run in its own workspace: its table."""
    plan.write_text(PLAN.replace("settings: [{epochs: 1}, {epochs: 1, l2: 0.001}]",
                                 "settings: [{epochs: 1}]").replace("seeds: [0, 1]", "seeds: [0]"))
    population = tmp_path / "population.csv"
    first = study("run", str(plan), "--runner", "local", "--table", str(population),
                  workspace=tmp_path / "one")
    assert first.returncode == 0, first.stderr
    return population


@pytest.mark.slow
def test_a_system_another_study_holds_in_full_is_not_trained_again(plan, tmp_path):
    """`--ledger`: a plan sharing a system with another study's table takes its rows (on its
    own test sets) instead of training it again, and trains the rest."""
    population = one_system_table(plan, tmp_path)
    other = tmp_path / "other.yaml"
    other.write_text(PLAN.replace("tiny-population", "other").replace(
        "testsets: [tiny-test, tiny-train]", "testsets: [tiny-test]").replace(
        "settings: [{epochs: 1}, {epochs: 1, l2: 0.001}]", "settings: [{epochs: 1}]"))
    mine = tmp_path / "other.csv"
    status = study("status", str(other), "--table", str(mine), "--ledger", str(population),
                   workspace=tmp_path / "two")
    assert "trained 1 (from the table: 1)" in status.stdout, status.stdout + status.stderr
    done = study("run", str(other), "--runner", "local", "--table", str(mine),
                 "--ledger", str(population), workspace=tmp_path / "two")
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("in the table from an earlier run") == 1
    assert done.stderr.count("trained;") == 1 and "/s1" in done.stderr
    shared = [r for r in table(population) if r["testset"] == "tiny-test"]
    rows = table(mine)
    assert {(r["model"], r["testset"]) for r in rows} == {
        (shared[0]["model"], "tiny-test"), (shared[0]["model"].replace("/s0", "/s1"), "tiny-test")}
    assert [r for r in rows if "/s0" in r["model"]] == shared
    missing = study("status", str(other), "--ledger", str(tmp_path / "none.csv"),
                    workspace=tmp_path / "two")
    assert missing.returncode == 2 and "none.csv" in missing.stderr


@pytest.mark.slow
def test_an_own_row_of_an_older_training_does_not_hide_another_tables_current_one(
        plan, tmp_path):
    population = one_system_table(plan, tmp_path)
    rows = table(population)
    mine = tmp_path / "mine.csv"  # the same system, from an older training
    tables.write([dict(r, train_key="0" * 64, value="1.0") for r in tables.read(population)],
                 mine)
    status = study("status", str(plan), "--table", str(mine), "--ledger", str(population),
                   workspace=tmp_path / "two")
    assert "trained 1 (from the table: 1)" in status.stdout, status.stdout + status.stderr
    done = study("run", str(plan), "--runner", "local", "--table", str(mine),
                 "--ledger", str(population), workspace=tmp_path / "two")
    assert done.returncode == 0 and "in the table from an earlier run" in done.stderr
    assert "trained;" not in done.stderr  # nothing trained again
    assert sorted(map(str, table(mine))) == sorted(map(str, rows))  # the current rows only


def test_a_table_holds_a_reference_set_only_while_its_derived_sets_are_held_too():
    """A retrained system is scored again on a set whose derived set (an ablation of it) is
    still to be scored, so that paired comparisons find both in the store; a table's rows
    hold only for the weights digest they name."""
    from types import SimpleNamespace

    sets = (SimpleNamespace(id="heldout", reference="dev"),
            SimpleNamespace(id="heldout-empty-question", reference="heldout"))
    plan = SimpleNamespace(testsets_for=lambda job: sets)
    job = SimpleNamespace(system_id="a@split/s0")

    def scored(*names):
        return {job.system_id: [{"model": job.system_id, "testset": t, "metric": m,
                                 "weights_digest": "w1"} for t in names for m in ("em", "f1")]}

    assert plans.held_cells(plan, scored("heldout"), job, "w1") == set()
    both = scored("heldout", "heldout-empty-question")
    assert plans.held_cells(plan, both, job, "w1") == {"heldout", "heldout-empty-question"}
    assert plans.held_cells(plan, both, job) == {"heldout", "heldout-empty-question"}
    assert plans.held_cells(plan, both, job, "w2") == set()
    only_em = {job.system_id: both[job.system_id][:-1]}  # F1 of the ablation missing
    assert plans.held_cells(plan, only_em, job, "w1") == set()


SILENT = r'''
import json, os, sys
if sys.argv[1] == "train":
    open(os.path.join(sys.argv[4], "weights.txt"), "w").write("silent")
else:
    model, source, output = sys.argv[2:5]
    doc = json.load(open(source))
    json.dump({q["id"]: "" for a in doc["data"] for p in a["paragraphs"] for q in p["qas"]},
              open(output, "w"))
'''
SILENT_PLAN = """\
id: silent-population
name: systems that answer nothing
split: tiny-train
testsets: [tiny-test, tiny-train]
approaches:
  silent:
    settings: [{}]
    seeds: [0, 1]
"""


def test_a_study_whose_systems_all_score_a_constant_writes_its_table(
        tmp_path, dev_raw, monkeypatch, workspace):
    """Every question scores F1 0: no Student-t interval exists (NULL bounds in the store).
    Such a cell is an ordinary one: the table holds it with empty F1 bounds, by `study run
    --table` and by `study table` alike."""
    approach_registry(tmp_path, dev_raw, monkeypatch, workspace, "silent", SILENT)
    plan = tmp_path / "silent.yaml"
    plan.write_text(SILENT_PLAN)
    out, again = tmp_path / "t.csv", tmp_path / "again.csv"
    done = study("run", str(plan), "--runner", "local", "--table", str(out),
                 workspace=workspace)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    rows = table(out)
    assert len(rows) == 2 * 2 * 2  # two systems x two sets x two metrics
    for row in rows:
        assert row["value"] == "0.0"
        if row["metric"] == "f1":
            assert (row["lo"], row["hi"]) == ("", ""), row
        else:  # Clopper-Pearson still gives an interval for EM 0
            assert float(row["lo"]) == 0.0 and float(row["hi"]) > 0.0, row
    written = study("table", str(plan), "--out", str(again), workspace=workspace)
    assert written.returncode == 0, written.stderr
    assert table(again) == rows
    assert tables.read(again) == tables.read(out)  # a table with empty bounds reads back


PROGRESS = r'''
import json, os, sys, time
if sys.argv[1] == "train":
    model, checkpoints = sys.argv[4:6]
    attack = json.load(open(sys.argv[3]))["hyperparameters"]["attack"]
    docs = {"sane": ['{"epoch": 1, "epochs": 2, "loss": 0.5, "eta_s": 30}'],
            "nan": ['{"epoch": 1, "epochs": 2, "loss": NaN, "eta_s": NaN}',
                    '{"epoch": 2, "epochs": 2, "loss": -Infinity, "eta_s": Infinity}'],
            "huge": ['{"epoch": 1, "epochs": 2, "loss": -1e308, "eta_s": -1e308}',
                     '{"epoch": 2, "epochs": -3, "step": 1e400, "eta_s": -5}']}[attack]
    for i, doc in enumerate(docs):
        time.sleep(1.5 if i else 0)  # the controller looks once a second
        open(os.path.join(checkpoints, "progress.json"), "w").write(doc)
    open(os.path.join(model, "weights.txt"), "w").write("silent")
'''


@pytest.mark.parametrize("attack", ["sane", "nan", "huge"])
def test_a_training_shows_only_progress_numbers_in_range(tmp_path, dev_raw, monkeypatch,
                                                         workspace, attack):
    """An approach's progress.json is shown, never trusted: a NaN, an infinity, -1e308 or a
    negative count or time left is left out of the progress line (no 300-digit ETA), with
    one warning for the whole training; numbers in range are shown as they are."""
    approach_registry(tmp_path, dev_raw, monkeypatch, workspace, "progress", PROGRESS)
    done = subprocess.run(["qashift", "train", "-a", "progress", "-t", "tiny-train", "--set",
                           f"attack={attack}", "--runner", "local"], env=os.environ.copy(),
                          capture_output=True, text=True, timeout=300)
    said = done.stdout + done.stderr
    assert done.returncode == 0 and "Traceback" not in said, said
    assert not re.search(r"\d{12}", said.replace(str(workspace), "")), said
    warnings = [line for line in said.splitlines() if "out of range or not a number" in line]
    if attack == "sane":
        assert "loss 0.5000, eta 30 s" in said and warnings == [], said
    else:
        assert len(warnings) == 1 and "progress.json holds" in warnings[0], said
        shown = [line for line in said.splitlines() if line.startswith("  epoch")]
        assert shown and shown[0] == "  epoch 1/2", said
        assert not any("eta" in line or "loss" in line for line in shown), said


@pytest.mark.parametrize("written", ["nan", "inf", "-1e308", "-5", "soon", ""])
def test_a_hand_edited_time_in_a_table_is_no_time_rather_than_a_broken_eta(written):
    assert _seconds({"wall_s": written}, "wall_s") == 0.0
    assert _seconds({"wall_s": "12.5"}, "wall_s") == 12.5


@pytest.mark.parametrize("doc, said", [
    ({"epoch": 2, "epochs": 6, "loss": 0.417, "eta_s": 180}, "epoch 2/6, loss 0.4170, eta 3 min"),
    ({"epoch": 2, "loss": 0.5}, "epoch 2, loss 0.5000"),
    ({"eta_s": 30}, "eta 30 s"),
    ({}, "started"),
])
def test_progress_shows_only_the_numbers_it_has(doc, said):
    assert progress_text(progress_numbers(doc)[0]) == said


@pytest.mark.slow  # it trains the plan's systems
def test_the_study_loop_and_population_scoring_go_through_the_one_entry(plan, workspace,
                                                                         monkeypatch):
    """Training a plan, scoring its systems on more sets (`strata --score`, `study run
    --table`'s new sets) and `population --score` all evaluate through `api.evaluate`: a spy
    in its place sees each call, with the config of the cells asked for."""
    real, seen = evaluation.evaluate, []

    def spy(config, *args, **kwargs):
        seen.append(config)
        return real(config, *args, **kwargs)

    monkeypatch.setattr(evaluation, "evaluate", spy)
    found, store = plans.load(plan), Store(workspace)
    plans.run(found, Dispatcher("local"), store)
    assert len(seen) == 4 and all(c.testsets == ("tiny-test", "tiny-train") for c in seen)
    seen.clear()
    sets = [testsets.get("tiny-test")]
    done, skipped = plans.score_frozen(found, sets, Dispatcher("local"), store, parallel=1)
    assert done == 4 and not skipped
    [config] = seen
    assert len(config.bundles) == 4 and config.testsets == ("tiny-test",)
    seen.clear()
    evaluated, _ = plans.score_systems(found, sets, "local", store, parallel=1, limit=5)
    [config] = seen
    assert config.limit == 5 and len(evaluated.report.outcomes) == 4
