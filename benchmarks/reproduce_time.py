"""Wall time of `qashift reproduce` (every published SQuADShifts fit and drop beside ours)
against the command-line start-up it cannot avoid, measured in the same run.

The baseline is `qashift --version` (interpreter, click, the package's entry point); the
target is under 15 s for the whole reproduction from a fresh clone (no cache involved:
`reproduce` keeps nothing between runs).

    python benchmarks/reproduce_time.py [--runs 3] [--data-dir ../shared/data]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time
from pathlib import Path

TARGET_S = 15.0


def wall(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--data-dir", type=Path,
                        default=Path(__file__).resolve().parents[2] / "shared" / "data")
    args = parser.parse_args()
    base, full = [], []
    for _ in range(args.runs):  # interleaved, so a busy moment costs both alike
        base.append(wall(["qashift", "--version"]))
        full.append(wall(["qashift", "--data-dir", str(args.data_dir), "reproduce"]))
    b, f = statistics.median(base), statistics.median(full)
    print(f"baseline  qashift --version   median {b:6.2f} s over {args.runs} runs")
    print(f"measured  qashift reproduce   median {f:6.2f} s over {args.runs} runs "
          f"({f / b:.1f}x the baseline)")
    print(f"target    under {TARGET_S:.0f} s: {'met' if f < TARGET_S else 'NOT met'} "
          f"({f / TARGET_S:.2f} of it)")


if __name__ == "__main__":
    main()
