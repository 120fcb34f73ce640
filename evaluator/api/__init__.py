"""The Python API: the one evaluation entry, and the store's results, as pandas DataFrames.

    import evaluator
    done = evaluator.evaluate(bundles=["sliding-window"], testsets=["squad-dev"],
                              runner="local", root="/path/to/qashift",
                              data_dir="../shared/data")
    done.frame()[["bundle", "testset", "em", "em_lo", "em_hi", "f1", "f1_lo", "f1_hi"]]

`evaluate` (`api.evaluation`) is what every command that scores runs: it returns the
Evaluation (its config, and every cell's outcome), whose `frame()` is one row per cell.
Every call takes `root` (a checkout whose testsets/ and submissions/ folders to use; default
$QASHIFT_ROOT, else this source tree), `data_dir` (local mirrors of the public data) and
`workspace` (the results store, default ./.qashift), for the length of the call. A cell
that fails is a row with its `failure_class` and `message`, not an exception; bad input
(an unknown bundle or test set) raises `evaluator.core.errors.UserError`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from evaluator.api.evaluation import COLUMNS, Evaluation, EvaluationConfig, evaluate
from evaluator.api.results import Results
from evaluator.core import settings
from evaluator.store.queries import is_recorded
from evaluator.store.store import Store

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Evaluation", "EvaluationConfig", "Results", "evaluate", "results"]


def results(bundle: str | None = None, testset: str | None = None, *,
            workspace: str | None = None) -> pd.DataFrame:
    """The newest stored full result of every cell (optionally of one bundle or test set),
    as the store keeps them: scores and bounds in percent, no runs started. A cell recorded
    from a committed table (the frozen population's, `qashift store record`) and never run
    here names that table in `recorded_from`."""
    with settings.override(workspace=workspace):
        latest = Results(Store.open_default()).rows(bundle, testset)
    out = []
    for r in latest:
        out.append({**{k: r.get(k) for k in ("bundle", "testset", "n", "missing", "em", "em_lo",
                                             "em_hi", "f1", "f1_lo", "f1_hi", "level", "runner",
                                             "device", "key")},
                    "recorded_from": r["source"] if is_recorded(r) else None})
    import pandas as pd  # lazy: importing the API costs no pandas until a frame is made

    return pd.DataFrame(out, columns=[*(c for c in COLUMNS if c not in
                                        ("cached", "failure_class", "message")),
                                      "recorded_from"])
