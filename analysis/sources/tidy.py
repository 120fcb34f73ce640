"""The tidy results table every analysis reads, and the loaders that build it.

One row per (model, testset, metric). ``value``, ``lo`` and ``hi`` are percentages; ``n``
is the number of questions. ``reference`` names, for a row on a new test set, the test set
whose row for the same model gives the x value of trend plots (empty on reference rows).
``source`` says where a number came from, so a plot never mixes provenance silently.

Intervals from totals only: EM is a count of exact matches, so ``k = round(value/100 * n)``
recovers it and Clopper-Pearson is exact. F1 is a mean of per-question scores whose spread a
total does not reveal, so F1 rows from published totals carry NaN intervals, never a guess.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path

import pandas as pd

from analysis.sources import csv_import, facts, paper, reconcile
from evaluator.stats.intervals import clopper_pearson

COLUMNS = ["model", "family", "kind", "testset", "metric", "value", "lo", "hi", "n",
           "source", "reference"]
METRICS = ("em", "f1")

# The SQuADShifts study's four sets, in its order (Miller et al. 2020, Table 1): how tables
# and figures list them. Sizes, labels and references come from the folders
# (analysis.sources.facts).
SHIFT_SETS = ("new-wiki", "nyt", "reddit", "amazon")

PUBLISHED_SOURCE = "SQuADShifts results.json (Miller et al. 2020)"
LEADERBOARD_SOURCE = "SQuAD v1.1 leaderboard export out-v1.1.json"
F1_NO_INTERVAL = ("F1 from published totals has no interval: the per-question spread "
                  "needed for one is not published")


def em_interval(value: float, n: float | None, level: float = 0.95) -> tuple[float, float]:
    """Clopper-Pearson interval (percent) for an EM total, counting k = round(value/100*n)."""
    if n is None or not n or (isinstance(n, float) and math.isnan(n)) or value is None:
        return (math.nan, math.nan)
    k = round(value / 100.0 * n)
    lo, hi = clopper_pearson(k, n, level)
    return (100.0 * lo, 100.0 * hi)


def _row(model: str, testset: str, metric: str, value: float, *, family=None, kind="model",
         lo=math.nan, hi=math.nan, n=None, source="", reference="", **extra) -> dict:
    return {"model": model, "family": family, "kind": kind, "testset": testset,
            "metric": metric, "value": float(value), "lo": lo, "hi": hi,
            "n": n, "source": source, "reference": reference, **extra}


def _total_rows(model: str, testset: str, em: float | None, f1: float | None, n, **kw) -> list:
    """EM with Clopper-Pearson from n, F1 with no interval: for totals without per-question data."""
    rows = []
    if em is not None:
        lo, hi = em_interval(em, n)
        rows.append(_row(model, testset, "em", em, lo=lo, hi=hi, n=n, **kw))
    if f1 is not None:
        rows.append(_row(model, testset, "f1", f1, n=n, **kw))
    return rows


def frame(rows: Iterable[Mapping]) -> pd.DataFrame:
    """Rows -> tidy DataFrame with the standard columns first and stable types."""
    df = pd.DataFrame(list(rows))
    if df.empty:
        return pd.DataFrame(columns=COLUMNS)
    for col in COLUMNS:
        if col not in df:
            df[col] = math.nan if col in ("lo", "hi", "n") else ""
    df["reference"] = df["reference"].fillna("").astype(str)
    df["n"] = pd.to_numeric(df["n"], errors="coerce").astype("Int64")
    for col in ("value", "lo", "hi"):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype(float)
    extra = [c for c in df.columns if c not in COLUMNS]
    return df[COLUMNS + extra].reset_index(drop=True)


# --------------------------------------------------------------------------- results store

def from_records(records: Iterable[Mapping],
                 references: Mapping[str, str] | None = None) -> pd.DataFrame:
    """Tidy frame from results-store records (see docs/analysis.md for the keys).

    A record's test set is compared against ``record["reference"]``, else
    ``references[testset]``, else :data:`DEFAULT_REFERENCES`. The x value for a model is its
    own run on that reference set when the records hold one (source ``run``), otherwise the
    ``reference_scores`` it was published with (source ``published: ...``).
    """
    records = list(records)
    refs = {**facts.references(), **(references or {})}
    names = {}
    for r in records:
        names.setdefault(r["name"], set()).add(r.get("bundle"))
    rows: list[dict] = []
    runs = {(_model_id(r, names), r["testset"]) for r in records}
    published: dict[str, dict] = {}
    for r in records:
        model = _model_id(r, names)
        meta = {k: v for k, v in (r.get("metadata") or {}).items() if k not in COLUMNS}
        base = {"family": r.get("family"), "kind": r.get("kind") or "model",
                "bundle": r.get("bundle"), **meta}
        ref = r.get("reference") or refs.get(r["testset"], "")
        rs = r.get("reference_scores") or {}
        if ref and (model, ref) not in runs and rs.get("testset"):
            ref = rs["testset"]
            published[model] = {"rs": rs, "base": base}
        for metric in METRICS:
            value = r.get(metric)
            if value is None:
                continue
            rows.append(_row(model, r["testset"], metric, value, lo=_num(r.get(f"{metric}_lo")),
                             hi=_num(r.get(f"{metric}_hi")), n=r.get("n"), source="run",
                             reference=ref, **base))
    for model, p in published.items():
        rs = p["rs"]
        n = rs.get("n") or facts.size(rs["testset"])
        rows += _total_rows(model, rs["testset"], rs.get("em"), rs.get("f1"), n,
                            source=f"published: {rs.get('source', 'reference_scores')}",
                            **p["base"])
    return frame(rows)


def _model_id(record: Mapping, names: dict) -> str:
    """The display name, made unique with the bundle id when two bundles share a name."""
    name = record["name"]
    return name if len(names[name]) == 1 else f"{name} [{record.get('bundle')}]"


def _num(v) -> float:
    return math.nan if v is None else float(v)


# ------------------------------------------------------------------- SQuADShifts published

def leaderboard_entries(path: Path) -> list[reconcile.Entry]:
    """Entries of the SQuAD leaderboard export, in file order."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    out = []
    for i, e in enumerate(data["leaderboard"]):
        sub, scores = e.get("submission") or {}, e.get("scores") or {}
        meta = (e.get("bundle") or {}).get("metadata") or {}
        out.append(reconcile.Entry(i, sub.get("description") or "", scores.get("exact_match"),
                                   scores.get("f1"), sub.get("created") or None,
                                   meta.get("name")))
    return out


