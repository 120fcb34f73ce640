"""`qashift store import`: bring another store's trained systems and finished cells into this one.

A store made elsewhere (a GPU machine lent for a while, another workstation) holds systems
and results that this one would otherwise train and score again. It is hostile input in every
byte: its index is opened read-only (by a percent-encoded URI, so no character of its folder's
name can open another file), with SQLite's schema code distrusted and only the known columns
of the two known tables read, row by row, up to a bound; every row is checked against the
schema (`store.rows`: names are never paths); every object it names is read through the
bounded reader and must hash to its name, and none may be a row object (which `store repair`
would read as a row); every weights folder is walked through the gate and must hash to the
digest its row names; no row may be dated more than a day ahead. A system row's key must be
the train key its own fields give, its system id must name them, and its runner, device and
train time must be those of its run record (`system_claims_problem`, the rule frozen systems
are read by too); a result row's key must be the job key its own fields give, and its
predictions are scored again against this machine's gold (`units.Gold`: the test set
registered here under its id with the row's sha256): its n, missing, EM/F1 and per-question
scores must be what they give. A row whose test set is not here cannot be checked and is
left out.

What that proves, and what it does not: an imported result is consistent, and its predictions
score as it states on this machine's gold. Nothing in a store can prove that the bundle it
names (by digest) produced those predictions: whoever wrote the other store could have
written any predictions under any bundle's name. Import only stores whose runs you trust.

Everything is verified and staged first; only the objects and weights that accepted rows name
are then moved in, and the rows are inserted in one transaction: an import that is refused
or cannot finish leaves this store's rows as they were. Rows this store already holds are
kept as they are, so importing twice changes nothing. A system that a controller here is
training right now is left out too (its training would replace the imported row on
finishing); importing again once it finished brings the rest. A row that fails a check is
left out and counted, with its reason, never half imported; the results of a left-out system
stay out with it.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import stat
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from evaluator.core import console
from evaluator.core.errors import UserError
from evaluator.core.files import PARTIAL_PREFIX, remove_tree, write_atomic
from evaluator.core.gate import Refused, read_bounded, walk
from evaluator.core.hashing import sha256_bytes
from evaluator.core.owner import owner_id
from evaluator.store.check import OBJECT_FIELDS, read_only_uri, schema_problem
from evaluator.store.rows import (
    fields_system_id,
    future_problem,
    key_problem,
    result_problem,
    system_key_problem,
    system_problem,
    with_current_key,
)
from evaluator.store.schema import RESULT_FIELDS, SYSTEM_FIELDS, row_record
from evaluator.store.store import Store
from evaluator.store.units import Gold, scores_cap

MAX_ROWS = 500_000  # per table
OBJECT_CAP = 1 << 30
TEXT_CAP = 2 << 20  # a longer text value is cut, and its row then fails the schema
PROGRESS_S = 2.0  # seconds between progress lines while results are checked


@dataclass
class ImportReport:
    systems: int = 0
    results: int = 0
    present: int = 0  # rows this store already held
    busy: list[str] = field(default_factory=list)  # systems in training here right now
    refused: list[str] = field(default_factory=list)  # "<key>: why", one per row left out

    def lines(self) -> list[str]:
        lines = [f"imported {self.systems} trained systems and {self.results} results "
                 f"({self.present} already here)"]
        if self.busy:
            lines.append(f"left out {len(self.busy)} systems being trained here right now, "
                         f"with their results (import again once their training ends): "
                         f"{', '.join(self.busy)}")
        if self.refused:
            lines.append(f"left out {len(self.refused)} rows that failed a check (schema, "
                         f"key, date, objects, weights, scores or their re-scoring here):")
            lines += [f"  {why}" for why in self.refused]
        return lines


TIME_SLACK_S = 60.0  # a wall clock may step back a little between two of its readings


def _a_time(value: object) -> bool:
    """Whether `value` is a number of epoch seconds: finite, and small enough to be a float
    (JSON integers may have thousands of digits)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and \
        abs(value) < 1e12 and math.isfinite(value)


