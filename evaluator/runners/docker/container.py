"""One container's life: create, start, wait under the bundle's limits, classify, remove.

The sandbox is decided here and nowhere else. The submission sees its bundle folder read-only
at /bundle (its working directory), the answer-free input read-only, an empty writable
/output, a private tmpfs /tmp, and the program's own binds; no network, no capabilities, no
new privileges, an unprivileged user, a read-only root file system, and memory, CPU and
process-count limits. Removal is in a `finally`, and every container is registered by name
(`_LIVE`) so a Ctrl-C in any thread finds it; a detached watchdog holds the time limit even
if this process dies, and `removal.reap_orphans` removes what a dead controller left
behind. What the host reads of a running container (memory, CPU, output) is `watch`.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import docker
import docker.errors
import requests.exceptions
from docker.types import DeviceRequest, LogConfig, Mount

from evaluator.bundles import policy
from evaluator.bundles.spec import Bundle
from evaluator.core.errors import RunFailure
from evaluator.core.gate import Refused, no_byte_code, read_bounded, read_json
from evaluator.core.owner import owner_id
from evaluator.runners import interrupts
from evaluator.runners.base import PREDICTIONS_FILE, Exit, RunRequest, classify, live_log
from evaluator.runners.docker import removal, watch
from evaluator.runners.docker.program import INPUT, LIBRARY_MOUNT, OUTPUT, WORKDIR, Program
from evaluator.runners.limits import thread_settings
from evaluator.runners.watchdog import spawn as spawn_watchdog
from evaluator.scoring.predictions import MAX_BYTES

GRACE_S = 10.0  # start-up allowance before the watchdog enforces a container's time limit

# Containers this process is running (by name), so that a Ctrl-C or SIGTERM removes them even
# when the run is in a worker thread of a parallel matrix, where KeyboardInterrupt never lands.
_LIVE: dict[str, bool] = {}


class _Outcome:
    def __init__(self, *, wall_s: float, exit_code: int | None, log: str,
                 peak_memory: int | None, timed_out: bool, oom_killed: bool,
                 memory_limit: int, details: dict, output_exceeded: bool = False,
                 cpu_s: float | None = None):
        self.wall_s, self.exit_code, self.log, self.cpu_s = wall_s, exit_code, log, cpu_s
        self.peak_memory, self.timed_out, self.oom_killed = peak_memory, timed_out, oom_killed
        self.memory_limit, self.details = memory_limit, details
        self.output_exceeded = output_exceeded


def run_container(client, request: RunRequest, program: Program, image_id: str,
                  staging: Path, gpus: int, host_cpus: int,
                  also_held: tuple[Path, ...] = ()) -> _Outcome:
    """Run `program` in a fresh container with `staging` as its /output (`also_held`: other
    writable folders counted against the output limit) and remove it, however it ends."""
    bundle = request.bundle
    name = f"qashift-{re.sub(r'[^a-zA-Z0-9_.-]', '-', bundle.id)[:40]}-{uuid.uuid4().hex[:8]}"
    kwargs = container_kwargs(request, program, image_id, staging, gpus, name, host_cpus)
    parent = watch.memory_parent(client, name)
    if parent is not None:
        kwargs["cgroup_parent"] = parent
    container, sampler, watchdog = None, None, None
    live = contextlib.ExitStack()  # its log shown while it runs (`base.live_log`)
    phases: dict[str, float] = {}  # seconds per step, for the overhead benchmark
    mark = time.perf_counter()
    _LIVE[name] = True  # before create: a Ctrl-C during create still finds it by name
    try:
        if interrupts.stopping():
            raise KeyboardInterrupt(f"{bundle.id}: not started, this controller is stopping")
        container = client.containers.create(**kwargs)
        # Output is streamed from an attach made before start, keeping only its tail; the
        # daemon stores none of it (log driver "none"), so 1 GB of stdout costs no disk.
        log = watch.LogTail(client.api.attach(container.id, stdout=True, stderr=True,
                                         stream=True, logs=False))
        live.enter_context(live_log(log.peek))
        start = time.perf_counter()
        phases["create"] = start - mark
        # the limit holds even if this process is killed: a detached watchdog removes the
        # container at its deadline, or at once when this controller is gone
        watchdog = spawn_watchdog(container.id, time.time() + bundle.timeout + GRACE_S)
        try:
            container.start()
        except docker.errors.APIError as exc:
            if interrupts.stopping():  # removed by a Ctrl-C between create and start
                raise KeyboardInterrupt(f"{bundle.id}: run cancelled") from None
            if gpus and "device driver" in str(exc):
                raise RunFailure("no-gpu", f"{bundle.id} asks for {gpus} GPU(s) but "
                                 f"the Docker daemon offers none (no NVIDIA container "
                                 f"toolkit?); retry with --device cpu") from None
            raise
        phases["start"] = time.perf_counter() - start
        sampler = watch.ContainerWatch(container.id, (staging, *also_held), _output_limit(bundle),
                                  on_output_exceeded=lambda: _quietly(container.kill),
                                  parent=parent)
        sampler.start()
        timed_out, status = False, None
        while status is None:
            remaining = bundle.timeout - (time.perf_counter() - start)
            if remaining <= 0:
                timed_out = True
                _quietly(container.kill)
                status = container.wait(timeout=30)
                break
            try:  # short waits keep Ctrl-C responsive; wait returns at once on exit
                status = container.wait(timeout=min(remaining, 2.0))
            except requests.exceptions.RequestException:
                pass
            except docker.errors.APIError:
                if not interrupts.stopping():
                    raise
            if interrupts.stopping():  # Ctrl-C/SIGTERM while this ran in a worker thread
                raise KeyboardInterrupt(f"{bundle.id}: run cancelled")
        wall = time.perf_counter() - start
        phases["wait"] = wall - phases["start"]
        mark = time.perf_counter()
        sampler.stop()
        state = container.client.api.inspect_container(container.id)["State"]
        text = log.text()
        phases["inspect_and_log"] = time.perf_counter() - mark
        return _Outcome(wall_s=wall, exit_code=state.get("ExitCode", status["StatusCode"]),
                        log=text, peak_memory=sampler.peak, timed_out=timed_out,
                        oom_killed=bool(state.get("OOMKilled")),
                        memory_limit=kwargs["mem_limit"],
                        output_exceeded=sampler.output_exceeded, cpu_s=sampler.cpu_s,
                        details={"container_limits": _limits_summary(kwargs),
                                 "gpus": gpus, "log_bytes": log.total,
                                 "phases_s": phases})
    finally:
        live.close()
        if sampler is not None:
            sampler.stop()
        mark = time.perf_counter()
        removal.remove(client, container.id if container is not None else name)
        watch.remove_cgroup(name)
        phases["remove"] = time.perf_counter() - mark
        _LIVE.pop(name, None)
        if watchdog is not None:
            watchdog.terminate()
            try:
                watchdog.wait(timeout=10)
            except subprocess.TimeoutExpired:
                watchdog.kill()


def container_kwargs(request: RunRequest, program: Program, image_id: str, staging: Path,
                     gpus: int, name: str, host_cpus: int) -> dict:
    """The Docker SDK's `containers.create` arguments: the sandbox and its limits."""
    bundle = request.bundle
    res = bundle.resources  # checked against the operator's policy when loaded
    memory = int(res["memory"])
    cpus = min(float(res["cpus"]), float(host_cpus))
    if request.cpus:  # its share of a parallel matrix: these cores, not a time slice
        cpus = min(cpus, len(request.cpus))
    kwargs = dict(
        image=image_id, command=program.argv, name=name,
        working_dir=WORKDIR, user=policy.current().user, hostname="qashift",
        labels={removal.LABEL: "1", "qashift.bundle": bundle.id,
                "qashift.testset": request.testset_id, "qashift.pid": str(os.getpid()),
                "qashift.owner": owner_id(),
                "qashift.folder": str(bundle.folder.resolve())},
        environment={"HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8",
                     "LC_ALL": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
                     "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                     **thread_settings(cpus), **program.environment},
        mounts=[Mount(WORKDIR, str(bundle.folder.resolve()), type="bind", read_only=True),
                Mount(INPUT, str(request.input_path.resolve()), type="bind",
                      read_only=True),
                Mount(OUTPUT, str(staging), type="bind", read_only=False),
                *(Mount(target, str(source), type="bind", read_only=True)
                  for target, source in program.mounts.items()),
                *(Mount(target, str(source), type="bind", read_only=False)
                  for target, source in program.writable.items())],
        network_mode="none", cap_drop=["ALL"], security_opt=["no-new-privileges"],
        read_only=True,
        tmpfs={"/tmp": f"rw,nosuid,nodev,exec,size={memory}",
               **{masked: "ro,nosuid,nodev,noexec,size=4k"
                  for masked in byte_code_masks(bundle.folder, program)}},
        mem_limit=memory, memswap_limit=memory, nano_cpus=int(cpus * 1e9),
        pids_limit=int(res["pids"]), init=True, ipc_mode="private",
        log_config=LogConfig(type="none"),
        stdin_open=False, tty=False, detach=True,
    )
    if request.cpus:
        kwargs["cpuset_cpus"] = ",".join(map(str, request.cpus))
    if gpus:
        kwargs["device_requests"] = [DeviceRequest(count=gpus, capabilities=[["gpu"]])]
    return kwargs


def byte_code_masks(folder: Path, program: Program) -> list[str]:
    """Where in the container an empty folder hides a `__pycache__` of the bundle or of a
    library it names. Byte code is not part of their digests (`core.gate.folder_digest`), so
    what runs must not read it: a cache may hold code its sources do not show."""
    roots = {WORKDIR: folder, **{target: Path(source) for target, source in
                                 program.mounts.items() if target.startswith(LIBRARY_MOUNT)}}
    masks = []
    for target, root in roots.items():
        for parent, dirs, _files in os.walk(root):  # never follows a link
            hidden = [d for d in dirs if no_byte_code(d, True)]
            masks += [f"{target}/{(Path(parent).relative_to(root) / d).as_posix()}"
                      for d in hidden]
            dirs[:] = [d for d in dirs if d not in hidden]
    return sorted(masks)


def classify_exit(bundle: Bundle, outcome: _Outcome, staging: Path) -> None:
    """Raise the run's failure class (runners.base.classify), if it failed."""
    classify(bundle.id, Exit(
        outcome.exit_code, outcome.log, outcome.timed_out, bundle.timeout,
        killed_for_memory=outcome.oom_killed, peak_memory=outcome.peak_memory,
        memory_limit=outcome.memory_limit, output_exceeded=outcome.output_exceeded,
        output_limit=_output_limit(bundle),
        produced=(staging / PREDICTIONS_FILE).exists() or bundle.kind == "approach"))


def _output_limit(bundle: Bundle) -> int:
    return int(bundle.resources["output"])


def _collect(produced: Path, target: Path) -> None:
    """Copy the predictions out through the bounded reader (no link followed, no FIFO
    waited on, nothing read past the limit)."""
    if not os.path.lexists(produced):
        return  # load_predictions reports no-predictions
    try:
        data = read_bounded(produced, MAX_BYTES, PREDICTIONS_FILE)
    except Refused as exc:
        raise RunFailure("malformed-predictions", str(exc)) from None
    target.write_bytes(data)


def _readable(source: Path, spare: Path) -> Path:
    """`source` if the container's unprivileged user can read all of it, else a world-readable
    copy at `spare` (checkpoints are often saved 0600 by their owner)."""
    source = source.resolve()
    entries = [source, *source.rglob("*")] if source.is_dir() else [source]

    def needed(entry: Path) -> int:  # others may read files, read and enter folders
        return 0o005 if entry.is_dir() else 0o004

    if all(os.stat(e).st_mode & needed(e) == needed(e) for e in entries):
        return source
    if source.is_dir():
        shutil.copytree(source, spare, symlinks=True,  # never follow a link out of the model
                        ignore=shutil.ignore_patterns("__pycache__"))
    else:
        shutil.copy2(source, spare)
    for entry in [spare, *spare.rglob("*")] if spare.is_dir() else [spare]:
        entry.chmod(0o755 if entry.is_dir() else 0o644)
    return spare


def with_program_record(details: dict, path: Path) -> dict:
    """`details` with the run details the QA program wrote to `path` (throughput, batch size,
    timings) where it wrote a small, well-formed JSON object. The program runs in an image
    the bundle may choose, so what the controller measured (the image, the container's
    limits, the phases) is never replaced by what the program says."""
    try:
        record = read_json(path, 1 << 20)
    except Refused:
        return details
    return {**record, **details} if isinstance(record, dict) else details


def _quietly(call: Callable[[], object]) -> None:
    try:
        call()
    except Exception:  # noqa: BLE001 - the container may already have exited
        pass


def _limits_summary(kwargs: dict) -> dict:
    return {"memory": kwargs["mem_limit"], "cpus": kwargs["nano_cpus"] / 1e9,
            "cpuset": kwargs.get("cpuset_cpus"),
            "pids": kwargs["pids_limit"], "network": kwargs["network_mode"],
            "read_only_root": kwargs["read_only"], "user": kwargs["user"]}
