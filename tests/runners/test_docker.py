"""The Docker runner against a real daemon: hostile submissions are contained and classified,
containers never outlive their run, images are pinned, built once and recorded, and the
sliding-window baseline gives byte-identical predictions under the local and Docker runners.

Needs a daemon and qashift/python:bookworm (`bash .ci/docker.sh` provides both, offline).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from evaluator.core.errors import RunFailure
from evaluator.runners import images
from evaluator.runners.dispatch import Dispatcher
from evaluator.runners.docker import daemon_available, with_program_record
from evaluator.runners.limits import THREAD_VARIABLES
from evaluator.store.store import Store
from tests import hostile
from tests.conftest import BUSY_THEN_IDLE, REPO, hears_ctrl_c
from tests.docker_kit import HostPort, evaluate, host_addresses, needs_docker, ours, run_direct

pytestmark = needs_docker


# -- the hostile matrix -------------------------------------------------------------------------
def test_hostile_matrix_each_contained_and_classified_while_the_rest_finishes(toy, tmp_path,
                                                                              shared_data):
    subs, server = toy["subs"], HostPort()
    secrets = [str(toy["workspace"]), str(toy["sets"] / "toy" / "data.json"), str(shared_data),
               str(tmp_path), os.environ["QASHIFT_CACHE"], "/etc/ssh", "/root/.ssh"]
    hostile.matrix(subs, [[addr, server.port] for addr in host_addresses()], secrets)
    baseline_rss = _reset_peak_rss()

    start = time.perf_counter()
    doc = evaluate("-b", "all", "-t", "toy")
    elapsed = time.perf_counter() - start
    server.close()

    failed = {f["bundle"]: f for f in doc["failed"]}
    results = {r["bundle"]: r for r in doc["results"]}
    assert {b: f["failure_class"] for b, f in failed.items()} == \
        {b: c for b, c in hostile.MATRIX.items() if c}
    assert set(results) == {b for b, c in hostile.MATRIX.items() if c is None}
    assert all("\n" not in f["message"] for f in failed.values())  # one line each

    # network: every attempt failed inside, and the host's listener saw nothing
    assert "network blocked" in failed["network"]["message"]
    assert "interfaces ['lo']" in failed["network"]["message"]
    assert server.accepted == 0

    # host paths, gold answers, the store, privileges
    report = json.loads(next(iter(json.loads(Path(results["snoop"]["predictions"])
                                             .read_text()).values())))
    assert report["uid"] == 65534 and report["gid"] == 65534
    assert report["cap_eff"] == "0000000000000000" and report["no_new_privs"] == "1"
    assert report["shadow_readable"] is False
    assert not [p for p, readable in report["visible"].items() if readable]
    assert not set(secrets) & set(report["visible"])  # not even visible, let alone readable
    assert report["gold_files"] == []
    assert not [k for k in report["env"] if k.startswith(("QASHIFT", "DOCKER"))]
    virtual = {"overlay", "proc", "tmpfs", "devpts", "sysfs", "cgroup", "mqueue"}
    host_mounts = {m["at"] for m in report["mounts"] if m["type"] not in virtual}
    assert host_mounts <= {"/bundle", "/input/input.json", "/output", "/etc/hosts",
                           "/etc/hostname", "/etc/resolv.conf", "/sbin/docker-init",
                           "/usr/sbin/docker-init"}  # the init binary (init=True)
    assert {"/bundle", "/input/input.json", "/output"} <= host_mounts
    assert (report["write_root"], report["write_tmp"], report["write_bundle"],
            report["write_input"]) == (False, True, False, False)

    # 2 GiB of files into /output: killed soon after its 64 MiB limit, nothing kept
    assert "more than 64 MiB" in failed["filler"]["message"]

    # fork bomb: held at the pids limit
    bomb = re.search(r"at most (\d+) processes, (\d+) fork errors", failed["forkbomb"]["message"])
    assert bomb and int(bomb.group(1)) <= 64 and int(bomb.group(2)) > 0

    # 1 GiB of stdout: streamed through, only the tail kept, this process stayed small
    store = Store(toy["workspace"])
    [row] = store.results(bundle="flood")
    log = store.get_object(row["log_sha256"]).decode()
    assert len(log) < 70_000 and log.rstrip().endswith("flood done")
    assert json.loads(row["run_record"])["details"]["log_bytes"] >= 1 << 30
    if baseline_rss is not None:
        assert _peak_rss() - baseline_rss < 200 << 20

    # ids: missing and extra are scored and counted
    sloppy = results["sloppy_ids"]
    assert sloppy["extra"] == 3 and sloppy["missing"] == toy["n"] // 2
    assert results["well_behaved"]["missing"] == 0
    assert elapsed < 300  # generous: CI machines are shared; ~20 s when idle


def _reset_peak_rss() -> int | None:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM (Linux)
        return _peak_rss()
    except OSError:
        return None


def _peak_rss() -> int:
    status = Path("/proc/self/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) * 1024


# -- containers are always removed ----------------------------------------------------------
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_or_sigterm_during_a_run_removes_the_container(toy, client, signum, tmp_path):
    hostile.bundle(toy["subs"], "sleeper", resources={"timeout": 120})
    proc = subprocess.Popen(["evaluate", "-b", "sleeper", "-t", "toy", "--runner", "docker"],
                            env=os.environ.copy(), preexec_fn=hears_ctrl_c,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not [c for c in ours(client, tmp_path) if c.status == "running"]:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    proc.send_signal(signum)
    try:
        proc.communicate(timeout=60)  # seconds when idle; a loaded daemon can be slow
    finally:
        proc.kill()
    assert proc.returncode != 0
    assert ours(client, tmp_path) == []


def test_a_timed_out_container_is_gone_and_the_failure_is_stored(toy, client, tmp_path):
    hostile.bundle(toy["subs"], "sleeper", resources={"timeout": 2})
    doc = evaluate("-b", "sleeper", "-t", "toy")
    assert [f["failure_class"] for f in doc["failed"]] == ["timeout"]
    assert ours(client, tmp_path) == []
    store = Store(toy["workspace"])
    [failure] = store.failures()
    assert failure["failure_class"] == "timeout" and failure["runner"] == "docker"
    assert "sleeping" in store.get_object(failure["log_sha256"]).decode()


def test_controllers_reaping_orphans_at_once_each_carry_on(client):
    """Several controllers start together (a Slurm array): each reaps the containers of dead
    controllers while the others remove the same ones; none may fail on a container that
    vanished between listing and removing, and every orphan ends up gone."""
    import socket
    import threading

    import docker as docker_sdk

    from evaluator.runners.docker import LABEL, reap_orphans

    finished = subprocess.Popen(["true"])
    finished.wait()
    dead_owner = f"{socket.gethostname()}:{finished.pid}"
    created = [client.containers.create(images.PYTHON_TAG, ["true"], labels={
        LABEL: "1", "qashift.owner": dead_owner}, name=f"orphan-{i}-{os.getpid()}").name
        for i in range(40)]
    removed, errors = [], []

    def reaper():
        own = docker_sdk.from_env(timeout=60)
        try:
            removed.extend(reap_orphans(own))
        except Exception as exc:  # noqa: BLE001 - the assertion below names it
            errors.append(repr(exc))
        finally:
            own.close()

    def other_controller():  # removes the same containers, oldest first
        own = docker_sdk.from_env(timeout=60)
        for name in created:
            try:
                own.api.remove_container(name, force=True)
            except docker_sdk.errors.APIError:  # gone, or being removed by a reaper
                pass
        own.close()

    threads = [threading.Thread(target=other_controller),
               *(threading.Thread(target=reaper) for _ in range(3))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    left = {name.lstrip("/")  # one listing, no inspect: other tests' containers come and go
            for found in client.api.containers(all=True, filters={"label": LABEL})
            for name in found.get("Names") or ()}
    assert not set(created) & left


# -- images: pinned, resolved, built once, missing ------------------------------------------
def test_an_unpinned_name_and_a_bare_id_resolve_to_the_same_recorded_image(tmp_path, small_dev,
                                                                           client, workspace):
    image_id = client.images.get(images.PYTHON_TAG).id
    by_name = hostile.bundle(tmp_path / "a", "well_behaved",
                             environment={"image": images.PYTHON_TAG})
    by_id = hostile.bundle(tmp_path / "b", "well_behaved", environment={"image": image_id})
    (rec_name, out_name), (rec_id, out_id) = (run_direct(by_name, tmp_path, small_dev),
                                              run_direct(by_id, tmp_path, small_dev))
    assert rec_name.image_digest == rec_id.image_digest == image_id
    assert rec_name.details["image"] == images.PYTHON_TAG
    assert (out_name / "predictions.json").read_bytes() == (out_id / "predictions.json"
                                                            ).read_bytes()
    assert rec_name.exit_code == 0 and rec_name.runner == "docker" and rec_name.device == "cpu"
    assert rec_name.details["container_limits"]["network"] == "none"
    assert rec_name.peak_memory_bytes and rec_name.peak_memory_bytes < 4 << 30


def test_a_container_gone_before_its_first_sample_still_has_its_peak_memory(
        tmp_path, small_dev, client, monkeypatch):
    """A container's own cgroup goes with it, so a run that ends before it is first sampled
    would have no peak; its parent cgroup keeps the high-water mark and is removed after."""
    from evaluator.runners.docker import watch
    if watch.memory_parent(client, "probe") is None:
        pytest.skip("the daemon's cgroup driver is not cgroupfs, or no cgroup tree here")
    monkeypatch.setattr(watch.ContainerWatch, "start", lambda self: None)
    parents, parent_of = [], watch.memory_parent
    monkeypatch.setattr(watch, "memory_parent",
                        lambda client, name: parents.append(parent_of(client, name))
                        or parents[-1])
    record, out = run_direct(hostile.bundle(tmp_path, "well_behaved"), tmp_path, small_dev)
    assert record.exit_code == 0 and (out / "predictions.json").exists()
    assert record.peak_memory_bytes and 1 << 20 < record.peak_memory_bytes < 4 << 30
    assert parents[0] and watch.cgroup_folders(parents[0].lstrip("/")) == []


def test_a_container_run_records_the_cpu_seconds_its_cgroup_used(tmp_path, small_dev, client):
    """The parent cgroup outlives the container, so its CPU time is read once it has
    exited: a busy second counts, an idle one does not."""
    from evaluator.runners.docker import watch
    if watch.memory_parent(client, "probe") is None:
        pytest.skip("the daemon's cgroup driver is not cgroupfs, or no cgroup tree here")
    folder = tmp_path / "busy"
    folder.mkdir()
    (folder / "program.py").write_text(BUSY_THEN_IDLE)
    (folder / "bundle.yaml").write_text(json.dumps({
        "id": "busy", "name": "busy", "kind": "command", "resources": {"timeout": 60},
        "command": "python3 program.py {input} {output}"}))
    record, out = run_direct(folder, tmp_path, small_dev)
    assert record.exit_code == 0 and (out / "predictions.json").exists()
    assert 1.0 <= record.cpu_s < record.wall_s - 0.5


THREADS = """import json, os, sys
doc = json.load(open(sys.argv[1]))
seen = ",".join(os.environ.get(n, "-") for n in ("OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                                 "OPENBLAS_NUM_THREADS", "OMP_WAIT_POLICY"))
json.dump({q["id"]: seen for a in doc["data"] for p in a["paragraphs"] for q in p["qas"]},
          open(sys.argv[2], "w"))
"""  # answers every question with the thread settings the program sees


@pytest.mark.parametrize("cpus, operator, seen", [
    (1, {}, "1,1,1,-"), (2, {}, "2,2,2,-"),
    (1, {"OMP_NUM_THREADS": "4", "OMP_WAIT_POLICY": "PASSIVE"}, "4,1,1,PASSIVE")],
    ids=["one-cpu", "two-cpus", "operator"])
def test_a_container_starts_a_thread_per_cpu_it_is_granted_unless_the_operator_says(
        tmp_path, small_dev, client, monkeypatch, cpus, operator, seen):
    """A container held to one CPU's time but seeing every core of the host would start a
    numeric thread per core, each spinning while it waits for the others' time slices."""
    for name in THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in operator.items():
        monkeypatch.setenv(name, value)
    folder = tmp_path / "threads"
    folder.mkdir()
    (folder / "program.py").write_text(THREADS)
    (folder / "bundle.yaml").write_text(json.dumps({
        "id": "threads", "name": "threads", "kind": "command",
        "resources": {"timeout": 60, "cpus": cpus},
        "command": "python3 program.py {input} {output}"}))
    record, out = run_direct(folder, tmp_path, small_dev)
    assert record.exit_code == 0
    assert set(json.loads((out / "predictions.json").read_text()).values()) == {seen}


def test_the_reaper_removes_the_parent_cgroup_a_removed_container_left(client):
    """A watchdog removes a container whose controller died, but not its parent cgroup; the
    next reap does, and leaves a live container's parent alone."""
    from evaluator.runners.docker import reap_orphans, watch
    if watch.memory_parent(client, "probe") is None:
        pytest.skip("the daemon's cgroup driver is not cgroupfs, or no cgroup tree here")
    gone, live = (f"qashift-reap-{tag}-{os.getpid()}" for tag in ("gone", "live"))
    client.containers.run(images.PYTHON_TAG, ["true"], name=gone, cgroup_parent=f"/{gone}",
                          remove=True)
    held = client.containers.run(images.PYTHON_TAG, ["sleep", "30"], name=live, detach=True,
                                 cgroup_parent=f"/{live}", labels={"qashift": "1"})
    try:
        assert watch.cgroup_folders(gone) and watch.cgroup_folders(live)
        reap_orphans(client)
        assert watch.cgroup_folders(gone) == []
        assert watch.cgroup_folders(live)
    finally:
        held.remove(force=True)
        watch.remove_cgroup(live)


def test_a_missing_image_is_image_missing_in_one_line(toy):
    hostile.bundle(toy["subs"], "well_behaved", environment={
        "image": "qashift/no-such-image@sha256:" + "0" * 64})
    hostile.bundle(toy["subs"], "well_behaved", bundle_id="bare",
                   environment={"image": "sha256:" + "1" * 64})
    doc = evaluate("-b", "all", "-t", "toy")
    assert {f["bundle"]: f["failure_class"] for f in doc["failed"]} == {
        "well_behaved": "image-missing", "bare": "image-missing"}
    assert all("\n" not in f["message"] for f in doc["failed"])


def test_a_dockerfile_is_built_once_per_content_and_a_broken_one_is_build_failed(
        tmp_path, small_dev, client, workspace):
    folder = hostile.bundle(tmp_path, "well_behaved", environment={"build": "Dockerfile"})
    (folder / "Dockerfile").write_text(f"FROM {images.PYTHON_TAG}\n"
                                       "RUN echo built-in-image > /built.txt\n")
    spec = json.loads((folder / "bundle.yaml").read_text())
    spec["command"] = "grep -q built-in-image /built.txt && " + spec["command"]
    (folder / "bundle.yaml").write_text(json.dumps(spec))
    built = []
    try:
        first, _ = run_direct(folder, tmp_path, small_dev)
        second, _ = run_direct(folder, tmp_path, small_dev)
        built.append(first.image_digest)
        assert first.image_digest == second.image_digest
        tag = first.details["image"]
        assert tag.startswith("qashift-bundle/well_behaved:")
        assert client.images.get(tag).id == first.image_digest

        (folder / "program.py").write_text((folder / "program.py").read_text() + "\n# v2\n")
        third, _ = run_direct(folder, tmp_path, small_dev)
        built.append(third.image_digest)
        assert third.details["image"] != tag  # new content, new image

        (folder / "Dockerfile").write_text(f"FROM {images.PYTHON_TAG}\nRUN exit 7\n")
        with pytest.raises(RunFailure) as failure:
            run_direct(folder, tmp_path, small_dev)
        assert failure.value.failure_class == "build-failed"
        assert "\n" not in str(failure.value)
    finally:
        for image in client.images.list(filters={"label": "qashift.bundle=well_behaved"}):
            client.images.remove(image.id, force=True)


# -- GPU ------------------------------------------------------------------------------------
def test_device_cpu_runs_a_gpu_bundle_on_cpu_and_auto_asks_for_the_gpu(tmp_path, small_dev,
                                                                       client, workspace):
    folder = hostile.bundle(tmp_path, "well_behaved", resources={"gpus": 1})
    record, out = run_direct(folder, tmp_path, small_dev, device="cpu")
    assert record.device == "cpu" and record.details["gpus"] == 0
    assert (out / "predictions.json").is_file()
    if "nvidia" in (client.info().get("Runtimes") or {}) or Path("/dev/nvidia0").exists():
        record, _ = run_direct(folder, tmp_path, small_dev, device="auto")
        assert record.device == "gpu" and record.details.get("gpu_models")
    else:
        with pytest.raises(RunFailure) as failure:
            run_direct(folder, tmp_path, small_dev, device="auto")
        assert failure.value.failure_class == "no-gpu" and "--device cpu" in str(failure.value)


def test_a_missing_cuda_kernel_is_recognised_with_advice_to_use_the_cpu(tmp_path, small_dev,
                                                                         workspace):
    folder = hostile.bundle(tmp_path, "no_gpu_kernel")
    with pytest.raises(RunFailure) as failure:
        run_direct(folder, tmp_path, small_dev)
    assert failure.value.failure_class == "no-gpu-kernel"
    assert "retry with --device cpu" in str(failure.value)


# -- the daemon check and the images CLI ----------------------------------------------------
def test_daemon_check_is_quick_and_auto_picks_docker(monkeypatch):
    assert Dispatcher("auto").name == "docker"
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    start = time.perf_counter()
    assert daemon_available() is False
    assert time.perf_counter() - start < 3
    assert Dispatcher("auto").name == "local"


def test_images_commands_skip_existing_tags():
    from evaluator.cli.images import images_group

    for command, tag in (("base", images.BASE_TAG), ("python", images.PYTHON_TAG)):
        result = CliRunner().invoke(images_group, [command])
        assert result.exit_code == 0, result.output
        assert "not rebuilding" in result.output and tag in result.output


# -- the sliding-window baseline under both runners -----------------------------------------
SLIDING = REPO / "submissions" / "sliding-window"


def _both_runners(testset: str, data_dir: Path, tmp_path: Path) -> dict[str, tuple[bytes, dict]]:
    """The real sliding-window bundle (a verbatim copy, so its containers are ours to check)
    evaluated by the real console script under each runner, each in its own workspace."""
    subs = tmp_path / "sliding-subs"
    if not subs.exists():
        shutil.copytree(SLIDING, subs / SLIDING.name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    out = {}
    for runner in ("local", "docker"):
        env = {**os.environ, "QASHIFT_WORKSPACE": str(tmp_path / runner),
               "QASHIFT_SUBMISSIONS": str(subs)}
        proc = subprocess.run(["evaluate", "-b", "sliding-window", "-t", testset, "--runner",
                               runner, "--data-dir", str(data_dir), "--json"],
                              capture_output=True, text=True, env=env, timeout=900)
        assert proc.returncode == 0, proc.stderr
        [cell] = json.loads(proc.stdout)["results"]
        assert cell["runner"] == runner
        out[runner] = (Path(cell["predictions"]).read_bytes(), cell)
    return out


@pytest.mark.skipif(not (SLIDING / "sliding_window.py").is_file(), reason="bundle not written")
def test_sliding_window_is_byte_identical_under_both_runners_on_a_toy_set(toy, tmp_path,
                                                                          shared_data):
    out = _both_runners("toy", shared_data, tmp_path)
    assert out["local"][0] == out["docker"][0]
    assert out["local"][1]["f1"] == out["docker"][1]["f1"]


@pytest.mark.slow
@pytest.mark.skipif(not (SLIDING / "sliding_window.py").is_file(), reason="bundle not written")
def test_sliding_window_is_byte_identical_under_both_runners_on_squad_dev(tmp_path, workspace,
                                                                          shared_data,
                                                                          monkeypatch):
    monkeypatch.delenv("QASHIFT_TESTSETS", raising=False)
    out = _both_runners("squad-dev", shared_data, tmp_path)
    assert out["local"][0] == out["docker"][0]
    assert (out["local"][1]["em"], out["local"][1]["f1"]) == (out["docker"][1]["em"],
                                                              out["docker"][1]["f1"])
    assert out["docker"][1]["n"] == 10570


def test_a_program_record_adds_details_but_replaces_none_the_controller_measured(tmp_path):
    """hf-qa and generative bundles may name the image their QA program runs in, so its
    record.json is the bundle's word: it cannot rewrite the image or the container limits."""
    record = tmp_path / "record.json"
    record.write_text(json.dumps({"batch_size": 32, "image": "honest/image:1",
                                  "container_limits": {"network": "bridge"}}))
    measured = {"image": "attacker/gen:1", "container_limits": {"network": "none"}}
    assert with_program_record(measured, record) == {
        "batch_size": 32, "image": "attacker/gen:1", "container_limits": {"network": "none"}}
    record.write_text("[1, 2]")  # not an object: nothing of it is kept
    assert with_program_record(measured, record) == measured
