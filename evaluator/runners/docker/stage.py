"""The folders a training container sees, staged outside the workspace, so that its mount
table names no host folder of the controller's and its checkpoints outlive a killed attempt.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from evaluator.bundles.spec import Bundle
from evaluator.core.files import remove_tree, write_atomic
from evaluator.core.gate import Limits, Refused, no_byte_code, read_bounded, walk
from evaluator.core.hashing import sha256_bytes
from evaluator.runners.base import TrainRequest

RESUMABLE = ("nonzero-exit", "timeout", "out-of-memory", "no-gpu-kernel")  # a training that
# ended so keeps its staged checkpoints for the next attempt


class TrainingStage:
    """The folders a training container sees, outside the workspace: a copy of the approach
    and its libraries, the train split and config, a fresh weights folder, and the
    checkpoints. Its name is a digest of the cell's folder, so an attempt after a killed
    controller finds its checkpoints again; it is removed once the weights are handed back
    (through the gate). The container's mount table then names no workspace or checkout."""

    def __init__(self, root: Path):
        self.root = root
        self.checkpoints, self.model = root / "checkpoints", root / "model"
        self.train, self.config = root / "input" / "train.json", root / "input" / "config.json"
        self.prepared = root / "input" / "prepared"

    @classmethod
    def of(cls, request: TrainRequest) -> TrainingStage:
        cell = sha256_bytes(str(request.checkpoint_dir.resolve()).encode())[:24]
        return cls(Path(tempfile.gettempdir()) / f"qashift-train-{cell}")

    def prepare(self, request: TrainRequest, output_cap: int) -> Bundle:
        """Stage everything; the approach as the container sees it (its staged copy).
        `output_cap` bounds what the checkpoints kept from an earlier attempt may hold, as
        `hand_back` bounds them."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o711)
        request.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        if self.checkpoints.is_dir():
            self._recheck_checkpoints(request, output_cap)
        else:  # a first attempt, or one after another runner's
            walk(request.checkpoint_dir, target=self.checkpoints,
                 label=f"{request.label}: its checkpoints")
        for folder in (self.root / "input", self.root / "code"):
            remove_tree(folder)
        (self.root / "input").mkdir()
        shutil.copyfile(request.train_path, self.train)
        shutil.copyfile(request.config_path, self.config)
        if request.prepared is not None:
            walk(request.prepared, target=self.prepared, label=f"{request.label}: its prepared "
                 f"input")
        approach = request.approach
        code = self.root / "code"
        libraries = []
        for source, target in [(approach.folder, code / "approach"),
                               *((lib, code / "libraries" / lib.name)
                                 for lib in approach.libraries)]:
            target.parent.mkdir(parents=True, exist_ok=True)
            walk(source, target=target, label=str(source), skip=no_byte_code)
            libraries.append(target)
        remove_tree(self.model)
        self.model.mkdir()
        for path in [self.root / "input", *(self.root / "input").rglob("*"), code,
                     *code.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        for path in [self.model, self.checkpoints, *self.checkpoints.rglob("*")]:
            path.chmod(0o777 if path.is_dir() else 0o666)  # the container's user owns nothing
        return dataclasses.replace(approach, folder=libraries[0], libraries=tuple(libraries[1:]))

    def _recheck_checkpoints(self, request: TrainRequest, output_cap: int) -> None:
        """Checkpoints an attempt that ended resumably left here were written by its
        container: they pass the gate (no links, no special files) into a fresh copy before
        this controller changes a mode in them, since a mode change follows a link. A refused
        stage is removed, so the next attempt starts from the cell's own checkpoints."""
        checked = self.root / "checkpoints-checked"
        remove_tree(checked)
        try:
            walk(self.checkpoints, target=checked, limits=Limits(total_bytes=output_cap),
                 label=f"{request.label}: the checkpoints its last attempt left")
        except Refused:
            remove_tree(self.root)
            raise
        remove_tree(self.checkpoints)
        checked.rename(self.checkpoints)

    @contextlib.contextmanager
    def mirroring_progress(self, checkpoint_dir: Path, every: float = 1.0) -> Iterator[None]:
        """Copy the container's progress document (through the bounded reader) to the
        cell's checkpoint folder while it trains, where the controller shows it."""
        done = threading.Event()

        def loop() -> None:
            while not done.wait(every):
                try:
                    data = read_bounded(self.checkpoints / "progress.json", 64 << 10)
                except Refused:
                    continue
                write_atomic(checkpoint_dir / "progress.json", data)

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join(timeout=5)

    def hand_back(self, request: TrainRequest, output_cap: int) -> None:
        """Check the checkpoints at the gate, move the weights to the cell's model folder
        (through it too), and remove the stage."""
        kept = walk(self.checkpoints, limits=Limits(total_bytes=output_cap),
                    label=f"{request.label}: its checkpoints").total_bytes
        remove_tree(request.model_dir)
        walk(self.model, target=request.model_dir, limits=Limits(
            total_bytes=max(0, output_cap - kept)), label=f"{request.label}: its weights")
        remove_tree(self.root)
