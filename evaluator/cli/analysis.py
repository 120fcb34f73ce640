"""Analysis commands: `qashift figures`, `fit` and `report`. Thin: parse, call `analysis`,
print. The analysis modules load inside the commands, so `qashift --help` stays fast.
Default paths (the tables and plans that ship with the repository, and the figures/ folders
the docs point at) are in the project root (`project_root`), not the current directory."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import click

from evaluator.cli.base import Command
from evaluator.core import console, settings
from evaluator.core.errors import UserError
from evaluator.core.files import READABLE, check_output_path, write_atomic
from evaluator.data import testsets
from evaluator.runners.dispatch import CHOICES as RUNNER_CHOICES
from evaluator.runners.dispatch import Dispatcher
from evaluator.store.store import Store
from evaluator.training import study


def in_root(relative: str) -> dict:
    """A path option's default: `relative` inside the project root, read when the command
    runs (so that QASHIFT_ROOT applies), not in the current directory."""
    return {"default": lambda: settings.project_root() / relative,
            "show_default": f"{relative} in the project root"}


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


def _load(source, data_dir, exclude_extra_data, reference="squad-test", metrics=()):
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
    df = _load(source, data_dir, exclude_extra_data, reference, metrics)
    try:
        written = report.regenerate(df, out, n_boot=bootstrap, seed=seed,
                                    metrics=metrics or None)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    for note in fits.fit_notes(df, fits.fit_all(df, metrics=metrics or fits.METRICS, n_boot=0),
                               metrics=metrics or fits.METRICS):
        console.warn(note)
    if compare:
        other = _load(compare, data_dir, exclude_extra_data, reference, metrics)
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

    df = _load(source, data_dir, exclude_extra_data, reference, metrics)
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
    from analysis.sources import load_source, store_inputs  # lazy: pandas; fast --help
    from analysis.studies import approach_concurrence as ac  # lazy: pandas; fast --help

    check_output_path(out, what="--out", folder=True)
    approach_level = None
    if concurrence_scores is not None:
        try:
            approach_level = ac.site_page(ac.read_scores(concurrence_scores),
                                          concurrence_reference, bootstrap, seed)
        except ValueError as exc:
            raise UserError(f"--concurrence {concurrence_scores}: {exc}") from None

    runs, labels = None, {}
    if source == "store":
        records, runs, labels = store_inputs()
        df = load_source("store", data_dir, store_records=records)
        label = "our results store (official SQuAD v1.1 scoring of our own runs)"
    else:
        df = load_source(source, data_dir)
        label = ("SQuADShifts published results (Miller et al. 2020) joined to the SQuAD "
                 "v1.1 leaderboard" if source == "squadshifts-published" else
                 _shown_path(Path(source)))
    if df.empty and not (runs and runs.failures):
        raise UserError(f"no results in source {source!r}: run `evaluate` first, "
                        "or use --source squadshifts-published")
    try:
        index = site.build(df, out, source=label, runs=runs, labels=labels, n_boot=bootstrap,
                           seed=seed, approach_level=approach_level)
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


@click.command("reproduce", cls=Command)
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Local data mirror with results.json and the leaderboard export (default: "
              "$QASHIFT_DATA_DIR, else ../shared/data).")
@click.option("--joins", is_flag=True,
              help="Also print every join decision (paper tables and leaderboard).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Also write fits.csv and drops.csv here.")
def reproduce_command(data_dir, joins, out):
    """The SQuADShifts study's published fits and average drops beside ours, from data."""
    from analysis.studies import reproduction  # lazy: pandas; fast --help

    if out:
        check_output_path(out, what="--out", folder=True)
    df = _load("squadshifts-published", data_dir, False)
    fit_rows = reproduction.fit_comparison(df)
    drop_rows = reproduction.drop_comparison(df)
    click.echo("Trend fits: published (figure captions) vs ours\n"
               + fit_rows.drop(columns=["note"]).to_string(index=False, float_format="%.3f"))
    for note in fit_rows.loc[fit_rows["note"] != "", ["figure", "testset", "metric", "note"]] \
            .itertuples(index=False):
        click.echo(f"  {note.figure} {note.testset} {note.metric}: {note.note}")
    click.echo("\nAverage drops (original minus new): published (text) vs ours\n"
               + drop_rows.to_string(index=False, float_format="%.2f"))
    if joins:
        click.echo("\n" + df.attrs.get("coverage", ""))
    if out:
        write_atomic(out / "fits.csv", fit_rows.to_csv(index=False).encode(), READABLE)
        write_atomic(out / "drops.csv", drop_rows.to_csv(index=False).encode(), READABLE)
        click.echo(f"wrote {out / 'fits.csv'} and {out / 'drops.csv'}")


