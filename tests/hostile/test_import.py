"""`store import` from a hostile workspace: a digest that is a path, a weights folder with a
link inside, fabricated or ill-typed result rows, invented results that agree with their own
per-question scores, rows under another cell's key or dated ahead, objects smuggled beside a
refused row, an index that is not a plain file or sits in a folder whose name is no plain
URI. Nothing that cannot be verified comes in (a result's predictions are scored again on this
machine's gold), a refused import leaves this store as it was, and `store check` finds a
fabricated row whatever its numbers."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from evaluator.core.errors import UserError
from evaluator.core.hashing import canonical_json, sha256_bytes
from evaluator.data import testsets
from evaluator.jobs.job import Job
from evaluator.runners.dispatch import Dispatcher
from evaluator.store import check as store_check
from evaluator.store import transfer
from evaluator.store import units as store_units
from evaluator.store.rows import result_key, system_key_problem
from evaluator.store.schema import ROW_MARK
from evaluator.store.store import Store
from evaluator.store.transfer import import_store
from evaluator.training.run import train
from evaluator.training.systems import resolve_bundles
from tests.conftest import use_workspace
from tests.support.approaches import WORDS, approach_registry, train_job
from tests.support.stores import raw_object


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, env=os.environ.copy(),
                          timeout=600)


@pytest.fixture(scope="module")
def trained_elsewhere(tmp_path_factory, dev_raw, shared_data):
    """The other machine, made once for the module: the registry with the honest approach
    `words`, and a workspace that trained its system and scored it."""
    home = tmp_path_factory.mktemp("elsewhere")
    with pytest.MonkeyPatch.context() as patch:
        workspace = use_workspace(patch, home, shared_data)
        registry = approach_registry(home, dev_raw, patch, workspace, "words", WORDS)
        made = Store.open_default()
        train(train_job("words"), Dispatcher("local"), made)
        made.close()
        done = run("evaluate", "-b", "words@tiny-train/s0", "-t", "tiny-test", "--runner",
                   "local")
        assert done.returncode == 0, done.stderr
    return {**registry, "sets": registry["gold"].parents[1]}


@pytest.fixture
def elsewhere(trained_elsewhere, tmp_path, monkeypatch, workspace):
    """A copy of the other machine's store (each test may tamper with its own), the same
    registry, and an empty store here."""
    other = tmp_path / "other"
    shutil.copytree(trained_elsewhere["workspace"], other, symlinks=True)
    monkeypatch.setenv("QASHIFT_SUBMISSIONS", str(trained_elsewhere["subs"]))
    monkeypatch.setenv("QASHIFT_TESTSETS", str(trained_elsewhere["sets"]))
    here = tmp_path / "here"
    monkeypatch.setenv("QASHIFT_WORKSPACE", str(here))
    return {"other": other, "here": here, "gold": trained_elsewhere["gold"]}


def sql(workspace: Path, statement: str, *args) -> None:
    conn = sqlite3.connect(workspace / "results.sqlite")
    with conn:
        conn.execute(statement, args)
    conn.close()


def listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() \
        else []


def forged_units(other: Store, row: dict) -> str:
    """A per-question scores object like the row's, with every question right."""
    doc = json.loads(other.get_object(row["scores_sha256"]))
    doc["units"] = [[u[0], 1, 1.0, u[3], u[4], 0] for u in doc["units"]]
    return other.put_object(canonical_json(doc))


def replace_result(workspace: Path, row: dict) -> None:
    """The other store's one result row replaced by `row` (its row object written too)."""
    sql(workspace, "DELETE FROM results")
    other = Store(workspace)
    other.put(row, owner="forger")
    other.close()


def test_an_honest_store_imports_whole(elsewhere):
    report = import_store(Store(elsewhere["here"]), elsewhere["other"])
    assert (report.systems, report.results, report.refused) == (1, 1, [])
    assert store_check.check(Store(elsewhere["here"])).ok


def test_a_rows_key_is_recomputed_as_a_job_computes_it(elsewhere):
    [row] = Store(elsewhere["other"]).results()
    [system] = resolve_bundles(["words@tiny-train/s0"], Store(elsewhere["other"]))
    job = Job(system, testsets.get("tiny-test"))
    assert result_key(row) == job.key == row["key"]


