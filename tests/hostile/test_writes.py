"""Commands write only where they should: never inside the workspace, never through a link,
never over a file they did not make (a log file is appended to); `validate --pin` pins a
folder's own files only; a cell a spreadsheet would run as a formula reaches a CSV for
people as text."""

from __future__ import annotations

import csv
import json
import os
import sqlite3
import stat
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from analysis import figures, site
from analysis.site import export as site_export
from evaluator.cli.main import evaluate_cmd, main
from evaluator.core.errors import UserError
from evaluator.core.files import check_output_path, safe_cell, write_atomic
from evaluator.data.testsets import Dataset
from evaluator.pipeline.samples import write_samples
from tests.conftest import FIRST_WORD, REPO, tiny_registry, write_testset

SECOND_WORD = FIRST_WORD.replace('p["context"].split()[0]', 'p["context"].split()[1]')
FORMULAS = ["=HYPERLINK(\"http://x.example/\",\"click\")", "-1.5", "+SUM(A1:A9)", "@SUM(1)",
            "\tcmd", "-2+3+cmd|' /C calc'!A0", "1e5"]
SPREADSHEET = """import json, sys
doc = json.load(open(sys.argv[1]))
ids = [q["id"] for a in doc["data"] for p in a["paragraphs"] for q in p["qas"]]
json.dump({i: FORMULAS[n % len(FORMULAS)] for n, i in enumerate(ids)}, open(sys.argv[2], "w"))
""".replace("FORMULAS", repr(FORMULAS))  # a submission whose answers are formulas


@pytest.fixture
def two_cells(tmp_path, small_dev, monkeypatch, workspace) -> Path:
    """Two bundles scored on the same set, stored in the workspace: what `compare` pairs."""
    tiny_registry(tmp_path, monkeypatch, {"toy": small_dev},
                  {"first": FIRST_WORD, "second": SECOND_WORD, "sheet": SPREADSHEET})
    for bundle in ("first", "second", "sheet"):
        done = CliRunner().invoke(evaluate_cmd, ["-b", bundle, "-t", "toy", "--runner", "local"])
        assert done.exit_code == 0, done.output
    return workspace


def compare(*extra: str):
    return CliRunner().invoke(main, ["compare", "-b", "first", "-b", "second", "-t", "toy",
                                     "--bootstrap", "100", *extra])


def stored_cells(workspace: Path) -> int:
    with sqlite3.connect(workspace / "results.sqlite") as conn:
        return conn.execute("SELECT COUNT(*) FROM results").fetchone()[0]


def test_diff_onto_the_stores_index_is_refused_and_the_store_still_works(two_cells, tmp_path):
    index = two_cells / "results.sqlite"
    before = index.read_bytes()
    refused = compare("--diff", str(index))
    assert refused.exit_code != 0 and "inside the workspace" in refused.output
    assert len(refused.output.strip().splitlines()) == 1
    assert index.read_bytes() == before and stored_cells(two_cells) == 3
    for inside in (two_cells / "diff.csv", two_cells / "objects" / "diff.csv"):
        assert compare("--diff", str(inside)).exit_code != 0 and not inside.exists()
    link = tmp_path / "index-link.csv"  # outside, but leading into the workspace
    link.symlink_to(index)
    assert "inside the workspace" in compare("--diff", str(link)).output
    listed = CliRunner().invoke(main, ["results", "list"])
    assert listed.exit_code == 0 and "first" in listed.output and "second" in listed.output
    checked = CliRunner().invoke(main, ["store", "check"])
    assert checked.exit_code == 0, checked.output
    assert compare("--diff", str(tmp_path / "diff.csv")).exit_code == 0


