"""Hostile submissions: each program tries one thing a sandbox must stop or survive.

Every program follows the submission contract (`python3 PROGRAM INPUT OUTPUT`) and uses the
standard library only, so it runs in qashift/python:bookworm. `bundle(...)` turns one into a
registered bundle folder with the given resources; `targets.json` beside the program tells it
what to go after (host paths, a listening host port).
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROGRAMS = sorted(p.stem for p in HERE.glob("*.py") if p.stem != "__init__")


def bundle(root: Path, program: str, *, bundle_id: str | None = None,
           resources: dict | None = None, environment: dict | None = None,
           targets: dict | None = None) -> Path:
    """A command bundle folder running tests/hostile/<program>.py."""
    bundle_id = bundle_id or program
    folder = root / bundle_id
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "program.py").write_text((HERE / f"{program}.py").read_text())
    if targets is not None:
        (folder / "targets.json").write_text(json.dumps(targets))
    spec = {"id": bundle_id, "name": bundle_id, "kind": "command",
            "command": "python3 program.py {input} {output}",
            "resources": {"timeout": 60, **(resources or {})}}
    if environment:
        spec["environment"] = environment
    (folder / "bundle.yaml").write_text(json.dumps(spec, indent=1))  # JSON is YAML
    return folder


# what each program of the matrix ends as (a failure class, or None: a result), wherever it
# runs in Docker: from the command line or submitted over HTTP
MATRIX = {"network": "nonzero-exit", "forkbomb": "nonzero-exit", "memhog": "out-of-memory",
          "sleeper": "timeout", "duplicate_ids": "malformed-predictions",
          "symlink_predictions": "malformed-predictions", "filler": "output-too-large",
          "snoop": None, "flood": None, "sloppy_ids": None, "well_behaved": None}


def matrix(root: Path, connect: list, secrets: list[str]) -> None:
    """The hostile matrix's bundle folders in `root`: `network` tries each (address, port) of
    `connect`, `snoop` the paths of `secrets`; the others under tight limits."""
    bundle(root, "network", targets={"connect": connect})
    bundle(root, "snoop", targets={"paths": secrets})
    bundle(root, "forkbomb", resources={"pids": 64, "timeout": 30})
    bundle(root, "memhog", resources={"memory": "128m"})
    bundle(root, "sleeper", resources={"timeout": 3})
    bundle(root, "filler", resources={"output": "64m"})
    # 1 GiB through the daemon's stream: seconds on an idle host, over a minute on a loaded one;
    # what it tests is that the stream is drained in a small process, not how fast
    bundle(root, "flood", resources={"timeout": 600})
    for name in ("sloppy_ids", "duplicate_ids", "symlink_predictions", "well_behaved"):
        bundle(root, name)
