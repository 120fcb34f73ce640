"""`qashift store check | repair | import | record`: verify a results store, rebuild what
can be rebuilt, bring in what another store trained and scored, and record a committed
results table (the frozen population's) beside the store's own runs."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from evaluator.core import console
from evaluator.store import check as store_check
from evaluator.store import transfer as store_transfer
from evaluator.store.store import Store
from evaluator.training import recorded


@click.group("store")
def store_group() -> None:
    """Verify, repair and import into the results store (--workspace)."""


@store_group.command("check")
def check_command() -> None:
    """Verify the index, every object's sha256 and every result's objects; exit 1 on a
    problem."""
    store = Store.open_default()
    report = store_check.check(store)
    click.echo(f"store: {store.workspace}")
    for line in report.lines():
        click.echo(line)
    if not report.ok:
        console.error("problems found: `qashift store repair` fixes them")
    sys.exit(0 if report.ok else 1)


@store_group.command("repair")
def repair_command() -> None:
    """Remove partial writes, quarantine corrupt objects, drop results whose objects are gone,
    and rebuild a corrupt index from the stored result rows."""
    store = Store.open_default()
    for line in store_check.repair(store):
        click.echo(line)


@store_group.command("import")
@click.argument("source", type=click.Path(file_okay=False, path_type=Path))
def import_command(source: Path) -> None:
    """Copy another store's trained systems (with their weights) and results (with their
    objects) into this one, each verified by its digest; rows already here are kept."""
    store = Store.open_default()
    if source.resolve() == store.workspace.resolve():
        console.error(f"{source} is this store already")
        sys.exit(2)
    report = store_transfer.import_store(store, source)
    click.echo(f"store: {store.workspace}")
    for line in report.lines():
        click.echo(line)
    sys.exit(1 if report.refused else 0)


@store_group.command("record")
@click.argument("table", required=False, type=click.Path(dir_okay=False, path_type=Path))
def record_command(table: Path | None) -> None:
    """Record a committed results table (default: the frozen population's,
    results/population.csv in the project root) in the store, so that `report`, `figures`
    and the API show its cells beside your own runs; a run of a cell supersedes its
    recorded result. `qashift trend` records the population itself."""
    store = Store.open_default()
    path, name = recorded.table_path(table)
    count = recorded.record(store, path)
    click.echo(f"recorded {count:,} cells of {name} in {store.workspace}" if count else
               f"{name} is recorded in {store.workspace} already")