@click.command("concurrence", cls=Command)
@click.option("--reference", default=None,
              help="The benchmark every other is compared with (default: SQuAD 1.1 — All).")
@click.option("--subset", "subsets", multiple=True,
              help="all, non-pretrained, pre-trained, or 'BENCHMARK>VALUE' (repeatable; "
                   "default: all three groups).")
@click.option("--kendall", "variant", type=click.Choice(["a", "b", "c"]), default="b",
              show_default=True, help="Kendall tau variant.")
@click.option("--versus", multiple=True,
              help="Also the all-pairs matrix of these benchmarks against every other.")
@click.option("--threshold", type=float, default=0.8, show_default=True,
              help="Concurrence when tau exceeds this (Liu et al.: 0.8).")
@click.option("--bootstrap", type=click.IntRange(min=0), default=0, show_default=True,
              help="Resamples over approaches for intervals (an addition to the paper).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--knee", nargs=2, default=None, metavar="B1 B2",
              help="Least-squares lines of B2 on B1, overall and per group, and the "
                   "largest residuals.")
@click.option("--layout", is_flag=True, help="Print the paper's score tables in its layout.")
@click.option("--scores", "scores_path", type=click.Path(dir_okay=False, exists=True,
                                                         path_type=Path), default=None,
              help="A score table instead of the paper's: approach, [group], [mode], then "
                   "one column per benchmark (docs/analysis.md).")
@click.option("--paper", "plan", type=click.Path(dir_okay=False, exists=True,
                                                path_type=Path), default=None,
              help="With --scores: an approach-level study plan whose benchmarks name the "
                   "paper's columns of the same kind; prints ours beside the paper's.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Also write the report here (tables as CSV, the knee and tau figures); "
                   "kept while no input changes.")
def concurrence_command(reference, subsets, variant, versus, threshold, bootstrap, seed,
                        knee, layout, scores_path, plan, out):
    """Approach-level concurrence (Liu et al.) from the paper's own score tables."""
    from analysis.studies import approach_concurrence as ac  # lazy: pandas; fast --help

    if layout:
        click.echo(ac.render(), nl=False)
        return
    if out is not None:
        check_output_path(out, what="--out", folder=True)
    if plan is not None and not scores_path:
        raise UserError("--paper compares a score table (--scores) with the paper's; give "
                        "both")
    try:
        m = ac.read_scores(scores_path) if scores_path else ac.published()
    except ValueError as exc:
        raise UserError(str(exc)) from None
    reference = reference or (m.scores.columns[0] if scores_path else ac.SQUAD)
    try:
        ac.require_benchmarks(m, (reference, *versus, *(knee or ())))
    except ValueError as exc:
        raise UserError(str(exc)) from None
    try:
        chosen = ac.subsets(m, subsets)
    except ValueError as exc:
        raise UserError(f"--subset {exc}") from None
    source = scores_path or "Liu et al.'s tables"
    click.echo(f"mode: {m.mode} ({source}); Kendall tau-{variant}; concurrence: tau > "
               f"{threshold:g}")
    versus_rows = ac.versus_table(m, reference, chosen, variant, bootstrap, seed, threshold)
    for subset, part in versus_rows.groupby("subset", sort=False):  # one block a subset: the
        shown = ac.versus_display(part)  # table stays within 120 columns
        shown.columns = [c.removesuffix(f" ({subset})") for c in shown.columns]
        click.echo(f"\nvs {reference}, {subset} approaches\n" + shown.to_string(index=False))
    if bootstrap:
        click.echo(f"\nintervals: 95% {ac.BOOTSTRAP_LABEL}, {bootstrap} resamples, "
                   f"seed {seed}")
    for label, which in chosen if versus else ():
        for statistic in ("tau", "r"):
            matrix = ac.all_pairs(m, list(versus), list(m.scores.columns), statistic, which,
                                  variant)
            click.echo(f"\n{statistic} ({label}) vs {', '.join(versus)}\n"
                       + matrix.to_string(float_format="%.2f", na_rep="n/a"))
    paper_of = None
    if plan is not None:
        paper_of = ac.paper_columns(plan)
        try:
            sides = ac.side_by_side(m, paper_of, reference, variant)
        except ValueError as exc:
            raise UserError(f"{plan}: {exc}") from None
        for w in ("all", *ac.GROUPS):  # one block a group: within 120 columns
            columns = ["benchmark", *(["paper's benchmark", "r here", "r paper"]
                                      if w == "all" else []),
                       f"n here ({w})", f"tau here ({w})", f"tau paper ({w})"]
            part = sides[columns].set_axis([c.removesuffix(f" ({w})") for c in columns],
                                           axis=1)
            click.echo(f"\nbeside Liu et al. (theirs vs {ac.SQUAD}), {w} approaches\n"
                       + part.to_string(index=False, float_format="%.2f", na_rep="n/a"))
    if knee:
        found = ac.knee(m, *knee)
        click.echo(f"\nleast squares of {knee[1]} on {knee[0]}")
        for name, line in found["lines"].items():
            click.echo(f"  {name}: slope {line['slope']:.3f}, intercept "
                       f"{line['intercept']:.2f} (n={line['n']})")
        for approach, residual in found["largest_residuals"]:
            click.echo(f"  largest residual: {approach} {residual:+.2f} EM")
    if out is not None:
        key = ac.report_key(scores_path, plan, {
            "reference": reference, "subsets": [label for label, _ in chosen],
            "kendall": variant, "threshold": threshold, "bootstrap": bootstrap, "seed": seed})
        if ac.report_current(out, key):
            click.echo(f"\ninputs unchanged: the report in {out} is current", err=True)
        else:
            written = ac.write_report(m, out, key, reference, chosen, variant, threshold,
                                      bootstrap, seed, paper_of)
            click.echo(f"\nwrote {len(written)} files to {out}", err=True)


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
              type=click.Choice(RUNNER_CHOICES),
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
            _score_strata(plan, testset_names, held, store, parallel, runner,
                          lambda: fold(final=False) if table_path else None)
    scores, features, references = fold()
    try:
        written, summary = stratified.write(scores, features, references, out)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    click.echo("Mean drop over systems: observed vs predicted by each stratification\n"
               + summary.to_string(index=False, float_format="%.2f"))
    click.echo(f"wrote {len(written)} files to {out}")


