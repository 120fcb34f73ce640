"""Run a command bundle as a local subprocess. NOT ISOLATED: use the docker runner for
untrusted code. It gets a private copy of the bundle folder, the answer-free input, a
minimal environment, its own virtual environment when it pins requirements, a time limit
and a captured log.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from evaluator.bundles.spec import Bundle
from evaluator.core import settings
from evaluator.core.errors import RunFailure
from evaluator.core.files import exclusive, run_tempdir
from evaluator.runners import interrupts
from evaluator.runners.base import (
    MANY,
    Exit,
    RunRecord,
    RunRequest,
    TrainRequest,
    classify,
    file_log,
    fill_command,
    gpus_for,
    group_plan,
    group_records,
    last_line,
    live_log,
    python_script,
    read_tail,
)
from evaluator.runners.limits import cancel_all, run_with_limit, thread_settings


class LocalRunner:
    name = "local"

    def __init__(self):
        interrupts.on_interrupt(cancel_all)  # a terminated controller leaves no runs behind

    def cancel(self) -> int:
        """Kill every process group this process started (Ctrl-C of a matrix)."""
        return cancel_all()

    def run(self, request: RunRequest) -> RunRecord:
        bundle = request.bundle
        device = _device_for(bundle, request.device)
        return self._execute(bundle, bundle.command, bundle.id, None, request.cpus, device,
                             input=str(request.input_path), output=str(request.output_path),
                             model=str(bundle.model.get("path", "")),
                             prepared=_path(request.prepared))

    def train(self, request: TrainRequest) -> RunRecord:
        """Run an approach's train command; its checkpoints survive a killed attempt."""
        for folder in (request.model_dir, request.checkpoint_dir):
            folder.mkdir(parents=True, exist_ok=True)
        device = _device_for(request.approach, request.device)
        return self._execute(request.approach, request.approach.train_command, request.label,
                             request.pid_file, (), device, train=str(request.train_path),
                             config=str(request.config_path), model=str(request.model_dir),
                             checkpoints=str(request.checkpoint_dir),
                             prepared=_path(request.prepared))

    def can_group(self, bundle: Bundle) -> bool:
        """Whether `run_many` can run this bundle's systems together: its command is a
        Python script run as `python3 SCRIPT ARGS`."""
        return bundle.command is not None and python_script(bundle.command) is not None

    def run_many(self, requests: list[RunRequest]) -> list[RunRecord | None]:
        """Several systems of one approach on one input, in one process (`many.py`): per
        request, in order, its record, or None where its run did not end well or the group
        stopped before it (it is then run alone, which names its failure); `details.group`
        keeps the group's totals."""
        bundle = requests[0].bundle
        device = _device_for(bundle, requests[0].device)
        with run_tempdir("local") as tmp:
            workdir, env = self._environment(bundle, Path(tmp), device)
            shutil.copyfile(MANY, Path(tmp) / MANY.name)
            logs = [Path(tmp) / f"log-{i}.txt" for i in range(len(requests))]
            timings = Path(tmp) / "timings.json"
            plan = Path(tmp) / "plan.json"
            plan.write_text(group_plan(bundle.command, [
                {"input": str(r.input_path), "output": str(r.output_path),
                 "model": str(r.bundle.model.get("path", "")), "prepared": _path(r.prepared)}
                for r in requests], [str(log) for log in logs], str(timings)))
            exit_code, wall, peak, timed_out, cpu = run_with_limit(
                shlex.join(["python3", str(Path(tmp) / MANY.name), str(plan)]), workdir, env,
                Path(tmp) / "log.txt", bundle.timeout * len(requests), None, requests[0].cpus)
            return group_records(
                self.name, requests, timings, logs, cpu, peak, device,
                {"wall_s": wall, "exit_code": exit_code, "timed_out": timed_out},
                {"isolated": False, "cpus": list(requests[0].cpus) or None})

    def _environment(self, bundle: Bundle, tmp: Path, device: str) -> tuple[Path, dict]:
        """A private copy of the bundle folder (and of its libraries, importable) in `tmp`,
        and the minimal environment a run gets; its own virtual environment when the bundle
        pins requirements."""
        workdir = tmp / "bundle"
        shutil.copytree(bundle.folder, workdir, symlinks=True,  # links were checked on load
                        ignore=shutil.ignore_patterns("__pycache__"))
        env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(tmp),
               "TMPDIR": str(tmp), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
               "PYTHONHASHSEED": "0", **thread_settings()}
        if device == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""  # a run given no GPU sees none
        elif "CUDA_VISIBLE_DEVICES" in os.environ:
            env["CUDA_VISIBLE_DEVICES"] = os.environ["CUDA_VISIBLE_DEVICES"]
        if bundle.libraries:  # private copies too, importable by their package names
            libraries = tmp / "libraries"
            for library in bundle.libraries:
                shutil.copytree(library, libraries / library.name, symlinks=True,
                                ignore=shutil.ignore_patterns("__pycache__"))
            env["PYTHONPATH"] = str(libraries)
        requirements = bundle.environment.get("requirements")
        if requirements:
            venv = ensure_venv(bundle.folder / requirements)
            env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
            env["VIRTUAL_ENV"] = str(venv)
        return workdir, env

    def _execute(self, bundle: Bundle, command: str, label: str, pid_file: Path | None = None,
                 cpus: tuple[int, ...] = (), device: str = "cpu",
                 **paths: str | None) -> RunRecord:
        """`command` with its placeholders filled, in a private copy of the bundle folder, on
        `cpus` where given. `device` ("cpu" or "gpu", `_device_for`) is what the run gets,
        recorded with it; a "cpu" run sees no GPU."""
        with run_tempdir("local") as tmp:
            workdir, env = self._environment(bundle, Path(tmp), device)
            log_path = Path(tmp) / "log.txt"
            with live_log(file_log(log_path)):
                exit_code, wall, peak, timed_out, cpu = run_with_limit(
                    fill_command(command, **paths), workdir, env, log_path, bundle.timeout,
                    pid_file, cpus)
            log = read_tail(log_path)
        record = RunRecord(runner=self.name, wall_s=wall, exit_code=exit_code, log=log,
                           peak_memory_bytes=peak, device=device,
                           cpu_s=cpu,
                           details={"isolated": False, "cpus": list(cpus) or None})
        classify(label, Exit(exit_code, log, timed_out, bundle.timeout, peak_memory=peak))
        return record


