"""The population's committed results kept in a store as recorded results: one cell per
system and test set, keyed as the run it came from, recorded once per table version, and
superseded by any run of the same cell."""

from __future__ import annotations

import csv
import json

import pytest
from click.testing import CliRunner

from evaluator.api.results import Results
from evaluator.cli.main import evaluate_cmd
from evaluator.core.errors import UserError
from evaluator.store.queries import is_recorded
from evaluator.store.store import Store
from evaluator.training import recorded
from tests.conftest import FIRST_WORD, REPO, tiny_registry

POPULATION = REPO / "results" / "population.csv"


def table_rows(path=POPULATION) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_the_committed_table_is_recorded_once_a_cell_per_system_and_set(workspace):
    store = Store.open_default()
    committed = table_rows()
    assert recorded.record(store) == len(committed) // 2
    assert recorded.record(store) == 0  # the same version: nothing to do
    rows = {(r["bundle"], r["testset"]): r for r in store.results(recorded=True)}
    assert len(rows) == len(committed) // 2 and not store.results()  # no run was made
    for line in committed[:40]:
        row = rows[(line["model"], line["testset"])]
        assert row[line["metric"]] == float(line["value"])
        assert row["bundle_digest"] == line["bundle_digest"]
        assert row["predictions_sha256"] is None and is_recorded(row)
        assert json.loads(row["run_record"])["recorded_from"] == "results/population.csv"


def test_a_new_version_of_the_table_replaces_the_old_one(workspace, tmp_path):
    store = Store.open_default()
    committed = table_rows()
    path = tmp_path / "population.csv"
    _write(path, committed)
    assert recorded.record(store, path) == len(committed) // 2
    _write(path, committed[:20])
    assert recorded.record(store, path) == 10
    assert len(store.results(recorded=True)) == 10


@pytest.mark.parametrize("change, says", [
    ({"value": "150"}, "em 150.0 is outside [0, 100]"),
    ({"bundle_digest": "abc"}, "bundle_digest is not a sha256 digest"),
    ({"testset": "../x"}, "testset '../x' is not a valid name"),
])
def test_a_bad_row_is_one_line_and_nothing_is_recorded(workspace, tmp_path, change, says):
    store = Store.open_default()
    committed = table_rows()
    committed[0] = {**committed[0], **change}
    if "value" not in change:  # the cell's f1 row too
        committed[1] = {**committed[1], **change}
    path = tmp_path / "population.csv"
    _write(path, committed)
    with pytest.raises(UserError) as err:
        recorded.record(store, path)
    assert "line 2" in str(err.value) and says in str(err.value)
    assert "\n" not in str(err.value)
    assert store.results(recorded=True) == []


def test_a_run_supersedes_the_recorded_result_of_its_cell(tmp_path, small_dev, monkeypatch,
                                                          workspace):
    tiny_registry(tmp_path, monkeypatch, {"toy": small_dev, "other": small_dev},
                  {"honest": FIRST_WORD})
    done = CliRunner().invoke(evaluate_cmd, ["-b", "honest", "-t", "toy", "-t", "other",
                                             "--runner", "local", "--json"])
    assert done.exit_code == 0, done.output
    store = Store.open_default()
    runs = {r["testset"]: r for r in store.results()}
    table = []
    for testset in ("toy", "other"):
        run = runs[testset]
        for metric in ("em", "f1"):
            table.append({"model": "honest", "testset": testset, "metric": metric,
                          "value": "1.5", "lo": "1", "hi": "2", "n": run["n"],
                          "bundle_digest": run["bundle_digest"],
                          "testset_sha256": run["testset_sha256"],
                          "scorer_version": run["scorer_version"], "runner": "local",
                          "wall_s": "1.0"})
    store.delete(runs["other"]["key"])  # that cell now has only its recorded result
    path = tmp_path / "table.csv"
    _write(path, table)
    assert recorded.record(store, path) == 2
    latest = {r["testset"]: r for r in Results(store).rows()}
    assert latest["toy"]["f1"] == runs["toy"]["f1"] != 1.5  # the run, recorded after it
    assert not is_recorded(latest["toy"])
    assert latest["other"]["f1"] == 1.5 and is_recorded(latest["other"])
    assert recorded.cells(path)[0]["key"] == runs["toy"]["key"]  # keyed as the run


