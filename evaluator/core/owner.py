"""Which controller process holds something (a cell's lease, a Slurm cell, a container):
`host:pid`, so a process on the same host can tell a dead holder from a live one."""

from __future__ import annotations

import os
import socket


def owner_id() -> str:
    """host:pid of this process."""
    return f"{socket.gethostname()}:{os.getpid()}"


def owner_alive(owner: str) -> bool:
    """False only when `owner` is a process of this host that no longer exists."""
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True  # cannot tell from here: trust the expiry time
    return pid_alive(int(pid))


def pid_alive(pid: int) -> bool:
    """Whether a process of this host with this id exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
