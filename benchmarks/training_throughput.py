"""Training throughput (questions per second) of each approach against a naive per-example loop
of the same model, measured in the same run on the same questions.

For each approach the approach's own `train` command runs three times on the first
`--questions` questions of `squad-dev-train` (the SQuAD v1.1 dev articles that
`squad-dev-heldout` leaves out):

  setup   0 epochs: reading, tokenizing, building the model (subtracted from the other two)
  naive   1 epoch, one question per step (batch_size=1), one thread (OMP_NUM_THREADS=1)
  tuned   1 epoch with the approach's defaults: length-bucketed, packed batches, its threads

throughput = questions / (wall - setup wall); the ratio tuned / naive is the speed-up
(goal: >= 5x). Each run checkpoints as usual (MiniLM only at the epoch's end here).

    python benchmarks/training_throughput.py [--approach bidaf ...] [--questions 256]
        [--device cpu|cuda] [--data-dir ../shared/data]
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluator.bundles import spec as bundles  # noqa: E402
from evaluator.core import settings  # noqa: E402
from evaluator.data import testsets  # noqa: E402
from evaluator.data.testsets import first_questions  # noqa: E402

APPROACHES = ("logreg-rajpurkar", "drqa-reader", "bidaf", "minilm-span")
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def train_once(approach: bundles.Bundle, train_file: Path, hp: dict, device: str, work: Path,
               threads: int | None) -> float:
    """Wall seconds of one run of the approach's train command (its shared `libraries:`
    importable, as a runner makes them)."""
    for sub in ("model", "checkpoints"):
        (work / sub).mkdir(parents=True, exist_ok=True)
        for leftover in (work / sub).iterdir():
            if leftover.is_file():
                leftover.unlink()
    config = work / "config.json"
    config.write_text(json.dumps({"hyperparameters": hp, "seed": 0, "device": device,
                                  "system": "benchmark"}))
    env = os.environ.copy()
    if approach.libraries:
        env["PYTHONPATH"] = os.pathsep.join(sorted({str(lib.parent) for lib in approach.libraries}))
    if threads is not None:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    argv = [sys.executable, "approach.py", "train", "--train", str(train_file), "--config",
            str(config), "--model", str(work / "model"), "--checkpoints",
            str(work / "checkpoints")]
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=approach.folder, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{approach.id} failed: {done.stderr.strip().splitlines()[-1:]}")
    return wall


def measure(approach_id: str, train_file: Path, questions: int, device: str) -> dict:
    approach = bundles.get(approach_id)
    defaults = dict(approach.hyperparameters["defaults"])
    if "checkpoint_steps" in defaults:
        defaults["checkpoint_steps"] = 10 ** 9  # checkpoint at the epoch's end only
    with tempfile.TemporaryDirectory(prefix="qashift-throughput-") as tmp:
        work = Path(tmp)
        setup = train_once(approach, train_file, defaults | {"epochs": 0}, device,
                           work, None)
        naive_hp = defaults | {"epochs": 1, "batch_size": 1}
        if "threads" in defaults:
            naive_hp["threads"] = 1
        naive = train_once(approach, train_file, naive_hp, device, work, 1)
        tuned = train_once(approach, train_file, defaults | {"epochs": 1}, device,
                           work, None)
    naive_rate = questions / max(naive - setup, 1e-9)
    tuned_rate = questions / max(tuned - setup, 1e-9)
    return {"approach": approach_id, "setup_s": setup, "naive_s": naive, "tuned_s": tuned,
            "naive_q_per_s": naive_rate, "tuned_q_per_s": tuned_rate,
            "speedup": tuned_rate / naive_rate}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--approach", action="append", choices=APPROACHES,
                        help="repeatable; default: all four")
    parser.add_argument("--questions", type=int, default=256)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--data-dir", type=Path, default=SHARED_DATA)
    args = parser.parse_args()
    with settings.override(data_dir=(str(args.data_dir),)):
        raw = testsets.get("squad-dev-train").load().raw
    doc = first_questions(raw, args.questions)
    print(f"{args.questions} questions of squad-dev-train, device {args.device}, "
          f"{os.cpu_count()} CPUs")
    print(f"{'approach':<18} {'setup s':>8} {'naive q/s':>10} {'tuned q/s':>10} {'speed-up':>9}")
    with tempfile.TemporaryDirectory(prefix="qashift-throughput-") as tmp:
        train_file = Path(tmp) / "train.json"
        train_file.write_text(json.dumps(doc))
        for approach_id in args.approach or APPROACHES:
            row = measure(approach_id, train_file, args.questions, args.device)
            print(f"{row['approach']:<18} {row['setup_s']:>8.1f} {row['naive_q_per_s']:>10.1f} "
                  f"{row['tuned_q_per_s']:>10.1f} {row['speedup']:>8.1f}x", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
