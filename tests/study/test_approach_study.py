"""An approach-level study (Liu et al.): a plan names benchmarks (a test set and its training
split, or a training split at a train size), trains each approach on each benchmark's
training data and scores it on that benchmark's test set only; random draws from the search
space join the plan's settings, reproducibly; a recorded selection rule turns the runs into
one approach x benchmark matrix, which the concurrence report reads."""

from __future__ import annotations

import csv

import pytest
from click.testing import CliRunner

from analysis.studies import approach_concurrence
from evaluator import study
from evaluator.bundles import spec as bundles
from evaluator.cli.main import main
from tests.conftest import REPO, write_testset
from tests.training.tiny import tiny_folders

PLAN = """\
id: tiny-approach-level
name: logistic regression on two benchmarks
benchmarks:
  - tiny-test
  - {name: tiny-40, train: tiny-train, size: 40, test: tiny-test, paper: "SQuAD 1.1 — 1K"}
selection: first
approaches:
  logreg-rajpurkar: {settings: [{epochs: 1}], draws: 1}
"""


@pytest.fixture
def plan(tmp_path, dev_raw, monkeypatch, workspace):
    sets = tiny_folders(tmp_path, dev_raw, monkeypatch, train_paragraphs=15,
                        test_paragraphs=8, test_trains_on_split=True)
    second = dev_raw["data"][1]
    write_testset(sets, "tiny-untrained", {"version": "1.1", "data": [
        dict(second, paragraphs=second["paragraphs"][8:10])]})
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN)
    return path


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def test_each_benchmark_trains_on_its_own_data_and_is_scored_on_its_own_test_set(plan):
    found = study.load(plan)
    assert [b.name for b in found.benchmarks] == ["tiny-test", "tiny-40"]
    assert [(j.split.id, j.size) for j in found.trainings] == [
        ("tiny-train", None), ("tiny-train", None), ("tiny-train", 40), ("tiny-train", 40)]
    assert all([t.id for t in found.testsets_for(j)] == ["tiny-test"]
               for j in found.trainings)
    assert found.cells == 4 * 2 and found.selection == "first"


def test_draws_come_from_the_search_space_keep_the_fixed_values_and_repeat_exactly(plan):
    approach = bundles.get("logreg-rajpurkar")
    search = approach.hyperparameters["search"]
    made = study.draws(approach, {"epochs": 1}, 5, [{"epochs": 1}])
    assert made == study.draws(approach, {"epochs": 1}, 5, [{"epochs": 1}])
    assert len({tuple(sorted(d.items())) for d in made}) == 5
    for draw in made:
        assert draw["epochs"] == 1
        assert all(draw[k] in search[k] for k in draw if k != "epochs")
        assert set(draw) == set(search)
    found = study.load(plan)
    assert found.trainings[0].overrides == {"epochs": 1}
    assert found.trainings[1].overrides == {"epochs": 1, **{
        k: v for k, v in made[0].items() if k != "epochs"}}


@pytest.mark.parametrize("original, broken, says", [
    ("  - tiny-test\n", "  - tiny-untrained\n", "has no training split"),
    ("selection: first", "selection: best", "selection"),
    ("selection: first", "selection: first\nsplit: tiny-train", "either benchmarks"),
    ("draws: 1}", "draws: 1, sizes: [10]}", "train sizes from the benchmarks"),
    ("  - tiny-test\n", "  - tiny-test\n  - tiny-test\n", "benchmark twice"),
])
def test_a_bad_approach_level_plan_is_one_line(plan, original, broken, says, tmp_path,
                                              workspace):
    plan.write_text(PLAN.replace(original, broken))
    result = invoke("study", "status", str(plan))
    assert result.exit_code == 1, result.output
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error:") and says in line
    table = tmp_path / "t.csv"
    run = invoke("study", "run", str(plan), "--runner", "local", "--table", str(table))
    assert run.exit_code == 1 and len(run.stderr.strip().splitlines()) == 1
    assert not table.exists() and not list(workspace.rglob("*.sqlite*"))  # nothing written


