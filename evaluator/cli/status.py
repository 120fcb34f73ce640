"""`qashift status`: the matrix of bundles x test sets from the store."""

from __future__ import annotations

from collections import Counter

import click

from evaluator.api.results import Results
from evaluator.cli.base import COLUMNS, NAME_WIDTH, cut
from evaluator.core import console
from evaluator.data import testsets
from evaluator.pipeline.status import CellStatus, matrix_status
from evaluator.store.queries import is_recorded
from evaluator.store.store import Store
from evaluator.training import systems
from evaluator.training.run import progress_text, read_progress


@click.command("status")
@click.option("--bundle", "-b", "bundle_names", multiple=True, default=("all",),
              show_default=True, help="bundle or trained-system id (repeatable; 'all')")
@click.option("--testset", "-t", "testset_names", multiple=True, default=("all",),
              show_default=True, help="test-set id (repeatable; 'all')")
@click.option("--include-waiting", is_flag=True,
              help="also show bundles still waiting for their program files")
@click.option("--wide", is_flag=True, help="the full matrix, however wide")
def status_cmd(bundle_names, testset_names, include_waiting, wide) -> None:
    """The matrix from the store: done (F1), running, failed (class), pending, n/a."""
    store = Store.open_default()
    named = systems.resolve_bundles(list(bundle_names), store)  # folders, trained systems
    chosen_bundles = [b for b in named
                      if include_waiting or b.status == "ready" or "all" not in bundle_names]
    chosen_sets = testsets.resolve(list(testset_names))
    done = Results(store, digests={b.id: b.digest for b in chosen_bundles}).cells()
    cells = matrix_status(store, chosen_bundles, chosen_sets, done)
    width = min(max([len(b.id) for b in chosen_bundles] + [6]), NAME_WIDTH)
    rows = [cells[k:k + len(chosen_sets)] for k in range(0, len(cells), max(1, len(chosen_sets)))]
    if wide or width + 13 * len(chosen_sets) <= COLUMNS:
        click.echo(" " * width + "".join(f" {cut(t.id, 12, middle=True):>12}"
                                         for t in chosen_sets))
        for row in rows:
            if row:
                click.echo(f"{cut(row[0].bundle, width):<{width}}"
                           + "".join(f" {_status_text(c):>12}" for c in row))
    else:  # too many sets for a matrix: one line per bundle, its cells counted
        click.echo(f"{'bundle':<{width}} {'done':>5} {'failed':>6} {'running':>7} "
                   f"{'pending':>7} {'n/a':>5}  best F1")
        for row in rows:
            if not row:
                continue
            tally = Counter(c.state for c in row)
            done = [c for c in row if c.state == "done"]
            best = max(done, key=lambda c: c.row["f1"], default=None)
            click.echo(f"{cut(row[0].bundle, width):<{width}} {tally['done']:>5} "
                       f"{tally['failed']:>6} {tally['running']:>7} {tally['pending']:>7} "
                       f"{tally['n/a']:>5}  " + (cut(f"{best.row['f1']:.1f} ({best.testset})",
                                                  COLUMNS - width - 42) if best else "-"))
        console.say(f"{len(chosen_sets)} test sets do not fit {COLUMNS} columns: --wide "
                    f"for the matrix, or -t to choose sets")
    counts = Counter(c.state for c in cells)
    recorded = sum(1 for c in cells if c.state == "done" and is_recorded(c.row))
    click.echo(", ".join(f"{k} {v}" for k, v in sorted(counts.items())) +
               "  (done cells show F1" + (f"; {recorded} marked r are recorded from a committed "
                                          f"table, not run here)" if recorded else ")"))
    if "all" in bundle_names:  # 'all' names the bundle folders; the trained systems are more
        trained = len({r["system"] for r in systems.trained_rows(store)})
        if trained:
            console.say(f"{trained} trained systems (frozen or stored here) run too: `qashift "
                        f"systems` lists them, `status -b SYSTEM` shows one's cells")
    for lease in store.live_leases() if store.exists() else []:
        progress = read_progress(store, lease["key"])  # a train cell, when it has one
        if progress is not None:
            click.echo(f"training {lease['bundle']} on {lease['testset']}: "
                       f"{progress_text(progress)}")


def _status_text(cell: CellStatus) -> str:
    if cell.state == "done":
        return f"{cell.row['f1']:.1f}" + ("r" if is_recorded(cell.row) else "")
    if cell.state == "failed":
        return (cell.failure_class or "")[:12]
    return {"pending": "."}.get(cell.state, cell.state)
