"""A population study: one plan file says which approaches to train (hyperparameter settings x
seeds x train sizes, on one training split or several) and which test sets every trained system is
scored on. Running it trains and evaluates one stored cell at a time, system by system, so
an interrupted run (Ctrl-C, `kill -9`, a session that ends) resumes where it stopped: every
finished training and evaluation is in the store, and a killed training resumes from its
checkpoint. Failures are recorded and the rest of the plan goes on.

`plan` (the file, its cells), `status` (with `pace`, the time left), `loop` (the run loop)
and `rows` (the table); their
names are re-exported here. The approach x benchmark matrix of an approach-level study is the
analysis's (`analysis.studies.approach_matrix`).
"""

from __future__ import annotations

from evaluator.study.loop import (
    Say,
    run,
    score_frozen,
    score_systems,
    score_with_references,
    scoring_cost,
)
from evaluator.study.plan import (
    MAX_SYSTEMS,
    ApproachPlan,
    Benchmark,
    BenchmarkPair,
    Scalar,
    Study,
    StudyFile,
    draws,
    load,
    narrowed,
    selected,
    with_testsets,
)
from evaluator.study.rows import (
    Rows,
    beyond_plan,
    current_rows,
    held_cells,
    recorded,
    rows,
)
from evaluator.study.status import StudyStatus, status

__all__ = ["MAX_SYSTEMS", "ApproachPlan", "Benchmark", "BenchmarkPair", "Rows",
           "Say", "Scalar", "Study", "StudyFile", "StudyStatus",
           "beyond_plan", "current_rows", "draws", "held_cells", "load", "narrowed", "recorded",
           "rows", "run", "score_frozen", "score_systems", "score_with_references",
           "scoring_cost", "selected", "status", "with_testsets"]
