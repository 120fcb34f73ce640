"""The SQuADShifts paper's own numbers (Miller et al. 2020), read from `analysis/data/`.

Its Appendix E tables give every model's and every human's SQuAD v1.1 *test* score, which
the leaderboard export cannot give for every model; its figure captions and text give the
fits and average drops that a reproduction is compared against. The tables print names cut
to 30 characters without LaTeX braces, so joining them to `results.json` is a decision per
row, and every decision is reported: a name printed once whose score agrees is taken; a
printed name shared by several models is settled by the score the table prints beside it;
anything else stays unmatched, with the reason.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

DATA = Path(__file__).parents[1] / "data" / "squadshifts-paper"
CITATION = "Miller et al. 2020"
NAME_WIDTH = 30
# A printed score has one decimal: a value agrees with it when it rounds to it.
ROUNDING = 0.05 + 1e-9


@dataclass(frozen=True)
class Table:
    """One appendix table: its number, file, and the test set and metric of its `new` column."""

    number: int
    file: str
    testset: str
    metric: str

    @property
    def label(self) -> str:
        return f"{CITATION}, Table {self.number}"


TABLES = (Table(5, "table5-new-wiki-f1.csv", "new-wiki", "f1"),
          Table(11, "table11-reddit-em.csv", "reddit", "em"),
          Table(16, "table16-addonesent-em.csv", "addonesent", "em"))
ORIGINAL = {"f1": TABLES[0], "em": TABLES[1]}  # where each metric's original scores come from


def table(number: int) -> Table:
    return next(t for t in TABLES if t.number == number)


def read(t: Table) -> pd.DataFrame:
    """The table as printed: rank, name, squad, new, lo, hi, gap, new_rank, delta_rank."""
    df = pd.read_csv(DATA / t.file, dtype={"rank": str, "new_rank": str, "delta_rank": str})
    df["name"] = df["name"].map(_clean)
    return df


def published_fits() -> pd.DataFrame:
    """figure, testset, metric, scale, slope, r2: the values the captions print."""
    return pd.read_csv(DATA / "published-fits.csv")


def published_drops() -> pd.DataFrame:
    """where, kind, testset, metric, drop: the average drops the text states."""
    return pd.read_csv(DATA / "published-drops.csv")


def _clean(name: str) -> str:
    return re.sub(r"\s+", " ", str(name)).strip()


def printed(name: str) -> str:
    """How the tables print a results.json name: no braces, cut to 30 characters."""
    return _clean(_clean(name.replace("{", "").replace("}", ""))[:NAME_WIDTH])


def _is_human(printed_name: str) -> bool:
    return re.fullmatch(r"Human-\d+", printed_name) is not None


@dataclass(frozen=True)
class Join:
    """What became of one table row."""

    table: int
    row: str  # the name as printed
    kind: str  # model | human
    name: str | None  # the results.json name, None when unmatched
    method: str  # printed name | printed name + score | human by score | unmatched | ambiguous
    detail: str = ""

    @property
    def matched(self) -> bool:
        return self.name is not None


def join(t: Table, rows: pd.DataFrame, models: Mapping[str, float | None],
         humans: Mapping[str, float | None], column: str = "new") -> list[Join]:
    """Join each printed row to a results.json name.

    `models` and `humans` map results.json names to the score that the row's `column` should
    show (rounded to one decimal); None where that score is unknown. Humans are printed as
    Human-0..2, so they join by score alone.
    """
    joins, shown = [], {n: printed(n) for n in models}
    for r in rows.to_dict("records"):
        row, value = r["name"], float(r[column])
        if _is_human(row):
            joins.append(_settle(t, row, "human", list(humans), humans, value, "human by score"))
            continue
        candidates = [n for n, p in shown.items() if p == row]
        joins.append(_settle(t, row, "model", candidates, models, value, "printed name"))
    return _refuse_double_claims(joins)


def _settle(t: Table, row: str, kind: str, candidates: list[str],
            scores: Mapping[str, float | None], value: float, method: str) -> Join:
    if not candidates:
        return Join(t.number, row, kind, None, "unmatched", "no results.json name prints so")
    agree = [n for n in candidates if scores[n] is not None and abs(scores[n] - value) <= ROUNDING]
    if len(candidates) == 1 and method == "printed name":
        name, score = candidates[0], scores[candidates[0]]
        if score is None or agree:
            return Join(t.number, row, kind, name, method)
        return Join(t.number, row, kind, None, "unmatched",
                    f"only {name!r} prints so, but its score {score:g} is not the table's "
                    f"{value:g}")
    if len(agree) == 1:
        how = method if kind == "human" else f"{method} + score"
        return Join(t.number, row, kind, agree[0], how,
                    f"{len(candidates)} candidates; only {agree[0]!r} scores {value:g}")
    return Join(t.number, row, kind, None, "ambiguous",
                f"{len(candidates)} candidates, {len(agree)} with the table's score {value:g}")


def _refuse_double_claims(joins: list[Join]) -> list[Join]:
    """Two rows of one table never take the same model: both become ambiguous."""
    taken: dict[str, int] = {}
    for j in joins:
        if j.name is not None:
            taken[j.name] = taken.get(j.name, 0) + 1
    return [Join(j.table, j.row, j.kind, None, "ambiguous",
                 f"{j.name!r} is claimed by {taken[j.name]} rows of the table")
            if j.name is not None and taken[j.name] > 1 else j for j in joins]


def _float(v) -> float | None:
    return None if v in (None, "") else float(v)


@dataclass
class Originals:
    """Original-test scores from the tables, keyed by (kind, results.json name) and metric."""

    scores: dict[tuple[str, str], dict[str, float]]
    sources: dict[str, str]  # metric -> table label
    joins: list[Join]

    def report(self) -> str:
        lines = []
        for number in sorted({j.table for j in self.joins}):
            js = [j for j in self.joins if j.table == number]
            counts: dict[str, int] = {}
            for j in js:
                counts[j.method] = counts.get(j.method, 0) + 1
            summary = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
            lines.append(f"{CITATION} Table {number}: {len(js)} rows joined to results.json "
                         f"({summary})")
            lines += [f"  {j.method:<22} {j.row!r} -> {j.name!r}  {j.detail}".rstrip()
                      for j in js if j.method != "printed name"]
        return "\n".join(lines)


def originals(results: Mapping) -> Originals:
    """Join Tables 5 and 11 (and 16) to results.json; each joined row gives an original score.

    Table 16 has no results.json column to check against, so its rows are settled by their
    original-test EM against Table 11's.
    """
    scores: dict[tuple[str, str], dict[str, float]] = {}
    joins: list[Join] = []
    for metric, t in ORIGINAL.items():
        block = results[t.testset]
        models = {m["name"]: _float(m.get(f"{t.testset}_{metric}")) for m in block["models"]}
        humans = {h["name"]: _float(h.get(f"{t.testset}_{metric}")) for h in block["humans"]}
        rows = read(t)
        found = join(t, rows, models, humans)
        joins += found
        for j, squad in zip(found, rows["squad"]):
            if j.matched:
                scores.setdefault((j.kind, j.name), {})[metric] = float(squad)
    all_models = {m["name"] for b in results.values() for m in b["models"]}
    em = {n: scores.get(("model", n), {}).get("em") for n in sorted(all_models)}
    joins += join(TABLES[2], read(TABLES[2]), em, {}, column="squad")
    return Originals(scores, {m: t.label for m, t in ORIGINAL.items()}, joins)


def addonesent(results: Mapping, found: Originals) -> list[tuple[str, float]]:
    """(results.json name, AddOneSent EM) for every joined Table 16 row."""
    rows = read(TABLES[2])
    js = [j for j in found.joins if j.table == TABLES[2].number]
    return [(j.name, float(v)) for j, v in zip(js, rows["new"]) if j.matched]
