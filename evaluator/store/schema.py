"""What a results store's index holds: its tables and their fields, the row objects that let
`store repair` rebuild a lost index, and how an index made by an older version is brought up
to the current one when it is opened."""

from __future__ import annotations

import json
import sqlite3
import time

from evaluator.store.rows import with_current_key

SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    key TEXT PRIMARY KEY,
    bundle TEXT NOT NULL, bundle_digest TEXT NOT NULL,
    testset TEXT NOT NULL, testset_sha256 TEXT NOT NULL,
    scorer TEXT NOT NULL, scorer_version TEXT NOT NULL, options TEXT NOT NULL,
    n INTEGER NOT NULL, questions INTEGER NOT NULL, missing INTEGER NOT NULL,
    extra INTEGER NOT NULL,
    em REAL NOT NULL, f1 REAL NOT NULL,
    em_lo REAL, em_hi REAL, f1_lo REAL, f1_hi REAL, level REAL NOT NULL,
    predictions_sha256 TEXT NOT NULL, scores_sha256 TEXT NOT NULL, log_sha256 TEXT,
    runner TEXT NOT NULL, device TEXT, image_digest TEXT, wall_s REAL,
    run_record TEXT NOT NULL, created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS results_cell ON results (bundle, testset);
CREATE TABLE IF NOT EXISTS leases (
    key TEXT PRIMARY KEY, owner TEXT NOT NULL, bundle TEXT NOT NULL, testset TEXT NOT NULL,
    started_at REAL NOT NULL, expires_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS systems (
    key TEXT PRIMARY KEY, system TEXT NOT NULL, approach TEXT NOT NULL,
    approach_digest TEXT NOT NULL, split TEXT NOT NULL, split_sha256 TEXT NOT NULL,
    train_size INTEGER, seed INTEGER NOT NULL, hyperparameters TEXT NOT NULL,
    weights_digest TEXT NOT NULL, runner TEXT NOT NULL, device TEXT, wall_s REAL,
    log_sha256 TEXT, run_record TEXT NOT NULL, created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS systems_name ON systems (system);
CREATE TABLE IF NOT EXISTS recorded (
    key TEXT PRIMARY KEY,
    bundle TEXT NOT NULL, bundle_digest TEXT NOT NULL,
    testset TEXT NOT NULL, testset_sha256 TEXT NOT NULL,
    scorer TEXT NOT NULL, scorer_version TEXT NOT NULL, options TEXT NOT NULL,
    n INTEGER NOT NULL, questions INTEGER NOT NULL,
    em REAL NOT NULL, f1 REAL NOT NULL,
    em_lo REAL, em_hi REAL, f1_lo REAL, f1_hi REAL, level REAL NOT NULL,
    runner TEXT NOT NULL, wall_s REAL,
    source TEXT NOT NULL, source_sha256 TEXT NOT NULL, created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS recorded_cell ON recorded (bundle, testset);
CREATE TABLE IF NOT EXISTS failures (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL, bundle TEXT NOT NULL, testset TEXT NOT NULL,
    failure_class TEXT NOT NULL, message TEXT NOT NULL, log_sha256 TEXT,
    runner TEXT, created_at REAL NOT NULL, options TEXT
);
CREATE TABLE IF NOT EXISTS intact (
    sha256 TEXT PRIMARY KEY, stat TEXT NOT NULL
);
"""
# Columns added to a table after stores were first made with it: (table, column, type),
# added when an older store is opened. Each is nullable: older rows read NULL, and older code,
# which names the columns it writes, ignores it. failures.options: the failed job's options
# as JSON (NULL: a train cell's, or recorded before failures kept them).
ADDED_COLUMNS = (("failures", "options", "TEXT"),)
# The scheme of result keys, kept in the index's user_version: 2 puts the test set's id in
# them (`jobs.job.cell_key`); an index of an earlier scheme is rekeyed when opened (`_rekey`).
KEY_SCHEME = 2

RESULT_FIELDS = ("key", "bundle", "bundle_digest", "testset", "testset_sha256", "scorer",
                 "scorer_version", "options", "n", "questions", "missing", "extra", "em", "f1",
                 "em_lo", "em_hi", "f1_lo", "f1_hi", "level", "predictions_sha256",
                 "scores_sha256", "log_sha256", "runner", "device", "image_digest", "wall_s",
                 "run_record", "created_at")

# A recorded result: a cell's numbers copied from a committed results table (`source`, the
# table's path in the repository, and its sha256), without predictions or per-question scores.
# It stands for its cell only while no run of the same bundle digest and test-set bytes exists
# (`store.queries.latest`); a run always supersedes it.
RECORDED_FIELDS = ("key", "bundle", "bundle_digest", "testset", "testset_sha256", "scorer",
                   "scorer_version", "options", "n", "questions", "em", "f1", "em_lo", "em_hi",
                   "f1_lo", "f1_hi", "level", "runner", "wall_s", "source", "source_sha256",
                   "created_at")

SYSTEM_FIELDS = ("key", "system", "approach", "approach_digest", "split", "split_sha256",
                 "train_size", "seed", "hyperparameters", "weights_digest", "runner", "device",
                 "wall_s", "log_sha256", "run_record", "created_at")

ROW_MARK = "qashift-result-row"  # a result row kept as an object, so the index can be rebuilt
ROW_OBJECT_CAP = 64 << 10  # a row object is small; a larger object is never read as one


def row_record(data: bytes) -> tuple[str, dict] | None:
    """("row", a result row) or ("system", a trained system's row) if these bytes are a row
    object, as the rebuild reads one; None for anything else."""
    if len(data) > ROW_OBJECT_CAP:
        return None
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(doc, dict) or doc.get(ROW_MARK) != 1:
        return None
    for kind, fields in (("row", RESULT_FIELDS), ("system", SYSTEM_FIELDS)):
        row = doc.get(kind)
        if isinstance(row, dict) and all(f in row for f in fields if f != "log_sha256"):
            return kind, row
    return None


def setup(conn: sqlite3.Connection) -> None:
    """Make or bring up to date the index behind `conn` (WAL, the tables, the columns added
    since, the current key scheme)."""
    # Switching to WAL takes a lock that SQLite's busy handler does not wait for, so a
    # second controller opening the store mid-write must retry; once set, WAL persists.
    if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
        conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.executescript(SCHEMA)
    for table, column, declaration in ADDED_COLUMNS:
        if column not in {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}:
            try:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
            except sqlite3.OperationalError as exc:
                if "duplicate column" not in str(exc):
                    raise  # (another controller opening the same older store added it first)
    if conn.execute("PRAGMA user_version").fetchone()[0] < KEY_SCHEME:
        _rekey(conn)


def _rekey(conn: sqlite3.Connection) -> None:
    """Give the rows of a store made before the current key scheme their current keys (a
    result's, and its cell's failures'), once, in one transaction: its results stay found as
    cached. A failure of a cell without a result keeps its key (a failure holds no digest to
    make the new one from): that cell shows as not run, not as failed."""
    conn.execute("BEGIN IMMEDIATE")  # a second controller opening it waits, then finds it done
    try:
        if conn.execute("PRAGMA user_version").fetchone()[0] < KEY_SCHEME:
            cursor = conn.execute(f"SELECT {', '.join(RESULT_FIELDS)} FROM results")
            for values in cursor.fetchall():
                row = dict(zip(RESULT_FIELDS, values, strict=True))
                new = with_current_key(row)["key"]  # a damaged row keeps its key, for check
                if new != row["key"]:
                    conn.execute("UPDATE results SET key = ? WHERE key = ?", (new, row["key"]))
                    conn.execute("UPDATE failures SET key = ? WHERE key = ? AND testset = ?",
                                 (new, row["key"], row["testset"]))
            conn.execute(f"PRAGMA user_version = {KEY_SCHEME}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def retry_locked(action, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    delay = 0.05
    while True:
        try:
            action()
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 1.0)