def test_a_system_rows_key_is_recomputed_as_a_training_computes_it(elsewhere):
    [row] = Store(elsewhere["other"]).systems()
    assert train_job("words").key == row["key"]
    assert system_key_problem(row) == ""


@pytest.mark.parametrize("change,why", [
    ("seed = 7", "its key is not the train key"),
    ("hyperparameters = '{\"epochs\":99}'", "its key is not the train key"),
    ("system = 'other@tiny-train/s0'", "its system id 'other@tiny-train/s0' is not words@"),
    ("system = 'words@tiny-train~50/s0'", "is not words@tiny-train/s0[/hHASH]"),
])
def test_a_system_row_that_is_not_the_training_its_key_names_is_left_out_with_its_results(
        elsewhere, change, why):
    """Its weights would be served, and scored, as the training its key names."""
    sql(elsewhere["other"], f"UPDATE systems SET {change}")
    report = import_store(Store(elsewhere["here"]), elsewhere["other"])
    assert (report.systems, report.results) == (0, 0)
    assert any(why in line for line in report.refused), report.refused
    assert Store(elsewhere["here"]).systems() == []


def test_a_rebuilt_index_leaves_out_a_system_row_object_under_another_key(elsewhere):
    """`store repair` reads system rows back from their row objects: one whose key is not the
    train key of its fields is no system."""
    other = Store(elsewhere["other"])
    [row] = other.systems()
    other.put_system({**row, "key": sha256_bytes(b"another training"),
                      "created_at": row["created_at"] + 1})
    other.close()
    (elsewhere["other"] / "results.sqlite").write_bytes(b"not a database")
    done = store_check.repair(Store(elsewhere["other"]))
    assert any("rebuilt the index" in line for line in done), done
    assert [r["key"] for r in Store(elsewhere["other"]).systems()] == [row["key"]]


def test_a_sampled_result_is_scored_again_on_its_sample_and_comes_in(elsewhere, monkeypatch):
    there = {**os.environ, "QASHIFT_WORKSPACE": str(elsewhere["other"])}
    done = subprocess.run(["evaluate", "-b", "words@tiny-train/s0", "-t", "tiny-test",
                           "--runner", "local", "--limit", "5", "--seed", "2"],
                          capture_output=True, text=True, env=there, timeout=600)
    assert done.returncode == 0, done.stderr
    said: list[str] = []
    monkeypatch.setattr(transfer, "PROGRESS_S", -1.0)
    monkeypatch.setattr(transfer.console, "progress", said.append)
    report = import_store(Store(elsewhere["here"]), elsewhere["other"])
    assert (report.systems, report.results, report.refused) == (1, 2, [])
    assert sorted(r["n"] for r in Store(elsewhere["here"]).results())[0] == 5
    assert said == ["import: checked 0 of 2 results", "import: checked 1 of 2 results"]


def test_an_imported_result_whose_predictions_do_not_score_as_stated_is_left_out(elsewhere):
    """Every question claimed right, in the per-question scores and the totals alike, under
    the cell's real key: consistent, but not what its predictions score on the gold here."""
    other = Store(elsewhere["other"])
    [row] = other.results()
    replace_result(elsewhere["other"], dict(row, em=100.0, f1=100.0, em_lo=100.0, em_hi=100.0,
                                            f1_lo=100.0, f1_hi=100.0,
                                            scores_sha256=forged_units(other, row)))
    report = import_store(Store(elsewhere["here"]), elsewhere["other"])
    assert (report.systems, report.results) == (1, 0)
    [why] = report.refused
    assert "are not the" in why and "its predictions score on this machine's gold" in why
    assert Store(elsewhere["here"]).results() == []
    done = run("evaluate", "-b", "words@tiny-train/s0", "-t", "tiny-test", "--runner",
               "local", "--json")
    assert done.returncode == 0, done.stderr
    [cell] = json.loads(done.stdout)["results"]
    assert not cell["cached"] and cell["em"]["value"] == row["em"]


def test_an_imported_result_with_other_predictions_than_its_scores_is_left_out(elsewhere):
    """The honest per-question scores and totals, beside predictions that answer nothing."""
    other = Store(elsewhere["other"])
    [row] = other.results()
    replace_result(elsewhere["other"], dict(row, predictions_sha256=other.put_object(b"{}")))
    report = import_store(Store(elsewhere["here"]), elsewhere["other"])
    assert report.results == 0
    assert any("its predictions give on this machine's gold" in why for why in report.refused)


