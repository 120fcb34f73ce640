"""Frozen systems kept in the repository: a trained system as a durable artifact.

`frozen/<approach>/<split>[~size]/s<seed>[-h<hash>]/` holds `weights/` (exactly the files the
system's predict command reads: safetensors, JSON, npy without pickle; nothing that runs code
when loaded) and `manifest.json`: the system id, its train key, approach digest,
hyperparameters, split sha256, seed, train size, where and how long it trained, the sha256
of every weights file with their digest, and its headline scores. A clean clone can run
every frozen system without training it, which is the premise of evaluating frozen models
on new test sets.

A frozen system is written once from the store (`write`), through the gate; an artifact is
never replaced silently. Using one (`load`) walks its weights through the gate again and
refuses, in one line naming the file, any file whose bytes are not the manifest's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from evaluator.core import settings
from evaluator.core.errors import UserError
from evaluator.core.files import remove_tree, write_atomic
from evaluator.core.gate import Refused, read_json, walk
from evaluator.store.store import SYSTEM_FIELDS, Store
from evaluator.training.job import TrainJob

MANIFEST = "manifest.json"
WEIGHTS = "weights"
FORMAT = 1
SAFE_SUFFIXES = (".safetensors", ".json", ".npy", ".txt")  # loading them runs no code
MANIFEST_CAP = 4 << 20


def root() -> Path:
    """The folder of frozen systems: `QASHIFT_FROZEN`, or `frozen/` in the checkout
    (`QASHIFT_ROOT`, else this source tree)."""
    checkout = Path(os.environ.get("QASHIFT_ROOT") or settings.REPO_ROOT)
    return Path(os.environ.get("QASHIFT_FROZEN") or checkout / "frozen")


def folder_of(job: TrainJob) -> Path:
    """Where the artifact of a train cell lives (its system id, spelled as folders)."""
    size = f"~{job.size}" if job.size else ""
    hp = job.system_id.rsplit("/h", 1)[1] if "/h" in job.system_id else ""
    return root() / job.approach.id / f"{job.split.id}{size}" / (
        f"s{job.seed}" + (f"-h{hp}" if hp else ""))


def manifests() -> list[dict]:
    """Every frozen system's manifest (read, not yet verified), in path order; a manifest
    that cannot be read is a one-line error naming it."""
    base = root()
    if not base.is_dir():
        return []
    return [_manifest(path) for path in sorted(base.glob(f"*/*/*/{MANIFEST}"))]


def _manifest(path: Path) -> dict:
    try:
        doc = read_json(path, MANIFEST_CAP)
    except Refused as exc:
        raise UserError(f"frozen system manifest {path}: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or \
            not isinstance(doc.get("system"), dict):
        raise UserError(f"{path} is not a frozen-system manifest of format {FORMAT}")
    return {**doc, "folder": str(path.parent)}


def row_of(manifest: dict) -> dict:
    """The manifest as a store `systems` row, with `frozen` naming the artifact's folder."""
    return {**{f: manifest["system"].get(f) for f in SYSTEM_FIELDS}, "frozen": manifest["folder"]}


def find(job: TrainJob) -> dict | None:
    """The frozen system of this train cell, verified; None where the repository has none
    (or one of an earlier version of the approach: another train key)."""
    manifest = _manifest_of(job)
    if manifest is None:
        return None
    verify(manifest)
    return row_of(manifest)


def _manifest_of(job: TrainJob) -> dict | None:
    """The manifest of the repository's artifact of this train cell (same train key), read but
    not verified; None where there is none."""
    path = folder_of(job) / MANIFEST
    if not path.is_file():
        return None
    manifest = _manifest(path)
    return manifest if manifest["system"].get("key") == job.key else None


def verify(manifest: dict) -> None:
    """Walk the artifact's weights through the gate: every file the manifest names, with its
    sha256, and nothing else; a one-line refusal naming the first that differs."""
    folder = Path(manifest["folder"])
    weights = folder / WEIGHTS
    try:
        walked = walk(weights, label=f"frozen system {folder}")
    except Refused as exc:
        raise UserError(str(exc)) from None
    found = {rel: sha for rel, sha, _ in walked.files}
    wanted = manifest.get("files") or {}
    for rel in sorted(set(found) | set(wanted)):
        if found.get(rel) != wanted.get(rel):
            why = ("is not in its manifest" if rel not in wanted else "is missing"
                   if rel not in found else "does not match its sha256 in the manifest")
            raise UserError(f"frozen system {folder}: {WEIGHTS}/{rel} {why}; refused "
                            f"(restore it with git checkout, or freeze the system again)")
    if walked.digest != manifest["system"].get("weights_digest"):
        raise UserError(f"frozen system {folder}: its weights do not hash to the digest "
                        f"its manifest names; refused")


def write(job: TrainJob, store: Store, scores: dict[str, dict]) -> tuple[Path, bool]:
    """Freeze the stored system of `job` into the repository (through the gate); (folder,
    written). An artifact already there with the same train key and weights is kept (its
    headline scores brought up to date); one with other weights is never replaced silently."""
    row = store.get_system(job.key)
    if row is None:
        raise UserError(f"{job.system_id} is not trained in this store")
    folder = folder_of(job)
    if (folder / MANIFEST).is_file():
        manifest = _manifest(folder / MANIFEST)
        have = manifest["system"]
        if have.get("key") == row["key"] and have.get("weights_digest") == row["weights_digest"]:
            update_scores(job, scores)
            return folder, False
        raise UserError(f"{folder} holds another training of {job.system_id}; remove it "
                        f"first to replace it (an artifact is never replaced silently)")
    source = store.model_path(row["weights_digest"])
    partial = folder.with_name(f".partial-{folder.name}")
    remove_tree(partial)
    try:
        walked = walk(source, target=partial / WEIGHTS, label=job.system_id)
        if walked.digest != row["weights_digest"]:
            raise UserError(f"{job.system_id}: the store's weights do not hash to their digest")
        unsafe = [rel for rel, _, _ in walked.files if not rel.endswith(SAFE_SUFFIXES)]
        if unsafe:
            raise UserError(f"{job.system_id}: {unsafe[0]} is not a format that loads "
                            f"without running code ({', '.join(SAFE_SUFFIXES)})")
        manifest = {
            "format": FORMAT, "system": {f: row[f] for f in SYSTEM_FIELDS},
            "files": {rel: sha for rel, sha, _ in walked.files},
            "bytes": walked.total_bytes,
            "scores": {k: scores[k] for k in sorted(scores)},
        }
        partial.chmod(0o755)
        _write_manifest(partial, manifest)
        folder.parent.mkdir(parents=True, exist_ok=True)
        partial.rename(folder)
    finally:
        remove_tree(partial)
    return folder, True


def update_scores(job: TrainJob, scores: dict[str, dict]) -> bool:
    """Whether the repository holds the frozen system of `job` (this train key); its
    manifest's headline scores are then brought up to `scores` (more sets scored since it was
    frozen, here or on another machine). A set `scores` lacks keeps its score: a system two
    studies share (the population's and the extra-data study's base-split systems) states
    the sets of both, whichever is frozen last."""
    manifest = _manifest_of(job)
    if manifest is None:
        return False
    merged = {**manifest.get("scores", {}), **scores}
    if manifest.get("scores") != merged:
        folder = Path(manifest.pop("folder"))
        _write_manifest(folder, {**manifest, "scores": dict(sorted(merged.items()))})
    return True


def _write_manifest(folder: Path, manifest: dict) -> None:
    write_atomic(folder / MANIFEST, (json.dumps(manifest, indent=1, sort_keys=True)
                                     + "\n").encode())
