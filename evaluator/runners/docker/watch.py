"""Watching a running container from the host: its memory high-water mark and CPU time
from the cgroup files of a parent cgroup made for it (which outlives the container, so a run
that ends between two samples still has its peak), the size of what it writes, and the tail of
its output. The host reads these; nothing the submission says is taken for them."""

from __future__ import annotations

import collections
import os
import threading
from collections.abc import Callable
from pathlib import Path

import docker.errors

from evaluator.bundles import policy
from evaluator.runners.base import LIVE_TAIL_BYTES, LOG_TAIL_BYTES

MAX_OUTPUT_FILES = 10_000


def disk_use(folders: tuple[Path, ...], max_files: int) -> tuple[int, int]:
    """(bytes, entries) under `folders`, without following links, a file counting its size
    or its allocated blocks, whichever is more (a sparse file holds what it says it holds);
    stops counting entries past `max_files`."""
    total, count, stack = 0, 0, list(folders)
    while stack and count <= max_files:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    count += 1
                    st = entry.stat(follow_symlinks=False)
                    total += max(st.st_size, st.st_blocks * 512)
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(Path(entry.path))
        except OSError:
            continue
    return total, count


class ContainerWatch:
    """Samples the container's memory high-water mark from the host's cgroup files, and the
    size of the host folders it can write (/output; a training's checkpoints too), killing it
    past the limit.

    The container's own cgroup disappears with it, so a container that exits before the first
    sample would have no peak; where the run has its own parent cgroup (`memory_parent`),
    that parent's high-water mark outlives the container and is read last (cgroup v1
    `memory.max_usage_in_bytes`; v2 `memory.peak` where the kernel has it), and so is its CPU
    time (v1 `cpuacct.usage`, v2 `cpu.stat`'s `usage_usec`). The output check
    runs every `interval`, so a fast writer overshoots by at most what it writes in that time.
    """
    def __init__(self, container_id: str, output: tuple[Path, ...] = (),
                 output_limit: int = policy.DEFAULTS["output"],
                 on_output_exceeded: Callable[[], None] | None = None, interval: float = 0.1,
                 parent: str | None = None):
        held = ([Path(f"/sys/fs/cgroup/memory{parent}/memory.max_usage_in_bytes"),
                 Path(f"/sys/fs/cgroup{parent}/memory.peak")] if parent else [])
        self.files = [*held,
                      Path(f"/sys/fs/cgroup/memory/docker/{container_id}/"
                           f"memory.max_usage_in_bytes"),
                      Path(f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/"
                           f"memory.peak"),
                      Path(f"/sys/fs/cgroup/docker/{container_id}/memory.peak")]
        self.cpu_files = ([Path(f"/sys/fs/cgroup/cpuacct{parent}/cpuacct.usage"),
                           Path(f"/sys/fs/cgroup/cpu,cpuacct{parent}/cpuacct.usage"),
                           Path(f"/sys/fs/cgroup{parent}/cpu.stat")] if parent else [])
        self.interval, self.peak, self.cpu_s = interval, None, None
        self.output, self.output_limit = output, output_limit
        self.on_output_exceeded, self.output_exceeded = on_output_exceeded, False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> None:
        self._sample()
        self._thread.start()

    def stop(self) -> None:
        if self._done.is_set():
            return
        self._done.set()
        if self._thread.is_alive():
            self._thread.join(timeout=1)
        self._sample()  # the parent cgroup, if any, holds the peak of a container now gone
        self._check_output()  # a writer that exited between two samples is caught here
        self.cpu_s = cgroup_cpu_seconds(self.cpu_files)

    def _sample(self) -> None:
        for path in self.files:
            try:
                value = int(path.read_text())
            except (OSError, ValueError):
                continue
            self.peak = max(self.peak or 0, value)
            self.files = [path]
            return

    def _check_output(self) -> None:
        if not self.output or self.output_exceeded:
            return
        used, entries = disk_use(self.output, MAX_OUTPUT_FILES)
        if used > self.output_limit or entries > MAX_OUTPUT_FILES:
            self.output_exceeded = True
            if self.on_output_exceeded is not None:
                self.on_output_exceeded()

    def _loop(self) -> None:
        while not self._done.wait(self.interval):
            self._sample()
            self._check_output()


def cgroup_cpu_seconds(files: list[Path]) -> float | None:
    """CPU seconds a cgroup has used, from the first of `files` that reads: cgroup v1's
    `cpuacct.usage` (nanoseconds) or v2's `cpu.stat` (`usage_usec`); None if none does."""
    for path in files:
        try:
            text = path.read_text()
        except OSError:
            continue
        if path.name == "cpu.stat":
            fields = dict(line.split(maxsplit=1) for line in text.splitlines()
                          if len(line.split()) == 2)
            usec = fields.get("usage_usec", "").strip()
            return int(usec) / 1e6 if usec.isdigit() else None
        return int(text) / 1e9 if text.strip().isdigit() else None
    return None


class LogTail:
    """Drains a container's output stream in a thread, keeping only the last `limit` bytes."""
    def __init__(self, stream, limit: int = LOG_TAIL_BYTES):
        self.limit, self.total = limit, 0
        self._chunks: collections.deque[bytes] = collections.deque()
        self._kept = 0
        self._thread = threading.Thread(target=self._drain, args=(stream,), daemon=True)
        self._thread.start()

    def _drain(self, stream) -> None:
        try:
            for chunk in stream:
                self.total += len(chunk)
                self._chunks.append(chunk)
                self._kept += len(chunk)
                while self._kept - len(self._chunks[0]) >= self.limit:
                    self._kept -= len(self._chunks.popleft())
        except Exception:  # noqa: BLE001 - the stream ends with the container, however it ends
            pass

    def peek(self) -> tuple[int, bytes]:
        """The bytes drained so far and the last of them, while the container runs."""
        return self.total, b"".join(list(self._chunks))[-LIVE_TAIL_BYTES:]

    def text(self, timeout: float = 10.0) -> str:
        self._thread.join(timeout)
        data = b"".join(list(self._chunks))[-self.limit:]
        dropped = self.total - len(data)
        head = f"[... {dropped} earlier bytes dropped ...]\n" if dropped > 0 else ""
        return head + data.decode("utf-8", errors="replace")


def memory_parent(client, name: str) -> str | None:
    """The parent cgroup to create the container under, so that its memory high-water mark
    can be read after it exits: only with the daemon's cgroupfs driver and this host's cgroup
    tree in view (the systemd driver wants a slice; a remote daemon's cgroups are not here)."""
    if not Path("/sys/fs/cgroup").is_dir():
        return None
    try:
        driver = daemon_cgroup_driver(client)
    except docker.errors.DockerException:
        return None
    return f"/{name}" if driver == "cgroupfs" else None


_DRIVERS: dict[str, str] = {}


def daemon_cgroup_driver(client) -> str:
    url = client.api.base_url
    if url not in _DRIVERS:
        _DRIVERS[url] = client.info().get("CgroupDriver", "")
    return _DRIVERS[url]


def cgroup_folders(name: str) -> list[Path]:
    """A run's parent cgroup in every hierarchy (v1: one per controller; v2: one)."""
    root = Path("/sys/fs/cgroup")
    return [*root.glob(f"*/{name}"), *root.glob(name)]


def remove_cgroup(name: str) -> None:
    """Remove an emptied parent cgroup (one still holding a container stays: rmdir refuses)."""
    for folder in cgroup_folders(name):
        try:
            folder.rmdir()
        except OSError:
            pass
