"""A container's watchdog: a detached process that enforces the time limit even when the
controller that started the container is killed (`kill -9` leaves no `finally` to run).

    python -m evaluator.runners.watchdog CONTAINER DEADLINE CONTROLLER_PID

Once a second it looks: the container gone -> exit; the deadline passed, or the controller
dead -> kill and remove the container, then exit. Started in its own session, so the
signal that kills the controller's process group does not reach it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import docker
import docker.errors

from evaluator.core.owner import owner_alive

POLL_S = 1.0


def spawn(container: str, deadline: float) -> subprocess.Popen:
    """Start the watchdog of `container` (killed at `deadline`, epoch seconds)."""
    return subprocess.Popen(
        [sys.executable, "-m", __name__, container, f"{deadline:.3f}", str(os.getpid())],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, close_fds=True)


def watch(container: str, deadline: float, controller: str) -> str:
    """Why the watch ended: 'gone', 'deadline' or 'orphaned'."""
    client = docker.from_env(timeout=30)
    while True:
        try:
            client.api.inspect_container(container)
        except docker.errors.NotFound:
            return "gone"
        except docker.errors.DockerException:
            pass  # the daemon is busy or restarting: look again
        reason = "deadline" if time.time() > deadline else \
            None if owner_alive(controller) else "orphaned"
        if reason:
            try:
                client.api.remove_container(container, force=True, v=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.DockerException:
                time.sleep(POLL_S)
                continue
            return reason
        time.sleep(POLL_S)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m evaluator.runners.watchdog CONTAINER DEADLINE PID",
              file=sys.stderr)
        return 2
    container, deadline, pid = argv
    watch(container, float(deadline), f"{socket.gethostname()}:{pid}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
