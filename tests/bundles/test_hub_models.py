"""hf-qa bundles may name a Hugging Face id, resolved offline from the local hub cache, and
`--model-args` overrides their run settings as a cell of its own."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from click.testing import CliRunner

from evaluator.bundles import spec as bundles
from evaluator.cli.main import main
from evaluator.core.hashing import sha256_of
from evaluator.runners.docker import MODEL_MOUNT, program_for
from tests.conftest import REPO, write_testset
from tests.tiny_bert import subset

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def hub_cache(root, checkpoint, hub_id="acme/tiny-qa"):
    """A hub cache laid out as `huggingface-cli download` leaves it: blobs by hash, a
    snapshot of links into them, refs/main naming the snapshot."""
    repo = root / ("models--" + hub_id.replace("/", "--"))
    snapshot = repo / "snapshots" / COMMIT
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for f in sorted(checkpoint.iterdir()):
        if f.is_file():
            blob = repo / "blobs" / sha256_of(f)
            shutil.copyfile(f, blob)
            (snapshot / f.name).symlink_to(os.path.relpath(blob, snapshot))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    return root


@pytest.fixture
def hub(tmp_path, monkeypatch, workspace, tiny_model, dev_raw):
    cache = hub_cache(tmp_path / "hf", tiny_model)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    subs, sets = tmp_path / "subs", tmp_path / "sets"
    for name, model in (("hub-qa", "{hub: acme/tiny-qa}"),
                        ("hub-missing", "{hub: acme/not-downloaded, revision: v2}")):
        (subs / name).mkdir(parents=True)
        (subs / name / "bundle.yaml").write_text(
            f"id: {name}\nname: {name}\nkind: hf-qa\nmodel: {model}\n"
            f"resources: {{timeout: 300}}\nqa: {{max_seq_len: 128, doc_stride: 32}}\n")
    shutil.copytree(REPO / "submissions" / "sliding-window", subs / "sliding-window")
    write_testset(sets, "tiny", subset(dev_raw, slice(0, 1)))
    monkeypatch.setenv("QASHIFT_SUBMISSIONS", str(subs))
    monkeypatch.setenv("QASHIFT_TESTSETS", str(sets))
    return cache


def evaluate(*args):
    result = CliRunner().invoke(main, ["evaluate", "-t", "tiny", "--runner", "local", "--json",
                                       *args])
    return result, (json.loads(result.stdout) if result.stdout.startswith("{") else None)


def test_a_hub_id_runs_from_the_local_cache_and_its_weights_enter_the_key(hub):
    result, doc = evaluate("-b", "hub-qa")
    assert result.exit_code == 0, result.output
    [cell] = doc["results"]
    assert cell["n"] > 0 and not cell["cached"]
    first = bundles.get("hub-qa").digest
    blob = next((hub / "models--acme--tiny-qa" / "blobs").iterdir())
    blob.write_bytes(blob.read_bytes() + b" ")  # the checkpoint changed in the cache
    assert bundles.get("hub-qa").digest != first


def test_a_hub_id_not_in_the_cache_says_how_to_get_it(hub):
    result, _ = evaluate("-b", "hub-missing")
    assert result.exit_code == 1
    assert "acme/not-downloaded (v2) is not in the local Hugging Face cache" in result.stderr
    assert "huggingface-cli download acme/not-downloaded" in result.stderr


def test_docker_mounts_the_hub_repository_and_points_into_its_snapshot(hub):
    program = program_for(bundles.get("hub-qa"), gpus=0)
    assert program.mounts[MODEL_MOUNT] == hub / "models--acme--tiny-qa"
    assert f"{MODEL_MOUNT}/snapshots/{COMMIT}" in program.argv


@pytest.mark.slow
def test_model_args_are_a_cell_of_their_own_and_checked(hub):
    _, default = evaluate("-b", "hub-qa")
    _, small = evaluate("-b", "hub-qa", "--model-args", "batch_size=2,max_seq_len=96")
    assert small["results"][0]["key"] != default["results"][0]["key"]
    _, again = evaluate("-b", "hub-qa", "--model-args", "max_seq_len=96,batch_size=2")
    assert again["results"][0]["cached"] and again["results"][0]["key"] == \
        small["results"][0]["key"]
    for bad, message in (("batch=2", "unknown key 'batch'"),
                         ("batch_size=-1", "must be a positive integer"),
                         ("onnx", "is not KEY=VALUE")):
        result, _ = evaluate("-b", "hub-qa", "--model-args", bad)
        assert result.exit_code == 1 and message in result.stderr, result.output
    result, _ = evaluate("-b", "sliding-window", "--model-args", "batch_size=2")
    assert result.exit_code == 1 and "applies to hf-qa bundles" in result.stderr
