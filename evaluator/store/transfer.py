"""`qashift store import`: bring another store's trained systems and finished cells into this one.

A store made elsewhere (a GPU machine lent for a while, another workstation) holds systems
and results that this one would otherwise train and score again. Importing copies each
system row with its weights and each result row with its objects, verified on the way in:
an object must hash to its name, a model folder to its weights digest, and a row whose
objects or weights are missing or corrupt is left out (and counted), never half imported.
Rows this store already holds are kept as they are, so importing twice changes nothing. A
system that a controller here is training right now is left out too (its training would
replace the imported row on finishing); importing again once it finished brings the rest.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from evaluator.core.errors import UserError
from evaluator.core.hashing import folder_digest, sha256_bytes
from evaluator.store.check import OBJECT_FIELDS
from evaluator.store.store import Store


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
            lines.append(f"left out {len(self.refused)} rows whose objects or weights are "
                         f"missing or corrupt:")
            lines += [f"  {why}" for why in self.refused]
        return lines


def import_store(store: Store, source: Path) -> ImportReport:
    """Copy `source`'s systems (with weights) and results (with objects) into `store`."""
    other = Store(Path(source))  # read through paths only: its index is opened read-only
    rows = _rows(other)
    report = ImportReport()
    left_out: set[str] = set()  # systems not imported: their results stay out with them
    training = {lease["key"] for lease in store.live_leases()}
    for row in rows["systems"]:
        if store.get_system(row["key"]):
            report.present += 1
        elif row["key"] in training:
            report.busy.append(row["system"])
            left_out.add(row["system"])
        elif (why := _copy_weights(store, other, row) or
              _copy_objects(store, other, row, ("log_sha256",))):
            report.refused.append(f"{row['system']} ({row['key'][:12]}): {why}")
            left_out.add(row["system"])
        else:
            store.put_system(row)
            report.systems += 1
    for row in rows["results"]:
        if store.get(row["key"]):
            report.present += 1
        elif row["bundle"] in left_out:
            if row["bundle"] not in report.busy:
                report.refused.append(f"{row['bundle']} on {row['testset']} "
                                      f"({row['key'][:12]}): its system was left out")
        elif why := _copy_objects(store, other, row, OBJECT_FIELDS):
            report.refused.append(f"{row['bundle']} on {row['testset']} "
                                  f"({row['key'][:12]}): {why}")
        else:
            store.put(row)
            report.results += 1
    return report


def _rows(other: Store) -> dict[str, list[dict]]:
    """The other store's system and result rows, read without writing to it."""
    db = other.db_path
    if not db.is_file():
        raise UserError(f"{other.workspace} is not a results store (no results.sqlite in it)")
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        conn.row_factory = sqlite3.Row
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            return {name: [dict(r) for r in conn.execute(f"SELECT * FROM {name} ORDER BY key")]
                    if name in tables else [] for name in ("systems", "results")}
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise UserError(f"cannot read the results store {db}: {exc}") from None


def _copy_objects(store: Store, other: Store, row: dict, fields: tuple[str, ...]) -> str:
    """Copy the row's objects; why not, or "" when all are here and verified."""
    for name in fields:
        sha = row.get(name)
        if not sha:
            continue
        path = other.object_path(sha)
        if not path.is_file():
            return f"{name} {sha[:12]} is missing"
        data = path.read_bytes()
        if sha256_bytes(data) != sha:
            return f"{name} {sha[:12]} does not match its hash"
        store.put_object(data)
    return ""


def _copy_weights(store: Store, other: Store, row: dict) -> str:
    """Copy the system's weights folder; why not, or "" when it is here and verified."""
    digest = row["weights_digest"]
    if store.model_path(digest).is_dir():
        return ""  # this store froze or imported these weights already
    folder = other.model_path(digest)
    if not folder.is_dir():
        return f"its weights {digest[:12]} are missing"
    if folder_digest(folder) != digest:
        return f"its weights {digest[:12]} do not match their digest"
    store.put_model(folder, digest)
    return ""
