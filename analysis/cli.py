"""Analysis commands, registered by the evaluator on the ``qashift`` group.

Only click is imported at module level: ``qashift --help`` must stay fast, so pandas,
statsmodels and matplotlib load inside the commands that need them.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

SOURCES = ("store", "squadshifts-published")


def default_data_dir() -> Path:
    """QASHIFT_DATA_DIR, else ../shared/data from the current directory, else an error."""
    env = os.environ.get("QASHIFT_DATA_DIR")
    if env:
        return Path(env)
    guess = Path.cwd().parent / "shared" / "data"
    if guess.is_dir():
        return guess
    raise click.UsageError("no data directory: set QASHIFT_DATA_DIR or pass --data-dir")


def load_source(source: str, data_dir: Path | str | None = None, store_records=None):
    """Tidy frame for a source: 'store', 'squadshifts-published' or a path to a CSV file.

    For 'store', ``store_records`` (an iterable of record dicts, or a callable returning
    one) is used when given; otherwise the default results store is opened.
    """
    from analysis import tidy

    if source == "squadshifts-published":
        return tidy.from_squadshifts_published(Path(data_dir) if data_dir else default_data_dir())
    if source == "store":
        if store_records is None:
            store_records = _default_store_records
        records = store_records() if callable(store_records) else store_records
        return tidy.from_records(records)
    path = Path(source)
    if path.suffix.lower() == ".csv" and path.is_file():
        return tidy.from_csv(path)
    raise click.BadParameter(
        f"{source!r} is neither one of {', '.join(SOURCES)} nor an existing .csv file",
        param_hint="--source")


def _default_store_records():
    try:
        from evaluator.store.store import Store

        return Store.open_default().records()
    except (ImportError, AttributeError) as exc:
        raise click.ClickException(
            f"results store unavailable ({exc.__class__.__name__}: {exc}); "
            "use --source squadshifts-published or a CSV file") from None


def _common(fn):
    fn = click.option("--exclude-extra-data", is_flag=True,
                      help="Leave out models whose metadata says they used extra data.")(fn)
    fn = click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path),
                      default=None, help="Local data mirror (default: $QASHIFT_DATA_DIR, "
                      "else ../shared/data).")(fn)
    fn = click.option("--source", default="squadshifts-published", show_default=True,
                      help="store | squadshifts-published | PATH.csv")(fn)
    return fn


def _load(source, data_dir, exclude_extra_data):
    from analysis import tidy

    df = load_source(source, data_dir)
    if df.empty:
        raise click.ClickException(f"no results to analyse in source {source!r}")
    if exclude_extra_data:
        if "extra_data" not in df or df["extra_data"].isna().all():
            click.echo("note: no extra_data metadata in this source; no model excluded",
                       err=True)
        else:
            df = tidy.select_models(df, {"extra_data": True})
    return df


@click.command("figures")
@_common
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("figures"),
              show_default=True, help="Output folder.")
@click.option("--bootstrap", type=int, default=1000, show_default=True,
              help="Bootstrap resamples for bands and concurrence intervals.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--compare", default=None,
              help="A second source (same forms as --source): also write compare-<set>-<metric> "
                   "figures with both trends side by side, for the test sets both have.")
def figures_command(source, data_dir, exclude_extra_data, out, bootstrap, seed, compare):
    """Regenerate every figure, fits.csv, gaps.csv (and coverage.txt for published data)."""
    from analysis.report import regenerate

    df = _load(source, data_dir, exclude_extra_data)
    try:
        written = regenerate(df, out, n_boot=bootstrap, seed=seed)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    if compare:
        written += _comparisons(df, source, _load(compare, data_dir, exclude_extra_data),
                                compare, out, bootstrap, seed)
    click.echo(f"wrote {len(written)} files to {out}")
    if df.attrs.get("coverage"):
        click.echo(df.attrs["coverage"].split("\n\n")[0])


def _comparisons(df, name, other, other_name, out: Path, n_boot: int, seed: int) -> list[Path]:
    from analysis import figures
    from analysis.tidy import METRICS, new_testsets

    common = [t for t in new_testsets(df) if t in set(new_testsets(other))]
    if not common:
        raise click.ClickException(f"{name!r} and {other_name!r} share no compared test set")
    written: list[Path] = []
    for testset in common:
        for metric in METRICS:
            fig = figures.comparison_row([(name, df), (other_name, other)],
                                         testset, metric, "linear", n_boot, seed)
            written += figures.save(fig, Path(out) / f"compare-{testset}-{metric}")
    return written


@click.command("fit")
@_common
@click.option("--bootstrap", type=int, default=0, show_default=True,
              help="Bootstrap resamples (0: no band; the table does not need it).")
@click.option("--seed", type=int, default=0, show_default=True)
def fit_command(source, data_dir, exclude_extra_data, bootstrap, seed):
    """Print the trend-fit table (slope, intercept, R², slope 95% interval, n models)."""
    from analysis import fits

    df = _load(source, data_dir, exclude_extra_data)
    table = fits.fit_table(fits.fit_all(df, n_boot=bootstrap, seed=seed))
    click.echo(table.drop(columns=["n_boot", "seed"]).to_string(index=False,
                                                                  float_format="%.4f"))
