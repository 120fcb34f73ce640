"""The 'runner' of a predictions bundle: its stored file for the test set, verified by hash."""

from __future__ import annotations

import shutil
import time

from evaluator.data.fetch import fetch
from evaluator.runners.base import RunRecord, RunRequest
from evaluator.scoring.predictions import MAX_BYTES


class FrozenRunner:
    name = "frozen"

    def run(self, request: RunRequest) -> RunRecord:
        start = time.perf_counter()
        source = request.bundle.predictions[request.testset_id]
        local = request.bundle.folder / source.file
        mirrors = [request.bundle.folder] if local.is_file() else None
        path = fetch(source, f"predictions of {request.bundle.id!r} on {request.testset_id}",
                     mirrors, cap=MAX_BYTES)
        shutil.copyfile(path, request.output_path)
        return RunRecord(runner=self.name, wall_s=time.perf_counter() - start, exit_code=0,
                         details={"predictions_source": source.url or source.file})
