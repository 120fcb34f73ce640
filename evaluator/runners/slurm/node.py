"""The program a Slurm job runs on the compute node: one cell, with an inner runner.

    python -m evaluator.runners.slurm.node CELL_DIR/spec.json

The spec names the task, the bundle folder, the inner runner ('local', 'docker' or 'auto',
resolved here on the node) and the device; for an evaluation the answer-free input and the
output folder, for a training (`task: train`) the approach's train file, config, model and
checkpoint folders on the shared workspace. The program runs the bundle and leaves, in the
cell folder next to the spec, exactly one outcome file, written last and atomically so that
its presence means "finished":

- record.json: the inner run record (predictions are in output/predictions.json), or
- failure.json: failure class, message and log tail, which the controller trusts over
  Slurm's own job state.

When Slurm stops the job (time limit, scancel, preemption) the program leaves no outcome file:
Slurm's job state then says what happened. Gold answers never reach an evaluation's folder;
the controller writes only the answer-free input (a training split is training data).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import socket
import sys
import time
import traceback
from pathlib import Path

from evaluator.bundles import spec as bundles
from evaluator.core.errors import RunFailure, UserError
from evaluator.core.files import write_json_atomic
from evaluator.runners.base import RunRequest, TrainRequest
from evaluator.runners.dispatch import Dispatcher
from evaluator.runners.slurm.cellfiles import (
    FAILURE_FILE,
    RECORD_FILE,
    SPEC_VERSION,
)


def _terminated(signum, frame):  # noqa: ARG001 - signal handler signature
    raise SystemExit(128 + signum)


def run_cell(spec_path: Path) -> int:
    """Run the cell the spec describes; 0 on success, 3 on a recorded failure."""
    spec = json.loads(spec_path.read_text())
    if spec.get("version") != SPEC_VERSION:
        raise ValueError(f"unknown cell spec version {spec.get('version')!r}")
    cell = spec_path.parent
    started = time.time()
    facts = {"node": socket.gethostname(), "started_at": started,
             "slurm_job_id": os.environ.get("SLURM_JOB_ID")}
    for stale in (RECORD_FILE, FAILURE_FILE):  # a requeued job starts clean
        (cell / stale).unlink(missing_ok=True)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        # scancel and the time limit send SIGTERM: unwind, so the inner runner's cleanup (the
        # local runner kills its process group) runs before SIGKILL comes, and Slurm's job
        # state, not a failure file, says why the run stopped
        signal.signal(signal.SIGTERM, _terminated)
    try:
        request, runner = _prepare(spec)
        record = runner.train(request) if isinstance(request, TrainRequest) else \
            runner.run(request)
    except RunFailure as failure:
        write_json_atomic(cell / FAILURE_FILE, {
            **facts, "failure_class": failure.failure_class, "message": str(failure),
            "log": failure.log, "finished_at": time.time()})
        return 3
    except UserError as error:  # the environment could not be prepared on this node
        write_json_atomic(cell / FAILURE_FILE, {
            **facts, "failure_class": "build-failed", "message": str(error), "log": "",
            "finished_at": time.time()})
        return 3
    write_json_atomic(cell / RECORD_FILE, {
        **facts, "record": {**record.to_dict(), "log": record.log},
        "finished_at": time.time()})
    return 0


def _prepare(spec: dict) -> tuple[RunRequest | TrainRequest, object]:
    """The inner runner and its request, after checking that the bundle folder seen from this
    node is the one the controller planned with (a folder not on shared storage differs)."""
    folder = Path(spec["bundle_folder"])
    if not (folder / "bundle.yaml").is_file():
        raise RunFailure("build-failed", f"bundle folder {folder} is not visible on node "
                         f"{socket.gethostname()}; submissions must be on a shared file system")
    bundle = bundles.from_folder(folder)
    if spec.get("trained"):  # a trained system: the approach's folder with stored weights
        trained = spec["trained"]
        bundle = dataclasses.replace(
            bundle, id=trained["id"], name=trained["name"], kind="command",
            model=trained["model"], metadata=trained["metadata"],
            weights_digest=trained["weights_digest"], system_key=trained.get("system_key"),
            train_command=None, hyperparameters={})
    if bundle.digest != spec["bundle_digest"]:
        raise RunFailure("build-failed", f"bundle folder {folder} on node "
                         f"{socket.gethostname()} differs from the controller's copy (digest "
                         f"{bundle.digest[:12]} != {spec['bundle_digest'][:12]})")
    runner = Dispatcher(spec["inner"]).runner_for(bundle)
    if spec.get("task") == "train":
        train_path = Path(spec["train"])
        if not train_path.is_file():
            raise RunFailure("build-failed", f"training file {train_path} is not visible on "
                             f"node {socket.gethostname()}; the workspace must be on a shared "
                             f"file system")
        return TrainRequest(bundle, train_path, Path(spec["config"]), Path(spec["model_dir"]),
                            Path(spec["checkpoint_dir"]), spec["label"], spec["device"],
                            prepared=_prepared(spec)), runner
    output_dir = Path(spec["output_dir"])
    shutil.rmtree(output_dir, ignore_errors=True)
    output_dir.mkdir(parents=True)
    request = RunRequest(bundle, Path(spec["input"]), output_dir, spec["testset"],
                         spec["device"], prepared=_prepared(spec))
    return request, runner


def _prepared(spec: dict) -> Path | None:
    """The approach's prepared folder the controller made, in the shared workspace."""
    return Path(spec["prepared"]) if spec.get("prepared") else None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m evaluator.runners.slurm.node SPEC_JSON", file=sys.stderr)
        return 2
    spec_path = Path(args[0]).resolve()
    try:
        return run_cell(spec_path)
    except SystemExit:
        raise  # stopped by a signal: Slurm's job state tells the controller why
    except BaseException:  # a crash of this program itself: say so, with the traceback
        text = traceback.format_exc()
        print(text, file=sys.stderr)
        try:
            write_json_atomic(spec_path.parent / FAILURE_FILE, {
                "failure_class": "nonzero-exit", "node": socket.gethostname(),
                "message": f"the Slurm cell program failed: {text.strip().splitlines()[-1]}",
                "log": text, "finished_at": time.time()})
        except OSError:
            pass
        return 2


if __name__ == "__main__":
    sys.exit(main())
