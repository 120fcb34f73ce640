"""What a stored row may hold: the schema of result and system rows, checked field by field.

A row that comes from elsewhere (another store being imported, an index being rebuilt) is
admitted only when every field has its type and range: digests are 64 hex characters, counts
are non-negative integers, scores lie in [0, 100], JSON columns parse to objects. The check
says why a row is refused, in one line.
"""

from __future__ import annotations

import json
import math
import re

from evaluator.core.gate import is_digest

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@~/+:-]{0,199}")
JSON_CAP = 1 << 20


def _text(row: dict, field: str, pattern: re.Pattern | None = None,
          optional: bool = False) -> str:
    value = row.get(field)
    if value is None and optional:
        return ""
    if not isinstance(value, str) or not value:
        return f"{field} is not a non-empty text"
    if pattern is not None and not pattern.fullmatch(value):
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


def _json_object(row: dict, field: str) -> str:
    value = row.get(field)
    if not isinstance(value, str) or len(value) > JSON_CAP:
        return f"{field} is not a JSON text of at most {JSON_CAP:,} characters"
    try:
        parsed = json.loads(value)
    except (ValueError, RecursionError):
        return f"{field} is not valid JSON"
    return "" if isinstance(parsed, dict) else f"{field} is not a JSON object"


def result_problem(row: dict) -> str:
    """Why a result row cannot be admitted, or "" when every field is what it must be."""
    big = float(1 << 40)
    checks = [
        _digest(row, "key"), _text(row, "bundle", NAME), _digest(row, "bundle_digest"),
        _text(row, "testset", NAME), _digest(row, "testset_sha256"), _text(row, "scorer"),
        _text(row, "scorer_version"), _json_object(row, "options"),
        _number(row, "n", 1, big, integer=True), _number(row, "questions", 1, big, True),
        _number(row, "missing", 0, big, True), _number(row, "extra", 0, big, True),
        _number(row, "em", 0, 100), _number(row, "f1", 0, 100),
        *(_number(row, f, 0, 100, optional=True) for f in ("em_lo", "em_hi", "f1_lo", "f1_hi")),
        _number(row, "level", 0, 1), _digest(row, "predictions_sha256"),
        _digest(row, "scores_sha256"), _digest(row, "log_sha256", optional=True),
        _text(row, "runner", NAME), _text(row, "device", optional=True),
        _text(row, "image_digest", optional=True), _number(row, "wall_s", 0, big, optional=True),
        _json_object(row, "run_record"), _number(row, "created_at", 0, 1e11),
    ]
    if not any(checks) and row["missing"] > row["n"]:
        checks.append("missing is more than n")
    return next((c for c in checks if c), "")


def system_problem(row: dict) -> str:
    """Why a system row cannot be admitted, or "" when every field is what it must be."""
    big = float(1 << 40)
    checks = [
        _digest(row, "key"), _text(row, "system", NAME), _text(row, "approach", NAME),
        _digest(row, "approach_digest"), _text(row, "split", NAME),
        _digest(row, "split_sha256"), _number(row, "train_size", 1, big, True, optional=True),
        _number(row, "seed", -big, big, integer=True), _json_object(row, "hyperparameters"),
        _digest(row, "weights_digest"), _text(row, "runner", NAME),
        _text(row, "device", optional=True), _number(row, "wall_s", 0, big, optional=True),
        _digest(row, "log_sha256", optional=True), _json_object(row, "run_record"),
        _number(row, "created_at", 0, 1e11),
    ]
    return next((c for c in checks if c), "")
