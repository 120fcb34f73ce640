"""The static leaderboard site: HTML pages, figures and the same data as CSV/JSON, from one
tidy frame (and, for our own results store, the run records behind it).

Output folder::

    index.html            overview: robustness figures, the test sets
    testsets/<id>.html    one leaderboard per test set, EM and F1 tabs, sortable columns
    models.html           every submission with its score on every set
    models/<slug>.html    one submission: scores, environment, failures, links to logs
    analysis.html         trend fits, gaps, concurrence heat maps
    figures/              PNG, SVG and PDF from analysis.report
    data/                 every table as CSV and JSON (results, leaderboards, fits, gaps, ...)
    logs/<sha256>.txt     run and failure logs (store source only)
    static/               site.css, site.js

Only relative links and local assets, so the folder works from ``file://`` and from any
static server. Every page path is made from a safe name: a model's page from its slug, a test
set's from its id, which must follow the id rule (`core.schema.ID_PATTERN`, as every test-set
folder's name does); an id that is a path is refused before anything is written, since its
page and its figures would land outside the folder, and no page is written anywhere that
resolves outside it. No clock and no unordered iteration reaches the output: the same input
gives byte-identical files. Pages carry numbers for reading; the data files carry full precision.

The analysis tables (fits, gaps, concurrence, ...) are those ``analysis.report.write`` hands
over as it writes them into data/, at the precision of their CSV files; the site reads no
file it has just written.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
import tempfile
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from analysis import figures, report
from analysis.figures import METRIC_LABEL
from analysis.site import plot
from analysis.sources import facts
from analysis.sources.records import RunInfo
from analysis.sources.tidy import METRICS, SHIFT_SETS, new_testsets, paired
from analysis.stats import fits as fits_mod
from analysis.stats import gaps as gaps_mod
from analysis.studies import trend
from evaluator.core import provenance
from evaluator.core.files import READABLE, remove_tree, safe_cell, write_atomic
from evaluator.core.hashing import file_sha256
from evaluator.core.schema import ID_PATTERN
from evaluator.store.queries import is_recorded

TEMPLATES = Path(__file__).parents[1] / "templates"
STATIC = Path(__file__).parents[1] / "static"
MARKER = ".qashift-site"
GENERATED = ("index.html", "models.html", "analysis.html", "concurrence.html", "testsets",
             "models", "figures", "data", "logs", "static", MARKER)
METRIC_ORDER = ("f1", "em")
RUN_COLUMNS = ["model", "bundle", "testset", "runner", "device", "image_digest", "bundle_digest",
               "testset_sha256", "scorer_version", "n", "missing", "wall_s", "finished",
               "log_sha256", "key", "recorded_from"]
FAILURE_COLUMNS = ["model", "bundle", "testset", "failure_class", "message", "runner", "when",
                   "log_sha256"]  # F1 first: the headline metric of SQuAD leaderboards


class SiteError(ValueError):
    """The site cannot be written where asked (a folder with other people's files), or a name
    in its input would make it write outside its folder."""


def testset_page(testset: str) -> str:
    """The page of a test set, `testsets/<id>.html`: the id is the page's name (every link to
    the page is made from it), so a name that is not an id is refused."""
    if not ID_PATTERN.fullmatch(testset):  # the rule every test-set folder's name follows
        raise SiteError(f"test set id {testset[:80]!r} is not an id, so it "
                        f"cannot name a page; refused (in a results store, `qashift store "
                        f"check` reports its row and `qashift store repair` drops it)")
    return f"testsets/{testset}.html"


def _inside(out: Path, relative: str) -> Path:
    """`out / relative`, or SiteError when that resolves outside `out`."""
    path = out / relative
    if not path.resolve().is_relative_to(out.resolve()):
        raise SiteError(f"{relative[:120]!r} would be written outside the site; refused")
    return path


def build(df: pd.DataFrame, out: Path | str, *, source: str, runs: RunInfo | None = None,
          labels: Mapping[str, str] | None = None, n_boot: int = fits_mod.DEFAULT_BOOT,
          seed: int = fits_mod.DEFAULT_SEED, approach_level: dict | None = None) -> Path:
    """Write the whole site for df under out and return the path of index.html.

    ``source`` is shown on every page (where the numbers come from); ``labels`` names test
    sets (id -> display name) beyond the SQuADShifts ones the figures already know;
    ``approach_level`` (analysis.studies.approach_concurrence.site_page) adds the
    approach-level concurrence page.
    """
    out = Path(out)
    testset_pages = {t: testset_page(str(t)) for t in sorted(set(df["testset"]), key=str)}
    _check_target(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:  # the earlier site stays whole until the new one is written in full
        _write_site(df, staging, testset_pages, source=source, runs=runs, labels=labels,
                    n_boot=n_boot, seed=seed, approach_level=approach_level)
        _prepare(out)
        for name in GENERATED:
            if (staging / name).exists():
                os.replace(staging / name, out / name)
    finally:
        remove_tree(staging)
    return out / "index.html"


def _write_site(df: pd.DataFrame, out: Path, testset_pages: Mapping[str, str], *, source: str,
                runs: RunInfo | None, labels: Mapping[str, str] | None, n_boot: int, seed: int,
                approach_level: dict | None) -> None:
    """Write every page, figure and table of the site into the empty folder out."""
    labels = {**{t: facts.label(t) for t in set(df["testset"])}, **(labels or {})}
    figures_dir, data_dir = out / "figures", out / "data"
    figures_dir.mkdir(parents=True, exist_ok=True)
    data_dir.mkdir(parents=True, exist_ok=True)
    tables: dict[str, pd.DataFrame] = {}
    if new_testsets(df):  # nothing to plot or fit without a set compared against another
        tables = report.write(df, figures_dir, data_dir, n_boot=n_boot, seed=seed).tables
    for name, table in sorted(tables.items()):
        _write_json(data_dir / f"{name}.json", table)
    for name in ("site.css", "site.js"):
        write_atomic(out / "static" / name, (STATIC / name).read_bytes(), READABLE)

    testsets = _testset_order(df)
    models = _models(df, runs)
    boards = {(t, m): leaderboard(df, t, m) for t in testsets for m in METRICS}
    _write_table(data_dir / "results", _tidy_for_export(df))
    _write_table(data_dir / "leaderboards",
                 pd.DataFrame([{"testset": t, "metric": m, **r}
                               for (t, m), rows in boards.items() for r in rows]))
    if runs is not None:
        _write_table(data_dir / "runs",
                     pd.DataFrame(_run_rows(runs, models), columns=RUN_COLUMNS))
        _write_table(data_dir / "failures",
                     pd.DataFrame(_failure_rows(runs, models), columns=FAILURE_COLUMNS))
        _write_logs(out / "logs", runs)

    env = _environment()
    ctx = {"source": source, "labels": labels, "metric_label": METRIC_LABEL,
           "testsets": testsets, "models": models, "has_runs": runs is not None,
           "groups": _testset_groups(testsets),
           "has_approach": any("approach" in m["meta"] for m in models.values()),
           "has_concurrence": approach_level is not None,
           "provenance": _provenance(data_dir / "results.csv")}
    fits_table = tables.get("fits", pd.DataFrame())
    conc = tables.get("concurrence", pd.DataFrame())
    summaries = [_testset_summary(df, t, boards, fits_table) for t in testsets]
    pages = {
        "index.html": env.get_template("index.html.j2").render(
            **ctx, root="", page="index", summaries=summaries,
            figures=_overview_figures(df, figures_dir, fits_table, labels)),
        "models.html": env.get_template("models.html.j2").render(
            **ctx, root="", page="models", table=_model_index(df, models, testsets)),
        "analysis.html": env.get_template("analysis.html.j2").render(
            **ctx, root="", page="analysis", fits=_records(fits_table),
            gaps_mean=_records(tables.get("gaps_mean", pd.DataFrame())),
            concurrence=_records(conc),
            heatmaps=_heatmaps(conc, figures_dir, labels),
            data_files=sorted(p.name for p in data_dir.iterdir())),
    }
    if approach_level is not None:
        pages["concurrence.html"] = env.get_template("concurrence.html.j2").render(
            **ctx, root="", page="concurrence",
            **_approach_level(approach_level, figures_dir, data_dir))
    for t in testsets:
        pages[testset_pages[t]] = env.get_template("testset.html.j2").render(
            **ctx, root="../", page="testset", testset=t,
            reference=_reference_of(df, t), summary=summaries[testsets.index(t)],
            tabs=[_tab(df, t, m, boards[(t, m)], figures_dir, fits_table, labels)
                  for m in METRIC_ORDER])
    placements = _placements(df, testsets, labels)
    for name, info in models.items():
        pages[f"models/{info['slug']}.html"] = env.get_template("model.html.j2").render(
            **ctx, root="../", page="model", model=name, info=info,
            scores=_model_scores(df, name, testsets, boards),
            placements=placements.get(name, []),
            runs=[r for r in _run_rows(runs, models) if r["model"] == name] if runs else [],
            failures=[f for f in _failure_rows(runs, models) if f["model"] == name]
            if runs else [])
    for rel, html in pages.items():
        write_atomic(_inside(out, rel), html.encode("utf-8"), READABLE)
    write_atomic(out / MARKER, b"written by qashift report; the whole folder is regenerated\n",
                 READABLE)


# ----------------------------------------------------------------------------- tables

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
        x = _num(pairs.at[model, "x"]) if model in pairs.index else None
        ch = changes.loc[model] if model in changes.index else None
        out.append({
            "rank": int(rank[i]) if i in rank.index else None, "model": model,
            "kind": r["kind"], "value": _num(r["value"]), "lo": _num(r["lo"]),
            "hi": _num(r["hi"]), "n": None if pd.isna(r["n"]) else int(r["n"]),
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


def _testset_order(df: pd.DataFrame) -> list[str]:
    """Reference sets first (the original ones first, generated ones last), then the new
    sets in the familiar SQuADShifts order."""
    new = new_testsets(df)
    rank = {kind: i for i, kind in enumerate(facts.KINDS)}
    refs = sorted(set(df["testset"]) - set(new),
                  key=lambda t: (rank.get(facts.kind(t), len(rank)), t))
    return refs + new


def _reference_of(df: pd.DataFrame, testset: str) -> str | None:
    refs = sorted(set(df.loc[(df["testset"] == testset) & (df["reference"] != ""),
                             "reference"]))
    return ", ".join(refs) or None


def _testset_groups(testsets: list[str]) -> list[tuple[str, list[str]]]:
    """The test sets by kind, in the order of facts.KINDS (the navigation's groups)."""
    order = [*facts.KINDS, "other"]
    by_kind: dict[str, list[str]] = {}
    for t in testsets:
        by_kind.setdefault(facts.kind(t), []).append(t)
    return [(facts.KINDS.get(k, k.capitalize()), by_kind[k])
            for k in sorted(by_kind, key=lambda k: (order.index(k) if k in order else 99, k))]


def _provenance(results: Path) -> dict:
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


def _models(df: pd.DataFrame, runs: RunInfo | None) -> dict[str, dict]:
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


def _run_rows(runs: RunInfo, models: Mapping[str, dict]) -> list[dict]:
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
                     "wall_s": _num(r.get("wall_s")),
                     "finished": None if recorded else _utc(r.get("created_at")),
                     "log_sha256": r.get("log_sha256"), "key": r.get("key"),
                     "recorded_from": r["source"] if recorded else None})
    return rows


