"""An approach's prepared inputs: its `prepare:` command runs once per input (train split or
test set) and environment, in a folder without the approach's code, and every system of the
approach reads the result as {prepared}; its bytes enter the workspace through the gate and
are read-only to the systems in a container."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from evaluator.bundles import spec as bundles
from evaluator.cli.main import main
from evaluator.core.errors import ConfigError
from evaluator.runners.docker import daemon_available
from tests.conftest import write_testset
from tests.support.training import f1_of

# The library's prepare step: every question's passage split into words, and a link where
# the test asks for one (the gate must refuse it).
PREPARE = r'''
import json, os, sys
LINK = False
source, folder = sys.argv[1:3]
doc = json.load(open(source))
words = {qa["id"]: p["context"].split() for a in doc["data"] for p in a["paragraphs"]
         for qa in p["qas"]}
json.dump(words, open(os.path.join(folder, "words.json"), "w"))
if os.path.exists("approach.py"):
    open(os.path.join(folder, "saw-approach"), "w").write("yes")
if LINK:
    os.symlink("/etc/passwd", os.path.join(folder, "link"))
'''

# The approach: trains nothing but its `word` setting; predicts the word-th word of each
# passage from the prepared folder, and tries to change that folder.
APPROACH = r'''
import json, os, sys
mode = sys.argv[1]
if mode == "train":
    train, config, model, prepared = sys.argv[2:6]
    assert os.path.isfile(os.path.join(prepared, "words.json"))
    hp = json.load(open(config))["hyperparameters"]
    open(os.path.join(model, "weights.txt"), "w").write(str(hp["word"]))
else:
    model, prepared, source, output = sys.argv[2:6]
    word = int(open(os.path.join(model, "weights.txt")).read())
    words = json.load(open(os.path.join(prepared, "words.json")))
    answers = {qid: (w + [""] * 9)[word] for qid, w in words.items()}
    try:
        open(os.path.join(prepared, "words.json"), "a").write(" ")
        answers["wrote-prepared"] = "yes"
    except OSError:
        pass
    json.dump(answers, open(output, "w"))
'''


def _approach(subs: Path, prepare: str = "python3 -m wordlists.prepare {input} {prepared}",
              command: str = "python3 approach.py predict {model} {prepared} {input} {output}",
              kind: str = "approach") -> Path:
    library = subs / "_libraries" / "wordlists"
    library.mkdir(parents=True, exist_ok=True)
    (library / "__init__.py").write_text("")
    (library / "prepare.py").write_text(PREPARE)
    folder = subs / "split-words"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "approach.py").write_text(APPROACH)
    (folder / "bundle.yaml").write_text(
        f"id: split-words\nname: split-words\nkind: {kind}\nlibraries: [wordlists]\n"
        f"prepare: {prepare}\n"
        + ("train: python3 approach.py train {train} {config} {model} {prepared} "
           "{checkpoints}\n"
           "hyperparameters: {defaults: {word: 0}}\n" if kind == "approach" else "")
        + f"command: {command}\nresources: {{timeout: 120, output: 2m}}\n")
    return folder


@pytest.fixture
def prepared_registry(tmp_path, dev_raw, monkeypatch, workspace):
    subs, sets = tmp_path / "subs", tmp_path / "sets"
    _approach(subs)
    split = write_testset(sets, "tiny-train", {"version": "1.1", "data": dev_raw["data"][:1]})
    (split / "testset.yaml").write_text((split / "testset.yaml").read_text().replace(
        "kind: derived", "kind: training"))
    write_testset(sets, "tiny-test", {"version": "1.1", "data": dev_raw["data"][1:2]})
    monkeypatch.setenv("QASHIFT_SUBMISSIONS", str(subs))
    monkeypatch.setenv("QASHIFT_TESTSETS", str(sets))
    return {"subs": subs, "workspace": workspace, "test": dev_raw["data"][1]}


def _train(word: int, runner: str = "local") -> str:
    result = CliRunner().invoke(main, ["train", "-a", "split-words", "-t", "tiny-train",
                                       "--set", f"word={word}", "--runner", runner])
    assert result.exit_code == 0, result.output
    return result.stdout.split()[0]


def _records(workspace: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((workspace / "prepared").glob("*.json"))]


def _expected_f1(article: dict, word: int) -> bool:
    """Whether some question's gold answer is the passage's word-th word (then F1 > 0)."""
    return any((p["context"].split() + [""] * 9)[word] in [a["text"] for a in qa["answers"]]
               for p in article["paragraphs"] for qa in p["qas"])


def test_each_input_is_prepared_once_for_every_system_of_the_approach(prepared_registry):
    ws = prepared_registry["workspace"]
    first, second = _train(0), _train(1)
    assert first != second
    assert len(_records(ws)) == 1  # both trained on the one split: one preparation
    scores = [f1_of(system, "tiny-test") for system in (first, second)]
    records = _records(ws)
    assert len(records) == 2  # and one for the test set, made for the first system
    made_for = sorted(r["made_for"] for r in records)
    assert made_for[0] == first and made_for[1].startswith(first) and "tiny-test" in made_for[1]
    # the systems read the prepared words: their answers are the word-th passage words
    assert scores[0]["f1"]["value"] != scores[1]["f1"]["value"]
    assert scores[0]["extra"] == 1  # the local runner is not isolated: "wrote-prepared"
    for record in records:
        assert record["runner"] == "local" and record["bytes"] > 0
        assert 0 < record["cpu_s"] < 60  # its process's CPU time, counted by the runner
    # the prepare step ran in a folder without the approach's code
    assert not list((ws / "prepared").glob("*/saw-approach"))


def test_a_prepared_folder_is_what_made_it_from_which_bytes(prepared_registry):
    """Another input, or another prepare command, is another folder; the same is reused."""
    ws = prepared_registry["workspace"]
    system = _train(0)
    f1_of(system, "tiny-test")
    f1_of(system, "tiny-test", "local", "--limit", "5")  # a sample: other input bytes
    assert len(_records(ws)) == 3
    f1_of(system, "tiny-test", "local", "--rerun")  # the same bytes again: reused
    assert len(_records(ws)) == 3


def test_a_link_in_a_prepared_folder_is_refused_at_the_gate(prepared_registry):
    lib = prepared_registry["subs"] / "_libraries" / "wordlists" / "prepare.py"
    lib.write_text(PREPARE.replace("LINK = False", "LINK = True"))
    result = CliRunner().invoke(main, ["train", "-a", "split-words", "-t", "tiny-train",
                                       "--runner", "local"])
    assert result.exit_code != 0
    assert "prepared input" in result.output and "link" in result.output
    assert not _records(prepared_registry["workspace"])


def test_the_prepare_command_cannot_run_the_approachs_own_code(prepared_registry):
    _approach(prepared_registry["subs"], prepare="python3 approach.py {input} {prepared}")
    result = CliRunner().invoke(main, ["train", "-a", "split-words", "-t", "tiny-train",
                                       "--runner", "local"])
    assert result.exit_code != 0
    assert "preparing its input" in result.output and "approach.py" in result.output


@pytest.mark.skipif(not daemon_available(), reason="needs a Docker daemon")
@pytest.mark.usefixtures("no_container_left_behind")
def test_in_a_container_the_prepared_folder_is_read_only(prepared_registry):
    system = _train(0, "docker")
    cell = f1_of(system, "tiny-test", "docker")
    assert cell["extra"] == 0  # it could not write "wrote-prepared" into /prepared
    [record] = [r for r in _records(prepared_registry["workspace"]) if "tiny-test" in
                r["made_for"]]
    assert record["runner"] == "docker"
    if counts_container_cpu():
        assert 0 < record["cpu_s"] < 60
    else:  # the systemd cgroup driver: no parent cgroup outlives the container
        assert record["cpu_s"] is None
    local = f1_of(system, "tiny-test", "local")
    assert local["f1"]["value"] == cell["f1"]["value"]


def counts_container_cpu() -> bool:
    """Whether this daemon runs containers under a parent cgroup whose CPU time is read."""
    import docker

    from evaluator.runners.docker import watch
    return watch.memory_parent(docker.from_env(), "probe") is not None


@pytest.mark.parametrize("change, message", [
    ({"kind": "command"}, "for kind approach only"),
    ({"prepare": "python3 -m wordlists.prepare {input}"}, "{prepared} placeholders"),
    ({"command": "python3 approach.py predict {model} x {input} {output}"},
     "command: must take the prepared folder"),
])
def test_a_bad_prepare_declaration_is_a_one_line_error(tmp_path, change, message):
    folder = _approach(tmp_path / "subs", **change)
    with pytest.raises(ConfigError, match=message.replace("{", r"\{").replace("}", r"\}")):
        bundles.from_folder(folder)
