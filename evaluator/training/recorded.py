"""The frozen population's committed results, kept in a store as recorded results.

The population's scores were run once and committed (`results/population.csv`, written by
`training.table` from a store). A store records them (`Store.record`) the first time a
command needs the population, or when asked (`qashift store record`), so every view of that
store (`report`, `figures`, `trend`, the API) shows the population beside the store's own
runs. Each recorded row is keyed as the run it came from (`jobs.job.cell_key`: bundle digest,
test-set id and bytes, scorer version, no options), so a run of the same cell supersedes it,
and it stands only while its system's digest and its test set's bytes are today's.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

from evaluator.core import console, settings
from evaluator.core.errors import UserError
from evaluator.core.files import read_csv_table
from evaluator.core.hashing import sha256_bytes
from evaluator.data import testsets
from evaluator.jobs.job import cell_key
from evaluator.store.rows import recorded_problem
from evaluator.store.store import Store

POPULATION = "results/population.csv"
REFERENCE, BASE = "squad-dev-heldout", "squad-dev-train"  # its x axis and training split
NEEDED = ("model", "testset", "metric", "value", "lo", "hi", "n", "bundle_digest",
          "testset_sha256", "scorer_version", "runner", "wall_s")
LEVEL = 0.95  # the level of the committed tables' intervals (`training.table`)


def table_path(path: Path | str | None = None) -> tuple[Path, str]:
    """The table's path and the name the store keeps it under: its path in the project when
    it lies inside it (the same on every clone), else the absolute path."""
    root = settings.project_root()
    path = Path(path) if path is not None else root / POPULATION
    resolved = path.resolve()
    name = str(resolved.relative_to(root.resolve())) if resolved.is_relative_to(
        root.resolve()) else str(resolved)
    return path, name


def record(store: Store, path: Path | str | None = None) -> int:
    """Record the table's cells in the store unless it holds this version already; the
    number of cells recorded (0: already there). A table that cannot be read, or a row that
    is not a cell, is one line naming it; nothing is recorded then."""
    path, name = table_path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UserError(f"cannot read the results table {path}: {exc.strerror or exc}") from None
    sha = sha256_bytes(data)
    if store.exists() and store.recorded_version(name) == sha:
        return 0
    rows = cells(path)
    store.record(name, sha, rows)
    return len(rows)


def cells(path: Path) -> list[dict]:
    """The table's rows (one per system, test set and metric) as recorded results, one per
    cell, each checked (`store.rows.recorded_problem`)."""
    table = read_csv_table(path, NEEDED, "a results table (qashift study run --table)")
    questions = _declared_questions()
    pairs: dict[tuple[str, str], dict[str, dict]] = {}
    lines: dict[tuple[str, str], int] = {}
    for line, r in enumerate(table, start=2):
        cell = (r["model"], r["testset"])
        pairs.setdefault(cell, {})[r["metric"]] = r
        lines.setdefault(cell, line)
    now = time.time()
    out, halves = [], []
    for (model, testset), metrics in pairs.items():
        where = f"{path}, line {lines[(model, testset)]}"
        if not {"em", "f1"} <= set(metrics):  # a hand-edited table's: not a whole cell
            halves.append(f"{model} on {testset}")
            continue
        em, f1 = metrics["em"], metrics["f1"]
        try:
            row = {"bundle": model, "bundle_digest": f1["bundle_digest"], "testset": testset,
                   "testset_sha256": f1["testset_sha256"],
                   "scorer": f1["scorer_version"].split("/")[0],
                   "scorer_version": f1["scorer_version"], "options": "{}",
                   "n": int(f1["n"]), "em": float(em["value"]), "f1": float(f1["value"]),
                   "em_lo": _bound(em["lo"]), "em_hi": _bound(em["hi"]),
                   "f1_lo": _bound(f1["lo"]), "f1_hi": _bound(f1["hi"]), "level": LEVEL,
                   "runner": f1["runner"] or "local",
                   "wall_s": float(f1["wall_s"]) if f1["wall_s"] else None, "created_at": now}
        except ValueError as exc:
            raise UserError(f"{where}: {model} on {testset}: {exc}") from None
        row["questions"] = questions.get(testset) or row["n"]
        row["key"] = cell_key(row["bundle_digest"], testset, row["testset_sha256"],
                              row["scorer_version"], {})
        if em["bundle_digest"] != f1["bundle_digest"] or \
                em["testset_sha256"] != f1["testset_sha256"]:
            raise UserError(f"{where}: {model} on {testset}: its em and f1 rows are of "
                            f"different runs")
        if why := recorded_problem(row):
            raise UserError(f"{where}: {model} on {testset}: {why}")
        out.append(row)
    if halves:
        console.warn(f"{path}: {len(halves)} cells without both an em and an f1 row were not "
                     f"recorded (e.g. {halves[0]})")
    return out


def _bound(text: str) -> float | None:
    """A bound, or None where the table has none (a cell whose questions all score alike)."""
    if text in ("", None):
        return None
    value = float(text)
    return None if math.isnan(value) else value


def _declared_questions() -> dict[str, int]:
    """Each test-set folder's declared question count (no data is read): a recorded cell
    of an adversarial set scores 1,000 groups of more questions."""
    out = {}
    for name, folder in testsets.available().items():
        try:
            out[name] = testsets.from_folder(folder).questions
        except Exception:  # an invalid folder must not stop the others' cells
            continue
    return out


__all__ = ["POPULATION", "cells", "record", "table_path"]