def _write(path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def test_every_view_shows_a_recorded_cell_labelled_and_none_pairs_it(tmp_path, small_dev,
                                                                     monkeypatch, workspace):
    """status, results list/show, the API: the recorded cell with its numbers, said to be
    recorded; export and compare, which need per-question scores, say to run it."""
    from evaluator import api
    from evaluator.cli.compare import paired_units
    from evaluator.cli.main import main

    tiny_registry(tmp_path, monkeypatch, {"toy": small_dev, "other": small_dev},
                  {"honest": FIRST_WORD})
    runner = CliRunner()
    assert runner.invoke(evaluate_cmd, ["-b", "honest", "-t", "toy", "-t", "other",
                                        "--runner", "local"]).exit_code == 0
    store = Store.open_default()
    run = {r["testset"]: r for r in store.results()}["other"]
    store.delete(run["key"])
    path = tmp_path / "table.csv"
    _write(path, [{"model": "honest", "testset": "other", "metric": m, "value": v, "lo": "",
                   "hi": "", "n": run["n"], "bundle_digest": run["bundle_digest"],
                   "testset_sha256": run["testset_sha256"],
                   "scorer_version": run["scorer_version"], "runner": "local", "wall_s": ""}
                  for m, v in (("em", "12.5"), ("f1", "33.25"))])
    assert runner.invoke(main, ["store", "record", str(path)]).exit_code == 0

    status = runner.invoke(main, ["status", "-b", "honest", "-t", "toy", "-t", "other"]).stdout
    assert "33.2r" in status and "1 marked r are recorded" in status
    listed = runner.invoke(main, ["results", "list", "-b", "honest"]).stdout
    [line] = [x for x in listed.splitlines() if " other " in x]
    assert "33.250" in line and f"recorded from {path}" in line
    shown = runner.invoke(main, ["results", "show", "honest", "other"]).stdout
    assert "f1: 33.25" in shown and f"recorded from {path}" in shown
    frame = api.results(bundle="honest").set_index("testset")
    assert frame.at["other", "f1"] == 33.25 and frame.at["other", "recorded_from"] == str(path)
    assert frame.at["toy", "recorded_from"] is None
    export = runner.invoke(main, ["results", "export", "honest", "other", "--out",
                                  str(tmp_path / "out")])
    assert export.exit_code == 1 and "without predictions" in export.output
    assert not (tmp_path / "out").exists()
    with pytest.raises(UserError, match="without per-question scores to pair"):
        paired_units(store, "honest", "honest", "other")


def test_the_committed_table_is_an_export_of_the_store_that_records_it(workspace, tmp_path):
    """The population's table recorded in an empty store, then written from that store as
    `study table` writes it: the same bytes as the committed file. The table is an export of
    the store, whichever holds the cells first."""
    from evaluator.data import testsets
    from evaluator.study import load
    from evaluator.training import table

    store = Store.open_default()
    recorded.record(store)
    plan = load(REPO / "studies" / "population.yaml")
    folders = {name: testsets.from_folder(folder)
               for name, folder in testsets.available().items()}
    rows = table.rows(store, Results(store).rows(), {k: t.reference for k, t in folders.items()},
                      {job.approach.id: job.approach.metadata.get("family")
                       for job in plan.trainings},
                      {k: t.train for k, t in folders.items()})
    table.write(table.ordered(rows), tmp_path / "again.csv")
    assert (tmp_path / "again.csv").read_bytes() == POPULATION.read_bytes()
