"""An approach's prepared inputs: the work on an input file that no system's weights change
(tokens, tags, word vectors, a frozen encoder's states), done once and handed to every system.

An approach that declares `prepare: ... {input} ... {prepared}` gets, for each input its
systems train on or predict, a folder made by that command alone: run by the same runner as
the systems (a container under --runner docker) in an empty folder with only the approach's
libraries importable, never the approach's own code, so no system can write what another
reads. Its identity is what made it: the command, the libraries' digests, the environment,
the runner and the input's sha256. Its bytes enter the workspace through the gate once, under
`<workspace>/prepared/<key>/`, and are then mounted read-only (or passed by path) as
{prepared} to the train and predict commands.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

from evaluator.bundles.spec import Bundle
from evaluator.core.errors import RunFailure
from evaluator.core.files import exclusive, remove_tree, run_tempdir, write_atomic
from evaluator.core.gate import Limits, Refused, folder_digest, walk
from evaluator.core.hashing import canonical_json, file_sha256, sha256_bytes
from evaluator.runners.base import Runner, RunRecord, TrainRequest

FORMAT = 1
RECORD = "prepared.json"  # beside the folder, written last: the folder is complete
CAP = 4 << 30  # bytes a prepared folder may hold: a set with a passage per question and
# encoder states for every token passes a gigabyte, far above any system's weights


def key(bundle: Bundle, input_sha256: str, runner_name: str) -> str:
    """What a prepared folder is: the command, its libraries, its environment and runner,
    and the input it read."""
    return sha256_bytes(canonical_json({
        "format": FORMAT, "command": bundle.prepare_command,
        "libraries": {lib.name: folder_digest(lib) for lib in bundle.libraries},
        "environment": bundle.environment, "runner": runner_name, "input": input_sha256}))


def prepared_inputs(bundle: Bundle, input_path: Path, runner: Runner, workspace: Path,
                    label: str) -> Path | None:
    """The prepared folder of `input_path` for `bundle` (an approach or one of its systems),
    made now if no controller made it before; None when the approach prepares nothing."""
    if not bundle.prepare_command:
        return None
    inner = runner.runner_for(bundle) if hasattr(runner, "runner_for") else runner
    inner = getattr(inner, "preparer", inner)  # Slurm: its inner runner, on this host
    name = getattr(inner, "name", type(inner).__name__)
    folder = workspace / "prepared" / key(bundle, file_sha256(input_path), name)
    record = folder.with_suffix(".json")
    if record.is_file():
        return folder
    with exclusive(folder.with_suffix(".lock")):
        if record.is_file():  # another controller made it while this one waited
            return folder
        started = time.time()
        with run_tempdir("prepare") as tmp:
            made, run = _run(bundle, input_path, inner, Path(tmp),
                             f"{label}: preparing its input")
            remove_tree(folder)
            partial = folder.with_name(folder.name + ".partial")
            remove_tree(partial)
            try:
                walked = walk(made, target=partial, limits=Limits(total_bytes=CAP),
                              label=f"{label}: its prepared input")
            except Refused as exc:
                raise RunFailure("refused-files", str(exc)) from None
            os.replace(partial, folder)
        write_atomic(record, json.dumps({
            "digest": walked.digest, "bytes": walked.total_bytes, "runner": name,
            "command": bundle.prepare_command, "made_for": label,
            "wall_s": round(time.time() - started, 3), "cpu_s": run.cpu_s,
            "created_at": time.time()},
            indent=1, sort_keys=True).encode())
    return folder


def made_since(workspace: Path, since: float) -> list[dict]:
    """The records of the prepared folders made in `workspace` from time `since` on (by any
    controller sharing the workspace)."""
    out = []
    for path in sorted((workspace / "prepared").glob("*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and record.get("created_at", 0) >= since:
            out.append(record)
    return out


def cpu_seconds(records: list[dict]) -> tuple[float, int]:
    """(CPU seconds, preparations whose runner counted none) of prepared-folder records."""
    counted = [r["cpu_s"] for r in records if r.get("cpu_s") is not None]
    return sum(counted), len(records) - len(counted)


def _run(bundle: Bundle, input_path: Path, runner, tmp: Path, label: str
         ) -> tuple[Path, RunRecord]:
    """The prepare command as a training of a code-less approach: the input as its train
    file, the prepared folder as its weights folder; (that folder, the run's record)."""
    empty, model, checkpoints = tmp / "empty", tmp / "prepared", tmp / "checkpoints"
    for path in (empty, model, checkpoints):
        path.mkdir()
    config = tmp / "config.json"
    config.write_text("{}")
    command = bundle.prepare_command.replace("{input}", "{train}").replace(
        "{prepared}", "{model}")
    preparer = dataclasses.replace(
        bundle, kind="approach", folder=empty, command=None, train_command=command,
        prepare_command=None, model={}, weights_digest=None, system_key=None,
        hyperparameters={}, resources={**bundle.resources, "output": CAP})
    return model, runner.train(TrainRequest(preparer, input_path, config, model, checkpoints,
                                            label, "cpu"))
