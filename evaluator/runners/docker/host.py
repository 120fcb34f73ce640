"""Facts about this host and its Docker daemon: whether one answers, its CPUs and GPUs, how
many GPUs a bundle gets; and the Ctrl-C cleanup of every container this process runs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import docker

from evaluator.runners import interrupts
from evaluator.runners.docker.container import _LIVE
from evaluator.runners.docker.removal import remove

PING_TIMEOUT_S = 2.0


def daemon_available(timeout: float = PING_TIMEOUT_S) -> bool:
    """Whether a Docker daemon answers within `timeout` seconds (never raises)."""
    try:
        client = docker.from_env(timeout=timeout)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:  # noqa: BLE001 - any failure means "no usable daemon"
        return False


def cancel_all() -> int:
    """Kill and remove every container this process is running; their runs raise
    KeyboardInterrupt (a cancelled cell is not a failure: it is simply not stored)."""
    interrupts.stop()
    names = list(_LIVE)
    if not names:
        return 0
    try:
        client = docker.from_env(timeout=15)
    except Exception:  # noqa: BLE001 - nothing to clean up with
        return 0
    for name in names:
        remove(client, name)
    client.close()
    return len(names)


def host_cpus(client) -> int:
    """The CPUs the daemon's host has (the cap on a bundle's `cpus`)."""
    return int(client.info().get("NCPU") or os.cpu_count() or 1)


def gpu_info() -> dict:
    """GPU model(s) and driver version of this host, from the NVIDIA driver's /proc files."""
    info: dict = {}
    version = Path("/proc/driver/nvidia/version")
    if version.is_file():
        match = re.search(r"Kernel Module\s+(?:for\s+\S+\s+)?([0-9.]+)", version.read_text())
        info["gpu_driver"] = match.group(1) if match else version.read_text().splitlines()[0]
    models = []
    for entry in sorted(Path("/proc/driver/nvidia/gpus").glob("*/information")):
        match = re.search(r"^Model:\s*(.+)$", entry.read_text(), re.MULTILINE)
        if match:
            models.append(match.group(1).strip())
    if models:
        info["gpu_models"] = models
    if not info and shutil.which("nvidia-smi"):
        proc = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version",
                               "--format=csv,noheader"], capture_output=True, text=True)
        rows = [r.split(", ") for r in proc.stdout.splitlines() if ", " in r]
        if rows:
            info = {"gpu_models": [r[0] for r in rows], "gpu_driver": rows[0][1]}
    return info
