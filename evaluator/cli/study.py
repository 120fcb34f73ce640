"""`qashift study run|status|table|matrix PLAN`: a population study from one plan file (see
evaluator/study/ and docs/training.md)."""

from __future__ import annotations

from pathlib import Path

import click

from analysis.studies.approach_matrix import approach_matrix
from evaluator import study
from evaluator.cli.base import Group, RunnerChoice, configure, settings_options
from evaluator.core import console
from evaluator.core.errors import UserError
from evaluator.core.files import check_output_path, write_csv_atomic
from evaluator.core.hashing import canonical_json
from evaluator.runners.dispatch import Dispatcher
from evaluator.store.store import Store
from evaluator.training import frozen, table

PLAN = click.Path(exists=True, dir_okay=False, path_type=Path)
LEDGER = click.option(
    "--ledger", "ledgers", multiple=True, metavar="TABLE",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="another study's table (repeatable): the systems both plans list that it holds in "
         "full count as done, and their rows join this plan's")


@click.group("study", cls=Group)
def study_group() -> None:
    """Train and evaluate a population of systems from one plan file."""


@study_group.command("run")
@click.argument("plan", type=PLAN)
@click.option("--runner", default="auto", show_default=True,
              type=RunnerChoice())
@click.option("--device", default="auto", show_default=True,
              type=click.Choice(["auto", "cpu", "gpu"]))
@click.option("--table", "table_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="the study's results table (CSV): systems it holds in full "
              "are not trained again, test sets it scores a system on are not scored again; "
              "rewritten after every system this run trains or scores")
@LEDGER
@click.option("--only", multiple=True, metavar="PATTERN",
              help="run only the systems whose name matches this shell pattern (repeatable), "
                   "e.g. '*~250/*'")
@click.option("--jobs", "-j", "parallel", type=click.IntRange(1, 64), default=1,
              show_default=True, help="a system's test sets to score at once (training "
              "stays one system at a time)")
@settings_options
def run_command(plan, runner, device, table_path, ledgers, only, parallel, data_dir,
                workspace) -> None:
    """Train and evaluate what the plan lists and neither the store nor the table holds
    (resumes where it stopped)."""
    configure(data_dir, workspace)
    if table_path is not None:
        check_output_path(table_path, what="--table", columns=table.COLUMNS)
    found = study.load(plan)
    store = Store.open_default()
    earlier = table.ledger(table_path, ledgers)
    console.say(study.status(found, store, earlier).line(found))
    dispatcher = Dispatcher(runner, warn=console.warn)

    def save() -> None:
        if table_path is not None:
            _write_table(found, store, table_path, earlier)

    final = study.run(found, dispatcher, store, device=device, earlier=earlier,
                      only=tuple(only), parallel=parallel, say=console.say, saved=save)
    save()
    click.echo(final.line(found))


@study_group.command("status")
@click.argument("plan", type=PLAN)
@click.option("--table", "table_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="also count the systems this results table holds in full")
@LEDGER
@click.option("--by-approach", is_flag=True,
              help="also a line per approach: where the work still to do lies")
@settings_options
def status_command(plan, table_path, ledgers, by_approach, data_dir, workspace) -> None:
    """Trained, evaluated and failed cells of the plan, from the store (and a table)."""
    configure(data_dir, workspace)
    found = study.load(plan)
    earlier = table.ledger(table_path, ledgers)
    counts = study.status(found, Store.open_default(), earlier)
    click.echo(counts.line(found))
    if by_approach:
        click.echo("\n".join(counts.approach_lines()))


@study_group.command("table")
@click.argument("plan", type=PLAN)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="the CSV to write (one row per system x test set x metric)")
@settings_options
def table_command(plan, out, data_dir, workspace) -> None:
    """Write the study's results table from the store (nothing is run); systems the store
    lacks keep their rows from the file already at --out."""
    configure(data_dir, workspace)
    check_output_path(out, what="--out", columns=table.COLUMNS)
    rows = _write_table(study.load(plan), Store.open_default(), out)
    click.echo(f"wrote {len(rows)} rows to {out}")


@study_group.command("freeze")
@click.argument("plan", type=PLAN)
@click.option("--table", "table_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="the study's results table: written first from the store "
                                 "(as `study table` writes it), then the source of every "
                                 "frozen system's headline scores")
@settings_options
def freeze_command(plan, table_path, data_dir, workspace) -> None:
    """Write every system of the plan that this store trained into the repository's frozen/
    folder (weights through the gate, a manifest with digests and headline scores), so a
    clean clone runs it without training. Artifacts already there are kept, their headline
    scores brought up to date (sets that only another study scored are kept). With --table,
    the table and the manifests are written from the same rows, so they cannot disagree."""
    configure(data_dir, workspace)
    if table_path is not None:
        check_output_path(table_path, what="--table", columns=table.COLUMNS)
    found = study.load(plan)
    store = Store.open_default()
    if table_path is None:
        _freeze(found, store, study.rows(found, store))
        return
    rows = _write_table(found, store, table_path)
    click.echo(f"wrote {len(rows)} rows to {table_path}")
    _freeze(found, store, rows)


