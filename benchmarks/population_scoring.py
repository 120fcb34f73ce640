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
        [--work DIR] [--paths own,prepared] [--skip-contextual] [--device cpu|cuda]

With `--whole`, the population itself instead: every frozen system of the plan scored on the
set by the service's own loop (`population --score`'s `score_frozen`, one cell at a time, in a
fresh workspace, or in `--work DIR`, where an interrupted run resumes), then per approach the
systems, their CPU-seconds per 1,000 questions (each cell's `cpu_s`, counted by the local
runner) and the share of it in the model loop (the timing line of the cell's log), and the
total, with the preparations and this controller's own CPU time (scoring, store, checks),
scaled to the goal's 5,000 questions; last, the model loops' own total: a floor that no
sharing of per-set work lowers (`--jobs 2`: two cells at once, each on a core of its own;
the CPU time is the same work's):

    python benchmarks/population_scoring.py --whole [--jobs 2] \
        --testset squad-dev-heldout-sentence-order-shuffled

With `--groups`, the start each system pays: every frozen system of the plan scored on
seeded samples of the set (`--sizes 100,200` questions) by the service's matrix, once with
each cell alone in its own process (the baseline) and once with the systems of each
approach run together (`pipeline.group`), each run in a fresh workspace, the preparations
made first and timed apart, the units balanced over the cores by the expected time the
committed table gives each cell (`study.scoring_cost`, `group.balanced`: as `population
--score` runs them). Printed per way and size: the preparations' and cells' wall time and
CPU time; then, from the smallest and largest size, per way the fixed cost of a system (the
intercept of its time against the questions), the ratio of the two ways, and the
population's wall time projected to 5,000 questions, against the goals of 3 minutes on 200
questions and 40 on 5,000 on two cores (`--sizes 200,5000 --ways together` measures the
second instead of projecting it):

    python benchmarks/population_scoring.py --groups [--jobs 2] [--runner auto] \
        [--sizes 100,200] [--ways alone,together] \
        --testset squad-dev-heldout-sentence-order-shuffled

`--work DIR` keeps the preparations and every answer file there (a later run reuses the
preparations, and compares its answers with those of the first device that wrote them), so a
machine without spaCy (a GPU host) can run `--paths prepared` on folders made elsewhere.
`--device cuda` runs the approaches' own predict code unchanged, with torch's default device
set to the GPU (the approaches themselves predict on the CPU): the timing then to read is
the wall-clock one, and the projection is in GPU-minutes. `--skip-contextual` leaves out
systems that read the MiniLM encoder's states (they need the encoder package installed).
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

from evaluator import study
from evaluator.core import settings
from evaluator.core.hashing import canonical_json, sha256_bytes
from evaluator.data import testsets
from evaluator.data.testsets import first_questions, input_document
from evaluator.jobs.job import Job
from evaluator.pipeline import cell, matrix, prepared
from evaluator.runners.dispatch import Dispatcher
from evaluator.store.store import Store
from evaluator.study import plan as study_plan
from evaluator.training import frozen, table
from evaluator.training.run import stored

REPO = Path(__file__).resolve().parents[1]
SUBMISSIONS = REPO / "submissions"
LIBRARIES = SUBMISSIONS / "_libraries"
TIMING = re.compile(r"timing: inputs ([\d.]+) s .* forward ([\d.]+) s")
# The approach's own program, run as its `python3 approach.py ...` would be, after setting
# torch's default device: tensors the code creates without naming a device land there.
ON_DEVICE = ("import runpy, sys, torch; torch.set_default_device(sys.argv[1]); "
             "sys.argv = sys.argv[2:]; runpy.run_path(sys.argv[0], run_name='__main__')")
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


def systems(per_approach: int, only: set[str] | None, planned: Counter, store: Store,
            skip_contextual: bool = False) -> list[tuple[str, str, Path]]:
    """(approach, system, weights folder) of the first frozen systems of each approach of the
    plan, verified (packed files unpacked into `store`)."""
    out, taken = [], Counter()
    for manifest in frozen.manifests():
        approach = manifest["system"]["approach"]
        if approach not in planned or (only and approach not in only) or \
                taken[approach] == per_approach or \
                (skip_contextual and json.loads(manifest["system"]["hyperparameters"]).get(
                    "contextual")):
            continue
        taken[approach] += 1
        frozen.verify(manifest)
        folder = Path(manifest["folder"])
        out.append((approach, "/".join(folder.parts[-2:]), frozen.weights_of(folder, store)))
    return out


def prepare_command(approach: str) -> str | None:
    """The approach's `prepare:` command as its bundle states it; None if none."""
    return yaml.safe_load((SUBMISSIONS / approach / "bundle.yaml").read_text()).get("prepare")


def plan_counts(plan: Path) -> Counter:
    """Systems per approach in a study plan (the population's 106)."""
    return Counter(job.approach.id for job in study_plan.load(plan).trainings)


def prepared_folder(command: str, source: Path, work: Path, testset: str) -> tuple[Path, float]:
    """The set's folder made by `command` (with `python3` as this interpreter) under `work`
    (CPU-s of making it; 0 when an earlier run made it: a folder counts as made once its
    `.made` mark is written)."""
    name = f"prepared-{testset}-{sha256_bytes(command.encode())[:12]}"
    folder = work / name
    if (work / f"{name}.made").is_file():
        return folder, 0.0
    command = command.replace("python3 ", f"{sys.executable} ", 1)
    cpu, _, _ = child(shlex.split(command.replace("{input}", str(source)).replace(
        "{prepared}", str(folder))), work)
    (work / f"{name}.made").write_text(command)
    return folder, cpu


def same_as_before(answers: dict, path: Path, device: str) -> str:
    """'yes' or 'NO (agreeing/all)' against the answers kept at `path` by the first path run
    for this system (this run's own path, or an earlier run's, maybe on another device, which
    is then named); '-' when these are the first, which are kept."""
    if not path.is_file():
        path.write_text(json.dumps({"device": device, "answers": answers}))
        return "-"
    kept = json.loads(path.read_text())
    verdict = "yes" if kept["answers"] == answers else \
        f"NO ({sum(kept['answers'].get(k) == v for k, v in answers.items())}/{len(answers)})"
    return verdict if kept["device"] == device else f"{verdict} vs {kept['device']}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--testset", default="squad-dev-heldout")
    parser.add_argument("--per-approach", type=int, default=1)
    parser.add_argument("--approaches", default="")
    parser.add_argument("--plan", default=str(REPO / "studies" / "population.yaml"))
    parser.add_argument("--work", type=Path, help="keep preparations and answers here")
    parser.add_argument("--paths", default="own,prepared")
    parser.add_argument("--skip-contextual", action="store_true")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--questions", type=int, help="the set's first N questions only")
    parser.add_argument("--whole", action="store_true",
                        help="score every frozen system of the plan with the service's loop")
    parser.add_argument("--groups", action="store_true",
                        help="fixed cost per system, each alone and approaches together")
    parser.add_argument("--sizes", default="100,200",
                        help="--groups: sample sizes, ascending (two give the fixed cost)")
    parser.add_argument("--ways", default="alone,together",
                        help="--groups: each cell alone, approaches together, or both")
    parser.add_argument("--runner", default="auto", help="--groups: the backend")
    parser.add_argument("--jobs", type=int, default=1,
                        help="with --whole: cells at once, each on its own core")
    args = parser.parse_args()
    if args.groups:
        sizes = tuple(int(n) for n in args.sizes.split(","))
        ways = tuple(way == "together" for way in args.ways.split(","))
        if not sizes or list(sizes) != sorted(set(sizes)) or sizes[0] < 1:
            sys.exit("--sizes: sample sizes, ascending (e.g. 100,200)")
        if not set(args.ways.split(",")) <= {"alone", "together"}:
            sys.exit("--ways: alone, together or both (alone,together)")
        grouped_population(Path(args.plan), args.testset, sizes, max(args.jobs, 2),
                           args.runner, ways)
        return
    if args.whole:
        if args.approaches or args.questions or args.device != "cpu" or args.skip_contextual \
                or args.paths != "own,prepared" or args.per_approach != 1:
            parser.error("--whole scores every system of --plan on the whole --testset: it "
                         "takes --plan, --testset, --work and --jobs only")
        whole_population(Path(args.plan), args.testset, args.work, args.jobs)
        return
    only = set(filter(None, args.approaches.split(",")))
    wanted = args.paths.split(",")
    if not set(wanted) <= {"own", "prepared"} or not wanted:
        sys.exit(f"--paths: own and/or prepared, not {args.paths!r}")
    counts = plan_counts(Path(args.plan))
    raw = testsets.get(args.testset).load().raw
    raw = first_questions(raw, args.questions) if args.questions else raw
    n = sum(len(p["qas"]) for article in raw["data"] for p in article["paragraphs"])
    testset = args.testset + (f"~{n}" if args.questions else "")
    per_k = 1000 / n
    with tempfile.TemporaryDirectory(prefix="population-scoring-") as tmp:
        work = args.work.resolve() if args.work else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        chosen = systems(args.per_approach, only or None, counts, Store(Path(tmp) / "store"),
                         args.skip_contextual)
        if not chosen:
            sys.exit("no frozen system of the plan's approaches under frozen/")
        print(f"scoring {len(chosen)} frozen systems on {testset} ({args.device}), "
              f"one at a time ...", flush=True)
        source = work / f"input-{testset}.json"
        source.write_bytes(canonical_json(input_document(raw)))
        made: dict[str, Path] = {}  # prepare command -> its folder (made once)
        prep_cpu = 0.0
        for approach, _, _ in chosen:
            command = prepare_command(approach)
            if "prepared" not in wanted or command is None or command in made:
                continue
            made[command], cpu = prepared_folder(command, source, work, testset)
            prep_cpu += cpu
            print(f"{testset}: {n:,} questions; preparation `{command}` "
                  + (f"{cpu:.1f} CPU-s ({cpu * per_k:.1f} per 1,000 questions)" if cpu else
                     "made by an earlier run") + ", shared by every system", flush=True)
        print()
        print(f"{'approach':<17} {'system':<30} {'path':<8} {'CPU-s/1k':>8} {'wall-s/1k':>9} "
              f"{'model share':>11}  same answers")
        rows: dict[str, list[tuple[float, float]]] = {}
        for approach, name, weights in chosen:
            folder = SUBMISSIONS / approach
            command = prepare_command(approach)
            paths = [(label, extra) for label, extra in
                     [("own", [])] + ([("prepared", ["--prepared", str(made[command])])]
                                      if command in made else []) if label in wanted]
            if not paths:
                print(f"{approach:<17} {name:<30} (no {args.paths} path)")
                continue
            for label, extra in paths:
                out = work / f"answers-{approach}-{label}.json"
                program = [sys.executable, "approach.py"] if args.device == "cpu" else \
                    [sys.executable, "-c", ON_DEVICE, args.device, "approach.py"]
                cpu, wall, log = child([*program, "predict", "--model", str(weights), *extra,
                                        str(source), str(out)], folder)
                model = model_seconds(log)
                share = float("nan") if model is None else model / wall
                kept = work / f"kept-{testset}-{approach}-{name.replace('/', '-')}.json"
                same = same_as_before(json.loads(out.read_text()), kept, args.device)
                rows.setdefault(approach, []).append((cpu, wall))
                print(f"{approach:<17} {name:<30} {label:<8} {cpu * per_k:>8.2f} "
                      f"{wall * per_k:>9.2f} {_share(share):>11}  {same}", flush=True)
    fastest = {a: min(v, key=lambda r: r[0] if args.device == "cpu" else r[1])
               for a, v in rows.items()}
    measured = sum(counts[a] for a in fastest)
    scale = GOAL_QUESTIONS / n
    cpu_total = (sum(counts[a] * r[0] for a, r in fastest.items()) + prep_cpu) * scale
    wall_total = sum(counts[a] * r[1] for a, r in fastest.items()) * scale
    print(f"\nprojected, each approach at its fastest path measured here: the plan's {measured} "
          f"systems of the measured approaches on {GOAL_QUESTIONS:,} questions, one at a "
          f"time: {cpu_total / 60:.1f} CPU-minutes, {wall_total / 60:.1f} wall-minutes "
          f"({args.device}; preparations made in this run included in the CPU time) "
          f"(goal: {GOAL_SYSTEMS} systems in {GOAL_CPU_S / 60:.0f} CPU-minutes on a CPU); "
          f"approaches not measured here: "
          f"{', '.join(sorted(set(counts) - set(fastest))) or 'none'}")


def whole_population(plan: Path, set_id: str, work: Path | None, jobs: int = 1) -> None:
    """Every frozen system of `plan` on `set_id` through `score_frozen`, then the CPU time per
    approach from the cells' run records (see the module's docstring)."""
    print(f"scoring every frozen system of {plan} on all of {set_id} ...", flush=True)
    with tempfile.TemporaryDirectory(prefix="population-whole-") as tmp:
        workspace = (work or Path(tmp)).resolve()
        testset = testsets.get(set_id)
        found = study_plan.with_testsets(study_plan.load(plan), [testset])
        store = Store(workspace)
        before = resource.getrusage(resource.RUSAGE_SELF)
        start = time.perf_counter()
        with settings.override(workspace=str(workspace)):
            _, skipped = study.score_frozen(found, [testset], Dispatcher("local"), store,
                                            parallel=jobs,
                                            say=lambda line: print(line, flush=True),
                                            earlier=table.read(REPO / "results" / "population.csv"))
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_SELF)
        own = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        n = len(testset.load().questions)
        per_approach: dict[str, list[float]] = {}
        model_s: dict[str, float] = {}  # the reader loop's own timing, where it prints one
        uncounted = 0
        for job in found.trainings:
            system = stored(job, store)
            row = store.get(Job(system.bundle, testset).key) if system else None
            cpu = None if row is None else cell.cpu_seconds(row)
            uncounted += row is not None and cpu is None
            if cpu is not None:
                per_approach.setdefault(job.approach.id, []).append(cpu)
                log = store.get_object(row["log_sha256"]) if row.get("log_sha256") else None
                model = model_seconds(log.decode(errors="replace")) if log else None
                if model is not None:
                    model_s[job.approach.id] = model_s.get(job.approach.id, 0.0) + model
        preparations, _ = prepared.cpu_seconds(prepared.made_since(workspace, 0))
    scale = GOAL_QUESTIONS / n
    print(f"\n{set_id}: {n:,} questions; {sum(map(len, per_approach.values()))} systems "
          f"scored ({len(skipped)} of the plan not frozen, {uncounted} scored before runs "
          f"were counted), {wall / 60:.1f} wall-minutes")
    print(f"{'approach':<17} {'systems':>7} {'CPU-s/1k, mean':>14} {'min':>6} {'max':>6} "
          f"{'CPU-min':>8} {'model share':>11}")
    total = 0.0
    for approach, cpus in sorted(per_approach.items(), key=lambda kv: -sum(kv[1])):
        total += sum(cpus)
        share = model_s[approach] / sum(cpus) if approach in model_s else float("nan")
        print(f"{approach:<17} {len(cpus):>7} {1000 * sum(cpus) / len(cpus) / n:>14.2f} "
              f"{1000 * min(cpus) / n:>6.2f} {1000 * max(cpus) / n:>6.2f} "
              f"{sum(cpus) / 60:>8.1f} {_share(share):>11}")
    print(f"systems' processes {total / 60:.1f} CPU-min, preparations {preparations / 60:.1f}, "
          f"this controller {own / 60:.1f}: {(total + preparations + own) / 60:.1f} CPU-min on "
          f"{n:,} questions, {(total + preparations + own) * scale / 60:.1f} on {GOAL_QUESTIONS:,} "
          f"(goal: {GOAL_SYSTEMS} systems in {GOAL_CPU_S / 60:.0f} CPU-minutes)")
    if model_s:
        floor = sum(model_s.values())
        print(f"the model loops alone of the {sum(len(per_approach[a]) for a in model_s)} systems "
              f"whose reader times its own ({', '.join(sorted(model_s))}): "
              f"{floor / 60:.1f} min on {n:,} questions, {floor * scale / 60:.1f} on "
              f"{GOAL_QUESTIONS:,}: the least these systems cost however much per-set work "
              f"is shared")


