"""`qashift train`: train an approach on a training split into a frozen system (or find it
stored), resuming a killed attempt from its last checkpoint."""

from __future__ import annotations

from pathlib import Path

import click
import yaml

from evaluator.api.results import Results
from evaluator.bundles import spec as bundles
from evaluator.cli.base import RunnerChoice, configure, settings_options
from evaluator.core import console
from evaluator.core.errors import RunFailure, UserError
from evaluator.core.files import check_output_path
from evaluator.data import testsets
from evaluator.runners.dispatch import Dispatcher
from evaluator.store.store import Store
from evaluator.training import frozen, table
from evaluator.training.job import TrainJob
from evaluator.training.run import progress_text, train
from evaluator.training.systems import trained_rows


def _overrides(pairs: tuple[str, ...]) -> dict:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UserError(f"--set takes KEY=VALUE, got {pair!r}")
        out[key] = yaml.safe_load(value)
    return out


def _progress(doc: dict) -> None:
    console.progress("  " + progress_text(doc))


@click.command("train")
@click.option("--approach", "-a", required=True, help="an approach bundle (kind approach)")
@click.option("--split", "-t", "split_id", required=True,
              help="a training split, e.g. squad-dev-train")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--size", type=click.IntRange(1), default=None,
              help="train on a seeded downsample of this many questions")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="a hyperparameter other than the approach's default (repeatable)")
@click.option("--runner", default="auto", show_default=True,
              type=RunnerChoice(),
              help="auto = docker when a daemon answers; slurm = one Slurm job (docs/slurm.md)")
@click.option("--device", default="auto", show_default=True,
              type=click.Choice(["auto", "cpu", "gpu"]))
@click.option("--rerun", is_flag=True, help="train again even if the system is stored")
@settings_options
def train_command(approach, split_id, seed, size, overrides, runner, device, rerun, data_dir,
                  workspace) -> None:
    """Train APPROACH on SPLIT; prints the system id to evaluate (evaluate -b ID -t ...)."""
    configure(data_dir, workspace)
    job = TrainJob(bundles.get(approach), testsets.get(split_id), seed, size,
                   _overrides(overrides))
    if job.approach.kind != "approach":
        raise UserError(f"{approach} is a {job.approach.kind} bundle, not an approach")
    dispatcher = Dispatcher(runner, warn=console.warn)
    console.say(f"{job.system_id}: training on {job.split.id} ({dispatcher.backend})")
    try:
        system = train(job, dispatcher, Store.open_default(), device=device, rerun=rerun,
                       progress=_progress)
    except RunFailure as failure:
        raise UserError(f"{job.system_id} failed ({failure.failure_class}): {failure}"
                        ) from None
    finally:
        console.finish()  # the epoch line a terminal showed in place
    row = system.row
    how = "stored earlier" if system.cached else f"trained in {row['wall_s']:.0f} s"
    click.echo(f"{job.system_id}  {how}, weights {row['weights_digest'][:12]}, "
               f"device {row['device']}")


def _headlines(found: list[dict], store: Store, sets: dict) -> list[tuple]:
    """Per system: the questions it trained on, and its F1 on the held-out set of its split
    (the set whose `train:` the split is, or its first parent is), with that set's name:
    the store's result of the cell, else the score its frozen manifest states; (questions,
    None, "") without one."""

    held_out = {t.train: t.id for t in sets.values() if t.train}
    for name, split in sets.items():  # a split grown from another (plus extra data): its own
        parent = split.derive.parent if split.derive else None
        while name not in held_out and parent in sets:
            if parent in held_out:
                held_out[name] = held_out[parent]
            parent = sets[parent].derive.parent if sets[parent].derive else None
    stated = {m["folder"]: m.get("scores") or {} for m in frozen.manifests()}
    results = Results(store)
    out = []
    for s in found:
        split = sets.get(s["split"])
        questions = s["train_size"] or (split.questions if split else "?")
        target = held_out.get(s["split"])
        if target is None:
            out.append((questions, None, ""))
            continue
        row = results.cell(s["system"], target, recorded=False)
        f1 = row["f1"] if row else (stated.get(s.get("frozen"), {}).get(target) or {}).get("f1")
        out.append((questions, f1, target if f1 is not None else ""))
    return out


@click.command("systems")
@click.option("--table", "table_path", type=click.Path(dir_okay=False), default=None,
              help="also write the results table of every trained system to this CSV "
                   "(rows it already holds of systems this store lacks are kept; outside "
                   "the workspace, not a link)")
def systems_command(table_path) -> None:
    """The trained systems (the store's and frozen/'s): family, questions trained on, F1 on
    the held-out set of their split; optionally their results table (CSV)."""
    earlier = table.read(Path(table_path)) if table_path else []  # not a table: one line
    if table_path:
        check_output_path(Path(table_path), what="--table", columns=table.COLUMNS)
    store = Store.open_default()
    found = trained_rows(store)
    if not found:
        console.say("no trained systems: none in the store and none frozen in the repository "
                    "(train one with `qashift train -a APPROACH -t SPLIT`)")
    good, _ = testsets.scan()
    approaches, _ = bundles.scan()
    width = max([len(s["system"]) for s in found] + [6])
    click.echo(f"{'system':<{width}}  {'family':<14} {'trained':>7}  {'F1 held-out':<23}  kept")
    for s, (questions, f1, where) in zip(found, _headlines(found, store, good), strict=True):
        family = approaches[s["approach"]].metadata.get("family") \
            if s["approach"] in approaches else None
        click.echo(f"{s['system']:<{width}}  {family or '-':<14} {questions:>7}  "
                   f"{(f'{f1:5.2f} ' + where) if f1 is not None else '-':<23}  "
                   f"{'frozen' if s.get('frozen') else 'store'}")
    if table_path:
        rows = table.rows(store, Results(store).rows(),
                          {k: t.reference for k, t in good.items()},
                          {k: b.metadata.get("family") for k, b in approaches.items()},
                          {k: t.train for k, t in good.items()})
        mine = {r["model"] for r in rows}
        kept = [r for r in earlier if r["model"] not in mine]  # results of another store
        table.write(table.ordered(rows + kept), Path(table_path))
        click.echo(f"wrote {len(rows) + len(kept)} rows to {table_path}"
                   + (f" ({len(kept)} kept from the file: systems this store lacks)"
                      if kept else ""))