def test_a_result_whose_test_set_is_not_here_is_left_out_unchecked(elsewhere, tmp_path,
                                                                     monkeypatch):
    nothing = tmp_path / "no-sets"
    nothing.mkdir()
    monkeypatch.setenv("QASHIFT_TESTSETS", str(nothing))
    report = import_store(Store(elsewhere["here"]), elsewhere["other"])
    assert (report.systems, report.results) == (1, 0)
    [why] = report.refused
    assert "cannot check: test set tiny-test (sha256" in why and "is not here" in why


def test_a_result_scored_otherwise_than_its_test_set_here_is_left_out_unchecked(elsewhere):
    [row] = Store(elsewhere["other"]).results()
    row = dict(row, scorer="adversarial-min", scorer_version="adversarial-min/1")
    replace_result(elsewhere["other"], dict(row, key=result_key(row)))
    report = import_store(Store(elsewhere["here"]), elsewhere["other"])
    assert report.results == 0
    assert any("cannot check: it was scored by 'adversarial-min/1'" in why
               for why in report.refused), report.refused


def test_a_result_under_another_cells_key_is_left_out(elsewhere):
    sql(elsewhere["other"], "UPDATE results SET key = ?", sha256_bytes(b"another cell"))
    report = import_store(Store(elsewhere["here"]), elsewhere["other"])
    assert report.results == 0
    assert any("its key is not the job key" in why for why in report.refused)
    found = store_check.check(Store(elsewhere["other"]))
    assert any("its key is not the job key" in why for why in found.rows_invalid.values())


@pytest.mark.parametrize("table", ["results", "systems"])
def test_a_row_dated_in_the_future_is_left_out(elsewhere, table):
    sql(elsewhere["other"], f"UPDATE {table} SET created_at = 9.9e10")
    report = import_store(Store(elsewhere["here"]), elsewhere["other"])
    assert report.results == 0
    assert any("is in the future" in why for why in report.refused), report.refused
    assert Store(elsewhere["here"]).results() == []


def test_a_refused_rows_objects_stay_out_and_repair_makes_no_result_of_them(elsewhere):
    """A row refused for its EM carries a forged row object (the cell's key, every question
    right) as its log: nothing of it is moved in, so a rebuilt index finds no such row."""
    other = Store(elsewhere["other"])
    [row] = other.results()
    forged = dict(row, em=100.0, f1=100.0, scores_sha256=forged_units(other, row),
                  log_sha256=None, created_at=row["created_at"] + 60)
    record = raw_object(other, canonical_json({ROW_MARK: 1, "row": forged}))
    sql(elsewhere["other"], "UPDATE results SET em = 99, log_sha256 = ?", record)
    report = import_store(Store(elsewhere["here"]), elsewhere["other"])
    assert (report.systems, report.results) == (1, 0)
    here = Store(elsewhere["here"])
    for sha in (record, forged["scores_sha256"], row["predictions_sha256"]):
        assert not here.object_path(sha).exists()
    here.close()
    for name in ("results.sqlite", "results.sqlite-wal", "results.sqlite-shm"):
        (elsewhere["here"] / name).unlink(missing_ok=True)
    assert any("rebuilt the index" in line for line in store_check.repair(here))
    assert here.results() == [] and len(here.systems()) == 1


def test_an_object_that_is_a_row_object_is_refused(elsewhere):
    """An otherwise honest row whose log is a row object, which `store repair` would read as
    a result row once it is in this store."""
    other = Store(elsewhere["other"])
    [row] = other.results()
    record = raw_object(other, canonical_json({ROW_MARK: 1, "row": dict(row, em=100.0)}))
    sql(elsewhere["other"], "UPDATE results SET log_sha256 = ?", record)
    report = import_store(Store(elsewhere["here"]), elsewhere["other"])
    assert report.results == 0
    assert any("is a row object" in why for why in report.refused), report.refused
    assert not Store(elsewhere["here"]).object_path(record).exists()


