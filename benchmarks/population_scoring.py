"""Scoring the frozen population: each system parsing its input itself (the per-system path,
the baseline) against one prepared folder per test set shared by every system (`prepare:`).

In one run, on one test set, for the first frozen system(s) of each approach under `frozen/`
whose approach declares `prepare:`: the approach's predict command on the answer-free input,
once without and once with `--prepared`, each as the child process a runner starts (its CPU
seconds from the OS), plus the one preparation of the set per prepare command. Both paths
must give the same answers. Printed per approach: CPU-seconds per 1,000 questions, the
ratio, and the share of the child's time spent in the model (batching and forward passes,
from the timing line the reader prints); then the population's projected CPU time on the
set, against the goal of 30 CPU-minutes for 106 systems on 5,000 questions. Run it on one
core (its children inherit the affinity):

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
from evaluator.training.study import plan as study_plan

REPO = Path(__file__).resolve().parents[1]
SUBMISSIONS, FROZEN = REPO / "submissions", REPO / "frozen"
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


def systems(per_approach: int, only: set[str] | None) -> list[tuple[str, Path]]:
    """(approach, weights folder) of the first frozen systems of each preparing approach."""
    out = []
    for approach_dir in sorted(FROZEN.iterdir()):
        spec = yaml.safe_load((SUBMISSIONS / approach_dir.name / "bundle.yaml").read_text())
        if "prepare" not in spec or (only and approach_dir.name not in only):
            continue
        found = sorted(approach_dir.glob("*/*/weights"))[:per_approach]
        out += [(approach_dir.name, w) for w in found]
    return out


def prepare_command(approach: str) -> str:
    """The approach's `prepare:` command, with `python3` as this interpreter."""
    spec = yaml.safe_load((SUBMISSIONS / approach / "bundle.yaml").read_text())
    return spec["prepare"].replace("python3 ", f"{sys.executable} ", 1)


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
    chosen = systems(args.per_approach, only or None)
    if not chosen:
        sys.exit("no frozen system of an approach with prepare: under frozen/")
    print(f"scoring {len(chosen)} frozen systems on {args.testset}, one at a time ...",
          flush=True)
    dataset = testsets.get(args.testset).load()
    n = len(dataset.questions)
    per_k = 1000 / n
    with tempfile.TemporaryDirectory(prefix="population-scoring-") as tmp:
        tmp = Path(tmp)
        source = tmp / "input.json"
        source.write_bytes(canonical_json(input_document(dataset.raw)))
        made: dict[str, Path] = {}  # prepare command -> its folder (made once)
        prep_cpu = 0.0
        for approach, _ in chosen:
            command = prepare_command(approach)
            if command in made:
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
        for approach, weights in chosen:
            folder = SUBMISSIONS / approach
            results = []
            for label, extra in (("own", []), ("prepared", [
                    "--prepared", str(made[prepare_command(approach)])])):
                out = tmp / f"{label}.json"
                cpu, wall, log = child([sys.executable, "approach.py", "predict", "--model",
                                        str(weights), *extra, str(source), str(out)], folder)
                match = TIMING.search(log)
                model_s = float(match.group(2)) if match else float("nan")
                results.append((cpu, model_s / wall, json.loads(out.read_text())))
            (own, own_share, own_answers), (prep, prep_share, prep_answers) = results
            same = own_answers == prep_answers
            rows.setdefault(approach, []).append(prep)
            name = "/".join(weights.parts[-3:-1])
            print(f"{approach:<17} {name:<30} {own * per_k:>12.2f} {prep * per_k:>9.2f} "
                  f"{own / prep:>5.2f}x {own_share:>10.0%} / {prep_share:>4.0%}  "
                  f"{'yes' if same else 'NO'}", flush=True)
    counts = plan_counts(Path(args.plan))
    mean = {a: sum(v) / len(v) for a, v in rows.items()}
    measured = sum(counts[a] for a in mean)
    projected = sum(counts[a] * mean[a] for a in mean) * GOAL_QUESTIONS / n + \
        prep_cpu * GOAL_QUESTIONS / n
    print(f"\nprojected, prepared path: the plan's {measured} systems of the measured "
          f"approaches on {GOAL_QUESTIONS:,} questions: {projected / 60:.1f} CPU-minutes "
          f"(goal: {GOAL_SYSTEMS} systems in {GOAL_CPU_S / 60:.0f}); "
          f"approaches not measured here: "
          f"{', '.join(sorted(set(counts) - set(mean))) or 'none'}")


if __name__ == "__main__":
    main()
