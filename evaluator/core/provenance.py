"""Where a result came from: the tool's version and commit, the software around it, the host.

Recorded with every stored result (in its run record) and every trained system, and printed
by `qashift results show`. Versions of optional packages are read from their metadata, never
by importing them.
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from functools import cache
from importlib import metadata
from pathlib import Path

from evaluator import __version__
from evaluator.core.settings import REPO_ROOT

PACKAGES = ("numpy", "torch", "transformers", "onnxruntime", "scipy", "pandas")


@cache
def git_commit() -> str | None:
    """The commit of the source tree this runs from, when it is a git checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


@cache
def software() -> dict:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {"qashift": __version__, "commit": git_commit(),
            "python": platform.python_version(), "implementation": sys.implementation.name,
            "packages": versions}


@cache
def cpu() -> str:
    """The processor's model name: trained weights can differ between CPUs (another order
    of summation), so a system's record says which one trained it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} ({os.cpu_count()} cores)"
    except OSError:
        pass
    return f"{platform.processor() or platform.machine()} ({os.cpu_count()} cores)"


def provenance(started: float, finished: float, device: str | None) -> dict:
    """The record stored with one result."""
    return {**software(), "host": socket.gethostname(), "platform": platform.platform(),
            "cpu": cpu(), "started_at": started, "finished_at": finished, "device": device}
