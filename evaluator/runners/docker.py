"""Run a command bundle in its own container, sandboxed, through the Docker SDK for Python.

A run is a short state machine: resolve the image (digest-pinned, local id, or built once from
the bundle's Dockerfile and cached by the content hash of its folder) -> create the container
-> start -> wait (with the bundle's time limit) -> classify the exit -> collect the
predictions -> remove the container. Removal is in a `finally`, so it happens on success,
failure, timeout and Ctrl-C alike; because a parallel matrix runs cells in worker threads,
where KeyboardInterrupt never arrives, the runner also registers a cleanup (kill and remove
this process's containers) to run on SIGINT and SIGTERM (`interrupts`).

What the submission sees: the bundle folder read-only at /bundle (its working directory), the
answer-free input read-only at /input/input.json, an empty writable /output, a private tmpfs
/tmp, and nothing else from the host. An `hf-qa` bundle runs our QA program
(`python3 -m evaluator.qa`) in the standard runner image instead of a command; it
additionally sees its checkpoint read-only at /model and the QA program (`evaluator/qa`, a
package that imports nothing else of the project) read-only under /opt/qashift. No network,
no capabilities, no new privileges, an unprivileged user, a read-only root file system, and
memory, CPU and process-count limits.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import docker
import docker.errors
import requests.exceptions
from docker.types import DeviceRequest, LogConfig, Mount

from evaluator import qa
from evaluator.bundles import policy
from evaluator.bundles.spec import Bundle
from evaluator.core import settings
from evaluator.core.errors import RunFailure, UserError
from evaluator.core.files import exclusive, remove_tree, run_tempdir, write_atomic
from evaluator.core.gate import (
    Limits,
    Refused,
    folder_digest,
    no_byte_code,
    read_bounded,
    read_json,
    walk,
)
from evaluator.core.hashing import sha256_bytes
from evaluator.core.owner import owner_alive, owner_id
from evaluator.qa.predict import program_args
from evaluator.runners import hfqa, images, interrupts
from evaluator.runners.base import (
    LOG_TAIL_BYTES,
    PREDICTIONS_FILE,
    Exit,
    RunRecord,
    RunRequest,
    TrainRequest,
    classify,
    fill_command,
)
from evaluator.runners.images import PYTHON_TAG, RUNNER_TAGS
from evaluator.runners.watchdog import spawn as spawn_watchdog
from evaluator.scoring.predictions import MAX_BYTES

LABEL = "qashift"  # every container we create carries qashift=1, so leftovers can be found
MAX_OUTPUT_FILES = 10_000
INPUT, OUTPUT, WORKDIR = "/input/input.json", "/output", "/bundle"
MODEL_MOUNT, CODE_MOUNT, RECORD = "/model", "/opt/qashift", "record.json"
CONFIG, CHECKPOINTS = "/input/config.json", "/checkpoints"  # training
LIBRARY_MOUNT = "/libraries"  # shared packages a bundle names (`libraries:`)
QA_CODE = Path(qa.__file__).resolve().parent  # the only project code a container sees
GRACE_S = 10.0  # start-up allowance before the watchdog enforces a container's time limit
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


# Containers this process is running (by name), so that a Ctrl-C or SIGTERM removes them even
# when the run is in a worker thread of a parallel matrix, where KeyboardInterrupt never lands.
_LIVE: dict[str, bool] = {}


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
        _remove(client, name)
    client.close()
    return len(names)


@dataclass
class Program:
    """What a container runs: a command bundle's shell command, or our hf-qa program."""
    argv: list[str]
    image: str | None = None  # None: the bundle's environment (image, build or the default)
    mounts: dict[str, Path] = field(default_factory=dict)  # extra read-only binds
    writable: dict[str, Path] = field(default_factory=dict)  # extra writable binds (training)
    environment: dict[str, str] = field(default_factory=dict)
    record: str | None = None  # a file in /output where the program writes its run details


