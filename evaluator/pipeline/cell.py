"""Run one cell: stored result, or input -> runner -> predictions -> scores -> store.

Each step is a function of the previous step's output; nothing reaches backwards. The
submission sees only the answer-free input file; gold answers stay in this process.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from evaluator.bundles.spec import Bundle
from evaluator.core.errors import RunFailure, UserError
from evaluator.core.files import run_tempdir
from evaluator.core.gate import Refused, parse_json, read_bounded
from evaluator.core.hashing import canonical_json
from evaluator.core.provenance import provenance
from evaluator.data.testsets import Dataset, input_document
from evaluator.jobs.job import Job
from evaluator.pipeline.prepared import prepared_inputs
from evaluator.qa.prompting import GenerationSpec
from evaluator.runners.base import GENERATIONS_FILE, Runner, RunRecord, RunRequest
from evaluator.scoring.predictions import (
    MAX_ANSWER_CHARS,
    Predictions,
    check_values,
    load_predictions,
)
from evaluator.scoring.squad_v1 import Scores, Unit, score
from evaluator.stats import intervals
from evaluator.store.store import LEASE_SECONDS, Store
from evaluator.store.units import load_units, units_bytes

GENERATIONS_CAP = 256 << 20  # bytes of a generative run's generations file


@dataclass(frozen=True)
class CellResult:
    """A stored cell with intervals at the requested level and clustering."""

    row: dict
    em: intervals.Interval
    f1: intervals.Interval
    cached: bool
    predictions_path: Path

    def to_dict(self) -> dict:
        return {
            "bundle": self.row["bundle"], "testset": self.row["testset"],
            "n": self.row["n"], "questions": self.row["questions"],
            "missing": self.row["missing"], "extra": self.row["extra"],
            "em": self.em.to_dict(), "f1": self.f1.to_dict(),
            "scorer": self.row["scorer_version"], "cached": self.cached,
            "runner": self.row["runner"], "device": self.row["device"],
            "predictions": str(self.predictions_path), "key": self.row["key"],
            **({"limit": limit, "comparable_with_full_runs": False}
               if (limit := json.loads(self.row["options"]).get("limit")) else {}),
        }


def cpu_seconds(row: dict) -> float | None:
    """The CPU seconds a stored cell's run used, as its runner counted them (None: not
    counted, or stored before runs were)."""
    return json.loads(row["run_record"]).get("cpu_s")


def cell_intervals(scores: Scores | list[Unit], level: float,
                   cluster: str | None) -> tuple[intervals.Interval, intervals.Interval]:
    """EM (Clopper-Pearson) and F1 (Student-t) intervals in percent."""
    units = scores.units if isinstance(scores, Scores) else scores
    groups = None
    if cluster is not None:
        groups = [getattr(u, cluster) for u in units]
    em = intervals.binomial_interval([u.em for u in units], level, groups).scaled(100.0)
    f1 = intervals.t_interval([u.f1 for u in units], level, groups).scaled(100.0) \
        .clipped(0.0, 100.0)  # a t interval of a mean of scores in [0, 100] may overshoot
    return em, f1


def _bounds(row: dict, metric: str) -> tuple[float, float]:
    """A stored interval's bounds; one that does not exist (no spread, one question) is NaN
    in an Interval, stored as NULL (SQLite keeps no NaN)."""
    return tuple(math.nan if row[f"{metric}_{end}"] is None else row[f"{metric}_{end}"]
                 for end in ("lo", "hi"))


def _from_row(store: Store, row: dict, level: float, cluster: str | None,
              cached: bool) -> CellResult:
    if level == row["level"] and cluster is None:
        em = intervals.Interval(row["em"], *_bounds(row, "em"), "clopper-pearson", level)
        f1 = intervals.Interval(row["f1"], *_bounds(row, "f1"), "student-t", level) \
            .clipped(0.0, 100.0)
    else:
        em, f1 = cell_intervals(load_units(store, row), level, cluster)
        # the point estimate is the official total, not a re-summed mean
        em = intervals.Interval(row["em"], em.lo, em.hi, em.method, level)
        f1 = intervals.Interval(row["f1"], f1.lo, f1.hi, f1.method, level)
    return CellResult(row, em, f1, cached, store.object_path(row["predictions_sha256"]))


def cached_result(store: Store, job: Job, level: float = intervals.DEFAULT_LEVEL,
                  cluster: str | None = None, row: dict | None = None) -> CellResult | None:
    """The stored result of `job` (from `row` when the caller has just read it), or None
    when there is none or its objects are damaged."""
    row = row or store.get(job.key)
    if row is None:
        return None
    if not all(store.intact(row[f]) for f in ("predictions_sha256", "scores_sha256")):
        return None  # a damaged or missing object: the cell is recomputed, never trusted
    return _from_row(store, row, level, cluster, cached=True)


def stored_result(store: Store, row: dict, level: float = intervals.DEFAULT_LEVEL
                  ) -> CellResult:
    """A stored row as the cell's result (what `evaluate --json` prints for it)."""
    return _from_row(store, row, level, None, cached=True)


