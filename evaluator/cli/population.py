"""`qashift population`: the own population's trends beside the study's, and with `--score`
a new test set scored by the frozen systems (all, or a chosen few) and its trend.

Thin: the systems are chosen from the plan (`study.narrowed`) and scored through
the one evaluation entry (`study.score_systems`), into the workspace's store; the
committed table changes only with `--write-table`. The population's reference scores come
from the store, where its committed table is recorded (`training.recorded`).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import click

from evaluator import study
from evaluator.api.results import Results
from evaluator.cli.base import COLUMNS, Command, RunnerChoice, in_root
from evaluator.cli.figures import source_frame
from evaluator.core import console
from evaluator.core.errors import UserError
from evaluator.core.files import check_output_path
from evaluator.data import testsets
from evaluator.store.store import Store
from evaluator.training import recorded, table
from evaluator.training.recorded import REFERENCE
from evaluator.training.run import stored


@click.command("population", cls=Command)
@click.option("--table", "table_path", type=click.Path(dir_okay=False, path_type=Path),
              **in_root("results/population.csv"),
              help="The own population's results table (qashift study run --table).")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Local data mirror with results.json and the leaderboard export (default: "
              "$QASHIFT_DATA_DIR, else ../shared/data).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              **in_root("figures/population"),
              help="Output folder of the fits and figures (with --score: only when given).")
@click.option("--bootstrap", type=click.IntRange(min=0), default=1000, show_default=True,
              help="Bootstrap resamples for the figures' bands (0: none).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--markdown", is_flag=True, help="Print the table as docs/population.md has it.")
@click.option("--score", "new_sets", multiple=True, metavar="TESTSET",
              help="Score the frozen or stored systems of --plan on this test set "
                   "(repeatable; nothing is trained) into the store, and fit its trend "
                   "against squad-dev-heldout.")
@click.option("--approach", "approaches", multiple=True, metavar="APPROACH",
              help="With --score: only this approach's systems (repeatable).")
@click.option("--systems", "system_ids", multiple=True, metavar="ID",
              help="With --score: only these systems (repeatable; shell patterns).")
@click.option("--per-approach", type=click.IntRange(min=1), default=None, metavar="N",
              help="With --score: the first N runnable systems of each approach.")
@click.option("--limit", type=click.IntRange(min=1), default=None, metavar="N",
              help="With --score: a seeded sample of N questions of each new set (its "
                   "results are samples: never the cell's, never in the table).")
@click.option("--write-table", is_flag=True,
              help="With --score: also add the new sets' rows to --table (the committed "
                   "table is otherwise left as it is).")
@click.option("--plan", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              **in_root("studies/population.yaml"),
              help="The population's plan (with --score).")
@click.option("--jobs", "-j", "parallel", type=click.IntRange(1, 64), default=2,
              show_default=True, help="Cells scored at once (with --score).")
@click.option("--runner", default="auto", show_default=True,
              type=RunnerChoice(),
              help="How the systems run (with --score).")
@click.pass_context
def population_command(ctx, table_path, data_dir, out, bootstrap, seed, markdown, new_sets,
                       approaches, system_ids, per_approach, limit, write_table, plan,
                       parallel, runner):
    """The own population's trend fits beside the study's published slopes and the
    leaderboard population's fits, with figures; served from --out while no input changed;
    then each approach's mean relative change in F1 under every ablation in the table.
    With --score NEW: frozen systems scored on a new test set first, and its trend."""
    from analysis.sources import published_data_dir  # lazy: pandas; fast --help
    from analysis.studies import population  # lazy: pandas; fast --help

    chooses = approaches or system_ids or per_approach or limit or write_table
    if chooses and not new_sets:
        raise UserError("--approach, --systems, --per-approach, --limit and --write-table "
                        "choose what --score scores; give --score TESTSET")
    if new_sets:
        drawn_to = out if ctx.get_parameter_source("out").name != "DEFAULT" else None
        if drawn_to is not None:
            check_output_path(drawn_to, what="--out", folder=True)
        _score(list(new_sets), plan, table_path, drawn_to, approaches, system_ids,
               per_approach, limit, write_table, parallel, runner, bootstrap, seed)
        return

    check_output_path(out, what="--out", folder=True)
    if not table_path.is_file():
        raise UserError(f"{table_path}: no such table (write it with `qashift "
                        f"study run studies/population.yaml --table {table_path}`)")
    published_files = population.published_inputs(published_data_dir(data_dir))
    key = population.inputs_key([table_path, *published_files],
                                {"bootstrap": bootstrap, "seed": seed})
    fitted = population.cached(out, key)
    if fitted is not None:
        click.echo(f"inputs unchanged: the fits in {out} are current", err=True)
    else:
        own = source_frame(str(table_path), data_dir, False, REFERENCE, ())
        published = source_frame("squadshifts-published", data_dir, False)
        fitted, written = population.write(own, published, out, key, bootstrap, seed)
        click.echo(f"wrote {len(written)} files to {out}", err=True)
    click.echo(_wrapped(population.census_line(population.census(table_path))) + "\n")
    ablated = population.ablations(table_path)
    if markdown:
        click.echo(population.markdown(fitted), nl=False)
        if len(ablated):
            click.echo("\n" + population.ablations_markdown(ablated), nl=False)
        return
    click.echo(population.text(fitted))
    if len(ablated):
        click.echo("\nrelative change in F1 under each ablation, in percent of the parent's "
                   "F1 (mean over an approach's\nsystems; a 95% t interval from 5 systems up):")
        click.echo(population.ablations_text(ablated))


def _wrapped(text: str) -> str:
    return "\n".join(textwrap.fill(line, COLUMNS, break_long_words=False,
                                   break_on_hyphens=False, subsequent_indent="  ")
                     for line in text.splitlines())


def _score(new_sets: list[str], plan: Path, table_path: Path, out: Path | None,
           approaches, system_ids, per_approach, limit, write_table: bool, parallel: int,
           runner: str, bootstrap: int, seed: int) -> None:
    """Score the chosen systems on the new sets (stored cells are found), then print and,
    with --out, draw each set's trend against the population's reference set."""
    from analysis.sources.tidy import frame  # lazy: pandas; fast --help
    from analysis.studies import population  # lazy: pandas; fast --help

    if write_table:
        check_output_path(table_path, what="--table", columns=table.COLUMNS)
        if limit:
            raise UserError("--write-table takes full runs: a sample's scores never enter "
                            "the table (leave out --limit)")
    sets = [testsets.get(t) for t in new_sets]
    for s in sets:
        if s.reference != REFERENCE:
            console.warn(f"{s.id} is compared against {s.reference or 'nothing'}, not the "
                         f"population's {REFERENCE}: its trend needs the systems' scores on "
                         f"that set (`reference: {REFERENCE}` in its testset.yaml puts it on "
                         f"the population's axis)")
    references = {s.id: s.reference or REFERENCE for s in sets}
    store = Store.open_default()
    found = study.with_testsets(study.load(plan), sets)
    chosen = study.narrowed(found, approaches=tuple(approaches), systems=tuple(system_ids),
                            per_approach=per_approach,
                            runnable=lambda job: stored(job, store, unpack=False) is not None)
    earlier = table.read(table_path)
    done, skipped = study.score_systems(chosen, sets, runner, store, parallel=parallel,
                                        limit=limit, say=console.say, earlier=earlier)
    if skipped:
        console.warn(f"{len(skipped)} systems chosen are neither frozen nor in this store and "
                     f"were not scored (e.g. {skipped[0]})")
    for o in done.report.failed:
        console.warn(f"{o.job.label} failed ({o.failure_class}): {o.message}")
    recorded.record(store, table_path)  # the population's reference scores, beside the runs
    results = Results(store)
    rows = []
    for o in done.report.outcomes:
        if o.result is None:
            continue
        reference = references[o.job.testset.id]
        x = results.cell(o.job.bundle.id, reference)
        if x is None:
            continue
        cell = o.result.to_dict()
        for metric in ("em", "f1"):
            score = cell[metric]
            rows += [{"model": o.job.bundle.id, "testset": o.job.testset.id, "metric": metric,
                      "value": score["value"], "lo": score["lo"], "hi": score["hi"],
                      "n": cell["n"], "reference": reference, "kind": "model"},
                     {"model": o.job.bundle.id, "testset": reference, "metric": metric,
                      "value": x[metric], "lo": x[f"{metric}_lo"], "hi": x[f"{metric}_hi"],
                      "n": x["n"], "reference": "", "kind": "model"}]
    df = frame(rows).drop_duplicates(["model", "testset", "metric"])
    placed = df["model"].nunique()
    sample = f", {limit} questions each" if limit else ""
    fitted, drawn = population.trends(df, new_sets, out, bootstrap if out else 0, seed)
    against = ", ".join(sorted(set(references.values())))
    click.echo(f"trend of {', '.join(new_sets)} against {against} over {placed} "
               f"system{'' if placed == 1 else 's'}"
               f"{sample}" + (f" ({len(drawn)} figures in {out})" if out else
                              " (--out DIR draws it)") + ":")
    click.echo(population.trend_text(fitted) if len(fitted) else
               "no trend: fewer than two systems have both scores")
    if write_table:
        _write_table(found, store, new_sets, table_path)
    else:
        console.say(f"results in the store at {store.workspace}; {table_path} is unchanged "
                    f"(--write-table adds them to it)")


def _write_table(found, store: Store, new_sets: list[str], table_path: Path) -> None:
    """The new sets' rows of the store into the table, every other row kept as it is."""
    with table.lock(table_path):
        earlier = table.read(table_path)
        fresh = [r for r in study.rows(found, store, earlier) if r["testset"] in new_sets]
        scored = {(r["model"], r["testset"]) for r in fresh}
        kept = [r for r in earlier if (r["model"], r["testset"]) not in scored]
        table.write(table.ordered(kept + fresh), table_path)
    console.say(f"{len(fresh)} rows of {', '.join(new_sets)} written to {table_path}, its "
                f"other {len(kept)} rows kept")
