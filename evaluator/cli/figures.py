"""`qashift figures`, `fit` and `report`: the trend analysis of a source (the store, the
published SQuADShifts results, a CSV). Thin: parse, call `analysis`, print. The analysis
modules load inside the commands, so `qashift --help` stays fast; default paths are in the
project root (`in_root`), not the current directory."""

from __future__ import annotations

from pathlib import Path

import click

from evaluator.cli.base import Command, in_root
from evaluator.core import console, settings
from evaluator.core.errors import UserError
from evaluator.core.files import check_output_path


def _common(fn):
    fn = click.option("--metric", "metrics", multiple=True, type=click.Choice(["em", "f1"]),
                      help="Only these metrics (repeatable; default: every metric with "
                      "data).")(fn)
    fn = click.option("--reference", default="squad-test", show_default=True,
                      help="For a CSV source: the original-set test set (its rows, or its "
                      "<testset>_<metric> columns) that gives every model's x.")(fn)
    fn = click.option("--exclude-extra-data", is_flag=True,
                      help="Leave out models whose metadata says they used extra data.")(fn)
    fn = click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path),
                      default=None, help="Local data mirror (default: $QASHIFT_DATA_DIR, "
                      "else ../shared/data).")(fn)
    fn = click.option("--source", default="squadshifts-published", show_default=True,
                      help="store | squadshifts-published | PATH.csv")(fn)
    return fn


def source_frame(source, data_dir, exclude_extra_data, reference="squad-test", metrics=()):
    """A source's tidy frame (`analysis.sources`), one line when it holds nothing."""
    from analysis.sources import load_source, tidy  # lazy: pandas; fast --help

    df = load_source(source, data_dir, reference=reference, metrics=metrics)
    if df.empty:
        raise UserError(f"no results to analyse in source {source!r}")
    if exclude_extra_data:
        if "extra_data" not in df or df["extra_data"].isna().all():
            console.warn("no extra_data metadata in this source; no model excluded")
        else:
            df = tidy.select_models(df, {"extra_data": True})
    return df


@click.command("figures", cls=Command)
@_common
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), **in_root("figures"),
              help="Output folder.")
@click.option("--bootstrap", type=click.IntRange(min=0), default=1000, show_default=True,
              help="Bootstrap resamples for bands and concurrence intervals.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--compare", default=None,
              help="A second source (same forms as --source): also write compare-<set>-<metric> "
                   "figures with both trends side by side, for the test sets both have.")
def figures_command(source, data_dir, exclude_extra_data, reference, metrics, out, bootstrap,
                    seed, compare):
    """Regenerate every figure, fits.csv, gaps.csv (and coverage.txt for published data)."""
    from analysis import report  # lazy: pandas; fast --help
    from analysis.stats import fits  # lazy: pandas, statsmodels; fast --help

    check_output_path(out, what="--out", folder=True)
    df = source_frame(source, data_dir, exclude_extra_data, reference, metrics)
    try:
        written = report.regenerate(df, out, n_boot=bootstrap, seed=seed,
                                    metrics=metrics or None)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    for note in fits.fit_notes(df, fits.fit_all(df, metrics=metrics or fits.METRICS, n_boot=0),
                               metrics=metrics or fits.METRICS):
        console.warn(note)
    if compare:
        other = source_frame(compare, data_dir, exclude_extra_data, reference, metrics)
        try:
            drawn, skipped = report.comparisons(df, source, other, compare, out, bootstrap,
                                                seed)
        except ValueError as exc:
            raise UserError(str(exc)) from None
        if skipped:
            console.warn(f"no comparison drawn for {', '.join(skipped)}: one source has "
                         f"fewer than 3 models with scores on both axes there")
        written += drawn
    click.echo(f"wrote {len(written)} files to {out}")
    if df.attrs.get("coverage"):
        click.echo(df.attrs["coverage"].split("\n\n")[0])


@click.command("fit", cls=Command)
@_common
@click.option("--bootstrap", type=click.IntRange(min=0), default=0, show_default=True,
              help="Bootstrap resamples (0: no band; the table does not need it).")
