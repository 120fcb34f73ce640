"""`store import` from a hostile workspace: a digest that is a path, a weights folder with a
link inside, fabricated or ill-typed result rows, an index that is not a plain file. Nothing
that cannot be verified comes in, a refused import leaves this store as it was, and `store
check` finds a fabricated row whatever its numbers."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from evaluator.core.errors import UserError
from evaluator.runners.dispatch import Dispatcher
from evaluator.store import check as store_check
from evaluator.store.store import Store
from evaluator.store.transfer import import_store
from evaluator.training.run import train
from tests.support.approaches import train_job


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, env=os.environ.copy(),
                          timeout=600)


@pytest.fixture
def elsewhere(words, tmp_path, monkeypatch):
    """A store that trained the honest system and scored it (the other machine's), and an
    empty store here."""
    made = Store.open_default()
    train(train_job("words"), Dispatcher("local"), made)
    made.close()
    done = run("evaluate", "-b", "words@tiny-train/s0", "-t", "tiny-test", "--runner",
               "local")
    assert done.returncode == 0, done.stderr
    here = tmp_path / "here"
    monkeypatch.setenv("QASHIFT_WORKSPACE", str(here))
    return {"other": words["workspace"], "here": here, "gold": words["gold"]}


def sql(workspace: Path, statement: str, *args) -> None:
    conn = sqlite3.connect(workspace / "results.sqlite")
    with conn:
        conn.execute(statement, args)
    conn.close()


def listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() \
        else []


def test_an_honest_store_imports_whole(elsewhere):
    report = import_store(Store(elsewhere["here"]), elsewhere["other"])
    assert (report.systems, report.results, report.refused) == (1, 1, [])
    assert store_check.check(Store(elsewhere["here"])).ok


def test_a_weights_digest_that_is_a_path_is_refused_and_never_mounted(elsewhere):
    secret = elsewhere["gold"].parent
    sql(elsewhere["other"], "UPDATE systems SET weights_digest = ?", str(secret))
    report = import_store(Store(elsewhere["here"]), elsewhere["other"])
    assert report.systems == 0 and report.results == 0
    assert any("weights_digest is not a sha256 digest" in why for why in report.refused)
    assert Store(elsewhere["here"]).systems() == []
    done = run("evaluate", "-b", "words@tiny-train/s0", "-t", "tiny-test", "--runner",
               "local")
    assert done.returncode != 0 and "not trained yet" in done.stderr


def test_a_weights_folder_with_a_linked_sub_folder_is_refused(elsewhere):
    [system] = Store(elsewhere["other"]).systems()
    folder = Store(elsewhere["other"]).model_path(system["weights_digest"])
    folder.chmod(0o755)
    (folder / "data").symlink_to(elsewhere["gold"].parent, target_is_directory=True)
    report = import_store(Store(elsewhere["here"]), elsewhere["other"])
    assert report.systems == 0
    assert any("data is a link" in why for why in report.refused), report.refused
    assert Store(elsewhere["here"]).systems() == []


@pytest.mark.parametrize("change, why", [
    ("UPDATE results SET predictions_sha256 = '', scores_sha256 = '', em = 100, f1 = 100",
     "predictions_sha256 is not a sha256 digest"),
    ("UPDATE results SET em = 'lots'", "em is not a number"),
    ("UPDATE results SET em = 100, f1 = 100", "are not the"),
    ("UPDATE results SET n = -3", "n -3 is outside"),
    ("UPDATE results SET options = '[[[['", "options is not valid JSON"),
    ("UPDATE results SET testset = '../../etc'", "is not a valid name"),
])
def test_fabricated_and_ill_typed_result_rows_are_refused_and_found_by_check(
        elsewhere, change, why):
    sql(elsewhere["other"], change)
    report = import_store(Store(elsewhere["here"]), elsewhere["other"])
    assert report.results == 0 and any(why in line for line in report.refused), report.refused
    assert Store(elsewhere["here"]).results() == []
    found = store_check.check(Store(elsewhere["other"]))
    assert not found.ok and any(why in line for line in found.rows_invalid.values())
    listed = run("qashift", "results", "list")  # this store: unharmed by the other's rows
    assert listed.returncode == 0, listed.stderr


@pytest.mark.parametrize("break_it", ["fifo", "link", "view", "garbage"])
def test_an_index_that_is_no_plain_store_leaves_this_store_as_it_was(elsewhere, break_it):
    here = Store(elsewhere["here"])
    here.put_object(b"already here")
    before = listing(elsewhere["here"])
    db = elsewhere["other"] / "results.sqlite"
    sql(elsewhere["other"], "PRAGMA wal_checkpoint(TRUNCATE)")
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode = DELETE")  # one plain file, to break as a whole
    conn.close()
    if break_it == "fifo":
        db.unlink()
        os.mkfifo(db)
    elif break_it == "link":
        shutil.copy(db, elsewhere["other"] / "real.sqlite")
        db.unlink()
        db.symlink_to(elsewhere["other"] / "real.sqlite")
    elif break_it == "view":  # the tables replaced by views that would make up rows
        for table in ("results", "systems"):
            sql(elsewhere["other"], f"ALTER TABLE {table} RENAME TO old_{table}")
            sql(elsewhere["other"], f"CREATE VIEW {table} AS SELECT * FROM old_{table}")
    else:
        db.write_bytes(b"not a database at all" * 100)
    try:
        report = import_store(here, elsewhere["other"])
    except UserError as error:
        assert "\n" not in str(error)
    else:
        assert report.results == 0
    assert here.results() == []
    assert [p for p in listing(elsewhere["here"]) if not p.startswith("results.sqlite")] == \
        [p for p in before if not p.startswith("results.sqlite")]


def test_a_refused_system_keeps_its_results_out_and_the_rest_comes_in(elsewhere):
    [result] = Store(elsewhere["other"]).results()
    predictions = Store(elsewhere["other"]).object_path(result["predictions_sha256"])
    predictions.chmod(0o644)
    predictions.unlink()
    os.mkfifo(predictions)  # an object that would hang a reader
    report = import_store(Store(elsewhere["here"]), elsewhere["other"])
    assert report.systems == 1 and report.results == 0
    assert any("is a FIFO" in line for line in report.refused), report.refused
    assert json.loads(Store(elsewhere["here"]).systems()[0]["hyperparameters"])
