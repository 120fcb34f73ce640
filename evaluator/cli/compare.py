"""`qashift compare -b A -b B -t SET [--against ORIGINAL]`: two systems on the same questions.

Reads both cells' results (the one rule of `store.queries`) and their stored per-question
scores, pairs them by question, and reports the paired difference in EM and F1 (bootstrap
interval, paired t-test, McNemar's exact test for EM); with `--against`, also whether A's
drop from the original set to SET differs from B's. `--diff FILE.csv` writes the questions
where the two systems' answers differ (`qashift results diff A B -t SET` lists them): a table
for people, so an answer that a spreadsheet would run as a formula is written as text, and
never into the workspace or over a file that is not such a table (`check_output_path`).
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from evaluator import scoring
from evaluator.api.results import Results
from evaluator.core.errors import UserError
from evaluator.core.files import check_output_path, write_csv_atomic
from evaluator.data import testsets
from evaluator.scoring.squad_v1 import group_of, score_question
from evaluator.stats.intervals import check_level, level_text
from evaluator.store.queries import is_recorded
from evaluator.store.store import Store
from evaluator.store.units import load_units

LEVEL_HELP = "confidence level of the intervals (strictly between 0 and 1, as for evaluate)"


def paired_units(store: Store, a: str, b: str, testset: str) -> tuple[dict, dict, list[str]]:
    """Both cells' rows, and the question ids both were scored on, in A's order."""
    results = Results(store)
    rows = {}
    for name in (a, b):
        row = results.cell(name, testset)
        if row is None:
            raise UserError(f"no stored result for {name} x {testset}; run evaluate first")
        if is_recorded(row):
            raise UserError(f"{name} x {testset} is recorded from {row['source']}, without "
                            f"per-question scores to pair; run `evaluate -b {name} -t "
                            f"{testset}` first")
        rows[name] = row
    if rows[a]["testset_sha256"] != rows[b]["testset_sha256"]:
        raise UserError(f"{a} and {b} were scored on different bytes of {testset}; "
                        f"evaluate both again")
    units = {name: {u.id: u for u in load_units(store, rows[name])} for name in (a, b)}
    ids = [i for i in units[a] if i in units[b]]
    if not ids:
        raise UserError(f"{a} and {b} share no question of {testset}")
    return rows, units, ids


def _scores(units: dict, name: str, ids: list[str], metric: str) -> list[float]:
    return [float(getattr(units[name][i], metric)) for i in ids]


@click.command("compare")
@click.option("--bundle", "-b", "names", multiple=True, required=True,
              help="a bundle or system id; give two (A, then B)")
@click.option("--testset", "-t", required=True, help="the set both were scored on")
@click.option("--against", default=None,
              help="an original set both were scored on: also compare their drops to -t")
@click.option("--bootstrap", type=click.IntRange(min=100), default=10_000, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--level", type=float, default=0.95, show_default=True, help=LEVEL_HELP)
@click.option("--diff", "diff_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="write the questions where the answers differ (CSV; a new "
              "file outside the workspace, or one --diff wrote)")
@click.option("--json", "as_json", is_flag=True)
def compare_command(names, testset, against, bootstrap, seed, level, diff_path,
                    as_json) -> None:
    """Is A better than B on the same questions, and does it lose more or less under shift?"""
    if len(names) != 2:
        raise UserError(f"compare takes two systems (-b A -b B), got {len(names)}")
    a, b = names
    try:
        check_level(level)  # the check `evaluate` makes of its --level
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if diff_path is not None:  # said now, before the bootstrap
        check_output_path(diff_path, what="--diff", columns=DIFF_COLUMNS)
    from evaluator.stats import paired as paired_stats  # lazy: numpy, scipy; fast start

    store = Store.open_default()
    rows, units, ids = paired_units(store, a, b, testset)
    out: dict = {"a": a, "b": b, "testset": testset, "n": len(ids), "paired": [], "drop": []}
    for metric in ("em", "f1"):
        out["paired"].append(paired_stats.paired(
            metric, _scores(units, a, ids, metric), _scores(units, b, ids, metric),
            n_boot=bootstrap, seed=seed, level=level).to_dict())
        out["paired"][-1]["unpaired_half_width"] = paired_stats.unpaired_half_width(
            _scores(units, a, ids, metric), _scores(units, b, ids, metric), level)
    if against:
        _, orig_units, orig_ids = paired_units(store, a, b, against)
        out["against"] = against
        for metric in ("em", "f1"):
            out["drop"].append(paired_stats.drop_difference(
                metric, (_scores(orig_units, a, orig_ids, metric),
                         _scores(orig_units, b, orig_ids, metric)),
                (_scores(units, a, ids, metric), _scores(units, b, ids, metric)),
                n_boot=bootstrap, seed=seed, level=level).to_dict())
    if diff_path is not None:
        count = _write_diff(store, rows, units, ids, a, b, testset, diff_path)
        out["diff_file"], out["differing"] = str(diff_path), count
    if as_json:
        click.echo(json.dumps(out, indent=1))
        return
    pct = level_text(level)
    units_of = scoring.get(rows[a]["scorer"]).units  # questions, or adversarial-min's groups
    click.echo(f"{a} vs {b} on {testset}: {len(ids)} {units_of} scored for both")
    for p in out["paired"]:
        line = (f"  {p['metric'].upper():<3} {p['a']:7.3f} vs {p['b']:7.3f}: difference "
                f"{p['diff']:+.3f} [{p['lo']:+.3f}, {p['hi']:+.3f}] ({pct} paired bootstrap; "
                f"unpaired it would be ±{p['unpaired_half_width']:.3f}), "
                + (f"paired t p = {p['t_p']:.3g}" if p["t_p"] is not None
                   else "no paired t-test (one question)"))
        if p["metric"] == "em":
            line += (f", McNemar exact p = {p['mcnemar_p']:.3g} ({p['a_only']} right only "
                     f"for A, {p['b_only']} only for B)")
        click.echo(line)
    for d in out["drop"]:
        click.echo(f"  drop {against} -> {testset}, {d['metric'].upper()}: A {d['drop_a']:+.3f}, "
                   f"B {d['drop_b']:+.3f}; A loses {d['diff']:+.3f} more "
                   f"[{d['lo']:+.3f}, {d['hi']:+.3f}] ({pct} bootstrap within each set)")
    if diff_path is not None:
        click.echo(f"  {out['differing']} questions answered differently: {diff_path}")


DIFF_COLUMNS = ["id", "group", "gold", "answer_a", "em_a", "f1_a", "answer_b", "em_b", "f1_b"]



def differing(store: Store, rows: dict, units: dict, ids: list[str], a: str, b: str,
              testset: str) -> list[dict]:
    """The questions where A's and B's answers differ, with the gold answers (when the set's
    data here is the one both were scored on), both answers and both scores. On a set scored
    by question groups, the questions of the groups both were scored on, each with its group
    and its own scores, which only that gold gives (blank without it)."""
    predictions = {name: json.loads(store.get_object(rows[name]["predictions_sha256"]) or b"{}")
                   for name in (a, b)}
    questions = {}
    try:
        here = testsets.get(testset)
        if here.sha256 == rows[a]["testset_sha256"]:
            questions = {q.id: q for q in here.load().questions}
    except UserError:
        pass  # the data is not here: the answers and the stored scores are still given
    grouped = scoring.get(rows[a]["scorer"]).combine is not None
    members = {i: [i] for i in ids}
    if grouped:
        members = {}
        for qid in questions or dict.fromkeys([*predictions[a], *predictions[b]]):
            members.setdefault(group_of(qid), []).append(qid)
    out = []
    for unit in ids:
        for i in members.get(unit, []):
            pa, pb = predictions[a].get(i), predictions[b].get(i)
            if pa == pb:
                continue
            q = questions.get(i)
            row = {"id": i, "group": unit if grouped else "",
                   "gold": " | ".join(q.answers) if q else ""}
            for side, name, answer in (("a", a, pa), ("b", b, pb)):
                if not grouped:  # the question is the unit: its stored scores
                    em, f1 = units[name][i].em, units[name][i].f1
                elif q is not None:
                    em, f1 = score_question(answer, q.answers)
                else:
                    em = f1 = None
                row.update({f"answer_{side}": answer if answer is not None else "",
                            f"em_{side}": "" if em is None else em,
                            f"f1_{side}": "" if f1 is None else round(f1, 4)})
            out.append(row)
    return out


def _write_diff(store: Store, rows: dict, units: dict, ids: list[str], a: str, b: str,
                testset: str, path: Path) -> int:
    out = differing(store, rows, units, ids, a, b, testset)
    write_csv_atomic(check_output_path(path, what="--diff", columns=DIFF_COLUMNS), DIFF_COLUMNS,
                     out, for_people=True)
    return len(out)
