"""Never lose a result: a killed controller resumes where it stopped, two controllers on one
store never run a cell twice, and damaged cached objects are recomputed, not trusted."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import hears_ctrl_c, write_command_bundle, write_testset

# Each run appends one line to a shared ledger, so the test can count real executions.
PROGRAM = """
import json, sys, time, os
time.sleep({sleep})
doc = json.load(open(sys.argv[1]))
with open({ledger!r}, "a") as ledger:
    ledger.write({name!r} + "\\n")
json.dump({{q["id"]: p["context"].split()[{word}] for a in doc["data"]
           for p in a["paragraphs"] for q in p["qas"]}}, open(sys.argv[2], "w"))
"""

CELLS = 6


@pytest.fixture
def matrix_env(tmp_path, small_dev, workspace, monkeypatch):
    subs, sets = tmp_path / "subs", tmp_path / "sets"
    ledger = tmp_path / "ledger.txt"
    write_testset(sets, "small-a", small_dev)
    write_testset(sets, "small-b", {"version": "1.1", "data": small_dev["data"][:1]})
    for i in range(CELLS // 2):
        name = f"model-{i}"
        write_command_bundle(subs, name, PROGRAM.format(sleep=0.3, ledger=str(ledger),
                                                        name=name, word=i))
    env = {**os.environ, "QASHIFT_SUBMISSIONS": str(subs), "QASHIFT_TESTSETS": str(sets)}
    return env, ledger, workspace


def start(env: dict) -> subprocess.Popen:
    return subprocess.Popen(["evaluate", "-b", "all", "-t", "all", "--runner", "local",
                             "--json"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def results(workspace: Path) -> dict[tuple[str, str], tuple[float, float]]:
    with sqlite3.connect(workspace / "results.sqlite") as conn:
        rows = conn.execute("SELECT bundle, testset, em, f1 FROM results").fetchall()
    assert len(rows) == len({(b, t) for b, t, _, _ in rows})
    return {(b, t): (em, f1) for b, t, em, f1 in rows}


def test_two_concurrent_controllers_run_each_cell_once(matrix_env):
    env, ledger, workspace = matrix_env
    first, second = start(env), start(env)
    outs = [p.communicate(timeout=120) for p in (first, second)]
    assert first.returncode == 0 and second.returncode == 0, outs
    assert len(results(workspace)) == CELLS
    runs = ledger.read_text().split()
    assert len(runs) == CELLS, runs  # no cell executed twice
    for stdout, _ in outs:
        assert len(json.loads(stdout)["results"]) == CELLS  # both report every cell


KILLS, KILL_WINDOW_S = 10, 2.5  # a run of the matrix lasts about the window


@pytest.mark.slow
def test_sigkill_at_random_points_then_resume(matrix_env):
    """Killed at a random moment in each tenth of a run (start, planning, each cell, storing),
    a controller run again gives the uninterrupted run's results."""
    env, ledger, workspace = matrix_env
    reference_proc = start(env)
    reference_proc.communicate(timeout=120)
    reference = results(workspace)
    assert len(reference) == CELLS
    rng = random.Random(7)
    for trial in range(KILLS):
        (workspace / "results.sqlite").unlink()
        for suffix in ("-wal", "-shm"):
            Path(f"{workspace / 'results.sqlite'}{suffix}").unlink(missing_ok=True)
        proc = start(env)
        time.sleep((trial + rng.random()) * KILL_WINDOW_S / KILLS)  # one kill per slice
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        resumed = start(env)
        out, err = resumed.communicate(timeout=120)
        assert resumed.returncode == 0, (trial, err)
        assert results(workspace) == reference, trial
        doc = json.loads(out)
        assert len(doc["results"]) == CELLS and not doc["failed"]


