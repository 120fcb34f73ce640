"""Run a command, hf-qa or approach bundle in its own container, sandboxed, through the Docker
SDK for Python.

A run is a short state machine: resolve the image (`images`) -> stage the program
(`program`; a training's folders: `stage`) -> create, start, wait with the bundle's time
limit, classify the exit, collect the predictions, remove (`container`). Host and daemon
facts, and the Ctrl-C cleanup, are in `host`. `DockerRunner` puts these together.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import docker

from evaluator.bundles.spec import Bundle
from evaluator.core.errors import RunFailure, UserError
from evaluator.core.files import remove_tree, run_tempdir
from evaluator.runners import generative, interrupts
from evaluator.runners.base import (
    GENERATIONS_FILE,
    MANY,
    PREDICTIONS_FILE,
    RunRecord,
    RunRequest,
    TrainRequest,
    gpus_for,
    group_plan,
    group_records,
    python_script,
)
from evaluator.runners.docker import images
from evaluator.runners.docker.container import (
    _collect,
    _output_limit,
    _readable,
    classify_exit,
    run_container,
    with_program_record,
)
from evaluator.runners.docker.host import (
    cancel_all,
    daemon_available,
    gpu_info,
    host_cpus,
)
from evaluator.runners.docker.program import (
    CODE_MOUNT,
    GENERATIVE_CONFIG,
    INPUT,
    MODEL_MOUNT,
    MODELS_MOUNT,
    OUTPUT,
    PLAN,
    PREPARED_MOUNT,
    Program,
    library_binds,
    program_for,
    training_program,
)
from evaluator.runners.docker.removal import LABEL, reap_orphans
from evaluator.runners.docker.stage import RESUMABLE, TrainingStage

__all__ = ["LABEL", "MODEL_MOUNT", "DockerRunner", "Program", "TrainingStage", "cancel_all",
           "daemon_available", "gpu_info", "library_binds", "program_for", "reap_orphans"]


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
        gpus = gpus_for(approach.resources, request.device)
        stage = TrainingStage.of(request)
        staged = stage.prepare(request, _output_limit(approach))
        program = training_program(staged, stage.config, stage.checkpoints,
                                   stage.prepared if request.prepared is not None else None)
        image_id, image_ref, image_digest = self.resolve_image(approach, program.image)
        as_run = RunRequest(staged, stage.train, stage.model, request.label, request.device)
        with stage.mirroring_progress(request.checkpoint_dir):
            outcome = run_container(self.client, as_run, program, image_id, stage.model, gpus,
                                    self._host_cpus(), also_held=(stage.checkpoints,))
        outcome.details.update(image=image_ref, image_id=image_id)
        record = RunRecord(runner=self.name, wall_s=outcome.wall_s, exit_code=outcome.exit_code,
                           log=outcome.log, peak_memory_bytes=outcome.peak_memory,
                           image_digest=image_digest, device="gpu" if gpus else "cpu",
                           details=outcome.details, cpu_s=outcome.cpu_s)
        try:
            classify_exit(approach, outcome, stage.model)
            stage.hand_back(request, _output_limit(approach))
        except RunFailure as failure:
            if failure.failure_class not in RESUMABLE:
                remove_tree(stage.root)  # nothing worth resuming from: refused or over the cap
            raise
        return record

    # -- the run --------------------------------------------------------------------------
    def run(self, request: RunRequest) -> RunRecord:
        bundle = request.bundle
        gpus = gpus_for(bundle.resources, request.device)
        program = program_for(bundle, gpus, request.prepared)
        image_id, image_ref, image_digest = self.resolve_image(bundle, program.image)
        with run_tempdir("docker") as tmp:
            staging = Path(tmp) / "output"
            staging.mkdir()
            staging.chmod(0o777)  # the container's user owns nothing on the host; tmp is 0700
            if bundle.kind == "generative":  # its prompt, demonstrations and decoding
                config = Path(tmp) / "generative.json"
                config.write_text(json.dumps(generative.program_config(bundle)))
                program.mounts[GENERATIVE_CONFIG] = config
            program.mounts = {target: _readable(Path(source), Path(tmp) / f"mount{i}")
                              for i, (target, source) in enumerate(program.mounts.items())}
            outcome = run_container(self.client, request, program, image_id, staging, gpus,
                                    self._host_cpus())
            outcome.details.update(image=image_ref, image_id=image_id)
            if program.record:  # hf-qa: throughput, batch size, timings from our program
                outcome.details = with_program_record(outcome.details, staging / program.record)
            if gpus:
                outcome.details.update(gpu_info())
            record = RunRecord(runner=self.name, wall_s=outcome.wall_s,
                               exit_code=outcome.exit_code, log=outcome.log,
                               peak_memory_bytes=outcome.peak_memory, image_digest=image_digest,
                               device="gpu" if gpus else "cpu", details=outcome.details,
                               cpu_s=outcome.cpu_s)
            classify_exit(bundle, outcome, staging)
            mark = time.perf_counter()
            _collect(staging / PREDICTIONS_FILE, request.output_path)
            if bundle.kind == "generative":
                _collect(staging / GENERATIONS_FILE, request.output_dir / GENERATIONS_FILE)
            outcome.details["phases_s"]["collect"] = time.perf_counter() - mark
        return record

    def can_group(self, bundle: Bundle) -> bool:
        """Whether `run_many` can run this bundle's systems in one container: its command is
        a Python script run as `python3 SCRIPT ARGS`."""
        return bundle.kind == "command" and bundle.command is not None and \
            python_script(bundle.command) is not None

    def run_many(self, requests: list[RunRequest]) -> list[RunRecord | None]:
        """Several systems of one approach on one input in one container, one process
        (`many.py`, read-only at /opt/qashift), each system's weights read-only at
        /models/N and its predictions in /output/N: per request its record, or None where its
        run did not end well (it is then run alone). The container's limits are one run's,
        its time limit and output cap one run's times the systems."""
        bundle, count = requests[0].bundle, len(requests)
        gpus = gpus_for(bundle.resources, requests[0].device)
        program = program_for(bundle, gpus, requests[0].prepared)
        image_id, image_ref, image_digest = self.resolve_image(bundle, program.image)
        group = dataclasses.replace(bundle, resources={
            **bundle.resources, "timeout": bundle.timeout * count,
            "output": int(bundle.resources["output"]) * count})
        with run_tempdir("docker") as tmp:
            staging = Path(tmp) / "output"
            staging.mkdir()
            staging.chmod(0o777)  # the container's user owns nothing on the host; tmp is 0700
            for i in range(count):
                (staging / str(i)).mkdir()
                (staging / str(i)).chmod(0o777)
            plan = Path(tmp) / "plan.json"
            plan.write_text(group_plan(bundle.command, [
                {"input": INPUT, "output": f"{OUTPUT}/{i}/{PREDICTIONS_FILE}",
                 "model": f"{MODELS_MOUNT}/{i}",
                 "prepared": PREPARED_MOUNT if r.prepared is not None else None}
                for i, r in enumerate(requests)],
                [f"{OUTPUT}/log-{i}.txt" for i in range(count)], f"{OUTPUT}/timings.json"))
            plan.chmod(0o644)
            mounts = {target: source for target, source in program.mounts.items()
                      if target != MODEL_MOUNT}
            mounts.update({f"{MODELS_MOUNT}/{i}": Path(r.bundle.model["path"])
                           for i, r in enumerate(requests)})
            mounts.update({f"{CODE_MOUNT}/{MANY.name}": MANY, PLAN: plan})
            program = Program(["python3", f"{CODE_MOUNT}/{MANY.name}", PLAN],
                              mounts={target: _readable(Path(source), Path(tmp) / f"mount{i}")
                                      for i, (target, source) in enumerate(mounts.items())},
                              environment=program.environment)
            request = RunRequest(group, requests[0].input_path, staging,
                                 requests[0].testset_id, requests[0].device, requests[0].cpus,
                                 requests[0].prepared)
            outcome = run_container(self.client, request, program, image_id, staging, gpus,
                                    self._host_cpus())
            for i, r in enumerate(requests):
                try:
                    _collect(staging / str(i) / PREDICTIONS_FILE, r.output_path)
                except RunFailure:
                    pass  # refused here: run alone, its failure is named there
            return group_records(
                self.name, requests, staging / "timings.json",
                [staging / f"log-{i}.txt" for i in range(count)], outcome.cpu_s,
                outcome.peak_memory, "gpu" if gpus else "cpu",
                {"wall_s": outcome.wall_s, "exit_code": outcome.exit_code,
                 "timed_out": outcome.timed_out},
                {**outcome.details, "image": image_ref, "image_id": image_id,
                 "image_digest": image_digest})

    def resolve_image(self, bundle: Bundle, ref: str | None = None) -> tuple[str, str, str]:
        """(image id, reference as given, digest recorded with the result); see
        images.resolve_image."""
        return images.resolve_image(lambda: self.client, bundle, ref)

    def _host_cpus(self) -> int:
        if self._ncpu is None:
            self._ncpu = host_cpus(self.client)
        return self._ncpu