class CellBusy(Exception):
    """Another live controller holds this cell's lease; try again later."""


class Renewal:
    """Calls `renew` every `period_s` seconds on a thread while its block runs (a lease kept
    alive), until the block ends or `renew` returns False (the lease is lost)."""

    def __init__(self, period_s: float, renew: Callable[[], bool | None]):
        self.period_s, self.renew = period_s, renew
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True)

    def _beat(self) -> None:
        while not self.stop.wait(self.period_s):
            if self.renew() is False:
                return

    def __enter__(self) -> Renewal:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()


class Heartbeat(Renewal):
    """Renews cells' leases while they run, so a live controller is never taken over."""

    def __init__(self, store: Store, *keys: str):
        def renew() -> None:
            for key in keys:
                store.renew(key)

        super().__init__(LEASE_SECONDS / 4, renew)


def claim(job: Job, store: Store, level: float, cluster: str | None,
          rerun: bool) -> CellResult | bool:
    """The stored result of `job` (unless `rerun`), else True once this controller holds
    its lease, or False when another live controller is running it."""
    # One read decides: a row that appears after it is another controller's finished run.
    row = None if rerun else store.get(job.key)
    if row is not None and (hit := cached_result(store, job, level, cluster, row)):
        return hit
    damaged = row is not None  # a row whose objects failed their hash
    if not store.acquire(job.key, job.bundle.id, job.testset.id, replace=rerun or damaged):
        return cached_result(store, job, level, cluster) or False  # finished meanwhile?
    if damaged and (hit := cached_result(store, job, level, cluster)):
        store.release(job.key)
        return hit  # another controller recomputed it before this one took the lease
    return True


def record_failure(job: Job, store: Store, runner: Runner, failure: RunFailure) -> None:
    store.record_failure(job.key, job.bundle.id, job.testset.id, failure.failure_class,
                         str(failure), failure.log, getattr(runner, "name", None), job.options)


def internal_failure(job: Job, store: Store, runner: Runner, exc: Exception) -> RunFailure:
    """A bug or a hostile input in this cell's scoring: recorded, and its failure."""
    failure = RunFailure("internal-error", f"{job.label}: {type(exc).__name__}: "
                         f"{str(exc)[:300]}", traceback.format_exc())
    record_failure(job, store, runner, failure)
    return failure


def run_cell(job: Job, runner: Runner, store: Store, *, level: float = intervals.DEFAULT_LEVEL,
             cluster: str | None = None, rerun: bool = False, device: str = "auto",
             mirrors: list[Path] | None = None, cpus: tuple[int, ...] = ()) -> CellResult:
    """The stored result of `job`, running it first if needed (or if `rerun`), on `cpus` of
    this host where given (a parallel matrix's share; runners on other hosts ignore it).

    Raises CellBusy when another live controller is running the same cell.
    """
    intervals.check_level(level)
    claimed = claim(job, store, level, cluster, rerun)
    if isinstance(claimed, CellResult):
        return claimed
    if not claimed:
        raise CellBusy(job.label)
    try:
        with Heartbeat(store, job.key):
            try:
                return _run_and_score(job, runner, store, level, cluster, device, mirrors,
                                      cpus)
            except (UserError, KeyboardInterrupt, SystemExit):
                raise
            except Exception as exc:  # noqa: BLE001 - a bug or a hostile input: this cell fails
                raise internal_failure(job, store, runner, exc) from None
    finally:
        store.release(job.key)  # a no-op after success: put() released it with the row


def _run_and_score(job: Job, runner: Runner, store: Store, level: float, cluster: str | None,
                   device: str, mirrors: list[Path] | None,
                   cpus: tuple[int, ...] = ()) -> CellResult:
    started = time.time()
    dataset = job.dataset(mirrors)  # the test set, or its --limit sample (another key)
    try:
        with run_tempdir("cell") as tmp:
            input_path = write_input(dataset, Path(tmp))
            prepared = prepared_inputs(job.bundle, input_path, runner, store.workspace,
                                       job.label)
            request = RunRequest(job.bundle, input_path, output_folder(Path(tmp), "output"),
                                 job.testset.id, device, cpus, prepared)
            return score_run(job, dataset, store, request, runner.run(request), started,
                             level, cluster)
    except RunFailure as failure:
        record_failure(job, store, runner, failure)
        raise


def write_input(dataset: Dataset, folder: Path) -> Path:
    """The answer-free input a submission reads, read-only, in `folder/input/`."""
    return write_input_bytes(canonical_json(input_document(dataset.raw)), folder)


def write_input_bytes(data: bytes, folder: Path) -> Path:
    """An answer-free input document's bytes as the file a submission reads (`write_input`;
    a blind run's input comes as bytes)."""
    path = output_folder(folder, "input") / "input.json"
    path.write_bytes(data)
    path.chmod(0o444)
    return path


