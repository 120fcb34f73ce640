"""Frozen systems in the repository: a study's systems, frozen from the store, run on a clean
machine (an empty workspace) without training, give the answers they gave where they were
trained, and refuse a weights file that is not the manifest's."""

from __future__ import annotations

import csv
import hashlib
import json
import lzma
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from analysis.sources import strata
from evaluator import study
from evaluator.bundles import spec as bundles
from evaluator.cli.main import main
from evaluator.core.errors import UserError
from evaluator.data import testsets
from evaluator.runners.dispatch import Dispatcher
from evaluator.store.store import Store
from evaluator.training import frozen
from evaluator.training.systems import job_for
from tests.conftest import REPO, few_of, outdate_strata_rows, use_workspace, write_testset
from tests.support.approaches import WORDS, approach_registry
from tests.support.generative import Server, allow_endpoints, write_served_twin

PLAN = ("id: tiny\nname: tiny\nsplit: tiny-train\ntestsets: [tiny-test]\n"
        "approaches:\n  words: {settings: [{}], seeds: [0, 1]}\n")
SYSTEMS = ("words@tiny-train/s0", "words@tiny-train/s1")


def nothing_trained(workspace: Path) -> bool:
    """No train cell ran in `workspace`: its store records no trained system (its `models/`
    may hold unpacked copies of frozen systems' packed files)."""
    store = Store(workspace)
    return not store.exists() or not store.systems()


def unseal(weights: Path) -> None:
    """A frozen copy's weights folder made writable again, to tamper with it."""
    weights.chmod(0o755)
    for path in weights.iterdir():
        path.chmod(0o644)


def run(*argv: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, env=os.environ.copy(),
                          timeout=timeout)


def score(system: str, testset: str = "tiny-test", timeout: int = 600) -> dict:
    done = run("evaluate", "-b", system, "-t", testset, "--runner", "local", "--json",
               timeout=timeout)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["results"][0]


def words_frozen(tmp_path: Path, monkeypatch, sets: str, words: str,
                 table: Path | None = None) -> Path:
    """A plan of the `words` approach (`words`: its grid) on tiny-train and `sets`, trained
    and frozen into tmp_path/frozen; the plan's path."""
    monkeypatch.setenv("QASHIFT_FROZEN", str(tmp_path / "frozen"))
    plan = tmp_path / "plan.yaml"
    plan.write_text(f"id: words\nname: words\nsplit: tiny-train\ntestsets: [{sets}]\n"
                    f"approaches:\n  words: {words}\n")
    into = ("--table", str(table)) if table else ()
    assert run("qashift", "study", "run", str(plan), "--runner", "local", *into).returncode == 0
    assert run("qashift", "study", "freeze", str(plan)).returncode == 0
    return plan


@pytest.fixture(scope="module")
def frozen_plan_made(tmp_path_factory, dev_raw, shared_data) -> dict:
    """`frozen_plan`'s training, scoring and freezing, done once for the module."""
    home = tmp_path_factory.mktemp("frozen-plan")
    with pytest.MonkeyPatch.context() as patch:
        workspace = use_workspace(patch, home, shared_data)
        patch.setenv("QASHIFT_FROZEN", str(home / "frozen"))
        registry = approach_registry(home, dev_raw, patch, workspace, "words", WORDS)
        plan = home / "plan.yaml"
        plan.write_text(PLAN)
        assert run("qashift", "study", "run", str(plan), "--runner", "local").returncode == 0
        table = home / "plan.csv"
        assert run("qashift", "study", "table", str(plan), "--out", str(table)).returncode == 0
        before = {name: score(name) for name in SYSTEMS}
        done = run("qashift", "study", "freeze", str(plan))
        assert done.returncode == 0, done.stderr
        assert "2 systems frozen, 0 already frozen" in done.stdout
    return {"home": home, "subs": registry["subs"], "before": before}


@pytest.fixture
def frozen_plan(frozen_plan_made, tmp_path, monkeypatch, workspace):
    """The plan trained and scored in one workspace (tmp_path/workspace), then frozen into a
    repository folder (tmp_path/frozen); the process then moves to an empty workspace, as a
    clean clone would have. Each test gets its own copy to tamper with (the approach's
    folder is shared: no test changes it)."""
    made = frozen_plan_made["home"]
    for name in ("workspace", "frozen", "sets"):
        shutil.copytree(made / name, tmp_path / name, symlinks=True)
    for name in ("plan.yaml", "plan.csv"):
        shutil.copy(made / name, tmp_path / name)
    monkeypatch.setenv("QASHIFT_SUBMISSIONS", str(frozen_plan_made["subs"]))
    monkeypatch.setenv("QASHIFT_TESTSETS", str(tmp_path / "sets"))
    monkeypatch.setenv("QASHIFT_FROZEN", str(tmp_path / "frozen"))
    monkeypatch.setenv("QASHIFT_WORKSPACE", str(tmp_path / "clean"))
    return {"plan": tmp_path / "plan.yaml", "table": tmp_path / "plan.csv",
            "before": frozen_plan_made["before"], "frozen": tmp_path / "frozen"}


