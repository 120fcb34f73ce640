"""The runner interface: a request in, a record out (or a RunFailure)."""

from __future__ import annotations

import json
import shlex
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

from evaluator.bundles.spec import Bundle
from evaluator.core.errors import RunFailure

PREDICTIONS_FILE = "predictions.json"
GENERATIONS_FILE = "generations.json"  # a generative run's text per question, kept with it
LOG_TAIL_BYTES = 64 << 10


def gpus_for(resources: dict, device: str) -> int:
    """GPUs a run gets: the bundle's `resources.gpus`, none with --device cpu, at least one
    with --device gpu (every runner: Docker, Slurm, local)."""
    wanted = int(resources.get("gpus", 0) or 0)
    if device == "cpu":
        return 0
    return max(wanted, 1) if device == "gpu" else wanted


@dataclass(frozen=True)
class RunRequest:
    bundle: Bundle
    input_path: Path  # the answer-free SQuAD-format file
    output_dir: Path  # empty; the submission writes output_dir/predictions.json
    testset_id: str
    device: str = "auto"  # auto | cpu | gpu
    cpus: tuple[int, ...] = ()  # the CPUs of this host it may use; empty: all of them
    prepared: Path | None = None  # the approach's prepared folder of this input ({prepared})

    @property
    def output_path(self) -> Path:
        return self.output_dir / PREDICTIONS_FILE


@dataclass(frozen=True)
class TrainRequest:
    """Train an approach: the train split in (with its answers: it is training data, never a
    test set's), weights out. The checkpoint folder is kept between attempts, so a killed
    training resumes from its last checkpoint."""

    approach: Bundle
    train_path: Path
    config_path: Path  # {"hyperparameters": ..., "seed": N, "device": cpu|cuda}
    model_dir: Path  # empty; the approach writes the frozen system's weights here
    checkpoint_dir: Path
    label: str  # the system id, for messages and container labels
    device: str = "auto"
    pid_file: Path | None = None  # the local runner notes its process group here
    prepared: Path | None = None  # the approach's prepared folder of the train file

    @property
    def bundle(self) -> Bundle:
        """The approach: what a runner builds, limits and labels, as for a RunRequest."""
        return self.approach


@dataclass
class RunRecord:
    runner: str
    wall_s: float
    exit_code: int | None = None
    log: str = ""
    peak_memory_bytes: int | None = None
    image_digest: str | None = None
    device: str = "cpu"
    details: dict = field(default_factory=dict)
    cpu_s: float | None = None  # user + system CPU seconds of the run's processes, where the
    # runner can count them (a child process it waits for, a container's cgroup); else None

    def to_dict(self) -> dict:
        out = asdict(self)
        out.pop("log")
        return out


_LIVE_LOGS: dict[int, Callable[[], tuple[int, bytes]]] = {}  # thread -> its run's log
_LIVE_LOCK = threading.Lock()
LIVE_TAIL_BYTES = 64 << 10  # of a run's log, shown while it runs


@contextmanager
def live_log(read: Callable[[], tuple[int, bytes]]) -> Iterator[None]:
    """While the block runs, `read()` gives the bytes the run in this thread has written so
    far and the last of them (at most LIVE_TAIL_BYTES): what `live_logs` shows of it (a
    service worker sends it to the server every second)."""
    with _LIVE_LOCK:
        _LIVE_LOGS[threading.get_ident()] = read
    try:
        yield
    finally:
        with _LIVE_LOCK:
            _LIVE_LOGS.pop(threading.get_ident(), None)


def live_logs() -> tuple[int, bytes] | None:
    """The log of a run going on in this process now (bytes written, their tail), or None."""
    with _LIVE_LOCK:
        readers = list(_LIVE_LOGS.values())
    return readers[0]() if readers else None


def file_log(path: Path) -> Callable[[], tuple[int, bytes]]:
    """A live-log reader of a log file being written."""
    def read() -> tuple[int, bytes]:
        try:
            with open(path, "rb") as handle:
                size = handle.seek(0, 2)
                handle.seek(max(0, size - LIVE_TAIL_BYTES))
                return size, handle.read(LIVE_TAIL_BYTES)
        except OSError:
            return 0, b""
    return read


class Runner(Protocol):
    name: str

    def run(self, request: RunRequest) -> RunRecord: ...


def read_tail(path: Path, limit: int = LOG_TAIL_BYTES) -> str:
    """The last `limit` bytes of a log, so a submission that floods its output costs nothing."""
    if not path.exists():
        return ""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        handle.seek(max(0, size - limit))
        text = handle.read().decode("utf-8", errors="replace")
    return (f"[... {size - limit} earlier bytes dropped ...]\n" if size > limit else "") + text


NO_GPU_KERNEL = "no kernel image is available for execution on the device"
OOM_WORDS = ("out of memory", "memoryerror", "cannot allocate memory")


@dataclass
class Exit:
    """How a submission's process ended, as a runner saw it."""

    exit_code: int | None
    log: str
    timed_out: bool = False
    timeout_s: float = 0.0
    killed_for_memory: bool = False  # the engine says so (Docker's OOMKilled)
    peak_memory: int | None = None
    memory_limit: int | None = None  # None where the runner sets none (local)
    output_exceeded: bool = False
    output_limit: int | None = None
    produced: bool = True  # the expected output file exists
    cpu_s: float | None = None  # user + system CPU seconds, where the runner counts them


