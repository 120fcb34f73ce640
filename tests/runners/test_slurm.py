"""The Slurm runner on a real one-node cluster (.ci/slurm.sh starts it): a 50-cell matrix
scores exactly as the local runner does, a SIGKILLed controller resumes with every cell run
once and no job submitted twice, and Ctrl-C cancels this controller's jobs and nothing else.

Cluster tests skip, saying why, only when `sinfo` cannot reach a controller."""

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

from evaluator.runners.slurm.controller import (
    ACTIVE,
    SlurmRunner,
    cluster_available,
    failure_for_state,
    sbatch_resources,
    slurm_state,
    slurm_time,
)
from tests.conftest import SLURM, hears_ctrl_c, write_command_bundle, write_testset

pytestmark = SLURM  # one at a time, on one worker (tests/conftest.py)

# A cheap submission: answer every question with word `word` of its paragraph, after `sleep`
# seconds; optionally append its name to a ledger so that the test can count executions.
PROGRAM = """
import json, sys, time
time.sleep({sleep})
doc = json.load(open(sys.argv[1]))
if {ledger!r}:
    with open({ledger!r}, "a") as ledger:
        ledger.write({name!r} + " " + doc["data"][0]["title"] + "\\n")
json.dump({{q["id"]: " ".join(p["context"].split()[{word}:{word} + 3]) for a in doc["data"]
           for p in a["paragraphs"] for q in p["qas"]}}, open(sys.argv[2], "w"))
"""


# -- the mapping of bundle resources and Slurm states (no cluster needed) -------------------
def test_resources_map_to_sbatch_options():
    res = {"cpus": 2, "memory": "1.5g", "timeout": 600, "gpus": 2}
    assert sbatch_resources(res, 600, "auto") == [
        "--cpus-per-task=2", "--mem=1536M", "--time=0-00:15:00", "--gres=gpu:2"]
    assert "--gres=gpu:2" not in sbatch_resources(res, 600, "cpu")  # --device cpu: no GPUs
    assert sbatch_resources({"gpus": 0}, 60, "gpu")[-1] == "--gres=gpu:1"
    assert sbatch_resources({"cpus": 0.5}, 3600, "auto") == ["--cpus-per-task=1",
                                                             "--time=0-01:05:00"]
    assert slurm_time(3 * 86400) == "3-00:00:00" and slurm_time(1) == "0-00:01:00"


def test_slurm_states_map_to_failure_classes():
    assert failure_for_state("COMPLETED") is None
    assert failure_for_state(slurm_state("TIMEOUT"))[0] == "timeout"
    assert failure_for_state(slurm_state("OUT_OF_MEMORY"))[0] == "out-of-memory"
    assert failure_for_state(slurm_state("FAILED"))[0] == "nonzero-exit"
    cancelled = failure_for_state(slurm_state("CANCELLED by 1000"))
    assert cancelled[0] == "cancelled" and "cancelled" in cancelled[1]
    assert failure_for_state("NODE_FAIL")[0] == "cancelled"
    assert failure_for_state("SOMETHING_NEW")[0] == "nonzero-exit"
    assert {"PENDING", "RUNNING", "COMPLETING"} <= ACTIVE


def test_sbatch_command_carries_partition_account_and_name(tmp_path, small_dev, workspace):
    from evaluator.bundles import spec as bundles
    from evaluator.runners.base import RunRequest

    folder = write_command_bundle(tmp_path / "subs", "toy", PROGRAM.format(
        sleep=0, ledger="", name="toy", word=0), timeout=90)
    request = RunRequest(bundles.from_folder(folder), _input(tmp_path, small_dev),
                         tmp_path / "out", "toy-set", "cpu")
    runner = SlurmRunner(partition="gpu-long", account="qa-lab", shared_root=tmp_path / "sh",
                         sbatch_args=["--qos=low"])
    cell = runner.cell_dir(request)
    cell.mkdir(parents=True)
    command = runner.sbatch_command(cell, request)
    assert command[:3] == ["sbatch", "--parsable", f"--job-name=qashift-{cell.name}"]
    assert {"--partition=gpu-long", "--account=qa-lab", "--qos=low", "--mem=4096M",
            "--cpus-per-task=1", "--time=0-00:07:00"} <= set(command)
    assert runner.cell_id(request) == SlurmRunner(shared_root=tmp_path / "sh").cell_id(request)
    assert runner.cell_id(request) != SlurmRunner(shared_root=tmp_path / "x").cell_id(request)


