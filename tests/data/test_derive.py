"""Derived and generated test sets behave like any other (a plain dropped-in folder is
tested in tests/e2e/test_add_a_folder.py): a derived folder is generated on first use, cached by
its inputs, byte-identical when regenerated, different under another seed, and carries its
provenance."""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from evaluator.cli import derive as cli_derive
from evaluator.cli.main import main
from evaluator.core.errors import ConfigError, DataError
from evaluator.data import derive, testsets
from tests.conftest import FIRST_WORD, REPO, share_parses, tiny_registry, write_testset


@pytest.fixture
def roots(tmp_path: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch, small_dev: dict):
    """A test-set root with a plain parent folder, and a submissions root with one bundle."""
    sets, _ = tiny_registry(tmp_path, monkeypatch, {"tiny": small_dev}, {"first-word": FIRST_WORD})
    return sets


def derived_folder(sets: Path, set_id: str, transform: str, seed: object = 0,
                   parent: str = "tiny", questions: int = 0) -> Path:
    folder = sets / set_id
    folder.mkdir()
    (folder / "testset.yaml").write_text(
        f"id: {set_id}\nname: {set_id}\nversion: '1'\nkind: derived\n"
        f"questions: {questions}\nscorer: squad-v1.1\ncluster: paragraph\n"
        f"license: CC BY-SA 4.0\ncitation: test\n"
        f"derive: {{from: {parent}, transform: {transform}, seed: {json.dumps(seed)}}}\n")
    return folder


def evaluate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["evaluate", *args, "--runner", "local", "--json"], capture_output=True,
                          text=True, env=dict(os.environ), timeout=300)


def test_a_derived_folder_is_generated_scored_and_refers_to_its_parent(roots, small_dev):
    n = sum(len(p["qas"]) for a in small_dev["data"] for p in a["paragraphs"])
    derived_folder(roots, "tiny-content", "content-words-only", questions=n)
    ts = testsets.get("tiny-content")
    assert ts.reference == "tiny" and ts.kind == "derived"
    path = ts.local_path()
    assert ts.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    provenance = json.loads((path.parent / "provenance.json").read_text())
    assert provenance["parent_sha256"] == testsets.get("tiny").sha256
    assert provenance["derive"] == {"from": "tiny", "transform": "content-words-only",
                                    "params": {}, "seed": 0}
    assert provenance["tools"]["stopwords"] == "nltk-english-179"
    assert provenance["sha256"] == ts.sha256
    proc = evaluate("-b", "first-word", "-t", "tiny", "-t", "tiny-content")
    assert proc.returncode == 0, proc.stderr
    cells = {c["testset"]: c for c in json.loads(proc.stdout)["results"]}
    assert cells["tiny-content"]["n"] == n
    assert cells["tiny-content"]["f1"]["value"] != cells["tiny"]["f1"]["value"]


def test_regeneration_is_byte_identical_and_the_seed_changes_it(roots, small_dev):
    n = sum(len(p["qas"]) for a in small_dev["data"] for p in a["paragraphs"])
    derived_folder(roots, "shuf-a", "context-words-shuffled", seed=1, questions=n)
    derived_folder(roots, "shuf-b", "context-words-shuffled", seed=2, questions=n)
    first = testsets.get("shuf-a").local_path()
    data = first.read_bytes()
    shutil.rmtree(first.parent)  # empty the cache: generate again from scratch
    again = testsets.get("shuf-a").local_path()
    assert again == first and again.read_bytes() == data
    assert testsets.get("shuf-b").local_path().read_bytes() != data


def test_a_seed_list_stacks_one_copy_per_seed(roots, small_dev):
    n = sum(len(p["qas"]) for a in small_dev["data"] for p in a["paragraphs"])
    derived_folder(roots, "shuf-3", "sentence-order-shuffled", seed=[4, 5, 6], questions=3 * n)
    ds = testsets.get("shuf-3").load()
    assert len(ds.questions) == 3 * n
    seeds = {derive.base_question_id(q.id)[1] for q in ds.questions}
    assert seeds == {4, 5, 6}
    assert derive.base_question_id("abc@s5") == ("abc", 5)
    assert derive.base_question_id("abc") == ("abc", None)


def test_the_cache_key_covers_parent_params_seed_and_tools():
    t = derive.get_transform("content-words-only")
    spec = derive.DeriveSpec("p", "content-words-only", {}, (0,))
    base = derive.cache_key("a" * 64, spec, t, {"x": "1"})
    assert base != derive.cache_key("b" * 64, spec, t, {"x": "1"})
    assert base != derive.cache_key("a" * 64, spec, t, {"x": "2"})
    assert base != derive.cache_key(
        "a" * 64, derive.DeriveSpec("p", "content-words-only", {}, (1,)), t, {"x": "1"})
    assert base != derive.cache_key(
        "a" * 64, derive.DeriveSpec("p", "content-words-only", {"k": 1}, (0,)), t, {"x": "1"})