def _write_table(found: study.Study, store: Store, path: Path,
                 earlier: study.Rows | None = None) -> study.Rows:
    """Write the study's table at `path` from the store and the `earlier` rows (where None,
    the table there now), under its lock, as two controllers of a plan share it, keeping the
    table's rows on sets the plan does not list; the rows written."""
    with table.lock(path, lambda: console.say(
            f"waiting for a controller to finish writing {path}")):
        now = table.read(path)
        rows = study.rows(found, store, now if earlier is None else earlier)
        rows = table.ordered(rows + study.beyond_plan(found, rows, now))
        table.write(rows, path)
    return rows


def _freeze(found: study.Study, store: Store, rows: list[dict]) -> None:
    """Freeze the plan's systems this store trained, and bring the frozen manifests of the
    others up to `rows` (the headline scores)."""
    scores: dict[str, dict] = {}
    for r in rows:
        cell = scores.setdefault(r["model"], {}).setdefault(r["testset"], {"n": int(r["n"])})
        cell[r["metric"]] = float(r["value"])
    written = kept = 0
    for job in found.trainings:
        if store.exists() and store.get_system(job.key) is not None:
            folder, new = frozen.write(job, store, scores.get(job.system_id, {}))
            written, kept = written + new, kept + (not new)
            if new:
                console.say(f"froze {job.system_id} -> {folder}")
        elif frozen.update(job, scores.get(job.system_id, {})):
            kept += 1
    click.echo(f"{written} systems frozen, {kept} already frozen, "
               f"{len(found.trainings) - written - kept} of the plan not trained in this store")


MATRIX_COLUMNS = ("approach", "group", "mode")  # then one column per benchmark
RUN_COLUMNS = ("approach", "benchmark", "system", "seed", "hyperparameters", "em", "f1",
               "selected", "selection")


@study_group.command("matrix")
@click.argument("plan", type=PLAN)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="the approach x benchmark EM table (the layout `qashift concurrence "
                   "--scores` reads)")
@click.option("--runs", "runs_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="also every run behind it, the selected ones marked")
@click.option("--table", "table_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="the study's results table: systems the store lacks are "
                                 "scored from it")
@LEDGER
@click.option("--keep", type=click.Choice(["approaches", "benchmarks"]), default="approaches",
              show_default=True, help="approaches: the approaches scored on every benchmark; "
              "benchmarks: the benchmarks every approach is scored on (a study under way)")
@settings_options
def matrix_command(plan, out, runs_path, table_path, ledgers, keep, data_dir,
                   workspace) -> None:
    """Write an approach-level study's score matrix from the store and the study's table
    (nothing is run): the approaches scored on every benchmark (or, with --keep benchmarks,
    every approach on the benchmarks all of them are scored on), by the plan's selection
    rule."""
    configure(data_dir, workspace)
    check_output_path(out, what="--out", columns=MATRIX_COLUMNS)
    if runs_path is not None:
        check_output_path(runs_path, what="--runs", columns=RUN_COLUMNS)
    found = study.load(plan)
    earlier = table.ledger(table_path, ledgers)
    made = approach_matrix(found, study.rows(found, Store.open_default(), earlier))
    if keep == "benchmarks":
        complete, kept = list(made.groups), made.complete_benchmarks()
        if len(kept) < 2:
            raise UserError(f"{plan}: fewer than two benchmarks have a score for every "
                            f"approach yet (qashift study status {plan}); nothing written")
    else:
        complete, kept = made.complete(), list(made.benchmarks)
        if not complete:
            raise UserError(f"{plan}: no approach has a score on every benchmark yet "
                            f"(qashift study status {plan}); nothing written")
    columns = (*MATRIX_COLUMNS, *kept)
    write_csv_atomic(out, columns, [
        {"approach": a, "group": made.groups[a], "mode": "approach-level",
         **{b: round(made.scores[a][b], 2) for b in kept}} for a in complete])
    if runs_path is not None:
        write_csv_atomic(runs_path, RUN_COLUMNS, [
            {**run, "hyperparameters": canonical_json(run["hyperparameters"]).decode(),
             "em": "" if run["em"] is None else round(run["em"], 4),
             "f1": "" if run["f1"] is None else round(run["f1"], 4),
             "selection": made.selection} for run in made.runs])
    left = [a for a in made.groups if a not in complete]
    waiting = [b for b in made.benchmarks if b not in kept]
    click.echo(f"wrote {len(complete)} approaches x {len(kept)} benchmarks to {out}"
               f" (selection: {made.selection})"
               + (f"; not yet scored on every benchmark: {', '.join(left)}" if left else "")
               + (f"; benchmarks not yet scored for every approach: {', '.join(waiting)}"
                  if waiting else ""))
