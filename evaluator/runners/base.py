"""The runner interface: a request in, a record out (or a RunFailure)."""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

from evaluator.bundles.spec import Bundle

PREDICTIONS_FILE = "predictions.json"
LOG_TAIL_BYTES = 64 << 10


@dataclass(frozen=True)
class RunRequest:
    bundle: Bundle
    input_path: Path  # the answer-free SQuAD-format file
    output_dir: Path  # empty; the submission writes output_dir/predictions.json
    testset_id: str
    device: str = "auto"  # auto | cpu | gpu
    cpus: tuple[int, ...] = ()  # the CPUs of this host it may use; empty: all of them

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

    def to_dict(self) -> dict:
        out = asdict(self)
        out.pop("log")
        return out


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


def last_line(log: str) -> str:
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


def fill_command(command: str, **paths: str) -> str:
    """A bundle's command with its {input}, {output} (and {model}, {train}, ...) placeholders
    filled, each shell-quoted."""
    for name, value in paths.items():
        command = command.replace("{" + name + "}", shlex.quote(value))
    return command
