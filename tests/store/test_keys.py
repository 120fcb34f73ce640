"""A stored result answers for one named cell: its key holds the test set's id, so two folders
of the same bytes are two cells; a store made when keys held no id is rekeyed once, when it is
opened (its results stay cached), and another such store's rows come in under their keys."""

from __future__ import annotations

import json
import shutil
import sqlite3

from click.testing import CliRunner

from evaluator.cli.main import evaluate_cmd, main
from evaluator.jobs.job import name_free_key
from evaluator.store import check as store_check
from evaluator.store.schema import KEY_SCHEME
from evaluator.store.store import Store
from evaluator.store.transfer import import_store
from tests.conftest import FIRST_WORD, tiny_registry, write_testset

ARGV = ["-b", "first-word", "--runner", "local", "--json"]


def evaluate(testset: str) -> dict:
    result = CliRunner().invoke(evaluate_cmd, [*ARGV, "-t", testset])
    assert result.exit_code == 0, result.output
    [cell] = json.loads(result.stdout)["results"]
    return cell


def test_two_folders_of_the_same_bytes_are_two_cells_each_under_its_own_name(
        workspace, tmp_path, monkeypatch, small_dev):
    sets, _ = tiny_registry(tmp_path, monkeypatch, {"original": small_dev, "copy": small_dev},
                            {"first-word": FIRST_WORD})
    original, copy = evaluate("original"), evaluate("copy")
    assert (copy["testset"], copy["cached"]) == ("copy", False)  # never the original's row
    assert copy["f1"] == original["f1"] and copy["key"] != original["key"]
    assert "first-word" in CliRunner().invoke(main, ["results", "list", "-t", "copy"]).output
    assert evaluate("original")["cached"] and evaluate("copy")["cached"]
    write_testset(sets, "miscounted", small_dev, questions=3)  # checked, not served as cached
    wrong = CliRunner().invoke(evaluate_cmd, [*ARGV[:-1], "-t", "miscounted"])
    assert wrong.exit_code == 1 and "miscounted" in wrong.output


def as_an_older_version_left_it(workspace, key: str) -> str:
    """Put the store back as it was before ids were in keys: the cell's row and a failure
    under the name-free key, the index at scheme 0; that key."""
    db = sqlite3.connect(workspace / "results.sqlite", isolation_level=None)
    row = dict(zip(("bundle_digest", "testset_sha256", "scorer_version", "options"),
                   db.execute("SELECT bundle_digest, testset_sha256, scorer_version, options "
                              "FROM results WHERE key = ?", (key,)).fetchone(), strict=True))
    old = name_free_key(row["bundle_digest"], row["testset_sha256"], row["scorer_version"],
                        json.loads(row["options"]))
    db.execute("UPDATE results SET key = ? WHERE key = ?", (old, key))
    db.execute("INSERT INTO failures (key, bundle, testset, failure_class, message, created_at)"
               " VALUES (?, 'first-word', 'one', 'nonzero-exit', 'an earlier failure', 1.0)",
               (old,))
    db.execute("PRAGMA user_version = 0")
    db.close()
    return old


def test_a_store_made_before_ids_were_in_keys_is_rekeyed_once_and_its_results_stay_cached(
        workspace, tmp_path, monkeypatch, small_dev):
    tiny_registry(tmp_path, monkeypatch, {"one": small_dev}, {"first-word": FIRST_WORD})
    first = evaluate("one")
    old = as_an_older_version_left_it(workspace, first["key"])
    elsewhere = tmp_path / "older-store"
    shutil.copytree(workspace, elsewhere)

    again = evaluate("one")
    assert again["cached"] and again["key"] == first["key"] and again["f1"] == first["f1"]
    db = sqlite3.connect(workspace / "results.sqlite")
    assert db.execute("PRAGMA user_version").fetchone()[0] == KEY_SCHEME
    assert db.execute("SELECT key FROM failures").fetchall() == [(first["key"],)]
    assert db.execute("SELECT count(*) FROM results WHERE key = ?", (old,)).fetchone()[0] == 0

    here = Store(tmp_path / "empty-store")
    report = import_store(here, elsewhere)  # read-only: its rows are rekeyed as they come in
    assert report.results == 1 and not report.refused
    assert here.get(first["key"])["f1"] == first["f1"]["value"]


def test_rekeying_leaves_a_damaged_row_for_check_and_a_failure_with_its_own_test_set(
        workspace, tmp_path, monkeypatch, small_dev):
    """Opening an older store never fails on a row that does not parse (check finds it,
    repair drops it), and a failure moves with its own cell only, not with another test set
    of the same bytes."""
    tiny_registry(tmp_path, monkeypatch, {"one": small_dev}, {"first-word": FIRST_WORD})
    first = evaluate("one")
    old = as_an_older_version_left_it(workspace, first["key"])
    db = sqlite3.connect(workspace / "results.sqlite", isolation_level=None)
    db.execute("INSERT INTO failures (key, bundle, testset, failure_class, message, created_at)"
               " VALUES (?, 'first-word', 'one-copy', 'nonzero-exit', 'its own', 2.0)", (old,))
    db.execute("INSERT INTO results SELECT 'f' || substr(key, 2), bundle, bundle_digest, "
               "testset, testset_sha256, scorer, scorer_version, '{not json', n, questions, "
               "missing, extra, em, f1, em_lo, em_hi, f1_lo, f1_hi, level, predictions_sha256, "
               "scores_sha256, log_sha256, runner, device, image_digest, wall_s, run_record, "
               "created_at FROM results")
    db.close()
    store = Store(workspace)
    assert {r["key"] for r in store.results()} == {first["key"], "f" + old[1:]}
    failures = {(f["testset"], f["key"]) for f in store.failures()}
    assert failures == {("one", first["key"]), ("one-copy", old)}
    report = store_check.check(store)
    assert list(report.rows_invalid) == ["f" + old[1:]]
    store_check.repair(store)
    assert [r["key"] for r in store.results()] == [first["key"]]
