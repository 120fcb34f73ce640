"""Run each cell as one Slurm job: sbatch, track, ingest. Slurm schedules; we only watch.

A cell's life is a small state machine kept in a folder on storage that the compute nodes
share, `<shared root>/<cell id>/`; its stage (prepared -> submitted -> finished -> ingested,
`cellfiles.Stage`) is written to the folder's state.json at every step, so a restarted
controller picks the cell up where it stood.

The cell id hashes everything the outputs depend on (bundle folder and digest, the answer-
free input, device, inner runner, shared root), so a controller that takes over a cell's
lease finds the same folder: it re-attaches to a queued or running job, or ingests a finished
one, instead of submitting a duplicate. A job submitted by a controller killed before it
could record the job id is found by its name, `qashift-<cell id>`. An ingested folder is removed
once this process has certainly stored the result (a minute later, or at exit); one left
behind by a controller killed between ingesting and storing is ingested again.

One poller thread asks `squeue` about every job this process waits on (`sacct` when squeue
has forgotten a job and accounting is configured); waiting threads mostly look for the
outcome files. Ctrl-C cancels, with `scancel` by id, the jobs this process waits on, and only
those.
"""

from __future__ import annotations

import atexit
import math
import os
import pwd
import shlex
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from evaluator.bundles.policy import parse_memory
from evaluator.core import settings
from evaluator.core.errors import RunFailure, UserError
from evaluator.core.files import write_json_atomic
from evaluator.core.hashing import canonical_json, sha256_bytes, sha256_of
from evaluator.core.owner import owner_id
from evaluator.runners import interrupts
from evaluator.runners.base import (
    GENERATIONS_FILE,
    PREDICTIONS_FILE,
    RunRecord,
    RunRequest,
    TrainRequest,
    gpus_for,
    last_line,
    read_tail,
)
from evaluator.runners.dispatch import Dispatcher
from evaluator.runners.slurm.cellfiles import (
    FAILURE_FILE,
    INPUT_FILE,
    RECORD_FILE,
    SPEC_FILE,
    SPEC_VERSION,
    Stage,
    read_json,
    read_state,
    write_state,
)

ACTIVE = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED",
                    "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESIZING", "SIGNALING",
                    "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD"})
# Slurm's terminal states, as the failure class a cell ends in when the cell program left no
# failure.json of its own (it wins when present: it knows what the submission did).
TERMINAL = {
    "COMPLETED": None,
    "TIMEOUT": ("timeout", "ran past its Slurm time limit and was stopped by Slurm"),
    "DEADLINE": ("timeout", "reached its Slurm deadline and was stopped"),
    "OUT_OF_MEMORY": ("out-of-memory", "exceeded its Slurm memory request (--mem) and was "
                      "killed; raise resources.memory"),
    "FAILED": ("nonzero-exit", "failed on the compute node"),
    "CANCELLED": ("cancelled", "was cancelled outside this controller (scancel?)"),
    "NODE_FAIL": ("cancelled", "was lost to a node failure"),
    "BOOT_FAIL": ("cancelled", "could not start: its node failed to boot"),
    "PREEMPTED": ("cancelled", "was preempted"),
    "SPECIAL_EXIT": ("cancelled", "ended in Slurm's SPECIAL_EXIT state"),
    "REVOKED": ("cancelled", "was revoked by a federated cluster"),
}
REINGEST_WINDOW_S = 24 * 3600.0  # how long an ingested but perhaps unstored outcome is kept
REMOVE_AFTER_S = 60.0  # this process stored what it ingested by then
OUTCOME_GRACE_S = 10.0  # shared storage may show the outcome file after Slurm's state
TIME_MARGIN_S = 300  # on top of the bundle's own limit: start-up, venv or image builds


def slurm_state(text: str) -> str:
    """'CANCELLED by 0' / 'COMPLETED' / 'RUNNING+' -> the bare state name."""
    return text.strip().split()[0].rstrip("+").upper() if text.strip() else ""


def failure_for_state(state: str) -> tuple[str, str] | None:
    """(failure class, what happened) for a terminal Slurm state; None for COMPLETED."""
    if state not in TERMINAL:
        return "nonzero-exit", f"ended in the unexpected Slurm state {state}"
    return TERMINAL[state]


def slurm_time(seconds: float) -> str:
    """Seconds -> Slurm's D-HH:MM:SS, rounded up to whole minutes as Slurm enforces them."""
    minutes = max(1, math.ceil(seconds / 60))
    days, minutes = divmod(minutes, 24 * 60)
    return f"{days}-{minutes // 60:02d}:{minutes % 60:02d}:00"


