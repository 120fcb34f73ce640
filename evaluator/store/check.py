"""Check and repair a results store.

`check` verifies the SQLite index (integrity check), every object against the sha256 that is
its name, that every result row's objects exist and are intact, that every row has the
schema's types and ranges (`store.rows`) and the job key its own fields give, and that its
EM, F1 and n are what its per-question scores give (a fabricated row is found, whatever its
numbers). `repair` fixes what can be fixed without guessing: leftover partial writes are
removed, corrupt objects are moved to `quarantine/`, rows whose objects are gone or that fail
the schema, their key or their scores are dropped (their cells are simply recomputed),
and a corrupt or missing index is rebuilt from the row objects that every stored result and
every trained system also writes (`ROW_MARK`; a system only while its weights are still
under `models/`). Failure records and leases live only in the index: a rebuilt index starts
without them.

A row object is a file in this store's own `objects/`, and a run's log is one too, written by
whatever the bundle printed: the rebuild trusts no row object further than it can check it.
A rebuilt result row must pass what `store import` asks of a row (schema, its key, a
created_at not in the future, its objects present, its EM/F1/n what its per-question scores
give, and its predictions scoring as stated on this machine's gold where the test set is
here); where the test set is not here, the rebuild trusts that the row object is one this
store wrote. Of several row objects of one key, the newest that passes is kept, and a row
already in the index (a controller that stored a cell meanwhile) is never replaced.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from evaluator import scoring
from evaluator.core.files import PARTIAL_PREFIX
from evaluator.core.hashing import sha256_of
from evaluator.store.rows import (
    future_problem,
    key_problem,
    result_problem,
    system_key_problem,
    system_problem,
    with_current_key,
)
from evaluator.store.schema import ADDED_COLUMNS, ROW_OBJECT_CAP, SCHEMA, row_record
from evaluator.store.store import Store
from evaluator.store.units import UNCHECKED, Gold, scores_problem

OBJECT_FIELDS = ("predictions_sha256", "scores_sha256", "log_sha256")


@dataclass
class Report:
    index_ok: bool = True
    index_problem: str = ""
    objects: int = 0
    rows: int = 0
    corrupt_objects: list[str] = field(default_factory=list)
    partial_files: list[str] = field(default_factory=list)
    rows_missing_objects: list[str] = field(default_factory=list)  # result keys
    rows_invalid: dict[str, str] = field(default_factory=dict)  # result key -> why

    @property
    def ok(self) -> bool:
        return self.index_ok and not (self.corrupt_objects or self.partial_files or
                                      self.rows_missing_objects or self.rows_invalid)

    def lines(self) -> list[str]:
        out = [f"index: {'ok' if self.index_ok else 'CORRUPT: ' + self.index_problem}",
               f"objects: {self.objects} ({len(self.corrupt_objects)} corrupt, "
               f"{len(self.partial_files)} partial writes)",
               f"results: {self.rows} ({len(self.rows_missing_objects)} with missing or corrupt "
               f"objects, {len(self.rows_invalid)} failing the schema or their scores)"]
        out += [f"  corrupt object {sha}" for sha in self.corrupt_objects[:20]]
        out += [f"  result {key[:16]} lacks an object" for key in
                self.rows_missing_objects[:20]]
        out += [f"  result {str(key)[:16]}: {why}" for key, why in
                list(self.rows_invalid.items())[:20]]
        return out


def _objects(store: Store) -> list[Path]:
    root = store.workspace / "objects"
    return sorted(p for p in root.glob("*/*") if p.is_file()) if root.is_dir() else []


def read_only_uri(db: Path) -> str:
    """A SQLite URI that opens `db` read-only, whatever its folder is named: the path is
    percent-encoded, so a '#', '?' or '%' in it is part of the name and never ends it."""
    return f"{db.absolute().as_uri()}?mode=ro"


_TOKEN = re.compile(r"\w+|\S")
# The words a store's own schema is written in (its statements, table, index and column names,
# sqlite_sequence's), and the objects it makes: an index holding anything else (a view, a
# trigger, a virtual table, another index, a generated column, a default or a check that
# would run an expression) is no store of this tool's.
_SCHEMA_WORDS = frozenset(re.findall(r"\w+", " ".join(
    [SCHEMA, *(" ".join(added) for added in ADDED_COLUMNS)]).upper())) | \
    {"SQLITE_SEQUENCE", "NAME", "SEQ"}
_OBJECTS = {"table": {"results", "leases", "systems", "recorded", "failures", "intact",
                      "sqlite_sequence"},
            "index": {"results_cell", "systems_name", "recorded_cell"}}
_AUTOINDEX = re.compile(r"sqlite_autoindex_(results|leases|systems|recorded|intact)_1")
SCHEMA_OBJECTS_CAP = 64


def schema_problem(conn: sqlite3.Connection) -> str:
    """Why the schema of another store's index is not one this tool makes, or "": asked of an
    index opened read-only, before any of its rows is read (a view can recurse until the disk
    is full, a column's expression runs as its row is read)."""
    objects = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY "
                           "type IN ('table', 'index')"  # a view or trigger named first
                           f" LIMIT {SCHEMA_OBJECTS_CAP + 1}").fetchall()
    if len(objects) > SCHEMA_OBJECTS_CAP:
        return f"its schema holds more than {SCHEMA_OBJECTS_CAP} objects"
    for kind, name, table, sql in objects:
        what = f"{str(kind)[:20]} {str(name)[:60]!r}"
        if kind == "index" and sql is None and isinstance(name, str) and \
                _AUTOINDEX.fullmatch(name) and name[len("sqlite_autoindex_"):-2] == table:
            continue  # a primary key's own index
        if kind not in _OBJECTS or name not in _OBJECTS[kind] or not isinstance(sql, str):
            return f"its schema holds {what}, which no results store has"
        words = _TOKEN.findall(sql.upper())
        if words[:2] != ["CREATE", kind.upper()] or (kind == "table" and table != name) or \
                not set(words) <= _SCHEMA_WORDS | {"(", ")", ","}:
            return f"its schema's {what} is not as a results store makes it"
    return ""


