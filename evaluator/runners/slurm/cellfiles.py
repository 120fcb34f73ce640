"""The files of a Slurm cell folder, shared by the controller and the node program.

The controller owns `state.json`, whose `stage` says where the cell's life stands; every
transition rewrites it atomically, so a restarted controller reads the stage instead of
guessing it from which files exist:

    PREPARED (input.json, spec.json) -> SUBMITTED (job id) -> FINISHED (Slurm state known)
      -> INGESTED (outcome read; the folder is removed once the result is stored)

The node program writes exactly one outcome file, last and atomically: `record.json` (the
inner run record) or `failure.json` (failure class, message, log tail).
"""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path

from evaluator.core import gate
from evaluator.core.files import write_json_atomic

SPEC_VERSION = 1
SPEC_FILE, INPUT_FILE, STATE_FILE = "spec.json", "input.json", "state.json"
RECORD_FILE, FAILURE_FILE = "record.json", "failure.json"


class Stage(StrEnum):
    PREPARED = "prepared"  # input and spec written; nothing submitted yet
    SUBMITTED = "submitted"  # sbatch accepted the job: its id is known
    FINISHED = "finished"  # Slurm reports a terminal state (outcome file or not)
    INGESTED = "ingested"  # a controller read the outcome; removed after it is stored


def read_json(path: Path) -> dict | None:
    """A cell file that a node wrote, through the bounded reader; None if missing or bad."""
    if not os.path.lexists(path):
        return None
    try:
        doc = gate.read_json(path, 16 << 20)
    except gate.Refused:
        return None
    return doc if isinstance(doc, dict) else None


def read_state(cell: Path) -> dict | None:
    """The cell's state document, with `stage` as a Stage; None if there is none."""
    state = read_json(cell / STATE_FILE)
    if state is None or state.get("stage") not in {s.value for s in Stage}:
        return None
    return {**state, "stage": Stage(state["stage"])}


def write_state(cell: Path, stage: Stage, **facts) -> dict:
    """Move the cell to `stage`, keeping what earlier stages recorded (job id, owner...)."""
    state = {**(read_state(cell) or {}), **facts, "stage": stage.value}
    write_json_atomic(cell / STATE_FILE, state)
    return {**state, "stage": stage}