def grouped_population(plan: Path, set_id: str, sizes: tuple[int, ...], jobs: int,
                       runner: str, ways: tuple[bool, ...] = (False, True)) -> None:
    """See the module's docstring: `--groups`."""
    print(f"scoring the population on {set_id} samples of {', '.join(map(str, sizes))} "
          f"questions, cell by cell and in groups ...", flush=True)
    testset = testsets.get(set_id)
    found = study_plan.with_testsets(study_plan.load(plan), [testset])
    earlier = table.read(REPO / "results" / "population.csv")
    measured: dict[tuple[bool, int], tuple[float, float, float, int]] = {}
    for together in ways:
        for size in sizes:
            with tempfile.TemporaryDirectory(prefix="population-groups-") as tmp, \
                    settings.override(workspace=tmp):
                store, dispatcher = Store(Path(tmp)), Dispatcher(runner)
                cells = [Job(system.bundle, testset, {"limit": size, "seed": 0})
                         for job in found.trainings
                         if (system := stored(job, store)) is not None]
                # the service's own balancing: each cell weighed by its approach's pace
                cost = study.scoring_cost(found, [testset], size, earlier)
                start = time.perf_counter()
                matrix.prepare_first(cells, dispatcher, store, parallel=jobs)
                prepare_s = time.perf_counter() - start
                start = time.perf_counter()
                report = matrix.run(cells, dispatcher, store, parallel=jobs, together=together,
                                    cost=cost)
                wall = time.perf_counter() - start
                if report.failed:
                    sys.exit(f"{len(report.failed)} cells failed, e.g. "
                             f"{report.failed[0].message}")
                cpu, _, _ = report.cpu_seconds()
            measured[together, size] = (prepare_s, wall, cpu, len(cells))
            print(f"{_way(together):<9} {size:>5} questions: {len(cells)} systems, "
                  f"preparations {prepare_s:6.1f} s, cells {wall:6.1f} s wall, {cpu:7.1f} "
                  f"CPU-s ({cpu / len(cells):.2f} a system) on {dispatcher.backend}; "
                  f"{(prepare_s + wall) / 60:.1f} wall-min in all{_goal(size)}", flush=True)
    if len(sizes) < 2:
        return
    small, large = sizes[0], sizes[-1]
    print(f"\n{set_id}, {jobs} cells at once; fixed cost = a system's time at 0 questions, "
          f"from its time at {small} and {large}")
    fixed = {}
    for together in ways:
        (_, wall_s, cpu_s, n), (prep_l, wall_l, cpu_l, _) = \
            measured[together, small], measured[together, large]
        fixed[together] = (cpu_s - (cpu_l - cpu_s) * small / (large - small)) / n
        per_question = (wall_l - wall_s) / (large - small)
        projected = prep_l * GOAL_QUESTIONS / large + wall_l + \
            per_question * (GOAL_QUESTIONS - large)
        how = "measured" if large == GOAL_QUESTIONS else "projected"
        print(f"{_way(together):<9} fixed cost {fixed[together]:5.2f} CPU-s a system; "
              f"on {GOAL_QUESTIONS:,} questions {projected / 60:6.1f} wall-min {how} "
              f"(goal 40; preparations {prep_l * GOAL_QUESTIONS / large / 60:.1f} of them, "
              f"scaled by questions: a set whose questions share passages prepares fewer)")
    if len(fixed) == 2:
        print(f"fixed cost alone / together: {fixed[False] / max(fixed[True], 1e-9):.1f}x "
              f"(goal: at most 1 s a system together)")


def _way(together: bool) -> str:
    return "together" if together else "alone"


def _goal(size: int) -> str:
    goal = {200: 3, GOAL_QUESTIONS: 40}.get(size)
    return f" (goal {goal})" if goal else ""


def model_seconds(log: str) -> float | None:
    """The seconds a reader spent in its model loop (batching and forward passes), from the
    timing line the shared reader loop prints into its output; None where it prints none."""
    match = TIMING.search(log)
    return float(match.group(2)) if match else None


def _share(share: float) -> str:
    return "-" if share != share else f"{share:.0%}"  # NaN: the approach prints no timing


if __name__ == "__main__":
    main()