@pytest.mark.parametrize("block, message", [
    ({"from": "tiny"}, "transform"), ({"transform": "x", "seed": "one"}, "seed"),
    ({"transform": "x", "seed": [1, 1]}, "twice"), ({"transform": "x", "params": [1]}, "params"),
    ({"from": ["a", "a"], "transform": "x"}, "each parent once"),
    ({"from": [], "transform": "x"}, "each parent once"),
])
def test_bad_derive_blocks_are_refused_with_a_clear_message(block, message):
    with pytest.raises(ConfigError, match=message):
        derive.DeriveSpec.from_yaml(block, Path("testset.yaml"))


def test_an_unknown_transform_suggests_the_close_name(roots):
    derived_folder(roots, "bad", "content-word-only", questions=1)
    with pytest.raises(Exception, match="did you mean 'content-words-only'"):
        testsets.get("bad").local_path()


def test_the_derive_command_prints_hash_and_provenance(roots, small_dev):
    n = sum(len(p["qas"]) for a in small_dev["data"] for p in a["paragraphs"])
    derived_folder(roots, "tiny-logic", "logical-words-dropped", questions=n)
    result = CliRunner().invoke(cli_derive.testsets_derive, ["tiny-logic"])
    assert result.exit_code == 0, result.output
    assert testsets.get("tiny-logic").sha256 in result.output
    assert "provenance.json" in result.output


def test_every_shipped_derived_folder_parses_and_names_a_registered_transform():
    names = derive.transforms()
    shipped = [testsets.get(n) for n in testsets.available()]
    derived = [ts for ts in shipped if ts.derive is not None]
    assert len(derived) >= 16
    for ts in derived:
        assert ts.derive.transform in names
        if ts.train is not None or ts.kind == "adversarial":
            # a test half or an adversarial held-out half: its parent, or the approaches'
            # original axis
            assert ts.reference in (ts.derive.parent, "squad-dev-heldout")
        elif ts.kind == "training" and ts.derive.parent is None:  # a generated training part
            assert ts.reference is None
        else:  # otherwise compared against the set it was derived from
            assert ts.reference == (ts.derive.parent or "squad-dev")


SHIPPED_DERIVED = sorted(n for n in testsets.available() if testsets.get(n).derive)


def test_every_shipped_derived_folder_pins_its_generated_bytes():
    unpinned = [n for n in SHIPPED_DERIVED if testsets.get(n).pinned is None]
    assert not unpinned, f"derived folders without sha256: {unpinned}"


@pytest.fixture(scope="module")
def generated_cache(tmp_path_factory: pytest.TempPathFactory, shared_data: Path,
                    spacy_parses: Path) -> Path:
    """One cache for the regeneration tests: a parent is generated once, not once per
    derived folder (and parsed by spaCy once in the run)."""
    cache = tmp_path_factory.mktemp("derived-cache")
    share_parses(cache, spacy_parses)
    return cache


def _sharing_a_parent(set_id: str):
    """The folder as a test case that runs on the test worker of its parent's other children:
    the parent is generated, and parsed by spaCy for the POS ablations, once for them all."""
    return pytest.param(set_id, marks=pytest.mark.xdist_group(
        f"derived-from-{testsets.get(set_id).derive.parent or set_id}"))


@pytest.mark.slow
@pytest.mark.parametrize("set_id", [_sharing_a_parent(s) for s in SHIPPED_DERIVED])
def test_a_shipped_derived_folder_regenerates_to_its_pinned_bytes(set_id, generated_cache,
                                                                  tmp_path, monkeypatch,
                                                                  shared_data):
    """Generated here (parents first, from the data mirror), a folder gives its stated
    question count and exactly the bytes its testset.yaml pins: the bytes the committed
    tables were scored on, whatever the machine."""
    pytest.importorskip("spacy")
    monkeypatch.setenv("QASHIFT_WORKSPACE", str(tmp_path / "workspace"))
    monkeypatch.setenv("QASHIFT_CACHE", str(generated_cache))
    monkeypatch.setenv("QASHIFT_DATA_DIR", str(shared_data))
    ts = testsets.get(set_id)
    derived = dataclasses.replace(ts, pinned=None).derived()
    assert derived.sha256 == ts.pinned, f"{set_id}: generated {derived.sha256[:12]}"
    assert len(ts.load().questions) == ts.questions


