"""Every hostile bundle of tests/hostile/, uploaded to a real server as a stranger would and
run by a Docker worker, is contained and classified as `evaluate` does it from the command
line (tests/runners/test_docker.py's matrix): the same failure classes, the same results,
nothing reached on the host."""

from __future__ import annotations

import json
import os
import signal

import pytest

from evaluator.service.client import Client
from tests import hostile
from tests.docker_kit import HostPort, host_addresses, needs_docker
from tests.service.test_hidden import admin_token
from tests.service.test_service import DEADLINE_S, start_server, worker

pytestmark = [pytest.mark.slow, *needs_docker]

@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
def test_every_hostile_bundle_uploaded_over_http_is_contained_as_from_the_command_line(
        database, toy, tmp_path, shared_data):
    url, token = database
    organiser = admin_token()
    mine, listener = tmp_path / "mine", HostPort()
    secrets = [str(toy["workspace"]), str(toy["sets"] / "toy" / "data.json"), str(shared_data),
               str(tmp_path), os.environ["QASHIFT_CACHE"], "/etc/ssh", "/root/.ssh"]
    hostile.matrix(mine, [[addr, listener.port] for addr in host_addresses()], secrets)
    proc, base = start_server(url)
    try:
        client = Client(base, token)
        submissions = {}
        for name in hostile.MATRIX:
            sent = client.upload(mine / name)
            submissions[name] = client.submit(sent["bundle"], ["toy"],
                                              upload=sent["upload"])["submission"]
        ran = worker("--exit-when-idle", runner="docker")
        out, _ = ran.communicate(timeout=DEADLINE_S * 10)
        assert ran.returncode == 0, out
        jobs = {name: client.submission(s)["jobs"][0] for name, s in submissions.items()}
        snooped = Client(base, organiser).samples(jobs["snoop"]["id"])[0]["prediction"]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        listener.close()
    assert {n: j["failure_class"] for n, j in jobs.items()} == hostile.MATRIX
    assert all(j["state"] == ("failed" if hostile.MATRIX[n] else "finished")
               for n, j in jobs.items())
    assert all("\n" not in j["message"] for j in jobs.values() if j["message"])
    assert listener.accepted == 0 and "network blocked" in jobs["network"]["message"]
    report = json.loads(snooped)
    assert report["uid"] == 65534 and report["cap_eff"] == "0000000000000000"
    assert not [p for p, readable in report["visible"].items() if readable]
    assert report["gold_files"] == [] and report["shadow_readable"] is False
    assert not [k for k in report["env"] if k.startswith(("QASHIFT", "DOCKER"))]
    assert jobs["sloppy_ids"]["result"]["extra"] == 3
    assert jobs["sloppy_ids"]["result"]["missing"] == toy["n"] // 2
