"""`qashift validate` checks every test-set and bundle folder and says every problem at once,
one line each, with exit status 1; the good folders stay usable."""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from evaluator.cli.main import main
from tests.conftest import REPO, write_command_bundle, write_derived, write_testset

# (folder, file, text replaced, replacement): eleven ways to break a folder
BREAKS = [
    ("set-typo", "testset.yaml", "reference:", "referense:"),
    ("set-type", "testset.yaml", "questions: ", "questions: many"),
    ("set-kind", "testset.yaml", "kind: derived", "kind: cheese"),
    ("set-id", "testset.yaml", "id: set-id", "id: other-id"),
    ("set-missing", "testset.yaml", "file: data.json", "file: gone.json"),
    ("set-sha", "testset.yaml", "file: data.json",
     "source: {file: data.json, sha256: xyz, url: 'https://example.org/d.json'}"),
    ("set-yaml", "testset.yaml", "name: set-yaml", "name: [unclosed"),
    ("set-reference", "testset.yaml", "reference: good-set", "reference: good-sett"),
    ("bundle-typo", "bundle.yaml", "command:", "comand:"),
    ("bundle-kind", "bundle.yaml", "kind: command", "kind: magic"),
    ("bundle-approach", "bundle.yaml", "kind: command", "kind: approach"),
]


@pytest.fixture
def broken(tmp_path, small_dev, monkeypatch):
    subs, sets = tmp_path / "subs", tmp_path / "sets"
    write_testset(sets, "good-set", small_dev, reference="good-set")
    write_command_bundle(subs, "good-bundle", "print()")
    for name, filename, old, new in BREAKS:
        folder = write_testset(sets, name, small_dev, reference="good-set") \
            if filename == "testset.yaml" else write_command_bundle(subs, name, "print()")
        text = (folder / filename).read_text()
        assert old in text, (name, old)
        (folder / filename).write_text(text.replace(old, new, 1))
    monkeypatch.setenv("QASHIFT_SUBMISSIONS", str(subs))
    monkeypatch.setenv("QASHIFT_TESTSETS", str(sets))
    return {"subs": subs, "sets": sets}


def test_eleven_broken_folders_are_eleven_lines_and_the_good_ones_still_list(broken):
    result = CliRunner().invoke(main, ["validate"])
    assert result.exit_code == 1
    lines = result.stdout.strip().splitlines()
    assert len(lines) == len(BREAKS), result.stdout
    for name, *_ in BREAKS:
        assert sum(f" {name}: " in line for line in lines) == 1, name
    assert "13 folders checked, 11 with a problem" in result.stderr
    assert "did you mean 'reference'" in result.stdout
    assert "set-yaml/testset.yaml: not valid YAML (line 3, column 8: expected ',' or ']', " \
           "but got ':' (while parsing a flow sequence))" in result.stdout
    assert "reference 'good-sett' is not a test set here (did you mean 'good-set'?" in \
        result.stdout
    listed = CliRunner().invoke(main, ["testsets", "list"])
    assert listed.exit_code == 0 and "good-set" in listed.output
    assert "set-typo" in listed.output and "BROKEN" in listed.output


def test_named_folders_only(broken):
    ok = CliRunner().invoke(main, ["validate", str(broken["sets"] / "good-set"),
                                   str(broken["subs"] / "good-bundle")])
    assert ok.exit_code == 0 and "2 folders checked, 0 with a problem" in ok.output
    bad = CliRunner().invoke(main, ["validate", str(broken["subs"] / "bundle-kind"),
                                    str(broken["sets"])])
    assert bad.exit_code == 1
    assert "bundle-kind" in bad.stdout and "neither a test-set folder" in bad.stdout


@pytest.mark.slow
@pytest.mark.parametrize("kind,pattern", [("bundle", "submissions/*/bundle.yaml"),
                                          ("testset", "testsets/*/testset.yaml"),
                                          ("study", "studies/*.yaml")])
