"""Hostile and broken folders are refused when they are read, in one line, before anything
runs: a bundle cannot set its own sandbox, reach outside its folder through a link, blow up
the YAML reader, or break the listing of every other folder."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from evaluator.bundles import policy
from evaluator.bundles import spec as bundles
from evaluator.cli.main import evaluate_cmd, main
from evaluator.core.errors import ConfigError, DataError
from evaluator.data import testsets
from evaluator.store.store import Store
from tests.conftest import FIRST_WORD, tiny_registry, write_command_bundle, write_testset


@pytest.fixture
def registry(tmp_path, small_dev, monkeypatch, workspace):
    sets, subs = tiny_registry(tmp_path, monkeypatch, {"toy": small_dev}, {"honest": FIRST_WORD})
    return {"subs": subs, "sets": sets, "workspace": workspace}


def bundle_yaml(folder: Path, extra: str, kind: str = "command") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "program.py").write_text(FIRST_WORD)
    (folder / "bundle.yaml").write_text(
        f"id: {folder.name}\nname: {folder.name}\nkind: {kind}\n"
        f"command: python3 program.py {{input}} {{output}}\n{extra}")
    return folder


def refused(folder: Path, pattern: str) -> str:
    with pytest.raises(ConfigError, match=pattern) as info:
        bundles.from_folder(folder)
    message = str(info.value)
    assert "\n" not in message and str(folder) in message
    return message


# -- 1. a bundle does not set its own sandbox -------------------------------------------------
@pytest.mark.parametrize("extra, pattern", [
    ("environment: {user: '0:0'}\n", r"unknown key 'environment.user'"),
    ("environment: {writable_root: true}\n", r"unknown key 'environment.writable_root'"),
    ("environment: {build: Dockerfile, build_network: host}\n",
     r"unknown key 'environment.build_network'"),
    ("privileged: true\n", r"unknown key 'privileged'"),
    ("volumes: ['/:/host']\n", r"unknown key 'volumes'"),
    ("resources: {pids: -1}\n", r"resources.pids must be positive"),
    ("resources: {memory: 1t}\n", r"resources.memory '1t' is above the operator's cap"),
    ("resources: {timeout: .inf}\n", r"resources.timeout must be finite"),
    ("resources: {timeout: 0}\n", r"resources.timeout must be positive"),
    ("resources: {cpus: many}\n", r"resources.cpus must be a number"),
    ("resources: {shm: 1g}\n", r"resources.shm is not a resource"),
])
def test_a_bundle_cannot_set_its_own_sandbox(tmp_path, extra, pattern):
    refused(bundle_yaml(tmp_path / "greedy", extra), pattern)


def test_resources_come_from_the_operator_policy(tmp_path, monkeypatch):
    asked = bundles.from_folder(bundle_yaml(tmp_path / "modest", "resources: {timeout: 30}\n"))
    assert asked.resources == {**policy.DEFAULTS, "timeout": 30.0}
    assert asked.resources["pids"] == 512 and asked.resources["memory"] == 4 << 30
    (tmp_path / "policy.yaml").write_text("defaults: {timeout: 20}\ncaps: {timeout: 25}\n")
    monkeypatch.setenv("QASHIFT_POLICY", str(tmp_path / "policy.yaml"))
    refused(tmp_path / "modest", r"resources.timeout 30 is above the operator's cap of 25")
    plain = bundles.from_folder(bundle_yaml(tmp_path / "plain", ""))
    assert plain.resources["timeout"] == 20.0


def test_a_bad_policy_file_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "policy.yaml").write_text("caps: {memory: lots}\n")
    monkeypatch.setenv("QASHIFT_POLICY", str(tmp_path / "policy.yaml"))
    with pytest.raises(ConfigError, match=r"policy.yaml: caps.memory 'lots' is not a size"):
        policy.current()


def test_an_endpoint_key_goes_only_under_the_url_prefix_the_policy_grants_it(
        tmp_path, monkeypatch):
    (tmp_path / "policy.yaml").write_text(
        "endpoint_keys: {OPENAI_API_KEY: 'https://api.openai.com/v1'}\n")
    monkeypatch.setenv("QASHIFT_POLICY", str(tmp_path / "policy.yaml"))
    allowed = policy.current().key_allowed
    assert allowed("OPENAI_API_KEY", "https://api.openai.com/v1/completions")
    assert allowed("OPENAI_API_KEY", "https://API.openai.com:443/v1/chat/completions")
    for url in ("http://api.openai.com/v1/completions",  # another scheme
                "https://api.openai.com:8443/v1/completions",  # another port
                "https://api.openai.com.evil.example/v1/completions",
                "https://api.openai.com@evil.example/v1/completions",
                "https://evil.example/https://api.openai.com/v1",
                "https://api.openai.com/v10/completions",  # a sibling path
                "https://api.openai.com:x/v1"):
        assert not allowed("OPENAI_API_KEY", url), url
    assert not allowed("AWS_SECRET_ACCESS_KEY", "https://api.openai.com/v1/completions")
    monkeypatch.delenv("QASHIFT_POLICY")
    assert not policy.current().key_allowed("OPENAI_API_KEY",
                                            "https://api.openai.com/v1/completions")


@pytest.mark.parametrize("grant, problem", [
    ("[OPENAI_API_KEY]", "endpoint_keys must map environment variables to URLs"),
    ("{openai-key: 'https://a.example'}", "'openai-key' is not an environment variable name"),
    ("{K: 'ftp://a.example/v1'}", "endpoint_keys.K: 'ftp://a.example/v1' is not an http(s)"),
    ("{K: 'https://user@a.example/v1'}", "is not an http(s) URL prefix"),
    ("{K: 'https://a.example:x/v1'}", "is not an http(s) URL prefix")])
def test_a_bad_endpoint_key_grant_is_one_line(tmp_path, monkeypatch, grant, problem):
    (tmp_path / "policy.yaml").write_text(f"endpoint_keys: {grant}\n")
    monkeypatch.setenv("QASHIFT_POLICY", str(tmp_path / "policy.yaml"))
    with pytest.raises(ConfigError, match=re.escape(problem)):
        policy.current()


@pytest.mark.parametrize("source, problem", [
    ("file: ../../victim/secret.txt", r"predictions.toy.file: must be a relative path inside"),
    ("file: /etc/passwd", r"predictions.toy.file: must be a relative path inside"),
    ("file: p.json, url: 'file:///dev/zero'", r"predictions.toy.url: must be an http:// or "
                                               r"https:// address")])
def test_a_predictions_file_is_inside_the_bundle_and_its_url_a_web_address(tmp_path, source,
                                                                         problem):
    """Else the controller would read (and by a hash mismatch name the digest of) a host
    file, or stream /dev/zero into its cache."""
    folder = tmp_path / "stored"
    folder.mkdir()
    (folder / "bundle.yaml").write_text(
        "id: stored\nname: stored\nkind: predictions\npredictions:\n"
        f"  toy: {{{source}, sha256: '{'0' * 64}'}}\n")
    refused(folder, problem)


# -- 2. no link leaves a bundle folder ---------------------------------------------------------
def test_a_link_to_gold_answers_in_a_model_folder_is_refused(tmp_path, registry):
    gold = registry["sets"] / "toy" / "data.json"
    folder = tmp_path / "leaky"
    (folder / "model").mkdir(parents=True)
    (folder / "model" / "config.json").write_text("{}")
    (folder / "model" / "gold.json").symlink_to(gold)
    (folder / "bundle.yaml").write_text("id: leaky\nname: leaky\nkind: hf-qa\n"
                                        "model: {path: model}\n")
    refused(folder, r"link model/gold.json -> .*data.json leaves the bundle folder")


@pytest.mark.parametrize("model", ["{path: /etc}", "{path: ../elsewhere}",
                                   "{cache: ../../../etc}"])
def test_a_model_path_outside_the_bundle_or_the_model_store_is_refused(tmp_path, model,
                                                                      workspace):
    folder = tmp_path / "reaching"
    folder.mkdir()
    (folder / "bundle.yaml").write_text(f"id: reaching\nname: reaching\nkind: hf-qa\n"
                                        f"model: {model}\n")
    refused(folder, r"model\.(path|cache) .* leaves .*; refused")


def test_a_link_to_the_host_root_is_refused_before_any_copy(tmp_path, registry):
    folder = write_command_bundle(registry["subs"], "hostroot", FIRST_WORD)
    (folder / "hostroot").symlink_to("/")
    before = set(Path("/tmp").glob("qashift-*"))
    started = time.monotonic()
    result = CliRunner().invoke(evaluate_cmd, ["-b", "hostroot", "-t", "toy", "--runner",
                                               "local"])
    assert time.monotonic() - started < 30  # no walk through the host file system
    assert result.exit_code == 1
    assert "link hostroot -> / leaves the bundle folder; refused" in result.output
    assert set(Path("/tmp").glob("qashift-*")) <= before  # nothing copied anywhere
    assert not Store(registry["workspace"]).exists() or not Store(
        registry["workspace"]).results()


def test_links_inside_the_folder_and_hard_links_out_of_it(tmp_path):
    """As the gate refuses them when the folder is hashed: even a link that stays inside."""
    folder = bundle_yaml(tmp_path / "linked", "")
    (folder / "again.py").symlink_to("program.py")
    refused(folder, r"link again.py -> program.py is refused too, though it stays inside")
    (folder / "again.py").unlink()
    assert bundles.from_folder(folder).id == "linked"
    os.link(tmp_path / "linked" / "program.py", tmp_path / "outside.py")
    refused(folder, r"program.py is hard-linked to a file elsewhere")


def test_a_bundle_folder_that_is_a_link_is_broken_and_the_rest_still_lists(
        tmp_path, monkeypatch, workspace):
    subs = tmp_path / "subs"
    bundle_yaml(subs / "real", "")
    (subs / "alias").symlink_to(subs / "real")  # alias/bundle.yaml says id: real
    (subs / "real" / "bundle.yaml").write_text(
        (subs / "real" / "bundle.yaml").read_text().replace("id: real", "id: alias"))
    monkeypatch.setenv("QASHIFT_SUBMISSIONS", str(subs))
    good, broken = bundles.scan()
    assert broken["alias"] == f"{subs / 'alias'} is a link (to {subs / 'real'}); links are " \
                              f"refused"
    assert "real" in broken and "alias" not in good  # its id names the link, not the folder
    status = CliRunner().invoke(main, ["status"])
    assert status.exit_code == 0, status.output
    checked = CliRunner().invoke(main, ["validate"])
    assert "links are refused" in checked.output and checked.exit_code == 1


def test_a_bundle_yaml_linked_out_of_its_folder_is_refused_before_it_is_read(tmp_path):
    secret = tmp_path / "secret.yaml"
    secret.write_text("id: SECRET-GOLD-ANSWER\n")
    folder = bundle_yaml(tmp_path / "leaky", "")
    (folder / "bundle.yaml").unlink()
    (folder / "bundle.yaml").symlink_to(secret)
    message = refused(folder, r"link bundle.yaml -> .* leaves the bundle folder")
    assert "SECRET" not in message


def test_auto_says_when_it_falls_back_to_the_unisolated_runner(monkeypatch):
    from evaluator.runners.dispatch import Dispatcher

    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    said = []
    assert Dispatcher("auto", warn=said.append).backend == "local"
    assert said and "NOT isolated" in said[0]


# -- 6. YAML bombs -----------------------------------------------------------------------------
def billion_laughs(levels: int = 9) -> str:
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, levels):
        refs = ", ".join([f"*a{i - 1}"] * 9)
        lines.append(f"  a{i}: &a{i} [{refs}]")
    return "metadata:\n  " + "\n".join(lines) + "\n"


def test_a_yaml_bomb_is_refused_in_one_line_and_the_rest_still_lists(tmp_path, registry):
    folder = bundle_yaml(registry["subs"] / "bomb", billion_laughs())
    assert len((folder / "bundle.yaml").read_bytes()) < 2048
    refused(folder, r"aliases \(\*name\) are not allowed")
    proc = subprocess.run(["qashift", "bundles", "list"], capture_output=True, text=True,
                          env=os.environ.copy(), timeout=60)
    assert proc.returncode == 0
    assert "bomb" in proc.stdout and "BROKEN" in proc.stdout and "honest" in proc.stdout


def test_a_key_given_twice_is_refused_naming_it_where_yaml_would_keep_the_last(tmp_path):
    folder = bundle_yaml(tmp_path / "twice", "command: python3 other.py {input} {output}\n")
    refused(folder, r"key 'command' is given twice \(line 5\)")


@pytest.mark.parametrize("text, why", [
    ("a: 1\nb: {c: 2, c: 3}\n", "key 'c' is given twice (line 2)"),
    ("- {a: 1}\n- {a: 1, a: 1}\n", "key 'a' is given twice (line 2)"),
    ("1: x\n01: y\n", "key 1 is given twice (line 2)"),  # one key written two ways
    ("x: &a [1]\ny: *a\n", "aliases (*name) are not allowed (line 2)"),
    ("<<: {a: 1}\nb: 2\n", "merge"),
])
def test_the_fast_yaml_path_refuses_what_the_careful_reader_refuses_in_its_words(text, why):
    """Folder files are parsed by libyaml; what its events or its loader find suspicious
    is read again by the careful reader, so the refusals and their words are the same."""
    import yaml

    from evaluator.core.folders import load_checked

    with pytest.raises(yaml.YAMLError, match=re.escape(why)):
        load_checked(text)


def test_the_fast_yaml_path_builds_every_shipped_folder_file_as_the_careful_reader():
    import yaml

    from evaluator.core.folders import _NoAliases, load_checked
    from tests.conftest import REPO

    files = [*REPO.glob("submissions/*/bundle.yaml"), *REPO.glob("testsets/*/testset.yaml"),
             *REPO.glob("studies/*.yaml"), *REPO.glob("configs/*.yaml")]
    assert yaml.__with_libyaml__ and len(files) > 300
    for path in files:
        text = path.read_text()
        assert load_checked(text) == yaml.load(text, Loader=_NoAliases), path  # noqa: S506


def test_an_oversized_folder_file_is_refused(tmp_path):
    folder = bundle_yaml(tmp_path / "huge", "metadata:\n" + "".join(
        f"  k{i}: {'x' * 3000}\n" for i in range(100)))
    refused(folder, r"over the 256 KiB limit")


# -- 8. bad values: one line each, and one bad folder never hides the others ------------------
@pytest.mark.parametrize("extra, pattern", [
    ("resouces: {memory: 64g}\n", r"unknown key 'resouces' \(did you mean 'resources'\?\)"),
    ("metadata: {citation: 2020, paper: {title: [1, {a: b}]}}\n", r"metadata\.paper"),
    ("name_: x\n", r"unknown key 'name_' \(did you mean 'name'\?\)"),
    ("metadata: {note: \"\\ud800\"}\n", r"metadata.note: .*unicode"),
    ("metadata: {note: " + "y" * 5000 + "}\n", r"metadata.note: string should have at most"),
])
def test_bad_bundle_values_are_named_in_one_line(tmp_path, extra, pattern):
    refused(bundle_yaml(tmp_path / "bad", extra), pattern)


def test_a_command_bundle_without_a_command_is_refused(tmp_path):
    folder = tmp_path / "mute"
    folder.mkdir()
    (folder / "bundle.yaml").write_text("id: mute\nname: mute\nkind: command\n")
    refused(folder, r"command must contain the \{input\} and \{output\} placeholders")


def test_bad_testset_values_are_named_in_one_line(tmp_path, small_dev):
    folder = write_testset(tmp_path, "odd", small_dev)
    text = (folder / "testset.yaml").read_text()
    (folder / "testset.yaml").write_text(text.replace("citation: test fixture",
                                                      "citation: 2020\nreferense: squad-dev"))
    with pytest.raises(ConfigError, match=r"unknown key 'referense' \(did you mean "
                                          r"'reference'\?\) \(and 1 more: citation\)"):
        testsets.from_folder(folder)
    (folder / "testset.yaml").write_text(text.replace("citation: test fixture",
                                                      "citation: 2020"))
    with pytest.raises(ConfigError, match=r"citation: input should be a valid string"):
        testsets.from_folder(folder)


def test_a_question_without_its_question_is_a_data_error(tmp_path, small_dev):
    raw = json.loads(json.dumps(small_dev))
    del raw["data"][0]["paragraphs"][0]["qas"][0]["question"]
    write_testset(tmp_path, "holey", raw)
    with pytest.raises(DataError, match=r"question .*: has no question text"):
        testsets.get("holey", tmp_path).load()


def test_one_broken_folder_does_not_break_all_list_or_status(registry):
    bundle_yaml(registry["subs"] / "typo", "resouces: {memory: 64g}\n")
    broken_set = registry["sets"] / "broken"
    broken_set.mkdir()
    (broken_set / "testset.yaml").write_text("id: broken\nname: [unclosed\n")
    runner = CliRunner()
    listed = runner.invoke(main, ["testsets", "list"])
    assert listed.exit_code == 0 and "toy" in listed.output and "BROKEN" in listed.output
    every = runner.invoke(evaluate_cmd, ["-b", "all", "-t", "all", "--runner", "local",
                                         "--json"])
    doc = json.loads(every.stdout)
    assert [r["bundle"] for r in doc["results"]] == ["honest"]
    assert "skipping broken bundle typo" in every.stderr
    assert "skipping broken test set broken" in every.stderr
    status = runner.invoke(main, ["status"])
    assert status.exit_code == 0 and "honest" in status.output
    named = runner.invoke(evaluate_cmd, ["-b", "typo", "-t", "toy"])
    assert named.exit_code == 1 and "did you mean 'resources'" in named.output


def test_completing_a_leaderboard_bundle_refuses_a_link_to_gold_answers(tmp_path, registry):
    folder = registry["subs"] / "lb-sneaky"
    folder.mkdir()
    (folder / "bundle.yaml").write_text("id: lb-sneaky\nname: sneaky\nkind: command\n"
                                        "status: awaiting-program\n")
    program = tmp_path / "codalab-bundle"
    program.mkdir()
    (program / "predict.py").write_text(FIRST_WORD)
    (program / "gold.json").symlink_to(registry["sets"] / "toy" / "data.json")
    result = CliRunner().invoke(main, ["bundles", "complete", "lb-sneaky", str(program),
                                       "--command", "python3 predict.py {input} {output}"])
    assert result.exit_code == 1
    assert "link gold.json -> " in result.stderr and "leaves the bundle folder" in \
        result.stderr
    assert not (folder / "gold.json").exists() and not (folder / "predict.py").exists()
    assert bundles.get("lb-sneaky").status == "awaiting-program"
