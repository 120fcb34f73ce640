"""Run a train cell: the stored system, or lease -> prepare -> train -> freeze -> store.

The cell's folder (`<workspace>/training/<key>/`) holds the train file, the config and the
approach's checkpoints; it outlives a killed attempt, so the same command resumes from the last
checkpoint. On success the weights are frozen: copied, read-only, to
`<workspace>/models/<weights digest>/`, and the cell folder is removed. A crash, a time-out,
an unreadable split or a runner that cannot start the job is recorded with its failure
class; no system is stored for it.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from evaluator.bundles.spec import Bundle
from evaluator.core import console
from evaluator.core.errors import RunFailure, UserError, failure_class_of
from evaluator.core.files import write_atomic, write_json_atomic
from evaluator.core.gate import Limits, Refused, read_json, walk
from evaluator.core.hashing import canonical_json
from evaluator.core.owner import pid_alive
from evaluator.core.provenance import provenance
from evaluator.pipeline.cell import Heartbeat
from evaluator.pipeline.prepared import prepared_inputs
from evaluator.runners.base import TrainRequest
from evaluator.runners.dispatch import Dispatcher
from evaluator.runners.limits import kill_group
from evaluator.store.store import Store, StoreError
from evaluator.training import frozen
from evaluator.training.job import TrainJob, downsample

PROGRESS_FILE = "progress.json"  # what an approach writes to {checkpoints} after each epoch
RUNNER_PID = "runner.pid"


@dataclass(frozen=True)
class TrainedSystem:
    row: dict
    cached: bool
    bundle: Bundle  # the frozen system, ready to evaluate


def cell_dir(store: Store, key: str) -> Path:
    return store.workspace / "training" / key


def system_bundle(job: TrainJob, row: dict, store: Store, *, unpack: bool = True) -> Bundle:
    """The frozen system as a command bundle: the approach's predict command, its weights
    read-only at {model}; its digest covers the approach folder and the weights (`unpack`:
    see `stored`). An approach with a prompt (no predict command) makes generative systems:
    the weights folder is a Transformers model that the generative runner (or any server)
    runs under that prompt."""
    approach = job.approach
    metadata = {**approach.metadata, "approach": approach.id, "trained_on": job.split.id,
                "seed": job.seed, "train_size": job.size,
                "hyperparameters": json.loads(row["hyperparameters"])}
    shared = {"id": job.system_id, "name": f"{approach.name} ({job.system_id})",
              "folder": approach.folder, "environment": approach.environment,
              "resources": approach.resources, "metadata": metadata,
              "weights_digest": row["weights_digest"], "system_key": job.key}
    weights = str(weights_folder(row, store, unpack=unpack))
    if approach.generative:
        return Bundle(kind="generative", model={"path": weights},
                      generative=approach.generative, **shared)
    return Bundle(kind="command", command=approach.command,
                  model={"path": weights, "sha256": row["weights_digest"]},
                  libraries=approach.libraries, prepare_command=approach.prepare_command,
                  **shared)


def weights_folder(row: dict, store: Store, *, unpack: bool = True) -> Path:
    """Where a trained system's weights are: its frozen artifact's, or the store's copy
    (`unpack`: see `stored`)."""
    if row.get("frozen"):
        return frozen.weights_of(Path(row["frozen"]), store, unpack=unpack)
    return store.model_path(row["weights_digest"])


def stored(job: TrainJob, store: Store, *, unpack: bool = True) -> TrainedSystem | None:
    """The trained system of `job`: the repository's frozen artifact of its train key where
    there is one (verified file by file), else the store's; None when neither holds it. A
    frozen system is the reviewed one, so a store row of its key naming other weights (an
    import from another store, a training since) never stands in for it: it is ignored, with
    a warning naming both digests. Without `unpack`, a frozen artifact's packed weights are
    not unpacked into the store: the bundle names and digests them, for a caller that asks
    what is trained and never runs it (a view of the results, a study's status)."""
    row = store.get_system(job.key) if store.exists() else None
    pinned = frozen.find(job)
    if pinned is not None:
        if row is not None and row["weights_digest"] != pinned["weights_digest"]:
            _warn_once(f"{job.system_id}: this store's system of its train key has weights "
                       f"{row['weights_digest']}, not the {pinned['weights_digest']} of the "
                       f"repository's frozen system {pinned['frozen']}; the frozen system is "
                       f"used and the store's ignored")
        row = pinned
    elif row is None or not store.model_path(row["weights_digest"]).is_dir():
        return None
    return TrainedSystem(row, True, system_bundle(job, row, store, unpack=unpack))


_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    """A warning shown once per process (a study looks its systems up many times)."""
    if message not in _WARNED:
        _WARNED.add(message)
        console.warn(message)


class TrainingBusy(UserError):
    """Another live controller holds this system's training lease."""


def train(job: TrainJob, runner: Dispatcher, store: Store, *, device: str = "auto",
          rerun: bool = False, progress: Callable[[dict], None] = lambda _: None
          ) -> TrainedSystem:
    """The trained system of `job`, training it first if needed (resuming a killed attempt)."""
    if not rerun and (hit := stored(job, store)):
        return hit
    if not store.acquire(job.key, job.approach.id, job.split.id, replace=True):
        raise TrainingBusy(f"{job.system_id} is being trained by another controller right now")
    if not rerun and (hit := stored(job, store)):
        store.release(job.key)
        return hit  # another controller froze it between the first look and the lease
    try:
        with Heartbeat(store, job.key):
            return _train(job, runner, store, device, progress)
    finally:
        store.release(job.key)


def _train(job: TrainJob, runner: Dispatcher, store: Store, device: str,
           progress: Callable[[dict], None]) -> TrainedSystem:
    cell = cell_dir(store, job.key)
    started = time.time()
    try:
        request = _prepare(job, cell, device)
        request = dataclasses.replace(request, prepared=prepared_inputs(
            job.approach, request.train_path, runner, store.workspace, job.system_id))
        watcher = _ProgressWatch(request.checkpoint_dir / PROGRESS_FILE, progress,
                                 job.system_id)
        watcher.start()
        try:
            record = runner.runner_for(job.approach).train(request)
            weights = _freeze(request, store, int(job.approach.resources["output"]))
            record.details["provenance"] = provenance(started, time.time(), record.device)
        finally:
            watcher.stop()
    except StoreError:
        raise  # the store itself, not this cell: nothing to record it in
    except UserError as error:  # recorded, so `study status` counts it as failed
        store.record_failure(job.key, job.system_id, job.split.id, failure_class_of(error),
                             str(error), getattr(error, "log", ""), runner.name)
        raise
    row = {"key": job.key, "system": job.system_id, "approach": job.approach.id,
           "approach_digest": job.approach.digest, "split": job.split.id,
           "split_sha256": job.split.sha256, "train_size": job.size, "seed": job.seed,
           "hyperparameters": canonical_json(job.hyperparameters).decode(),
           "weights_digest": weights, "runner": record.runner, "device": record.device,
           "wall_s": record.wall_s,
           "log_sha256": store.put_object(record.log.encode("utf-8", errors="replace"))
           if record.log else None,
           "run_record": json.dumps(record.to_dict(), sort_keys=True),
           "created_at": time.time()}
    store.put_system(row)
    shutil.rmtree(cell, ignore_errors=True)
    return TrainedSystem(row, False, system_bundle(job, row, store))


def _prepare(job: TrainJob, cell: Path, device: str) -> TrainRequest:
    """The cell folder: the train file and config written once, the model folder emptied,
    the checkpoint folder kept (a resumed attempt continues from it)."""
    dataset = job.split.load()  # verified by sha256 and parsed: a bad split fails here
    train_path, config_path = cell / "train.json", cell / "config.json"
    if not train_path.is_file():
        raw = downsample(dataset.raw, job.size, job.seed) if job.size else dataset.raw
        write_atomic(train_path, canonical_json(raw))
        train_path.chmod(0o444)
    resolved = "cuda" if device in ("gpu", "cuda") else "cpu"
    config = {"hyperparameters": job.hyperparameters, "seed": job.seed, "device": resolved,
              "system": job.system_id}
    if job.approach.generative:  # the prompt its systems will answer: trained on the same
        config["prompt"] = job.approach.generative["prompt"]
    write_json_atomic(config_path, config)
    config_path.chmod(0o444)
    _stop_orphan(cell / RUNNER_PID)
    model_dir = cell / "model"
    shutil.rmtree(model_dir, ignore_errors=True)
    model_dir.mkdir(parents=True)
    return TrainRequest(job.approach, train_path, config_path, model_dir,
                        cell / "checkpoints", job.system_id,
                        "gpu" if resolved == "cuda" else "cpu", cell / RUNNER_PID)


def _stop_orphan(pid_file: Path) -> None:
    """Kill the training process a killed controller left running (local runner), so two
    attempts never write the same checkpoints."""
    try:
        pid = int(pid_file.read_text())
    except (OSError, ValueError):
        return
    if pid_alive(pid):
        kill_group(pid)
    pid_file.unlink(missing_ok=True)


def _freeze(request: TrainRequest, store: Store, output_cap: int) -> str:
    """Walk the checkpoints and the weights through the gate, together held to the
    approach's output cap in bytes written; copy the weights, read-only, to the store's
    models/<digest>; the digest."""
    label, model_dir = request.label, request.model_dir
    kept = walk(request.checkpoint_dir, limits=Limits(total_bytes=output_cap),
                label=f"{label}: its checkpoints").total_bytes
    if not model_dir.is_dir() or model_dir.is_symlink() or not any(model_dir.iterdir()):
        raise RunFailure("no-weights", f"{label}: training finished but wrote no weights "
                         f"to its model folder")
    return store.put_model(model_dir, limits=Limits(total_bytes=max(0, output_cap - kept)),
                           label=f"{label}: its weights")


class _ProgressWatch:
    """Hands each new progress document of the approach to `report` (epoch, loss, ETA)."""

    def __init__(self, path: Path, report: Callable[[dict], None], label: str,
                 interval: float = 1.0, warn: Callable[[str], None] = console.warn):
        self.path, self.report, self.label = path, report, label
        self.interval, self.warn = interval, warn
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._last: dict | None = None
        self._warned = False

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join(timeout=5)
        self._look()

    def _loop(self) -> None:
        while not self._done.wait(self.interval):
            self._look()

    def _look(self) -> None:
        found = _progress(self.path)
        if found is None:
            return
        doc, ignored = found
        if ignored and not self._warned:
            self._warned = True  # once a training: an approach rewrites the file every epoch
            self.warn(f"{self.label}: its {self.path.name} holds {', '.join(ignored)} out of "
                      f"range or not a number; ignored")
        if doc != self._last:
            self._last = doc
            self.report(doc)


# The numbers a progress document may hold, each with the range it is shown in: a count, a
# loss or a time left outside it (NaN, the infinities, -1e308) is ignored, never printed.
PROGRESS_RANGES = {"epoch": (0, 1e9), "epochs": (0, 1e9), "step": (0, 1e15),
                   "steps": (0, 1e15), "loss": (-1e9, 1e9), "eta_s": (0, 10 * 365 * 86400.0)}
PROGRESS_CAP = 64 << 10


def progress_numbers(doc: dict) -> tuple[dict, list[str]]:
    """The fields of a progress document that are numbers in their range, and the names of
    those it holds otherwise (a NaN compares false, so it is never in range)."""
    kept, ignored = {}, []
    for name, (lo, hi) in PROGRESS_RANGES.items():
        value = doc.get(name)
        if value is None:
            continue
        if isinstance(value, int | float) and not isinstance(value, bool) and lo <= value <= hi:
            kept[name] = value
        else:
            ignored.append(name)
    return kept, ignored


def progress_text(doc: dict) -> str:
    """A training's checked progress numbers as a person reads them ('epoch 2/6, loss
    0.4170, eta 3 min'); a number the document lacks is not shown (never '2/None' or
    'eta 0 s')."""
    epoch, epochs = doc.get("epoch"), doc.get("epochs")
    parts = [] if epoch is None else [f"epoch {epoch:g}" + ("" if epochs is None
                                                             else f"/{epochs:g}")]
    if doc.get("loss") is not None:
        parts.append(f"loss {float(doc['loss']):.4f}")
    if doc.get("eta_s") is not None:
        parts.append(f"eta {console.duration(float(doc['eta_s']))}")
    return ", ".join(parts) or "started"


def _progress(path: Path) -> tuple[dict, list[str]] | None:
    """The checked numbers of a progress document the approach wrote, through the bounded
    reader, and the fields ignored; None for a missing, refused or unreadable one (progress
    is shown, never trusted)."""
    try:
        doc = read_json(path, PROGRESS_CAP, allow_nan=True)  # a NaN field is ignored alone
    except Refused:
        return None
    return progress_numbers(doc) if isinstance(doc, dict) else None


def read_progress(store: Store, key: str) -> dict | None:
    """The last progress document of a train cell that is running (for `qashift status`):
    only its numbers in range."""
    found = _progress(cell_dir(store, key) / "checkpoints" / PROGRESS_FILE)
    return None if found is None else found[0]
