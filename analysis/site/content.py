"""What the site's pages say, computed from the tidy frame (and the store's run records):
the leaderboards, the test sets' order, groups and summaries, each model's name, page slug,
scores and place against the trend of the others, how each cell ran and failed."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from analysis.site import export, plot
from analysis.sources import facts
from analysis.sources.records import RunInfo
from analysis.sources.tidy import METRICS, new_testsets, paired
from analysis.stats import gaps as gaps_mod
from analysis.studies import trend
from evaluator.core import provenance
from evaluator.core.hashing import file_sha256
from evaluator.store.queries import is_recorded

RUN_COLUMNS = ["model", "bundle", "testset", "runner", "device", "image_digest", "bundle_digest",
               "testset_sha256", "scorer_version", "n", "missing", "wall_s", "finished",
               "log_sha256", "key", "recorded_from"]
FAILURE_COLUMNS = ["model", "bundle", "testset", "failure_class", "message", "runner", "when",
                   "log_sha256"]


def leaderboard(df: pd.DataFrame, testset: str, metric: str) -> list[dict]:
    """Rows of one leaderboard, best first (ties by name): models and humans.

    ``rank`` is among the models with a score on this set (humans are marked, never ranked).
    ``original`` is the model's score on the set this one is compared against, ``gap`` =
    original - new, and ``rank_change`` = rank on the original set - rank on this set among
    the models that have both scores (positive: the model moved up).
    """
    rows = df[(df["testset"] == testset) & (df["metric"] == metric)]
    if rows.empty:
        return []
    pairs = paired(df, testset, metric).drop_duplicates("model").set_index("model")
    changes = (gaps_mod.rank_changes(df, testset, metric).set_index("model")
               if len(pairs) else pd.DataFrame())
    models = rows[rows["kind"] == "model"]
    rank = models["value"].rank(ascending=False, method="min")
    out = []
    for i, r in rows.iterrows():
        model = r["model"]
        x = export.num(pairs.at[model, "x"]) if model in pairs.index else None
        ch = changes.loc[model] if model in changes.index else None
        out.append({
            "rank": int(rank[i]) if i in rank.index else None, "model": model,
            "kind": r["kind"], "value": export.num(r["value"]), "lo": export.num(r["lo"]),
            "hi": export.num(r["hi"]), "n": None if pd.isna(r["n"]) else int(r["n"]),
            "original": x,
            "original_testset": r["reference"] or None,
            "gap": None if x is None else x - float(r["value"]),
            "rank_original": None if ch is None else int(ch["rank_original"]),
            "rank_new": None if ch is None else int(ch["rank_new"]),
            "rank_change": None if ch is None else -int(ch["delta"]),
            "source": r["source"]})
    out.sort(key=lambda d: (-(d["value"] if d["value"] is not None else -math.inf),
                            d["model"]))
    return out


def testset_order(df: pd.DataFrame) -> list[str]:
    """Reference sets first (the original ones first, generated ones last), then the new
    sets in the familiar SQuADShifts order."""
    new = new_testsets(df)
    rank = {kind: i for i, kind in enumerate(facts.KINDS)}
    refs = sorted(set(df["testset"]) - set(new),
                  key=lambda t: (rank.get(facts.kind(t), len(rank)), t))
    return refs + new


def reference_of(df: pd.DataFrame, testset: str) -> str | None:
    refs = sorted(set(df.loc[(df["testset"] == testset) & (df["reference"] != ""),
                             "reference"]))
    return ", ".join(refs) or None


def testset_groups(testsets: list[str]) -> list[tuple[str, list[str]]]:
    """The test sets by kind, in the order of facts.KINDS (the navigation's groups)."""
    order = [*facts.KINDS, "other"]
    by_kind: dict[str, list[str]] = {}
    for t in testsets:
        by_kind.setdefault(facts.kind(t), []).append(t)
    return [(facts.KINDS.get(k, k.capitalize()), by_kind[k])
            for k in sorted(by_kind, key=lambda k: (order.index(k) if k in order else 99, k))]


def provenance_of(results: Path) -> dict:
    """What every page says it was made with: the tool's version and commit, and the
    sha256 of the results table it shows (data/results.csv)."""
    software = provenance.software()
    return {"version": software["qashift"], "commit": (software["commit"] or "unknown")[:12],
            "results_sha256": file_sha256(results)}


def system_names(df: pd.DataFrame) -> dict[str, str]:
    """A readable name for each trained system: approach, training size, seed and the
    settings that vary among its approach's systems in this table (`fusionnet · 2,500 q ·
    seed 1 · epochs 4, no features`); models without an approach keep their names."""
    if "approach" not in df:
        return {}
    rows = df.drop_duplicates("model")
    rows = rows[rows["approach"].fillna("").astype(str) != ""]
    given = rows["hyperparameters"] if "hyperparameters" in rows else [""] * len(rows)
    settings = {m: json.loads(h) if isinstance(h, str) and h else {}
                for m, h in zip(rows["model"], given, strict=True)}
    varying: dict[str, set[str]] = {}
    for approach, group in rows.groupby("approach"):
        keys = {k for m in group["model"] for k in settings[m]}
        varying[approach] = {k for k in keys
                             if len({json.dumps(settings[m].get(k)) for m in group["model"]}) > 1}
    out = {}
    for r in rows.to_dict("records"):
        size = r.get("train_size")
        size = f"{int(float(size)):,} q" if size not in (None, "") and not (
            isinstance(size, float) and math.isnan(size)) else "full split"
        parts = [str(r["approach"]), size]
        if str(r.get("seed", "")) not in ("", "nan"):
            parts.append(f"seed {int(float(r['seed']))}")
        chosen = [_setting(k, settings[r["model"]].get(k))
                  for k in sorted(varying[r["approach"]]) if k in settings[r["model"]]]
        if chosen:
            parts.append(", ".join(chosen))
        out[r["model"]] = " · ".join(parts)
    return out


def _setting(key: str, value) -> str:
    if value is True:
        return key
    if value is False:
        return f"no {key}"
    return f"{key} {value}"


def models_of(df: pd.DataFrame, runs: RunInfo | None) -> dict[str, dict]:
    """Every model (and human) with a stable, unique page slug and a display name, in name
    order."""
    info: dict[str, dict] = {}
    names = system_names(df)
    meta_cols = [c for c in ("family", "approach", "institution", "paper_link", "bundle")
                 if c in df]
    for r in df.sort_values(["model", "testset", "metric"]).to_dict("records"):
        entry = info.setdefault(r["model"], {"kind": r["kind"], "meta": {}})
        for c in meta_cols:
            v = r.get(c)
            if v not in (None, "") and not (isinstance(v, float) and math.isnan(v)):
                entry["meta"].setdefault(c, str(v))
    if runs is not None:
        for bundle in sorted({f["bundle"] for f in runs.failures}):
            if any(e["meta"].get("bundle") == bundle for e in info.values()):
                continue
            name = runs.names.get(bundle, bundle)
            name = name if name not in info else f"{name} [{bundle}]"
            info[name] = {"kind": "model", "meta": {"bundle": bundle}}
    used: set[str] = set()
    for name in sorted(info):
        base = re.sub(r"[^a-z0-9]+", "-", name.lower())[:60].strip("-") or "model"
        slug, k = base, 1
        while slug in used:
            k += 1
            slug = f"{base}-{k}"
        used.add(slug)
        info[name]["slug"] = slug
        info[name]["display"] = names.get(name, name)
    return dict(sorted(info.items()))


def _bundle_to_model(models: Mapping[str, dict]) -> dict[str, str]:
    return {info["meta"]["bundle"]: name for name, info in models.items()
            if info["meta"].get("bundle")}


def run_rows(runs: RunInfo, models: Mapping[str, dict]) -> list[dict]:
    """How each stored cell ran: the environment a reader needs to trust or repeat it."""
    names = _bundle_to_model(models)
    rows = []
    for r in sorted(runs.runs, key=lambda r: (r["bundle"], r["testset"], r.get("key", ""))):
        recorded = is_recorded(r)  # a committed table's cell: when it ran is not known here
        rows.append({"model": names.get(r["bundle"], r["bundle"]), "bundle": r["bundle"],
                     "testset": r["testset"], "runner": r.get("runner"),
                     "device": r.get("device"), "image_digest": r.get("image_digest"),
                     "bundle_digest": r.get("bundle_digest"),
                     "testset_sha256": r.get("testset_sha256"),
                     "scorer_version": r.get("scorer_version"), "n": r.get("n"),
                     "missing": None if recorded else r.get("missing"),
                     "wall_s": export.num(r.get("wall_s")),
                     "finished": None if recorded else export.utc(r.get("created_at")),
                     "log_sha256": r.get("log_sha256"), "key": r.get("key"),
                     "recorded_from": r["source"] if recorded else None})
    return rows


def failure_rows(runs: RunInfo, models: Mapping[str, dict]) -> list[dict]:
    names = _bundle_to_model(models)
    rows = []
    for f in sorted(runs.failures, key=lambda f: (f["bundle"], f["testset"],
                                                  f.get("created_at") or 0, f.get("id") or 0)):
        rows.append({"model": names.get(f["bundle"], f["bundle"]), "bundle": f["bundle"],
                     "testset": f["testset"], "failure_class": f["failure_class"],
                     "message": f["message"], "runner": f.get("runner"),
                     "when": export.utc(f.get("created_at")), "log_sha256": f.get("log_sha256")})
    return rows


def model_scores(df: pd.DataFrame, model: str, testsets: list[str],
                  boards: Mapping[tuple[str, str], list[dict]]) -> list[dict]:
    """One row per test set the model was scored on: both metrics, rank and gap."""
    out = []
    for t in testsets:
        row = {"testset": t}
        for m in METRICS:
            hit = next((r for r in boards[(t, m)] if r["model"] == model), None)
            row[m] = hit
        if row["em"] or row["f1"]:
            out.append(row)
    return out


def placements(df: pd.DataFrame, testsets: list[str], labels: Mapping[str, str]
                ) -> dict[str, list[dict]]:
    """Per model, where it lands on each new set against the linear F1 trend of the other
    models there (`studies.trend.each_against_the_others`), with the plot its page shows."""
    out: dict[str, list[dict]] = {}
    new = set(new_testsets(df))
    for t in (t for t in testsets if t in new):
        pairs = paired(df, t, "f1")
        placed = trend.each_against_the_others(pairs)
        if placed.empty:
            continue
        points = {p["model"]: p for p in pairs.to_dict("records")}
        models = [(p["model"], float(p["x"]), float(p["y"])) for p in points.values()
                  if p["kind"] == "model"]
        for r in placed.to_dict("records"):
            own = points[r["model"]]
            others = [(x, y) for m, x, y in models if m != r["model"]]
            reference = labels.get(own["x_testset"], own["x_testset"])
            title = (f"F1 on {labels.get(t, t)} against F1 on {reference}: this model and "
                     f"the trend of the {r['n_population']} others")
            out.setdefault(r["model"], []).append({
                **r, "testset": t, "reference": own["x_testset"],
                "svg": plot.trend_svg(others, own, r["intercept"], r["slope"],
                                      f"F1 on {reference}", f"F1 on {labels.get(t, t)}",
                                      title)})
    return out


def model_index(df: pd.DataFrame, models: Mapping[str, dict], testsets: list[str]) -> list:
    wide = (df[df["metric"] == "f1"].drop_duplicates(["model", "testset"])
            .pivot(index="model", columns="testset", values="value"))
    rows = []
    for name, info in models.items():
        vals = [(export.num(wide.at[name, t]) if name in wide.index and t in wide.columns else None)
                for t in testsets]
        rows.append({"model": name, "info": info, "values": vals})
    return rows


def testset_summary(df: pd.DataFrame, t: str, boards, fits_table: pd.DataFrame) -> dict:
    f1 = boards[(t, "f1")] or boards[(t, "em")]
    models = [r for r in f1 if r["kind"] == "model"]
    below = [r for r in models if r["original"] is not None and r["value"] < r["original"]]
    with_x = [r for r in models if r["original"] is not None]
    slope = None
    if len(fits_table):
        hit = fits_table[(fits_table["testset"] == t) & (fits_table["metric"] == "f1")
                         & (fits_table["scale"] == "linear")]
        slope = export.num(hit["slope"].iat[0]) if len(hit) else None
    return {"testset": t, "reference": reference_of(df, t), "n_models": len(models),
            "n_humans": sum(r["kind"] == "human" for r in f1),
            "top": models[0] if models else None, "slope": slope,
            "n_below": len(below), "n_paired": len(with_x)}
