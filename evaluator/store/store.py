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
import sqlite3
import threading
import time
from pathlib import Path

from evaluator.core import settings
from evaluator.core.errors import UserError
from evaluator.core.gate import Limits
from evaluator.core.hashing import canonical_json, stat_key
from evaluator.core.owner import owner_alive, owner_id
from evaluator.store import files
from evaluator.store.rows import without_nan_bounds
from evaluator.store.schema import (
    RECORDED_FIELDS,
    RESULT_FIELDS,
    ROW_MARK,
    SYSTEM_FIELDS,
    retry_locked,
    row_record,
    setup,
)

LEASE_SECONDS = 120.0


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
            retry_locked(lambda: setup(conn))
            self._local.conn = conn
        return conn

    def exists(self) -> bool:
        return self.db_path.exists()

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # objects (store.files) ----------------------------------------------------
    def object_path(self, sha256: str) -> Path:
        return files.object_path(self.workspace, sha256)

    @_one_line_errors
    def put_object(self, data: bytes) -> str:
        """Keep bytes as an object named by their sha256. Bytes a run produced (a log, a
        generations file) that the rebuild would read as a row (`row_record`, the same parser,
        so no escape or encoding slips past) are kept behind a `#`, which no JSON parser
        reads: a run cannot write what a rebuilt index would take for a row of its own."""
        if row_record(data) is not None:
            data = b"#" + data
        return files.put_object(self.workspace, data)

    def get_object(self, sha256: str) -> bytes | None:
        """The object's bytes, or None when it is missing or fails its hash."""
        return files.get_object(self.workspace, sha256)

    def intact(self, sha256: str) -> bool:
        """Whether the object is there and holds the bytes its name says, without reading it
        again while its file is the one hashed before: hashed once, then trusted while its
        `stat_key` (inode, size, modification and change times) is the one noted then, as
        git's index trusts an unchanged file. Any write to it, and any setting back of its
        times, moves its change time; a file changed in the last seconds is not noted."""
        path = self.object_path(sha256)
        try:
            stamp = stat_key(path) if path.is_file() and not path.is_symlink() else False
        except OSError:
            return False
        if stamp is False:
            return False
        noted = None if stamp is None else canonical_json(list(stamp)).decode()
        try:
            seen = self.conn.execute("SELECT stat FROM intact WHERE sha256 = ?",
                                     (sha256,)).fetchone()
        except sqlite3.Error:
            seen = None
        if noted is not None and seen is not None and seen[0] == noted:
            return True
        if files.get_object(self.workspace, sha256) is None:
            return False
        if noted is not None:
            try:
                self.conn.execute("INSERT OR REPLACE INTO intact VALUES (?, ?)",
                                  (sha256, noted))
            except sqlite3.Error:
                pass  # a store read-only to this process: the object is hashed each time
        return True

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
        files.put_object(self.workspace, canonical_json({ROW_MARK: 1, "row": row}))
        self._insert_and_release("results", RESULT_FIELDS, row, owner)

    @_one_line_errors
    def put_many(self, systems: list[dict], results: list[dict]) -> None:
        """Insert trained systems and results (their objects and weights already stored) in
        one transaction: all of them or none. Each row is kept as an object too."""
        results = [without_nan_bounds(row) for row in results]
        for kind, rows in (("system", systems), ("row", results)):
            for row in rows:
                files.put_object(self.workspace, canonical_json({ROW_MARK: 1, kind: row}))
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
        return files.model_path(self.workspace, weights_digest)

    @_one_line_errors
    def put_model(self, folder: Path, expected: str | None = None,
                  limits: Limits | None = None, label: str = "") -> str:
        """Keep a folder of trained weights under models/ (`files.put_model`); the digest."""
        return files.put_model(self.workspace, folder, expected, limits, label)

    @_one_line_errors
    def put_system(self, row: dict, owner: str | None = None) -> None:
        """Record a trained system (its weights already under model_path) and release the
        train cell's lease; the row is kept as an object too, like result rows."""
        files.put_object(self.workspace, canonical_json({ROW_MARK: 1, "system": row}))
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
    def failures(self, key: str | None = None) -> list[dict]:
        """Failed runs, oldest first; with `key`, those of one cell."""
        query, args = "SELECT * FROM failures", ()
        if key is not None:
            query, args = query + " WHERE key = ?", (key,)
        return [dict(r) for r in self.conn.execute(query + " ORDER BY id", args)]