def _input(tmp_path: Path, raw: dict) -> Path:
    from evaluator.data.testsets import input_document

    path = tmp_path / "input.json"
    path.write_text(json.dumps(input_document(raw)))
    return path


# -- a real cluster ------------------------------------------------------------------------
@pytest.fixture
def cluster():
    """Skips without a controller. The controller lists finished jobs for MinJobAge, so a run
    whose tmp folders reuse an earlier run's paths would count that run's jobs too: this
    test's jobs are those above the highest id listed now."""
    reason = cluster_available()
    if reason:
        pytest.skip(f"no Slurm cluster: {reason} (run `bash .ci/slurm.sh` as root)")
    FIRST_JOB["id"] = max((int(r[0]) for r in job_rows()), default=0) + 1


def make_matrix(root: Path, dev_raw: dict, bundles: int, sets: int, *, sleep: float = 0.0,
                ledger: Path | None = None) -> dict:
    """`bundles` toy submissions x `sets` small test sets (a few paragraphs of SQuAD dev, one
    scored adversarial-min); the environment that points evaluate at them."""
    subs, testsets = root / "subs", root / "sets"
    for i in range(sets):
        article = dev_raw["data"][i]
        raw = {"version": "1.1", "data": [{**article, "paragraphs": article["paragraphs"][:3]}]}
        write_testset(testsets, f"set-{i}", raw,
                      scorer="adversarial-min" if i == sets - 1 else "squad-v1.1")
    for i in range(bundles):
        write_command_bundle(subs, f"toy-{i}", PROGRAM.format(
            sleep=sleep, ledger=str(ledger or ""), name=f"toy-{i}", word=i), timeout=60)
    return {**os.environ, "QASHIFT_SUBMISSIONS": str(subs), "QASHIFT_TESTSETS": str(testsets),
            "QASHIFT_SLURM_INNER": os.environ.get("QASHIFT_SLURM_INNER", "local")}


def evaluate(env: dict, workspace: Path, runner: str, jobs: int = 4,
             **popen) -> subprocess.Popen:
    return subprocess.Popen(["evaluate", "-b", "all", "-t", "all", "--runner", runner, "-j",
                             str(jobs), "--json", "--workspace", str(workspace)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def finish(proc: subprocess.Popen, timeout: float = 180) -> dict:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out)


def scores(workspace: Path) -> dict[tuple[str, str], tuple]:
    with sqlite3.connect(workspace / "results.sqlite") as conn:
        rows = conn.execute("SELECT bundle, testset, n, missing, em, f1, em_lo, em_hi, f1_lo, "
                            "f1_hi, predictions_sha256 FROM results").fetchall()
    assert len(rows) == len({(r[0], r[1]) for r in rows})
    return {(r[0], r[1]): tuple(r[2:]) for r in rows}


def job_rows() -> list[list[str]]:
    """Every job the controller still lists, finished or not: id, state, name, folder."""
    out = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%i|%T|%j|%Z"],
                         capture_output=True, text=True, check=True).stdout
    return [line.split("|") for line in out.splitlines()]


FIRST_JOB = {"id": 0}


def our_jobs(shared: Path) -> list[tuple[str, str, str]]:
    """(job id, state, name) of every job of this test, finished or not, whose folder is
    under `shared`."""
    return [(i, slurm_state(s), n) for i, s, n, d in job_rows()
            if d.startswith(str(shared)) and int(i) >= FIRST_JOB["id"]]


def wait_for(condition, timeout: float = 60, step: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout} s waiting for {condition}")


