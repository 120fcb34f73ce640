"""Frozen systems by name: `APPROACH@SPLIT[~SIZE]/sSEED[/hHASH]` -> the trained Bundle."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable

from evaluator.bundles import spec as bundles
from evaluator.bundles.spec import Bundle
from evaluator.core.errors import UserError
from evaluator.data import testsets
from evaluator.jobs.job import parse_system_id
from evaluator.store.store import Store
from evaluator.training import frozen
from evaluator.training.job import TrainJob
from evaluator.training.run import stored


def job_for(system_id: str, store: Store | None = None) -> TrainJob:
    """The train cell a system id names (a /hHASH variant is looked up in the store)."""
    parts = parse_system_id(system_id)
    if parts is None:
        raise UserError(f"{system_id!r} is not a system id: APPROACH@SPLIT[~SIZE]/sSEED, e.g. "
                        f"logreg-rajpurkar@squad-dev-train/s0")
    approach = bundles.get(parts["approach"])
    if approach.kind != "approach":
        raise UserError(f"{approach.id} is a {approach.kind} bundle, not an approach")
    split = testsets.get(parts["split"])
    overrides: dict = {}
    if parts["hp"]:
        rows = store.systems(system_id) if store is not None and store.exists() else []
        if not rows and (row := frozen.row_named(system_id)) is not None:
            rows = [row]
        if not rows:
            raise UserError(f"no trained system {system_id} in the store: its hyperparameter "
                            f"hash cannot be undone; train it with qashift train --set ...")
        stored_hp = json.loads(rows[-1]["hyperparameters"])
        defaults = approach.hyperparameters.get("defaults") or {}
        overrides = {k: v for k, v in stored_hp.items() if defaults.get(k) != v}
    return TrainJob(approach, split, parts["seed"], parts["size"], overrides)


def trained_rows(store: Store) -> list[dict]:
    """Every trained system this machine can run: the repository's frozen artifacts (a row
    with `frozen` naming its folder), and the store's systems of other train keys; a frozen
    system is what runs for its key (`run.stored`), whatever the store holds."""
    pinned = [frozen.row_of(m) for m in frozen.manifests()]
    keys = {r["key"] for r in pinned}
    rows = [r for r in (store.systems() if store.exists() else []) if r["key"] not in keys]
    return sorted(rows + pinned, key=lambda r: (r["system"], r["created_at"] or 0))


def system_metadata(store: Store, bundle_folders: dict | None = None,
                    ids: Iterable[str] = ()) -> dict[str, dict]:
    """What a view shows beside each trained system's id: its approach and that approach's
    family, split, training size, seed and hyperparameters (the newest training of each
    id, frozen in the repository or stored here). A system id of `ids` that neither holds (a
    committed table's system recorded in the store) gets what its id says and its approach's
    family, its hyperparameters unknown."""
    folders = bundles.available() if bundle_folders is None else bundle_folders
    families: dict[str, str | None] = {}

    def family(approach: str) -> str | None:
        if approach not in families:
            try:
                families[approach] = bundles.from_folder(folders[approach]).metadata.get(
                    "family")
            except (KeyError, UserError):  # the approach's folder is gone or broken
                families[approach] = None
        return families[approach]

    out = {}
    for row in trained_rows(store):
        out[row["system"]] = {"approach": row["approach"], "family": family(row["approach"]),
                              "train_split": row["split"], "train_size": row["train_size"],
                              "seed": row["seed"], "hyperparameters": row["hyperparameters"]}
    for system_id in ids:
        if system_id not in out and (parts := parse_system_id(system_id)):
            out[system_id] = {"approach": parts["approach"], "family": family(
                parts["approach"]), "train_split": parts["split"], "train_size": parts["size"],
                "seed": parts["seed"], "hyperparameters": None}
    return out


def resolve(system_id: str, store: Store) -> Bundle:
    """The frozen system named `system_id`; a one-line error if it is not trained yet."""
    job = job_for(system_id, store)
    found = stored(job, store)
    if found is None:
        size = f" --size {job.size}" if job.size else ""
        raise UserError(f"{system_id} is not trained yet: qashift train -a {job.approach.id} "
                        f"-t {job.split.id} --seed {job.seed}{size}")
    return found.bundle


def current_digest(system_id: str, store: Store) -> str | None:
    """The bundle digest of the system an id names under its approach's current folder and
    defaults; None when that system is not trained (or the id no longer resolves). A frozen
    system's packed weights stay packed: naming its digest needs only their manifest."""
    try:
        found = stored(job_for(system_id, store), store, unpack=False)
    except UserError:
        return None
    return None if found is None else found.bundle.digest


def digest_today(store: Store, bundle_folders: dict | None = None
                 ) -> Callable[[str], str | None]:
    """The digest a bundle id names today: its folder's, or for a trained system the one its
    approach's current folder and defaults give; None for an id with neither (its folder gone
    or broken: its newest runs stand). `api.Results` takes it."""
    folders = bundles.available() if bundle_folders is None else bundle_folders

    def of(bundle_id: str) -> str | None:
        if bundle_id in folders:
            try:
                return bundles.from_folder(folders[bundle_id]).digest
            except UserError:
                return None
        return current_digest(bundle_id, store) if parse_system_id(bundle_id) else None

    return of


def resolve_bundles(names: list[str], store: Store) -> list[Bundle]:
    """Bundle folders by id ('all' allowed) and trained systems (APPROACH@SPLIT/sN), in the
    order given, each once: what `evaluate -b` and the Python API accept."""
    out: list[Bundle] = []
    for name in names:
        found = [resolve(name, store)] if "@" in name else bundles.resolve([name])
        out += [b for b in found if b.id not in {o.id for o in out}]
    return out
