"""What a stored row may hold: the schema of result and system rows, checked field by field.

A row that comes from elsewhere (another store being imported, an index being rebuilt) is
admitted only when every field has its type and range: digests are 64 hex characters, counts
are non-negative integers, scores lie in [0, 100], JSON columns parse to objects, names are
never paths out of a folder (a report writes a page per test set, a figure per name). A result
row's key must be the job key its own fields give (`result_key`), a system row's the train
key its fields give (`system_key_problem`), and no row may be dated in the future
(`future_problem`): the newest row of a cell is its result. The check says why a
row is refused, in one line.
"""

from __future__ import annotations

import json
import math
import re
import time

from evaluator.core.gate import is_digest
from evaluator.core.schema import ID_PATTERN
from evaluator.jobs.job import (
    cell_key,
    format_system_id,
    name_free_key,
    parse_system_id,
    train_key,
)

# A bundle id (`core.schema.ID_PATTERN`, its folder's name) or a system id, ids joined by '/'
# (`bidaf-plus-plus@squad-dev-train/s0/h051f5a65`), never with a '..' or empty part (`_text`).
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@~/+:-]{0,199}")
TESTSET_NAME = ID_PATTERN  # a test set's id is its folder's name, so never a '/'
JSON_CAP = 1 << 20
FUTURE_ALLOWANCE_S = 86_400.0  # clocks of two machines disagree, never by a day


def _text(row: dict, field: str, pattern: re.Pattern | None = None,
          optional: bool = False) -> str:
    value = row.get(field)
    if value is None and optional:
        return ""
    if not isinstance(value, str) or not value:
        return f"{field} is not a non-empty text"
    if pattern is not None and (not pattern.fullmatch(value) or
                                any(part in ("", ".", "..") for part in value.split("/"))):
        return f"{field} {value[:40]!r} is not a valid name"
    return ""


def _digest(row: dict, field: str, optional: bool = False) -> str:
    value = row.get(field)
    if value is None and optional:
        return ""
    return "" if is_digest(value) else f"{field} is not a sha256 digest"


def _number(row: dict, field: str, lo: float, hi: float, integer: bool = False,
            optional: bool = False) -> str:
    value = row.get(field)
    if value is None and optional:
        return ""
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not math.isfinite(value):
        return f"{field} is not a{'n integer' if integer else ' number'}"
    if not lo <= value <= hi:
        return f"{field} {value} is outside [{lo:g}, {hi:g}]"
    return ""


BOUNDS = ("em_lo", "em_hi", "f1_lo", "f1_hi")


def bound(value: float | None) -> float | None:
    """An interval bound, or None for "no interval": a cell whose every question scores the
    same has none, NaN in an Interval, NULL in SQLite (which keeps no NaN), and NaN in the row
    objects of stores written before rows were stored with None."""
    return None if isinstance(value, float) and math.isnan(value) else value


def without_nan_bounds(row: dict) -> dict:
    """A row whose NaN bounds read None, as the index holds them."""
    return {**row, **{f: bound(row[f]) for f in BOUNDS if f in row}}


def _bound(row: dict, field: str) -> str:
    """A bound is a score in [0, 100] or absent (None or NaN: no interval)."""
    return "" if bound(row.get(field)) is None else _number(row, field, 0, 100)


def _json_object(row: dict, field: str) -> str:
    value = row.get(field)
    if not isinstance(value, str) or len(value) > JSON_CAP:
        return f"{field} is not a JSON text of at most {JSON_CAP:,} characters"
    try:
        parsed = json.loads(value)
    except (ValueError, RecursionError):
        return f"{field} is not valid JSON"
    return "" if isinstance(parsed, dict) else f"{field} is not a JSON object"


BIG = float(1 << 40)  # a count or a time no row comes near


def _cell_checks(row: dict) -> list[str]:
    """The checks of what a run's result and a recorded result both hold: the cell's key
    and names, its scores, intervals and counts, how it ran."""
    return [
        _digest(row, "key"), _text(row, "bundle", NAME), _digest(row, "bundle_digest"),
        _text(row, "testset", TESTSET_NAME), _digest(row, "testset_sha256"), _text(row, "scorer"),
        _text(row, "scorer_version"), _json_object(row, "options"),
        _number(row, "n", 1, BIG, integer=True), _number(row, "questions", 1, BIG, True),
        _number(row, "em", 0, 100), _number(row, "f1", 0, 100),
        *(_bound(row, f) for f in BOUNDS), _number(row, "level", 0, 1),
        _text(row, "runner", NAME), _number(row, "wall_s", 0, BIG, optional=True),
    ]


