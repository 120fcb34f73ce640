"""The results store: one SQLite file plus content-addressed objects, under a workspace.

A row per finished cell, keyed by the job key (bundle digest, test-set id and sha256, scorer
version, options: `jobs.job.cell_key`). Predictions, per-question scores and logs are kept as
objects named by their sha256, written to a temporary file and renamed, so a killed process
never leaves a half-written object that would be trusted. A failed run is recorded in
`failures` and never produces a result row.
"""

from __future__ import annotations

import errno
import functools
import json
import re
import sqlite3
import tempfile
import threading
import time
from pathlib import Path

from evaluator.core import settings
from evaluator.core.errors import UserError
from evaluator.core.files import PARTIAL_PREFIX, remove_tree, write_atomic
from evaluator.core.gate import Limits, is_digest, walk
from evaluator.core.hashing import canonical_json, sha256_bytes, sha256_of
from evaluator.core.owner import owner_alive, owner_id
from evaluator.store.rows import with_current_key, without_nan_bounds

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

LEASE_SECONDS = 120.0


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


class StoreError(UserError):
    """The store cannot be read or written: corrupt, read-only, full. Stops the whole run."""


def explain(exc: BaseException, workspace: Path) -> str:
    """One line saying what is wrong with the store at `workspace` and how to recover."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    db = workspace / "results.sqlite"
    low = text.lower()
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC or "full" in low:
        return (f"no space left for the results store at {workspace} ({text}); free some "
                f"space and run again: finished cells are kept")
    if isinstance(exc, PermissionError) or "readonly" in low or "read-only" in low or \
            (isinstance(exc, OSError) and exc.errno == errno.EROFS):
        return (f"the results store at {workspace} is not writable ({text}); fix its "
                f"permissions or pass --workspace DIR")
    if isinstance(exc, sqlite3.DatabaseError) and ("not a database" in low or
                                                   "malformed" in low or "corrupt" in low):
        return (f"the results store {db} is corrupt ({text}); run `qashift store check`, "
                f"then `qashift store repair` to rebuild it from its objects")
    return f"the results store at {workspace} failed: {text}"


def _one_line_errors(method):
    """Store methods raise StoreError, one line, instead of sqlite3 or OS tracebacks."""
    @functools.wraps(method)
    def wrapper(self: Store, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(explain(exc, self.workspace)) from None
    return wrapper


class Store:
    """Thread-safe: each thread gets its own SQLite connection; processes coordinate through
    SQLite's locking and per-cell leases."""

    def __init__(self, workspace: Path):
        self.workspace = Path(workspace)
        self.db_path = self.workspace / "results.sqlite"
        self._local = threading.local()

    @classmethod
    def open_default(cls) -> Store:
        return cls(settings.workspace_dir())

    @property
    def conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            self.workspace.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.db_path, timeout=60, isolation_level=None)
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA busy_timeout = 60000")
            _retry_locked(lambda: _setup(conn))
            self._local.conn = conn
        return conn

    def exists(self) -> bool:
        return self.db_path.exists()

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # objects -----------------------------------------------------------------
    def object_path(self, sha256: str) -> Path:
        return self.workspace / "objects" / sha256[:2] / _checked_digest(sha256)

    @_one_line_errors
    def put_object(self, data: bytes) -> str:
        """Keep bytes as an object named by their sha256. Bytes a run produced (a log, a
        generations file) that the rebuild would read as a row (`row_record`, the same parser,
        so no escape or encoding slips past) are kept behind a `#`, which no JSON parser
        reads: a run cannot write what a rebuilt index would take for a row of its own."""
        if row_record(data) is not None:
            data = b"#" + data
        return self._put(data)

    def _put(self, data: bytes) -> str:
        sha = sha256_bytes(data)
        target = self.object_path(sha)
        if target.exists() and sha256_of(target) == sha:
            return sha
        write_atomic(target, data)
        return sha

    def get_object(self, sha256: str) -> bytes | None:
        """The object's bytes, or None when it is missing or fails its hash."""
        path = self.object_path(sha256)
        if not path.is_file():
            return None
        data = path.read_bytes()
        return data if sha256_bytes(data) == sha256 else None

    # results -----------------------------------------------------------------
    @_one_line_errors
    def get(self, key: str) -> dict | None:
        row = self.conn.execute("SELECT * FROM results WHERE key = ?", (key,)).fetchone()
        return dict(row) if row else None

    @_one_line_errors
    def put(self, row: dict, owner: str | None = None) -> None:
        """Insert a finished cell and release its lease, in one transaction. The row is also
        kept as an object, so `store repair` can rebuild a lost or corrupt index."""
        row = without_nan_bounds(row)
        self._put(canonical_json({ROW_MARK: 1, "row": row}))
        self._insert_and_release("results", RESULT_FIELDS, row, owner)

    @_one_line_errors
    def put_many(self, systems: list[dict], results: list[dict]) -> None:
        """Insert trained systems and results (their objects and weights already stored) in
        one transaction: all of them or none. Each row is kept as an object too."""
        results = [without_nan_bounds(row) for row in results]
        for kind, rows in (("system", systems), ("row", results)):
            for row in rows:
                self._put(canonical_json({ROW_MARK: 1, kind: row}))
        with self.conn:
            self.conn.execute("BEGIN IMMEDIATE")
            for table, fields, rows in (("systems", SYSTEM_FIELDS, systems),
                                        ("results", RESULT_FIELDS, results)):
                self.conn.executemany(
                    f"INSERT OR IGNORE INTO {table} ({', '.join(fields)}) "
                    f"VALUES ({', '.join('?' for _ in fields)})",
                    [[row.get(f) for f in fields] for row in rows])

    def _insert_and_release(self, table: str, fields: tuple[str, ...], row: dict,
                            owner: str | None) -> None:
        """Insert a finished cell's row and release its lease, in one transaction."""
        with self.conn:
            self.conn.execute("BEGIN IMMEDIATE")
            self.conn.execute(f"INSERT OR REPLACE INTO {table} ({', '.join(fields)}) "
                              f"VALUES ({', '.join('?' for _ in fields)})",
                              [row.get(f) for f in fields])
            self.conn.execute("DELETE FROM leases WHERE key = ? AND owner = ?",
                              (row["key"], owner or owner_id()))

    # trained systems: one row per finished train cell; weights under models/ --------
    def model_path(self, weights_digest: str) -> Path:
        return self.workspace / "models" / _checked_digest(weights_digest)

    @_one_line_errors
    def put_model(self, folder: Path, expected: str | None = None,
                  limits: Limits | None = None, label: str = "") -> str:
        """Walk a folder of weights through the gate, copying exactly what it hashes,
        read-only, to models/<its digest>; the digest. With `expected`, a folder that hashes
        to anything else is refused and nothing is stored. The copy is a private one renamed
        into place, so two controllers freezing the same weights at once never write into
        one folder: the first rename wins and the other copy goes."""
        models = self.workspace / "models"
        models.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix=f"{PARTIAL_PREFIX}{owner_id()}-", dir=models))
        try:
            digest = walk(folder, target=partial / "w", limits=limits or Limits(),
                          label=label or str(folder)).digest
            if expected is not None and digest != expected:
                raise UserError(f"{label or folder}: its weights hash to {digest[:12]}, not "
                                f"to the {expected[:12]} its row names; refused")
            target = self.model_path(digest)
            if not target.is_dir():
                try:
                    (partial / "w").rename(target)
                except OSError:
                    if not target.is_dir():
                        raise
        finally:
            remove_tree(partial)
        _remove_stale_copies(models)
        return digest

    @_one_line_errors
    def put_system(self, row: dict, owner: str | None = None) -> None:
        """Record a trained system (its weights already under model_path) and release the
        train cell's lease; the row is kept as an object too, like result rows."""
        self._put(canonical_json({ROW_MARK: 1, "system": row}))
        self._insert_and_release("systems", SYSTEM_FIELDS, row, owner)

    @_one_line_errors
    def get_system(self, key: str) -> dict | None:
        row = self.conn.execute("SELECT * FROM systems WHERE key = ?", (key,)).fetchone()
        return dict(row) if row else None

    @_one_line_errors
    def systems(self, name: str | None = None) -> list[dict]:
        query, args = "SELECT * FROM systems", []
        if name:
            query, args = query + " WHERE system = ?", [name]
        return [dict(r) for r in self.conn.execute(query + " ORDER BY system, created_at", args)]

    # leases: at most one controller runs a cell at a time -------------------------
    @_one_line_errors
    def acquire(self, key: str, bundle: str, testset: str, owner: str | None = None,
                seconds: float = LEASE_SECONDS, replace: bool = False) -> bool:
        """Take the cell's lease unless a live controller holds it, or it is already done
        (when not `replace`: a rerun keeps the old result until the new one is stored)."""
        owner = owner or owner_id()
        now = time.time()
        with self.conn:
            self.conn.execute("BEGIN IMMEDIATE")
            done = self.conn.execute("SELECT 1 FROM results WHERE key = ?", (key,)).fetchone()
            if done and not replace:
                return False
            held = self.conn.execute("SELECT owner, expires_at FROM leases WHERE key = ?",
                                     (key,)).fetchone()
            if held and held["owner"] != owner and held["expires_at"] > now \
                    and owner_alive(held["owner"]):
                return False
            self.conn.execute("INSERT OR REPLACE INTO leases VALUES (?, ?, ?, ?, ?, ?)",
                              (key, owner, bundle, testset, now, now + seconds))
        return True

    @_one_line_errors
    def renew(self, key: str, owner: str | None = None, seconds: float = LEASE_SECONDS) -> None:
        self.conn.execute("UPDATE leases SET expires_at = ? WHERE key = ? AND owner = ?",
                          (time.time() + seconds, key, owner or owner_id()))

    @_one_line_errors
    def release(self, key: str, owner: str | None = None) -> None:
        self.conn.execute("DELETE FROM leases WHERE key = ? AND owner = ?",
                          (key, owner or owner_id()))

    @_one_line_errors
    def live_leases(self) -> list[dict]:
        now = time.time()
        rows = [dict(r) for r in self.conn.execute("SELECT * FROM leases")]
        return [r for r in rows if r["expires_at"] > now and owner_alive(r["owner"])]

    @_one_line_errors
    def delete(self, key: str) -> None:
        self.conn.execute("DELETE FROM results WHERE key = ?", (key,))

    @_one_line_errors
    def results(self, bundle: str | None = None, testset: str | None = None, *,
                recorded: bool = False) -> list[dict]:
        """Result rows of runs; with `recorded`, the recorded rows too, shaped as results
        (no objects, no log: `predictions_sha256` is None; `source` names their table)."""
        rows = self._select("results", bundle, testset)
        if not recorded:
            return rows
        shaped = [{**r, "missing": 0, "extra": 0, "predictions_sha256": None,
                   "scores_sha256": None, "log_sha256": None, "device": None,
                   "image_digest": None,
                   "run_record": canonical_json({"recorded_from": r["source"],
                                                 "sha256": r["source_sha256"]}).decode()}
                  for r in self._select("recorded", bundle, testset)]
        return shaped + rows

    def _select(self, table: str, bundle: str | None, testset: str | None) -> list[dict]:
        query, args = f"SELECT * FROM {table} WHERE 1=1", []
        if bundle:
            query, args = query + " AND bundle = ?", [*args, bundle]
        if testset:
            query, args = query + " AND testset = ?", [*args, testset]
        return [dict(r) for r in self.conn.execute(query + " ORDER BY bundle, testset", args)]

    @_one_line_errors
    def record(self, source: str, source_sha256: str, rows: list[dict]) -> None:
        """Keep a committed table's rows as recorded results, in one transaction: those of an
        earlier version of the same table go, so the store holds one version of each."""
        with self.conn:
            self.conn.execute("BEGIN IMMEDIATE")
            self.conn.execute("DELETE FROM recorded WHERE source = ?", (source,))
            self.conn.executemany(
                f"INSERT OR REPLACE INTO recorded ({', '.join(RECORDED_FIELDS)}) "
                f"VALUES ({', '.join('?' for _ in RECORDED_FIELDS)})",
                [[{**row, "source": source, "source_sha256": source_sha256}.get(f)
                  for f in RECORDED_FIELDS] for row in map(without_nan_bounds, rows)])

    @_one_line_errors
    def recorded_version(self, source: str) -> str | None:
        """The sha256 of the version of table `source` the store holds, or None."""
        row = self.conn.execute("SELECT source_sha256 FROM recorded WHERE source = ? LIMIT 1",
                                (source,)).fetchone()
        return row[0] if row else None

    @_one_line_errors
    def record_failure(self, key: str, bundle: str, testset: str, failure_class: str,
                       message: str, log: str, runner: str | None,
                       options: dict | None = None) -> None:
        """A failed run; `options` are its job's (a `--limit` sample's say so: the views
        never take a sample's failure for its cell's state)."""
        log_sha = self.put_object(log.encode("utf-8", errors="replace")) if log else None
        self.conn.execute(
            "INSERT INTO failures (key, bundle, testset, failure_class, message, log_sha256, "
            "runner, created_at, options) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (key, bundle, testset, failure_class, message, log_sha, runner, time.time(),
             None if options is None else canonical_json(options).decode()))

    @_one_line_errors
    def failures(self) -> list[dict]:
        return [dict(r) for r in self.conn.execute("SELECT * FROM failures ORDER BY id")]



def _checked_digest(digest: str) -> str:
    """A digest names a file under the store, never a path: 64 hex characters or refused."""
    if not is_digest(digest):
        raise UserError(f"{str(digest)[:80]!r} is not a sha256 digest (64 hex characters)")
    return digest


def _remove_stale_copies(models: Path) -> None:
    """Copies of weights left by a freeze that was killed (its process is gone)."""
    for stale in models.glob(f"{PARTIAL_PREFIX}*"):
        owner = _COPY_OWNER.fullmatch(stale.name[len(PARTIAL_PREFIX):])
        if owner is not None and not owner_alive(owner.group(1)):
            try:
                remove_tree(stale)
            except OSError:
                pass  # another controller removed it first, or will


_COPY_OWNER = re.compile(r"(.+:\d+)-[^-]+")  # host:pid-<mkdtemp's random part>


def _setup(conn: sqlite3.Connection) -> None:
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


def _retry_locked(action, seconds: float = 60.0) -> None:
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