def test_a_frozen_system_runs_on_a_clean_workspace_without_training(frozen_plan):
    listed = run("qashift", "systems")
    assert listed.returncode == 0, listed.stderr
    assert all(name in listed.stdout for name in SYSTEMS) and "frozen" in listed.stdout
    status = run("qashift", "study", "status", str(frozen_plan["plan"]), "--table",
                 str(frozen_plan["table"]))
    assert "trained 2" in status.stdout and "0 cells to go" in status.stdout, status.stdout
    workspace = Path(os.environ["QASHIFT_WORKSPACE"])
    manifest = json.loads((frozen_plan["frozen"] / "words" / "tiny-train" / "s0" /
                           "manifest.json").read_text())
    unpacked = workspace / "models" / manifest["system"]["weights_digest"]
    assert not unpacked.exists()  # what is trained is told from manifests: nothing unpacked
    for name in SYSTEMS:
        again = score(name)
        assert again["f1"] == frozen_plan["before"][name]["f1"] and not again["cached"]
    assert nothing_trained(workspace)
    assert manifest["system"]["system"] == SYSTEMS[0]
    assert set(manifest["files"]) == {"weights.txt", "vocabulary.txt"}
    # the vocabulary is stored packed; the system ran from its unpacked copy in models/
    weights = frozen_plan["frozen"] / "words" / "tiny-train" / "s0" / "weights"
    assert sorted(p.name for p in weights.iterdir()) == ["vocabulary.txt.xz", "weights.txt"]
    assert set(manifest["packed"]) == {"vocabulary.txt"}
    assert manifest["stored_bytes"] < manifest["bytes"] / 4
    assert sorted(p.name for p in unpacked.iterdir()) == ["vocabulary.txt", "weights.txt"]
    assert manifest["scores"]["tiny-test"]["f1"] == pytest.approx(
        frozen_plan["before"][SYSTEMS[0]]["f1"]["value"], abs=1e-4)
    frozen_again = run("qashift", "study", "freeze", str(frozen_plan["plan"]))
    assert "0 systems frozen, 2 already frozen" in frozen_again.stdout  # nothing trained here


def test_freezing_again_brings_a_frozen_manifest_up_to_its_table(frozen_plan):
    """Sets scored after a system was frozen (here, from frozen/ on a clean workspace, or on
    another machine) reach its manifest when the plan is frozen again with its table."""
    path = frozen_plan["frozen"] / "words" / "tiny-train" / "s0" / "manifest.json"
    stale = json.loads(path.read_text())
    scored = stale.pop("scores")
    path.write_text(json.dumps({**stale, "scores": {}}))
    done = run("qashift", "study", "freeze", str(frozen_plan["plan"]), "--table",
               str(frozen_plan["table"]))
    assert done.returncode == 0 and "0 systems frozen, 2 already frozen" in done.stdout
    assert json.loads(path.read_text())["scores"] == scored
    assert score(SYSTEMS[0])["n"] > 0  # the manifest still verifies: its weights are untouched


def test_freezing_with_a_table_writes_the_table_its_manifests_state(frozen_plan, tmp_path,
                                                                     monkeypatch):
    """A table written before the store scored more (another controller, an earlier `study
    table`) is brought up to the store as the plan is frozen, so a new manifest's headline
    scores are its table's rows."""
    monkeypatch.setenv("QASHIFT_WORKSPACE", str(tmp_path / "workspace"))  # where it trained
    path = frozen_plan["table"]
    with path.open() as f:
        rows = list(csv.DictReader(f))
    with path.open("w", newline="") as f:  # as written before the second system was scored
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(r for r in rows if r["model"] != SYSTEMS[1])
    second = frozen_plan["frozen"] / "words" / "tiny-train" / "s1"
    subprocess.run(["chmod", "-R", "u+w", str(second)], check=True)
    shutil.rmtree(second)
    done = run("qashift", "study", "freeze", str(frozen_plan["plan"]), "--table", str(path))
    assert done.returncode == 0 and "1 systems frozen, 1 already frozen" in done.stdout, done
    with path.open() as f:
        tabled = {(r["testset"], r["metric"]): float(r["value"]) for r in csv.DictReader(f)
                  if r["model"] == SYSTEMS[1]}
    stated = json.loads((second / "manifest.json").read_text())["scores"]
    assert tabled and {(t, m): s[m] for t, s in stated.items() for m in ("em", "f1")} == tabled


