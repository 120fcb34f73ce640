"""Per-cell overhead of the Docker runner against running the same command directly.

Runs one small command bundle N times under the local runner and N times under the Docker
runner (interleaved, same input, same machine, same run) and prints, per cell, the wall time
of each and the Docker runner's steps: create (+attach), start, wait (the program itself),
inspect and log, collect, remove. Overhead = docker cell time - local cell time.
Target: under 2 s per cell with a local image (CodaLab spent ~113 s around a 13 s run).

    python benchmarks/docker_overhead.py [--cells 10] [--image qashift/python:bookworm]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluator.bundles import spec as bundles  # noqa: E402
from evaluator.data.testsets import input_document  # noqa: E402
from evaluator.runners.base import RunRequest  # noqa: E402
from evaluator.runners.docker import DockerRunner, daemon_available  # noqa: E402
from evaluator.runners.local import LocalRunner  # noqa: E402

PROGRAM = """import json, sys
doc = json.load(open(sys.argv[1]))
json.dump({q["id"]: p["context"].split()[0] for a in doc["data"] for p in a["paragraphs"]
           for q in p["qas"]}, open(sys.argv[2], "w"))
"""
SQUAD_DEV = Path(__file__).resolve().parents[2] / "shared" / "data" / "squad-v1.1" / "dev-v1.1.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=10)
    parser.add_argument("--image", default="qashift/python:bookworm")
    parser.add_argument("--articles", type=int, default=2, help="SQuAD dev articles of input")
    args = parser.parse_args()
    if not daemon_available():
        print("no Docker daemon answers; start one (bash .ci/docker.sh)")
        return 1
    with tempfile.TemporaryDirectory(prefix="qashift-bench-") as tmp:
        root = Path(tmp)
        folder = root / "bench"
        folder.mkdir()
        (folder / "program.py").write_text(PROGRAM)
        (folder / "bundle.yaml").write_text(json.dumps({
            "id": "bench", "name": "bench", "kind": "command",
            "command": "python3 program.py {input} {output}",
            "environment": {"image": args.image}, "resources": {"timeout": 120}}))
        bundle = bundles.from_folder(folder)
        raw = json.loads(SQUAD_DEV.read_text()) if SQUAD_DEV.is_file() else {
            "data": [{"title": "t", "paragraphs": [{"context": "A b c.", "qas": [
                {"id": "q1", "question": "b?", "answers": [{"text": "b"}]}]}]}]}
        raw = {"version": "1.1", "data": raw["data"][:args.articles]}
        (root / "input.json").write_text(json.dumps(input_document(raw)))
        runners = {"local": LocalRunner(), "docker": DockerRunner()}
        times: dict[str, list[float]] = {"local": [], "docker": []}
        phases: list[dict] = []
        for name, runner in runners.items():  # one warm-up each (image lookup, page cache)
            out = root / f"warm-{name}"
            out.mkdir()
            runner.run(RunRequest(bundle, root / "input.json", out, "bench"))
        for i in range(args.cells):
            for name, runner in runners.items():
                out = root / f"{name}-{i}"
                out.mkdir()
                start = time.perf_counter()
                record = runner.run(RunRequest(bundle, root / "input.json", out, "bench"))
                times[name].append(time.perf_counter() - start)
                if name == "docker":
                    phases.append(record.details["phases_s"])
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"{args.cells} cells, input = {args.articles} SQuAD dev article(s), "
              f"image {args.image}")
        print(f"local  runner: median {med['local']:.3f} s per cell "
              f"(min {min(times['local']):.3f}, max {max(times['local']):.3f})")
        print(f"docker runner: median {med['docker']:.3f} s per cell "
              f"(min {min(times['docker']):.3f}, max {max(times['docker']):.3f})")
        steps = {k: statistics.median(p[k] for p in phases) for k in phases[0]}
        print("docker steps (median s): " + ", ".join(f"{k} {v:.3f}" for k, v in steps.items()))
        overhead = med["docker"] - med["local"]
        print(f"overhead: {overhead:.3f} s per cell; ratio docker/local "
              f"{med['docker'] / med['local']:.2f}x; target < 2 s: "
              f"{'met' if overhead < 2 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
