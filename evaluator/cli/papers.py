"""`qashift reproduce` and `concurrence`: the papers' own tables, analysed from data (the
SQuADShifts study's fits and drops; Liu et al.'s approach-level concurrence). Thin: parse,
call `analysis`, print."""

from __future__ import annotations

from pathlib import Path

import click

from evaluator.cli.base import Command
from evaluator.cli.figures import source_frame
from evaluator.core.errors import UserError
from evaluator.core.files import READABLE, check_output_path, write_atomic


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
    df = source_frame("squadshifts-published", data_dir, False)
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


