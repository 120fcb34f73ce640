"""What a plan's cells are now: trained, evaluated, failed or to go, counted from the store
and an earlier table, so `study status` and the run loop's progress agree."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from evaluator.core import console
from evaluator.jobs.job import Job
from evaluator.store.store import Store
from evaluator.study.pace import Pace
from evaluator.study.plan import Study, selected
from evaluator.study.rows import Rows, current_rows, held_cells, recorded
from evaluator.training.run import stored


@dataclass
class StudyStatus:
    """Counts of a plan's cells (a system's training and its evaluations); `by_approach`
    holds the same counts per approach. `pending_s`: one core's seconds the cells to go
    will take at the pace the table measured; `untimed`: cells to go of approaches it has
    not timed (not in `pending_s`)."""

    trained: int = 0
    training_failed: int = 0
    evaluated: int = 0
    evaluation_failed: int = 0
    pending: int = 0
    pending_s: float = 0.0
    untimed: int = 0
    recorded: int = 0  # systems whose store entries are absent, kept from an earlier table
    systems: int = 0
    by_approach: dict[str, StudyStatus] = field(default_factory=dict)

    def add(self, other: StudyStatus) -> None:
        for f in fields(self):
            if f.name != "by_approach":
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def approach_lines(self) -> list[str]:
        """One line per approach, in the plan's order: where a long study's work is left."""
        width = max((len(a) for a in self.by_approach), default=0)
        return [f"{approach:<{width}}  {s.systems:>4} systems | trained {s.trained:>4}, failed "
                f"{s.training_failed} | evaluated {s.evaluated:>5}, failed "
                f"{s.evaluation_failed} | {s.pending:>4} cells to go{s.time_left()}"
                for approach, s in self.by_approach.items()]

    def line(self, study: Study) -> str:
        scored = (f"{len(study.benchmarks)} benchmarks" if study.benchmarks
                  else f"{len(study.testsets)} test sets")
        kept = f" (from the table: {self.recorded})" if self.recorded else ""
        return (f"{study.id}: {len(study.trainings)} systems x {scored} | trained "
                f"{self.trained}{kept}, training failed {self.training_failed} | "
                f"evaluated {self.evaluated}, evaluation failed {self.evaluation_failed} | "
                f"{self.pending} cells to go{self.time_left()}")

    def time_left(self) -> str:
        if not self.pending_s:
            return ""
        about = f", about {console.duration(self.pending_s)} of one core"
        return about + (f" for {self.pending - self.untimed} of them; {self.untimed} are of "
                        f"approaches not timed yet" if self.untimed else "")

    def weigh(self, seconds: float | None) -> None:
        """Count one more cell to go, of `seconds` (None: its approach is not timed yet)."""
        self.pending += 1
        if seconds is None:
            self.untimed += 1
        else:
            self.pending_s += seconds


def status(study: Study, store: Store, earlier: Rows = (),
           current: dict[str, Rows] | None = None, only: tuple[str, ...] = ()) -> StudyStatus:
    """What is stored: trained systems, scored cells, and failures not yet made good, in all
    and per approach; a system the store lacks but an earlier table holds in full counts as
    done. `current`: the earlier table's `current_rows` rows, where the caller has them; `only`:
    shell patterns of the system names to count (all where empty). The time the cells to go
    will take is estimated at the pace the table's rows measured (`Pace`)."""
    out = StudyStatus()
    if current is None:
        current = current_rows(study, list(earlier))
    pace = Pace.measured(study, current)
    kept = recorded(study, current)
    has_store = store.exists()
    failures = store.failures() if has_store else []
    failed = {(f["key"], f["testset"]) for f in failures}  # of this very cell, not a predecessor
    for job in study.trainings:
        if not selected(job, only):
            continue
        sets = study.testsets_for(job)
        this = StudyStatus(systems=1)
        system = stored(job, store, unpack=False)  # the store's, or a frozen artifact
        if system is None and job.system_id in kept:
            this.trained, this.recorded, this.evaluated = 1, 1, len(sets)
        elif system is None:
            held = held_cells(study, current, job)  # kept if retraining gives the same weights
            this.training_failed = int((job.key, job.split.id) in failed)
            this.evaluated = len(held)
            if not this.training_failed:
                this.weigh(pace.training(job))
            for testset in sets:
                if testset.id not in held:
                    this.weigh(pace.scoring(job, testset))
        else:
            this.trained = 1
            held = held_cells(study, current, job, system.row["weights_digest"])
            for testset in sets:
                key = Job(system.bundle, testset).key
                if testset.id in held or store.get(key) is not None:
                    this.evaluated += 1
                elif (key, testset.id) in failed:
                    this.evaluation_failed += 1
                else:
                    this.weigh(pace.scoring(job, testset))
        out.add(this)
        out.by_approach.setdefault(job.approach.id, StudyStatus()).add(this)
    return out