def output_folder(parent: Path, name: str) -> Path:
    (parent / name).mkdir()
    return parent / name


def score_run(job: Job, dataset: Dataset, store: Store, request: RunRequest, record: RunRecord,
              started: float, level: float, cluster: str | None) -> CellResult:
    """A finished run's predictions read through the gate, scored and stored: the cell's
    result. RunFailure where its files are malformed."""
    # a --limit sample's predictions may still cover the whole set (stored files)
    predictions, generations = read_outputs(request, job.label, max(
        len(dataset.questions), job.testset.questions))
    return score_outputs(job, dataset, store, predictions, generations, record, started,
                         level, cluster)


def read_outputs(request: RunRequest, label: str, questions: int
                 ) -> tuple[Predictions, bytes | None]:
    """A finished run's predictions and (a generative run's) generations, read through the
    gate for a set of `questions`; RunFailure where they are malformed."""
    return (load_predictions(request.output_path, questions),
            _generations(request.output_dir / GENERATIONS_FILE, label, questions,
                         request.bundle))


def score_outputs(job: Job, dataset: Dataset, store: Store, predictions: Predictions,
                  generations: bytes | None, record: RunRecord, started: float,
                  level: float, cluster: str | None) -> CellResult:
    """A run's gated outputs scored on `dataset` and stored: the cell's result."""
    predictions_bytes = predictions.raw  # what was scored, not the file read again
    if predictions.oversize:
        warning = (f"warning: {len(predictions.oversize)} answer(s) longer than "
                   f"{MAX_ANSWER_CHARS:,} characters scored as wrong (first: "
                   f"{predictions.oversize[0]!r})")
        record.details["oversize_answers"] = len(predictions.oversize)
        record.log = f"{record.log}\n{warning}" if record.log else warning
    if generations is not None:  # a generative run's text per question, kept with it
        record.details["generations_sha256"] = store.put_object(generations)
    scores = score(dataset.questions, predictions, job.testset.scorer)
    record.details["provenance"] = provenance(started, time.time(), record.device)
    return _finish(job, store, scores, predictions_bytes, record, level, cluster)


def _generations(path: Path, label: str, questions: int, bundle: Bundle) -> bytes | None:
    """A generative run's generations file (a JSON object), read bounded, or None. Its
    objects and lists are counted before it is parsed: one object a question, and room for
    a bracket in every generated token, twice (the generation and the answer taken from it);
    commas and colons are not, as generated text may be full of them."""
    if not os.path.lexists(path):
        return None
    tokens = int(bundle.generative.get("generation", {}).get("max_new_tokens")
                 or GenerationSpec.max_new_tokens)
    try:
        data = read_bounded(path, GENERATIONS_CAP, GENERATIONS_FILE)
        check_values(data, questions, f"{label}: {GENERATIONS_FILE}", 2 + 4 * tokens,
                     marks=(b"[", b"{"))
        doc = parse_json(data, GENERATIONS_FILE)
    except Refused as exc:
        raise RunFailure("refused-files", f"{label}: {GENERATIONS_FILE}: {exc}") from None
    if not isinstance(doc, dict):
        raise RunFailure("malformed-predictions", f"{label}: {GENERATIONS_FILE} is not a "
                         f"JSON object")
    return canonical_json(doc)


def _finish(job: Job, store: Store, scores: Scores, predictions_bytes: bytes,
            record: RunRecord, level: float, cluster: str | None) -> CellResult:
    em95, f195 = cell_intervals(scores, intervals.DEFAULT_LEVEL, None)
    predictions_sha = store.put_object(predictions_bytes)
    scores_sha = store.put_object(units_bytes(job.scorer_version, scores.units))
    log_sha = store.put_object(record.log.encode("utf-8", errors="replace")) \
        if record.log else None
    row = {
        "key": job.key, "bundle": job.bundle.id, "bundle_digest": job.bundle.digest,
        "testset": job.testset.id, "testset_sha256": job.testset.sha256,
        "scorer": job.testset.scorer, "scorer_version": job.scorer_version,
        "options": canonical_json(job.options).decode(), "n": scores.n,
        "questions": scores.questions,
        "missing": scores.missing, "extra": scores.extra, "em": scores.em, "f1": scores.f1,
        "em_lo": em95.lo, "em_hi": em95.hi, "f1_lo": f195.lo, "f1_hi": f195.hi,
        "level": intervals.DEFAULT_LEVEL, "predictions_sha256": predictions_sha,
        "scores_sha256": scores_sha, "log_sha256": log_sha, "runner": record.runner,
        "device": record.device, "image_digest": record.image_digest, "wall_s": record.wall_s,
        "run_record": json.dumps(record.to_dict(), sort_keys=True), "created_at": time.time(),
    }
    store.put(row)
    return _from_row(store, row, level, cluster, cached=False)
