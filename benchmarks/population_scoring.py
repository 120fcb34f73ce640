"""Scoring the frozen population: each system parsing its input itself (the per-system path,
the baseline) against one prepared folder per test set shared by every system (`prepare:`).

In one run, on one test set, for the first frozen system(s) of each approach of the plan
under `frozen/`: the approach's predict command on the answer-free input as the child process
a runner starts (its CPU seconds from the OS), and for an approach that declares `prepare:`
once more with `--prepared`, plus the one preparation of the set per prepare command. Both
paths must give the same answers. Printed per approach: CPU-seconds per 1,000 questions, the
ratio, and the share of the child's time spent in the model (batching and forward passes,
from the timing line the shared reader loop prints; `-` where an approach prints none);
then the population's projected CPU time on the set (each approach at its fastest path),
against the goal of 30 CPU-minutes for 106 systems on 5,000 questions. Run it on one core
(its children inherit the affinity):

    taskset -c 0 python benchmarks/population_scoring.py [--testset squad-dev-heldout]
        [--per-approach 1] [--approaches qanet,rasor] [--plan studies/population.yaml]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import yaml

from evaluator.core.hashing import canonical_json
from evaluator.data import testsets
from evaluator.data.testsets import input_document
from evaluator.store.store import Store
from evaluator.training import frozen
from evaluator.training.study import plan as study_plan

REPO = Path(__file__).resolve().parents[1]
SUBMISSIONS = REPO / "submissions"
LIBRARIES = SUBMISSIONS / "_libraries"
TIMING = re.compile(r"timing: inputs ([\d.]+) s .* forward ([\d.]+) s")
GOAL_CPU_S, GOAL_SYSTEMS, GOAL_QUESTIONS = 30 * 60, 106, 5000


def child(argv: list[str], cwd: Path) -> tuple[float, float, str]:
    """Run `argv` as a runner would (libraries on the path); (CPU s, wall s, its output)."""
    env = {**os.environ, "PYTHONPATH": str(LIBRARIES), "PYTHONHASHSEED": "0"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed: {done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, done.stdout + done.stderr


def systems(per_approach: int, only: set[str] | None, planned: Counter, store: Store
            ) -> list[tuple[str, str, Path]]:
    """(approach, system, weights folder) of the first frozen systems of each approach of the
    plan, verified (packed files unpacked into `store`)."""
    out, taken = [], Counter()
    for manifest in frozen.manifests():
        approach = manifest["system"]["approach"]
        if approach not in planned or (only and approach not in only) or \
                taken[approach] == per_approach:
            continue
        taken[approach] += 1
        frozen.verify(manifest)
        folder = Path(manifest["folder"])
        out.append((approach, "/".join(folder.parts[-2:]), frozen.weights_of(folder, store)))
    return out


def prepare_command(approach: str) -> str | None:
    """The approach's `prepare:` command, with `python3` as this interpreter; None if none."""
    spec = yaml.safe_load((SUBMISSIONS / approach / "bundle.yaml").read_text())
    return spec["prepare"].replace("python3 ", f"{sys.executable} ", 1) \
        if "prepare" in spec else None


def plan_counts(plan: Path) -> Counter:
    """Systems per approach in a study plan (the population's 106)."""
    return Counter(job.approach.id for job in study_plan.load(plan).trainings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--testset", default="squad-dev-heldout")
    parser.add_argument("--per-approach", type=int, default=1)
    parser.add_argument("--approaches", default="")
    parser.add_argument("--plan", default=str(REPO / "studies" / "population.yaml"))
    args = parser.parse_args()
    only = set(filter(None, args.approaches.split(",")))
    counts = plan_counts(Path(args.plan))
    dataset = testsets.get(args.testset).load()
    n = len(dataset.questions)
    per_k = 1000 / n
    with tempfile.TemporaryDirectory(prefix="population-scoring-") as tmp:
        tmp = Path(tmp)
        chosen = systems(args.per_approach, only or None, counts, Store(tmp / "store"))
        if not chosen:
            sys.exit("no frozen system of the plan's approaches under frozen/")
        print(f"scoring {len(chosen)} frozen systems on {args.testset}, one at a time ...",
              flush=True)
        source = tmp / "input.json"
        source.write_bytes(canonical_json(input_document(dataset.raw)))
        made: dict[str, Path] = {}  # prepare command -> its folder (made once)
        prep_cpu = 0.0
        for approach, _, _ in chosen:
            command = prepare_command(approach)
            if command is None or command in made:
                continue
            made[command] = tmp / f"prepared-{len(made)}"
            cpu, _, _ = child(shlex.split(command.replace("{input}", str(source)).replace(
                "{prepared}", str(made[command]))), tmp)
            prep_cpu += cpu
            print(f"{args.testset}: {n:,} questions; preparation `{command}` {cpu:.1f} CPU-s "
                  f"({cpu * per_k:.1f} per 1,000 questions), shared by every system", flush=True)
        print()
        print(f"{'approach':<17} {'system':<30} {'own CPU-s/1k':>12} {'prepared':>9} "
              f"{'ratio':>6} {'model share own/prep':>21}  same answers")
        rows: dict[str, list[float]] = {}
        for approach, name, weights in chosen:
            folder = SUBMISSIONS / approach
            results = []
            command = prepare_command(approach)
            paths = [("own", [])] + ([("prepared", ["--prepared", str(made[command])])]
                                     if command else [])
            for label, extra in paths:
                out = tmp / f"{label}.json"
                cpu, wall, log = child([sys.executable, "approach.py", "predict", "--model",
                                        str(weights), *extra, str(source), str(out)], folder)
                match = TIMING.search(log)
                model_s = float(match.group(2)) if match else float("nan")
                results.append((cpu, model_s / wall, json.loads(out.read_text())))
            (own, own_share, own_answers) = results[0]
            if len(results) == 1:
                rows.setdefault(approach, []).append(own)
                print(f"{approach:<17} {name:<30} {own * per_k:>12.2f} {'-':>9} {'-':>6} "
                      f"{_share(own_share):>10} / {'-':>4}  -", flush=True)
                continue
            (prep, prep_share, prep_answers) = results[1]
            same = own_answers == prep_answers
            rows.setdefault(approach, []).append(prep)
            print(f"{approach:<17} {name:<30} {own * per_k:>12.2f} {prep * per_k:>9.2f} "
                  f"{own / prep:>5.2f}x {_share(own_share):>10} / {_share(prep_share):>4}  "
                  f"{'yes' if same else 'NO'}", flush=True)
    mean = {a: sum(v) / len(v) for a, v in rows.items()}
    measured = sum(counts[a] for a in mean)
    projected = sum(counts[a] * mean[a] for a in mean) * GOAL_QUESTIONS / n + \
        prep_cpu * GOAL_QUESTIONS / n
    print(f"\nprojected, the prepared path where there is one: the plan's {measured} "
          f"systems of the measured approaches on {GOAL_QUESTIONS:,} questions: "
          f"{projected / 60:.1f} CPU-minutes "
          f"(goal: {GOAL_SYSTEMS} systems in {GOAL_CPU_S / 60:.0f}); "
          f"approaches not measured here: "
          f"{', '.join(sorted(set(counts) - set(mean))) or 'none'}")


def _share(share: float) -> str:
    return "-" if share != share else f"{share:.0%}"  # NaN: the approach prints no timing


if __name__ == "__main__":
    main()
