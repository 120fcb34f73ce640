"""The results store: one SQLite file plus content-addressed objects, under a workspace.

A row per finished cell, keyed by the job key (bundle digest, test-set sha256, scorer
version, options). Predictions, per-question scores and logs are kept as objects named by
their sha256, written to a temporary file and renamed, so a killed process never leaves a
half-written object that would be trusted. A failed run is recorded in `failures` and never
produces a result row.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import tempfile
import time
from pathlib import Path

from evaluator import paths

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
CREATE TABLE IF NOT EXISTS failures (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL, bundle TEXT NOT NULL, testset TEXT NOT NULL,
    failure_class TEXT NOT NULL, message TEXT NOT NULL, log_sha256 TEXT,
    runner TEXT, created_at REAL NOT NULL
);
"""

RESULT_FIELDS = ("key", "bundle", "bundle_digest", "testset", "testset_sha256", "scorer",
                 "scorer_version", "options", "n", "questions", "missing", "extra", "em", "f1",
                 "em_lo", "em_hi", "f1_lo", "f1_hi", "level", "predictions_sha256",
                 "scores_sha256", "log_sha256", "runner", "device", "image_digest", "wall_s",
                 "run_record", "created_at")


class Store:
    def __init__(self, workspace: Path):
        self.workspace = Path(workspace)
        self.db_path = self.workspace / "results.sqlite"
        self._conn: sqlite3.Connection | None = None

    @classmethod
    def open_default(cls) -> Store:
        return cls(paths.workspace_dir())

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            self.workspace.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.db_path, timeout=60, isolation_level=None)
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.executescript(SCHEMA)
            self._conn = conn
        return self._conn

    def exists(self) -> bool:
        return self.db_path.exists()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # objects -----------------------------------------------------------------
    def object_path(self, sha256: str) -> Path:
        return self.workspace / "objects" / sha256[:2] / sha256

    def put_object(self, data: bytes) -> str:
        sha = hashlib.sha256(data).hexdigest()
        target = self.object_path(sha)
        if target.exists() and _sha(target) == sha:
            return sha
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".partial-")
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
        return sha

    def get_object(self, sha256: str) -> bytes | None:
        """The object's bytes, or None when it is missing or fails its hash."""
        path = self.object_path(sha256)
        if not path.is_file():
            return None
        data = path.read_bytes()
        return data if hashlib.sha256(data).hexdigest() == sha256 else None

    # results -----------------------------------------------------------------
    def get(self, key: str) -> dict | None:
        row = self.conn.execute("SELECT * FROM results WHERE key = ?", (key,)).fetchone()
        return dict(row) if row else None

    def put(self, row: dict) -> None:
        values = [row.get(f) for f in RESULT_FIELDS]
        placeholders = ", ".join("?" for _ in RESULT_FIELDS)
        with self.conn:
            self.conn.execute("BEGIN IMMEDIATE")
            self.conn.execute(f"INSERT OR REPLACE INTO results ({', '.join(RESULT_FIELDS)}) "
                              f"VALUES ({placeholders})", values)

    def delete(self, key: str) -> None:
        self.conn.execute("DELETE FROM results WHERE key = ?", (key,))

    def results(self, bundle: str | None = None, testset: str | None = None) -> list[dict]:
        query, args = "SELECT * FROM results WHERE 1=1", []
        if bundle:
            query, args = query + " AND bundle = ?", [*args, bundle]
        if testset:
            query, args = query + " AND testset = ?", [*args, testset]
        return [dict(r) for r in self.conn.execute(query + " ORDER BY bundle, testset", args)]

    def record_failure(self, key: str, bundle: str, testset: str, failure_class: str,
                       message: str, log: str, runner: str | None) -> None:
        log_sha = self.put_object(log.encode("utf-8", errors="replace")) if log else None
        self.conn.execute(
            "INSERT INTO failures (key, bundle, testset, failure_class, message, log_sha256, "
            "runner, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (key, bundle, testset, failure_class, message, log_sha, runner, time.time()))

    def failures(self) -> list[dict]:
        return [dict(r) for r in self.conn.execute("SELECT * FROM failures ORDER BY id")]

    def records(self) -> list[dict]:
        """Result rows joined with their bundles' names and metadata, for the analysis."""
        from evaluator import bundles

        out = []
        for row in self.results():
            try:
                bundle = bundles.get(row["bundle"])
                extra = {"name": bundle.name, "family": bundle.metadata.get("family"),
                         "reference_scores": bundle.reference_scores,
                         "metadata": bundle.metadata}
            except Exception:  # a result outlives its bundle folder: keep the numbers
                extra = {"name": row["bundle"], "family": None, "reference_scores": {},
                         "metadata": {}}
            out.append({**row, **extra, "kind": "model"})
        return out


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def dumps(obj: object) -> bytes:
    """Canonical JSON bytes: the same content always hashes the same."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
