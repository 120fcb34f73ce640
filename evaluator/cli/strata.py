"""`qashift strata`: stratified analyses of the own runs (answer types, divergence,
agreement), scoring first, with --score, the plan's systems on its sets (`study`). Thin:
parse, call, print."""

from __future__ import annotations

from pathlib import Path

import click

from evaluator import study
from evaluator.cli.base import Command, RunnerChoice, in_root
from evaluator.core import console
from evaluator.core.errors import UserError
from evaluator.core.files import check_output_path
from evaluator.runners.dispatch import Dispatcher
from evaluator.store.store import Store


@click.command("strata", cls=Command)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              **in_root("figures/strata"), help="Output folder.")
@click.option("--testset", "-t", "testset_names", multiple=True,
              help="Only these new test sets (default: every set a system was evaluated on "
                   "together with its reference).")
@click.option("--table", "table_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="A stratum table (results/strata.csv): its rows stand for "
              "systems whose per-question results this store lacks, and the store's are "
              "written into it.")
@click.option("--score", "plans", multiple=True, metavar="PLAN",
              type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="First score every system of this plan trained on a whole split, frozen "
                   "or stored, on the plan's -t sets (default: its sets with a reference, "
                   "derived ones such as ablations left out) and their references, skipping "
                   "cells --table holds (repeatable; nothing is trained).")
@click.option("--jobs", "-j", "parallel", type=click.IntRange(1, 64), default=2,
              show_default=True, help="Cells scored at once (with --score).")
@click.option("--runner", default="auto", show_default=True,
              type=RunnerChoice(),
              help="How the systems run (with --score).")
def strata_command(out, testset_names, table_path, plans, parallel, runner):
    """Stratified analyses of our own runs (Miller et al. 2020, Appendix C): answer types and
    syntactic divergence per test set, F1 by annotator agreement, and how much of each drop
    a shift in answer types, divergence, agreement, length or overlap predicts."""
    from analysis.sources import per_question_scores, strata  # lazy: pandas; fast --help
    from analysis.studies import stratified  # lazy: pandas, spaCy; fast --help

    check_output_path(out, what="--out", folder=True)
    if table_path:
        check_output_path(table_path, what="--table", columns=strata.TABLE_COLUMNS)
    kept = strata.read_table(table_path) if table_path else []
    store = Store.open_default()

    def fold(final: bool = True):
        """The stratum scores of the store and the table, written back into the table."""
        systems = per_question_scores(store) if store.exists() else []
        if not systems and not kept:
            where = f" and no rows in {table_path}" if table_path else ""
            raise UserError(f"no per-question results in the store at "
                            f"{store.db_path}{where}: run `evaluate` first")
        have = {(s.system, t) for s in systems for t in s.scores} | \
            {(r["system"], r["testset"]) for r in kept}
        references = stratified.references(have, testset_names)
        features = stratified.features(references,
                                       say=console.say if final else lambda _: None)
        scores, rows, stale = stratified.scores(systems, features, kept)
        if stale and final:
            console.warn(f"{stale} (system, set) pairs of {table_path} were left out: their "
                         f"set or the features changed since (score them again to refresh "
                         f"them)")
        if table_path and rows != kept:
            strata.write_table(rows, table_path)
            kept[:] = rows
            console.say(f"{table_path}: {len({(r['system'], r['testset']) for r in rows})} "
                        f"(system, set) pairs")
        return scores, features, references

    if plans:
        held = stratified.current_pairs(kept)
        for plan in plans:  # the table is written as each system's cells end
            study.score_with_references(
                plan, testset_names, held, store, Dispatcher(runner, warn=console.warn),
                parallel=parallel, saved=lambda: fold(final=False) if table_path else None,
                say=console.say, warn=console.warn)
    scores, features, references = fold()
    try:
        written, summary = stratified.write(scores, features, references, out)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    click.echo("Mean drop over systems: observed vs predicted by each stratification\n"
               + summary.to_string(index=False, float_format="%.2f"))
    click.echo(f"wrote {len(written)} files to {out}")


