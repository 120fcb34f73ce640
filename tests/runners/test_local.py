"""The local runner's device: a run given no GPU sees none, and a run that must have one
fails as no-gpu on a host without, as under Docker and Slurm. Of the controller's
environment a run sees only the operator's thread settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaluator.bundles import spec as bundles
from evaluator.core.errors import RunFailure
from evaluator.data.testsets import input_document
from evaluator.runners import local
from evaluator.runners.base import RunRequest
from tests.conftest import write_command_bundle

SEES = """import json, os, sys
doc = json.load(open(sys.argv[1]))
seen = os.environ.get("CUDA_VISIBLE_DEVICES", "unset")
if "QASHIFT_SECRET" in os.environ or not os.environ.get("OMP_NUM_THREADS"):
    seen = "saw " + repr({k: v for k, v in os.environ.items() if k.startswith(("QA", "OMP"))})
json.dump({q["id"]: seen for a in doc["data"] for p in a["paragraphs"] for q in p["qas"]},
          open(sys.argv[2], "w"))
"""


def run(tmp_path: Path, raw: dict, device: str, gpus: int = 0) -> tuple[dict, str]:
    folder = write_command_bundle(tmp_path / "subs", f"sees-{device}-{gpus}", SEES)
    if gpus:
        text = (folder / "bundle.yaml").read_text().replace("resources: {", f"resources: "
                                                            f"{{gpus: {gpus}, ")
        (folder / "bundle.yaml").write_text(text)
    inp, out = tmp_path / f"input-{device}.json", tmp_path / f"out-{device}-{gpus}"
    inp.write_text(json.dumps(input_document(raw)))
    out.mkdir()
    record = local.LocalRunner().run(RunRequest(bundles.from_folder(folder), inp, out, "toy",
                                                device))
    return json.loads((out / "predictions.json").read_text()), record.device


@pytest.mark.parametrize("device", ["cpu", "auto"])
def test_a_run_given_no_gpu_sees_none(tmp_path, small_dev, monkeypatch, device):
    """(Nor the controller's other variables, but its thread settings: SEES says otherwise.)"""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # the controller's, not the run's
    monkeypatch.setenv("QASHIFT_SECRET", "x")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    answers, recorded = run(tmp_path, small_dev, device)
    assert set(answers.values()) == {""} and recorded == "cpu"


@pytest.mark.parametrize("device, gpus", [("gpu", 0), ("auto", 1)])
def test_a_run_that_must_have_a_gpu_fails_as_no_gpu_on_a_host_without_one(
        tmp_path, small_dev, monkeypatch, device, gpus):
    monkeypatch.setattr(local, "NVIDIA_DRIVER", tmp_path / "no-driver")
    monkeypatch.setattr(local, "NVIDIA_SMI", None)
    with pytest.raises(RunFailure, match=r"asks for 1 GPU\(s\) but this host shows none") as no:
        run(tmp_path, small_dev, device, gpus)
    assert no.value.failure_class == "no-gpu"


def test_a_run_given_a_gpu_sees_the_controllers_and_is_recorded_so(tmp_path, small_dev,
                                                                   monkeypatch):
    driver = tmp_path / "version"
    driver.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15\n")
    monkeypatch.setattr(local, "NVIDIA_DRIVER", driver)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    answers, recorded = run(tmp_path, small_dev, "gpu")
    assert set(answers.values()) == {"1"} and recorded == "gpu"
