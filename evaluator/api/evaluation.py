"""The one evaluation entry: a config (the flags of `evaluate`, the keys of a study file),
checked once, and `evaluate`, which takes an evaluation through its named steps:

    resolve  ids -> bundles (folders, trained and frozen systems; every prompt template)
    plan     bundles x test sets -> the cells that apply (a --limit sample: other cells)
    run      each cell: found in the store, or run by its runner (an approach's systems on
             one set together), scored against the gold answers and stored (`pipeline`)

and returns the Evaluation: its config, its runner and every cell's outcome. The `evaluate`,
`check` and `trend` commands, the study loop, `population --score`, `strata --score` and the
Python API all call it, so an option means the same everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from evaluator.bundles import variants
from evaluator.bundles.spec import Bundle
from evaluator.core import console, settings
from evaluator.core.errors import UserError
from evaluator.data import testsets
from evaluator.jobs.job import Job
from evaluator.jobs.plan import plan
from evaluator.pipeline import matrix
from evaluator.pipeline.matrix import MatrixReport, Outcome
from evaluator.runners.dispatch import Dispatcher
from evaluator.stats.intervals import check_level
from evaluator.stats.spread import spread
from evaluator.store.store import Store
from evaluator.training import systems

if TYPE_CHECKING:
    import pandas as pd

CLUSTERS = (None, "paragraph", "article")
DEVICES = ("auto", "cpu", "gpu")


@dataclass(frozen=True, kw_only=True)
class EvaluationConfig:
    """What to evaluate and how: the flags of `evaluate`, one field each."""

    bundles: tuple[str, ...]
    """Bundle ids, trained or frozen system ids (APPROACH@SPLIT/sN), or `all`."""
    testsets: tuple[str, ...]
    """Test-set ids, or `all`."""
    runner: str = "auto"
    """The backend: auto (docker when a daemon answers), local, docker or slurm."""
    level: float = 0.95
    """The confidence level of the EM (Clopper-Pearson) and F1 (Student-t) intervals."""
    cluster: str | None = None
    """Intervals over paragraphs or articles (clustered), or over questions (None)."""
    rerun: bool = False
    """Run cells again even when the store holds them."""
    device: str = "auto"
    """auto (a bundle's own resources.gpus), cpu, or gpu (at least one)."""
    parallel: int = 1
    """Cells (or groups of an approach's systems) run at once, each on its own cores."""
    limit: int | None = None
    """A seeded sample of this many questions per set: other cells, never full results."""
    seed: int = 0
    """The seed of the --limit sample."""
    model_args: dict = field(default_factory=dict)
    """hf-qa and generative bundles' model arguments (a different submission: another key)."""
    partition: str | None = None
    """The Slurm partition (the slurm runner only)."""
    account: str | None = None
    """The Slurm account (the slurm runner only)."""
    templates: tuple[str, ...] = ()
    """Generative bundles: one variant per prompt template."""
    check: bool = False
    """`qashift check`: its sample stays one even where it covers the whole set."""

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


    def frame(self) -> pd.DataFrame:
        """One row per cell: scores and interval bounds in percent, or its failure. A bound
        that does not exist (one question, no spread) is NaN here, always (null in JSON)."""
        import pandas as pd  # lazy: the commands that score never pay for it

        rows = []
        for o in self.report.outcomes:
            row = {"bundle": o.job.bundle.id, "testset": o.job.testset.id,
                   "failure_class": o.failure_class, "message": o.message}
            if o.result is not None:
                r = o.result.to_dict()
                row.update(n=r["n"], missing=r["missing"], level=r["em"]["level"],
                           cached=r["cached"], runner=r["runner"], device=r["device"],
                           key=r["key"])
                for metric in ("em", "f1"):
                    row.update({metric: r[metric]["value"], **{
                        f"{metric}_{end}": math.nan if r[metric][end] is None else r[metric][end]
                        for end in ("lo", "hi")}})
            rows.append(row)
        return pd.DataFrame(rows, columns=COLUMNS)


COLUMNS = ["bundle", "testset", "n", "missing", "em", "em_lo", "em_hi", "f1", "f1_lo",
           "f1_hi", "level", "cached", "runner", "device", "key", "failure_class", "message"]


def evaluate(config: EvaluationConfig | None = None, store: Store | None = None, *,
             dispatcher: Dispatcher | None = None,
             chosen: Sequence[Bundle] | None = None,
             keep: Callable[[Job], bool] | None = None,
             progress: Callable[[str], None] = lambda _: None,
             started: Callable[[str], None] = lambda _: None,
             warn: Callable[[str], None] | None = None,
             cost: Callable[[Job], float] | None = None, longest_first: bool = True,
             ended: Callable[[Outcome], None] = lambda _: None,
             wait_for_busy: bool = True, root: str | None = None,
             data_dir: str | Sequence[str] = (), workspace: str | None = None,
             **options) -> Evaluation:
    """Resolve, plan and run the config's cells (see the module's docstring); cells stored
    are found, not run. The config is `config`, or made from `options` (its fields:
    `evaluate(bundles=["sliding-window"], testsets=["squad-dev"], runner="local")`).
    `root`, `data_dir` and `workspace` point at a checkout, the data mirrors and the results
    store for the length of the call (default: the settings in force).

    `store`: the workspace's by default; `dispatcher`: one made for the config's backend by
    default (a caller that also trains passes its own); `chosen`: the config's bundles
    already resolved (a study's systems, verified once); `keep`: which planned cells to run
    (a study leaves out those its table holds); `progress` hears of each finished cell when
    there are several, `started` of the cells left to run once they have gone
    `matrix.QUIET_SECONDS` without a result, `ended` of each outcome; `cost` is a cell's
    expected time, which the ETA weighs cells by and a parallel run balances its units by,
    the longest first (`longest_first=False` keeps the cells' order: a first look's quickest
    first);
    `wait_for_busy=False` leaves cells another controller is running to it (listed in its
    report's busy cells)."""
    if config is None:
        config = EvaluationConfig(**{k: tuple(v) if k in TUPLES else v
                                     for k, v in options.items()})
    elif options or not isinstance(config, EvaluationConfig):
        raise UserError("evaluate takes an EvaluationConfig or its fields as keywords "
                        "(bundles=[...], testsets=[...], ...), not both")
    mirrors = (data_dir,) if isinstance(data_dir, str) else tuple(data_dir)
    with settings.override(data_dir=mirrors, workspace=workspace, root=root):
        store = store or Store.open_default()
        chosen = resolve(config, store) if chosen is None else list(chosen)
        jobs, skipped = plan_cells(config, chosen)
        if keep is not None:
            jobs = [job for job in jobs if keep(job)]
        runner = dispatcher or Dispatcher(config.runner, **({"warn": warn} if warn else {}),
                                          **({"partition": config.partition,
                                              "account": config.account}
                                             if config.runner == "slurm" else {}))
        console.debug(f"{len(jobs)} cells planned, {len(skipped)} not applicable, runner "
                      f"{config.runner}, workspace {settings.current().workspace}")
        report = matrix.run(jobs, runner, store, parallel=config.parallel,
                            progress=progress if len(jobs) > 1 else (lambda _: None),
                            ended=ended, started=started, wait_for_busy=wait_for_busy,
                            level=config.level, cluster=config.cluster, rerun=config.rerun,
                            device=config.device, longest_first=longest_first,
                            **({"cost": cost} if cost else {}))
    return Evaluation(config, runner, report, skipped)


TUPLES = ("bundles", "testsets", "templates")  # fields given as any sequence


def resolve(config: EvaluationConfig, store: Store) -> list[Bundle]:
    """The bundles the config names: folders, trained and frozen systems, with its model
    arguments, and each generative bundle once per prompt template."""
    chosen = [variants.with_model_args(b, dict(config.model_args))
              for b in systems.resolve_bundles(list(config.bundles), store)]
    if config.templates:  # prompt sensitivity: every generative bundle under each template
        chosen = [variants.with_template(b, t) for b in chosen for t in config.templates]
    return chosen


def plan_cells(config: EvaluationConfig, chosen: list[Bundle]
               ) -> tuple[list[Job], list[tuple[str, str, str]]]:
    """The cells of `chosen` x the config's test sets that apply, and those that do not
    (bundle, test set, why); a set named explicitly that a bundle cannot run is said."""
    explicit = "all" not in config.bundles and "all" not in config.testsets
    return plan(chosen, testsets.resolve(list(config.testsets)), explicit, config.sample,
                whole_if_covered=not config.check)