@pytest.mark.slow
def test_the_matrix_follows_the_recorded_rule_and_feeds_the_concurrence_report(plan, tmp_path):
    out, runs = tmp_path / "m.csv", tmp_path / "runs.csv"
    early = invoke("study", "matrix", str(plan), "--out", str(out))
    assert early.exit_code == 1 and "no approach has a score on every benchmark" in \
        early.output and not out.exists()

    done = invoke("study", "run", str(plan), "--runner", "local")
    assert done.exit_code == 0, done.output
    assert "trained 4, training failed 0 | evaluated 4, evaluation failed 0 | 0 cells" in \
        done.output

    made = invoke("study", "matrix", str(plan), "--out", str(out), "--runs", str(runs))
    assert made.exit_code == 0, made.output
    with open(runs, newline="") as handle:
        recorded = list(csv.DictReader(handle))
    assert len(recorded) == 4 and {r["selection"] for r in recorded} == {"first"}
    em = {(r["benchmark"], r["system"]): float(r["em"]) for r in recorded}
    picked = {r["benchmark"]: r["system"] for r in recorded if r["selected"] == "True"}
    order = [job.system_id for job in study.load(plan).trainings]
    assert picked == {"tiny-test": order[0], "tiny-40": order[2]}

    scores = approach_concurrence.read_scores(out)
    assert scores.mode == "approach-level"
    assert scores.scores.loc["logreg-rajpurkar", "tiny-test"] == pytest.approx(
        em[("tiny-test", order[0])], abs=0.005)
    assert scores.scores.loc["logreg-rajpurkar", "tiny-40"] == pytest.approx(
        em[("tiny-40", order[2])], abs=0.005)

    plan.write_text(PLAN.replace("selection: first", "selection: max"))
    again = invoke("study", "matrix", str(plan), "--out", str(out))
    assert again.exit_code == 0, again.output
    best = approach_concurrence.read_scores(out).scores.loc["logreg-rajpurkar", "tiny-test"]
    assert best == pytest.approx(max(em[("tiny-test", s)] for s in order[:2]), abs=0.005)
    plan.write_text(PLAN.replace("selection: first", "selection: mean"))
    assert invoke("study", "matrix", str(plan), "--out", str(out)).exit_code == 0
    mean = approach_concurrence.read_scores(out).scores.loc["logreg-rajpurkar", "tiny-40"]
    assert mean == pytest.approx(sum(em[("tiny-40", s)] for s in order[2:]) / 2, abs=0.005)

    # where the store is gone, the study's committed table gives the same matrix
    ledger, elsewhere = tmp_path / "t.csv", tmp_path / "m2.csv"
    assert invoke("study", "table", str(plan), "--out", str(ledger)).exit_code == 0
    empty = ["--workspace", str(tmp_path / "empty")]
    assert invoke("study", "matrix", str(plan), "--out", str(elsewhere), *empty).exit_code == 1
    moved = invoke("study", "matrix", str(plan), "--out", str(elsewhere), "--table",
                   str(ledger), *empty)
    assert moved.exit_code == 0, moved.output
    assert elsewhere.read_text() == out.read_text()


def test_the_shipped_plan_with_the_papers_six_runs_per_cell_names_every_run(tmp_path):
    """Liu et al.'s bookkeeping (F8): the defaults and five random draws per approach and
    benchmark; the shipped plan (12 approaches x 26 benchmarks) then names 1,872 runs, and
    the selection rule is part of the plan, not of the runs."""
    text = (REPO / "studies" / "approach-level.yaml").read_text()
    plan = tmp_path / "six.yaml"
    plan.write_text(text.replace("settings: [{epochs: 4}]}", "settings: [{epochs: 4}], "
                                 "draws: 5}").replace(": {}\n", ": {draws: 5}\n").replace(
        "settings: [{layers: 2}]}", "settings: [{layers: 2}], draws: 5}"))
    found = study.load(plan)
    assert len(found.benchmarks) == 26
    assert len({job.approach.id for job in found.trainings}) == 12
    assert len(found.trainings) == 12 * 26 * 6
    per_cell = {}
    for job in found.trainings:
        per_cell.setdefault((job.approach.id, job.split.id, job.size), set()).add(
            job.system_id)
    assert set(map(len, per_cell.values())) == {6}
    assert found.selection == "first"


@pytest.mark.slow
def test_a_study_under_way_writes_the_benchmarks_every_approach_is_scored_on(plan, tmp_path):
    plan.write_text(PLAN.replace("draws: 1", "draws: 0").replace(
        "selection: first",
        "  - {name: tiny-60, train: tiny-train, size: 60, test: tiny-test}\nselection: first"))
    done = invoke("study", "run", str(plan), "--runner", "local", "--only", "*~40/*",
                  "--only", "*@tiny-train/*")
    assert done.exit_code == 0, done.output
    out = tmp_path / "m.csv"
    whole = invoke("study", "matrix", str(plan), "--out", str(out))
    assert whole.exit_code == 1 and "no approach has a score on every benchmark" in \
        whole.output and not out.exists()
    part = invoke("study", "matrix", str(plan), "--out", str(out), "--keep", "benchmarks")
    assert part.exit_code == 0, part.output
    assert "benchmarks not yet scored for every approach: tiny-60" in part.output
    scores = approach_concurrence.read_scores(out)
    assert list(scores.scores.columns) == ["tiny-test", "tiny-40"]
    assert list(scores.scores.index) == ["logreg-rajpurkar"]