def sbatch_resources(resources: dict, timeout: float, device: str) -> list[str]:
    """The bundle's resources as sbatch options (memory in MiB, time with a start-up margin)."""
    options = [f"--cpus-per-task={max(1, math.ceil(float(resources.get('cpus', 1) or 1)))}"]
    if resources.get("memory"):
        options.append(f"--mem={max(1, math.ceil(parse_memory(resources['memory']) / 2**20))}M")
    options.append(f"--time={slurm_time(timeout + TIME_MARGIN_S)}")
    gpus = gpus_for(resources, device)
    if gpus:
        options.append(f"--gres=gpu:{gpus}")
    return options


def _slurm(args: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise UserError(f"{args[0]} not found: install Slurm's client tools or choose "
                        f"another --runner") from None
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(args, 124, "", f"{args[0]} timed out")


def _user() -> str:
    return pwd.getpwuid(os.getuid()).pw_name


def query_states(job_ids: list[str]) -> dict[str, tuple[str, str]]:
    """{job id: (state, job name)} for the jobs Slurm still knows; squeue first (it keeps
    finished jobs for MinJobAge), then sacct for the rest when accounting is configured."""
    found: dict[str, tuple[str, str]] = {}
    if not job_ids:
        return found
    out = _slurm(["squeue", "-h", "-t", "all", "-j", ",".join(job_ids), "-o", "%i|%T|%j"])
    if out.returncode == 0:
        for line in out.stdout.splitlines():
            job_id, state, name = (line.split("|", 2) + ["", ""])[:3]
            found[job_id.strip()] = (slurm_state(state), name.strip())
    elif "Invalid job id" not in out.stderr:
        raise _SlurmUnreachable(out.stderr.strip() or f"squeue exited {out.returncode}")
    missing = [j for j in job_ids if j not in found]
    if missing and _sacct_works():
        out = _slurm(["sacct", "-n", "-X", "-P", "-j", ",".join(missing), "-o",
                      "JobIDRaw,State,JobName"])
        for line in out.stdout.splitlines() if out.returncode == 0 else []:
            job_id, state, name = (line.split("|", 2) + ["", ""])[:3]
            found.setdefault(job_id.strip(), (slurm_state(state), name.strip()))
    return found


def _query_patiently(job_ids: list[str]) -> dict[str, tuple[str, str]]:
    """query_states, riding out a controller restart (about a minute) before giving up."""
    for delay in (1, 2, 4, 8, 16, 30, 0):
        try:
            return query_states(job_ids)
        except _SlurmUnreachable as exc:
            if not delay:
                raise UserError(f"the Slurm controller does not answer: {exc}") from None
            time.sleep(delay)
    raise AssertionError("unreachable")


_SACCT: list[bool] = []


def _sacct_works() -> bool:
    if not _SACCT:
        out = _slurm(["sacct", "-n", "-X", "-j", "1", "-o", "JobIDRaw"], timeout=20)
        _SACCT.append(out.returncode == 0)
    return _SACCT[0]


class _SlurmUnreachable(Exception):
    pass


# -- the jobs this process waits on, and Ctrl-C -------------------------------------------
_LIVE: dict[str, Path] = {}  # job id -> cell folder


def cancel_all() -> list[str]:
    """scancel (by id) every job this process waits on; their runs raise KeyboardInterrupt."""
    interrupts.stop()
    ids = list(_LIVE)
    if ids:
        _slurm(["scancel", *ids], timeout=30)
    return ids


def _cancel_and_say() -> None:
    if ids := cancel_all():
        print(f"qashift: cancelled Slurm job(s) {', '.join(ids)}", file=sys.stderr)


class _Poller:
    """One thread that asks Slurm about every watched job each `interval` seconds."""

    def __init__(self, interval: float):
        self.interval = interval
        self.states: dict[str, tuple[str, str]] = {}
        self.rounds = 0  # completed queries: a job missing after two of them is forgotten
        self.error: str | None = None
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None
        self.wake = threading.Event()

    def start(self) -> None:
        with self.lock:
            if self.thread is None:
                self.thread = threading.Thread(target=self._loop, daemon=True,
                                               name="qashift-slurm-poller")
                self.thread.start()
        self.wake.set()

    def state(self, job_id: str) -> tuple[str, str] | None:
        return self.states.get(job_id)

    def _loop(self) -> None:  # a daemon thread that sleeps while nothing is watched
        while True:
            ids = list(_LIVE)
            if ids:
                try:
                    self.states.update(query_states(ids))
                    self.error = None
                except Exception as exc:  # noqa: BLE001 - a busy controller: keep old states
                    self.error = str(exc) or type(exc).__name__
                self.rounds += 1
            self.wake.wait(self.interval if ids else 5.0)
            self.wake.clear()


@dataclass
class _Job:
    job_id: str
    submitted_at: float
    reingest: bool = False  # an outcome ingested by a controller that died before storing it
    finished: bool = False  # Slurm's terminal state is already recorded
    state: str = ""  # the Slurm state it finished (or was ingested) with


class SlurmRunner:
    """Each cell becomes one Slurm job running `python -m evaluator.runners.slurm.node`."""

    name = "slurm"

    def __init__(self, *, partition: str | None = None, account: str | None = None,
                 shared_root: Path | str | None = None, inner: str | None = None,
                 sbatch_args: list[str] | None = None, poll_seconds: float = 1.0,
                 python: str | None = None):
        env = os.environ
        self.partition = partition or env.get("QASHIFT_SLURM_PARTITION") or None
        self.account = account or env.get("QASHIFT_SLURM_ACCOUNT") or None
        root = shared_root or env.get("QASHIFT_SLURM_DIR") or settings.workspace_dir() / "slurm"
        self.shared_root = Path(root).resolve()
        self.inner = inner or env.get("QASHIFT_SLURM_INNER", "auto")
        if self.inner not in ("auto", "local", "docker"):
            raise UserError(f"unknown inner runner {self.inner!r} for slurm; choices: auto, "
                            f"local, docker")
        self.sbatch_args = list(sbatch_args if sbatch_args is not None
                                else shlex.split(env.get("QASHIFT_SLURM_SBATCH_ARGS", "")))
        self.python = python or sys.executable
        self.poller = _Poller(poll_seconds)
        self._ingested: list[tuple[float, Path]] = []
        self._lock = threading.Lock()
        atexit.register(self._remove_ingested, 0.0)
        interrupts.on_interrupt(_cancel_and_say)

    # -- checks ---------------------------------------------------------------------------
    def check(self) -> None:
        """Fail early, with one line, when no controller answers or the partition is unknown."""
        out = _slurm(["sinfo", "-h", "-o", "%P"], timeout=30)
        if out.returncode != 0:
            raise UserError(f"no Slurm controller answers (sinfo: "
                            f"{last_line(out.stderr or out.stdout)}); start one (see "
                            f"docs/slurm.md) or choose another --runner")
        partitions = [p.rstrip("*") for p in out.stdout.split()]
        if self.partition and self.partition not in partitions:
            raise UserError(f"Slurm partition {self.partition!r} not found; partitions: "
                            f"{', '.join(partitions) or 'none'}")

    # -- the run --------------------------------------------------------------------------
    def run(self, request: RunRequest) -> RunRecord:
        return self._run_cell(request)

    def train(self, request: TrainRequest) -> RunRecord:
        """An approach's training as one Slurm job: the node runs the inner runner's train
        on the cell folder that `training` prepared on the shared workspace (train file and
        config read-only, checkpoints kept between attempts)."""
        return self._run_cell(request)

    def _run_cell(self, request: RunRequest | TrainRequest) -> RunRecord:
        if interrupts.stopping():
            raise KeyboardInterrupt("Slurm jobs are being cancelled")
        self._remove_ingested(REMOVE_AFTER_S)
        cell = self.cell_dir(request)
        job = None
        try:
            job = self._attach(cell)
            if job is None:
                self._prepare(cell, request)
                job = self._submit(cell, request)
            if job.reingest or job.finished:
                state = job.state
            else:
                state = self._wait(cell, job)
                write_state(cell, Stage.FINISHED, slurm_state=state)
        except KeyboardInterrupt:
            self._cancel_cell(cell, job)
            raise
        finally:
            if job is not None:
                _LIVE.pop(job.job_id, None)
        return self._ingest(cell, job, state, request)

    def cell_id(self, request: RunRequest | TrainRequest) -> str:
        """Content-addressed: the same cell, seen by any controller, has the same id."""
        parts = [str(self.shared_root), str(request.bundle.folder.resolve()),
                 request.bundle.digest, request.device, self.inner]
        if isinstance(request, TrainRequest):
            parts += ["train", sha256_of(request.train_path), sha256_of(request.config_path),
                      str(request.model_dir)]
        else:
            parts += [request.testset_id, sha256_of(request.input_path)]
        return sha256_bytes(canonical_json(parts))[:16]

    def cell_dir(self, request: RunRequest | TrainRequest) -> Path:
        return self.shared_root / self.cell_id(request)

    def job_name(self, cell: Path) -> str:
        return f"qashift-{cell.name}"

    # -- stages ---------------------------------------------------------------------------
    def _attach(self, cell: Path) -> _Job | None:
        """A job to wait on or ingest from an earlier controller, or None to submit anew."""
        state = read_state(cell) if cell.is_dir() else None
        if state is None:
            return None
        stage = state["stage"]
        if stage is Stage.INGESTED:
            fresh = time.time() - float(state.get("ingested_at", 0)) < REINGEST_WINDOW_S
            if state.get("ingested_by") != owner_id() and fresh:
                return _Job(str(state["job_id"]), float(state["submitted_at"]),
                            reingest=True, state=str(state.get("slurm_state", "")))
            return None  # ingested and stored earlier: this is a rerun
        if stage is Stage.FINISHED:
            return _Job(str(state["job_id"]), float(state["submitted_at"]), finished=True,
                        state=str(state.get("slurm_state", "")))
        if stage is Stage.SUBMITTED:
            job = _Job(str(state["job_id"]), float(state["submitted_at"]))
            if (cell / RECORD_FILE).exists() or (cell / FAILURE_FILE).exists():
                return job  # the node finished: its outcome is read after a short wait
            known = _query_patiently([job.job_id]).get(job.job_id)
            if known is not None and known[1] == self.job_name(cell):
                return job  # queued, running, or finished without an outcome file
            return None  # forgotten by Slurm with no outcome: submit again
        for job_id, (slurm_state, _) in self._jobs_named(self.job_name(cell)).items():
            if slurm_state in ACTIVE:  # PREPARED, and a controller killed right after sbatch
                self._record_job(cell, job_id, time.time())
                return _Job(job_id, time.time())
        return None

    @property
    def preparer(self):
        """Who runs an approach's prepare command (pipeline.prepared): the inner runner on
        this host, whose folder the nodes then read from the shared workspace."""
        return Dispatcher(self.inner).runner_for_kind("approach")

    def _prepare(self, cell: Path, request: RunRequest | TrainRequest) -> None:
        shutil.rmtree(cell, ignore_errors=True)
        (cell / "output").mkdir(parents=True)
        spec = {"version": SPEC_VERSION, "cell": cell.name,
                "bundle_folder": str(request.bundle.folder.resolve()),
                "bundle_digest": request.bundle.digest, "bundle": request.bundle.id,
                "inner": self.inner, "device": request.device,
                "prepared": str(request.prepared) if request.prepared is not None else None}
        if isinstance(request, TrainRequest):  # no pid file: the Slurm job owns the process
            spec |= {"task": "train", "train": str(request.train_path),
                     "config": str(request.config_path), "model_dir": str(request.model_dir),
                     "checkpoint_dir": str(request.checkpoint_dir), "label": request.label}
        else:
            if request.bundle.weights_digest:  # a trained system: its folder is the approach's
                spec["trained"] = {"id": request.bundle.id, "name": request.bundle.name,
                                   "model": request.bundle.model,
                                   "metadata": request.bundle.metadata,
                                   "weights_digest": request.bundle.weights_digest,
                                   "system_key": request.bundle.system_key}
            shutil.copyfile(request.input_path, cell / INPUT_FILE)  # answer-free, as given
            (cell / INPUT_FILE).chmod(0o444)
            spec |= {"task": "evaluate", "testset": request.testset_id,
                     "input": str(cell / INPUT_FILE), "output_dir": str(cell / "output")}
        write_json_atomic(cell / SPEC_FILE, spec)
        write_state(cell, Stage.PREPARED, name=self.job_name(cell))

    def sbatch_command(self, cell: Path, request: RunRequest | TrainRequest) -> list[str]:
        bundle = request.bundle
        package_root = settings.REPO_ROOT
        # the node sees this controller's folders, cache and data mirrors
        exports = "".join(f"export {name}={shlex.quote(value)}\n"
                          for name, value in settings.current().child_env().items())
        script = (f"#!/bin/sh\nexport PYTHONPATH={shlex.quote(str(package_root))}"
                  f"${{PYTHONPATH:+:$PYTHONPATH}}\n{exports}"
                  f"exec {shlex.quote(self.python)} -m evaluator.runners.slurm.node "
                  f"{shlex.quote(str(cell / SPEC_FILE))}\n")
        (cell / "job.sh").write_text(script)
        command = ["sbatch", "--parsable", f"--job-name={self.job_name(cell)}",
                   f"--output={cell}/slurm-%j.out", f"--chdir={cell}", "--nodes=1",
                   "--ntasks=1", *sbatch_resources(bundle.resources, bundle.timeout,
                                                   request.device)]
        if self.partition:
            command.append(f"--partition={self.partition}")
        if self.account:
            command.append(f"--account={self.account}")
        return [*command, *self.sbatch_args, str(cell / "job.sh")]

    def _submit(self, cell: Path, request: RunRequest | TrainRequest) -> _Job:
        command = self.sbatch_command(cell, request)
        for attempt in range(4):
            submitted_at = time.time()
            out = _slurm(command, timeout=120)
            if out.returncode == 0:
                job_id = out.stdout.strip().split(";")[0]
                _LIVE[job_id] = cell  # before anything else: Ctrl-C must find it
                self._record_job(cell, job_id, submitted_at)
                if interrupts.stopping():
                    raise KeyboardInterrupt("Slurm jobs are being cancelled")
                return _Job(job_id, submitted_at)
            transient = any(s in out.stderr for s in ("timed out", "Unable to contact",
                                                      "temporarily unavailable", "busy"))
            if not transient or attempt == 3:
                what = request.label if isinstance(request, TrainRequest) else \
                    f"{request.bundle.id} x {request.testset_id}"
                raise UserError(f"sbatch refused {what}: "
                                f"{last_line(out.stderr or out.stdout)}")
            # a timed-out sbatch may have submitted after all: never submit twice
            for job_id, (state, _) in self._jobs_named(self.job_name(cell)).items():
                if state in ACTIVE:
                    _LIVE[job_id] = cell
                    self._record_job(cell, job_id, submitted_at)
                    return _Job(job_id, submitted_at)
            time.sleep(2 ** attempt)
        raise AssertionError("unreachable")

    def _wait(self, cell: Path, job: _Job) -> str:
        """Block until the job ends; its final Slurm state ('' when Slurm forgot it)."""
        _LIVE[job.job_id] = cell
        if interrupts.stopping():
            raise KeyboardInterrupt("Slurm jobs are being cancelled")
        self.poller.start()
        first_round, terminal_since = self.poller.rounds, None
        while True:
            if interrupts.stopping():
                raise KeyboardInterrupt(f"Slurm job {job.job_id} cancelled")
            known = self.poller.state(job.job_id)
            state = known[0] if known else None
            if (cell / RECORD_FILE).exists() or (cell / FAILURE_FILE).exists():
                return state if state and state not in ACTIVE else "COMPLETED"
            if state is not None and state not in ACTIVE:
                terminal_since = terminal_since or time.monotonic()
                if state != "COMPLETED" or time.monotonic() - terminal_since > OUTCOME_GRACE_S:
                    return state
            elif state is None and self.poller.rounds >= first_round + 3 \
                    and self.poller.error is None:
                return ""  # Slurm has forgotten it (purged, no accounting) and left no file
            time.sleep(0.1 if state is None or state in ("RUNNING", "COMPLETING") else 0.25)

    def _ingest(self, cell: Path, job: _Job, state: str,
                request: RunRequest | TrainRequest) -> RunRecord:
        """Outcome files (or the Slurm state) -> a record (and, for an evaluation, the
        predictions in request.output_dir), or a RunFailure. The folder is marked ingested,
        then removed later."""
        record_doc, failure_doc = read_json(cell / RECORD_FILE), read_json(cell / FAILURE_FILE)
        submitted = read_state(cell) or {}
        slurm = {"job_id": job.job_id, "state": state or "UNKNOWN", "cell": cell.name,
                 "partition": self.partition, "account": self.account, "inner": self.inner,
                 "submitted_at": submitted.get("submitted_at"),
                 "submitted_by": submitted.get("owner"), "reingested": job.reingest}
        doc = record_doc or failure_doc or {}
        slurm.update(node=doc.get("node"), started_at=doc.get("started_at"),
                     finished_at=doc.get("finished_at"))
        if doc.get("started_at") and submitted.get("submitted_at"):
            slurm["queue_s"] = round(doc["started_at"] - submitted["submitted_at"], 3)
        self._mark_ingested(cell, job, state)
        if failure_doc is not None:
            raise RunFailure(failure_doc["failure_class"], failure_doc["message"],
                             failure_doc.get("log", ""))
        if record_doc is None:
            log = read_tail(cell / f"slurm-{job.job_id}.out")
            failure = failure_for_state(state) if state else \
                ("nonzero-exit", "vanished: Slurm no longer knows it and it left no outcome")
            if failure is None:
                failure = ("no-predictions", f"completed but left no {RECORD_FILE} in {cell} "
                           f"(is the shared directory visible to the compute nodes?)")
            raise RunFailure(failure[0], f"{request.bundle.id}: Slurm job {job.job_id} "
                             f"{failure[1]}" + (f": {last_line(log)}" if log.strip() else ""),
                             log)
        inner = record_doc["record"]
        if isinstance(request, RunRequest):  # the answers (and a generative run's texts)
            for name in (PREDICTIONS_FILE, GENERATIONS_FILE):
                if (cell / "output" / name).exists():
                    shutil.copyfile(cell / "output" / name, request.output_dir / name)
        details = {**inner.get("details", {}), "inner_runner": inner.get("runner"),
                   "slurm": slurm}
        return RunRecord(runner=self.name, wall_s=inner.get("wall_s", 0.0),
                         exit_code=inner.get("exit_code"), log=inner.get("log", ""),
                         peak_memory_bytes=inner.get("peak_memory_bytes"),
                         image_digest=inner.get("image_digest"),
                         device=inner.get("device", "cpu"), details=details,
                         cpu_s=inner.get("cpu_s"))

    # -- bookkeeping ----------------------------------------------------------------------
    def _record_job(self, cell: Path, job_id: str, submitted_at: float) -> None:
        write_state(cell, Stage.SUBMITTED, job_id=job_id, submitted_at=submitted_at,
                    owner=owner_id(), name=self.job_name(cell))

    def _jobs_named(self, name: str) -> dict[str, tuple[str, str]]:
        out = _slurm(["squeue", "-h", "-t", "all", "-u", _user(), "-n", name, "-o",
                      "%i|%T|%j"])
        found = {}
        for line in out.stdout.splitlines() if out.returncode == 0 else []:
            job_id, state, job_name = (line.split("|", 2) + ["", ""])[:3]
            if job_name.strip() == name:
                found[job_id.strip()] = (slurm_state(state), name)
        return found

    def _mark_ingested(self, cell: Path, job: _Job, state: str) -> None:
        write_state(cell, Stage.INGESTED, ingested_by=owner_id(), ingested_at=time.time(),
                    slurm_state=state)
        with self._lock:
            self._ingested.append((time.monotonic(), cell))

    def _remove_ingested(self, older_than: float) -> None:
        """Remove folders this process ingested `older_than` seconds ago: stored by now."""
        now = time.monotonic()
        with self._lock:
            due = [c for t, c in self._ingested if now - t >= older_than]
            self._ingested = [(t, c) for t, c in self._ingested if now - t < older_than]
        for cell in due:
            state = read_state(cell)
            if state is not None and state.get("ingested_by") == owner_id():
                shutil.rmtree(cell, ignore_errors=True)

    def _cancel_cell(self, cell: Path, job: _Job | None) -> None:
        """On Ctrl-C: scancel this cell's job (found by name if sbatch was cut short) and
        forget the folder, so the next run submits afresh."""
        ids = [job.job_id] if job is not None else [
            j for j, (s, _) in self._jobs_named(self.job_name(cell)).items() if s in ACTIVE]
        if ids:
            _slurm(["scancel", *ids], timeout=30)
        shutil.rmtree(cell, ignore_errors=True)


def cluster_available() -> str | None:
    """None when a Slurm controller answers `sinfo`, else why not (for tests and `auto`)."""
    if shutil.which("sinfo") is None:
        return "sinfo is not installed"
    out = _slurm(["sinfo", "-h", "-o", "%T"], timeout=20)
    if out.returncode != 0:
        return f"sinfo cannot reach a controller: {last_line(out.stderr)}"
    return None if out.stdout.strip() else "sinfo shows no nodes"


__all__ = ["SlurmRunner", "cancel_all", "cluster_available", "failure_for_state",
           "sbatch_resources", "slurm_state", "slurm_time"]
