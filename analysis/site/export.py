"""The site's data files: every table as CSV for people (text a spreadsheet would run as a
formula kept as text) and as JSON whose values are exact, and the logs its pages link to."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from analysis.sources.records import RunInfo
from evaluator.core.files import READABLE, safe_cell, write_atomic


def tidy_for_export(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values(["testset", "metric", "model"]).reset_index(drop=True)


def write_table(stem: Path, table: pd.DataFrame) -> None:
    """A table as CSV, for people (text a spreadsheet would run as a formula is written as
    text: `safe_cell`), and as JSON, whose values are exact."""
    text = table.copy()
    for column in text.columns:
        if pd.api.types.is_object_dtype(text[column]) or \
                pd.api.types.is_string_dtype(text[column]):
            text[column] = text[column].map(safe_cell)
    write_atomic(stem.with_suffix(".csv"), text.to_csv(index=False).encode("utf-8"), READABLE)
    write_json(stem.with_suffix(".json"), table)


def write_json(path: Path, table: pd.DataFrame) -> None:
    rows = [{k: plain(v) for k, v in r.items()} for r in table.to_dict("records")]
    write_atomic(path, (json.dumps(rows, indent=1, ensure_ascii=False, allow_nan=False)
                        + "\n").encode("utf-8"), READABLE)


def records(table: pd.DataFrame) -> list[dict]:
    return [{k: plain(v) for k, v in r.items()} for r in table.to_dict("records")]


def plain(v):
    """JSON-safe scalar: NaN/NA -> None, numpy numbers -> Python numbers."""
    if v is None or v is pd.NA:
        return None
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


def num(v) -> float | None:
    if v is None or v is pd.NA:
        return None
    v = float(v)
    return None if math.isnan(v) else v


def utc(ts) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(float(ts), tz=UTC).strftime("%Y-%m-%d %H:%M UTC")


def write_logs(folder: Path, runs: RunInfo) -> None:
    """Every log a page links to, as logs/<sha256>.txt (content-addressed, so stable)."""
    shas = sorted({r.get("log_sha256") for r in (*runs.runs, *runs.failures)} - {None, ""})
    for sha in shas:
        data = runs.read_log(sha)
        if data is not None:
            write_atomic(folder / f"{sha}.txt", data, READABLE)
