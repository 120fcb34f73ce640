"""The test-set registry: every shipped folder loads, verifies and counts; failures say what
went wrong and how to fix it; submissions get an input file with no answers in it."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from evaluator.cli.main import main
from evaluator.core.errors import ConfigError, DataError, UnknownNameError
from evaluator.data import testsets
from evaluator.data.testsets import input_document
from evaluator.store.store import Store
from tests.conftest import FIRST_WORD, tiny_registry, write_testset

LOCAL = {"squad-dev": 10570, "new-wiki": 7938, "reddit": 9803, "amazon": 9885,
         "addsent": 3560, "addonesent": 1787}


def test_all_shipped_test_sets_are_registered():
    assert set(testsets.available()) >= {*LOCAL, "nyt"}
    for name in testsets.available():
        ts = testsets.get(name)
        assert ts.license and ts.citation
        if ts.derive is not None:  # generated from a parent (or a seed) on first use
            continue
        assert ts.source is not None and ts.source.url.startswith("https://")
        assert len(ts.sha256) == 64
        assert ts.reference in (None, "squad-dev")


@pytest.mark.parametrize("set_id,count", sorted(LOCAL.items()))
def test_local_sets_load_verified_with_the_expected_count(workspace, set_id, count):
    dataset = testsets.get(set_id).load()
    assert len(dataset.questions) == count
    assert dataset.sha256 == testsets.get(set_id).sha256


def test_nyt_without_a_local_copy_fails_with_a_clear_message(workspace):
    with pytest.raises(DataError) as info:
        testsets.get("nyt").load()
    message = str(info.value)
    assert "nyt_v1.0.json" in message and "--data-dir" in message
    assert "\n" not in message


def test_a_file_with_the_wrong_hash_is_rejected_and_not_cached(workspace, tmp_path):
    mirror = tmp_path / "mirror" / "squadshifts"
    mirror.mkdir(parents=True)
    (mirror / "reddit_v1.0.json").write_text('{"data": []}')
    with pytest.raises(DataError, match="sha256 mismatch.*expected b4ac346d"):
        testsets.get("reddit").load([tmp_path / "mirror"])
    assert not list((tmp_path / "cache").rglob("b4ac346d*"))


def test_a_truncated_file_is_caught_by_its_hash(workspace, tmp_path, shared_data):
    mirror = tmp_path / "mirror" / "squad-v1.1"
    mirror.mkdir(parents=True)
    data = (shared_data / "squad-v1.1" / "dev-v1.1.json").read_bytes()
    (mirror / "dev-v1.1.json").write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match="sha256 mismatch"):
        testsets.get("squad-dev").load([tmp_path / "mirror"])


def test_a_truncated_file_in_a_plain_folder_says_so(tmp_path, small_dev):
    folder = write_testset(tmp_path, "mine", small_dev)
    (folder / "data.json").write_text(json.dumps(small_dev)[:1000])
    with pytest.raises(DataError, match="not valid JSON.*truncated or corrupt"):
        testsets.get("mine", tmp_path).load()


def malformed(small_dev: dict, how: str) -> bytes:
    """The bytes of `small_dev` spoiled in one way a hostile or broken data file may be."""
    text = json.dumps(small_dev)
    context = json.dumps(small_dev["data"][0]["paragraphs"][0]["context"])
    return {
        "nested": text[:-1].encode() + b', "x": ' + b"[" * 200_000 + b"]" * 200_000 + b"}",
        "nan": (text[:-1] + ', "weight": NaN}').encode(),
        "not-utf8": text.replace(context, context[:-1] + ' \xff"', 1).encode("latin-1"),
        "lone-surrogate": text.replace(context, context[:-1] + '\\ud800"', 1).encode(),
    }[how]


MALFORMED = {"nested": r"nested too deeply \(more than 64 levels",
             "nan": r"holds NaN, which is not a JSON number",
             "not-utf8": r"is not valid JSON \(not UTF-8",
             "lone-surrogate": r"holds a lone surrogate escape"}


@pytest.mark.parametrize("how", sorted(MALFORMED))
def test_malformed_data_is_one_line_in_validate_and_evaluate(tmp_path, small_dev, monkeypatch,
                                                             workspace, how):
    """Data nested 200,000 deep reached the recursive parser (a traceback in `validate`);
    NaN, bytes that are not UTF-8 and a lone surrogate went on to crash what reads or
    writes the set later. Each is one line naming the file, and `evaluate` runs nothing."""
    sets, _ = tiny_registry(tmp_path, monkeypatch, {"toy": small_dev}, {"honest": FIRST_WORD})
    (sets / "toy" / "data.json").write_bytes(malformed(small_dev, how))
    with pytest.raises(DataError, match=MALFORMED[how]) as loaded:
        testsets.get("toy").load()
    assert "\n" not in str(loaded.value) and str(sets / "toy" / "data.json") in str(loaded.value)
    checked = CliRunner().invoke(main, ["validate", str(sets / "toy")])
    assert checked.exit_code == 1 and isinstance(checked.exception, SystemExit), checked
    [line] = [x for x in checked.output.splitlines() if re.search(MALFORMED[how], x)]
    assert line.startswith("test set toy:") and "Traceback" not in checked.output, checked.output
    ran = CliRunner().invoke(main, ["evaluate", "-b", "honest", "-t", "toy", "--runner",
                                    "local"])
    assert ran.exit_code != 0 and isinstance(ran.exception, SystemExit), ran
    [line] = [x for x in ran.output.splitlines() if x.startswith("error")]
    assert re.search(MALFORMED[how], line), ran.output
    assert "Traceback" not in ran.output
    assert not (workspace / "results.sqlite").exists() or not Store(workspace).results()


def test_a_wrong_question_count_is_reported(tmp_path, small_dev):
    write_testset(tmp_path, "mine", small_dev, questions=5)
    with pytest.raises(DataError, match="questions, testset.yaml says questions: 5"):
        testsets.get("mine", tmp_path).load()


def test_a_corrupted_cache_entry_is_replaced(workspace):
    ts = testsets.get("addonesent")
    path = ts.local_path()
    path.write_text("corrupted")
    assert len(ts.load().questions) == 1787


def test_unknown_names_suggest_close_matches():
    with pytest.raises(UnknownNameError, match="did you mean 'reddit'.*list them with"):
        testsets.get("redit")


def test_invalid_yaml_fields_are_named(tmp_path, small_dev):
    folder = write_testset(tmp_path, "bad", small_dev)
    text = (folder / "testset.yaml").read_text().replace("scorer: squad-v1.1", "scorer: Bleu 4")
    (folder / "testset.yaml").write_text(text)  # not a scorer's name (a registered one's is
    # checked by `qashift validate`: tests/test_registries.py)
    with pytest.raises(ConfigError, match="scorer: string should match pattern"):
        testsets.get("bad", tmp_path)
    shutil.rmtree(folder)


def _keys(node) -> set[str]:
    if isinstance(node, dict):
        return set(node) | set().union(*(_keys(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_keys(v) for v in node)) if node else set()
    return set()


def test_input_document_keeps_questions_and_drops_every_answer(workspace):
    raw = testsets.get("addsent").load().raw
    doc = input_document(raw)
    assert _keys(doc) == {"version", "data", "title", "paragraphs", "context", "qas", "id",
                          "question"}
    ids = [q["id"] for a in doc["data"] for p in a["paragraphs"] for q in p["qas"]]
    assert len(ids) == 3560
    assert raw["data"][0]["paragraphs"][0]["context"] == doc["data"][0]["paragraphs"][0][
        "context"]


def test_adding_a_plain_folder_registers_a_test_set(tmp_path, small_dev):
    write_testset(tmp_path, "my-set", small_dev)
    assert "my-set" in testsets.available(tmp_path)
    assert len(testsets.get("my-set", tmp_path).load().questions) == sum(
        len(p["qas"]) for a in small_dev["data"] for p in a["paragraphs"])


def test_folder_file_hash_is_the_identity(tmp_path, small_dev):
    write_testset(tmp_path, "my-set", small_dev)
    ts = testsets.get("my-set", tmp_path)
    import hashlib

    assert ts.sha256 == hashlib.sha256((tmp_path / "my-set" / "data.json").read_bytes()
                                       ).hexdigest()
    assert isinstance(Path(ts.local_path()), Path)


def test_a_folder_edited_while_the_process_runs_is_read_anew(tmp_path, small_dev):
    """Hashes and parsed yaml are kept per process only while the file stays the same."""
    folder = write_testset(tmp_path, "my-set", small_dev)
    first = testsets.get("my-set", tmp_path).sha256
    assert testsets.get("my-set", tmp_path).sha256 == first  # unchanged: the same identity
    smaller = {**small_dev, "data": small_dev["data"][:1]}
    (folder / "data.json").write_text(json.dumps(smaller))
    count = sum(len(p["qas"]) for a in smaller["data"] for p in a["paragraphs"])
    text = (folder / "testset.yaml").read_text()
    old = next(line for line in text.splitlines() if line.startswith("questions:"))
    (folder / "testset.yaml").write_text(text.replace(old, f"questions: {count}"))
    again = testsets.get("my-set", tmp_path)
    assert again.questions == count and again.sha256 != first
    assert len(again.load().questions) == count


@pytest.mark.parametrize("name", ["../my-set", "my-set/..", ".", ""])
def test_a_name_with_path_parts_is_unknown(tmp_path, small_dev, name):
    write_testset(tmp_path / "inner", "my-set", small_dev)
    with pytest.raises(UnknownNameError):
        testsets.get(name, tmp_path / "inner")


def test_an_unknown_name_among_few_choices_lists_them_all(tmp_path, small_dev):
    for name in ("alpha", "beta"):
        write_testset(tmp_path, name, small_dev)
    with pytest.raises(UnknownNameError, match="did you mean 'alpha'.*choices: alpha, beta"):
        testsets.get("alpah", tmp_path)


def test_show_says_where_the_data_is_or_how_to_get_it(workspace):
    missing = CliRunner().invoke(main, ["testsets", "show", "nyt"])
    assert missing.exit_code == 0 and "Traceback" not in missing.output
    assert "data: not here yet: `qashift testsets fetch nyt` downloads it" in missing.stdout
    mirrored = CliRunner().invoke(main, ["testsets", "show", "reddit"])
    assert "data: in the mirror " in mirrored.stdout
    CliRunner().invoke(main, ["testsets", "fetch", "reddit"])
    assert "data: cached" in CliRunner().invoke(main, ["testsets", "show", "reddit"]).stdout
