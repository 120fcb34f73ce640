"""A cell run in two halves, for a test set whose gold answers must not leave one process (a
hidden set of the service): where the runner is, the bundle runs on the answer-free input
alone and its gated outputs are handed back as store objects (`run_blind`); where the gold
is, they are scored and stored as any cell's result (`score_handed`). The result row is the
one `run_cell` would store: the same key, objects and provenance."""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from evaluator.bundles.spec import Bundle
from evaluator.core.errors import RunFailure
from evaluator.core.files import run_tempdir
from evaluator.core.gate import parse_json
from evaluator.core.hashing import canonical_json
from evaluator.jobs.job import Job
from evaluator.pipeline.cell import (
    CellResult,
    output_folder,
    read_outputs,
    score_outputs,
    write_input_bytes,
)
from evaluator.pipeline.prepared import prepared_inputs
from evaluator.runners.base import Runner, RunRecord, RunRequest
from evaluator.scoring.predictions import MAX_BYTES, load_predictions
from evaluator.stats import intervals
from evaluator.store.store import Store

HANDED_CAP = 1 << 20  # bytes of a handed-back run's description (its objects are apart)


@dataclass(frozen=True)
class Handed:
    """A blind run handed back: its outputs' store objects and its record."""

    predictions_sha256: str
    generations_sha256: str | None
    record: dict  # RunRecord.to_dict()
    log: str
    started: float

    def to_bytes(self) -> bytes:
        return canonical_json(asdict(self))


def run_blind(bundle: Bundle, testset_id: str, key: str, options: dict, input_bytes: bytes,
              runner: Runner, store: Store, device: str = "auto") -> str:
    """Run `bundle` on the answer-free `input_bytes` and store what it wrote, read through
    the same gate as any run's; the store object of the handed-back run. A failed run is
    recorded under the cell's `key` and raised (RunFailure)."""
    started = time.time()
    doc = parse_json(input_bytes, "the answer-free input")
    questions = sum(len(p["qas"]) for a in doc["data"] for p in a["paragraphs"])
    label = f"{bundle.id} x {testset_id}"
    try:
        with run_tempdir("cell") as tmp:
            input_path = write_input_bytes(input_bytes, Path(tmp))
            prepared = prepared_inputs(bundle, input_path, runner, store.workspace, label)
            request = RunRequest(bundle, input_path, output_folder(Path(tmp), "output"),
                                 testset_id, device, (), prepared)
            record = runner.run(request)
            predictions, generations = read_outputs(request, label, questions)
    except RunFailure as failure:
        store.record_failure(key, bundle.id, testset_id, failure.failure_class, str(failure),
                             failure.log, getattr(runner, "name", None), options)
        raise
    handed = Handed(store.put_object(predictions.raw),
                    store.put_object(generations) if generations is not None else None,
                    record.to_dict(), record.log, started)
    return store.put_object(handed.to_bytes())


def score_handed(job: Job, store: Store, handed_sha256: str,
                 level: float = intervals.DEFAULT_LEVEL) -> CellResult:
    """A handed-back run of `job` scored on its test set (read here, where its gold is) and
    stored: the cell's result. RunFailure where an object is missing or malformed."""
    data = store.get_object(handed_sha256)
    if data is None or len(data) > HANDED_CAP:
        raise RunFailure("internal-error", f"{job.label}: the handed-back run "
                         f"{handed_sha256[:12]} is missing from the store")
    handed = Handed(**json.loads(data))
    dataset = job.dataset()
    raw = store.get_object(handed.predictions_sha256)
    generations = store.get_object(handed.generations_sha256) \
        if handed.generations_sha256 else None
    if raw is None or (handed.generations_sha256 and generations is None):
        raise RunFailure("internal-error", f"{job.label}: the handed-back outputs are missing "
                         f"from the store")
    with tempfile.TemporaryDirectory(prefix="qashift-score-") as tmp:
        path = Path(tmp) / "predictions.json"
        path.write_bytes(raw[:MAX_BYTES + 1])  # read through the gate again, here
        predictions = load_predictions(path, max(len(dataset.questions),
                                                 job.testset.questions))
    record = RunRecord(**{**handed.record, "log": handed.log})
    return score_outputs(job, dataset, store, predictions, generations, record, handed.started,
                         level, None)