def _index_rows(store: Store) -> tuple[list[dict] | None, str]:
    """The index's result rows, or (None, why) when the index cannot be read."""
    if not store.db_path.exists():
        return None, "missing"
    try:
        conn = sqlite3.connect(read_only_uri(store.db_path), uri=True)
        try:
            verdict = conn.execute("PRAGMA integrity_check").fetchone()[0]
            if verdict != "ok":
                return None, verdict
            conn.row_factory = sqlite3.Row
            return [dict(r) for r in conn.execute("SELECT * FROM results")], ""
        finally:
            conn.close()
    except sqlite3.Error as exc:
        return None, str(exc)


def check(store: Store) -> Report:
    report = Report()
    bad: set[str] = set()
    for path in _objects(store):
        if path.name.startswith(PARTIAL_PREFIX):
            report.partial_files.append(str(path))
            continue
        report.objects += 1
        if sha256_of(path) != path.name:
            bad.add(path.name)
    report.corrupt_objects = sorted(bad)
    rows, problem = _index_rows(store)
    if rows is None:
        report.index_ok, report.index_problem = False, problem
        return report
    report.rows = len(rows)
    for row in map(with_current_key, rows):  # an index not yet rekeyed is rekeyed on opening
        if why := result_problem(row) or key_problem(row):
            report.rows_invalid[row["key"]] = why
            continue
        if any(row.get(name) and (row[name] in bad or not store.object_path(row[name]).is_file())
               for name in OBJECT_FIELDS):
            report.rows_missing_objects.append(row["key"])
        elif why := scores_problem(row, store.get_object(row["scores_sha256"])):
            report.rows_invalid[row["key"]] = why
    return report