def published_reconciliation(data_dir: Path) -> tuple[dict, list[reconcile.Outcome], str]:
    """Read results.json, join its models to the leaderboard; return (results, outcomes, report).

    Targets are the union of model names over the four sets (New-Wiki first, so the report's
    first section is about the 105 New-Wiki models); the New-Wiki F1 feeds the score check.
    """
    data_dir = Path(data_dir)
    results = json.loads((data_dir / "squadshifts" / "results.json").read_text("utf-8"))
    entries = leaderboard_entries(data_dir / "squad-leaderboard" / "out-v1.1.json")
    seen: dict[str, reconcile.Target] = {}
    for testset in ("new-wiki", *[t for t in results if t != "new-wiki"]):
        for m in results[testset]["models"]:
            if m["name"] not in seen:
                nw = m.get("new-wiki_f1")
                seen[m["name"]] = reconcile.Target(m["name"], m.get("institution") or None,
                                                   float(nw) if nw else None)
    targets = list(seen.values())
    outcomes = reconcile.reconcile(targets, entries)
    nw_names = {m["name"] for m in results["new-wiki"]["models"]}
    nw = [o for o in outcomes if o.target.name in nw_names]
    rest = [o for o in outcomes if o.target.name not in nw_names]
    report = reconcile.coverage_report(nw, "New-Wiki models (SQuADShifts results.json)")
    if rest:
        report += "\n" + reconcile.coverage_report(rest, "Models only on NYT/Reddit/Amazon")
    return results, outcomes, report


