"""`qashift trend -b BUNDLE`: where one model lands against the frozen population's trend.

Thin: the cells come from the one evaluation entry (`api.evaluate`: stored
cells are read, missing ones run; nothing is trained), the population from the store (its
committed table recorded there on first use, `training.recorded`), the placement from
`analysis.studies.trend`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import click

from evaluator.api import evaluation
from evaluator.api.evaluation import EvaluationConfig
from evaluator.cli.base import Command, RunnerChoice, in_root
from evaluator.core import console
from evaluator.core.errors import UserError
from evaluator.core.files import check_output_path
from evaluator.store.store import Store
from evaluator.training.recorded import BASE, REFERENCE

SHIFTS = ("new-wiki-test", "reddit-test", "amazon-test", "addonesent-heldout",
          "addsent-heldout")


@click.command("trend", cls=Command)
@click.option("--bundle", "-b", required=True, help="The model: a bundle or a trained system.")
@click.option("--testset", "-t", "sets", multiple=True, metavar="SET",
              help=f"A shifted set the population is scored on (repeatable; default: "
                   f"{', '.join(SHIFTS)}).")
@click.option("--table", "table_path", type=click.Path(dir_okay=False, path_type=Path),
              **in_root("results/population.csv"),
              help="The population's results table (qashift study run --table), recorded in "
                   "the store on first use.")
@click.option("--runner", type=RunnerChoice(),
              default="auto", show_default=True, help="How cells that are not stored run.")
@click.option("--level", type=float, default=0.95, show_default=True,
              help="Confidence level of every interval and band.")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Also draw each set's trend with the model marked into this folder.")
def trend_command(bundle, sets, table_path, runner, level, as_json, out):
    """Score a model on the population's reference set and shifted sets (stored cells are
    reused) and print its effective robustness against the population's trend."""
    from analysis.studies import placement, trend  # lazy: statsmodels, matplotlib; fast --help

    if out:
        check_output_path(out, what="--out", folder=True)
    sets = tuple(dict.fromkeys(sets or SHIFTS))
    if REFERENCE in sets:
        raise UserError(f"{REFERENCE} is the population's reference set, the x axis of every "
                        f"trend; name the shifted sets")
    store = Store.open_default()
    population = placement.population(store, table_path)
    population = population[population["model"] != bundle]  # the others, when it is one
    held = set(population["testset"])
    unknown = [s for s in sets if s not in held]
    if unknown:
        raise UserError(f"the population is not scored on {', '.join(unknown)}; its sets: "
                        f"{', '.join(sorted(held - {REFERENCE}))}")
    own = _own_rows(bundle, sets, runner, level, store)
    rows = trend.land(population, own, sets, "f1", level)
    if as_json:
        click.echo(json.dumps({"bundle": bundle, "reference": REFERENCE, "metric": "f1",
                               "level": level, "rows": [_json_row(r) for r in
                                                        rows.to_dict("records")]}, indent=2))
    else:
        click.echo(_table(rows, bundle, level))
    if out:
        for path in _figures(population, rows, out):
            console.say(f"wrote {path}")


def _own_rows(bundle: str, sets: tuple[str, ...], runner: str, level: float, store: Store):
    """The model's F1 cells on the reference set and `sets` as tidy rows: from the store, or
    run now; a failed cell is one line."""
    from analysis.studies import placement  # lazy: pandas; fast --help

    config = EvaluationConfig(bundles=(bundle,), testsets=(REFERENCE, *sets), runner=runner,
                              level=level)
    report = evaluation.evaluate(config, store, progress=console.progress).report
    for o in report.failed:
        raise UserError(f"{bundle} on {o.job.testset.id} failed ({o.failure_class}): "
                        f"{o.message}")
    return placement.own_frame(bundle, [o.result.to_dict() for o in report.outcomes])


def _table(rows, bundle: str, level: float) -> str:
    """The placement, one line a set, within 120 columns."""
    if rows.empty:
        return f"{bundle}: no set to place it on"
    pct = f"{100 * level:g}%"

    def span(lo: float, hi: float) -> str:
        return "[     -,      -]" if not (math.isfinite(lo) and math.isfinite(hi)) \
            else f"[{lo:6.2f}, {hi:6.2f}]"

    first = rows.iloc[0]
    lines = [f"{bundle} against the linear F1 trend of {int(first['n_population'])} systems "
             f"trained on {BASE}",
             f"its F1 on {REFERENCE} (the x axis): {first['x']:.2f} "
             f"{span(first['x_lo'], first['x_hi'])}"]
    lines.append(f"{'set':<19} {'F1':>6} {pct + ' interval':<16} {'trend':>6} "
                 f"{pct + ' band':<16} {'eff. rob.':>9} {pct + ' interval':<16} {'rank':>8}")
    for r in rows.itertuples():
        lines.append(f"{r.testset:<19} {r.y:6.2f} {span(r.y_lo, r.y_hi):<16} "
                     f"{r.predicted:6.2f} {span(r.predicted_lo, r.predicted_hi):<16} "
                     f"{r.effective_robustness:+9.2f} {span(r.er_lo, r.er_hi):<16} "
                     f"{r.rank:>3}/{r.n_population + 1:<4}")
    lines.append("eff. rob.: its F1 minus the trend's at its x; rank: among the population's "
                 "residuals (1: furthest above)")
    return "\n".join(lines)


def _json_row(row: dict) -> dict:
    """A row with `null` for what has no value (a bound of a cell without spread)."""
    out = {}
    for key, value in row.items():
        if isinstance(value, float) and not math.isfinite(value):
            value = None
        elif hasattr(value, "item"):
            value = value.item()
        out[key] = value
    return out


def _figures(population, rows, out: Path) -> list[Path]:
    from analysis import figures  # lazy: matplotlib; fast --help
    from analysis.studies import trend  # lazy: statsmodels, matplotlib; fast --help

    paths = []
    for row in rows.to_dict("records"):
        stem = out / f"trend-{row['model'].replace('/', '_')}-{row['testset']}"
        paths += figures.save(trend.figure(population, row), stem, formats=("png",))
    return paths
