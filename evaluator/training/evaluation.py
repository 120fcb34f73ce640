"""One evaluation entry: a config (the flags of `evaluate`, the keys of a study file), checked
once, and `evaluate`, which resolves the ids (bundle folders and trained or frozen systems),
plans the cells that apply and runs them. The `evaluate` and `check` commands and the Python
API all call it, so an option means the same everywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from evaluator.bundles import spec as bundles
from evaluator.core import console, settings
from evaluator.core.errors import UserError
from evaluator.data import testsets
from evaluator.jobs.job import Job
from evaluator.jobs.plan import plan
from evaluator.pipeline import matrix
from evaluator.pipeline.matrix import MatrixReport
from evaluator.runners.dispatch import Dispatcher
from evaluator.stats.intervals import check_level
from evaluator.stats.spread import spread
from evaluator.store.store import Store
from evaluator.training import systems

CLUSTERS = (None, "paragraph", "article")
DEVICES = ("auto", "cpu", "gpu")


@dataclass(frozen=True)
class EvaluationConfig:
    bundles: tuple[str, ...]
    testsets: tuple[str, ...]
    runner: str = "auto"
    level: float = 0.95
    cluster: str | None = None
    rerun: bool = False
    device: str = "auto"
    parallel: int = 1
    limit: int | None = None
    seed: int = 0
    model_args: dict = field(default_factory=dict)
    partition: str | None = None
    account: str | None = None
    templates: tuple[str, ...] = ()  # generative bundles: one variant per prompt template
    check: bool = False  # `qashift check`: its sample stays one even where it covers the set

    def __post_init__(self):
        try:
            check_level(self.level)
        except ValueError as exc:
            raise UserError(str(exc)) from None
        if self.cluster not in CLUSTERS:
            raise UserError(f"cluster must be paragraph or article, got {self.cluster!r}")
        if self.device not in DEVICES:
            raise UserError(f"device must be one of {', '.join(DEVICES)}, got {self.device!r}")
        if self.parallel < 1 or (self.limit is not None and self.limit < 1):
            raise UserError("parallel and limit must be positive")
        if (self.partition or self.account) and self.runner != "slurm":
            raise UserError("partition and account apply only to the slurm runner")

    @property
    def sample(self) -> dict | None:
        """The job options of a --limit sample, or None for full runs."""
        return {"limit": self.limit, "seed": self.seed} if self.limit else None

    def as_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(self).items()}


@dataclass
class Evaluation:
    config: EvaluationConfig
    runner: Dispatcher
    report: MatrixReport
    not_applicable: list[tuple[str, str, str]]  # (bundle, test set, why)

    def prompt_spread(self) -> list[dict]:
        """Per generative bundle and test set run under several templates: each template's
        EM and F1, and their spread (`stats.spread`)."""
        groups: dict[tuple[str, str], list[dict]] = {}
        for o in self.report.outcomes:
            template = o.job.bundle.model_args.get("prompt.template")
            if o.result is None or template is None:
                continue
            base = o.job.bundle.id.rsplit("+p", 1)[0]
            cell = o.result.to_dict()
            groups.setdefault((base, o.job.testset.id), []).append(
                {"template": template, "bundle": o.job.bundle.id,
                 "em": cell["em"]["value"], "f1": cell["f1"]["value"]})
        return [{"bundle": base, "testset": testset, "templates": runs,
                 "em": spread([r["em"] for r in runs]), "f1": spread([r["f1"] for r in runs])}
                for (base, testset), runs in groups.items()]


def evaluate(config: EvaluationConfig, store: Store, *,
             progress: Callable[[str], None] = lambda _: None,
             warn: Callable[[str], None] | None = None,
             cost: Callable[[Job], float] | None = None) -> Evaluation:
    """Resolve, plan and run the config's cells; cached cells come from the store.
    `progress` hears of each finished cell when there are several; `cost` is a cell's
    expected time, which its ETA weighs cells by (`pipeline.matrix.run`)."""
    chosen = [bundles.with_model_args(b, dict(config.model_args))
              for b in systems.resolve_bundles(list(config.bundles), store)]
    if config.templates:  # prompt sensitivity: every generative bundle under each template
        chosen = [bundles.with_template(b, t) for b in chosen for t in config.templates]
    explicit = "all" not in config.bundles and "all" not in config.testsets
    jobs, skipped = plan(chosen, testsets.resolve(list(config.testsets)), explicit,
                         config.sample, whole_if_covered=not config.check)
    slurm = {"partition": config.partition, "account": config.account} \
        if config.runner == "slurm" else {}
    runner = Dispatcher(config.runner, **({"warn": warn} if warn else {}), **slurm)
    console.debug(f"{len(jobs)} cells planned, {len(skipped)} not applicable, runner "
                  f"{config.runner}, workspace {settings.current().workspace}")
    report = matrix.run(jobs, runner, store, parallel=config.parallel,
                        progress=progress if len(jobs) > 1 else (lambda _: None),
                        level=config.level, cluster=config.cluster, rerun=config.rerun,
                        device=config.device, **({"cost": cost} if cost else {}))
    return Evaluation(config, runner, report, skipped)