def classify(label: str, ended: Exit) -> None:
    """Raise the run's failure, by one rule for every runner, or return when it succeeded.

    Out of memory: the engine says the process was killed for memory; or it was killed by
    SIGKILL (status -9 or 137) with no time-out and either no memory limit to compare with
    (the kernel's OOM killer, under the local runner) or a peak within 5% of the limit; or it
    failed saying so in its last output (Python's MemoryError, CUDA's "out of memory")."""
    log = ended.log
    if ended.output_exceeded:
        limit = f"{ended.output_limit / (1 << 20):.0f} MiB" if ended.output_limit else "its limit"
        raise RunFailure("output-too-large", f"{label} wrote more than {limit} to its output "
                         f"folders and was killed (raise resources.output)", log)
    if ended.timed_out:
        raise RunFailure("timeout", f"{label} ran past its {ended.timeout_s:g} s time limit "
                         f"and was killed", log)
    if ended.exit_code in (0, None) and ended.produced:
        return
    killed = ended.exit_code in (-9, 137)
    near_limit = ended.memory_limit is None or (
        ended.peak_memory is not None and ended.peak_memory >= 0.95 * ended.memory_limit)
    said = ended.exit_code != 0 and any(w in log[-4000:].lower() for w in OOM_WORDS)
    if ended.killed_for_memory or (killed and near_limit) or said:
        limit = f" of {ended.memory_limit / (1 << 20):.0f} MiB" if ended.memory_limit else ""
        raise RunFailure("out-of-memory", f"{label} exceeded its memory limit{limit} and was "
                         f"killed (raise resources.memory)", log)
    if NO_GPU_KERNEL in log:
        raise RunFailure("no-gpu-kernel", f"{label}: the framework has no CUDA kernel for "
                         f"this GPU ({NO_GPU_KERNEL}); retry with --device cpu", log)
    if ended.exit_code not in (0, None):
        raise RunFailure("nonzero-exit", f"{label} exited with status {ended.exit_code}: "
                         f"{last_line(log)}", log)


def last_line(log: str) -> str:
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


def fill_command(command: str, **paths: str | None) -> str:
    """A bundle's command with its {input}, {output} (and {model}, {train}, {prepared}, ...)
    placeholders filled, each shell-quoted; a None path must not be asked for."""
    for name, value in paths.items():
        if value is None:
            if "{" + name + "}" in command:
                raise RunFailure("internal-error", f"{{{name}}} is used but the runner was "
                                 f"given none")
            continue
        command = command.replace("{" + name + "}", shlex.quote(value))
    return command


MANY = Path(__file__).with_name("many.py")  # runs several systems' predictions in one process
PYTHONS = ("python3", "python")
TIMINGS_CAP = 1 << 20  # bytes of a group's timings file


def python_script(command: str) -> tuple[str, list[str]] | None:
    """(SCRIPT, its argument templates) of a `python3 SCRIPT.py ARGS` command whose script is
    a file of the bundle folder: what `many.py` can run several times in one interpreter;
    None for any other command (a shell line, `-m`, `-c`)."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        return None
    if len(words) < 2 or words[0] not in PYTHONS or not words[1].endswith(".py") or \
            words[1].startswith(("-", "/")) or ".." in Path(words[1]).parts or \
            any(set(w) & set("|;&<>`$") for w in words):
        return None
    return words[1], words[2:]


def group_plan(command: str, runs: list[dict[str, str | None]], logs: list[str],
               timings: str) -> str:
    """`many.py`'s plan (JSON) for `command` run once per entry of `runs` (its placeholder
    paths: input, output, model, prepared), each logging to its entry of `logs`."""
    script, template = python_script(command)
    return json.dumps({"script": script, "timings": timings, "runs": [
        {"argv": [_filled(word, **paths) for word in template], "log": log}
        for paths, log in zip(runs, logs, strict=True)]})


def _filled(word: str, **paths: str | None) -> str:
    for name, value in paths.items():
        if "{" + name + "}" in word:
            if value is None:
                raise RunFailure("internal-error", f"{{{name}}} is used but the runner was "
                                 f"given none")
            word = word.replace("{" + name + "}", value)
    return word


def group_records(runner: str, requests: list[RunRequest], timings_path: Path,
                  logs: list[Path], cpu_s: float | None, peak: int | None, device: str,
                  group: dict, details: dict) -> list[RunRecord | None]:
    """Per request of a group run, its record where its run ended well and wrote its
    predictions, else None. `timings_path` is `many.py`'s account of the runs
    that ended; a run's CPU seconds are its own plus an equal share of what the group spent
    outside the runs (the interpreter's start)."""
    try:
        timings = json.loads(timings_path.read_bytes()[:TIMINGS_CAP])
    except (OSError, ValueError):
        timings = []
    timings = [t for t in timings if isinstance(t, dict)][:len(requests)] \
        if isinstance(timings, list) else []
    own = sum(float(t.get("cpu_s") or 0.0) for t in timings)
    shared = max((cpu_s or 0.0) - own, 0.0) / max(1, len(timings))
    group = {**group, "systems": len(requests), "cpu_s": cpu_s,
             "shared_cpu_s": shared * len(timings)}
    records: list[RunRecord | None] = [None] * len(requests)
    for i, (timing, request) in enumerate(zip(timings, requests, strict=False)):
        if timing.get("exit") == 0 and request.output_path.is_file():
            records[i] = RunRecord(
                runner=runner, wall_s=float(timing["wall_s"]), exit_code=0,
                log=read_tail(logs[i]), peak_memory_bytes=peak, device=device,
                cpu_s=None if cpu_s is None else float(timing["cpu_s"]) + shared,
                details={**details, "group": group})
    return records