def test_fifty_cell_matrix_through_slurm_scores_as_the_local_docker_runner(
        cluster, tmp_path, dev_raw, workspace):
    """Containers on the node through Slurm vs the Docker runner on this machine (the local
    subprocess runner stands in, and the test says so, only where no daemon answers)."""
    from evaluator.runners.docker import daemon_available

    inner = "docker" if daemon_available() else "local"
    env = {**make_matrix(tmp_path, dev_raw, bundles=10, sets=5), "QASHIFT_SLURM_INNER": inner}
    direct = finish(evaluate(env, tmp_path / "ws-direct", inner, jobs=2), timeout=600)
    slurm_ws = tmp_path / "ws-slurm"
    slurm = finish(evaluate(env, slurm_ws, "slurm", jobs=4), timeout=600)
    assert len(direct["results"]) == len(slurm["results"]) == 50
    assert not slurm["failed"]
    assert scores(slurm_ws) == scores(tmp_path / "ws-direct")  # same numbers, same bytes
    assert {r["runner"] for r in slurm["results"]} == {"slurm"}
    jobs = our_jobs(slurm_ws / "slurm")
    assert len(jobs) == 50 and {state for _, state, _ in jobs} == {"COMPLETED"}
    assert len({name for _, _, name in jobs}) == 50  # one job per cell
    with sqlite3.connect(slurm_ws / "results.sqlite") as conn:
        records = [json.loads(r[0]) for r in conn.execute("SELECT run_record FROM results")]
    assert {r["details"]["slurm"]["state"] for r in records} == {"COMPLETED"}
    assert {r["details"]["inner_runner"] for r in records} == {inner}
    if inner == "docker":
        assert all(r["image_digest"] for r in records)
    assert not any((slurm_ws / "slurm").iterdir())  # ingested cell folders are removed


def test_sigkill_mid_matrix_then_resume_runs_every_cell_once(cluster, tmp_path, dev_raw,
                                                             workspace):
    ledger = tmp_path / "ledger.txt"
    env = make_matrix(tmp_path, dev_raw, bundles=4, sets=3, sleep=1.0, ledger=ledger)
    finish(evaluate(env, tmp_path / "ws-local", "local", jobs=2))
    reference = scores(tmp_path / "ws-local")
    ledger.unlink()
    ws, shared = tmp_path / "ws-slurm", tmp_path / "ws-slurm" / "slurm"
    rng = random.Random(11)
    for trial in range(2):  # kill at a random moment once jobs are queued or running
        proc = evaluate(env, ws, "slurm", jobs=4)
        before = len(our_jobs(shared))
        wait_for(lambda: len(our_jobs(shared)) >= before + 2, timeout=60)  # noqa: B023
        time.sleep(rng.uniform(0.0, 1.5))
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        assert len(scores(ws)) < 12, trial  # killed mid-matrix
    resumed = finish(evaluate(env, ws, "slurm", jobs=4))
    assert len(resumed["results"]) == 12 and not resumed["failed"]
    assert scores(ws) == reference
    runs = ledger.read_text().splitlines()
    assert sorted(runs) == sorted(set(runs)) and len(runs) == 12, runs  # each cell ran once
    with sqlite3.connect(ws / "results.sqlite") as conn:
        records = [json.loads(r[0])["details"]["slurm"]
                   for r in conn.execute("SELECT run_record FROM results")]
    assert len({r["submitted_by"] for r in records}) >= 2  # jobs of killed controllers count
    jobs = our_jobs(shared)
    names = [name for _, _, name in jobs]
    assert len(names) == len(set(names)) == 12, jobs  # no cell was submitted twice
    assert not [j for j in jobs if j[1] in ACTIVE]


def test_ctrl_c_cancels_this_controllers_jobs_and_nothing_else(cluster, tmp_path, dev_raw,
                                                              workspace):
    # held: it stays queued (taking no CPU from the test's jobs) until `finally` cancels it
    unrelated = subprocess.run(["sbatch", "--parsable", "--hold", "--job-name=unrelated",
                                "--mem=64", f"--output={tmp_path}/unrelated.out", "--wrap",
                                "sleep 30"],
                               capture_output=True, text=True, check=True).stdout.strip()
    try:
        env = make_matrix(tmp_path, dev_raw, bundles=3, sets=1, sleep=60)
        ws, shared = tmp_path / "ws", tmp_path / "ws" / "slurm"
        proc = evaluate(env, ws, "slurm", jobs=3, preexec_fn=hears_ctrl_c)
        wait_for(lambda: len(our_jobs(shared)) == 3, timeout=60)
        wait_for(lambda: any(s == "RUNNING" for _, s, _ in our_jobs(shared)), timeout=60)
        for spec in shared.glob("*/spec.json"):  # what the node sees: no gold answers
            doc = json.loads((spec.parent / "input.json").read_text())
            assert all("answers" not in q for a in doc["data"] for p in a["paragraphs"]
                       for q in p["qas"])
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
        assert proc.returncode != 0
        def settled() -> set[str] | None:  # a running job is COMPLETING while its node stops it
            states = {state for _, state, _ in our_jobs(shared)}
            return None if "COMPLETING" in states else states
        assert wait_for(settled) == {"CANCELLED"}, our_jobs(shared)
        alive = subprocess.run(["squeue", "-h", "-j", unrelated, "-o", "%T"],
                               capture_output=True, text=True).stdout.split()
        assert alive and alive[0] in ("RUNNING", "PENDING")  # the unrelated job survives
        assert not list(shared.glob("*/state.json"))  # the next run submits afresh
    finally:
        subprocess.run(["scancel", unrelated], check=False)