def system_claims_problem(row: dict) -> str:
    """Why a system row made elsewhere (another store's, a frozen manifest's) does not say
    what its own fields and run record give, or "": the schema (`rows.system_problem`), its
    key the train key and its system id the id its approach, split, size, seed and
    hyperparameters give (`rows.system_key_problem`), and its runner, device and train time
    those of its run record, the time within the span its provenance states, before the
    row was made. This is one rule for `store import` and for frozen systems: a row that
    claims another id, device or train time than its fields is listed as nothing. It proves
    consistency, not honesty: whoever wrote every field alike is believed."""
    if why := system_problem(row) or system_key_problem(row):
        return why
    record = json.loads(row["run_record"])
    for name in ("runner", "device", "wall_s"):
        if record.get(name) != row[name]:
            return (f"its {name} {str(row[name])[:40]!r} is not the "
                    f"{str(record.get(name))[:40]!r} its run record states")
    details = record.get("details")
    provenance = details.get("provenance") if isinstance(details, dict) else None
    if isinstance(provenance, dict) and {"started_at", "finished_at"} <= set(provenance):
        started, finished = provenance["started_at"], provenance["finished_at"]
        if not all(_a_time(t) for t in (started, finished)) or not \
                started <= finished <= row["created_at"] + TIME_SLACK_S:
            return "its run record's start and end are not times before the row was made"
        if row["wall_s"] is not None and row["wall_s"] > finished - started + TIME_SLACK_S:
            return (f"its train time {row['wall_s']:.0f} s is longer than the "
                    f"{finished - started:.0f} s its run record's provenance spans")
    return ""


def import_store(store: Store, source: Path) -> ImportReport:
    """Copy `source`'s systems (with weights) and results (with objects) into `store`."""
    other = Store(Path(source))
    staging = Path(tempfile.mkdtemp(prefix=f"{PARTIAL_PREFIX}import-{owner_id()}-",
                                    dir=_made(store.workspace)))
    try:
        batch = _Batch(store, other, staging, Gold())
        report = batch.verify(_rows(other, "systems", SYSTEM_FIELDS),
                              _rows(other, "results", RESULT_FIELDS))
        batch.commit()
        return report
    finally:
        console.finish()
        remove_tree(staging)


