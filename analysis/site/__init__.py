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

Here: the folder (written whole, then swapped in) and the pages put together; what the pages
say is `content`, their figures `charts`, the data files `export`, the templates `render`,
the trend plot of a model page `plot`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Collection, Mapping
from pathlib import Path

import pandas as pd

from analysis import report
from analysis.figures import METRIC_LABEL
from analysis.site import charts, content, export, render
from analysis.sources import facts, load_source, store_inputs
from analysis.sources.records import RunInfo
from analysis.sources.tidy import METRICS, new_testsets
from analysis.stats import fits as fits_mod
from evaluator.core.errors import UserError
from evaluator.core.files import READABLE, remove_tree, write_atomic
from evaluator.core.schema import ID_PATTERN

STATIC = Path(__file__).parents[1] / "static"
MARKER = ".qashift-site"
GENERATED = ("index.html", "models.html", "analysis.html", "concurrence.html", "testsets",
             "models", "figures", "data", "logs", "static", MARKER)



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


STORE_SOURCE = "our results store (official SQuAD v1.1 scoring of our own runs)"


def build_from_store(out: Path | str, *, n_boot: int = fits_mod.DEFAULT_BOOT,
                     seed: int = fits_mod.DEFAULT_SEED, approach_level: dict | None = None,
                     exclude: Collection[str] = ()) -> Path:
    """The site of the workspace's results store (`qashift report --source store`, and the
    pages the service serves): its results, runs, failures and logs, less the test sets in
    `exclude`; index.html's path."""
    records, runs, labels = store_inputs(exclude)
    df = load_source("store", store_records=records)
    if df.empty and not runs.failures:
        raise UserError("no results in the store: run `evaluate` first, or use --source "
                        "squadshifts-published")
    return build(df, out, source=STORE_SOURCE, runs=runs, labels=labels, n_boot=n_boot,
                 seed=seed, approach_level=approach_level)


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
        export.write_json(data_dir / f"{name}.json", table)
    for name in ("site.css", "site.js"):
        write_atomic(out / "static" / name, (STATIC / name).read_bytes(), READABLE)

    testsets = content.testset_order(df)
    models = content.models_of(df, runs)
    boards = {(t, m): content.leaderboard(df, t, m) for t in testsets for m in METRICS}
    export.write_table(data_dir / "results", export.tidy_for_export(df))
    export.write_table(data_dir / "leaderboards",
                 pd.DataFrame([{"testset": t, "metric": m, **r}
                               for (t, m), rows in boards.items() for r in rows]))
    if runs is not None:
        export.write_table(data_dir / "runs", pd.DataFrame(content.run_rows(runs, models),
                                                          columns=content.RUN_COLUMNS))
        export.write_table(data_dir / "failures",
                           pd.DataFrame(content.failure_rows(runs, models),
                                        columns=content.FAILURE_COLUMNS))
        export.write_logs(out / "logs", runs)

    env = render.environment()
    ctx = {"source": source, "labels": labels, "metric_label": METRIC_LABEL,
           "testsets": testsets, "models": models, "has_runs": runs is not None,
           "groups": content.testset_groups(testsets),
           "has_approach": any("approach" in m["meta"] for m in models.values()),
           "has_concurrence": approach_level is not None,
           "provenance": content.provenance_of(data_dir / "results.csv")}
    fits_table = tables.get("fits", pd.DataFrame())
    conc = tables.get("concurrence", pd.DataFrame())
    summaries = [content.testset_summary(df, t, boards, fits_table) for t in testsets]
    pages = {
        "index.html": env.get_template("index.html.j2").render(
            **ctx, root="", page="index", summaries=summaries,
            figures=charts.overview_figures(df, figures_dir, fits_table, labels)),
        "models.html": env.get_template("models.html.j2").render(
            **ctx, root="", page="models", table=content.model_index(df, models, testsets)),
        "analysis.html": env.get_template("analysis.html.j2").render(
            **ctx, root="", page="analysis", fits=export.records(fits_table),
            gaps_mean=export.records(tables.get("gaps_mean", pd.DataFrame())),
            concurrence=export.records(conc),
            heatmaps=charts.heatmaps(conc, figures_dir, labels),
            data_files=sorted(p.name for p in data_dir.iterdir())),
    }
    if approach_level is not None:
        pages["concurrence.html"] = env.get_template("concurrence.html.j2").render(
            **ctx, root="", page="concurrence",
            **charts.approach_level(approach_level, figures_dir, data_dir))
    for t in testsets:
        pages[testset_pages[t]] = env.get_template("testset.html.j2").render(
            **ctx, root="../", page="testset", testset=t,
            reference=content.reference_of(df, t), summary=summaries[testsets.index(t)],
            tabs=[charts.tab(df, t, m, boards[(t, m)], figures_dir, fits_table, labels)
                  for m in charts.METRIC_ORDER])
    placements = content.placements(df, testsets, labels)
    for name, info in models.items():
        pages[f"models/{info['slug']}.html"] = env.get_template("model.html.j2").render(
            **ctx, root="../", page="model", model=name, info=info,
            scores=content.model_scores(df, name, testsets, boards),
            placements=placements.get(name, []),
            runs=[r for r in content.run_rows(runs, models) if r["model"] == name] if runs else [],
            failures=[f for f in content.failure_rows(runs, models) if f["model"] == name]
            if runs else [])
    for rel, html in pages.items():
        write_atomic(_inside(out, rel), html.encode("utf-8"), READABLE)
    write_atomic(out / MARKER, b"written by qashift report; the whole folder is regenerated\n",
                 READABLE)


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
