"""The approach x benchmark matrix of an approach-level study (Liu et al.'s tables), from
its table rows (study) by the plan's selection rule: what `qashift study matrix`
writes and the approach-level concurrence reads."""

from __future__ import annotations

from dataclasses import dataclass

from evaluator.core.errors import UserError
from evaluator.study import Rows, Study


@dataclass(frozen=True)
class ApproachMatrix:
    """An approach-level study's score matrix (EM, percent) and the runs behind it (Liu et
    al.'s F1 and F8): `scores[approach][benchmark]` for the cells the selection rule could
    decide, every run with `selected` marking the one(s) that entered the matrix."""

    selection: str
    benchmarks: tuple[str, ...]
    groups: dict[str, str]  # approach -> non-pretrained | pre-trained
    scores: dict[str, dict[str, float]]
    runs: list[dict]

    def complete(self) -> list[str]:
        """Approaches with a score on every benchmark, in plan order."""
        return [a for a in self.groups if len(self.scores.get(a, {})) == len(self.benchmarks)]

    def complete_benchmarks(self) -> list[str]:
        """Benchmarks on which every approach has a score, in plan order (a study under way
        fills cheap benchmarks for every approach first)."""
        return [b for b in self.benchmarks
                if all(b in self.scores.get(a, {}) for a in self.groups)]


def approach_matrix(study: Study, table_rows: Rows) -> ApproachMatrix:
    """Score every approach on every benchmark by the plan's selection rule over its runs
    (settings x seeds, in plan order), from the study's table rows (`rows`): `first`, the
    first run (the defaults where the plan lists them first); `max` and `mean` over all runs.
    A cell whose deciding runs are not all scored stays empty: a rule is never applied to a
    part of its runs."""
    if not study.benchmarks:
        raise UserError(f"{study.path}: names no benchmarks: an approach x benchmark matrix "
                        f"needs an approach-level plan")
    groups = {job.approach.id: ("pre-trained" if job.approach.metadata.get("family")
                                == "pretrained" else "non-pretrained")
              for job in study.trainings}
    scored = {(r["model"], r["testset"], r["metric"]): float(r["value"]) for r in table_rows}
    runs, scores = [], {}
    for benchmark in study.benchmarks:
        for approach in groups:
            mine = [{"approach": approach, "benchmark": benchmark.name,
                     "system": job.system_id, "seed": job.seed,
                     "hyperparameters": job.hyperparameters,
                     "em": scored.get((job.system_id, benchmark.test.id, "em")),
                     "f1": scored.get((job.system_id, benchmark.test.id, "f1")),
                     "selected": False}
                    for job in study.trainings
                    if (job.approach.id, job.split.id, job.size)
                    == (approach, benchmark.train.id, benchmark.size)]
            runs += mine
            decide = mine[:1] if study.selection == "first" else mine
            if not decide or any(r["em"] is None for r in decide):
                continue
            ems = [r["em"] for r in decide]
            value = max(ems) if study.selection == "max" else sum(ems) / len(ems)
            chosen = decide if study.selection == "mean" else \
                [next(r for r in decide if r["em"] == value)]
            for r in chosen:
                r["selected"] = True
            scores.setdefault(approach, {})[benchmark.name] = value
    return ApproachMatrix(study.selection, tuple(b.name for b in study.benchmarks), groups,
                          scores, runs)
