"""Against a real Docker daemon: image builds get no network, containers run under the
operator's policy, and a container never outlives its limit, even when its controller is
killed with SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time

from evaluator.core.files import remove_stale_tempdirs
from evaluator.store.store import Store
from tests import hostile
from tests.docker_kit import HostPort, evaluate, host_addresses, needs_docker, ours

pytestmark = needs_docker

PROBE = """import json, socket, sys
targets = json.load(open("targets.json"))
for host in targets["hosts"]:
    try:
        socket.create_connection((host, targets["port"]), timeout=2).close()
        print("connected to", host)
    except OSError as exc:
        print("no connection to", host, exc)
"""


def test_a_build_step_reaches_no_network(toy, tmp_path):
    port = HostPort()
    try:
        folder = toy["subs"] / "builder"
        hostile.bundle(toy["subs"], "well_behaved", bundle_id="builder",
                       environment={"build": "Dockerfile"},
                       targets={"hosts": host_addresses(), "port": port.port})
        (folder / "probe.py").write_text(PROBE)
        (folder / "Dockerfile").write_text("FROM qashift/python:bookworm\nCOPY . /ctx\n"
                                           "RUN cd /ctx && python3 probe.py\n")
        doc = evaluate("-b", "builder", "-t", "toy")
        time.sleep(0.5)
        assert port.accepted == 0  # no RUN step connected to the host
        assert [r["bundle"] for r in doc["results"]] == ["builder"]  # the build itself works
    finally:
        port.close()


def test_containers_run_as_the_policy_says(toy, tmp_path):
    hostile.bundle(toy["subs"], "well_behaved", resources={"timeout": 30, "memory": "256m"})
    doc = evaluate("-b", "well_behaved", "-t", "toy")
    assert [r["bundle"] for r in doc["results"]] == ["well_behaved"]
    [row] = Store(toy["workspace"]).results()
    limits = json.loads(row["run_record"])["details"]["container_limits"]
    assert limits == {"memory": 256 << 20, "cpus": 1.0, "cpuset": None, "pids": 512,
                      "network": "none", "read_only_root": True, "user": "65534:65534"}


def test_a_killed_controller_leaves_no_container_past_its_limit(toy, client, tmp_path,
                                                                monkeypatch):
    hostile.bundle(toy["subs"], "sleeper", resources={"timeout": 20})
    # its own temporary folder: another controller starting meanwhile (a parallel test)
    # would otherwise clear the killed one's run folders before they are looked at
    private = tmp_path / "tmp"
    private.mkdir()
    monkeypatch.setenv("TMPDIR", str(private))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    proc = subprocess.Popen(["evaluate", "-b", "sleeper", "-t", "toy", "--runner", "docker"],
                            env=os.environ.copy(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 60
    while not [c for c in ours(client, tmp_path) if c.status == "running"]:
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    started = time.monotonic()
    cell_dirs = list(private.glob(f"qashift-*-{proc.pid}-*"))
    assert cell_dirs  # the controller's run folders exist while it runs
    os.killpg(proc.pid, signal.SIGKILL)  # no finally, no signal handler runs
    proc.wait()
    while ours(client, tmp_path):
        assert time.monotonic() - started < 20, "the container outlived its controller"
        time.sleep(0.5)
    # the next start removes what the killed controller left in /tmp
    assert any(d.exists() for d in cell_dirs)
    remove_stale_tempdirs()
    assert not any(d.exists() for d in cell_dirs)


def test_a_container_is_removed_at_its_deadline_even_with_a_live_controller(toy, client,
                                                                           tmp_path):
    from evaluator.runners.watchdog import watch

    container = client.containers.run("qashift/python:bookworm", ["sleep", "600"],
                                      detach=True, labels={"qashift": "1",
                                                           "qashift.folder": str(tmp_path)})
    started = time.monotonic()
    assert watch(container.id, time.time() + 2, f"{os.uname().nodename}:{os.getpid()}") == \
        "deadline"
    assert 1.5 < time.monotonic() - started < 15
    assert ours(client, tmp_path) == []


ANSWER_BY_HELPER = """import json, sys
import helper
doc = json.load(open(sys.argv[1]))
json.dump({q["id"]: helper.answer(p["context"]) for a in doc["data"] for p in a["paragraphs"]
           for q in p["qas"]}, open(sys.argv[2], "w"))
"""


def test_byte_code_a_bundle_ships_is_neither_run_nor_built_into_its_image(toy, tmp_path,
                                                                           client):
    """A `__pycache__` is not part of a bundle's digest, so a container never reads one: a
    cache compiled (unchecked) from other code than the reviewed helper.py would run it."""
    import py_compile

    answers = {}
    for bundle_id, environment in (("cached", None), ("built", {"build": "Dockerfile"})):
        folder = hostile.bundle(toy["subs"], "well_behaved", bundle_id=bundle_id,
                                environment=environment)
        (folder / "program.py").write_text(ANSWER_BY_HELPER)
        (folder / "helper.py").write_text("def answer(context):\n    return 'reviewed'\n")
        other = tmp_path / f"{bundle_id}-other.py"
        other.write_text("def answer(context):\n    return 'hidden'\n")
        py_compile.compile(str(other), cfile=str(folder / "__pycache__" /
                                                 "helper.cpython-311.pyc"),
                           invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
        if environment:  # the context's modes are a checkout's, its executable bits kept
            (folder / "program.py").chmod(0o755)
            (folder / "Dockerfile").write_text(
                "FROM qashift/python:bookworm\nCOPY . /ctx\nRUN test ! -e /ctx/__pycache__ "
                "&& test $(stat -c %a /ctx/program.py) = 755 "
                "&& test $(stat -c %a /ctx/helper.py) = 644\n")
        try:
            doc = evaluate("-b", bundle_id, "-t", "toy")
        finally:  # an image kept would be found by its digest next time, never rebuilt
            for image in client.images.list(filters={"label": f"qashift.bundle={bundle_id}"}):
                client.images.remove(image.id, force=True)
        assert doc["failed"] == []
        answers[bundle_id] = set(json.loads(open(doc["results"][0]["predictions"]).read())
                                 .values())
    assert answers == {"cached": {"reviewed"}, "built": {"reviewed"}}
