"""What the submission service adds: the time from submit to result for a stored cell over
HTTP (a server on a loopback port, SQLite), against `evaluate` of the same cell, and the jobs
claimed per second by 4 workers sharing the jobs table, in one run.

    python benchmarks/service_overhead.py [--repeats 20] [--jobs 2000]

The stored cell is BERT (ensemble) on SQuAD dev, scored once first. Over HTTP: submit, then
read the submission (finished at once: the store holds the cell). The CLI: the `evaluate`
script beside this interpreter, bytecode cached. Goals: the HTTP answer within 50 ms of the
CLI's median; at least 100 claims a second on SQLite. Claims are timed without running
anything: 4 processes claim and finish jobs of a table filled with `--jobs` jobs.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def qashift(*argv: str, env: dict) -> str:
    return subprocess.run([sys.executable, "-m", "evaluator", *argv], env=env, check=True,
                          capture_output=True, text=True).stdout


def http_against_cli(env: dict, url: str, repeats: int) -> None:
    qashift("admin", "user", "add", "bench", "--db", url, env=env)
    token = qashift("admin", "token", "create", "bench", "--db", url, env=env).strip()
    evaluate = [str(Path(sys.executable).parent / "evaluate"), "-b", "bert-ensemble", "-t",
                "squad-dev", "--json"]
    subprocess.run(evaluate, env=env, check=True, capture_output=True)  # the cell, stored
    cli = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(evaluate, env=env, check=True, capture_output=True)
        cli.append(time.perf_counter() - start)
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "evaluator", "serve", "--port", str(port),
                               "--db", url], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, trust_env=False, timeout=30,
                          headers={"Authorization": f"Bearer {token}"}) as http:
            for _ in range(300):
                try:
                    if http.get("/v1/healthz").status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.1)
            over_http = []
            for _ in range(repeats):
                start = time.perf_counter()
                made = http.post("/v1/submissions", json={"bundle": "bert-ensemble",
                                                          "testsets": ["squad-dev"]}).json()
                state = http.get(f"/v1/submissions/{made['submission']}").json()
                over_http.append(time.perf_counter() - start)
                assert state["done"] and state["jobs"][0]["result"]["f1"]["value"] > 92
    finally:
        server.terminate()
        server.wait(timeout=30)
    gap = statistics.median(over_http) - statistics.median(cli)
    print(f"a stored cell: over HTTP median {statistics.median(over_http) * 1000:.0f} ms, "
          f"evaluate median {statistics.median(cli) * 1000:.0f} ms (baseline): HTTP "
          f"{gap * 1000:+.0f} ms; goal at most +50 ms: {'met' if gap <= 0.05 else 'NOT met'}")


def _claimer(url: str, count: list, stop_at: float) -> None:
    from evaluator.service import db, queue

    engine = db.connect(url)
    name = f"bench:{os.getpid()}"
    claimed = 0
    while time.time() < stop_at:
        job = queue.claim(engine, name, 60)
        if job is None:
            break
        queue.finish(engine, job.id, name, result_key="0" * 64)
        claimed += 1
    count.append(claimed)


def claims_per_second(url: str, jobs: int, workers: int = 4) -> None:
    from evaluator.service import accounts, db, queue

    engine = db.connect(url)
    user = accounts.add_user(engine, "claims")
    queue.submit(engine, user, [("bundle", "set", {"n": k}) for k in range(jobs)])
    with multiprocessing.Manager() as manager:
        counts = manager.list()
        start = time.perf_counter()
        procs = [multiprocessing.Process(target=_claimer, args=(url, counts, time.time() + 120))
                 for _ in range(workers)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        wall = time.perf_counter() - start
        total = sum(counts)
    rate = total / wall
    print(f"{workers} workers claimed and ended {total} jobs in {wall:.1f} s: {rate:.0f} a "
          f"second ({url.split(':')[0]}); goal at least 100: "
          f"{'met' if rate >= 100 else 'NOT met'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data"))
    args = parser.parse_args()
    print(f"timing a stored cell over HTTP and from the command ({args.repeats} times each), "
          f"then {args.jobs:,} claims ...", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "QASHIFT_WORKSPACE": f"{tmp}/ws", "QASHIFT_CACHE": f"{tmp}/cache",
               "QASHIFT_DATA_DIR": args.data_dir, "PYTHONPYCACHEPREFIX": f"{tmp}/bytecode"}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        http_against_cli(env, f"sqlite:///{tmp}/service.sqlite", args.repeats)
        claims_per_second(f"sqlite:///{tmp}/claims.sqlite", args.jobs)


if __name__ == "__main__":
    main()