def test_failures_keep_their_class(cluster, tmp_path, dev_raw, workspace):
    env = make_matrix(tmp_path, dev_raw, bundles=0, sets=1)
    subs = Path(env["QASHIFT_SUBMISSIONS"])
    write_command_bundle(subs, "crashes", "import sys; print('model exploded'); sys.exit(3)")
    write_command_bundle(subs, "silent", "pass")
    write_command_bundle(subs, "slow", "import time; time.sleep(60)")
    ws, shared = tmp_path / "ws", tmp_path / "ws" / "slurm"
    proc = evaluate(env, ws, "slurm", jobs=3)

    def slow_job_running():
        return [i for i, s, n in our_jobs(shared) if s == "RUNNING"
                and (shared / n.removeprefix("qashift-") / "spec.json").exists()
                and "slow" in (shared / n.removeprefix("qashift-") / "spec.json").read_text()]

    subprocess.run(["scancel", *wait_for(slow_job_running, timeout=60)], check=True)
    out, err = proc.communicate(timeout=60)
    failed = {f["bundle"]: f for f in json.loads(out)["failed"]}
    assert failed["crashes"]["failure_class"] == "nonzero-exit"
    assert "model exploded" in failed["crashes"]["message"]
    assert failed["silent"]["failure_class"] == "no-predictions"
    assert failed["slow"]["failure_class"] == "cancelled"
    assert "cancelled outside" in failed["slow"]["message"]


def test_a_restarted_controller_adopts_jobs_and_outcomes_instead_of_resubmitting(
        cluster, tmp_path, small_dev, workspace):
    from evaluator.bundles import spec as bundles
    from evaluator.runners.base import RunRequest

    ledger = tmp_path / "ledger.txt"
    folder = write_command_bundle(tmp_path / "subs", "toy", PROGRAM.format(
        sleep=0.5, ledger=str(ledger), name="toy", word=2))
    out = tmp_path / "out"
    out.mkdir()
    request = RunRequest(bundles.from_folder(folder), _input(tmp_path, small_dev), out,
                         "toy-set", "cpu")
    runner = SlurmRunner(shared_root=tmp_path / "shared", inner="local", poll_seconds=0.5)
    cell = runner.cell_dir(request)
    # a controller killed right after sbatch returned, before it recorded the job id
    runner._prepare(cell, request)
    orphan = subprocess.run(runner.sbatch_command(cell, request), capture_output=True,
                            text=True, check=True).stdout.strip()
    record = runner.run(request)
    assert record.details["slurm"]["job_id"] == orphan  # adopted by its name
    expected = json.loads(request.output_path.read_text())
    # a controller killed after ingesting, before the store committed: ingested again, no job
    request.output_path.unlink()
    state = json.loads((cell / "state.json").read_text())
    assert state["stage"] == "ingested"
    (cell / "state.json").write_text(json.dumps({**state, "ingested_by": "elsewhere:1"}))
    again = runner.run(request)
    assert again.details["slurm"]["reingested"] and again.details["slurm"]["job_id"] == orphan
    assert json.loads(request.output_path.read_text()) == expected
    # ingested by this very process: a rerun, which submits a new job
    third = runner.run(request)
    assert third.details["slurm"]["job_id"] != orphan
    assert len(ledger.read_text().splitlines()) == 2
    assert len(our_jobs(tmp_path / "shared")) == 2