NVIDIA_DRIVER = Path("/proc/driver/nvidia/version")  # a loaded NVIDIA driver (Linux)
NVIDIA_SMI = shutil.which("nvidia-smi")  # its tool, also where /proc has no driver (WSL2)


def _device_for(bundle: Bundle, device: str) -> str:
    """"gpu" where the run gets GPUs (`gpus_for`), else "cpu"; RunFailure no-gpu when it
    should get one and this host shows no NVIDIA GPU (neither a loaded driver nor
    nvidia-smi)."""
    gpus = gpus_for(bundle.resources, device)
    if gpus and not (NVIDIA_DRIVER.is_file() or NVIDIA_SMI):
        raise RunFailure("no-gpu", f"{bundle.id} asks for {gpus} GPU(s) but this host shows "
                         f"none (no NVIDIA driver or nvidia-smi); retry with --device cpu")
    return "gpu" if gpus else "cpu"


def _path(path: Path | None) -> str | None:
    return None if path is None else str(path)


def ensure_venv(requirements: Path) -> Path:
    """A virtual environment with exactly these pinned requirements, built once and cached.

    Built in place (venv scripts hold absolute paths) under a file lock; `.complete` marks a
    finished build, so an interrupted one is rebuilt from scratch.
    """
    if not requirements.is_file():
        raise RunFailure("build-failed", f"requirements file {requirements} is missing")
    key = hashlib.sha256(requirements.read_bytes()).hexdigest()[:16]
    target = settings.cache_dir() / "venvs" / key
    with exclusive(target.parent / f"{key}.lock"):
        if (target / ".complete").exists():
            return target
        shutil.rmtree(target, ignore_errors=True)
        try:
            subprocess.run([sys.executable, "-m", "venv", str(target)], check=True,
                           capture_output=True)
            subprocess.run([str(target / "bin" / "python"), "-m", "pip", "install", "--quiet",
                            "-r", str(requirements)], check=True, capture_output=True, text=True)
        except subprocess.CalledProcessError as exc:
            shutil.rmtree(target, ignore_errors=True)
            raise RunFailure("build-failed", f"installing {requirements.name} failed: "
                             f"{last_line(exc.stderr or '')}", exc.stderr or "") from None
        (target / ".complete").touch()
    return target
