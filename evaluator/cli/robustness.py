"""`qashift families` and `extra-data`: which systems sit off the trend (Awadalla et al.'s
families, Miller et al.'s extra training data), the own population read from the store.
Thin: parse, call `analysis`, print."""

from __future__ import annotations

from pathlib import Path

import click

from evaluator.cli.base import Command, in_root
from evaluator.core.errors import UserError
from evaluator.core.files import READABLE, check_output_path, write_atomic
from evaluator.store.store import Store
from evaluator.training import recorded


@click.command("families", cls=Command)
@click.option("--table", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              **in_root("results/awadalla-2022.csv"),
              help="Published systems with a family column (Awadalla et al. 2022's release).")
@click.option("--population", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              **in_root("results/population.csv"),
              help="The own population's table, recorded in the store on first use: the "
                   "store's results of the systems trained on squad-dev-train are drawn "
                   "beside the published ones.")
@click.option("--baseline", default="fine-tuned", show_default=True,
              help="The published family whose trend the others are measured against.")
@click.option("--population-baseline", default="non-pretrained", show_default=True,
              help="The own population's family that makes its trend.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              **in_root("figures/families"), help="Output folder.")
@click.option("--bootstrap", type=click.IntRange(min=0), default=200, show_default=True,
              help="Bootstrap resamples for the figures' trend bands.")
def families_command(table, population, baseline, population_baseline, out, bootstrap):
    """Families of systems against one trend (Awadalla et al. 2022): each family's mean
    effective robustness with a 95% interval over its systems, published and own, and the
    published panels beside the own population's."""
    from analysis import figures  # lazy: matplotlib; fast --help
    from analysis.sources import load_source  # lazy: pandas; fast --help
    from analysis.studies import families  # lazy: pandas, scipy; fast --help

    check_output_path(out, what="--out", folder=True)
    from analysis.sources.load import store_records_of  # lazy: pandas
    from analysis.studies import trend  # lazy: pandas, scipy

    published = load_source(str(table), None, reference="squad-dev")
    store = Store.open_default()
    recorded.record(store, population)
    own = trend.population_of(load_source("store", store_records=lambda: store_records_of(
        store)), recorded.BASE)
    try:
        theirs = families.family_robustness(
            published, [t for t, _ in families.SHIFTS], baseline)
        ours = families.family_robustness(
            own, [o for _, o in families.SHIFTS], population_baseline)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    out.mkdir(parents=True, exist_ok=True)
    for label, frame in ((f"{table} (against {baseline})", theirs),
                         (f"own population, the store's ({population} recorded; against "
                          f"{population_baseline})", ours)):
        click.echo(f"\n{label}\n" + frame.drop(columns=["baseline", "scale"]).to_string(
            index=False, float_format="%.2f"))
    both = families.combined({str(table): theirs, str(population): ours})
    write_atomic(out / "families.csv",
                 both.to_csv(index=False, float_format="%.4f").encode(), READABLE)
    written = [out / "families.csv"]
    for testset, fig in families.beside(published, own, "Awadalla et al. (2022)",
                                        "own population", n_boot=bootstrap):
        written += figures.save(fig, out / f"beside-{testset}")
    click.echo(f"\nwrote {len(written)} files to {out}", err=True)


@click.command("extra-data", cls=Command)
@click.option("--base", default="squad-dev-train", show_default=True,
              help="The training split whose systems make the population and its trend.")
@click.option("--metric", type=click.Choice(["em", "f1"]), default="f1", show_default=True)
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the table as CSV.")
@click.option("--table", "table_paths", multiple=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Read these study tables (repeatable, e.g. results/population.csv and "
                   "results/extra-data.csv) instead of the results store.")
@click.option("--reference", default="squad-dev-heldout", show_default=True,
              help="With --table: the tables' original-set test set.")
@click.option("--all", "show_all", is_flag=True,
              help="Print every system's row, not only those trained with extra data and "
                   "their counterparts on --base (the CSV always has every row).")
def extra_data_command(base, metric, csv_path, table_paths, reference, show_all):
    """Does extra training data move systems off the trend? Effective robustness (with a 95%
    interval) of every trained system against the trend of the systems trained on --base
    (Miller et al. 2020, section 6.2)."""
    from analysis.sources import load_source, load_tables, store_inputs  # lazy: pandas
    from analysis.studies import extra_data  # lazy: pandas; fast --help

    if csv_path:
        check_output_path(csv_path, what="--csv", columns=extra_data.COLUMNS)
    if table_paths:
        scores = load_tables(table_paths, reference)
    else:
        records, _, _ = store_inputs()
        scores = load_source("store", store_records=records)
    found = extra_data.table(scores, base, metric)
    if found.empty:
        raise UserError(f"no new test set has 3 or more systems trained on {base} "
                        f"with a reference score: train and evaluate them first")
    shown = found if show_all else extra_data.with_counterparts(found, base)
    if shown.empty:  # the population alone (recorded in the store by `trend`, say)
        raise UserError(f"no system trained with extra data is here beside the "
                        f"{found['system'].nunique()} trained on {base}: run "
                        f"studies/extra-data.yaml or pass --table results/population.csv "
                        f"--table results/extra-data.csv (--all lists every system)")
    shown = shown.drop(columns=["approach", "reference"])
    click.echo(shown.to_string(index=False, float_format="%.2f"))
    moved = extra_data.summary(found, base)
    if not moved.empty:
        click.echo("\nOff the trend? Systems trained with extra data, per kind and new set "
                   "(above / on / below: their 95% interval; _scatter: beyond the "
                   "population's 95% prediction band; change: from the counterpart "
                   f"trained on {base} alone)\n"
                   + moved.to_string(index=False, float_format="%.2f"))
    if csv_path:
        write_atomic(check_output_path(csv_path, what="--csv", columns=extra_data.COLUMNS),
                     found.to_csv(index=False, float_format="%.6g").encode(), READABLE)
        click.echo(f"wrote {csv_path}")
