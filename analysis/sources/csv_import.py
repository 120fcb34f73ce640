"""The CSV importer: a published table, long or wide, checked cell by cell before anything is
plotted. A bad table is refused with one line naming the file, the line and the column;
nothing is written. The column format is in docs/analysis.md ("CSV importer").

Long form: one row per (model, testset, metric) with columns model, testset, metric, value.
Wide form (no `testset` column): one row per model, one score column per
`<testset>_<metric>`, e.g. `squad-test_f1`, `reddit_em`. In both, the reference test set
(`--reference`, default `squad-test`) gives every model's original score, the x of trends.
"""

from __future__ import annotations

import csv
import difflib
import math
import re
from collections.abc import Iterable
from pathlib import Path

from analysis.sources import facts
from evaluator.core.errors import UserError

METRICS = ("em", "f1")
LONG_REQUIRED = ("model", "testset", "metric", "value")
OPTIONAL = ("lo", "hi", "n", "kind", "family", "source", "reference")
NUMERIC = ("value", "lo", "hi", "n")
KINDS = ("model", "human")
_WIDE_SCORE = re.compile(r"^(?P<testset>.+)_(?P<metric>em|f1)$", re.I)


class TableError(UserError):
    """A published table that cannot be read as scores; the message names file, line, column."""


def known_testsets() -> list[str]:
    """Test-set ids a table may name: every test-set folder, plus the SQuAD v1.1 hidden test."""
    return sorted(facts.known())


def read(path: Path | str, reference: str = facts.SQUAD_TEST["id"],
         metrics: Iterable[str] = ()) -> list[dict]:
    """Rows in long form (model, testset, metric, value, ...) from a long or wide CSV table,
    or a TableError. `metrics` are the metrics a caller will plot: each must have data."""
    path = Path(path)
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            header, *body = list(csv.reader(fh))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise TableError(f"{path}: cannot read the table ({exc})") from None
    header = [h.strip() for h in header]
    if "model" not in header:
        raise TableError(f"{path}: line 1: no 'model' column (long form needs "
                         f"{', '.join(LONG_REQUIRED)}; wide form needs model and "
                         f"<testset>_<em|f1> columns)")
    records = [dict(zip(header, (c.strip() for c in cells)), _line=i)
               for i, cells in enumerate(body, start=2) if any(c.strip() for c in cells)]
    rows = (_long(path, header, records) if "testset" in header
            else _wide(path, header, records))
    _check(path, rows, reference, [m.lower() for m in metrics])
    return rows


def _long(path: Path, header: list[str], records: list[dict]) -> list[dict]:
    missing = [c for c in LONG_REQUIRED if c not in header]
    if missing:
        raise TableError(f"{path}: line 1: missing column(s) {', '.join(missing)} "
                         f"(long form needs {', '.join(LONG_REQUIRED)})")
    rows = []
    for r in records:
        metric = r["metric"].lower()
        if metric not in METRICS:
            raise TableError(f"{path}: line {r['_line']}, column metric: {r['metric']!r} is "
                             f"not em or f1")
        rows.append({**r, "metric": metric, "_column": "value"})
    return rows


def _wide(path: Path, header: list[str], records: list[dict]) -> list[dict]:
    scores = {c: _WIDE_SCORE.match(c) for c in header if _WIDE_SCORE.match(c)}
    if not scores:
        raise TableError(f"{path}: line 1: no score column; name them <testset>_<em|f1>, "
                         f"e.g. squad-test_f1, reddit_em (or give the long form's "
                         f"{', '.join(LONG_REQUIRED)})")
    meta = [c for c in header if c not in scores]
    rows = []
    for r in records:
        for column, m in scores.items():
            if r.get(column, "") == "":
                continue  # a model not evaluated on that set
            rows.append({**{c: r.get(c, "") for c in meta}, "testset": m["testset"],
                         "metric": m["metric"].lower(), "value": r[column], "_line": r["_line"],
                         "_column": column})
    return rows


def _check(path: Path, rows: list[dict], reference: str, metrics: list[str]) -> None:
    known = known_testsets()
    seen: dict[tuple, int] = {}
    for r in rows:
        where = f"{path}: line {r['_line']}"
        for col in NUMERIC:
            text = r.get(col, "")
            if text == "":
                continue
            try:
                value = float(text)
            except ValueError:
                value = math.nan
            if not math.isfinite(value):
                column = r["_column"] if col == "value" else col
                raise TableError(f"{where}, column {column}: {text!r} is not a number")
            r[col] = value
        if not r.get("model"):
            raise TableError(f"{where}, column model: empty model name")
        column = r["_column"]
        for col in ("value", "lo", "hi"):
            v = r.get(col)
            if isinstance(v, float) and not 0 <= v <= 100:
                name = column if col == "value" else col
                raise TableError(f"{where}, column {name}: {v:g} is outside [0, 100] (scores "
                                 f"are percentages)")
        if r["testset"] not in known:
            close = difflib.get_close_matches(r["testset"], known, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else " (add its folder first)"
            col = "testset" if column == "value" else column
            raise TableError(f"{where}, column {col}: unknown test set {r['testset']!r}{hint}")
        kind = r.get("kind") or "model"
        if kind not in KINDS:
            raise TableError(f"{where}, column kind: {kind!r} is not model or human")
        key = (r["model"], r["testset"], r["metric"])
        if key in seen:
            raise TableError(f"{where}, column model: duplicate row for {r['model']!r} on "
                             f"{r['testset']} {r['metric']} (first on line {seen[key]})")
        seen[key] = r["_line"]
    _check_fractions(path, rows)
    _check_reference(path, rows, reference)
    present = {r["metric"] for r in rows}
    for m in metrics:
        if m not in present:
            raise TableError(f"{path}: line 1: {m.upper()} figures requested, but the table "
                             f"has no {m} scores (it has {', '.join(sorted(present)) or 'none'})")


def _check_fractions(path: Path, rows: list[dict]) -> None:
    """Scores of a whole (testset, metric) all within [0, 1]: fractions, not percentages.
    Rows that name the `scorer_version` that scored them were written by this tool, in
    percent by contract: a set that every system nearly fails (an ablation that masks the
    question) is no mistake there."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        if not r.get("scorer_version"):
            groups.setdefault((r["testset"], r["metric"]), []).append(r)
    for (testset, metric), group in groups.items():
        values = [r["value"] for r in group]
        if len(values) >= 2 and max(values) <= 1.0 and max(values) > 0:
            first = group[0]
            col = first["_column"] if first["_column"] != "value" else "value"
            raise TableError(f"{path}: line {first['_line']}, column {col}: every {testset} "
                             f"{metric} score is in [0, 1]: these look like fractions; give "
                             f"percentages (multiply by 100)")


def _check_reference(path: Path, rows: list[dict], reference: str) -> None:
    has_reference_column = any(r.get("reference") for r in rows)
    if has_reference_column:
        named = {r["reference"] for r in rows if r.get("reference")}
        missing = sorted(named - {r["testset"] for r in rows})
        if missing and len(missing) == len(named):  # not one row has its reference here
            first = next(r for r in rows if r.get("reference") == missing[0])
            raise TableError(f"{path}: line {first['_line']}, column reference: no row for "
                             f"the reference test set {missing[0]!r}")
        return
    if not any(r["testset"] == reference for r in rows):
        raise TableError(f"{path}: line 1: no {reference} scores, the reference (original-set) "
                         f"{'rows' if rows and rows[0]['_column'] == 'value' else 'column'}; "
                         f"add them or name another reference with --reference")
