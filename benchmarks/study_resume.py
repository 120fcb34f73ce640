"""Wall time of resuming a study over systems it has already trained and scored, against one
`qashift study status` of the same plan, measured in the same run.

A controller restarted on a long plan walks past every system done before it reaches work;
that walk should cost little more than the bookkeeping of a status pass, not seconds per
system. The baseline is `study status PLAN` (the plan, the store and the table read once);
the measured command is `study run PLAN --only PATTERN` over systems that are all stored
(nothing to train or score). The table is a copy, so the committed one is not touched.
Target: the resumed run within 5x the status pass.

    python benchmarks/study_resume.py [--plan studies/approach-level.yaml]
        [--only 'logreg-rajpurkar@*'] [--table results/approach-level.csv]
        [--ledger results/population.csv] [--runs 3] [--data-dir ../shared/data]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

TARGET_RATIO = 5.0


def wall(argv: list[str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(argv, check=True, capture_output=True, text=True)
    return time.perf_counter() - started, done.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", default="studies/approach-level.yaml")
    parser.add_argument("--only", default="logreg-rajpurkar@*")
    parser.add_argument("--table", type=Path, default=Path("results/approach-level.csv"))
    parser.add_argument("--ledger", type=Path, default=Path("results/population.csv"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--data-dir", type=Path,
                        default=Path(__file__).resolve().parents[2] / "shared" / "data")
    args = parser.parse_args()
    print(f"timing `study status` and a resumed `study run --only '{args.only}'` of "
          f"{args.plan}, {args.runs} runs each ...", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        table = Path(tmp) / args.table.name
        shutil.copyfile(args.table, table)
        common = ["--table", str(table), "--ledger", str(args.ledger)]
        status = ["qashift", "--data-dir", str(args.data_dir), "study", "status", args.plan,
                  *common]
        resume = ["qashift", "--data-dir", str(args.data_dir), "study", "run", args.plan,
                  "--runner", "local", "--only", args.only, *common]
        base, full, systems = [], [], 0
        for _ in range(args.runs):  # interleaved, so a busy moment costs both alike
            base.append(wall(status)[0])
            seconds, progress = wall(resume)
            full.append(seconds)
            lines = [line for line in progress.splitlines() if line.startswith("[")]
            if any("trained;" in line or ("stored earlier" in line
                                          and "scored on 0/" not in line) for line in lines):
                raise SystemExit(f"{args.only}: not every system is stored and scored; "
                                 "run the plan first")
            systems = len(lines)
    b, f = statistics.median(base), statistics.median(full)
    print(f"baseline  study status {args.plan}   median {b:6.2f} s over {args.runs} runs")
    print(f"measured  study run --only '{args.only}' ({systems} systems, all done)   median "
          f"{f:6.2f} s ({f / b:.1f}x the baseline, {max(f - b, 0) / max(systems, 1):.2f} s "
          f"per system beyond it)")
    print(f"target    within {TARGET_RATIO:.0f}x the baseline: "
          f"{'met' if f / b <= TARGET_RATIO else 'NOT met'}")


if __name__ == "__main__":
    main()
