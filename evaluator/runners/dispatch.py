"""Which runner runs which bundle: one table of (bundle kind, backend), loaded lazily.

A backend is what the user picks with `--runner` (local, docker, slurm; auto = docker when a
daemon answers). The table names each runner as "module:Class", so choosing a backend
imports only the runners it uses, and no runner module imports another to find a sibling.
A new backend is a module with its runner class and one `register_backend` call (or its
rows in the table); every command's `--runner` choices are read from the table.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

from evaluator.bundles.spec import Bundle
from evaluator.core.errors import UserError
from evaluator.runners.base import Runner, RunRecord, RunRequest

FROZEN = "evaluator.runners.frozen:FrozenRunner"  # stored predictions: nothing is executed
RUNNERS: dict[tuple[str, str], str] = {
    ("predictions", "local"): FROZEN,
    ("predictions", "docker"): FROZEN,
    ("predictions", "slurm"): FROZEN,
    ("command", "local"): "evaluator.runners.local:LocalRunner",
    ("hf-qa", "local"): "evaluator.runners.hfqa:HFQARunner",
    ("command", "docker"): "evaluator.runners.docker:DockerRunner",
    ("hf-qa", "docker"): "evaluator.runners.docker:DockerRunner",
    ("command", "slurm"): "evaluator.runners.slurm.controller:SlurmRunner",
    ("hf-qa", "slurm"): "evaluator.runners.slurm.controller:SlurmRunner",
    ("approach", "local"): "evaluator.runners.local:LocalRunner",  # train()
    ("approach", "docker"): "evaluator.runners.docker:DockerRunner",  # train()
    ("approach", "slurm"): "evaluator.runners.slurm.controller:SlurmRunner",  # train()
    ("generative", "local"): "evaluator.runners.generative:GenerativeRunner",
    ("generative", "docker"): "evaluator.runners.docker:DockerRunner",
    ("generative", "slurm"): "evaluator.runners.slurm.controller:SlurmRunner",
    # a generative bundle with an endpoint: nothing of it runs here, whatever the backend
    ("endpoint", "local"): "evaluator.runners.generative:GenerativeRunner",
    ("endpoint", "docker"): "evaluator.runners.generative:GenerativeRunner",
    ("endpoint", "slurm"): "evaluator.runners.generative:GenerativeRunner",
}
OPTIONS = {"evaluator.runners.slurm.controller:SlurmRunner": ("partition", "account", "inner")}


def backends() -> tuple[str, ...]:
    """The backends the table serves, in the order they were registered."""
    return tuple(dict.fromkeys(backend for _, backend in RUNNERS))


def choices() -> tuple[str, ...]:
    """What every command's --runner accepts: auto, then each backend."""
    return ("auto", *backends())


def register_backend(name: str, runners: dict[str, str]) -> None:
    """Serve bundle kinds on a new backend: `runners` maps each kind to its runner,
    "module:Class"; predictions bundles need none (their stored files serve every backend)."""
    for kind, target in runners.items():
        RUNNERS[(kind, name)] = target
    RUNNERS.setdefault(("predictions", name), FROZEN)




def load(target: str) -> type:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


class Dispatcher:
    """A Runner for every bundle kind on one backend; each runner made once, on first use."""

    def __init__(self, backend: str, *, warn: Callable[[str], None] = _warn, **options):
        if backend != "auto" and backend not in backends():
            raise UserError(f"unknown runner {backend!r}; choices: {', '.join(choices())}")
        self.requested, self.warn, self.options = backend, warn, options
        self._backend: str | None = None if backend == "auto" else backend
        self._made: dict[str, Runner] = {}
        if self._backend == "slurm":
            self.runner_for_kind("command").check()  # refuse at once when no cluster answers

    @property
    def name(self) -> str:
        return self.backend

    @property
    def backend(self) -> str:
        """The backend in use; 'auto' is resolved on first use and says when it is local."""
        if self._backend is None:
            docker = load("evaluator.runners.docker:daemon_available")
            self._backend = "docker" if docker() else "local"
            if self._backend == "local":
                self.warn("no Docker daemon answers: --runner auto runs submissions with the "
                          "local runner, which is NOT isolated (use --runner docker to refuse)")
        return self._backend

    def runner_for_kind(self, kind: str) -> Runner:
        backend = FROZEN if kind == "predictions" else self.backend
        target = FROZEN if kind == "predictions" else RUNNERS.get((kind, backend))
        if target is None:
            raise UserError(f"no runner for {kind} bundles on the {backend} backend")
        if target not in self._made:
            if kind == "approach" and backend == "local":
                self.warn("training with the local runner is NOT isolated: the approach's code "
                          "runs as you, sees your files and network, and a process that leaves "
                          "its process group can outlive the job; use --runner docker for code you "
                          "do not trust")
            allowed = OPTIONS.get(target, ())
            options = {k: v for k, v in self.options.items() if k in allowed}
            self._made[target] = load(target)(**options)
        return self._made[target]

    def runner_for(self, bundle: Bundle) -> Runner:
        endpoint = bundle.kind == "generative" and "endpoint" in bundle.generative
        return self.runner_for_kind("endpoint" if endpoint else bundle.kind)

    def run(self, request: RunRequest) -> RunRecord:
        return self.runner_for(request.bundle).run(request)

    def cancel(self) -> int:
        """Stop what this controller's runners started (Ctrl-C of a matrix)."""
        return sum(runner.cancel() or 0 for runner in self._made.values()
                   if hasattr(runner, "cancel"))
