"""Click commands for derived and challenge sets, registered on the `qashift` group.

`testsets_derive` belongs in the `testsets` group (`qashift testsets derive ID...`). It
generates a derived set (or takes it from the cache) and prints its hash and provenance.
`challenge` is a group of its own: `qashift challenge report` prints the relative-change
table of every ablation against its parent, and the rEM_k / DICE table of the SAM sets, for
the stored results of the bundles you name. Nothing is run here; `evaluate` does that.
"""

from __future__ import annotations

import json

import click

from analysis.studies.challenge import ablation_table, dice_table, render_markdown
from evaluator.core import console
from evaluator.core.errors import UserError
from evaluator.data import testsets
from evaluator.store.store import Store
from evaluator.training import systems


@click.command("derive")
@click.argument("names", nargs=-1, required=True)
def testsets_derive(names) -> None:
    """Generate derived test sets (or find them cached) and show their provenance."""
    chosen = [ts for ts in testsets.resolve(list(names)) if ts.derive is not None]
    if not chosen:
        raise UserError("none of those test sets has a derive: block")
    for ts in chosen:
        made = ts.derived()
        stats = made.provenance.get("stats", {})
        click.echo(f"{ts.id}: sha256 {made.sha256}\n  file {made.path}\n"
                   f"  provenance {made.path.parent / 'provenance.json'}\n"
                   f"  stats {json.dumps(stats, sort_keys=True)[:300]}")


@click.group("challenge")
def challenge() -> None:
    """Ablation and SAM challenge-set reports from stored results."""


@challenge.command("report")
@click.option("--bundle", "-b", "bundle_names", multiple=True, required=True,
              help="submission id (repeatable; 'all')")
@click.option("--k", default=5, show_default=True, help="rEM_k word limit")
@click.option("--questions-from", "questions_from", default=None, metavar="TESTSET",
              help="score ablations only on the parent questions that are also in TESTSET "
                   "(e.g. squad-dev-heldout for a model trained on the rest of squad-dev)")
@click.option("--json", "as_json", is_flag=True, help="print a machine-readable document")
def challenge_report(bundle_names, k, questions_from, as_json) -> None:
    """Relative change of every ablation vs its parent, and DICE on the SAM sets (Markdown)."""
    store = Store.open_default()
    if not store.exists():
        raise UserError(f"no results store at {store.db_path}; run evaluate first")
    ids = [b.id for b in systems.resolve_bundles(list(bundle_names), store)]  # folders, trained
    only = None
    if questions_from is not None:
        only = {q.id for q in testsets.get(questions_from).load().questions}
    ablations, sam = ablation_table(store, ids, only), dice_table(store, ids, k)
    if not ablations and not sam["bundles"]:
        raise UserError("no stored results for derived or SAM sets of these bundles; "
                        "run evaluate on them first")
    if as_json:
        def plain(value):
            return value.to_dict() if hasattr(value, "to_dict") else value
        doc = {"ablations": ablations, "sam": {
            **{k2: v for k2, v in sam.items() if k2 not in ("bundles", "micro_average")},
            "micro_average": plain(sam["micro_average"]),
            "bundles": {b: {key: ({str(k3): plain(p) for k3, p in val.items()}
                                  if isinstance(val, dict) else plain(val))
                            for key, val in v.items()} for b, v in sam["bundles"].items()}}}
        click.echo(json.dumps(doc, indent=2))
        return
    click.echo(render_markdown(ablations, sam))
    for m in sam["missing"]:
        console.warn(f"not reported: {m['bundle']} has no stored result on every one of "
                     f"{', '.join(m['testsets'])}")
