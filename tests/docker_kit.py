"""What the Docker tests share: a daemon check, the standard image, a small registry, the
hostile-port listener, and the rule that no test leaves a container behind."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import NamedTuple

import pytest
from click.testing import CliRunner

from evaluator.bundles import spec as bundles
from evaluator.cli.main import evaluate_cmd
from evaluator.data.testsets import input_document
from evaluator.runners import images
from evaluator.runners.base import RunRequest
from evaluator.runners.docker import LABEL, DockerRunner, daemon_available
from tests.conftest import write_testset

needs_docker = [
    pytest.mark.skipif(not daemon_available(),
                       reason="no Docker daemon answers (CI starts one: bash .ci/docker.sh)"),
    pytest.mark.usefixtures("no_container_left_behind"),
]  # `pytestmark = needs_docker` in a module that runs containers


@pytest.fixture(scope="module")
def client():
    import docker

    client = docker.from_env()
    if not images.image_exists(images.PYTHON_TAG, client):  # normally built by .ci/docker.sh
        images.build_python(say=lambda _: None)
    yield client
    client.close()


class Listed(NamedTuple):
    name: str
    status: str


def ours(client, tmp_path: Path) -> list[Listed]:
    """Containers of this test's bundles (all live under tmp_path), running or not; other
    sessions' containers on a shared daemon are not ours to judge. One listing call, no
    inspect per container: a container removed between the two is not an error."""
    root = str(tmp_path.resolve())
    return [Listed(c["Names"][0].lstrip("/"), c["State"])
            for c in client.api.containers(all=True, filters={"label": f"{LABEL}=1"})
            if (c.get("Labels") or {}).get("qashift.folder", "").startswith(root)]


@pytest.fixture
def no_container_left_behind(client, tmp_path):
    yield
    left = ours(client, tmp_path)
    assert not left, f"containers left behind: {[c.name for c in left]}"


@pytest.fixture
def toy(tmp_path, small_dev, monkeypatch, workspace):
    """A registry with one small real test set ('toy', 2 SQuAD dev articles), no bundles yet."""
    subs, sets = tmp_path / "subs", tmp_path / "sets"
    subs.mkdir()
    write_testset(sets, "toy", small_dev)
    monkeypatch.setenv("QASHIFT_SUBMISSIONS", str(subs))
    monkeypatch.setenv("QASHIFT_TESTSETS", str(sets))
    return {"subs": subs, "sets": sets, "workspace": workspace,
            "n": sum(len(p["qas"]) for a in small_dev["data"] for p in a["paragraphs"])}


def evaluate(*args: str) -> dict:
    result = CliRunner().invoke(evaluate_cmd, [*args, "--runner", "docker", "--json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return json.loads(result.stdout)


def run_direct(folder: Path, tmp_path: Path, raw: dict, device: str = "auto"):
    """DockerRunner.run on one bundle folder, as the pipeline calls it (no store, no scoring)."""
    inp, out = tmp_path / "in", tmp_path / f"out-{folder.name}-{time.monotonic_ns()}"
    inp.mkdir(exist_ok=True)
    out.mkdir()
    (inp / "input.json").write_text(json.dumps(input_document(raw)))
    bundle = bundles.from_folder(folder)
    return DockerRunner().run(RunRequest(bundle, inp / "input.json", out, "toy", device)), out


class HostPort:
    """A TCP listener on every host address that counts the connections it accepts."""

    def __init__(self):
        self.sock = socket.create_server(("0.0.0.0", 0))
        self.sock.settimeout(0.2)
        self.port, self.accepted, self._stop = self.sock.getsockname()[1], 0, False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
                self.accepted += 1
                conn.close()
            except OSError:
                pass

    def close(self):
        self._stop = True
        self._thread.join()
        self.sock.close()


def host_addresses() -> list[str]:
    out = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    return sorted({"172.17.0.1", "127.0.0.1", *out})