@click.option("--seed", type=int, default=0, show_default=True)
def fit_command(source, data_dir, exclude_extra_data, reference, metrics, bootstrap, seed):
    """Print the trend-fit table (slope, intercept, R², slope 95% interval, n models)."""
    from analysis.sources.tidy import NO_PAIRS, new_testsets  # lazy: pandas; fast --help
    from analysis.stats import fits  # lazy: pandas; fast --help

    df = source_frame(source, data_dir, exclude_extra_data, reference, metrics)
    if not new_testsets(df):  # as `figures` says it
        raise UserError(f"nothing to fit: {NO_PAIRS}")
    found = fits.fit_all(df, metrics=metrics or fits.METRICS, n_boot=bootstrap, seed=seed)
    notes = fits.fit_notes(df, found, metrics=metrics or fits.METRICS)
    if not found:  # every panel too small: the notes say why, not an empty table
        for note in notes:
            console.warn(note)
        raise UserError("nothing to fit: no test set has the 3 or more models with scores on "
                        "it and on its reference that a fit needs")
    table = fits.fit_table(found)
    click.echo(table.drop(columns=["n_boot", "seed"]).to_string(index=False,
                                                                  float_format="%.4f"))
    for note in notes:
        console.warn(note)


@click.command("report", cls=Command)
@click.option("--source", default="store", show_default=True,
              help="store | squadshifts-published | PATH.csv")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("site"),
              show_default=True, help="Output folder (created; an earlier site there is "
              "replaced; a folder with other files, a link or a folder inside the workspace "
              "is refused).")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Local data mirror for --source squadshifts-published (default: "
              "$QASHIFT_DATA_DIR, else ../shared/data).")
@click.option("--bootstrap", type=click.IntRange(min=0), default=1000, show_default=True,
              help="Bootstrap resamples for fit bands and concurrence intervals.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--concurrence", "concurrence_scores", type=click.Path(dir_okay=False,
              exists=True, path_type=Path), default=None,
              help="An approach x benchmark score table (results/approach-matrix.csv): adds "
                   "the approach-level concurrence page (Liu et al.).")
@click.option("--concurrence-reference", default=None,
              help="Its reference benchmark (default: the table's first column).")
def report_command(source, out, data_dir, bootstrap, seed, concurrence_scores,
                   concurrence_reference):
    """Write the static site: overview, one leaderboard per test set, one page per
    submission, fits and gaps, and every table as CSV and JSON. Open OUT/index.html."""
    from analysis import site  # lazy: pandas; fast --help
    from analysis.sources import load_source  # lazy: pandas; fast --help
    from analysis.studies import approach_concurrence as ac  # lazy: pandas; fast --help

    check_output_path(out, what="--out", folder=True)
    approach_level = None
    if concurrence_scores is not None:
        try:
            approach_level = ac.site_page(ac.read_scores(concurrence_scores),
                                          concurrence_reference, bootstrap, seed)
        except ValueError as exc:
            raise UserError(f"--concurrence {concurrence_scores}: {exc}") from None

    try:
        if source == "store":
            index = site.build_from_store(out, n_boot=bootstrap, seed=seed,
                                          approach_level=approach_level)
        else:
            df = load_source(source, data_dir)
            if df.empty:
                raise UserError(f"no results in source {source!r}")
            label = ("SQuADShifts published results (Miller et al. 2020) joined to the SQuAD "
                     "v1.1 leaderboard" if source == "squadshifts-published" else
                     _shown_path(Path(source)))
            index = site.build(df, out, source=label, n_boot=bootstrap, seed=seed,
                               approach_level=approach_level)
    except site.SiteError as exc:
        raise UserError(str(exc)) from None
    models = sum(1 for _ in (out / "models").glob("*.html"))
    click.echo(f"wrote the site to {out}: {models} submission pages; open {index}")


def _shown_path(path: Path) -> str:
    """A table's path as a page shows it: relative to the project root or the current folder
    where it lies inside one, else its name alone (a page names no one's home folder)."""
    resolved = path.resolve()
    for base in (settings.project_root().resolve(), Path.cwd().resolve()):
        if resolved.is_relative_to(base):
            return str(resolved.relative_to(base))
    return path.name