def program_for(bundle: Bundle, gpus: int) -> Program:
    """The container's program for a command or hf-qa bundle."""
    if bundle.kind == "hf-qa":
        spec = hfqa.model_spec(bundle)
        hfqa.check_model(spec, bundle.id)
        # a hub snapshot's files link to ../../blobs: mount its repository, point inside it
        mounted, inside = ((spec.directory.parent.parent, f"{MODEL_MOUNT}/snapshots/"
                            f"{spec.directory.name}") if "hub" in bundle.model
                           else (spec.directory, MODEL_MOUNT))
        argv = ["python3", *program_args(
            spec, model=inside, input_path=INPUT,
            output_path=f"{OUTPUT}/{PREDICTIONS_FILE}", record_path=f"{OUTPUT}/{RECORD}",
            device="cuda" if gpus else "cpu")]
        return Program(argv, image=bundle.environment.get("image") or RUNNER_TAGS[gpus > 0],
                       mounts={MODEL_MOUNT: mounted,
                               f"{CODE_MOUNT}/evaluator/qa": QA_CODE},
                       environment={"PYTHONPATH": CODE_MOUNT}, record=RECORD)
    if not bundle.command:
        raise UserError(f"{bundle.id} has no command; the docker runner runs command and "
                        f"hf-qa bundles")
    model = bundle.model.get("path")  # a trained system's weights, read-only at /model
    mounts, environment = library_binds(bundle)
    return Program(["/bin/sh", "-c", fill_command(
        bundle.command, input=INPUT, output=f"{OUTPUT}/{PREDICTIONS_FILE}", model=MODEL_MOUNT)],
        mounts={**({MODEL_MOUNT: Path(model)} if model else {}), **mounts},
        environment=environment)


RESUMABLE = ("nonzero-exit", "timeout", "out-of-memory", "no-gpu-kernel")  # a training that
# ended so keeps its staged checkpoints for the next attempt


class TrainingStage:
    """The folders a training container sees, outside the workspace: a copy of the approach
    and its libraries, the train split and config, a fresh weights folder, and the
    checkpoints. Its name is a digest of the cell's folder, so an attempt after a killed
    controller finds its checkpoints again; it is removed once the weights are handed back
    (through the gate). The container's mount table then names no workspace or checkout."""

    def __init__(self, root: Path):
        self.root = root
        self.checkpoints, self.model = root / "checkpoints", root / "model"
        self.train, self.config = root / "input" / "train.json", root / "input" / "config.json"

    @classmethod
    def of(cls, request: TrainRequest) -> TrainingStage:
        cell = sha256_bytes(str(request.checkpoint_dir.resolve()).encode())[:24]
        return cls(Path(tempfile.gettempdir()) / f"qashift-train-{cell}")

    def prepare(self, request: TrainRequest) -> Bundle:
        """Stage everything; the approach as the container sees it (its staged copy)."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o711)
        request.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        if not self.checkpoints.is_dir():  # a first attempt, or one after another runner's
            walk(request.checkpoint_dir, target=self.checkpoints,
                 label=f"{request.label}: its checkpoints")
        for folder in (self.root / "input", self.root / "code"):
            remove_tree(folder)
        (self.root / "input").mkdir()
        shutil.copyfile(request.train_path, self.train)
        shutil.copyfile(request.config_path, self.config)
        approach = request.approach
        code = self.root / "code"
        libraries = []
        for source, target in [(approach.folder, code / "approach"),
                               *((lib, code / "libraries" / lib.name)
                                 for lib in approach.libraries)]:
            target.parent.mkdir(parents=True, exist_ok=True)
            walk(source, target=target, label=str(source), skip=no_byte_code)
            libraries.append(target)
        remove_tree(self.model)
        self.model.mkdir()
        for path in [self.root / "input", *(self.root / "input").iterdir(), code,
                     *code.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        for path in [self.model, self.checkpoints, *self.checkpoints.rglob("*")]:
            path.chmod(0o777 if path.is_dir() else 0o666)  # the container's user owns nothing
        return dataclasses.replace(approach, folder=libraries[0], libraries=tuple(libraries[1:]))

    @contextlib.contextmanager
    def mirroring_progress(self, checkpoint_dir: Path, every: float = 1.0):
        """Copy the container's progress document (through the bounded reader) to the
        cell's checkpoint folder while it trains, where the controller shows it."""
        done = threading.Event()

        def loop() -> None:
            while not done.wait(every):
                try:
                    data = read_bounded(self.checkpoints / "progress.json", 64 << 10)
                except Refused:
                    continue
                write_atomic(checkpoint_dir / "progress.json", data)

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join(timeout=5)

    def hand_back(self, request: TrainRequest, output_cap: int) -> None:
        """Check the checkpoints at the gate, move the weights to the cell's model folder
        (through it too), and remove the stage."""
        kept = walk(self.checkpoints, limits=Limits(total_bytes=output_cap),
                    label=f"{request.label}: its checkpoints").total_bytes
        remove_tree(request.model_dir)
        walk(self.model, target=request.model_dir, limits=Limits(
            total_bytes=max(0, output_cap - kept)), label=f"{request.label}: its weights")
        remove_tree(self.root)