def _failure_rows(runs: RunInfo, models: Mapping[str, dict]) -> list[dict]:
    names = _bundle_to_model(models)
    rows = []
    for f in sorted(runs.failures, key=lambda f: (f["bundle"], f["testset"],
                                                  f.get("created_at") or 0, f.get("id") or 0)):
        rows.append({"model": names.get(f["bundle"], f["bundle"]), "bundle": f["bundle"],
                     "testset": f["testset"], "failure_class": f["failure_class"],
                     "message": f["message"], "runner": f.get("runner"),
                     "when": _utc(f.get("created_at")), "log_sha256": f.get("log_sha256")})
    return rows


def _write_logs(folder: Path, runs: RunInfo) -> None:
    """Every log a page links to, as logs/<sha256>.txt (content-addressed, so stable)."""
    shas = sorted({r.get("log_sha256") for r in (*runs.runs, *runs.failures)} - {None, ""})
    for sha in shas:
        data = runs.read_log(sha)
        if data is not None:
            write_atomic(folder / f"{sha}.txt", data, READABLE)


def _model_scores(df: pd.DataFrame, model: str, testsets: list[str],
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


def _placements(df: pd.DataFrame, testsets: list[str], labels: Mapping[str, str]
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
        points = pairs.set_index("model")
        for r in placed.to_dict("records"):
            own = points.loc[r["model"]]
            others = [(float(x), float(y)) for m, x, y in
                      zip(pairs["model"], pairs["x"], pairs["y"], strict=True)
                      if m != r["model"] and points.at[m, "kind"] == "model"]
            reference = labels.get(own["x_testset"], own["x_testset"])
            title = (f"F1 on {labels.get(t, t)} against F1 on {reference}: this model and "
                     f"the trend of the {r['n_population']} others")
            out.setdefault(r["model"], []).append({
                **r, "testset": t, "reference": own["x_testset"],
                "svg": plot.trend_svg(others, own.to_dict(), r["intercept"], r["slope"],
                                      f"F1 on {reference}", f"F1 on {labels.get(t, t)}",
                                      title)})
    return out


def _model_index(df: pd.DataFrame, models: Mapping[str, dict], testsets: list[str]) -> list:
    wide = (df[df["metric"] == "f1"].drop_duplicates(["model", "testset"])
            .pivot(index="model", columns="testset", values="value"))
    rows = []
    for name, info in models.items():
        vals = [(_num(wide.at[name, t]) if name in wide.index and t in wide.columns else None)
                for t in testsets]
        rows.append({"model": name, "info": info, "values": vals})
    return rows


def _testset_summary(df: pd.DataFrame, t: str, boards, fits_table: pd.DataFrame) -> dict:
    f1 = boards[(t, "f1")] or boards[(t, "em")]
    models = [r for r in f1 if r["kind"] == "model"]
    below = [r for r in models if r["original"] is not None and r["value"] < r["original"]]
    with_x = [r for r in models if r["original"] is not None]
    slope = None
    if len(fits_table):
        hit = fits_table[(fits_table["testset"] == t) & (fits_table["metric"] == "f1")
                         & (fits_table["scale"] == "linear")]
        slope = _num(hit["slope"].iat[0]) if len(hit) else None
    return {"testset": t, "reference": _reference_of(df, t), "n_models": len(models),
            "n_humans": sum(r["kind"] == "human" for r in f1),
            "top": models[0] if models else None, "slope": slope,
            "n_below": len(below), "n_paired": len(with_x)}


# ------------------------------------------------------------------------ figures/alt text

def _figure(figures_dir: Path, stem: str, alt: str, caption: str) -> dict | None:
    png = figures_dir / f"{stem}.png"
    if not png.exists():
        return None
    width, height = _png_size(png)
    downloads = [fmt for fmt in ("svg", "pdf") if (figures_dir / f"{stem}.{fmt}").exists()]
    return {"stem": stem, "alt": alt, "caption": caption, "width": width // 2,
            "height": height // 2, "downloads": downloads}


def _png_size(path: Path) -> tuple[int, int]:
    with open(path, "rb") as handle:
        head = handle.read(24)
    return struct.unpack(">II", head[16:24])


def _scatter_alt(df, testsets, metric, scale, fits_table, labels) -> str:
    """Say what the scatter shows, with the numbers a sighted reader takes from it."""
    parts = []
    for t in testsets:
        pairs = paired(df, t, metric)
        models = pairs[pairs["kind"] == "model"]
        text = (f"{labels.get(t, t)}: {int((models['y'] < models['x']).sum())} of "
                f"{len(models)} models score lower than on the original set")
        hit = fits_table[(fits_table["testset"] == t) & (fits_table["metric"] == metric)
                         & (fits_table["scale"] == scale)] if len(fits_table) else []
        if len(hit):
            text += f", {scale} fit slope {hit['slope'].iat[0]:.2f}"
        parts.append(text)
    m = METRIC_LABEL[metric]
    return (f"Scatter plot{'s' if len(testsets) > 1 else ''} of {m} on the new test set "
            f"(vertical) against {m} on the original test set (horizontal), {scale} axes; "
            f"models as dots, humans as stars, the line y = x dashed and the trend fit solid. "
            + "; ".join(parts) + ".")


def _overview_figures(df, figures_dir, fits_table, labels) -> list[dict]:
    testsets = new_testsets(df)
    out = []
    for m in METRIC_ORDER:
        for s in fits_mod.SCALES:
            fig = _figure(figures_dir, f"grid-{m}-{s}",
                          _scatter_alt(df, testsets, m, s, fits_table, labels),
                          f"{METRIC_LABEL[m]} on each new test set against {METRIC_LABEL[m]} "
                          f"on the original test set, {s} axes.")
            if fig:
                out.append(fig)
    return out


def _tab(df, t, m, rows, figures_dir, fits_table, labels) -> dict:
    has_ref = any(r["original_testset"] for r in rows)
    alt = " ".join(_scatter_alt(df, [t], m, s, fits_table, labels) for s in fits_mod.SCALES)
    fig = _figure(figures_dir, f"{t}-{m}", alt,
                  f"{labels.get(t, t)}, {METRIC_LABEL[m]}: linear (left) and probit (right) "
                  f"axes.") if has_ref else None
    ci = sorted({"no interval" if r["lo"] is None else "interval" for r in rows})
    return {"metric": m, "rows": rows, "has_ref": has_ref, "figure": fig,
            "n_paired": sum(r["rank_change"] is not None for r in rows),
            "no_intervals": ci == ["no interval"]}


def _approach_level(page: dict, figures_dir: Path, data_dir: Path) -> dict:
    """The concurrence page's tables and figure: the versus-reference rows per benchmark
    (one cell group per subset), the approach x benchmark matrix, written as data too."""
    versus, scores = page["versus"], page["scores"]
    _write_table(data_dir / "approach-level-versus", versus)
    matrix = scores.reset_index().rename(columns={"index": "approach"})
    matrix.insert(1, "group", [page["groups"].get(a, "") for a in scores.index])
    _write_table(data_dir / "approach-matrix", matrix)
    figures.save(page["tau_figure"], figures_dir / "approach-level-tau")
    figures.save(page["matrix_figure"], figures_dir / "approach-level-matrix")
    rows = []
    for benchmark, part in versus.groupby("benchmark", sort=False):
        cells = {c["subset"]: c for c in _records(part)}
        rows.append({"benchmark": benchmark,
                     "cells": [cells.get(label) for label in page["subsets"]]})
    return {"level": {k: page[k] for k in ("mode", "reference", "variant", "threshold",
                                           "n_boot", "seed", "subsets")},
            "versus_rows": rows, "benchmarks": list(scores.columns),
            "matrix": [{"approach": a, "group": page["groups"].get(a, ""),
                        "scores": [_num(v) for v in scores.loc[a]]} for a in scores.index],
            "tau_figure": _figure(figures_dir, "approach-level-tau",
                                  f"Kendall tau-{page['variant']} of every benchmark with "
                                  f"{page['reference']} over the approaches, all and per "
                                  f"group; the dashed line is the concurrence threshold "
                                  f"{page['threshold']:g}.",
                                  f"Approach-level concurrence with {page['reference']}."),
            "matrix_figure": _figure(figures_dir, "approach-level-matrix",
                                     f"Heat map of the scores of {len(scores)} approaches on "
                                     f"{len(scores.columns)} benchmarks, each benchmark "
                                     f"coloured from its lowest to its highest score.",
                                     "Every approach on every benchmark (the table below).")}


def _heatmaps(conc: pd.DataFrame, figures_dir: Path, labels) -> list[dict]:
    out = []
    for m in METRIC_ORDER:
        pairs = conc[conc["metric"] == m] if len(conc) else conc
        if not len(pairs):
            continue
        values = "; ".join(f"{labels.get(p['a'], p['a'])} and {labels.get(p['b'], p['b'])} "
                           f"{p['kendall_tau_b']:.2f}" for p in pairs.to_dict("records"))
        fig = _figure(figures_dir, f"concurrence-{m}",
                      f"Heat map of Kendall tau-b rank correlation between test sets, "
                      f"{METRIC_LABEL[m]}, over {int(pairs['n_models'].iat[0])} models: "
                      f"{values}.",
                      f"Concurrence ({METRIC_LABEL[m]}): Kendall τ-b between every pair of "
                      f"test sets.")
        if fig:
            out.append(fig)
    return out


# --------------------------------------------------------------------------- data files

def _tidy_for_export(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values(["testset", "metric", "model"]).reset_index(drop=True)


def _write_table(stem: Path, table: pd.DataFrame) -> None:
    """A table as CSV, for people (text a spreadsheet would run as a formula is written as
    text: `safe_cell`), and as JSON, whose values are exact."""
    text = table.copy()
    for column in text.columns:
        if pd.api.types.is_object_dtype(text[column]) or \
                pd.api.types.is_string_dtype(text[column]):
            text[column] = text[column].map(safe_cell)
    write_atomic(stem.with_suffix(".csv"), text.to_csv(index=False).encode("utf-8"), READABLE)
    _write_json(stem.with_suffix(".json"), table)


def _write_json(path: Path, table: pd.DataFrame) -> None:
    rows = [{k: _plain(v) for k, v in r.items()} for r in table.to_dict("records")]
    write_atomic(path, (json.dumps(rows, indent=1, ensure_ascii=False, allow_nan=False)
                        + "\n").encode("utf-8"), READABLE)


def _records(table: pd.DataFrame) -> list[dict]:
    return [{k: _plain(v) for k, v in r.items()} for r in table.to_dict("records")]


def _plain(v):
    """JSON-safe scalar: NaN/NA -> None, numpy numbers -> Python numbers."""
    if v is None or v is pd.NA:
        return None
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


def _num(v) -> float | None:
    if v is None or v is pd.NA:
        return None
    v = float(v)
    return None if math.isnan(v) else v


def _utc(ts) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(float(ts), tz=UTC).strftime("%Y-%m-%d %H:%M UTC")


# ----------------------------------------------------------------------------- rendering

def _check_target(out: Path) -> None:
    """Refuse a non-empty folder that holds no earlier site."""
    if out.exists() and any(out.iterdir()) and not (out / MARKER).exists():
        raise SiteError(f"{out} is not empty and holds no earlier site ({MARKER}); "
                        f"choose an empty or new folder")


def _prepare(out: Path) -> None:
    """Empty the folder of a previous site (what it generated, nothing else)."""
    _check_target(out)
    if out.exists():
        for name in GENERATED:
            path = out / name
            if path.is_dir() and not path.is_symlink():
                remove_tree(path)
            elif path.exists() or path.is_symlink():
                path.unlink()  # a link, never what it points to
    out.mkdir(parents=True, exist_ok=True)


def _environment():
    import jinja2  # lazy: only building the site needs templates

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES),
                             autoescape=jinja2.select_autoescape(["html", "j2"]),
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined)
    env.filters.update(score=_fmt_score, interval=_fmt_interval, signed=_fmt_signed,
                       sortkey=_sortkey)
    env.globals["shift_sets"] = SHIFT_SETS
    return env


def _fmt_score(v, digits: int = 3) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def _fmt_interval(row: Mapping) -> str:
    if row.get("lo") is None or row.get("hi") is None:
        return ""
    return f"[{row['lo']:.2f}, {row['hi']:.2f}]"


def _fmt_signed(v, digits: int = 2) -> str:
    if v is None:
        return "–"
    if isinstance(v, int):
        return f"{v:+d}".replace("-", "−") if v else "0"
    return f"{v:+.{digits}f}".replace("-", "−")


def _sortkey(v) -> str:
    """data-sort value: full precision for numbers, empty (sorted last) when missing."""
    if v is None:
        return ""
    return repr(float(v)) if isinstance(v, float) else str(v)
