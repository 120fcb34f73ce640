"""`qashift store check | repair`: verify a results store and rebuild what can be rebuilt."""

from __future__ import annotations

import sys

import click

from evaluator.core import console
from evaluator.store import check as store_check
from evaluator.store.store import Store


@click.group("store")
def store_group() -> None:
    """Verify and repair the results store (--workspace)."""


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
