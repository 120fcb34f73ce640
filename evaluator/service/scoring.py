"""The server's scoring of hidden test sets' jobs: a worker hands a blind run back (state
`scoring`) and this process, the only one that reads a hidden set's gold, scores it into the
results store and ends the job (`pipeline.blind.score_handed`); the server calls
`score_waiting` every second (`background.Every`)."""

from __future__ import annotations

import json
import os
import socket
import traceback

from sqlalchemy import Engine

from evaluator.core.errors import RunFailure, UserError, failure_class_of
from evaluator.jobs.job import Job
from evaluator.pipeline.blind import score_handed
from evaluator.service import boards, cells, queue
from evaluator.store.store import Store


def score_job(engine: Engine, store: Store, row: dict, scorer: str) -> str:
    """Score one claimed job's handed-back run and end the job; the state it ended in."""
    try:
        _, [bundle] = cells.request(row, store)
        testset = boards.hidden_set(engine, row["testset"])
        if testset is None:
            raise UserError(f"test set {row['testset']!r} is hidden no more")
        job = Job(bundle, testset, json.loads(row["options"]))
        if job.key != row["cell_key"]:
            raise UserError(f"{job.label}: the bundle or the test set changed while it ran; "
                            f"submit it again")
        result = score_handed(job, store, row["output_sha256"])
    except (UserError, RunFailure) as error:
        ended = queue.finish(engine, row["id"], scorer, failure_class=failure_class_of(error),
                             message=str(error))
        return "failed" if ended else "lost"
    except Exception as exc:  # noqa: BLE001 - a bug or hostile outputs: this job fails
        traceback.print_exc()
        ended = queue.finish(engine, row["id"], scorer, failure_class="internal-error",
                             message=f"{type(exc).__name__}: {str(exc)[:300]}")
        return "failed" if ended else "lost"
    ended = queue.finish(engine, row["id"], scorer, result_key=result.row["key"])
    return "finished" if ended else "lost"


def score_waiting(engine: Engine, store: Store, scorer: str | None = None) -> int:
    """Score every job waiting to be scored; how many ended."""
    scorer = scorer or f"scorer:{socket.gethostname()}:{os.getpid()}"
    ended = 0
    while (row := queue.claim_scoring(engine, scorer)) is not None:
        ended += score_job(engine, store, row, scorer) != "lost"
    return ended
