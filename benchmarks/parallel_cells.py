"""Wall time of scoring one trained system on several test sets one cell at a time (the
baseline) against two cells at a time, each on its own slice of the host's cores (what
`study run --jobs 2` and `evaluate --parallel 2` do), and against two at a time sharing every
core (no slices), all measured in the same run on the same system and test sets.

The system is trained first (a small span reader: by default DrQA without tagger features,
250 questions, one epoch) in a temporary workspace; each mode scores it anew (`rerun`), so no
mode reads another's cached results. Printed: per mode the wall seconds, the summed cell
seconds and the ratio of wall time to the baseline's (below 1: faster).

    python benchmarks/parallel_cells.py [--approach drqa-reader] [--set features=false]
        [--size 250] [--testset squad-dev-heldout ...] [--data-dir ../shared/data]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluator.bundles import spec as bundles  # noqa: E402
from evaluator.core import settings  # noqa: E402
from evaluator.data import testsets  # noqa: E402
from evaluator.jobs.job import Job  # noqa: E402
from evaluator.pipeline import matrix  # noqa: E402
from evaluator.runners.dispatch import Dispatcher  # noqa: E402
from evaluator.store.store import Store  # noqa: E402
from evaluator.training.job import TrainJob  # noqa: E402
from evaluator.training.run import train  # noqa: E402

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
POPULATION_SETS = ("squad-dev-heldout", "new-wiki-test", "reddit-test", "amazon-test",
                   "addsent-heldout", "addonesent-heldout")


def score(jobs: list[Job], runner: Dispatcher, store: Store, parallel: int,
          sliced: bool) -> tuple[float, float]:
    """(wall seconds, summed cell seconds) of scoring `jobs` anew."""
    slots = matrix.cpu_slots
    if not sliced:  # two cells at once that each see every core
        matrix.cpu_slots = lambda _parallel: []
    try:
        started = time.perf_counter()
        report = matrix.run(jobs, runner, store, parallel=parallel, rerun=True)
        wall = time.perf_counter() - started
    finally:
        matrix.cpu_slots = slots
    if report.failed:
        raise SystemExit(f"a cell failed: {report.failed[0].message}")
    return wall, sum(o.result.row["wall_s"] for o in report.outcomes)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--approach", default="drqa-reader")
    parser.add_argument("--set", dest="overrides", action="append", default=None,
                        metavar="KEY=VALUE", help="hyperparameter (default: features=false)")
    parser.add_argument("--size", type=int, default=250)
    parser.add_argument("--testset", action="append", help="repeatable; default: six sets")
    parser.add_argument("--data-dir", type=Path, default=SHARED_DATA)
    args = parser.parse_args()
    overrides = {"epochs": 1} | {
        key: yaml.safe_load(value) for key, value in
        (item.split("=", 1) for item in (args.overrides or ["features=false"]))}
    with tempfile.TemporaryDirectory(prefix="qashift-parallel-") as tmp, \
            settings.override(data_dir=(str(args.data_dir),), workspace=tmp):
        store = Store.open_default()
        runner = Dispatcher("local")
        job = TrainJob(bundles.get(args.approach), testsets.get("squad-dev-train"), 0,
                       args.size, overrides)
        started = time.perf_counter()
        system = train(job, runner, store)
        print(f"{job.system_id}: trained in {time.perf_counter() - started:.0f} s; "
              f"{len(os.sched_getaffinity(0))} cores")
        jobs = [Job(system.bundle, testsets.get(t)) for t in args.testset or POPULATION_SETS]
        modes = (("one at a time (baseline)", 1, True),
                 ("two at a time, a core each", 2, True),
                 ("two at a time, sharing all cores", 2, False))
        print(f"{'mode':<34} {'wall s':>8} {'cell s':>8} {'wall / baseline':>16}")
        baseline = None
        for name, parallel, sliced in modes:
            wall, cells = score(jobs, runner, store, parallel, sliced)
            baseline = baseline or wall
            print(f"{name:<34} {wall:>8.1f} {cells:>8.1f} {wall / baseline:>16.2f}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