def from_squadshifts_published(data_dir: Path | str) -> pd.DataFrame:
    """Tidy frame of the published SQuADShifts numbers plus original-test scores.

    A model's x value (testset ``squad-test``) is its SQuAD v1.1 test score as the paper's
    Appendix E prints it (Table 5 for F1, Table 11 for EM; ``analysis.sources.paper``); a
    model the tables do not name falls back to the leaderboard entry the reconciliation
    matched, and one matched nowhere keeps its new-set rows without an x. Humans take their
    own original scores from the same tables. The AddOneSent EM of Table 16 joins as test set
    ``addonesent``. ``df.attrs["coverage"]`` reports every join and every disagreement
    between the paper and the leaderboard.
    """
    results, outcomes, report = published_reconciliation(Path(data_dir))
    found = paper.originals(results)
    rows: list[dict] = []
    for testset, block in results.items():
        for kind in ("models", "humans"):
            for m in block[kind]:
                extra = {"institution": m.get("institution") or "",
                         "paper_link": m.get("paper_link") or ""}
                rows += _total_rows(
                    m["name"], testset, _float(m.get(f"{testset}_em")),
                    _float(m.get(f"{testset}_f1")), facts.size(testset),
                    kind=kind[:-1], source=PUBLISHED_SOURCE, reference="squad-test", **extra)
    institutions = {m["name"]: m.get("institution") or "" for b in results.values()
                    for m in b["models"]}
    for name, em in paper.addonesent(results, found):
        rows.append(_row(name, "addonesent", "em", em, n=facts.size("addonesent"),
                         source=paper.TABLES[2].label, reference="squad-test",
                         institution=institutions.get(name, "")))
    matched = {o.target.name: o.entry for o in outcomes
               if o.status == "matched" and o.entry.scored}
    methods = {o.target.name: o.method for o in outcomes}
    n_test = facts.SQUAD_TEST["questions"]
    disagreements = []
    for name in sorted(institutions):
        own = found.scores.get(("model", name), {})
        entry = matched.get(name)
        for metric in METRICS:
            board = None if entry is None else (entry.em if metric == "em" else entry.f1)
            if metric in own:
                rows.append(_row(name, "squad-test", metric, own[metric], n=n_test,
                                 source=found.sources[metric],
                                 institution=institutions[name]))
                if board is not None and abs(round(board, 1) - own[metric]) > paper.ROUNDING:
                    disagreements.append(f"  {name!r} {metric}: paper {own[metric]:g}, "
                                         f"leaderboard #{entry.index} {board:g}")
            elif board is not None:
                lo, hi = em_interval(board, n_test) if metric == "em" else (math.nan, math.nan)
                rows.append(_row(name, "squad-test", metric, board, lo=lo, hi=hi, n=n_test,
                                 source=f"{LEADERBOARD_SOURCE} #{entry.index} "
                                        f"({methods[name]})",
                                 institution=institutions[name]))
    for (kind, name), own in sorted(found.scores.items()):
        if kind == "human":
            rows += [_row(name, "squad-test", metric, v, kind="human", n=n_test,
                          source=found.sources[metric], institution="")
                     for metric, v in sorted(own.items())]
    df = frame(rows)
    fallback = sorted({r["model"] for r in rows if r["testset"] == "squad-test"
                       and r["source"].startswith(LEADERBOARD_SOURCE)})
    df.attrs["coverage"] = "\n\n".join([
        report, found.report(),
        f"Original-test scores from the leaderboard where the paper's tables name no score: "
        f"{len(fallback)} models" + "".join(f"\n  {n!r}" for n in fallback),
        f"Paper vs leaderboard, where both give a score and they differ after rounding: "
        f"{len(disagreements)}" + "".join(f"\n{d}" for d in disagreements)])
    return df


