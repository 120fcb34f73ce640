"""The results table of trained systems: one row per system x test set x metric, in the long
form the analysis' CSV importer reads, with everything needed to trace a number back.

`mode` says what a score measures (Liu et al.'s distinction): `approach-level` when the
system was trained on the test set's own training split (its `train:`, at any train size),
`system-level` when a frozen system meets a set it was not trained for. `train_key` is the
train cell's key (approach code, split bytes, size, hyperparameters, seed): a row of a table
written earlier counts for a plan's system only while that key is the same."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from pathlib import Path

from evaluator.core import settings
from evaluator.core.files import exclusive, read_csv_table, write_csv_atomic
from evaluator.core.hashing import sha256_bytes
from evaluator.store.rows import bound
from evaluator.store.store import Store
from evaluator.training.systems import trained_rows

COLUMNS = ("model", "testset", "metric", "value", "lo", "hi", "n", "reference", "mode", "family",
           "approach", "train_split", "train_size", "seed", "hyperparameters", "train_key",
           "weights_digest",
           "bundle_digest", "testset_sha256", "scorer_version", "train_device", "train_wall_s",
           "wall_s", "runner")


def rows(store: Store, results: Iterable[dict], references: dict[str, str | None],
         families: dict[str, str | None], trains: dict[str, str | None] | None = None
         ) -> list[dict]:
    """Rows for every trained system's results (`results`: every cell's result as it is
    today, `api.Results(store).rows()`: a name whose current system is trained shows that
    system's runs only, never a predecessor's, and a --limit sample never enters the table);
    `references` maps a test set to its original-set axis (its `reference`), `families` an
    approach to its family, `trains` a test set to its training split (for `mode`)."""
    trains = trains or {}
    systems = {s["system"]: s for s in trained_rows(store)}  # the newest training of each
    # name, stored here or frozen in the repository
    latest = [r for r in results if r["bundle"] in systems]
    out = []
    for row in sorted(latest, key=lambda r: (r["bundle"], r["testset"])):
        name, testset, system = row["bundle"], row["testset"], systems[row["bundle"]]
        for metric in ("em", "f1"):
            out.append({
                "model": name, "testset": testset, "metric": metric,
                "value": round(row[metric], 4), "lo": _bound(row[f"{metric}_lo"]),
                "hi": _bound(row[f"{metric}_hi"]), "n": row["n"],
                "reference": references.get(testset) or "",
                "mode": "approach-level" if trains.get(testset) == system["split"]
                else "system-level",
                "family": families.get(system["approach"]) or "",
                "approach": system["approach"], "train_split": system["split"],
                "train_size": system["train_size"] or "", "seed": system["seed"],
                "hyperparameters": system["hyperparameters"], "train_key": system["key"],
                "weights_digest": system["weights_digest"],
                "bundle_digest": row["bundle_digest"], "testset_sha256": row["testset_sha256"],
                "scorer_version": row["scorer_version"], "train_device": system["device"],
                "train_wall_s": round(system["wall_s"] or 0.0, 1),
                "wall_s": round(row["wall_s"] or 0.0, 1), "runner": row["runner"]})
    return out


def _bound(value: float | None) -> float | str:
    """A bound rounded as the scores are, or empty for a cell without an interval (every
    question scored the same: NULL in the store), as the analysis' importer reads it."""
    value = bound(value)
    return "" if value is None else round(value, 4)


def ordered(rows: list[dict]) -> list[dict]:
    """Rows in the table's order: by system, then test set, then metric."""
    return sorted(rows, key=lambda r: (r["model"], r["testset"], r["metric"]))


def write(table: list[dict], path: Path) -> None:
    write_csv_atomic(path, COLUMNS, table)


def lock(path: Path, waiting: Callable[[], None] = lambda: None) -> AbstractContextManager[None]:
    """Held while a table is worked out from the store and written, so that of two
    controllers sharing a plan the one that writes last writes what both have stored
    (`waiting`: called if another holds it)."""
    name = sha256_bytes(str(Path(path).resolve()).encode())[:16]
    return exclusive(settings.workspace_dir() / "locks" / f"table-{name}.lock", waiting)


def read(path: Path) -> list[dict]:
    """A table written earlier (none if there is no file or an empty one); one line if it is
    not one."""
    return read_csv_table(path, COLUMNS, "a results table of trained systems")


def ledger(own: Path | None, others: tuple[Path, ...] = ()) -> list[dict]:
    """The rows a study may take as done: its own table's, then those of other studies'
    tables (`--ledger`) for cells its own does not hold, so a system two plans share is
    trained once (a row is a system x test set x metric). A cell is the same cell only for
    the same training and test-set bytes: an own row of an older training never hides
    another table's row of the current one (the plan keeps the rows that are current)."""
    def cell_of(row: dict) -> tuple:
        return (row["model"], row["testset"], row["metric"], row["train_key"],
                row["testset_sha256"])

    out = read(own) if own is not None else []
    seen = {cell_of(r) for r in out}
    for path in others:
        for row in read(path):
            cell = cell_of(row)
            if cell not in seen:
                seen.add(cell)
                out.append(row)
    return out