def test_a_system_two_studies_share_states_the_sets_of_both(frozen_plan, dev_raw, tmp_path):
    """A second study reuses a frozen system and scores it on another set (as the extra-data
    study reuses the population's base-split systems): freezing either study keeps the sets
    the other's table gave the manifest."""
    write_testset(Path(os.environ["QASHIFT_TESTSETS"]), "other-test",
                  {"version": "1.1", "data": dev_raw["data"][2:4]})
    plan, table = tmp_path / "other.yaml", tmp_path / "other.csv"
    plan.write_text("id: other\nname: other\nsplit: tiny-train\ntestsets: [other-test]\n"
                    "approaches:\n  words: {settings: [{}], seeds: [0]}\n")
    assert run("qashift", "study", "run", str(plan), "--runner", "local", "--table",
               str(table)).returncode == 0
    done = run("qashift", "study", "freeze", str(plan), "--table", str(table))
    assert done.returncode == 0 and "0 systems frozen, 1 already frozen" in done.stdout, done
    path = frozen_plan["frozen"] / "words" / "tiny-train" / "s0" / "manifest.json"
    stated = json.loads(path.read_text())["scores"]
    with table.open() as f:
        other = {r["metric"]: float(r["value"]) for r in csv.DictReader(f)}
    assert set(stated) == {"tiny-test", "other-test"}
    assert stated["other-test"]["f1"] == pytest.approx(other["f1"], abs=1e-4)
    assert stated["tiny-test"]["f1"] == pytest.approx(
        frozen_plan["before"][SYSTEMS[0]]["f1"]["value"], abs=1e-4)
    again = run("qashift", "study", "freeze", str(frozen_plan["plan"]), "--table",
                str(frozen_plan["table"]))
    assert again.returncode == 0, again.stderr
    assert json.loads(path.read_text())["scores"] == stated


@pytest.mark.parametrize("tamper, why", [
    (lambda w: (w / "weights.txt").write_text("tampered"),
     r"weights/weights.txt does not match its sha256 in the manifest"),
    (lambda w: (w / "extra.json").write_text("{}"), r"weights/extra.json is not in its manifest"),
    (lambda w: (w / "weights.txt").unlink(), r"weights/weights.txt is missing"),
    (lambda w: ((w / "weights.txt").unlink(), (w / "weights.txt").symlink_to("/etc/hostname")),
     r"weights.txt is a link"),
    (lambda w: (w / "vocabulary.txt.xz").write_bytes(lzma.compress(b"tampered")),
     r"weights/vocabulary.txt.xz does not match its sha256 in the manifest"),
    (lambda w: (w / "vocabulary.txt").write_text("tampered"),
     r"weights/vocabulary.txt is not in its manifest"),
])
def test_a_tampered_frozen_system_is_refused_naming_the_file(frozen_plan, tamper, why):
    weights = frozen_plan["frozen"] / "words" / "tiny-train" / "s0" / "weights"
    unseal(weights)
    tamper(weights)
    done = run("evaluate", "-b", SYSTEMS[0], "-t", "tiny-test", "--runner", "local")
    assert done.returncode != 0
    [line] = [x for x in done.stderr.splitlines() if x.startswith("error")]
    assert __import__("re").search(why, line), line
    assert score(SYSTEMS[1])["n"] > 0  # the other system is untouched