def result_problem(row: dict) -> str:
    """Why a result row cannot be admitted, or "" when every field is what it must be."""
    checks = [
        *_cell_checks(row),
        _number(row, "missing", 0, BIG, True), _number(row, "extra", 0, BIG, True),
        _digest(row, "predictions_sha256"), _digest(row, "scores_sha256"),
        _digest(row, "log_sha256", optional=True), _text(row, "device", optional=True),
        _text(row, "image_digest", optional=True), _json_object(row, "run_record"),
        _number(row, "created_at", 0, 1e11),
    ]
    if not any(checks) and row["missing"] > row["n"]:
        checks.append("missing is more than n")
    return next((c for c in checks if c), "")


def recorded_problem(row: dict) -> str:
    """Why a recorded result (a committed table's cell: numbers, no objects) cannot be kept,
    or "" when every field is what it must be and its key is its cell's."""
    problem = next((c for c in _cell_checks(row) if c), "")
    return problem or ("" if result_key(row) == row["key"] else
                       "its key is not the job key its bundle digest, test set, scorer and "
                       "options give")


def system_problem(row: dict) -> str:
    """Why a system row cannot be admitted, or "" when every field is what it must be."""
    big = float(1 << 40)
    checks = [
        _digest(row, "key"), _text(row, "system", NAME), _text(row, "approach", NAME),
        _digest(row, "approach_digest"), _text(row, "split", TESTSET_NAME),
        _digest(row, "split_sha256"), _number(row, "train_size", 1, big, True, optional=True),
        _number(row, "seed", -big, big, integer=True), _json_object(row, "hyperparameters"),
        _digest(row, "weights_digest"), _text(row, "runner", NAME),
        _text(row, "device", optional=True), _number(row, "wall_s", 0, big, optional=True),
        _digest(row, "log_sha256", optional=True), _json_object(row, "run_record"),
        _number(row, "created_at", 0, 1e11),
    ]
    return next((c for c in checks if c), "")


def result_key(row: dict) -> str:
    """The job key of the cell a schema-checked result row describes, from its own fields
    (`jobs.job.cell_key`, as every cell computes it)."""
    return cell_key(row["bundle_digest"], row["testset"], row["testset_sha256"],
                    row["scorer_version"], json.loads(row["options"]))


def current_key(row: dict) -> str:
    """A result row's key under the current scheme: its own, or, for a row stored before the
    test set's id was part of keys (its key the name-free one of its fields), the key its
    fields give now. Stores are moved to the current scheme when opened (`store.schema.setup`),
    rows of another store when imported or rebuilt."""
    if row["key"] == name_free_key(row["bundle_digest"], row["testset_sha256"],
                                   row["scorer_version"], json.loads(row["options"])):
        return result_key(row)
    return row["key"]


def with_current_key(row: dict) -> dict:
    """A row from elsewhere under its current key (`current_key`); as it is when it is no
    well-formed result row, for the checks to refuse."""
    if result_problem(row):
        return row
    return {**row, "key": current_key(row)}


def key_problem(row: dict) -> str:
    """Why a schema-checked result row's key is not the cell its fields describe, or "": a row
    under another cell's key would be served as that cell's stored result."""
    if result_key(row) != row["key"]:
        return "its key is not the job key its bundle digest, test set, scorer and options give"
    return ""


def system_key_problem(row: dict) -> str:
    """Why a schema-checked system row does not describe the training its key names, or "":
    a row under another training's key would be served as that system (its weights scored
    in its name), and a system id that disagrees with its fields would list it as another."""
    if row["key"] != train_key(row["approach_digest"], row["split_sha256"], row["train_size"],
                               json.loads(row["hyperparameters"]), row["seed"]):
        return ("its key is not the train key its approach digest, split, size, "
                "hyperparameters and seed give")
    if row["system"] != fields_system_id(row):
        return (f"its system id {row['system'][:80]!r} is not "
                f"{fields_system_id(row, '')}[/hHASH] as its fields say")
    return ""


def fields_system_id(row: dict, hp: str | None = None) -> str:
    """The id a schema-checked system row's fields give it, with the hyperparameters' hash
    its own id states (`hp` given: that one instead)."""
    if hp is None:
        hp = (parse_system_id(row["system"]) or {}).get("hp")
    return format_system_id(row["approach"], row["split"], row["train_size"], row["seed"], hp)


def future_problem(row: dict, now: float | None = None) -> str:
    """Why a schema-checked row's created_at cannot be believed, or "": a row dated ahead
    would stay its cell's newest result whatever ran after it."""
    limit = (time.time() if now is None else now) + FUTURE_ALLOWANCE_S
    if row["created_at"] > limit:
        return f"created_at {row['created_at']:.0f} is in the future"
    return ""