def test_an_output_over_a_file_the_command_did_not_make_is_refused(two_cells, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("my own notes\n")
    refused = compare("--diff", str(notes))
    assert refused.exit_code != 0 and "already exists" in refused.output
    listed = CliRunner().invoke(main, ["results", "diff", "first", "second", "-t", "toy",
                                       "--out", str(notes)])
    assert listed.exit_code != 0 and "already exists" in listed.output
    assert notes.read_text() == "my own notes\n"
    other_table = tmp_path / "table.csv"
    other_table.write_text("model,testset,value\nm,t,1\n")
    assert compare("--diff", str(other_table)).exit_code != 0
    assert other_table.read_text() == "model,testset,value\nm,t,1\n"
    mine = tmp_path / "diff.csv"
    assert compare("--diff", str(mine)).exit_code == 0
    again = compare("--diff", str(mine))  # its own table: written again
    assert again.exit_code == 0, again.output
    assert CliRunner().invoke(main, ["results", "diff", "first", "second", "-t", "toy",
                                     "--out", str(mine)]).exit_code == 0


def test_an_output_that_is_a_link_is_refused_and_what_it_points_to_is_untouched(
        two_cells, tmp_path):
    elsewhere = tmp_path / "elsewhere.csv"
    elsewhere.write_text("id,group,gold,answer_a,em_a,f1_a,answer_b,em_b,f1_b\n")
    link = tmp_path / "link.csv"
    link.symlink_to(elsewhere)
    refused = compare("--diff", str(link))
    assert refused.exit_code != 0 and "is a link" in refused.output
    assert elsewhere.read_text().count("\n") == 1
    folder = tmp_path / "real"
    folder.mkdir()
    (tmp_path / "linked").symlink_to(folder)
    exported = CliRunner().invoke(main, ["results", "export", "first", "toy", "--out",
                                         str(tmp_path / "linked")])
    assert exported.exit_code != 0 and "is a link" in exported.output
    assert list(folder.iterdir()) == []


def test_write_atomic_replaces_a_link_at_its_target_and_never_follows_it(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    link = tmp_path / "out.txt"
    link.symlink_to(outside)
    write_atomic(link, b"new")
    assert outside.read_text() == "keep"
    assert not link.is_symlink() and link.read_text() == "new"


def test_figures_and_samples_replace_a_link_at_their_path_and_never_follow_it(tmp_path):
    """matplotlib and pyarrow open a path as they find it; the files are written whole
    through `write_atomic` instead, so a link left where one goes is replaced."""
    pytest.importorskip("pyarrow")
    outside, out = tmp_path / "outside", tmp_path / "out"
    outside.mkdir()
    out.mkdir()
    names = ["fig.png", "fig.pdf", "fig.svg", "first.toy.jsonl", "first.toy.parquet"]
    for name in names:
        (outside / name).write_text("keep")
        (out / name).symlink_to(outside / name)
    fig = figures.plt.figure()
    fig.add_subplot().plot([0, 1], [0, 1])
    figures.save(fig, out / "fig")
    raw = {"data": [{"title": "T", "paragraphs": [{"context": "a b", "qas": [
        {"id": "q1", "question": "?", "answers": [{"text": "a", "answer_start": 0}]}]}]}]}
    write_samples(Dataset(raw, (), ""), {"q1": "a"}, out, "first", "toy")
    assert {n: (outside / n).read_bytes() for n in names} == dict.fromkeys(names, b"keep")
    assert not [n for n in names if (out / n).is_symlink() or not (out / n).is_file()]
    assert (out / "fig.png").read_bytes().startswith(b"\x89PNG")
    assert json.loads((out / "first.toy.jsonl").read_text())["em"] == 1.0


def test_evaluate_refuses_an_output_folder_that_is_a_link_before_anything_runs(
        two_cells, tmp_path):
    """--output-path and --log-samples, and the figures/ and samples/ the first writes
    into: a link would take the files elsewhere."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "linked").symlink_to(elsewhere)
    for sub in ("figures", "samples"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / sub).symlink_to(elsewhere)
    for flags in (["--output-path", str(tmp_path / "linked")],
                  ["--log-samples", str(tmp_path / "linked")],
                  ["--output-path", str(tmp_path / "figures")],
                  ["--output-path", str(tmp_path / "samples")]):
        refused = CliRunner().invoke(main, ["evaluate", "-b", "first", "-t", "toy", "--rerun",
                                            "--runner", "local", *flags])
        assert refused.exit_code != 0 and "is a link" in refused.output, refused.output
        assert len(refused.output.strip().splitlines()) == 1
    assert list(elsewhere.iterdir()) == [] and stored_cells(two_cells) == 3


def test_a_log_file_is_appended_to_but_never_through_a_link_nor_in_the_workspace(
        two_cells, tmp_path):
    log = tmp_path / "run.log"
    earlier = "2026-12-01 20:47:21,123 INFO an earlier run\n"
    log.write_text(earlier)
    done = CliRunner().invoke(main, ["-v", "--log-file", str(log), "evaluate", "-b", "first",
                                     "-t", "toy", "--runner", "local"])
    assert done.exit_code == 0, done.output
    assert log.read_text().startswith(earlier) and log.read_text().count("\n") > 1
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    refused = CliRunner().invoke(main, ["--log-file", str(notes), "results", "list"])
    assert refused.exit_code != 0 and "already exists" in refused.output  # not a log
    assert notes.read_text() == "mine"
    link = tmp_path / "link.log"
    link.symlink_to(notes)
    refused = CliRunner().invoke(main, ["--log-file", str(link), "results", "list"])
    assert refused.exit_code != 0 and "is a link" in refused.output
    assert notes.read_text() == "mine"
    other = tmp_path / "other-workspace"
    for args in (["--log-file", str(other / "run.log"), "evaluate", "--workspace", str(other)],
                 ["evaluate", "--workspace", str(other), "--log-file", str(other / "run.log")]):
        refused = CliRunner().invoke(main, [*args, "-b", "first", "-t", "toy"])
        assert refused.exit_code != 0 and "inside the workspace" in refused.output
        assert not (other / "run.log").exists()


PLAN = str(REPO / "studies" / "population.yaml")
WRITERS = {  # every command that writes where a user names, with that place as {out}
    "compare --diff": ["compare", "-b", "a", "-b", "b", "-t", "t", "--diff", "{out}.csv"],
    "results diff --out": ["results", "diff", "a", "b", "-t", "t", "--out", "{out}.csv"],
    "results export": ["results", "export", "a", "t", "--out", "{out}"],
    "results samples": ["results", "samples", "--out", "{out}"],
    "figures": ["figures", "--out", "{out}"],
    "report": ["report", "--out", "{out}"],
    "reproduce": ["reproduce", "--out", "{out}"],
    "population": ["population", "--out", "{out}"],
    "concurrence": ["concurrence", "--out", "{out}"],
    "strata": ["strata", "--out", "{out}"],
    "strata --table": ["strata", "--out", "{elsewhere}", "--table", "{out}.csv"],
    "families": ["families", "--out", "{out}"],
    "extra-data --csv": ["extra-data", "--csv", "{out}.csv"],
    "study table": ["study", "table", PLAN, "--out", "{out}.csv"],
    "study matrix": ["study", "matrix", PLAN, "--out", "{out}.csv"],
    "study matrix --runs": ["study", "matrix", PLAN, "--out", "{elsewhere}.csv", "--runs",
                            "{out}.csv"],
    "evaluate --output-path": ["evaluate", "-b", "a", "-t", "t", "--output-path", "{out}"],
    "evaluate --log-samples": ["evaluate", "-b", "a", "-t", "t", "--log-samples", "{out}"],
    "evaluate --log-file": ["evaluate", "-b", "a", "-t", "t", "--log-file", "{out}.log"],
    "qashift --log-file": ["--log-file", "{out}.log", "results", "list"],
    "systems --table": ["systems", "--table", "{out}.csv"],
    "testsets stats --csv": ["testsets", "stats", "t", "--csv", "{out}.csv"],
    "images wheelhouse": ["images", "wheelhouse", "{out}"],
}


@pytest.mark.parametrize("command", sorted(WRITERS))
def test_no_command_writes_inside_the_workspace(command, workspace, tmp_path):
    """Each command refuses a place in the workspace at once, in one line, before any work."""
    workspace.mkdir(parents=True)
    target = workspace / "out"
    args = [a.format(out=target, elsewhere=tmp_path / "elsewhere") for a in WRITERS[command]]
    refused = CliRunner().invoke(main, args)
    assert refused.exit_code != 0, refused.output
    assert "inside the workspace" in refused.output
    assert sorted(p.name for p in workspace.iterdir()) == []


def test_the_output_rule_for_folders_and_files(workspace, tmp_path):
    workspace.mkdir(parents=True)
    assert check_output_path(tmp_path / "new.csv", what="--out", columns=["id"]) == \
        tmp_path / "new.csv"
    (tmp_path / "empty.csv").touch()  # nothing in it to lose
    check_output_path(tmp_path / "empty.csv", what="--out", columns=["id"])
    (tmp_path / "ours.csv").write_text("\ufeffid,extra\n1,2\n")  # a spreadsheet saved it
    check_output_path(tmp_path / "ours.csv", what="--out", columns=["id"])
    check_output_path(tmp_path, what="--out", folder=True)  # a folder is written into
    with pytest.raises(UserError, match="not a folder"):
        check_output_path(tmp_path / "ours.csv", what="--out", folder=True)
    with pytest.raises(UserError, match="not a file"):
        check_output_path(tmp_path, what="--out", columns=["id"])
    with pytest.raises(UserError, match="already exists"):
        check_output_path(tmp_path / "ours.csv", what="--out")  # no table of its own
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    with pytest.raises(UserError):
        check_output_path(tmp_path / "loop", what="--out", columns=["id"])


def test_report_refuses_a_folder_of_other_files_and_replaces_links_in_an_earlier_site(
        tmp_path):
    """An earlier site's folder is emptied of what the site writes: a link there is removed,
    never followed (what it points to stays)."""
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "precious.txt").write_text("mine")
    out = tmp_path / "site"
    out.mkdir()
    (out / site.MARKER).write_text("earlier site\n")
    (out / "figures").symlink_to(keep)
    site._prepare(out)
    assert (keep / "precious.txt").read_text() == "mine" and not (out / "figures").exists()
    with pytest.raises(site.SiteError, match="holds no earlier site"):
        site._prepare(keep)


def link_away(folder: Path, name: str, outside: Path) -> Path:
    """Move the folder's file `name` to `outside` and leave a link to it in its place."""
    outside.parent.mkdir(parents=True, exist_ok=True)
    (folder / name).rename(outside)
    (folder / name).symlink_to(outside)
    return outside


@pytest.mark.parametrize("name", ["testset.yaml", "data.json"])
def test_pin_through_a_link_is_refused_and_the_outside_file_is_untouched(
        name, tmp_path, small_dev, monkeypatch):
    folder = write_testset(tmp_path / "sets", "toy", small_dev)
    outside = link_away(folder, name, tmp_path / "elsewhere" / name)
    before = {p.name: p.read_bytes() for p in (outside, folder / "testset.yaml")}
    refused = CliRunner().invoke(main, ["validate", "--pin", str(folder)])
    assert refused.exit_code != 0 and "is a link" in refused.output
    assert len(refused.output.strip().splitlines()) == 1
    assert {p.name: p.read_bytes() for p in (outside, folder / "testset.yaml")} == before
    assert (folder / name).is_symlink()


def test_pin_writes_the_folders_own_file_in_place_keeping_its_mode(tmp_path, small_dev):
    folder = write_testset(tmp_path / "sets", "toy", small_dev)
    (folder / "testset.yaml").chmod(0o640)
    pinned = CliRunner().invoke(main, ["validate", "--pin", str(folder)])
    assert pinned.exit_code == 0, pinned.output
    assert "sha256: " in (folder / "testset.yaml").read_text()
    assert stat.S_IMODE((folder / "testset.yaml").stat().st_mode) == 0o640
    assert not [p for p in folder.iterdir() if p.name.startswith(".partial-")]


@pytest.mark.parametrize("cell, shown", [
    ("=1+1", "'=1+1"), ("+cmd", "'+cmd"), ("-cmd", "'-cmd"), ("@SUM(A1)", "'@SUM(A1)"),
    ("\tx", "'\tx"), ("\rx", "'\rx"), ("-1.5", "-1.5"), ("+3", "+3"), ("-2e-3", "-2e-3"),
    ("-1+2", "'-1+2"), ("plain", "plain"), ("", ""), (-1.5, -1.5), (None, None)])
def test_a_cell_a_spreadsheet_would_run_is_written_as_text(cell, shown):
    assert safe_cell(cell) == shown


def test_a_formula_answer_is_neutralised_in_the_diff_csv(two_cells, tmp_path):
    diff = tmp_path / "diff.csv"
    done = CliRunner().invoke(main, ["compare", "-b", "sheet", "-b", "first", "-t", "toy",
                                     "--bootstrap", "100", "--diff", str(diff), "--json"])
    assert done.exit_code == 0, done.output
    with diff.open(newline="") as handle:
        answers = [row["answer_a"] for row in csv.DictReader(handle)]
    assert "'=HYPERLINK(\"http://x.example/\",\"click\")" in answers
    assert {"'+SUM(A1:A9)", "'@SUM(1)", "'\tcmd", "'-2+3+cmd|' /C calc'!A0"} <= set(answers)
    assert {"-1.5", "1e5"} <= set(answers)  # numbers stay numbers
    assert not [a for a in answers if a[:1] in ("=", "+", "@", "\t")]
    listed = CliRunner().invoke(main, ["results", "diff", "sheet", "first", "-t", "toy"])
    assert "=HYPERLINK" in listed.output and "'=HYPERLINK" not in listed.output  # a terminal


def test_the_sites_csv_for_people_neutralises_text_and_its_json_keeps_it(tmp_path):
    table = pd.DataFrame({"model": ["=cmd", "ok"], "message": ["@x", "-1.5"],
                          "value": [-1.5, 2.0], "n": [1, 2]})
    site_export.write_table(tmp_path / "failures", table)
    assert (tmp_path / "failures.csv").read_text() == \
        "model,message,value,n\n'=cmd,'@x,-1.5,1\nok,-1.5,2.0,2\n"
    assert json.loads((tmp_path / "failures.json").read_text())[0]["model"] == "=cmd"
    assert oct(os.stat(tmp_path / "failures.csv").st_mode & 0o777) == oct(0o644)