def _made(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class _Batch:
    """What an import verified and staged, moved into the store only when all is checked, and
    then only what an accepted row names."""

    def __init__(self, store: Store, other: Store, staging: Path, gold: Gold):
        self.store, self.other, self.staging, self.gold = store, other, staging, gold
        self.verified: dict[str, Path] = {}  # sha -> staged file that hashes to its name
        self.verified_models: dict[str, Path] = {}  # weights digest -> staged folder
        self.objects: dict[str, Path] = {}  # what accepted rows name: moved in on commit
        self.models: dict[str, Path] = {}
        self.systems: list[dict] = []
        self.results: list[dict] = []

    def verify(self, systems: Iterator[dict], results: Iterator[dict]) -> ImportReport:
        report = ImportReport()
        left_out: set[str] = set()
        training = {lease["key"] for lease in self.store.live_leases()}
        for row in systems:
            label = f"{str(row.get('system'))[:80]} ({str(row.get('key'))[:12]})"
            if (why := system_claims_problem(row) or future_problem(row)):
                report.refused.append(f"{label}: {why}")
                left_out.add(str(row.get("system")))  # and the id its fields give, if another
                if not system_problem(row):
                    left_out.add(fields_system_id(row))
            elif self.store.get_system(row["key"]):
                report.present += 1
            elif row["key"] in training:
                report.busy.append(row["system"])
                left_out.add(row["system"])
            elif why := self._weights(row) or self._objects(row, ("log_sha256",)):
                report.refused.append(f"{label}: {why}")
                left_out.add(row["system"])
            else:
                self._accept(row, ("log_sha256",), row["weights_digest"])
                self.systems.append(row)
                report.systems += 1
        results = sorted(results, key=Gold.by_testset)  # each set's gold loaded once
        shown = time.monotonic()
        for done, row in enumerate(map(with_current_key, results)):  # older stores' rows too
            if time.monotonic() - shown > PROGRESS_S:
                console.progress(f"import: checked {done:,} of {len(results):,} results")
                shown = time.monotonic()
            label = (f"{str(row.get('bundle'))[:80]} on {str(row.get('testset'))[:80]} "
                     f"({str(row.get('key'))[:12]})")
            if (why := result_problem(row) or key_problem(row) or future_problem(row)):
                report.refused.append(f"{label}: {why}")
            elif self.store.get(row["key"]):
                report.present += 1
            elif row["bundle"] in left_out:
                if row["bundle"] not in report.busy:
                    report.refused.append(f"{label}: its system was left out")
            elif why := self._objects(row, OBJECT_FIELDS) or self._rescored(row):
                report.refused.append(f"{label}: {why}")
            else:
                self._accept(row, OBJECT_FIELDS)
                self.results.append(row)
                report.results += 1
        return report

    def _accept(self, row: dict, fields: tuple[str, ...], weights: str | None = None) -> None:
        """Mark what the accepted row names to be moved in."""
        for name in fields:
            if (sha := row.get(name)) and sha in self.verified:
                self.objects[sha] = self.verified[sha]
        if weights is not None and weights in self.verified_models:
            self.models[weights] = self.verified_models[weights]

    def _objects(self, row: dict, fields: tuple[str, ...]) -> str:
        """Verify and stage the row's objects; why not, or "" when all are verified."""
        for name in fields:
            sha = row.get(name)
            if not sha or sha in self.verified or self.store.get_object(sha) is not None:
                continue
            path = self.other.object_path(sha)
            if not os.path.lexists(path):
                return f"{name} {sha[:12]} is missing"
            cap = min(OBJECT_CAP, scores_cap(row["n"])) if name == "scores_sha256" else OBJECT_CAP
            try:
                data = read_bounded(path, cap, f"{name} {sha[:12]}")
            except Refused as exc:
                return str(exc)
            if sha256_bytes(data) != sha:
                return f"{name} {sha[:12]} does not match its hash"
            if row_record(data) is not None:
                return f"{name} {sha[:12]} is a row object, which `store repair` would read " \
                       f"as a row"
            staged = self.staging / "objects" / sha
            write_atomic(staged, data)
            self.verified[sha] = staged
        return ""

    def _weights(self, row: dict) -> str:
        """Stage the system's weights through the gate; why not, or "" when verified."""
        digest = row["weights_digest"]
        if digest in self.verified_models or self.store.model_path(digest).is_dir():
            return ""
        folder = self.other.model_path(digest)
        if not os.path.lexists(folder):
            return f"its weights {digest[:12]} are missing"
        staged = self.staging / "models" / digest
        staged.parent.mkdir(parents=True, exist_ok=True)
        try:
            found = walk(folder, target=staged, label=f"its weights {digest[:12]}").digest
        except Refused as exc:
            remove_tree(staged)
            return str(exc)
        if found != digest:
            remove_tree(staged)
            return f"its weights {digest[:12]} do not match their digest"
        self.verified_models[digest] = staged
        return ""

    def _rescored(self, row: dict) -> str:
        """Why the row's predictions do not score as it states on this machine's gold."""
        return self.gold.problem(row, self._object_path(row["predictions_sha256"]),
                                 self._object_bytes(row["scores_sha256"]))

    def _object_path(self, sha: str) -> Path:
        return self.verified.get(sha) or self.store.object_path(sha)

    def _object_bytes(self, sha: str) -> bytes | None:
        if sha in self.verified:
            return self.verified[sha].read_bytes()
        return self.store.get_object(sha)

    def commit(self) -> None:
        """Move the accepted rows' objects and weights in, then insert every row in one
        transaction."""
        for sha, staged in self.objects.items():
            target = self.store.object_path(sha)
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(staged, target)
        for digest, staged in self.models.items():
            target = self.store.model_path(digest)
            if not target.is_dir():
                target.parent.mkdir(parents=True, exist_ok=True)
                staged.rename(target)
        self.store.put_many(self.systems, self.results)


def _rows(other: Store, table: str, fields: tuple[str, ...]) -> Iterator[dict]:
    """The other store's rows of `table`, known columns only, read without writing to it and
    without running any of its schema's code."""
    db = other.db_path
    try:
        info = os.lstat(db)
    except OSError:
        raise UserError(f"{other.workspace} is not a results store (no results.sqlite in "
                        f"it)") from None
    if not stat.S_ISREG(info.st_mode):
        raise UserError(f"{db} is not a regular file; refused")
    rows: list[dict] = []
    try:
        conn = sqlite3.connect(read_only_uri(db), uri=True)
        try:
            conn.execute("PRAGMA trusted_schema = OFF")
            conn.execute("PRAGMA query_only = ON")
            if why := schema_problem(conn):
                raise UserError(f"{db}: {why}; refused, nothing read from it")
            kinds = dict(conn.execute("SELECT name, type FROM sqlite_master "
                                      "WHERE name IN ('systems', 'results')"))
            if kinds.get(table) != "table":
                return iter(())
            columns = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
            wanted = [f for f in fields if f in columns]
            bounded = ", ".join(f"CASE typeof({f}) WHEN 'text' THEN substr({f}, 1, {TEXT_CAP})"
                                f" WHEN 'blob' THEN NULL ELSE {f} END" for f in wanted)
            cursor = conn.execute(f"SELECT {bounded} FROM {table} LIMIT {MAX_ROWS + 1}")
            for values in cursor:
                rows.append(dict(zip(wanted, values, strict=True)))
                if len(rows) > MAX_ROWS:
                    raise UserError(f"{db} holds more than {MAX_ROWS:,} {table}; refused")
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise UserError(f"cannot read the results store {db}: {exc}") from None
    return iter(rows)
