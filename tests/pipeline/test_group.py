"""Cells of one approach's systems on one set run in one process: each keeps its own lease,
key, answers and CPU seconds, and gives the answers it gives alone; a system whose run fails
in the group is run alone, which names its failure; a submission never joins a group."""

from __future__ import annotations

import json

import pytest

from evaluator.bundles import spec as bundles
from evaluator.data import testsets
from evaluator.jobs.job import Job
from evaluator.pipeline import matrix
from evaluator.pipeline.group import MAX_SYSTEMS, balanced, groups
from evaluator.runners.dispatch import Dispatcher
from evaluator.store.store import Store
from evaluator.training import frozen, systems
from evaluator.training.run import train
from tests.conftest import FIRST_WORD, tiny_registry
from tests.docker_kit import needs_docker
from tests.support.approaches import WORDS, approach_registry, train_job

# `words`, except that a system set to answer with its passage's third word cannot
FAILS_ON_TWO = WORDS.replace(
    "    word = int(open(os.path.join(model, \"weights.txt\")).read())\n",
    "    word = int(open(os.path.join(model, \"weights.txt\")).read())\n"
    "    if word == 2:\n        sys.exit(\"word 2 cannot answer\")\n")


@pytest.fixture
def three_systems(tmp_path, dev_raw, monkeypatch, workspace):
    """Three trained systems of one approach, answering with word 0, 1 and 2 (which fails)."""
    assert FAILS_ON_TWO != WORDS
    approach_registry(tmp_path, dev_raw, monkeypatch, workspace, "words", FAILS_ON_TWO)
    store, runner = Store(workspace), Dispatcher("local")
    trained = [train(train_job("words", word=word), runner, store) for word in (0, 1, 2)]
    return store, [Job(t.bundle, testsets.get("tiny-test")) for t in trained]


def records(store: Store) -> dict[str, dict]:
    return {row["bundle"]: {**row, "run": json.loads(row["run_record"])}
            for row in store.results()}


def test_the_systems_of_one_approach_run_in_one_process_each_cell_its_own(three_systems):
    store, jobs = three_systems
    report = matrix.run(jobs, Dispatcher("local"), store)
    ok, failed = jobs[:2], jobs[2]
    assert [o.job for o in report.outcomes] == jobs
    assert [o.result is not None for o in report.outcomes] == [True, True, False]
    stored = records(store)
    assert set(stored) == {job.bundle.id for job in ok}
    group = stored[ok[0].bundle.id]["run"]["details"]["group"]
    assert group["systems"] == 3 and group["exit_code"] == 0
    for job in ok:  # keyed as alone, and charged their own CPU plus a share of the start
        row = stored[job.bundle.id]
        assert row["key"] == job.key and row["run"]["details"]["group"] == group
        assert 0 < row["run"]["cpu_s"] <= group["cpu_s"]
    # the failing system was run alone, and its failure is its own, in one line
    bad = report.outcomes[2]
    assert bad.failure_class == "nonzero-exit" and "word 2 cannot answer" in bad.message
    [failure] = store.failures()
    assert failure["bundle"] == failed.bundle.id


def test_a_system_answers_alike_in_a_group_and_alone(three_systems):
    store, jobs = three_systems
    ok = jobs[:2]
    matrix.run(ok, Dispatcher("local"), store)
    grouped = {b: r["predictions_sha256"] for b, r in records(store).items()}
    assert all("group" in r["run"]["details"] for r in records(store).values())
    matrix.run(ok, Dispatcher("local"), store, rerun=True, together=False)
    alone = records(store)
    assert all("group" not in r["run"]["details"] for r in alone.values())
    assert {b: r["predictions_sha256"] for b, r in alone.items()} == grouped


def test_stored_cells_are_found_and_only_the_others_run_together(three_systems):
    store, jobs = three_systems
    matrix.run(jobs[:1], Dispatcher("local"), store)
    report = matrix.run(jobs[:2], Dispatcher("local"), store)
    assert [o.result.cached for o in report.outcomes] == [True, False]
    # one cell left to run: it runs alone, the usual way
    assert "group" not in records(store)[jobs[1].bundle.id]["run"]["details"]