def _float(v) -> float | None:
    return None if v in (None, "") else float(v)


# ------------------------------------------------------------------------------ CSV import

def from_csv(path: Path | str, reference: str = facts.SQUAD_TEST["id"],
             metrics: Iterable[str] = ()) -> pd.DataFrame:
    """Tidy frame from a published table in long or wide CSV form
    (``analysis.sources.csv_import``, which refuses a bad table in one line).

    Optional long-form columns: lo, hi, n, kind (model|human, default model), family, source,
    reference, and any metadata column (e.g. extra_data, institution). Without a
    ``reference`` column, every test set other than ``reference`` is compared against it.
    EM rows with n but no lo/hi get Clopper-Pearson; F1 rows without lo/hi stay NaN.
    """
    rows = []
    for r in csv_import.read(path, reference, metrics):
        r = {k: v for k, v in r.items() if not k.startswith("_")}
        if not r.get("reference"):
            r["reference"] = "" if r["testset"] == reference else reference
        r["kind"] = r.get("kind") or "model"
        r["source"] = r.get("source") or str(path)
        for col in ("lo", "hi", "n"):
            if r.get(col) in (None, ""):
                r[col] = math.nan
        if "extra_data" in r:
            r["extra_data"] = _truthy(r["extra_data"])
        rows.append(r)
    df = frame(rows)
    need = (df["metric"] == "em") & df["lo"].isna() & df["n"].notna()
    for i in df.index[need]:
        df.loc[i, ["lo", "hi"]] = em_interval(df.at[i, "value"], int(df.at[i, "n"]))
    return df


def _truthy(v) -> bool | None:
    if v is None or (isinstance(v, float) and math.isnan(v)) or str(v).strip() == "":
        return None
    return str(v).strip().lower() in ("1", "true", "yes", "y")


# --------------------------------------------------------------------------------- helpers

def select_models(df: pd.DataFrame, exclude: Mapping[str, object] | None = None) -> pd.DataFrame:
    """Drop models whose metadata column equals a value, e.g. ``{"extra_data": True}``."""
    out = df
    for col, val in (exclude or {}).items():
        if col in out:
            drop = set(out.loc[out[col] == val, "model"])
            out = out[~out["model"].isin(drop)]
    return out


NO_PAIRS = ("no test set in these results has scores for models that also have a reference "
            "(original) score; evaluate the same bundles on a shifted set and on its "
            "reference set")  # why a frame without new_testsets gives no figure and no fit


def new_testsets(df: pd.DataFrame) -> list[str]:
    """Test sets that are compared against a reference, in a stable, familiar order."""
    sets = set(df.loc[df["reference"] != "", "testset"])
    known = [t for t in SHIFT_SETS if t in sets]
    return known + sorted(sets - set(known))


def paired(df: pd.DataFrame, testset: str, metric: str) -> pd.DataFrame:
    """One row per model: x (reference score), y (score on testset), intervals, provenance."""
    new = df[(df["testset"] == testset) & (df["metric"] == metric) & (df["reference"] != "")]
    keep = [c for c in new.columns if c not in ("testset", "metric", "value", "lo", "hi", "n",
                                                 "source", "reference")]
    cols = keep + ["x", "x_lo", "x_hi", "x_source", "x_testset", "y", "y_lo", "y_hi", "y_source"]
    ref = (df.loc[df["metric"] == metric, ["model", "testset", "value", "lo", "hi", "source"]]
           .drop_duplicates(["model", "testset"])
           .rename(columns={"testset": "x_testset", "value": "x", "lo": "x_lo", "hi": "x_hi",
                            "source": "x_source"}))
    ys = new.rename(columns={"reference": "x_testset", "value": "y", "lo": "y_lo",
                             "hi": "y_hi", "source": "y_source"})
    out = ys[keep + ["x_testset", "y", "y_lo", "y_hi", "y_source"]].merge(
        ref, on=["model", "x_testset"], how="inner")  # keeps the new rows' order
    return out[cols].reset_index(drop=True)
