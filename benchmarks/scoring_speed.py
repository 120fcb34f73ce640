"""Scorer speed against torchmetrics' SQuAD metric, and the wall time of a cached `evaluate`.

Both measured in the same run on the 10,570-question SQuAD v1.1 dev set with the stored BERT
ensemble predictions. Targets: our scorer at least 5x faster; a cached evaluate under 0.5 s.

    python benchmarks/scoring_speed.py [--data-dir ../shared/data] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
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
    args = parser.parse_args()
    data = Path(args.data_dir)

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

    ours = best_of(cold_score, args.repeats)
    theirs = best_of(lambda: torchmetrics_squad(tm_preds, tm_target), max(1, args.repeats // 2))
    print(f"scorer, {len(questions)} questions: qashift {ours:.3f} s, torchmetrics "
          f"{theirs:.3f} s, speed-up {theirs / ours:.1f}x (target >= 5x)")

    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "QASHIFT_WORKSPACE": f"{tmp}/ws", "QASHIFT_CACHE": f"{tmp}/cache",
               "QASHIFT_DATA_DIR": str(data)}
        cmd = ["evaluate", "-b", "bert-ensemble", "-t", "squad-dev", "--json"]
        subprocess.run(cmd, env=env, check=True, capture_output=True)
        walls = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
            walls.append(time.perf_counter() - start)
            assert json.loads(out.stdout)["results"][0]["cached"]
    print(f"cached evaluate wall time: median {statistics.median(walls):.3f} s, "
          f"min {min(walls):.3f} s (target < 0.5 s)")


if __name__ == "__main__":
    main()