def test_a_scores_object_larger_than_its_n_allows_is_refused_unparsed(elsewhere, monkeypatch):
    """6 KiB of `{},` a unit: parsing such JSON costs ~27 times its size."""
    other = Store(elsewhere["other"])
    [row] = other.results()
    bomb = b'{"scorer":"x","units":[' + b"{}," * (row["n"] * 2048) + b"{}]}"
    sql(elsewhere["other"], "UPDATE results SET scores_sha256 = ?", other.put_object(bomb))
    loads = json.loads

    def small_only(data, *args, **kwargs):
        assert len(data) < store_units.scores_cap(row["n"]), "a capped object was parsed"
        return loads(data, *args, **kwargs)

    monkeypatch.setattr(store_units.json, "loads", small_only)
    report = import_store(Store(elsewhere["here"]), elsewhere["other"])
    assert report.results == 0
    assert any(f"over the {store_units.scores_cap(row['n']):,} allowed" in why
               for why in report.refused), report.refused
    found = store_check.check(Store(elsewhere["other"]))
    assert any("allowed for n" in why for why in found.rows_invalid.values())


def test_a_store_in_a_folder_named_with_uri_characters_is_read_as_itself(elsewhere):
    """A URI pasted from the path would end at the '#' and open `evil` read-write instead."""
    odd = elsewhere["other"].parent / "evil#?x=1%41"
    elsewhere["other"].rename(odd)
    report = import_store(Store(elsewhere["here"]), odd)
    assert (report.systems, report.results, report.refused) == (1, 1, [])
    checked = store_check.check(Store(odd))
    assert checked.index_ok and checked.rows == 1
    assert [p.name for p in odd.parent.iterdir() if p.name.startswith("evil")] == [odd.name]


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
    ("UPDATE results SET testset = 'x/../../../../tmp/PWNED'", "is not a valid name"),
    ("UPDATE results SET testset = 'tiny-test/x'", "is not a valid name"),
    ("UPDATE results SET bundle = 'words@tiny-train/../../../x'", "is not a valid name"),
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


GROWS = ("WITH RECURSIVE n(i, s) AS (SELECT 1, 'x' UNION SELECT i + 1, s || s || 'x' FROM n) "
         "SELECT i, s FROM n")  # never ends: every row twice as long as the last


def writable_schema(workspace: Path, statement: str) -> None:
    """A change to sqlite_master itself, as a hand with the sqlite3 shell can make it."""
    conn = sqlite3.connect(workspace / "results.sqlite")
    conn.execute("PRAGMA writable_schema = ON")
    with conn:
        conn.execute(statement)
    conn.close()


@pytest.mark.parametrize("schema, named", [
    ("recursive-view", "view 'grows'"), ("view-named-results", "view 'results'"),
    ("trigger", "trigger 'stamp'"), ("index", "index 'results_em'"),
    ("virtual-table", "table 'notes'"), ("generated-column", "schema's table 'systems'"),
    ("default-expression", "schema's table 'results'")])
def test_a_store_whose_schema_holds_other_objects_is_refused_before_it_is_read(
        elsewhere, schema, named):
    """Only the tables and indexes a store makes: a view (one that grows for ever, or one
    standing for the results table), a trigger, an index, a virtual table or
    a column computed by an expression is one line, before any row is read, and this store
    is left as it was."""
    other = elsewhere["other"]
    if schema == "recursive-view":
        sql(other, f"CREATE VIEW grows AS {GROWS}")
    elif schema == "view-named-results":
        sql(other, "ALTER TABLE results RENAME TO kept")
        sql(other, f"CREATE VIEW results AS SELECT kept.* FROM kept, ({GROWS})")
    elif schema == "trigger":
        sql(other, "CREATE TRIGGER stamp AFTER INSERT ON results BEGIN SELECT 1; END")
    elif schema == "index":
        sql(other, "CREATE INDEX results_em ON results (em)")
    elif schema == "virtual-table":
        sql(other, "CREATE VIRTUAL TABLE notes USING fts5(body)")
    elif schema == "generated-column":
        sql(other, "ALTER TABLE systems ADD COLUMN extra TEXT AS (hex(zeroblob(1000000)))")
    else:
        writable_schema(other, "UPDATE sqlite_master SET sql = replace(sql, "
                        "'created_at REAL NOT NULL', 'created_at REAL NOT NULL DEFAULT "
                        "(random())') WHERE name = 'results'")
    before = listing(elsewhere["here"])
    started = time.monotonic()
    done = run("qashift", "store", "import", str(other))
    assert time.monotonic() - started < 60
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    [line] = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert named in line and "refused, nothing read from it" in line, line
    assert listing(elsewhere["here"]) == before
    assert "imported" not in done.stdout
