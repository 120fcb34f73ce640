"""What a numeric thread per core costs when runs share the cores: the same small torch
training loop (a two-layer transformer encoder, forward and backward) timed in each setting,
against the baseline of one process alone with the libraries' default threads.

  alone, default          one process, a thread per core (the baseline)
  two at once, default    two processes side by side, each a thread per core, OpenMP threads
                          spinning while they wait (what two test workers, or two runs of a
                          matrix without core shares, did before the thread settings)
  two at once, 1 thread   each with OMP_NUM_THREADS=1 (the test suite's setting)
  two at once, passive    each a thread per core with OMP_WAIT_POLICY=PASSIVE
  container, 1 CPU        one container held to one CPU's time (`--cpus 1`) that sees every
                          core, with the default threads and with OMP_NUM_THREADS=1 (what the
                          Docker runner now gives a run granted one CPU); needs Docker and
                          the runner image

A ratio is the setting's wall seconds per process over the baseline's.

    python benchmarks/thread_oversubscription.py [--steps 40] [--no-docker]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluator.runners.limits import THREAD_VARIABLES  # noqa: E402

LOOP = """import time, torch
torch.manual_seed(0)
layer = torch.nn.TransformerEncoderLayer(128, 4, 256, batch_first=True)
model = torch.nn.TransformerEncoder(layer, 2)
x = torch.randn(16, 128, 128)
opt = torch.optim.SGD(model.parameters(), 0.01)
start = time.perf_counter()
for _ in range({steps}):
    opt.zero_grad(); model(x).sum().backward(); opt.step()
print(time.perf_counter() - start)
"""
RUNNER_IMAGE = "qashift/runner:cpu"


def at_once(argv: list[str], copies: int, settings: dict[str, str]) -> float:
    """Mean seconds of the loop over `copies` processes started together."""
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES} | settings
    procs = [subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(copies)]
    times = [float(p.communicate()[0].split()[-1]) for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"the loop failed: {argv}")
    return sum(times) / len(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--no-docker", action="store_true")
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores; {args.steps} training steps per process", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        loop = Path(tmp) / "loop.py"
        loop.write_text(LOOP.format(steps=args.steps))
        local = [sys.executable, str(loop)]
        base = at_once(local, 1, {})
        rows = [("alone, default (baseline)", base)]
        for name, copies, settings in (("two at once, default", 2, {}),
                                       ("two at once, 1 thread", 2, {"OMP_NUM_THREADS": "1"}),
                                       ("two at once, passive", 2,
                                        {"OMP_WAIT_POLICY": "PASSIVE"})):
            rows.append((name, at_once(local, copies, settings)))
        docker = shutil.which("docker") and not args.no_docker and subprocess.run(
            ["docker", "image", "inspect", RUNNER_IMAGE], capture_output=True).returncode == 0
        if docker:
            for name, settings in (("container, 1 CPU, default", []),
                                   ("container, 1 CPU, 1 thread", ["-e", "OMP_NUM_THREADS=1"])):
                argv = ["docker", "run", "--rm", "--cpus", "1", "--network", "none", *settings,
                        "-v", f"{loop}:/loop.py:ro", RUNNER_IMAGE, "python", "/loop.py"]
                rows.append((name, at_once(argv, 1, {})))
        else:
            print("(no Docker daemon or no runner image: the container rows are left out)")
    for name, seconds in rows:
        print(f"{name:<30} {seconds:7.2f} s  {seconds / base:5.2f}x", flush=True)


if __name__ == "__main__":
    started = time.perf_counter()
    main()
    print(f"done in {time.perf_counter() - started:.0f} s")
