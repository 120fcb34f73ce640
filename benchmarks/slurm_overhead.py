"""Slurm's scheduling overhead per cell against the local runner, and how a matrix's wall time
scales with 1, 2 and 4 parallel jobs, measured on the same matrix in the same run.

The matrix is cheap command bundles (each sleeps `--work` seconds, then answers) on small
slices of SQuAD dev, so the numbers are the runners' overhead, not a model's speed. Every
configuration starts from an empty results store. Needs a Slurm controller (`bash
.ci/slurm.sh` as root starts a one-node one); on a shared cluster, queueing time counts too.

    python benchmarks/slurm_overhead.py [--bundles 4] [--sets 3] [--work 0.5]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PROGRAM = """
import json, sys, time
time.sleep({work})
doc = json.load(open(sys.argv[1]))
json.dump({{q["id"]: p["context"].split()[{word}] for a in doc["data"]
           for p in a["paragraphs"] for q in p["qas"]}}, open(sys.argv[2], "w"))
"""


def build(root: Path, data: Path, bundles: int, sets: int, work: float) -> None:
    from tests.conftest import write_command_bundle, write_testset

    raw = json.loads((data / "squad-v1.1" / "dev-v1.1.json").read_text())
    for i in range(sets):
        article = raw["data"][i]
        write_testset(root / "sets", f"set-{i}", {"version": "1.1", "data": [
            {**article, "paragraphs": article["paragraphs"][:3]}]})
    for i in range(bundles):
        write_command_bundle(root / "subs", f"toy-{i}", PROGRAM.format(work=work, word=i))


def matrix_wall(root: Path, runner: str, parallel: int, tag: str) -> tuple[float, list[dict]]:
    """Wall time of `evaluate` over the whole matrix in a fresh workspace, and its records."""
    workspace = root / f"ws-{tag}"
    env = {**os.environ, "QASHIFT_SUBMISSIONS": str(root / "subs"),
           "QASHIFT_TESTSETS": str(root / "sets"), "QASHIFT_WORKSPACE": str(workspace),
           "QASHIFT_SLURM_INNER": os.environ.get("QASHIFT_SLURM_INNER", "local")}
    start = time.perf_counter()
    out = subprocess.run(["evaluate", "-b", "all", "-t", "all", "--runner", runner, "-j",
                          str(parallel), "--json"], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if out.returncode != 0:
        raise SystemExit(f"evaluate --runner {runner} failed:\n{out.stderr[-2000:]}")
    import sqlite3

    with sqlite3.connect(workspace / "results.sqlite") as conn:
        records = [json.loads(r[0]) for r in conn.execute("SELECT run_record FROM results")]
    return wall, records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--bundles", type=int, default=4)
    parser.add_argument("--sets", type=int, default=3)
    parser.add_argument("--work", type=float, default=0.5, help="seconds each cell computes")
    args = parser.parse_args()

    from evaluator.runners.slurm.controller import cluster_available

    if reason := cluster_available():
        raise SystemExit(f"no Slurm cluster: {reason} (bash .ci/slurm.sh starts one)")
    cpus = subprocess.run(["sinfo", "-h", "-o", "%C"], capture_output=True,
                          text=True).stdout.split()
    with tempfile.TemporaryDirectory(prefix="qashift-slurm-bench-") as tmp:
        root = Path(tmp)
        build(root, Path(args.data_dir), args.bundles, args.sets, args.work)
        cells = args.bundles * args.sets
        print(f"matrix: {cells} cells ({args.bundles} bundles x {args.sets} sets), "
              f"{args.work:g} s of work each; Slurm CPUs alloc/idle/other/total: "
              f"{cpus[0] if cpus else '?'}")
        walls: dict[tuple[str, int], float] = {}
        for runner in ("local", "slurm"):
            for parallel in (1, 2, 4):
                wall, records = matrix_wall(root, runner, parallel, f"{runner}-{parallel}")
                walls[runner, parallel] = wall
                extra = ""
                if runner == "slurm":
                    queue = sorted(r["details"]["slurm"].get("queue_s") or 0 for r in records)
                    extra = f", submit-to-start median {queue[len(queue) // 2]:.2f} s"
                print(f"  {runner:<5} -j {parallel}: {wall:6.1f} s, {wall / cells:5.2f} s/cell"
                      f"{extra}")
        for parallel in (1, 2, 4):
            overhead = (walls["slurm", parallel] - walls["local", parallel]) / cells
            print(f"scheduling overhead, -j {parallel}: {overhead:+.2f} s per cell through "
                  f"Slurm; slurm/local wall ratio "
                  f"{walls['slurm', parallel] / walls['local', parallel]:.2f}")
        for runner in ("local", "slurm"):
            base = walls[runner, 1]
            print(f"scaling, {runner}: wall time -j1 : -j2 : -j4 = 1 : "
                  f"{walls[runner, 2] / base:.2f} : {walls[runner, 4] / base:.2f} "
                  f"(speed-up x{base / walls[runner, 2]:.2f} and x{base / walls[runner, 4]:.2f})")


if __name__ == "__main__":
    main()
