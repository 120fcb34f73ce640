"""Runners turn (bundle, answer-free input) into a predictions file and a run record.

The interface is one method, `run(request) -> RunRecord`, raising `RunFailure` with a failure
class when the submission fails. Runners never see gold answers and never touch the store.
"""

from __future__ import annotations

from evaluator.core.errors import UserError
from evaluator.runners.base import Runner, RunRecord, RunRequest

RUNNERS = ("local", "docker", "slurm")


def get_runner(name: str, **options) -> Runner:
    """The runner for command/hf-qa bundles; 'auto' picks docker when a daemon answers.
    `options` configure the slurm runner (partition, account)."""
    if name == "auto":
        from evaluator.runners import docker

        name = "docker" if docker.daemon_available() else "local"
    if name == "local":
        from evaluator.runners.local import LocalRunner

        return LocalRunner()
    if name == "docker":
        from evaluator.runners.docker import DockerRunner

        return DockerRunner()
    if name == "slurm":
        from evaluator.runners.slurm.controller import SlurmRunner

        runner = SlurmRunner(**options)
        runner.check()
        return runner
    raise UserError(f"unknown runner {name!r}; choices: auto, {', '.join(RUNNERS)}")


__all__ = ["Runner", "RunRecord", "RunRequest", "get_runner"]
