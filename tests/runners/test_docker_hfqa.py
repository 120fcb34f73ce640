"""hf-qa bundles under the Docker runner: our QA program runs in the standard runner image
(top-level Dockerfile, built offline from the base image and a wheelhouse), sandboxed like any
submission, and answers byte-identically to the local hf-qa runner.

Needs a daemon; builds qashift/runner:cpu when it is missing (`bash .ci/docker.sh` builds it).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

import evaluator.qa
from evaluator.bundles import spec as bundles
from evaluator.core.errors import RunFailure
from evaluator.data.testsets import input_document
from evaluator.runners import images
from evaluator.runners.base import RunRequest, gpus_for
from evaluator.runners.docker import (
    DockerRunner,
    _readable,
    daemon_available,
    program_for,
)
from tests.conftest import write_testset
from tests.tiny_bert import subset, write_hfqa_bundle

pytestmark = pytest.mark.skipif(
    not daemon_available(), reason="no Docker daemon answers (CI starts one: bash .ci/docker.sh)")

RUNNER_TAG = images.RUNNER_TAGS[False]


@pytest.fixture(scope="module")
def runner_image(tmp_path_factory) -> str:
    """qashift/runner:cpu, built here from a fresh wheelhouse when the host lacks it."""
    if not images.image_exists(RUNNER_TAG):
        wheels = tmp_path_factory.mktemp("wheelhouse")
        images.make_wheelhouse(wheels, say=lambda _: None)
        images.build_runner(wheels, say=lambda _: None)
    return RUNNER_TAG


def hfqa_bundle(root: Path, bundle_id: str, model: Path, extra: str = "") -> Path:
    return write_hfqa_bundle(root, bundle_id, model, extra, "{timeout: 600, cpus: 2}")


def evaluate_both(tmp_path: Path, testset: str, bundle: str) -> dict[str, dict]:
    """The real console script, once per runner, each in its own workspace."""
    out = {}
    for runner in ("local", "docker"):
        env = {**os.environ, "QASHIFT_WORKSPACE": str(tmp_path / f"ws-{runner}")}
        proc = subprocess.run(["evaluate", "-b", bundle, "-t", testset, "--runner", runner,
                               "--json"], capture_output=True, text=True, env=env, timeout=900)
        assert proc.returncode == 0, proc.stderr
        [cell] = json.loads(proc.stdout)["results"]
        out[runner] = cell
    return out


@pytest.fixture
def registry(tmp_path, small_dev, monkeypatch, workspace) -> dict[str, Path]:
    subs, sets = tmp_path / "subs", tmp_path / "sets"
    subs.mkdir()
    write_testset(sets, "toy", subset(small_dev, slice(0, 2), per_paragraph=3))
    monkeypatch.setenv("QASHIFT_SUBMISSIONS", str(subs))
    monkeypatch.setenv("QASHIFT_TESTSETS", str(sets))
    return {"subs": subs, "sets": sets}


def test_an_hf_qa_bundle_answers_identically_in_the_runner_image_and_locally(
        runner_image, registry, tiny_model, tmp_path):
    hfqa_bundle(registry["subs"], "tiny-hf", tiny_model)
    cells = evaluate_both(tmp_path, "toy", "tiny-hf")
    local, docker = cells["local"], cells["docker"]
    assert docker["runner"] == "docker" and local["runner"] == "hf-qa"
    assert Path(docker["predictions"]).read_bytes() == Path(local["predictions"]).read_bytes()
    assert (docker["em"], docker["f1"], docker["n"]) == (local["em"], local["f1"], local["n"])


def test_the_runner_image_run_is_sandboxed_and_records_the_program_details(
        runner_image, tiny_model, tmp_path, small_dev, workspace):
    """The checkpoint's weights are saved 0600 (as transformers does): the unprivileged
    container user gets a readable copy; the record has the image, limits and throughput."""
    (tiny_model / "model.safetensors").chmod(0o600)
    folder = hfqa_bundle(tmp_path, "tiny-hf", tiny_model, "batch_size: 8\n")
    raw = subset(small_dev, slice(0, 1), per_paragraph=2)
    (tmp_path / "input.json").write_text(json.dumps(input_document(raw)))
    out = tmp_path / "out"
    out.mkdir()
    record = DockerRunner().run(RunRequest(bundle=bundles.from_folder(folder),
                                           input_path=tmp_path / "input.json", output_dir=out,
                                           testset_id="toy", device="auto"))
    answers = json.loads((out / "predictions.json").read_text())
    ids = {qa["id"] for a in raw["data"] for p in a["paragraphs"] for qa in p["qas"]}
    assert set(answers) == ids
    details = record.details
    assert details["image"] == RUNNER_TAG and record.image_digest
    assert details["container_limits"]["network"] == "none"
    assert details["container_limits"]["read_only_root"] is True
    assert details["container_limits"]["user"] == "65534:65534"
    assert details["batch_size"] == 8 and details["backend"] == "torch"
    assert details["questions"] == len(ids) and details["questions_per_s"] > 0
    assert record.device == "cpu"


def test_the_onnx_export_runs_in_the_runner_image_with_the_same_answers(
        runner_image, tiny_model, tiny_export, tmp_path, small_dev, workspace):
    raw = subset(small_dev, slice(1, 2), per_paragraph=2)
    (tmp_path / "input.json").write_text(json.dumps(input_document(raw)))
    answers = {}
    for backend, extra in (("torch", ""), ("onnx", "onnx: true\n")):
        folder = hfqa_bundle(tmp_path / backend, f"tiny-{backend}", tiny_model, extra)
        out = tmp_path / f"out-{backend}"
        out.mkdir()
        record = DockerRunner().run(RunRequest(
            bundle=bundles.from_folder(folder), input_path=tmp_path / "input.json",
            output_dir=out, testset_id="toy", device="cpu"))
        assert record.details["backend"] == backend
        answers[backend] = json.loads((out / "predictions.json").read_text())
    assert answers["onnx"] == answers["torch"]


def test_a_gpu_hf_qa_bundle_asks_for_the_gpu_image_and_cuda_unless_forced_to_cpu(
        tiny_model, tiny_export, tmp_path):
    bundle = bundles.from_folder(hfqa_bundle(tmp_path, "tiny-gpu", tiny_model, "onnx: true\n"))
    on_gpu, on_cpu = program_for(bundle, gpus=1), program_for(bundle, gpus=0)
    assert on_gpu.image == "qashift/runner:gpu" and on_cpu.image == RUNNER_TAG
    assert on_gpu.argv[on_gpu.argv.index("--device") + 1] == "cuda"
    assert on_cpu.argv[on_cpu.argv.index("--device") + 1] == "cpu"
    assert "--onnx" in on_gpu.argv and on_gpu.argv[:3] == ["python3", "-m", "evaluator.qa"]
    # the container sees the checkpoint and the QA program, read-only, and nothing else extra
    assert set(on_cpu.mounts) == {"/model", "/opt/qashift/evaluator/qa"}
    assert on_cpu.environment == {"PYTHONPATH": "/opt/qashift"}
    assert gpus_for(bundle.resources, "cpu") == 0 and gpus_for(bundle.resources, "gpu") == 1


def test_a_missing_runner_image_is_image_missing_with_the_build_command(
        tiny_model, tmp_path, small_dev, workspace):
    folder = hfqa_bundle(tmp_path, "tiny-hf", tiny_model,
                         "environment: {image: 'qashift/runner:nonexistent'}\n")
    (tmp_path / "input.json").write_text(json.dumps(input_document(small_dev)))
    (tmp_path / "out").mkdir()
    with pytest.raises(RunFailure) as failure:
        DockerRunner().run(RunRequest(bundle=bundles.from_folder(folder),
                                      input_path=tmp_path / "input.json",
                                      output_dir=tmp_path / "out", testset_id="toy"))
    assert failure.value.failure_class == "image-missing"
    assert "qashift images runner" in str(failure.value)


def test_only_unreadable_mounts_are_copied(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "a.txt").write_text("a")
    (shared / "a.txt").chmod(0o644)
    assert _readable(shared, tmp_path / "spare1") == shared.resolve()
    (shared / "a.txt").chmod(0o600)
    copy = _readable(shared, tmp_path / "spare2")
    assert copy == tmp_path / "spare2" and (copy / "a.txt").read_text() == "a"
    assert (copy / "a.txt").stat().st_mode & 0o777 == 0o644


def test_a_real_hf_qa_container_mounts_only_the_qa_program(runner_image, tiny_model, tmp_path,
                                                           small_dev, workspace, client):
    """Read from the daemon while the container runs: the QA program, the checkpoint, the
    input and the output, and no other host folder (none of the evaluator's other code)."""
    folder = hfqa_bundle(tmp_path, "tiny-mounts", tiny_model)
    raw = subset(small_dev, slice(0, 1), per_paragraph=2)
    (tmp_path / "input.json").write_text(json.dumps(input_document(raw)))
    out = tmp_path / "out"
    out.mkdir()
    seen: dict[str, str] = {}
    stop = threading.Event()

    def watch():
        while not stop.is_set() and not seen:
            for found in client.api.containers(  # the listing has the mounts: no inspect
                    filters={"label": "qashift.bundle=tiny-mounts"}):
                seen.update({m["Destination"]: m["Source"] for m in found.get("Mounts") or ()})
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        DockerRunner().run(RunRequest(bundles.from_folder(folder), tmp_path / "input.json",
                                      out, "toy", "cpu"))
    finally:
        stop.set()
        watcher.join()
    qa_code = Path(evaluator.qa.__file__).resolve().parent
    assert seen["/opt/qashift/evaluator/qa"] == str(qa_code)
    assert set(seen) == {"/opt/qashift/evaluator/qa", "/model", "/bundle", "/input/input.json",
                         "/output"}
    assert not any(src == str(qa_code.parent) or src.startswith(str(qa_code.parent) + "/")
                   and not src.startswith(str(qa_code)) for src in seen.values())
