"""`qashift bundles`: list and show submissions, import the SQuAD leaderboard and complete
its entries (`export-onnx` lives in cli.hfqa)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import click

from evaluator.bundles import spec as bundles
from evaluator.bundles.leaderboard import complete, import_export, lacks
from evaluator.cli.base import Group
from evaluator.core import console, settings
from evaluator.core.errors import UserError
from evaluator.core.folders import unknown_name
from evaluator.store.store import Store
from evaluator.training import systems


@click.group("bundles", cls=Group, lazy={"export-onnx": "evaluator.cli.hfqa:export_onnx"})
def bundles_group() -> None:
    """List and inspect submissions."""


@bundles_group.command("list")
@click.option("--runnable", "show", flag_value="runnable", help="only bundles that run here")
@click.option("--awaiting", "show", flag_value="awaiting", help="only bundles still lacking "
              "their program files")
@click.option("--all", "show", flag_value="all", help="every bundle")
def bundles_list(show) -> None:
    """The submissions that run here, those that need something first (an approach's
    training, a model's weights) and what; `--awaiting` lists the leaderboard entries still
    lacking their program files."""
    good, broken = bundles.scan()
    if not good and not broken:
        console.warn(bundles.none_here())
    trained = Counter(r["approach"] for r in systems.trained_rows(Store.open_default()))
    rows, counts = [], {"runnable": 0, "trained": 0, "blocked": 0, "awaiting": 0}
    for name in sorted(good):
        b = good[name]
        if b.status != "ready":
            state, what = "awaiting", "lacks " + lacks(b.status, b.command, b.environment)
        elif b.kind == "approach" and trained[b.id]:
            state, what = "trained", f"its {trained[b.id]} trained systems run on any set " \
                                     f"(qashift systems)"
        elif (why := b.blocked()) is not None:
            state, what = "blocked", why
        else:
            state = "runnable"
            what = ", ".join(sorted(b.predictions)) if b.kind == "predictions" else "any set"
        counts[state] += 1
        shown = {None: ("runnable", "trained", "blocked"),
                 "all": ("runnable", "trained", "blocked", "awaiting"),
                 "runnable": ("runnable", "trained"), "awaiting": ("awaiting",)}[show]
        if state in shown:
            rows.append((b.id, b.kind, state if state != "awaiting" else b.status, what))
    width = max([len(r[0]) for r in rows] + [len("id")])
    click.echo(f"{'id':<{width}} {'kind':<12} {'status':<17} runs on / needs")
    for row in rows:
        click.echo(f"{row[0]:<{width}} {row[1]:<12} {row[2]:<17} {row[3]}")
    for name in sorted(broken):
        click.echo(f"{name:<{width}} BROKEN: {broken[name]}")
    runnable_systems = sum(trained[name] for name in good if good[name].kind == "approach")
    click.echo(f"{counts['runnable']} runnable here, {runnable_systems} trained systems of "
               f"{counts['trained']} approaches, {counts['blocked']} need something first, "
               f"{counts['awaiting']} lack program files"
               + (" (--awaiting)" if show is None and counts["awaiting"] else "")
               + (f", {len(broken)} broken (qashift bundles show ID says why)" if broken else ""))


@bundles_group.command("import-leaderboard")
@click.option("--export", "export_path", type=click.Path(dir_okay=False, exists=True),
              help="the leaderboard export (default: squad-leaderboard/out-v1.1.json in the "
                   "data mirror)")
@click.option("--overwrite", is_flag=True, help="rewrite folders that already exist")
def bundles_import_leaderboard(export_path, overwrite) -> None:
    """Create a bundle folder per SQuAD v1.1 leaderboard entry, awaiting its program."""
    if export_path is None:
        candidates = [m / "squad-leaderboard" / "out-v1.1.json" for m in settings.mirror_dirs()]
        found = [c for c in candidates if c.is_file()]
        if not found:
            raise UserError("leaderboard export not found: pass --export PATH or --data-dir")
        export_path = found[0]
    written, kept = import_export(Path(export_path), settings.submissions_dir(), overwrite)
    click.echo(f"{written} bundle folders written, {kept} already present, under "
               f"{settings.submissions_dir()}")


@bundles_group.command("complete")
@click.argument("name")
@click.argument("program_dir", type=click.Path(file_okay=False, exists=True))
@click.option("--command", "command", required=True,
              help="how the program runs, with {input} and {output}, e.g. "
                   "'python predict.py {input} {output}'")
@click.option("--image", help="its image, pinned by digest (name@sha256:...)")
@click.option("--dockerfile", help="a Dockerfile among the program files to build instead")
@click.option("--requirements", help="a pinned requirements file among the program files")
def bundles_complete(name, program_dir, command, image, dockerfile, requirements) -> None:
    """Make a waiting leaderboard bundle runnable from its CodaLab bundle's files."""
    folders = bundles.available()
    if name not in folders:
        raise unknown_name("bundle", name, folders)
    complete(folders[name], Path(program_dir), command, image=image, dockerfile=dockerfile,
             requirements=requirements)
    bundle = bundles.get(name)
    click.echo(f"{name} is ready: kind {bundle.kind}, digest {bundle.digest[:12]}")


@bundles_group.command("show")
@click.argument("name")
def bundles_show(name: str) -> None:
    """A bundle's or a trained system's facts: kind, digest, command, resources, metadata,
    and a system's approach, weights and frozen folder (a broken folder: what is wrong)."""
    if name == "all":
        raise UserError("bundles show takes one id; `qashift bundles list` lists them all")
    store = Store.open_default()
    [b] = systems.resolve_bundles([name], store)  # a folder or a trained system, as evaluate
    click.echo(f"{'id':>16}: {b.id}\n{'name':>16}: {b.name}\n{'kind':>16}: {b.kind}\n"
               f"{'digest':>16}: {b.digest}")
    if b.weights_digest:  # a trained system: its weights, and the artifact that holds them
        kept = [r for r in systems.trained_rows(store) if r["key"] == b.system_key]
        frozen = kept[-1].get("frozen") if kept else None
        click.echo(f"{'weights_digest':>16}: {b.weights_digest}\n"
                   f"{'weights':>16}: {b.model['path']}\n"
                   f"{'frozen':>16}: {frozen or 'no: trained in this store, kept in it'}")
    if b.command:
        click.echo(f"{'command':>16}: {b.command}")
    click.echo(f"{'resources':>16}: {b.resources}")
    if b.reference_scores:
        click.echo(f"{'reference':>16}: {b.reference_scores}")
    for k, v in b.metadata.items():
        click.echo(f"{k:>16}: {v}")