def library_binds(bundle: Bundle) -> tuple[dict[str, Path], dict[str, str]]:
    """The shared packages a bundle names, read-only under /libraries, on its PYTHONPATH."""
    if not bundle.libraries:
        return {}, {}
    return ({f"{LIBRARY_MOUNT}/{lib.name}": lib.resolve() for lib in bundle.libraries},
            {"PYTHONPATH": LIBRARY_MOUNT})


class DockerRunner:
    name = "docker"

    def __init__(self, client=None):
        self._client = client
        self._ncpu: int | None = None
        interrupts.on_interrupt(cancel_all)

    def cancel(self) -> int:
        """Kill and remove every container this process is running; see cancel_all."""
        return cancel_all()

    @property
    def client(self):
        if self._client is None:
            self._connect()
            reap_orphans(self._client)
        return self._client

    def _connect(self) -> None:
        if self._client is None:
            try:
                self._client = docker.from_env(timeout=120)
                self._client.ping()
            except Exception as exc:  # noqa: BLE001
                raise UserError(f"no Docker daemon answers ({type(exc).__name__}); start "
                                f"dockerd or use --runner local") from None

    # -- training -------------------------------------------------------------------------
    def train(self, request: TrainRequest) -> RunRecord:
        """An approach's train command in its container: the train split read-only at
        /input/input.json, its config read-only, the weights folder writable at /output (held
        to resources.output together with the checkpoint folder, writable at /checkpoints); no
        network. Everything it sees is staged outside the workspace (`TrainingStage`), so its
        mount table names no host folder of the controller's."""
        approach = request.approach
        gpus = self._gpus(approach, request.device)
        stage = TrainingStage.of(request)
        staged = stage.prepare(request)
        mounts, environment = library_binds(staged)
        program = Program(["/bin/sh", "-c", fill_command(
            approach.train_command, train=INPUT, config=CONFIG, model=OUTPUT,
            checkpoints=CHECKPOINTS)], mounts={CONFIG: stage.config, **mounts},
            writable={CHECKPOINTS: stage.checkpoints}, environment=environment)
        image_id, image_ref, image_digest = self.resolve_image(approach, program.image)
        as_run = RunRequest(staged, stage.train, stage.model, request.label, request.device)
        with stage.mirroring_progress(request.checkpoint_dir):
            outcome = self._run_container(as_run, program, image_id, stage.model, gpus,
                                          also_held=(stage.checkpoints,))
        outcome.details.update(image=image_ref, image_id=image_id)
        record = RunRecord(runner=self.name, wall_s=outcome.wall_s, exit_code=outcome.exit_code,
                           log=outcome.log, peak_memory_bytes=outcome.peak_memory,
                           image_digest=image_digest, device="gpu" if gpus else "cpu",
                           details=outcome.details)
        try:
            self._classify(approach, outcome, stage.model)
            stage.hand_back(request, _output_limit(approach))
        except RunFailure as failure:
            if failure.failure_class not in RESUMABLE:
                remove_tree(stage.root)  # nothing worth resuming from: refused or over the cap
            raise
        return record

    # -- the run --------------------------------------------------------------------------
    def run(self, request: RunRequest) -> RunRecord:
        bundle = request.bundle
        gpus = self._gpus(bundle, request.device)
        program = program_for(bundle, gpus)
        image_id, image_ref, image_digest = self.resolve_image(bundle, program.image)
        with run_tempdir("docker") as tmp:
            staging = Path(tmp) / "output"
            staging.mkdir()
            staging.chmod(0o777)  # the container's user owns nothing on the host; tmp is 0700
            program.mounts = {target: _readable(Path(source), Path(tmp) / f"mount{i}")
                              for i, (target, source) in enumerate(program.mounts.items())}
            outcome = self._run_container(request, program, image_id, staging, gpus)
            outcome.details.update(image=image_ref, image_id=image_id)
            if program.record:  # hf-qa: throughput, batch size, timings from our program
                outcome.details.update(_read_record(staging / program.record))
            if gpus:
                outcome.details.update(gpu_info())
            record = RunRecord(runner=self.name, wall_s=outcome.wall_s,
                               exit_code=outcome.exit_code, log=outcome.log,
                               peak_memory_bytes=outcome.peak_memory, image_digest=image_digest,
                               device="gpu" if gpus else "cpu", details=outcome.details)
            self._classify(bundle, outcome, staging)
            mark = time.perf_counter()
            _collect(staging / PREDICTIONS_FILE, request.output_path)
            outcome.details["phases_s"]["collect"] = time.perf_counter() - mark
        return record

    def _run_container(self, request: RunRequest, program: Program, image_id: str,
                       staging: Path, gpus: int, also_held: tuple[Path, ...] = ()) -> _Outcome:
        bundle = request.bundle
        name = f"qashift-{re.sub(r'[^a-zA-Z0-9_.-]', '-', bundle.id)[:40]}-{uuid.uuid4().hex[:8]}"
        kwargs = self._container_kwargs(request, program, image_id, staging, gpus, name)
        container, sampler, watchdog = None, None, None
        phases: dict[str, float] = {}  # seconds per step, for the overhead benchmark
        mark = time.perf_counter()
        _LIVE[name] = True  # before create: a Ctrl-C during create still finds it by name
        try:
            if interrupts.stopping():
                raise KeyboardInterrupt(f"{bundle.id}: not started, this controller is stopping")
            container = self.client.containers.create(**kwargs)
            # Output is streamed from an attach made before start, keeping only its tail; the
            # daemon stores none of it (log driver "none"), so 1 GB of stdout costs no disk.
            log = _LogTail(self.client.api.attach(container.id, stdout=True, stderr=True,
                                                  stream=True, logs=False))
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
            sampler = _ContainerWatch(container.id, (staging, *also_held), _output_limit(bundle),
                                  on_output_exceeded=lambda: _quietly(container.kill))
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
                            output_exceeded=sampler.output_exceeded,
                            details={"container_limits": _limits_summary(kwargs),
                                     "gpus": gpus, "log_bytes": log.total,
                                     "phases_s": phases})
        finally:
            if sampler is not None:
                sampler.stop()
            mark = time.perf_counter()
            _remove(self.client, container.id if container is not None else name)
            phases["remove"] = time.perf_counter() - mark
            _LIVE.pop(name, None)
            if watchdog is not None:
                watchdog.terminate()
                try:
                    watchdog.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    watchdog.kill()

    def _container_kwargs(self, request: RunRequest, program: Program, image_id: str,
                          staging: Path, gpus: int, name: str) -> dict:
        bundle = request.bundle
        res = bundle.resources  # checked against the operator's policy when loaded
        memory = int(res["memory"])
        cpus = min(float(res["cpus"]), float(self._host_cpus()))
        kwargs = dict(
            image=image_id, command=program.argv, name=name,
            working_dir=WORKDIR, user=policy.current().user, hostname="qashift",
            labels={LABEL: "1", "qashift.bundle": bundle.id,
                    "qashift.testset": request.testset_id, "qashift.pid": str(os.getpid()),
                    "qashift.owner": owner_id(),
                    "qashift.folder": str(bundle.folder.resolve())},
            environment={"HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8",
                         "LC_ALL": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
                         "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                         **program.environment},
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
            tmpfs={"/tmp": f"rw,nosuid,nodev,exec,size={memory}"},
            mem_limit=memory, memswap_limit=memory, nano_cpus=int(cpus * 1e9),
            pids_limit=int(res["pids"]), init=True, ipc_mode="private",
            log_config=LogConfig(type="none"),
            stdin_open=False, tty=False, detach=True,
        )
        if request.cpus:  # its share of a parallel matrix: these cores, not a time slice
            kwargs["cpuset_cpus"] = ",".join(map(str, request.cpus))
            kwargs["nano_cpus"] = int(min(cpus, len(request.cpus)) * 1e9)
        if gpus:
            kwargs["device_requests"] = [DeviceRequest(count=gpus, capabilities=[["gpu"]])]
        return kwargs

    def _classify(self, bundle: Bundle, outcome: _Outcome, staging: Path) -> None:
        classify(bundle.id, Exit(
            outcome.exit_code, outcome.log, outcome.timed_out, bundle.timeout,
            killed_for_memory=outcome.oom_killed, peak_memory=outcome.peak_memory,
            memory_limit=outcome.memory_limit, output_exceeded=outcome.output_exceeded,
            output_limit=_output_limit(bundle),
            produced=(staging / PREDICTIONS_FILE).exists() or bundle.kind == "approach"))

    # -- images ---------------------------------------------------------------------------
    def resolve_image(self, bundle: Bundle, ref: str | None = None) -> tuple[str, str, str]:
        """(image id, reference as given, digest recorded with the result); `ref` overrides
        the bundle's environment (hf-qa bundles run in the standard runner image)."""
        env = bundle.environment
        if ref is None and env.get("build"):
            image, tag = self._build(bundle, str(env["build"]))
            return image.id, tag, image.id
        ref = str(ref or env.get("image") or PYTHON_TAG)  # command bundles naming no image
        image = self._local_or_pull(bundle, ref)
        repo_digests = image.attrs.get("RepoDigests") or []
        pinned = ref if "@sha256:" in ref else None
        return image.id, ref, pinned or (repo_digests[0] if repo_digests else image.id)

    def _local_or_pull(self, bundle: Bundle, ref: str):
        client = self.client  # connecting (and reaping orphans) fails on its own terms
        try:
            return client.images.get(ref)
        except docker.errors.ImageNotFound:
            pass
        except docker.errors.APIError as exc:
            raise RunFailure("image-missing", f"{bundle.id}: bad image reference {ref!r} "
                             f"({_one_line(exc)})") from None
        if ref.startswith("sha256:"):
            raise RunFailure("image-missing", f"{bundle.id}: image {ref[:19]}... is not on "
                             f"this host and a bare id cannot be pulled")
        hint = (" (build it offline: qashift images wheelhouse DIR && qashift images runner "
                "DIR)" if ref.startswith("qashift/runner") else
                " (build it offline: qashift images python)" if ref.startswith("qashift/")
                else "")
        try:
            repository, tag = _split_ref(ref)
            self.client.api.pull(repository, tag=tag)
            return self.client.images.get(ref)
        except docker.errors.DockerException as exc:
            raise RunFailure("image-missing", f"{bundle.id}: image {ref} is not on this host "
                             f"and pulling it failed: {_one_line(exc)}{hint}") from None

    def _build(self, bundle: Bundle, dockerfile: str):
        """Build from the bundle folder once per content hash; concurrent builds share a lock."""

        if not (bundle.folder / dockerfile).is_file():
            raise RunFailure("build-failed", f"{bundle.id}: environment.build names "
                             f"{dockerfile}, which is not in the bundle folder")
        key = folder_digest(bundle.folder, with_mode=True)
        tag = f"qashift-bundle/{_repo_name(bundle.id)}:{key[:12]}"
        with exclusive(settings.cache_dir() / "docker-build-locks" / f"{key[:16]}.lock"):
            try:
                return self.client.images.get(tag), tag
            except docker.errors.ImageNotFound:
                pass
            network = policy.current().build_network  # the operator's, never the bundle's
            try:
                images.build(bundle.folder, tag, dockerfile=dockerfile, network_mode=network,
                             say=lambda _: None,
                             labels={LABEL: "1", "qashift.bundle": bundle.id,
                                     "qashift.context": key})
            except images.BuildError as exc:
                raise RunFailure("build-failed", f"{bundle.id}: docker build failed: {exc}",
                                 exc.log) from None
            except docker.errors.DockerException as exc:
                raise RunFailure("build-failed", f"{bundle.id}: docker build failed: "
                                 f"{_one_line(exc)}") from None
            return self.client.images.get(tag), tag

    # -- host facts -----------------------------------------------------------------------
    def _host_cpus(self) -> int:
        if self._ncpu is None:
            self._ncpu = int(self.client.info().get("NCPU") or os.cpu_count() or 1)
        return self._ncpu

    @staticmethod
    def _gpus(bundle: Bundle, device: str) -> int:
        """GPUs to request: the bundle's count, none with --device cpu, one with --device gpu."""
        wanted = int(bundle.resources.get("gpus", 0) or 0)
        if device == "cpu":
            return 0
        if device == "gpu":
            return max(wanted, 1)
        return wanted


class _Outcome:
    def __init__(self, *, wall_s: float, exit_code: int | None, log: str,
                 peak_memory: int | None, timed_out: bool, oom_killed: bool,
                 memory_limit: int, details: dict, output_exceeded: bool = False):
        self.wall_s, self.exit_code, self.log = wall_s, exit_code, log
        self.peak_memory, self.timed_out, self.oom_killed = peak_memory, timed_out, oom_killed
        self.memory_limit, self.details = memory_limit, details
        self.output_exceeded = output_exceeded


def _output_limit(bundle: Bundle) -> int:
    return int(bundle.resources["output"])


def _disk_use(folders: tuple[Path, ...], max_files: int) -> tuple[int, int]:
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


class _ContainerWatch:
    """Samples the container's memory high-water mark from the host's cgroup files, and the
    size of the host folders it can write (/output; a training's checkpoints too), killing it
    past the limit.

    The cgroup disappears with the container, so the last sample before exit is kept
    (cgroup v1 `memory.max_usage_in_bytes`; v2 `memory.peak` where the kernel has it). The
    output check runs every `interval`, so a fast writer overshoots by at most what it writes
    in that time.
    """
    def __init__(self, container_id: str, output: tuple[Path, ...] = (),
                 output_limit: int = policy.DEFAULTS["output"], on_output_exceeded=None,
                 interval: float = 0.1):
        self.files = [Path(f"/sys/fs/cgroup/memory/docker/{container_id}/"
                           f"memory.max_usage_in_bytes"),
                      Path(f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/"
                           f"memory.peak"),
                      Path(f"/sys/fs/cgroup/docker/{container_id}/memory.peak")]
        self.interval, self.peak = interval, None
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
        self._check_output()  # a writer that exited between two samples is caught here

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
        used, entries = _disk_use(self.output, MAX_OUTPUT_FILES)
        if used > self.output_limit or entries > MAX_OUTPUT_FILES:
            self.output_exceeded = True
            if self.on_output_exceeded is not None:
                self.on_output_exceeded()

    def _loop(self) -> None:
        while not self._done.wait(self.interval):
            self._sample()
            self._check_output()


class _LogTail:
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

    def text(self, timeout: float = 10.0) -> str:
        self._thread.join(timeout)
        data = b"".join(list(self._chunks))[-self.limit:]
        dropped = self.total - len(data)
        head = f"[... {dropped} earlier bytes dropped ...]\n" if dropped > 0 else ""
        return head + data.decode("utf-8", errors="replace")


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


def _read_record(path: Path) -> dict:
    """The hf-qa program's run details, if it wrote a small, well-formed JSON object."""
    try:
        record = read_json(path, 1 << 20)
    except Refused:
        return {}
    return record if isinstance(record, dict) else {}


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
            _remove(client, found["Id"])
            removed.append(",".join(name.lstrip("/") for name in found.get("Names") or ()))
    return removed


def _remove(client, container: str) -> None:
    """Force-remove a container; retried, because this is what keeps the host clean."""
    for attempt in range(3):
        try:
            client.api.remove_container(container, force=True, v=True)
            return
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as exc:
            if "already in progress" in str(exc):
                return
            time.sleep(0.5 * (attempt + 1))
        except Exception:  # noqa: BLE001 - e.g. a connection error; try again
            time.sleep(0.5 * (attempt + 1))


def _quietly(call) -> None:
    try:
        call()
    except Exception:  # noqa: BLE001 - the container may already have exited
        pass


def _limits_summary(kwargs: dict) -> dict:
    return {"memory": kwargs["mem_limit"], "cpus": kwargs["nano_cpus"] / 1e9,
            "cpuset": kwargs.get("cpuset_cpus"),
            "pids": kwargs["pids_limit"], "network": kwargs["network_mode"],
            "read_only_root": kwargs["read_only"], "user": kwargs["user"]}


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


def _split_ref(ref: str) -> tuple[str, str | None]:
    """'name@sha256:..' -> (name, 'sha256:..'); 'name:tag' -> (name, tag); 'name' -> latest."""
    if "@" in ref:
        name, digest = ref.split("@", 1)
        return name, digest
    name, _, tag = ref.rpartition(":")
    if name and "/" not in tag:
        return name, tag
    return ref, "latest"


def _repo_name(bundle_id: str) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", bundle_id.lower()).strip("-._") or "bundle"


def _one_line(exc: Exception) -> str:
    text = getattr(exc, "explanation", None) or str(exc)
    text = str(text).strip().splitlines()[0] if str(text).strip() else type(exc).__name__
    return text[:300]