def test_submissions_and_other_sets_never_join_a_group(tmp_path, monkeypatch, three_systems):
    store, jobs = three_systems
    local = Dispatcher("local")
    other = Job(jobs[0].bundle, testsets.get("tiny-train"))
    assert [len(u) for u in groups([*jobs, other], local.runner_for)] == [3, 1]
    sample = Job(jobs[1].bundle, jobs[1].testset, {"limit": 5, "seed": 0})
    assert [len(u) for u in groups([jobs[0], sample], local.runner_for)] == [1, 1]
    many = [jobs[0]] * (MAX_SYSTEMS + 1)
    assert [len(u) for u in groups(many, local.runner_for)] == [MAX_SYSTEMS, 1]
    (tmp_path / "submissions").mkdir()
    tiny_registry(tmp_path / "submissions", monkeypatch, {}, {"a": FIRST_WORD, "b": FIRST_WORD})
    submissions = [Job(bundles.get(b), jobs[0].testset) for b in ("a", "b")]
    assert [len(u) for u in groups(submissions, local.runner_for)] == [1, 1]


def span_reader_systems(approach: str, count: int) -> list[str]:
    """The first `count` frozen systems of a span-reader approach, a contextual one among
    them where the approach has one."""
    found = sorted(m["system"]["system"] for m in frozen.manifests()
                   if m["system"]["approach"] == approach)
    contextual = [m["system"]["system"] for m in frozen.manifests()
                  if json.loads(m["system"]["hyperparameters"]).get("contextual")]
    return (contextual[:1] + [s for s in found if s not in contextual])[:count]


@pytest.mark.slow
def test_frozen_span_readers_answer_byte_for_byte_alike_in_a_group_and_alone(workspace):
    """The approach's own predict program, run several times in one interpreter, writes the
    very bytes it writes alone: for a contextual reader (encoder states) and plain ones."""
    store = Store(workspace)
    chosen = span_reader_systems("bidaf-plus-plus", 3)
    assert len(chosen) == 3
    jobs = [Job(b, testsets.get("squad-dev-heldout"), {"limit": 12, "seed": 0})
            for b in systems.resolve_bundles(chosen, store)]
    matrix.run(jobs, Dispatcher("local"), store)
    grouped = records(store)
    assert all(r["run"]["details"]["group"]["systems"] == 3 for r in grouped.values())
    matrix.run(jobs, Dispatcher("local"), store, rerun=True, together=False)
    alone = records(store)
    assert {b: r["predictions_sha256"] for b, r in alone.items()} == \
        {b: r["predictions_sha256"] for b, r in grouped.items()}


@pytest.mark.usefixtures("no_container_left_behind")
@needs_docker[0]
def test_in_docker_a_group_is_one_container_and_each_cell_its_own(three_systems):
    store, jobs = three_systems
    report = matrix.run(jobs, Dispatcher("docker"), store)
    assert [o.result is not None for o in report.outcomes] == [True, True, False]
    assert report.outcomes[2].failure_class == "nonzero-exit"
    assert "word 2 cannot answer" in report.outcomes[2].message
    grouped = records(store)
    for row in grouped.values():
        assert row["runner"] == "docker" and row["run"]["details"]["group"]["systems"] == 3
        assert row["run"]["details"]["container_limits"]["network"] == "none"
    matrix.run(jobs[:2], Dispatcher("local"), store, rerun=True, together=False)
    assert {b: r["predictions_sha256"] for b, r in records(store).items()} == \
        {b: r["predictions_sha256"] for b, r in grouped.items()}


def test_balanced_units_split_a_group_over_its_share_and_run_the_longest_first():
    cells = [object() for _ in range(12)]  # `balanced` reads nothing of a cell but its cost
    cost = {id(c): 1.0 for c in cells[:11]} | {id(cells[11]): 30.0}
    one_group, alone = cells[:10], [cells[10]]
    units = balanced([one_group, alone, [cells[11]]], lambda c: cost[id(c)], parallel=2)
    # the whole is 41 s; a share is 41 / 4: the ten cells of 1 s stay one group, the 30 s
    # cell runs first, then the group, then the single cell
    assert [len(u) for u in units] == [1, 10, 1] and units[0] == [cells[11]]
    # one approach's twelve cells alone on two workers: four parts of three, not one group
    # holding one core while the other idles
    even = balanced([cells], lambda c: 1.0, parallel=2)
    assert sorted(len(u) for u in even) == [3, 3, 3, 3]
    assert sorted(id(c) for u in even for c in u) == sorted(map(id, cells))
    assert balanced([one_group, alone], lambda c: 1.0, parallel=1) == [one_group, alone]
    kept = balanced([alone, [cells[11]], one_group], lambda c: cost[id(c)], parallel=2,
                    longest_first=False)  # a first look's order: the quickest first
    assert kept == [alone, [cells[11]], one_group]
