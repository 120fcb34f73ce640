"""Scorer speed against torchmetrics' SQuAD metric, the wall time of a cached `evaluate`, the
time to read 400 bundle folders (what `evaluate -b all` does first, and a server per
request), libyaml's checked path against the pure-Python careful reader, and the wall time of
`evaluate -b all -t squad-dev` with 400 bundle folders whose every cell is stored (goal 0.5 s
on an idle core; its first, filling run untimed), in the same run.

Both measured in the same run on the 10,570-question SQuAD v1.1 dev set with the stored BERT
ensemble predictions. Targets: our scorer at least 5x faster; a cached evaluate under 0.3 s.

The cached evaluate is timed as a user's install starts it: the `evaluate` script installed
beside this interpreter (not a version manager's shim, which adds its own start; --evaluate
names another command), with Python's bytecode cache on (kept in the run's temporary folder,
filled by the first, untimed run) even where PYTHONDONTWRITEBYTECODE is set; --as-is keeps the
environment unchanged (every module compiled at every start when that variable is set).

    python benchmarks/scoring_speed.py [--data-dir ../shared/data] [--repeats 5]
        [--evaluate COMMAND] [--as-is] [--only-evaluate] [--only-folders] [--only-all]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--evaluate", default=None,
                        help="the command to time (default: the evaluate script beside this "
                             "Python, else evaluate on PATH)")
    parser.add_argument("--as-is", action="store_true",
                        help="time with the environment unchanged (no bytecode cache added)")
    parser.add_argument("--only-evaluate", action="store_true",
                        help="time the cached evaluate only, not the scorer")
    parser.add_argument("--only-folders", action="store_true",
                        help="time reading 400 bundle folders only")
    parser.add_argument("--only-all", action="store_true",
                        help="time the cached `evaluate -b all` of 400 bundle folders only")
    args = parser.parse_args()
    data = Path(args.data_dir)
    if args.only_all:
        time_cached_all(data, args.repeats, args.evaluate)
        return
    if not args.only_folders:
        if not args.only_evaluate:
            compare_scorers(data, args.repeats)
        time_cached_evaluate(data, args.repeats, args.evaluate, args.as_is)
    time_bundle_folders(args.repeats)


def time_bundle_folders(repeats: int, count: int = 400, goal_s: float = 0.5) -> None:
    """Every bundle folder of the repository, and copies of them under new ids up to
    `count`, read as `-b all` reads them in a fresh process (the parse cache emptied before
    each read): the fast path (libyaml, its events checked) against the careful pure-Python
    reader it falls back to."""
    import yaml

    from evaluator.bundles import spec
    from evaluator.core import folders, settings

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "submissions"
        shutil.copytree(REPO / "submissions", root)
        originals = sorted(p.parent for p in root.glob("*/bundle.yaml"))
        for k in range(count - len(originals)):
            source = originals[k % len(originals)]
            copy = root / f"{source.name}-copy{k}"
            shutil.copytree(source, copy)
            text = (copy / "bundle.yaml").read_text()
            (copy / "bundle.yaml").write_text(text.replace(f"id: {source.name}\n",
                                                           f"id: {copy.name}\n", 1))

        def read_all() -> int:
            folders._PARSED.clear()
            with settings.override(root=tmp):
                return len(spec.resolve(["all"]))

        fast_s = best_of(read_all, repeats)
        found = read_all()
        fast = folders.load_checked
        folders.load_checked = lambda text: yaml.load(text, Loader=folders._NoAliases)  # noqa: S506
        try:
            careful_s = best_of(read_all, repeats)
        finally:
            folders.load_checked = fast
    print(f"reading {found} bundle folders (best of {repeats}): {fast_s:.3f} s with libyaml's "
          f"checked path, {careful_s:.3f} s with the pure-Python careful reader (baseline): "
          f"{careful_s / fast_s:.1f}x; goal at most {goal_s} s: "
          f"{'met' if fast_s <= goal_s else 'NOT met'}")


def time_cached_all(data: Path, repeats: int, given: str | None, count: int = 400,
                    goal_s: float = 0.5) -> None:
    """`evaluate -b all -t squad-dev --json` in a project of `count` predictions bundles (the
    BERT ensemble's stored predictions under new ids: each its own cell), every cell stored
    by a first run, then timed as a user starts it (bytecode cached)."""
    import yaml

    print(f"storing every cell of {count} bundle folders on squad-dev, then timing "
          f"`evaluate -b all` ...", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "project"
        shutil.copytree(REPO / "testsets" / "squad-dev", root / "testsets" / "squad-dev")
        spec = yaml.safe_load((REPO / "submissions" / "bert-ensemble" / "bundle.yaml")
                              .read_text())
        for k in range(count):
            folder = root / "submissions" / f"stored-{k:03d}"
            folder.mkdir(parents=True)
            (folder / "bundle.yaml").write_text(yaml.safe_dump(
                {**spec, "id": folder.name, "name": f"stored {k}"}))
        env = {**os.environ, "QASHIFT_ROOT": str(root), "QASHIFT_WORKSPACE": f"{tmp}/ws",
               "QASHIFT_CACHE": f"{tmp}/cache", "QASHIFT_DATA_DIR": str(data),
               "PYTHONPYCACHEPREFIX": f"{tmp}/bytecode"}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        for name in ("QASHIFT_TESTSETS", "QASHIFT_SUBMISSIONS"):
            env.pop(name, None)
        cmd = [*evaluate_command(given), "-b", "all", "-t", "squad-dev", "--json", "-j", "2"]
        start = time.perf_counter()
        subprocess.run(cmd, env=env, check=True, capture_output=True)
        filled = time.perf_counter() - start
        walls = []
        for _ in range(repeats):
            start = time.perf_counter()
            out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
            walls.append(time.perf_counter() - start)
            results = json.loads(out.stdout)["results"]
            assert len(results) == count and all(r["cached"] for r in results)
    print(f"evaluate -b all -t squad-dev, {count} bundle folders, every cell stored: median "
          f"{statistics.median(walls):.3f} s, min {min(walls):.3f} s (goal at most {goal_s} s: "
          f"{'met' if min(walls) <= goal_s else 'NOT met'}); the first run, scoring them, "
          f"{filled:.0f} s")


def evaluate_command(given: str | None) -> list[str]:
    if given:
        return shlex.split(given)
    beside = Path(sys.executable).parent / "evaluate"
    return [str(beside) if beside.is_file() else shutil.which("evaluate") or "evaluate"]


def compare_scorers(data: Path, repeats: int) -> None:
    from torchmetrics.functional.text import squad as torchmetrics_squad

    from evaluator.data.testsets import parse_questions
    from evaluator.scoring.squad_v1 import normalize_answer, score

    raw = json.loads((data / "squad-v1.1" / "dev-v1.1.json").read_text())
    predictions = json.loads((data / "squad-leaderboard" / "dev-predictions" /
                              "BERT (ensemble) (Google AI Language).json").read_text())
    questions = parse_questions(raw)
    tm_preds = [{"prediction_text": predictions.get(q.id, ""), "id": q.id} for q in questions]
    tm_target = [{"answers": {"answer_start": [0] * len(q.answers), "text": list(q.answers)},
                  "id": q.id} for q in questions]

    def cold_score():  # each evaluation starts with an empty normalisation cache
        normalize_answer.cache_clear()
        score(questions, predictions)

    ours = best_of(cold_score, repeats)
    theirs = best_of(lambda: torchmetrics_squad(tm_preds, tm_target), max(1, repeats // 2))
    print(f"scorer, {len(questions)} questions: qashift {ours:.3f} s, torchmetrics "
          f"{theirs:.3f} s, speed-up {theirs / ours:.1f}x (target >= 5x)")


def time_cached_evaluate(data: Path, repeats: int, given: str | None, as_is: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "QASHIFT_WORKSPACE": f"{tmp}/ws", "QASHIFT_CACHE": f"{tmp}/cache",
               "QASHIFT_DATA_DIR": str(data)}
        if not as_is:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = f"{tmp}/bytecode"
        cmd = [*evaluate_command(given), "-b", "bert-ensemble", "-t", "squad-dev", "--json"]
        subprocess.run(cmd, env=env, check=True, capture_output=True)
        walls, cpus = [], []  # CPU time (user + system) says more on a busy machine
        for _ in range(repeats):
            before, start = cpu_of_children(), time.perf_counter()
            out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
            walls.append(time.perf_counter() - start)
            cpus.append(cpu_of_children() - before)
            assert json.loads(out.stdout)["results"][0]["cached"]
    print(f"cached evaluate wall time: median {statistics.median(walls):.3f} s, "
          f"min {min(walls):.3f} s (target < 0.3 s); CPU time median "
          f"{statistics.median(cpus):.3f} s; {shlex.join(cmd[:1])}, "
          f"{'environment as is' if as_is else 'bytecode cached'}")


def cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    main()
