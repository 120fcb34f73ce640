"""The Python API: what `evaluate` and `qashift results` do, returning pandas DataFrames.

    import evaluator
    df = evaluator.evaluate("sliding-window", "squad-dev", runner="local",
                            root="/path/to/qashift", data_dir="../shared/data")
    df[["bundle", "testset", "em", "em_lo", "em_hi", "f1", "f1_lo", "f1_hi"]]

Every call takes `root` (a checkout whose testsets/ and submissions/ folders to use; default
$QASHIFT_ROOT, else this source tree), `data_dir` (local mirrors of the public data) and
`workspace` (the results store, default ./.qashift), for the length of the call. A cell
that fails is a row with its `failure_class` and `message`, not an exception; bad input
(an unknown bundle or test set) raises `evaluator.core.errors.UserError`.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from evaluator.core import settings
from evaluator.store.queries import is_recorded, latest_full
from evaluator.store.store import Store
from evaluator.training import evaluation, systems
from evaluator.training.evaluation import EvaluationConfig

COLUMNS = ["bundle", "testset", "n", "missing", "em", "em_lo", "em_hi", "f1", "f1_lo",
           "f1_hi", "level", "cached", "runner", "device", "key", "failure_class", "message"]


def evaluate(bundle: str, testset: str, **options) -> pd.DataFrame:
    """One cell: a one-row DataFrame (see `evaluate_matrix` for the options)."""
    return evaluate_matrix([bundle], [testset], **options)


def evaluate_matrix(bundle_ids: Sequence[str], testset_ids: Sequence[str], *,
                    runner: str = "auto", level: float = 0.95, rerun: bool = False,
                    limit: int | None = None, seed: int = 0, cluster: str | None = None,
                    device: str = "auto", parallel: int = 1, model_args: dict | None = None,
                    partition: str | None = None, account: str | None = None,
                    templates: Sequence[str] = (),
                    root: str | None = None, data_dir: str | Sequence[str] = (),
                    workspace: str | None = None) -> pd.DataFrame:
    """Every (bundle, test set) cell, run or read from the store: one row per cell, scores
    and interval bounds in percent. Ids may be `all`, and trained system ids. The options
    are `evaluate`'s flags: `cluster` (paragraph | article) for clustered intervals,
    `device` (auto | cpu | gpu), `parallel` cells at once, `model_args` for hf-qa bundles,
    `partition`/`account` for the Slurm runner, `templates` (prompt templates: every
    generative bundle runs under each)."""
    config = EvaluationConfig(tuple(bundle_ids), tuple(testset_ids), runner, level, cluster,
                              rerun, device, parallel, limit, seed, dict(model_args or {}),
                              partition, account, tuple(templates))
    mirrors = (data_dir,) if isinstance(data_dir, str) else tuple(data_dir)
    with settings.override(data_dir=mirrors, workspace=workspace, root=root):
        report = evaluation.evaluate(config, Store.open_default()).report
    rows = []
    for o in report.outcomes:
        row = {"bundle": o.job.bundle.id, "testset": o.job.testset.id,
               "failure_class": o.failure_class, "message": o.message}
        if o.result is not None:
            r = o.result.to_dict()
            row.update(n=r["n"], missing=r["missing"], level=r["em"]["level"],
                       cached=r["cached"], runner=r["runner"], device=r["device"], key=r["key"])
            for metric in ("em", "f1"):
                row.update({metric: r[metric]["value"], f"{metric}_lo": r[metric]["lo"],
                            f"{metric}_hi": r[metric]["hi"]})
        rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)


def results(bundle: str | None = None, testset: str | None = None, *,
            workspace: str | None = None) -> pd.DataFrame:
    """The newest stored full result of every cell (optionally of one bundle or test set),
    as the store keeps them: scores and bounds in percent, no runs started. A cell recorded
    from a committed table (the frozen population's, `qashift store record`) and never run
    here names that table in `recorded_from`."""
    with settings.override(workspace=workspace):
        store = Store.open_default()
        rows = store.results(bundle, testset, recorded=True) if store.exists() else []
        latest = latest_full(rows, systems.digest_today(store))
    out = []
    for r in latest:
        out.append({**{k: r.get(k) for k in ("bundle", "testset", "n", "missing", "em", "em_lo",
                                             "em_hi", "f1", "f1_lo", "f1_hi", "level", "runner",
                                             "device", "key")},
                    "recorded_from": r["source"] if is_recorded(r) else None})
    return pd.DataFrame(out, columns=[*(c for c in COLUMNS if c not in
                                        ("cached", "failure_class", "message")),
                                      "recorded_from"])