def test_the_exported_schema_accepts_every_shipped_file_and_refuses_a_typo(kind, pattern):
    result = CliRunner().invoke(main, ["validate", "--schema", kind])
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    checker = jsonschema.validators.validator_for(schema)
    checker.check_schema(schema)  # once: `jsonschema.validate` checks it again on every call
    validator = checker(schema)
    files = sorted(REPO.glob(pattern))
    assert files
    for path in files:
        validator.validate(yaml.load(path.read_text(), Loader=yaml.CSafeLoader))
    typo = {**yaml.safe_load(files[0].read_text()), "referense": "squad-dev"}
    with pytest.raises(jsonschema.ValidationError, match="referense"):
        validator.validate(typo)


def test_a_folder_whose_name_is_no_id_is_one_line_naming_the_rule(tmp_path, small_dev,
                                                                   monkeypatch):
    """An id is a folder's name, a stored row's field, an export's file stem and a site page's
    name; one rule for all of them, so a store never holds a row that another refuses."""
    write_testset(tmp_path / "sets", "my set", small_dev)
    write_testset(tmp_path / "sets", "squad@v2", small_dev)  # '@' joins a system's parts
    write_command_bundle(tmp_path / "subs", "my bundle", "print()")
    monkeypatch.setenv("QASHIFT_SUBMISSIONS", str(tmp_path / "subs"))
    monkeypatch.setenv("QASHIFT_TESTSETS", str(tmp_path / "sets"))
    result = CliRunner().invoke(main, ["validate"])
    assert result.exit_code == 1
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 3, result.stdout
    for name in ("my set", "squad@v2", "my bundle"):
        line = next(line for line in lines if f" {name}: " in line)
        assert f"id: is not an id: a letter or digit, then letters, digits and _.+:- " \
               f"(at most 200 characters) (got '{name}')" in line


def test_an_empty_context_and_an_empty_gold_answer_are_named_once_each_one_line_apiece(
        tmp_path, small_dev, monkeypatch):
    """A paragraph whose context is empty is one problem, not one per answer that is then
    nowhere in it; an empty gold answer, which any answer matches in part, is one too; a named
    folder's problems are a line each."""
    raw = json.loads(json.dumps(small_dev))
    emptied = raw["data"][0]["paragraphs"][0]
    emptied["context"] = ""
    second = raw["data"][0]["paragraphs"][1]["qas"][0]
    second["answers"][0] = {"text": " ", "answer_start": 0}
    sets = tmp_path / "sets"
    folder = write_testset(sets, "mine", raw, reference="mine")
    monkeypatch.setenv("QASHIFT_TESTSETS", str(sets))
    result = CliRunner().invoke(main, ["validate", str(folder)])
    assert result.exit_code == 1
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 2, lines
    assert "has an empty context" in lines[0] and f"({len(emptied['qas'])} questions" in lines[0]
    assert repr(second["id"]) in lines[1] and "has an empty gold answer" in lines[1]
    assert all(len(line) < 400 for line in lines)
    assert "1 folders checked, 1 with a problem" in result.stderr


def test_a_derived_folder_named_is_generated_and_its_count_and_parents_checked(
        tmp_path, small_dev, monkeypatch):
    """A derived folder named on the command line is generated: a wrong question count, or a
    parent whose data is not here, is one line; a right one passes."""
    sets = tmp_path / "sets"
    write_testset(sets, "parent", small_dev, reference="parent")
    monkeypatch.setenv("QASHIFT_TESTSETS", str(sets))
    monkeypatch.setenv("QASHIFT_CACHE", str(tmp_path / "cache"))
    total = sum(len(p["qas"]) for a in small_dev["data"] for p in a["paragraphs"])
    for name, source, count in (("right", "parent", total), ("wrong", "parent", 1),
                                ("orphan", "nyt", 1)):
        write_derived(sets, name, source, questions=count, reference="parent")
    monkeypatch.setenv("QASHIFT_DATA_DIR", str(tmp_path / "no-mirror"))
    done = CliRunner().invoke(main, ["validate", *(str(sets / n)
                                                   for n in ("right", "wrong", "orphan"))])
    assert done.exit_code == 1, done.output
    lines = done.stdout.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == ["test set wrong", "test set orphan"], \
        done.output
    assert f"holds {total} questions, testset.yaml says questions: 1" in lines[0]
    assert "nyt" in lines[1]