def test_a_corrupted_cached_prediction_file_is_detected_and_recomputed(matrix_env):
    env, ledger, workspace = matrix_env
    proc = start(env)
    proc.communicate(timeout=120)
    before = results(workspace)
    with sqlite3.connect(workspace / "results.sqlite") as conn:
        sha = conn.execute("SELECT predictions_sha256 FROM results WHERE bundle = 'model-0' "
                           "AND testset = 'small-a'").fetchone()[0]
    obj = workspace / "objects" / sha[:2] / sha
    obj.write_text('{"tampered": "yes"}')
    runs_before = len(ledger.read_text().split())
    proc = start(env)
    out, _ = proc.communicate(timeout=120)
    cells = {(c["bundle"], c["testset"]): c for c in json.loads(out)["results"]}
    assert cells[("model-0", "small-a")]["cached"] is False
    assert sum(c["cached"] for c in cells.values()) == CELLS - 1
    assert len(ledger.read_text().split()) == runs_before + 1
    assert results(workspace) == before
    assert json.loads(obj.read_text()) != {"tampered": "yes"}  # rewritten with the real file


def test_status_shows_done_failed_and_pending(matrix_env, tmp_path):
    env, ledger, workspace = matrix_env
    subs = Path(env["QASHIFT_SUBMISSIONS"])
    write_command_bundle(subs, "broken", "raise SystemExit(3)")
    subprocess.run(["evaluate", "-b", "model-0", "-b", "broken", "-t", "small-a",
                    "--runner", "local"], env=env, capture_output=True)
    out = subprocess.run(["qashift", "status"], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    lines = {line.split()[0]: line.split()[1:] for line in out.stdout.splitlines()[1:-1]}
    assert lines["broken"][0] == "nonzero-exit"
    assert float(lines["model-0"][0]) > 0
    assert lines["model-1"] == [".", "."]
    assert "done 1" in out.stdout and "failed 1" in out.stdout and "pending 6" in out.stdout


@pytest.mark.parametrize("jobs", ["1", "2"])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_local_matrix_stops_promptly_and_leaves_no_process(
        matrix_env, tmp_path, signum, jobs):
    env, ledger, workspace = matrix_env
    subs = Path(env["QASHIFT_SUBMISSIONS"])
    pids = tmp_path / "pids"
    pids.mkdir()
    write_command_bundle(subs, "sleeper", f"""
import os, time, pathlib
pathlib.Path({str(pids)!r}, str(os.getpid())).touch()
time.sleep(60)
""", timeout=120)
    proc = subprocess.Popen(["evaluate", "-b", "sleeper", "-t", "all", "--runner", "local",
                             "-j", jobs], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=hears_ctrl_c)
    deadline = time.monotonic() + 30
    while len(list(pids.iterdir())) < int(jobs) and time.monotonic() < deadline:
        time.sleep(0.2)
    started_pids = [int(p.name) for p in pids.iterdir()]
    assert len(started_pids) == int(jobs)  # as many cells running as asked for
    started = time.monotonic()
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=30)
    assert time.monotonic() - started < 10
    assert proc.returncode != 0
    # one line says so, and no traceback
    assert "Traceback" not in stderr, stderr
    assert stderr.splitlines()[-1] == ("error: interrupted" if signum == signal.SIGINT
                                       else "error: terminated"), stderr
    time.sleep(0.5)
    for pid in started_pids:
        assert not _alive(pid), pid
    if (workspace / "results.sqlite").exists():
        assert results(workspace) == {}


def _alive(pid: int) -> bool:
    """Running, as opposed to gone or a zombie left for a non-reaping init to collect."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    state = next(line for line in status.splitlines() if line.startswith("State:"))
    return "Z" not in state.split()[1]


def test_status_of_all_bundles_says_how_many_trained_systems_run_too(workspace):
    """`all` names the bundle folders; the frozen systems, which run as well, are counted
    in one line that says where to see them."""
    from evaluator.training import frozen

    done = subprocess.run(["qashift", "status", "-t", "reddit-test"], capture_output=True,
                          text=True, env=os.environ.copy(), timeout=300)
    assert done.returncode == 0, done.stderr
    systems = len({m["system"]["system"] for m in frozen.manifests()})
    assert systems > 100
    assert f"{systems} trained systems (frozen or stored here) run too" in done.stderr