def repair(store: Store) -> list[str]:
    """Repair the store; what was done, one line each."""
    done: list[str] = []
    report = check(store)
    for partial in report.partial_files:
        Path(partial).unlink(missing_ok=True)
    if report.partial_files:
        done.append(f"removed {len(report.partial_files)} partial writes")
    quarantine = store.workspace / "quarantine"
    for sha in report.corrupt_objects:
        quarantine.mkdir(exist_ok=True)
        shutil.move(str(store.object_path(sha)), quarantine / sha)
    if report.corrupt_objects:
        done.append(f"moved {len(report.corrupt_objects)} corrupt objects to {quarantine}")
    if not report.index_ok:
        done += _rebuild_index(store, report.index_problem)
        report = check(store)
    if report.rows_missing_objects:
        for key in report.rows_missing_objects:
            store.delete(key)
        done.append(f"dropped {len(report.rows_missing_objects)} results whose objects are "
                    f"gone (those cells run again)")
    if report.rows_invalid:
        for key in report.rows_invalid:
            store.delete(key)
        done.append(f"dropped {len(report.rows_invalid)} results that fail the schema or "
                    f"their scores (those cells run again)")
    return done or ["nothing to repair"]


def _rebuild_index(store: Store, problem: str) -> list[str]:
    done = []
    store.close()
    if store.db_path.exists():
        aside = store.db_path.with_name(f"results.sqlite.corrupt-{int(time.time())}")
        store.db_path.rename(aside)
        for suffix in ("-wal", "-shm"):
            extra = store.db_path.with_name(store.db_path.name + suffix)
            if extra.exists():
                extra.rename(aside.with_name(aside.name + suffix))
        done.append(f"moved the {problem or 'unreadable'} index aside to {aside.name}")
    found: dict[str, dict[str, list[dict]]] = {"row": {}, "system": {}}
    for path in _objects(store):
        if (record := _row_object(path)) is not None:
            kind, row = record
            row = with_current_key(row) if kind == "row" else row
            if isinstance(row["key"], str):
                found[kind].setdefault(row["key"], []).append(row)
    gold = Gold()
    results = _newest_passing(found["row"], lambda row: _rebuilt_result_problem(store, row,
                                                                                gold))
    systems = _newest_passing(found["system"], lambda row: (
        system_problem(row) or system_key_problem(row) or future_problem(row) or
        ("" if store.model_path(row["weights_digest"]).is_dir() else "no weights")))
    store.put_many(systems, results)  # INSERT OR IGNORE: a row already indexed stays
    left = sum(map(len, found["row"].values())) - len(results)
    done.append(f"rebuilt the index from {len(results)} stored result rows and "
                f"{len(systems)} trained systems" +
                (f" ({left} row objects left out: superseded or failing a check)"
                 if left else ""))
    return done


def _newest_passing(by_key: dict[str, list[dict]], problem) -> list[dict]:
    """Of each key's rows, the newest for which `problem` says nothing; keys taken in the
    test-set order of their rows, so that each set's gold is loaded once."""
    kept = []
    for rows in sorted(by_key.values(), key=lambda rows: min(map(Gold.by_testset, rows))):
        dated = [r for r in rows if isinstance(r.get("created_at"), int | float)
                 and not isinstance(r.get("created_at"), bool)]
        for row in sorted(dated, key=lambda r: r["created_at"], reverse=True):
            if not problem(row):
                kept.append(row)
                break
    return kept


def _rebuilt_result_problem(store: Store, row: dict, gold: Gold) -> str:
    """What `store import` asks of a result row, asked of a row object found in objects/;
    a test set that is not here is no reason (the store's own row, trusted)."""
    if why := result_problem(row) or key_problem(row) or future_problem(row):
        return why
    if row["scorer"] not in scoring.scorers() or \
            row["scorer_version"] != scoring.version(row["scorer"]):  # nothing rescores it
        return f"it was scored by {row['scorer_version'][:40]!r}, not this machine's scorer"
    if not all(not row.get(f) or store.object_path(row[f]).is_file() for f in OBJECT_FIELDS):
        return "an object is missing"
    scores = store.get_object(row["scores_sha256"])
    why = gold.problem(row, store.object_path(row["predictions_sha256"]), scores)
    return scores_problem(row, scores) if why.startswith(UNCHECKED) else why


def _row_object(path: Path) -> tuple[str, dict] | None:
    """The row object at `path` (row_record), read only when it is small enough to be one."""
    if path.stat().st_size > ROW_OBJECT_CAP:
        return None
    return row_record(path.read_bytes())
