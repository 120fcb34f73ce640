"""Removing containers: a run's own at its end (retried: this keeps the host clean) and those
that controllers which died left behind (`reap_orphans`), with their parent cgroups."""

from __future__ import annotations

import time

import docker.errors

from evaluator.core.owner import owner_alive
from evaluator.runners.docker.watch import cgroup_folders, remove_cgroup

LABEL = "qashift"  # every container we create carries qashift=1, so leftovers can be found


def reap_orphans(client) -> list[str]:
    """Remove containers of controllers on this host that died without cleaning up (their
    watchdog does this too; this catches any a watchdog could not): the names removed.

    One listing call and no per-container inspect: other controllers remove their containers
    while this runs, and a container gone between listing and looking is simply not an
    orphan any more. Best effort: a daemon error leaves the rest for the next reap.
    """
    removed = []
    try:
        listed = client.api.containers(all=True, filters={"label": LABEL})
    except docker.errors.DockerException:
        return removed
    for found in listed:
        owner = (found.get("Labels") or {}).get("qashift.owner")
        if owner and not owner_alive(owner):
            remove(client, found["Id"])
            removed.append(",".join(name.lstrip("/") for name in found.get("Names") or ()))
    for folder in {path.name for path in cgroup_folders("qashift-*")}:
        if not _exists(client, folder):  # the memory parent of a container now gone
            remove_cgroup(folder)
    return removed


def _exists(client, container: str) -> bool:
    try:
        client.api.inspect_container(container)
    except docker.errors.NotFound:
        return False
    except docker.errors.DockerException:
        return True
    return True


def remove(client, container: str) -> None:
    """Force-remove a container; retried, because this is what keeps the host clean. When
    another thread's removal (an interrupt's cleanup) is under way, wait until it is gone, so
    that a process ending right after leaves no container behind."""
    for attempt in range(3):
        try:
            client.api.remove_container(container, force=True, v=True)
            return
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as exc:
            if "already in progress" in str(exc):
                _wait_gone(client, container)
                return
            time.sleep(0.5 * (attempt + 1))
        except Exception:  # noqa: BLE001 - e.g. a connection error; try again
            time.sleep(0.5 * (attempt + 1))


def _wait_gone(client, container: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            client.api.inspect_container(container)
        except docker.errors.NotFound:
            return
        except Exception:  # noqa: BLE001 - the daemon is busy; look again
            pass
        time.sleep(0.1)