def test_a_pinned_derived_folder_refuses_other_generated_bytes(roots, small_dev):
    n = sum(len(p["qas"]) for a in small_dev["data"] for p in a["paragraphs"])
    folder = derived_folder(roots, "tiny-shuf", "sentence-order-shuffled", seed=1, questions=n)
    pinned = CliRunner().invoke(main, ["validate", "--pin", str(folder)])
    assert pinned.exit_code == 0, pinned.output
    assert f"sha256 {testsets.get('tiny-shuf').sha256[:12]}" in pinned.output
    assert testsets.get("tiny-shuf").pinned == testsets.get("tiny-shuf").sha256
    yaml = folder / "testset.yaml"
    yaml.write_text(yaml.read_text().replace("seed: 1", "seed: 2"))  # other bytes, same pin
    with pytest.raises(DataError, match="generated data differs from its pin"):
        testsets.get("tiny-shuf").load()
    again = CliRunner().invoke(main, ["validate", "--pin", str(folder)])
    assert again.exit_code != 0 and "--pin --version 2 " in again.output
    renewed = CliRunner().invoke(main, ["validate", "--pin", "--version", "2", str(folder)])
    assert renewed.exit_code == 0, renewed.output
    assert len(testsets.get("tiny-shuf").load().questions) == n


def test_the_ablation_report_gives_relative_change_also_on_a_question_subset(roots, small_dev):
    """`challenge report` compares every derived set with its parent; --questions-from keeps
    only the parent questions also in another set (a model's held-out half), recomputing the
    parent score on them; the subset parent score equals a plain evaluation of that subset."""
    n = sum(len(p["qas"]) for a in small_dev["data"] for p in a["paragraphs"])
    derived_folder(roots, "tiny-shuf", "sentence-order-shuffled", seed=[1, 2], questions=2 * n)
    first = {"version": "1.1", "data": small_dev["data"][:1]}
    half = sum(len(p["qas"]) for p in first["data"][0]["paragraphs"])
    write_testset(roots, "tiny-first", first)
    proc = evaluate("-b", "first-word", "-t", "tiny", "-t", "tiny-shuf", "-t", "tiny-first")
    assert proc.returncode == 0, proc.stderr
    cells = {c["testset"]: c for c in json.loads(proc.stdout)["results"]}

    def report(*extra: str) -> dict:
        result = CliRunner().invoke(cli_derive.challenge, ["report", "-b", "first-word",
                                                           "--json", *extra])
        assert result.exit_code == 0, result.output
        [row] = [r for r in json.loads(result.stdout)["ablations"] if r["testset"] == "tiny-shuf"]
        return row

    full, subset = report(), report("--questions-from", "tiny-first")
    assert full["questions"] == n and full["seeds"] == 2 and subset["questions"] == half
    assert full["parent_f1"] == pytest.approx(cells["tiny"]["f1"]["value"], abs=1e-9)
    assert subset["parent_f1"] == pytest.approx(cells["tiny-first"]["f1"]["value"], abs=1e-9)
    assert subset["parent_em"] == pytest.approx(cells["tiny-first"]["em"]["value"], abs=1e-9)
    for row in (full, subset):
        assert row["rel_f1"] == pytest.approx(100 * (row["f1"] - row["parent_f1"])
                                              / row["parent_f1"])
    assert subset["f1"] != full["f1"]


# The approach-level study's first run is kept, as the record its matrix was made from, in a
# table of its own. Its fuzzy rows were scored on the first fuzzy generator's bytes (generator
# 2 breaks ties among neighbours by word, the same on every CPU, and gives other sets), and
# its bAbI-style sets had 100 test questions (900 training); their version 2 has 1,000 (and,
# drawn first from the same seed, other training examples). Every other table, the second
# run's included, names the bytes a clean clone has.
FIRST_RUN = "approach-level-first-run.csv"
BABI_TASKS = (1, 2, 3, 4, 5, 11, 12, 13, 14, 15, 16)
SCORED_ON_OLDER_BYTES = {"fuzzy-trigram", "fuzzy-uniform", "fuzzy-wikipedia",
                         *(f"babi-{t}" for t in BABI_TASKS)}


def _declared_sha256(ts: testsets.TestSet) -> str | None:
    """The bytes a folder stands for, without generating or fetching anything."""
    if ts.source is not None:
        return ts.source.sha256
    return ts.pinned if ts.derive is not None else ts.sha256


def test_the_committed_tables_name_the_bytes_a_clean_clone_has():
    """Every test set a committed results table was scored on is, byte for byte, the one
    its folder pins (or fetches by sha256): a clean clone evaluating it again scores the
    same questions. The first run's rows of the sets named above are of their older bytes,
    and must differ."""
    seen: dict[tuple[str, bool], set[str]] = {}
    for table in sorted((REPO / "results").glob("*.csv")):
        with table.open(newline="") as handle:
            for row in csv.DictReader(handle):
                if row.get("testset_sha256"):
                    older = table.name == FIRST_RUN and row["testset"] in SCORED_ON_OLDER_BYTES
                    seen.setdefault((row["testset"], older), set()).add(row["testset_sha256"])
    assert len(seen) >= 20
    assert {set_id for set_id, older in seen if older} == SCORED_ON_OLDER_BYTES
    for (set_id, older), shas in sorted(seen.items()):
        declared = _declared_sha256(testsets.get(set_id))
        if older:
            assert declared not in shas, f"{set_id}: the first run names its current bytes"
        else:
            assert shas == {declared}, f"{set_id}: tables name {sorted(shas)}"