def _score_strata(plan: Path, only: tuple[str, ...], held: set[tuple[str, str]], store: Store,
                  parallel: int, runner: str, saved: Callable[[], object]) -> None:
    """Score the plan's whole-split systems on its new sets and their references, skipping
    the cells `held` (resumable: cells are stored; nothing is trained); `saved` after each
    system."""
    found = study.load(plan)
    new = [t for t in found.testsets
           if t.reference and (t.id in only if only else t.kind != "derived")]
    if not new:
        raise UserError(f"{plan}: no test set with a reference to score"
                        + (f" among {', '.join(only)}" if only else ""))
    sets = list({t.id: t for t in [*(testsets.get(t.reference) for t in new), *new]}.values())
    whole = replace(found, trainings=tuple(j for j in found.trainings if j.size is None))
    console.say(f"{plan}: {len(whole.trainings)} systems trained on a whole split, on "
                f"{', '.join(t.id for t in sets)}")
    done, skipped = study.score_frozen(whole, sets, Dispatcher(runner, warn=console.warn),
                                       store, parallel=parallel, say=console.say,
                                       held=lambda system, testset: (system, testset) in held,
                                       saved=saved)
    if skipped:
        console.warn(f"{len(skipped)} systems of {plan} are neither frozen nor in this store "
                     f"and were not scored (e.g. {skipped[0]})")
    console.say(f"{plan}: {done} cells scored or found")


@click.command("families", cls=Command)
@click.option("--table", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              **in_root("results/awadalla-2022.csv"),
              help="Published systems with a family column (Awadalla et al. 2022's release).")
@click.option("--population", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              **in_root("results/population.csv"),
              help="The own population's table, drawn beside them.")
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
    published = load_source(str(table), None, reference="squad-dev")
    own = load_source(str(population), None)
    try:
        theirs = families.family_robustness(
            published, [t for t, _ in families.SHIFTS], baseline)
        ours = families.family_robustness(
            own, [o for _, o in families.SHIFTS], population_baseline)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    out.mkdir(parents=True, exist_ok=True)
    for label, frame in ((f"{table} (against {baseline})", theirs),
                         (f"{population} (against {population_baseline})", ours)):
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