@pytest.mark.parametrize("packing, why", [
    (lambda size: lzma.compress(os.urandom(size)), r"does not unpack to the sha256 in its "
                                                   r"manifest"),
    (lambda size: lzma.compress(os.urandom(2 * size)), r"cannot be unpacked \(it does not "
                                                       r"unpack to its [\d,]+ bytes\)"),
    (lambda size: os.urandom(size // 10), r"cannot be unpacked"),
], ids=["other-bytes", "more-bytes", "not-xz"])
def test_a_packed_file_that_unpacks_to_other_bytes_is_refused_naming_it(frozen_plan, packing,
                                                                        why):
    """A packed file and its manifest entry replaced together (so the stored file matches
    its entry, within the ratio its declared size may have to it): the unpacked bytes must
    still be the ones the system was trained to, and never more than its stated size is
    unpacked."""
    folder = frozen_plan["frozen"] / "words" / "tiny-train" / "s0"
    unseal(folder / "weights")
    manifest = json.loads((folder / "manifest.json").read_text())
    packed = packing(manifest["packed"]["vocabulary.txt"]["size"])
    (folder / "weights" / "vocabulary.txt.xz").write_bytes(packed)
    manifest["packed"]["vocabulary.txt"].update(sha256=hashlib.sha256(packed).hexdigest(),
                                                bytes=len(packed))
    (folder / "manifest.json").write_text(json.dumps(manifest))
    done = run("evaluate", "-b", SYSTEMS[0], "-t", "tiny-test", "--runner", "local")
    assert done.returncode != 0
    [line] = [x for x in done.stderr.splitlines() if x.startswith("error")]
    assert "weights/vocabulary.txt.xz" in line and __import__("re").search(why, line), line
    assert nothing_trained(Path(os.environ["QASHIFT_WORKSPACE"]))
    assert score(SYSTEMS[1])["n"] > 0  # the other system is untouched


def test_a_manifest_with_a_malformed_packed_entry_is_refused_naming_it(frozen_plan):
    path = frozen_plan["frozen"] / "words" / "tiny-train" / "s0" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["packed"]["vocabulary.txt"]["size"] = "all of it"
    path.write_text(json.dumps(manifest))
    done = run("evaluate", "-b", SYSTEMS[0], "-t", "tiny-test", "--runner", "local")
    [line] = [x for x in done.stderr.splitlines() if x.startswith("error")]
    assert done.returncode != 0 and f"{path} is not a frozen-system manifest" in line, line


def test_freezing_again_packs_a_system_frozen_unpacked(frozen_plan):
    """An artifact written before its files were packed (every file as the approach wrote
    it) runs as it is, and freezing the plan again packs it, keeping its files' sha256, its
    weights digest and its scores."""
    folder = frozen_plan["frozen"] / "words" / "tiny-train" / "s0"
    packed_manifest = json.loads((folder / "manifest.json").read_text())
    weights = folder / "weights"
    unseal(weights)
    (weights / "vocabulary.txt").write_bytes(
        lzma.decompress((weights / "vocabulary.txt.xz").read_bytes()))
    (weights / "vocabulary.txt.xz").unlink()
    old = {k: v for k, v in packed_manifest.items() if k not in ("packed", "stored_bytes")}
    (folder / "manifest.json").write_text(json.dumps(old))
    assert score(SYSTEMS[0])["f1"] == frozen_plan["before"][SYSTEMS[0]]["f1"]
    done = run("qashift", "study", "freeze", str(frozen_plan["plan"]))
    assert done.returncode == 0 and "0 systems frozen, 2 already frozen" in done.stdout, done
    assert sorted(p.name for p in weights.iterdir()) == ["vocabulary.txt.xz", "weights.txt"]
    assert json.loads((folder / "manifest.json").read_text()) == packed_manifest
    assert score(SYSTEMS[0])["f1"] == frozen_plan["before"][SYSTEMS[0]]["f1"]


def four_frozen(dev_raw, tmp_path: Path, monkeypatch) -> tuple[Path, Path, Path]:
    """Four frozen `words` systems scored on a small squad-dev-heldout into a table, and a
    clean workspace: (the test-set root, the table, the plan)."""
    sets = Path(os.environ["QASHIFT_TESTSETS"])
    write_testset(sets, "squad-dev-heldout", {"version": "1.1", "data": dev_raw["data"][2:4]},
                  reference="squad-dev-heldout")
    table = tmp_path / "four.csv"
    plan = words_frozen(tmp_path, monkeypatch, "squad-dev-heldout",
                        "{settings: [{}, {word: 1}, {word: 2}, {word: 4}]}", table)
    monkeypatch.setenv("QASHIFT_WORKSPACE", str(tmp_path / "clean"))
    return sets, table, plan


def test_a_new_test_set_is_scored_by_every_frozen_system_with_one_command(
        words, dev_raw, tmp_path, monkeypatch):
    """Four frozen systems (each answering with another word of the passage), a clean
    workspace, a test-set folder added: one command scores them all on it, adds it to the
    table and fits its trend against the held-out set."""
    sets, table, plan = four_frozen(dev_raw, tmp_path, monkeypatch)
    with open(table) as handle:  # and a row of a system this plan no longer makes
        before = list(csv.DictReader(handle))
    gone = dict(before[0], model="words@tiny-train/s0/hgone")
    with open(table, "a", newline="") as handle:
        csv.DictWriter(handle, fieldnames=list(gone)).writerow(gone)
    write_testset(sets, "brand-new", {"version": "1.1", "data": dev_raw["data"][4:6]},
                  reference="squad-dev-heldout")
    untouched = table.read_bytes()
    args = ["qashift", "population", "--table", str(table), "--plan", str(plan), "--score",
            "brand-new", "--runner", "local", "--bootstrap", "0"]
    first = run(*args)  # into the store only: the table is left as it is
    assert first.returncode == 0, first.stderr
    assert re.search(r"CPU time of this run: \d+\.\d min in 4 cells' processes, "
                     r"0\.0 min in 0 preparations", first.stderr)  # the words prepare nothing
    assert "trend of brand-new against squad-dev-heldout over 4 systems" in first.stdout
    assert table.read_bytes() == untouched and "is unchanged" in first.stderr
    assert max(map(len, first.stdout.splitlines())) <= 120
    done = run(*args, "--write-table", "--out", str(tmp_path / "fig"))
    assert done.returncode == 0, done.stderr
    assert "8 rows of brand-new written" in done.stderr  # EM and F1 of 4 systems, found stored
    assert "0 cells' processes" in done.stderr
    with open(table) as handle:
        after = list(csv.DictReader(handle))
    rows = [r for r in after if r["testset"] == "brand-new"]
    assert len({r["model"] for r in rows}) == 4
    assert [r for r in after if r["testset"] != "brand-new"] == sorted(
        [*before, gone], key=lambda r: (r["model"], r["testset"], r["metric"]))  # all kept
    assert "trend of brand-new against squad-dev-heldout" in done.stdout
    assert (tmp_path / "fig" / "population-trend-brand-new.png").is_file()
    assert nothing_trained(tmp_path / "clean")
    # the plan's own run, which does not list the new set, writes its table again keeping it
    again = run("qashift", "study", "run", str(plan), "--table", str(table), "--runner", "local")
    assert again.returncode == 0, again.stderr
    with open(table) as handle:
        assert [r for r in csv.DictReader(handle) if r["testset"] == "brand-new"] == rows
    assert nothing_trained(tmp_path / "clean")


def test_a_new_set_is_scored_by_a_chosen_few_on_a_sample_of_its_questions(
        words, dev_raw, tmp_path, monkeypatch):
    """--per-approach, --systems and --limit choose what is scored: the first N runnable
    systems, the ids matching a pattern, a seeded sample of each set's questions (stored as
    samples, never the cells' results, never in the table); a name that chooses nothing, or
    a table asked for from a sample, is one line."""
    sets, table, plan = four_frozen(dev_raw, tmp_path, monkeypatch)
    write_testset(sets, "brand-new", {"version": "1.1", "data": dev_raw["data"][4:6]},
                  reference="squad-dev-heldout")
    untouched = table.read_bytes()
    base = ["qashift", "population", "--table", str(table), "--plan", str(plan), "--score",
            "brand-new", "--runner", "local", "--bootstrap", "0"]
    done = run(*base, "--per-approach", "3", "--limit", "20")
    assert done.returncode == 0, done.stderr
    assert "over 3 systems, 20 questions each" in done.stdout
    store = Store(tmp_path / "clean")
    runs = [r for r in store.results() if r["testset"] == "brand-new"]
    assert len(runs) == 3 and {r["n"] for r in runs} == {20}
    assert all(json.loads(r["options"]) == {"limit": 20, "seed": 0} for r in runs)
    assert table.read_bytes() == untouched
    first = study.load(plan).trainings[0].system_id
    one = run(*base, "--systems", first)
    assert one.returncode == 0 and "over 1 system " in one.stdout
    assert "no trend" in one.stdout
    for extra, says in ((["--approach", "nope"], "no approach 'nope' in the plan"),
                        (["--systems", "nope*"], "no system 'nope*' in the plan"),
                        (["--limit", "5", "--write-table"], "--write-table takes full runs")):
        refused = run(*base, *extra)
        assert refused.returncode != 0 and says in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    alone = run("qashift", "population", "--per-approach", "1")
    assert alone.returncode != 0 and "give --score TESTSET" in alone.stderr


def test_scoring_frozen_systems_saves_after_each_system_whose_cells_end(
        words, tmp_path, monkeypatch):
    """`score_frozen` calls `saved` once a system's cells have all ended, one of them newly
    scored, so a long run's table can follow it, group by group: the two systems of one
    approach are scored together on each set (`pipeline.group`), so they end together and
    both calls see all four cells; a run that finds every cell stored calls it never."""
    plan = words_frozen(tmp_path, monkeypatch, "tiny-test", "{settings: [{}, {word: 2}]}")
    store = Store(tmp_path / "clean")
    sets = [testsets.get("tiny-test"), testsets.get("tiny-train")]
    seen = []

    def saved() -> None:
        seen.append(sorted({(r["bundle"], r["testset"]) for r in store.results()}))

    found = study.load(plan)
    done, skipped = study.score_frozen(found, sets, Dispatcher("local"), store, parallel=1,
                                       saved=saved)
    first, second = (job.system_id for job in found.trainings)
    assert (done, skipped) == (4, [])
    both = sorted((s, t) for s in (first, second) for t in ("tiny-test", "tiny-train"))
    assert seen == [both, both]
    seen.clear()
    assert study.score_frozen(found, sets, Dispatcher("local"), store, saved=saved)[0] == 4
    assert seen == []


def test_strata_score_the_whole_split_systems_once_and_keep_them_in_a_table(
        words, dev_raw, tmp_path, monkeypatch):
    """`strata --score PLAN`: on a clean workspace, the plan's frozen systems trained on the
    whole split (not its smaller train sizes) are scored on its new set and that set's
    reference, nothing is trained, and the stratum table then holds them, so a run on
    another empty workspace scores nothing again."""
    sets = Path(os.environ["QASHIFT_TESTSETS"])
    write_testset(sets, "tiny-ref", {"version": "1.1", "data": dev_raw["data"][2:3]})
    write_testset(sets, "tiny-new", {"version": "1.1", "data": dev_raw["data"][3:4]},
                  reference="tiny-ref")
    plan = words_frozen(tmp_path, monkeypatch, "tiny-test, tiny-new",
                        "{settings: [{}, {word: 2}], sizes: [null, 40]}")
    whole = ("words@tiny-train/s0", "words@tiny-train/s0/h")
    clean, table = tmp_path / "clean", tmp_path / "strata.csv"
    monkeypatch.setenv("QASHIFT_WORKSPACE", str(clean))
    done = run("qashift", "strata", "--score", str(plan), "-t", "tiny-new", "--table",
               str(table), "--runner", "local", "--out", str(tmp_path / "one"), "-j", "1")
    assert done.returncode == 0, done.stderr
    assert "2 systems trained on a whole split, on tiny-ref, tiny-new" in done.stderr
    assert "4 cells scored or found" in done.stderr
    assert re.search(r"CPU time of this run: \d+\.\d min in 4 cells' processes, "
                     r"0\.0 min in 0 preparations", done.stderr)  # the words prepare nothing
    written = re.findall(r"strata\.csv: (\d) \(system, set\) pairs", done.stderr)
    assert written == ["4"]  # as the systems' cells end: scored together, they end together
    scored = {(r["bundle"], r["testset"]) for r in Store(clean).results()}
    assert len(scored) == 4 and all(b.startswith(whole) and "~" not in b for b, _ in scored)
    assert nothing_trained(clean)
    pairs = {(r["system"], r["testset"]) for r in strata.read_table(table)}
    assert pairs == scored
    drops = (tmp_path / "one" / "drops.csv").read_text()
    assert sum(line.startswith(whole) for line in drops.splitlines()) == 2 * 6

    monkeypatch.setenv("QASHIFT_WORKSPACE", str(tmp_path / "again"))
    done = run("qashift", "strata", "--score", str(plan), "-t", "tiny-new", "--table",
               str(table), "--runner", "local", "--out", str(tmp_path / "two"))
    assert done.returncode == 0, done.stderr
    assert "0 cells scored or found" in done.stderr
    assert not Store(tmp_path / "again").exists() or not Store(tmp_path / "again").results()
    assert (tmp_path / "two" / "drops.csv").read_text() == drops
    # a pair whose features changed since is scored again
    outdate_strata_rows(table, f"{whole[0]},tiny-new,")
    monkeypatch.setenv("QASHIFT_WORKSPACE", str(tmp_path / "third"))
    done = run("qashift", "strata", "--score", str(plan), "-t", "tiny-new", "--table",
               str(table), "--runner", "local", "--out", str(tmp_path / "three"))
    assert done.returncode == 0, done.stderr
    assert "1 cells scored or found" in done.stderr
    assert {(r["bundle"], r["testset"]) for r in Store(tmp_path / "third").results()} == {
        (whole[0], "tiny-new")}
    assert (tmp_path / "three" / "drops.csv").read_text() == drops


FROZEN_TABLES = tuple(REPO / "results" / name for name in (
    "population.csv", "extra-data.csv", "generative.csv", "reproduction.csv"))


def table_rows() -> list[dict]:
    """Every row of the committed tables whose systems are frozen in `frozen/`."""
    rows = []
    for path in FROZEN_TABLES:
        with open(path) as handle:
            rows += list(csv.DictReader(handle))
    return rows


def frozen_manifests() -> list[Path]:
    return sorted((REPO / "frozen").glob("*/*/*/manifest.json"))


def frozen_system(manifest: Path) -> str:
    """The system id a frozen manifest holds."""
    return json.loads(manifest.read_text())["system"]["system"]


REPRODUCTION = REPO / "results" / "reproduction.csv"  # studies/reproduction.yaml's table


def reproduced_systems() -> list[tuple[Path, str]]:
    """(frozen manifest, test set) of each system of the reproduction study's table: one
    committed system of each approach, scored there on a small held-out sample."""
    with open(REPRODUCTION) as handle:
        pairs = {(r["model"], r["testset"]) for r in csv.DictReader(handle)}
    folders = {frozen_system(m): m for m in frozen_manifests()}
    return sorted((folders[system], testset) for system, testset in pairs)


def test_every_frozen_system_is_in_a_committed_table_with_the_scores_its_manifest_states():
    """A manifest's headline scores are its system's rows of the committed table, all of them,
    and every row of a frozen system's name is of its weights and train cell (a system frozen
    while it was still being scored has rows on the sets scored by then)."""
    rows = table_rows()
    values = {(r["model"], r["testset"], r["metric"]): float(r["value"]) for r in rows}
    for manifest in frozen_manifests():
        frozen = json.loads(manifest.read_text())
        system = frozen["system"]["system"]
        mine = [r for r in rows if r["model"] == system]
        assert mine or not frozen["scores"], manifest
        assert {(r["weights_digest"], r["train_key"]) for r in mine} <= {
            (frozen["system"]["weights_digest"], frozen["system"]["key"])}, manifest
        tabled = {testset for model, testset, _ in values if model == system}
        assert set(frozen["scores"]) == tabled, manifest  # a re-freeze brings them up to date
        for testset, scores in frozen["scores"].items():
            for metric in ("em", "f1"):
                assert scores[metric] == pytest.approx(values[system, testset, metric],
                                                       abs=1e-4), (manifest, testset)


def preparation_of(approach: str) -> str:
    """What an approach's systems share on an input before they answer: its `prepare`
    command ('' for none), by which the reproduction below is split."""
    return bundles.from_folder(REPO / "submissions" / approach).prepare_command or ""


PREPARATIONS = {"spacy": "python3 -m span_readers.prepared {input} {prepared}",
                "spacy-and-encoder": "python3 -m span_readers.prepared --encoder {input} "
                                     "{prepared}", "none": ""}


def test_the_reproduction_below_covers_every_approach_with_a_frozen_system():
    chosen = reproduced_systems()
    assert sorted(m.parts[-4] for m, _ in chosen) == sorted({m.parts[-4]
                                                             for m in frozen_manifests()})
    assert {preparation_of(m.parts[-4]) for m, _ in chosen} <= set(PREPARATIONS.values())


@pytest.mark.slow
@pytest.mark.parametrize("preparation", sorted(PREPARATIONS))
def test_a_committed_frozen_system_of_each_approach_gives_its_table_score_on_a_clean_workspace(
        workspace, monkeypatch, preparation):
    """What a clean clone promises: a system of each approach, run from the repository's
    `frozen/` with an empty workspace, trains nothing and gives its committed table's score
    (within 0.1 on another CPU) on the reproduction study's 150 held-out questions (the
    systems' large sets are a study's work, not a test's). One `evaluate` per set
    scores the systems whose approaches share a preparation, as a user would: the preparation
    of the set is made once, for every system that declares it, and two cells run at once,
    each held to a core of its own (a reader that starts a thread per core it may use starts
    one, and one OpenMP thread for those that do not: beside the other test worker, two
    threads run several times slower)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    chosen = [(m, t) for m, t in reproduced_systems()
              if preparation_of(m.parts[-4]) == PREPARATIONS[preparation]]
    assert chosen
    values = {(r["model"], r["testset"], r["metric"]): float(r["value"]) for r in table_rows()}
    by_set: dict[str, list[str]] = {}
    for manifest, testset in chosen:
        by_set.setdefault(testset, []).append(frozen_system(manifest))
    wrong = []
    for testset, systems in sorted(by_set.items()):
        done = run("evaluate", *[w for s in systems for w in ("-b", s)], "-t", testset,
                   "--runner", "local", "-j", "2", "--json", timeout=600 * len(systems))
        assert done.returncode == 0, done.stderr[-3000:]
        results = json.loads(done.stdout)["results"]
        assert sorted(r["bundle"] for r in results) == sorted(systems)
        for result in results:
            for metric in ("em", "f1"):
                want = values[result["bundle"], testset, metric]
                if abs(result[metric]["value"] - want) > 0.1:
                    wrong.append((result["bundle"], testset, metric, result[metric]["value"],
                                  want))
    assert not wrong, wrong
    assert nothing_trained(workspace)


def best_generative_reader() -> tuple[dict, Path]:
    """The row of results/generative.csv with the highest held-out F1, and its frozen folder."""
    rows = [r for r in table_rows() if r["approach"] == "generative-reader"
            and r["testset"] == "squad-dev-heldout" and r["metric"] == "f1"]
    best = max(rows, key=lambda r: float(r["value"]))
    [folder] = [m.parent for m in frozen_manifests() if frozen_system(m) == best["model"]]
    return best, folder


@pytest.mark.slow
def test_the_frozen_generative_readers_held_out_f1_beats_the_sliding_window_scored_there(
        workspace):
    """Generative submissions: the best generative reader of results/generative.csv (whose
    frozen system the test above runs on an empty workspace) has a held-out F1 in the table
    above the sliding window's, scored here on all of squad-dev-heldout."""
    best, _ = best_generative_reader()
    baseline = score("sliding-window", "squad-dev-heldout")
    assert float(best["value"]) > baseline["f1"]["value"], (best["value"], baseline["f1"])
    assert baseline["n"] == int(best["n"])


@pytest.mark.slow
def test_the_frozen_generative_reader_answers_alike_here_and_served(workspace, tmp_path,
                                                                    monkeypatch):
    """The same reader on the first six paragraphs of two held-out articles (80 questions)
    through the local backend and through `transformers serve` (a real server on
    the loopback address) serving its frozen weights folder under the approach's prompt and
    decoding: the same answers to every question. (One OpenMP thread on each side: beside
    the other test worker, two run several times slower.)"""
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    best, folder = best_generative_reader()
    held = testsets.get("squad-dev-heldout").load().raw
    sets, subs = tmp_path / "sets", tmp_path / "subs"
    shutil.copytree(REPO / "testsets", sets)
    shutil.copytree(REPO / "submissions", subs, ignore=shutil.ignore_patterns("__pycache__"))
    sample = few_of(held, 6)
    write_testset(sets, "heldout-sample", sample, reference="squad-dev-heldout")
    monkeypatch.setenv("QASHIFT_TESTSETS", str(sets))
    monkeypatch.setenv("QASHIFT_SUBMISSIONS", str(subs))
    server = Server(frozen.weights_of(folder, Store.open_default()), tmp_path / "access.log")
    allow_endpoints(tmp_path, monkeypatch, server.origin)
    try:
        write_served_twin(subs, "served", server, subs / "generative-reader")
        here = score(best["model"], "heldout-sample")
        served = score("served", "heldout-sample")
    finally:
        server.stop()
    store = Store.open_default()
    answers = {r["bundle"]: json.loads(store.get_object(r["predictions_sha256"]))
               for r in store.results() if r["testset"] == "heldout-sample"}
    assert answers[best["model"]] == answers["served"]
    assert here["f1"]["value"] == served["f1"]["value"] and here["n"] == served["n"]
    questions = sum(len(p["qas"]) for a in sample["data"] for p in a["paragraphs"])
    assert len(answers["served"]) == questions and server.completions_answered() > 0


def test_systems_lists_every_frozen_system_with_family_size_and_held_out_f1(workspace):
    """`qashift systems` on a clean clone: each committed system on a line of at most 120
    columns with its approach's family, the questions it trained on, and its F1 on the
    held-out set of its split as its manifest states it (extra-data splits: their parent's)."""
    listed = CliRunner().invoke(main, ["systems"])
    assert listed.exit_code == 0, listed.output
    lines = listed.stdout.splitlines()
    assert max(map(len, lines)) <= 120
    by_system = {line.split()[0]: line.split() for line in lines[1:]}
    manifests = frozen_manifests()
    assert len(by_system) == len(manifests) == 124
    for path in manifests:
        doc = json.loads(path.read_text())
        system, f1 = doc["system"]["system"], doc["scores"]["squad-dev-heldout"]["f1"]
        _, family, trained, shown, held_out, kept = by_system[system]
        assert family in ("feature-based", "non-pretrained", "pretrained", "prompted"), family
        assert int(trained) == (doc["system"]["train_size"] or
                                testsets.get(doc["system"]["split"]).questions)
        assert (float(shown), held_out, kept) == (round(f1, 2), "squad-dev-heldout", "frozen")


def test_bundles_list_counts_the_frozen_systems_of_each_approach_as_runnable(workspace):
    """An approach whose systems are frozen here is not 'blocked': its line says how many of
    its systems run, and the summary counts them."""
    listed = CliRunner().invoke(main, ["bundles", "list"])
    assert listed.exit_code == 0, listed.output
    lines = listed.stdout.splitlines()
    assert max(map(len, lines)) <= 120
    per_approach: dict[str, int] = {}
    for path in frozen_manifests():
        approach = json.loads(path.read_text())["system"]["approach"]
        per_approach[approach] = per_approach.get(approach, 0) + 1
    for approach, count in per_approach.items():
        [line] = [x for x in lines if x.split()[:1] == [approach]]
        assert line.split()[1:3] == ["approach", "trained"], line
        assert f"its {count} trained systems run" in line
    assert f"{sum(per_approach.values())} trained systems of {len(per_approach)} " \
           f"approaches" in lines[-1]


def test_a_frozen_system_with_a_hyperparameter_hash_is_found_by_its_id_on_an_empty_store(
        workspace):
    """The train cell of an id with /hHASH comes from the one folder the id names (the store
    holds none): its key is the manifest's; an id whose folder is empty is a one-line error."""
    hashed = [m for m in frozen_manifests() if "-h" in m.parent.name]
    assert hashed
    for manifest in hashed[:3]:
        system = json.loads(manifest.read_text())["system"]
        assert job_for(system["system"], Store(workspace)).key == system["key"]
    unknown = frozen_system(hashed[0]).rsplit("/h", 1)[0] + "/h00000000"
    with pytest.raises(UserError, match="hyperparameter hash cannot be undone"):
        job_for(unknown, Store(workspace))
