"""`evaluate` end to end: official numbers with intervals, caching, JSON output, and a clear
one-line error (exit status != 0, no result stored) for every kind of bad input."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import click
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import evaluator.cli.evaluate as cli_evaluate
import evaluator.cli.main as cli_main
from evaluator.cli.main import evaluate_cmd, main
from evaluator.core.errors import UserError
from evaluator.data import testsets
from evaluator.store.queries import is_sample
from evaluator.store.store import Store
from tests.conftest import (
    FIRST_WORD,
    REPO,
    SLIDING_WINDOW,
    tiny_registry,
    write_command_bundle,
    write_testset,
)


def run_evaluate(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """The real console script, as a user runs it."""
    return subprocess.run(["evaluate", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


def stored_results(workspace: Path) -> int:
    db = workspace / "results.sqlite"
    if not db.exists():
        return 0
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT COUNT(*) FROM results").fetchone()[0]


def test_bert_ensemble_on_squad_dev_gives_the_official_scores(workspace):
    proc = run_evaluate("--bundle", "bert-ensemble", "--testset", "squad-dev", "--json")
    assert proc.returncode == 0, proc.stderr
    [cell] = json.loads(proc.stdout)["results"]
    assert cell["bundle"] == "bert-ensemble" and cell["testset"] == "squad-dev"
    assert (round(cell["em"]["value"], 4), round(cell["f1"]["value"], 4)) == (86.2062, 92.1956)
    assert cell["em"]["method"] == "clopper-pearson" and cell["f1"]["method"] == "student-t"
    assert cell["em"]["lo"] < cell["em"]["value"] < cell["em"]["hi"]
    assert cell["em"]["level"] == 0.95 and cell["n"] == 10570 and cell["missing"] == 0
    assert cell["cached"] is False
    assert Path(cell["predictions"]).is_file()
    again = json.loads(run_evaluate("-b", "bert-ensemble", "-t", "squad-dev", "--json").stdout)
    assert again["results"][0]["cached"] is True
    assert again["results"][0]["em"] == cell["em"]
    assert stored_results(workspace) == 1


def test_rerun_recomputes_and_level_changes_only_the_interval(workspace):
    first = json.loads(run_evaluate("-b", "match-lstm-ensemble", "-t", "squad-dev",
                                    "--json").stdout)["results"][0]
    wide = json.loads(run_evaluate("-b", "match-lstm-ensemble", "-t", "squad-dev", "--level",
                                   "0.99", "--json").stdout)["results"][0]
    assert wide["cached"] and wide["em"]["value"] == first["em"]["value"]
    assert wide["em"]["lo"] < first["em"]["lo"] and wide["f1"]["hi"] > first["f1"]["hi"]
    rerun = json.loads(run_evaluate("-b", "match-lstm-ensemble", "-t", "squad-dev", "--rerun",
                                    "--json").stdout)["results"][0]
    assert rerun["cached"] is False and rerun["f1"] == first["f1"]


def test_paragraph_clustered_intervals_are_wider(workspace):
    runner = CliRunner()
    plain = json.loads(runner.invoke(evaluate_cmd, ["-b", "r-net-plus-ensemble", "-t",
                                                    "squad-dev", "--json"]).stdout)
    clustered = json.loads(runner.invoke(evaluate_cmd, ["-b", "r-net-plus-ensemble", "-t",
                                                        "squad-dev", "--cluster", "paragraph",
                                                        "--json"]).stdout)
    p, c = plain["results"][0], clustered["results"][0]
    assert c["f1"]["method"] == "student-t-clustered"
    assert c["f1"]["value"] == p["f1"]["value"]
    assert c["f1"]["hi"] - c["f1"]["lo"] > p["f1"]["hi"] - p["f1"]["lo"]


def test_one_article_has_no_article_clustered_interval_and_says_so(
        workspace, tmp_path, monkeypatch, small_dev):
    """One cluster leaves no spread between clusters to estimate: the bounds are null in JSON
    (strict JSON has no NaN), '-' in the table, with a line saying why."""
    one_article = {"version": "1.1", "data": small_dev["data"][:1]}
    tiny_registry(tmp_path, monkeypatch, {"one": one_article}, {"first-word": FIRST_WORD})
    argv = ["-b", "first-word", "-t", "one", "--runner", "local", "--cluster", "article"]
    doc = json.loads(CliRunner().invoke(evaluate_cmd, [*argv, "--json"]).stdout,
                     parse_constant=lambda name: pytest.fail(f"{name} in JSON output"))
    cell = doc["results"][0]
    assert [cell[m]["lo"] for m in ("em", "f1")] == [None, None]
    assert cell["f1"]["method"] == "student-t-clustered" and cell["n"] > 1
    table = CliRunner().invoke(evaluate_cmd, argv).output
    assert "[     -,      -]" in table
    assert "no interval on one: one question, one cluster where" in table
    paragraphs = json.loads(CliRunner().invoke(evaluate_cmd, [*argv[:-1], "paragraph",
                                                              "--json"]).stdout)
    assert paragraphs["results"][0]["f1"]["lo"] < paragraphs["results"][0]["f1"]["hi"]


EMPTY_ANSWERS = """import json, sys
doc = json.load(open(sys.argv[1]))
json.dump({q["id"]: "" for a in doc["data"] for p in a["paragraphs"] for q in p["qas"]},
          open(sys.argv[2], "w"))
"""


def test_a_cell_without_spread_is_stored_and_served_without_f1_bounds(
        workspace, tmp_path, monkeypatch, small_dev):
    """Every question scores F1 0: no Student-t interval, stored as NULL and read back."""
    tiny_registry(tmp_path, monkeypatch, {"tiny": small_dev}, {"silent": EMPTY_ANSWERS})
    argv = ["-b", "silent", "-t", "tiny", "--runner", "local", "--json"]
    for cached in (False, True):
        ran = CliRunner().invoke(evaluate_cmd, argv)
        assert ran.exit_code == 0, ran.output
        [cell] = json.loads(ran.stdout)["results"]
        assert cell["cached"] is cached and cell["f1"]["value"] == 0.0
        assert (cell["f1"]["lo"], cell["f1"]["hi"]) == (None, None)
        assert cell["em"]["lo"] == 0.0 and cell["em"]["hi"] > 0.0  # Clopper-Pearson still


def test_all_lists_inapplicable_cells_instead_of_failing(workspace):
    result = CliRunner().invoke(evaluate_cmd, ["-b", "all", "-t", "amazon", "--json",
                                               "--runner", "local"])
    doc = json.loads(result.stdout)
    na = {(c["bundle"], c["testset"]) for c in doc["not_applicable"]}
    assert ("bert-ensemble", "amazon") in na
    assert all(c["testset"] == "amazon" for c in doc["results"])


def test_an_explicit_inapplicable_cell_is_an_error(workspace):
    proc = run_evaluate("-b", "bert-ensemble", "-t", "reddit")
    assert proc.returncode == 1
    assert proc.stderr.strip() == ("error: bert-ensemble cannot run on reddit: stored "
                                   "predictions only for squad-dev")


def test_many_inapplicable_cells_are_one_line_per_bundle_and_reason(workspace):
    proc = run_evaluate("-b", "bert-ensemble", "-t", "all", "--level", "0.999")
    assert proc.returncode == 0, proc.stderr
    skipped = [line for line in proc.stdout.splitlines() if line.startswith("not applicable")]
    assert len(skipped) == 1 and re.fullmatch(
        r"not applicable: bert-ensemble on \d+ sets: stored predictions only for squad-dev",
        skipped[0]), skipped
    assert "(99.9% intervals: EM clopper-pearson, F1 student-t)" in proc.stdout


@pytest.mark.parametrize("flag", ["--output-path", "--log-samples"])
def test_an_output_folder_that_cannot_be_written_is_one_line_before_anything_runs(
        workspace, tmp_path, flag):
    (tmp_path / "file").write_text("")
    proc = run_evaluate("-b", "bert-ensemble", "-t", "squad-dev", flag,
                        str(tmp_path / "file" / "out"))
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"error: {flag} {tmp_path / 'file' / 'out'}: {tmp_path / 'file'} is a file, not a "
        f"folder"]
    assert stored_results(workspace) == 0  # nothing ran


@pytest.mark.parametrize("args,expected,listing", [
    (["-b", "bert-ensembel", "-t", "squad-dev"], "unknown bundle 'bert-ensembel': did you "
     "mean 'bert-ensemble'", "bundles; list them with `qashift bundles list`"),
    (["-b", "bert-ensemble", "-t", "squad-deev"], "unknown test set 'squad-deev': did you "
     "mean 'squad-dev'", "test sets; list them with `qashift testsets list`"),
])
def test_unknown_names_give_one_line_with_suggestions(workspace, args, expected, listing):
    """Of many choices (hundreds of bundles, dozens of test sets) the five closest are named
    and the command that lists them all."""
    proc = run_evaluate(*args)
    assert proc.returncode == 1
    assert len(proc.stderr.strip().splitlines()) == 1
    assert expected in proc.stderr and listing in proc.stderr
    assert proc.stderr.count("'") <= 2 * 6  # the name and at most five suggestions
    assert stored_results(workspace) == 0


def test_hash_mismatch_is_one_line_and_stores_nothing(workspace, tmp_path):
    bad = tmp_path / "bad-mirror" / "squad-v1.1"
    bad.mkdir(parents=True)
    (bad / "dev-v1.1.json").write_text('{"version": "1.1", "data": []}')
    proc = run_evaluate("-b", "bert-ensemble", "-t", "squad-dev",
                        env={"QASHIFT_DATA_DIR": str(tmp_path / "bad-mirror")})
    assert proc.returncode == 1
    assert "sha256 mismatch" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert stored_results(workspace) == 0


def test_nyt_offline_is_a_clear_error_not_a_traceback(workspace, tmp_path):
    write_command_bundle(tmp_path / "subs", "answers-all", FIRST_WORD)
    proc = run_evaluate("-b", "answers-all", "-t", "nyt", "--runner", "local",
                        env={"QASHIFT_SUBMISSIONS": str(tmp_path / "subs")})
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "nyt_v1.0.json" in proc.stderr and "--data-dir" in proc.stderr


HOSTILE = {
    "crashes": ("raise SystemExit('boom: model file not found')", "nonzero-exit", "boom"),
    "sleeps": ("import time; time.sleep(60)", "timeout", "time limit"),
    "invalid-json": ("import sys; open(sys.argv[2], 'w').write('{not json')",
                     "malformed-predictions", "not valid JSON"),
    "writes-list": ("import sys, json; json.dump(['a'], open(sys.argv[2], 'w'))",
                    "malformed-predictions", "got a list"),
    "non-string": ("import sys, json\ndoc = json.load(open(sys.argv[1]))\n"
                   "json.dump({q['id']: 5 for a in doc['data'] for p in a['paragraphs'] "
                   "for q in p['qas']}, open(sys.argv[2], 'w'))",
                   "malformed-predictions", "is a int, not a string"),
    "writes-nothing": ("print('done')", "no-predictions", "no predictions file"),
}


@pytest.fixture
def toy_registry(tmp_path, small_dev, monkeypatch):
    subs, sets = tmp_path / "subs", tmp_path / "sets"
    write_testset(sets, "small", small_dev)
    for name, (program, _, _) in HOSTILE.items():
        write_command_bundle(subs, name, program, timeout=2)
    write_command_bundle(subs, "answers-all", FIRST_WORD)
    write_command_bundle(subs, "answers-half", FIRST_WORD.replace(
        "for q in p[\"qas\"]}", "for q in p[\"qas\"][:1]}"))
    env = {"QASHIFT_SUBMISSIONS": str(subs), "QASHIFT_TESTSETS": str(sets)}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_failing_submissions_give_one_line_and_no_result(workspace, toy_registry, name):
    _, failure_class, phrase = HOSTILE[name]
    proc = run_evaluate("-b", name, "-t", "small", "--runner", "local")
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"({failure_class})" in lines[0] and phrase in lines[0]
    assert stored_results(workspace) == 0
    with sqlite3.connect(workspace / "results.sqlite") as conn:
        assert conn.execute("SELECT failure_class FROM failures").fetchall() == [
            (failure_class,)]


def test_a_partial_submission_is_scored_with_its_missing_count(workspace, toy_registry,
                                                               small_dev):
    proc = run_evaluate("-b", "answers-half", "-t", "small", "--runner", "local", "--json")
    assert proc.returncode == 0, proc.stderr
    [cell] = json.loads(proc.stdout)["results"]
    paragraphs = sum(len(a["paragraphs"]) for a in small_dev["data"])
    assert cell["missing"] == cell["n"] - paragraphs
    assert cell["runner"] == "local"


def test_a_matrix_survives_one_failing_cell(workspace, toy_registry):
    proc = run_evaluate("-b", "crashes", "-b", "answers-all", "-t", "small", "--runner",
                        "local", "--json")
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert [c["bundle"] for c in doc["results"]] == ["answers-all"]
    assert [f["failure_class"] for f in doc["failed"]] == ["nonzero-exit"]
    assert "[2/2]" in proc.stderr


def test_the_submission_never_sees_gold_answers(workspace, toy_registry, tmp_path):
    spy = tmp_path / "seen.json"
    write_command_bundle(Path(toy_registry["QASHIFT_SUBMISSIONS"]), "spy", f"""
import json, shutil, sys, os
shutil.copy(sys.argv[1], {str(spy)!r})
json.dump({{}}, open(sys.argv[2], "w"))
""")
    assert run_evaluate("-b", "spy", "-t", "small", "--runner", "local").returncode == 0
    assert "answers" not in spy.read_text() and "answer_start" not in spy.read_text()


def test_list_and_export_commands(workspace, toy_registry, tmp_path):
    runner = CliRunner()
    assert runner.invoke(evaluate_cmd, ["-b", "answers-all", "-t", "small", "--runner",
                                        "local"]).exit_code == 0
    listed = runner.invoke(main, ["results", "list"])
    assert "answers-all" in listed.output and "small" in listed.output
    assert "small" in runner.invoke(main, ["testsets", "list"]).output
    assert "answers-all" in runner.invoke(main, ["bundles", "list"]).output
    out = tmp_path / "export"
    result = runner.invoke(main, ["results", "export", "answers-all", "small", "--out",
                                  str(out)])
    assert result.exit_code == 0, result.output
    predictions = json.loads((out / "answers-all.small.predictions.json").read_text())
    rows = (out / "answers-all.small.scores.csv").read_text().splitlines()
    assert rows[0] == "id,em,f1,paragraph,article,missing"
    assert len(rows) - 1 == len(predictions)


def test_cli_start_up_does_not_import_heavy_modules():
    code = ("import sys, evaluator.cli.main; heavy = {'scipy', 'pandas', 'matplotlib', 'docker', "
            "'numpy', 'statsmodels'} & set(sys.modules); print(sorted(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "[]"


def test_the_entry_points_import_no_command_until_it_runs():
    """`evaluator.cli.main` is the entry points and the table of commands: importing it loads
    no command module and no stage but core (nor pydantic, yaml); `evaluate` loads its own."""
    code = ("import json, sys, evaluator.cli.main as m; ours = lambda: sorted(n for n in "
            "sys.modules if n.startswith(('evaluator.', 'pydantic', 'yaml'))); first = ours(); "
            "m.evaluate_cmd; print(json.dumps([first, ours()]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    first, then = json.loads(out.stdout)
    assert [n for n in first if n.split(".")[:2] != ["evaluator", "core"]] == [
        "evaluator.cli", "evaluator.cli.base", "evaluator.cli.main"]
    assert [n for n in then if n.startswith("evaluator.cli.")] == [
        "evaluator.cli.base", "evaluator.cli.evaluate", "evaluator.cli.main"]


def test_every_command_of_the_table_loads_and_keeps_its_old_import():
    for name, ref in cli_main.COMMANDS.items():
        command = main.get_command(click.Context(main), name)
        assert isinstance(command, click.Command) and command.name == name, ref
        assert getattr(cli_main, ref.partition(":")[2]) is command  # e.g. cli.main.status_cmd


def test_a_bundle_with_pinned_requirements_runs_in_its_own_virtual_environment(
        workspace, toy_registry, tmp_path):
    subs = Path(toy_registry["QASHIFT_SUBMISSIONS"])
    folder = write_command_bundle(subs, "pinned", """
import json, sys
import six  # only in the bundle's own environment's pins
assert sys.prefix != sys.base_prefix, "not running in a virtual environment"
doc = json.load(open(sys.argv[1]))
json.dump({q["id"]: six.__version__ for a in doc["data"] for p in a["paragraphs"]
           for q in p["qas"]}, open(sys.argv[2], "w"))
""")
    (folder / "requirements.txt").write_text("six==1.16.0\n")
    with open(folder / "bundle.yaml", "a") as handle:
        handle.write("environment: {requirements: requirements.txt}\n")
    proc = run_evaluate("-b", "pinned", "-t", "small", "--runner", "local", "--json")
    assert proc.returncode == 0, proc.stderr
    [cell] = json.loads(proc.stdout)["results"]
    with open(cell["predictions"]) as handle:
        assert set(json.load(handle).values()) == {"1.16.0"}
    venvs = list((tmp_path / "cache" / "venvs").iterdir())
    assert any((v / ".complete").exists() for v in venvs)


def test_a_requirement_that_cannot_be_installed_is_a_build_failure(workspace, toy_registry):
    subs = Path(toy_registry["QASHIFT_SUBMISSIONS"])
    folder = write_command_bundle(subs, "unbuildable", "print('never runs')")
    (folder / "requirements.txt").write_text("this-package-does-not-exist-qashift==0.0.1\n")
    with open(folder / "bundle.yaml", "a") as handle:
        handle.write("environment: {requirements: requirements.txt}\n")
    proc = run_evaluate("-b", "unbuildable", "-t", "small", "--runner", "local")
    assert proc.returncode == 1
    said = proc.stderr.strip().splitlines()  # the error in one line, after the line that
    [error] = [line for line in said if not line.startswith("running ")]  # says it started
    assert error.startswith("error: ") and "(build-failed)" in error and len(said) <= 2
    assert stored_results(workspace) == 0


def test_evaluate_help_names_the_command_once():
    proc = subprocess.run(["evaluate", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0
    assert proc.stdout.splitlines()[0] == "Usage: evaluate [OPTIONS]"


def test_every_stored_result_carries_its_provenance(workspace):
    from evaluator import __version__

    assert run_evaluate("-b", "bert-ensemble", "-t", "squad-dev").returncode == 0
    shown = subprocess.run(["qashift", "results", "show", "bert-ensemble", "squad-dev"],
                           capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    fields = dict(line.strip().split(": ", 1) for line in shown.stdout.splitlines()
                  if ": " in line)
    assert fields["qashift"] == __version__ and fields["python"].startswith("3.")
    assert "torch" in fields["packages"] and fields["host"] and fields["started_at"]
    assert fields["cpu"].endswith(f"({os.cpu_count()} cores)")
    for command in ("qashift", "evaluate"):
        version = subprocess.run([command, "--version"], capture_output=True, text=True)
        assert version.stdout.strip() == f"qashift, version {__version__}"


def test_a_bare_log_samples_writes_under_the_output_path_as_lm_eval_users_type_it(
        workspace, tmp_path):
    proc = run_evaluate("-b", "bert-ensemble", "-t", "squad-dev", "--limit", "50",
                        "--output-path", str(tmp_path / "out"), "--log-samples")
    assert proc.returncode == 0, proc.stderr
    lines = (tmp_path / "out" / "samples" / "bert-ensemble.squad-dev.jsonl").read_text()
    assert len(lines.splitlines()) == 50
    alone = run_evaluate("-b", "bert-ensemble", "-t", "squad-dev", "--log-samples")
    assert alone.returncode != 0
    assert alone.stderr.strip().splitlines()[-1].endswith(
        "--log-samples without a folder writes under --output-path; give one of them a folder")


def test_log_samples_gives_one_line_per_question_whose_means_are_the_totals(workspace,
                                                                            tmp_path):
    proc = run_evaluate("-b", "bert-ensemble", "-t", "squad-dev", "--json", "--log-samples",
                        str(tmp_path / "samples"))
    assert proc.returncode == 0, proc.stderr
    [cell] = json.loads(proc.stdout)["results"]
    lines = (tmp_path / "samples" / "bert-ensemble.squad-dev.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    assert len(rows) == 10570
    assert set(rows[0]) == {"id", "article", "question", "answers", "prediction", "em", "f1",
                            "missing"}
    assert 100 * sum(r["em"] for r in rows) / len(rows) == pytest.approx(cell["em"]["value"],
                                                                         abs=1e-9)
    assert 100 * sum(r["f1"] for r in rows) / len(rows) == pytest.approx(cell["f1"]["value"],
                                                                         abs=1e-9)
    parquet = pq.read_table(tmp_path / "samples" / "bert-ensemble.squad-dev.parquet")
    assert parquet.to_pylist() == rows  # the same rows, column for column


def test_limit_is_a_seeded_stratified_sample_stored_apart_from_full_runs(workspace, tmp_path):
    def run(*extra):
        proc = run_evaluate("-b", "bert-ensemble", "-t", "squad-dev", "--json", *extra)
        assert proc.returncode == 0, proc.stderr
        [cell] = json.loads(proc.stdout)["results"]
        return cell

    first = run("--limit", "500", "--log-samples", str(tmp_path / "a"))
    again = run("--limit", "500", "--log-samples", str(tmp_path / "b"))
    assert first["n"] == 500 and first["limit"] == 500
    assert first["comparable_with_full_runs"] is False and again["cached"] is True
    assert (first["em"], first["f1"]) == (again["em"], again["f1"])
    ids = [json.loads(line)["id"] for line in
           (tmp_path / "a" / "bert-ensemble.squad-dev.jsonl").read_text().splitlines()
           if not json.loads(line)["missing"]]
    assert len(ids) == 500
    full = run()
    assert full["cached"] is False and full["n"] == 10570 and "limit" not in full
    other = run("--limit", "500", "--seed", "1")
    assert other["cached"] is False and other["key"] != first["key"]
    whole = run("--limit", "10570", "--seed", "3")  # a sample of the whole set is the set
    assert whole["cached"] is True and whole["key"] == full["key"] and "limit" not in whole


CRASH = "import sys\nsys.exit('this submission always crashes')\n"


def test_check_runs_a_few_questions_and_says_what_would_fail(tmp_path, monkeypatch, workspace,
                                                             small_dev):
    tiny_registry(tmp_path, monkeypatch, {"tiny": small_dev},
                  {"crasher": CRASH, "sliding-window": REPO / "submissions" / "sliding-window"})
    bad = CliRunner().invoke(main, ["check", "-b", "crasher", "-t", "tiny", "--runner", "local"])
    assert bad.exit_code == 1
    assert "crasher would fail on tiny: nonzero-exit" in bad.stderr
    assert "always crashes" in bad.stderr
    good = CliRunner().invoke(main, ["check", "-b", "sliding-window", "-t", "tiny", "-n", "5",
                                     "--runner", "local"])
    assert good.exit_code == 0, good.output
    assert good.stdout.startswith("ok: sliding-window answered 5 of 5 questions of tiny")
    size = testsets.get("tiny").questions  # a check as large as the set is still a sample
    whole = CliRunner().invoke(main, ["check", "-b", "crasher", "-t", "tiny", "-n", str(size),
                                      "--runner", "local"])
    assert whole.exit_code == 1
    assert [is_sample(f) for f in Store.open_default().failures()] == [True, True]
    status = CliRunner().invoke(main, ["status", "-b", "crasher", "-t", "tiny"])
    assert "pending 1" in status.stdout, status.stdout


def test_log_samples_carry_the_strata_once_computed(tmp_path, monkeypatch, workspace,
                                                    small_dev):
    from analysis.sources import strata

    tiny_registry(tmp_path, monkeypatch, {"tiny": small_dev}, {"sliding-window": SLIDING_WINDOW})
    argv = ["evaluate", "-b", "sliding-window", "-t", "tiny", "--runner", "local"]
    before = CliRunner().invoke(main, [*argv, "--log-samples", str(tmp_path / "a")])
    assert before.exit_code == 0, before.output
    row = json.loads((tmp_path / "a" / "sliding-window.tiny.jsonl").read_text().splitlines()[0])
    assert "answer_type" not in row  # nothing computed yet: nothing added
    features = strata.of_testset(testsets.get("tiny"))
    after = CliRunner().invoke(main, [*argv, "--log-samples", str(tmp_path / "b")])
    assert after.exit_code == 0, after.output
    rows = [json.loads(line) for line in
            (tmp_path / "b" / "sliding-window.tiny.jsonl").read_text().splitlines()]
    assert all(r["answer_type"] == features[r["id"]]["answer_type"] and
               r["divergence"] == features[r["id"]]["divergence"] for r in rows)


def test_a_study_file_runs_with_qashift_run_and_flags_win(tmp_path, monkeypatch, workspace,
                                                          small_dev):
    sets, _ = tiny_registry(tmp_path, monkeypatch, {"tiny": small_dev},
                            {"sliding-window": SLIDING_WINDOW, "first-word": FIRST_WORD})
    write_testset(sets, "tiny-shift", {"version": "1.1", "data": small_dev["data"][:1]},
                  reference="tiny")
    study = tmp_path / "study" / "study.yaml"
    study.parent.mkdir()
    study.write_text("bundles: [sliding-window, first-word]\ntestsets: [tiny, tiny-shift]\n"
                     "runner: local\nlevel: 0.9\noutput_path: out\n")
    first = CliRunner().invoke(main, ["run", str(study)])
    assert first.exit_code == 0, first.output
    out = tmp_path / "study" / "out"  # relative to the study file
    document = json.loads((out / "results.json").read_text())
    assert len(document["results"]) == 4
    assert {r["em"]["level"] for r in document["results"]} == {0.9}
    assert document["config"]["bundles"] == ["sliding-window", "first-word"]
    assert document["config"]["level"] == 0.9 and document["config"]["runner"] == "local"
    assert {"qashift", "commit", "python", "packages", "host", "date"} <= \
        set(document["provenance"])
    assert len(list((out / "samples").glob("*.jsonl"))) == 4
    assert (out / "figures" / "tiny-shift-f1.png").stat().st_size > 1000
    flagged = CliRunner().invoke(main, ["run", str(study), "-t", "tiny", "--json"])
    assert flagged.exit_code == 0, flagged.output  # a flag given wins over the file
    assert {r["testset"] for r in json.loads(flagged.stdout)["results"]} == {"tiny"}
    study.write_text("bundles: [sliding-window]\ntestset: [tiny]\n")
    bad = CliRunner().invoke(main, ["run", str(study)])
    assert bad.exit_code == 1
    [line] = bad.stderr.strip().splitlines()
    assert "unknown key 'testset' (did you mean 'testsets'?)" in line


@pytest.mark.parametrize("line, said", [
    ("level: lots", "level: 'lots' is not a valid float."),
    ("limit: -5", "limit: -5 is not in the range x>=1."),
    ("runner: magic", "runner: 'magic' is not one of 'auto', 'local', 'docker', 'slurm'."),
    ("jobs: [2]", "jobs: [2] is not a valid integer range"),
    ("level: [0.9]", "level: [0.9] is not a valid float"),
    ("log_samples: true", "log_samples: True is not a valid directory"),
    ("data_dir: 5", "data_dir: [5] is not a valid directory"),
    ("model_args: batch_size", "model_args: 'batch_size' is not KEY=VALUE"),
    ("model_args: {batch_size: [8]}", "model_args: batch_size: [8] is not a single value "
                                      "without commas"),
])
def test_a_bad_value_in_a_config_file_is_one_line_naming_the_file_and_key(tmp_path, line,
                                                                          said):
    study = tmp_path / "study.yaml"
    study.write_text(f"bundles: [sliding-window]\ntestsets: [tiny]\n{line}\n")
    for argv in (["run", str(study)], ["evaluate", "--config", str(study)]):
        bad = CliRunner().invoke(main, argv)
        assert bad.exit_code == 1
        assert bad.stderr.strip().splitlines() == [f"error: {study}: {said}"]


def test_a_null_in_a_config_file_is_the_key_left_out_unless_the_key_is_required(tmp_path):
    study = tmp_path / "study.yaml"
    study.write_text("bundles: null\ntestsets: [tiny]\n")
    bad = CliRunner().invoke(main, ["run", str(study)])
    assert bad.exit_code == 1
    assert bad.stderr.strip() == f"error: {study}: bundles: has no value (give one or more)"
    study.write_text("bundles: [bert-ensemble]\ntestsets: [nowhere]\ncluster: null\n"
                     "jobs:\n")
    unknown = CliRunner().invoke(main, ["run", str(study)])  # read as far as the set's id
    assert "unknown test set 'nowhere'" in unknown.stderr, unknown.output


def test_model_args_as_a_mapping_read_back_as_the_same_values():
    text = cli_evaluate._model_args_text({"lr": 1e-5, "cap": float("inf"), "onnx": True,
                                          "name": "a b"}, "c.yaml: model_args")
    assert cli_evaluate._parse_model_args(text) == {"lr": 1e-5, "cap": float("inf"),
                                                    "onnx": True, "name": "a b"}
    for bad in ({"k=v": 1}, {"k": "a,b"}, {"k": [1, 2]}):
        with pytest.raises(UserError, match="is not a single value"):
            cli_evaluate._model_args_text(bad, "c.yaml: model_args")


@pytest.mark.skipif(os.geteuid() != 0, reason="only root passes the check of /proc up front")
def test_an_output_that_fails_after_the_run_leaves_the_other_written_and_the_table_shown(
        workspace, tmp_path):
    proc = run_evaluate("-b", "bert-ensemble", "-t", "squad-dev", "--output-path",
                        "/proc/qashift-nowhere", "--log-samples", str(tmp_path / "samples"))
    assert proc.returncode == 1
    assert (tmp_path / "samples" / "bert-ensemble.squad-dev.jsonl").is_file()
    assert "bert-ensemble squad-dev" in proc.stdout  # the table, after the failed write
    assert proc.stderr.strip().splitlines()[-1].startswith(
        "error: the results are stored, but writing /proc/qashift-nowhere")


def test_results_samples_writes_the_per_question_logs_of_stored_cells(tmp_path, monkeypatch,
                                                                      workspace, small_dev):
    tiny_registry(tmp_path, monkeypatch, {"tiny": small_dev}, {
        "sliding-window": SLIDING_WINDOW,
        "empty": "import json, sys\njson.dump({}, open(sys.argv[2], 'w'))\n"})
    ran = CliRunner().invoke(main, ["evaluate", "-b", "all", "-t", "tiny", "--runner", "local",
                                    "--log-samples", str(tmp_path / "live")])
    assert ran.exit_code == 0, ran.output
    bulk = CliRunner().invoke(main, ["results", "samples", "-t", "tiny", "--out",
                                     str(tmp_path / "bulk")])
    assert bulk.exit_code == 0, bulk.output
    assert "2 cells written" in bulk.stdout
    for name in ("sliding-window.tiny.jsonl", "empty.tiny.jsonl"):
        assert (tmp_path / "bulk" / name).read_text() == (tmp_path / "live" / name).read_text()
    none = CliRunner().invoke(main, ["results", "samples", "-b", "nobody", "--out",
                                     str(tmp_path / "x")])
    assert none.exit_code == 1 and "no stored full result" in none.stderr


def test_status_on_the_whole_repository_fits_120_columns(workspace):
    done = CliRunner().invoke(main, ["status"])
    assert done.exit_code == 0, done.output
    assert max(len(line) for line in done.stdout.splitlines()) <= 120
    assert "--wide for the matrix" in done.stderr
    wide = CliRunner().invoke(main, ["status", "--wide"])
    assert max(len(line) for line in wide.stdout.splitlines()) > 120
    few = CliRunner().invoke(main, ["status", "-t", "squad-dev-heldout-q-interrogatives-only",
                                    "-t", "squad-dev-heldout-empty-question"])
    header = few.stdout.splitlines()[0]
    assert "squad…s-only" in header and "squad…estion" in header  # told apart


def test_testsets_list_fits_120_columns_and_filters_by_kind_and_glob(workspace):
    plain = CliRunner().invoke(main, ["testsets", "list"])
    assert max(len(line) for line in plain.stdout.splitlines()) <= 120
    shifts = CliRunner().invoke(main, ["testsets", "list", "--kind", "natural-shift", "--json"])
    rows = json.loads(shifts.stdout)
    assert rows and {r["kind"] for r in rows} == {"natural-shift"}
    assert {"reddit", "amazon", "nyt"} <= {r["id"] for r in rows}
    babi = CliRunner().invoke(main, ["testsets", "list", "--match", "babi-1-*", "--json"])
    assert all(r["id"].startswith("babi-1-") for r in json.loads(babi.stdout))


def test_testsets_list_help_says_what_json_prints_and_a_bad_kind_names_the_kind_meant(
        workspace):
    helped = CliRunner().invoke(main, ["testsets", "list", "--help"])
    assert "--json print the listed sets as one JSON array" in " ".join(helped.stdout.split())
    listed = CliRunner().invoke(main, ["testsets", "list", "--kind", "adversarial", "--json"])
    rows = json.loads(listed.stdout)
    assert isinstance(rows, list) and {r["kind"] for r in rows} == {"adversarial"}
    bad = CliRunner().invoke(main, ["testsets", "list", "--kind", "advers"])
    assert bad.exit_code == 1 and bad.stdout == ""
    [line] = bad.stderr.splitlines()
    assert line.startswith("error: unknown kind 'advers': did you mean 'adversarial'? "
                           "choices: adversarial, derived, natural-shift, original,")


def fields_of(shown: str) -> dict[str, str]:
    """The `key: value` lines of a `show` command."""
    return {key.strip(): value for key, value in
            (line.split(": ", 1) for line in shown.splitlines())}


SYSTEM = "words@tiny-train/s0"  # a trained system of the `words` registry: its id holds `/`


def test_a_trained_systems_cell_exports_to_files_named_as_its_logs_and_readable_by_all(
        words, tmp_path):
    """`results export` names a cell's files as `--log-samples` and `results samples` name
    its logs (a trained system's `/` written `_`), and writes both files as a user's own:
    0644, not the store's private 0600."""
    runner = CliRunner()
    trained = runner.invoke(main, ["train", "-a", "words", "-t", "tiny-train", "--runner",
                                   "local"])
    assert trained.exit_code == 0, trained.output
    scored = runner.invoke(evaluate_cmd, ["-b", SYSTEM, "-t", "tiny-test", "--runner",
                                          "local", "--log-samples", str(tmp_path / "logs")])
    assert scored.exit_code == 0, scored.output
    [log] = (tmp_path / "logs").glob("*.jsonl")
    stem = log.name.removesuffix(".jsonl")
    assert stem == "words@tiny-train_s0.tiny-test"
    exported = runner.invoke(main, ["results", "export", SYSTEM, "tiny-test", "--out",
                                    str(tmp_path / "out")])
    assert exported.exit_code == 0, exported.output
    files = sorted((tmp_path / "out").iterdir())
    assert [f.name for f in files] == [f"{stem}.predictions.json", f"{stem}.scores.csv"]
    assert [stat.S_IMODE(f.stat().st_mode) for f in files] == [0o644, 0o644]
    rows = (tmp_path / "out" / f"{stem}.scores.csv").read_text().splitlines()
    assert len(rows) - 1 == len(log.read_text().splitlines())  # a line per question


def test_a_trained_system_id_names_it_to_status_and_bundles_show_as_to_evaluate(words):
    """`status -b` and `bundles show` take the ids `evaluate -b` takes: a trained system's
    too (here one of this store's; a frozen one of the repository below)."""
    runner = CliRunner()
    assert runner.invoke(main, ["train", "-a", "words", "-t", "tiny-train", "--runner",
                                "local"]).exit_code == 0
    assert runner.invoke(evaluate_cmd, ["-b", SYSTEM, "-t", "tiny-test", "--runner",
                                        "local"]).exit_code == 0
    status = runner.invoke(main, ["status", "-b", SYSTEM, "-t", "tiny-test"])
    assert status.exit_code == 0, status.output
    assert status.stdout.splitlines()[-1].startswith("done 1  ")
    shown = runner.invoke(main, ["bundles", "show", SYSTEM])
    assert shown.exit_code == 0, shown.output
    fields = fields_of(shown.stdout)
    [system] = Store.open_default().systems(SYSTEM)
    assert (fields["id"], fields["approach"], fields["trained_on"]) == (
        SYSTEM, "words", "tiny-train")
    assert fields["weights_digest"] == system["weights_digest"]
    assert fields["frozen"].startswith("no: trained in this store")


FROZEN = "logreg-rajpurkar@squad-dev-train~500/s0/hf3fe2195"  # a cheap frozen system


def test_bundles_show_gives_a_frozen_systems_approach_weights_and_folder(workspace):
    folder = REPO / "frozen" / "logreg-rajpurkar" / "squad-dev-train~500" / "s0-hf3fe2195"
    manifest = json.loads((folder / "manifest.json").read_text())
    shown = CliRunner().invoke(main, ["bundles", "show", FROZEN])
    assert shown.exit_code == 0, shown.output
    fields = fields_of(shown.stdout)
    assert fields["approach"] == "logreg-rajpurkar" and fields["train_size"] == "500"
    assert fields["weights_digest"] == manifest["system"]["weights_digest"]
    assert fields["frozen"] == str(folder)
    status = CliRunner().invoke(main, ["status", "-b", FROZEN, "-t", "squad-dev"])
    assert status.exit_code == 0, status.output
    assert status.stdout.splitlines()[-1].startswith("pending 1  ")


def test_results_show_gives_each_field_once_times_in_utc_and_the_intervals(
        tmp_path, monkeypatch, workspace, small_dev):
    tiny_registry(tmp_path, monkeypatch, {"tiny": small_dev}, {"first": FIRST_WORD})
    ran = CliRunner().invoke(evaluate_cmd, ["-b", "first", "-t", "tiny", "--runner", "local",
                                            "--json"])
    assert ran.exit_code == 0, ran.output
    [cell] = json.loads(ran.stdout)["results"]
    shown = CliRunner().invoke(main, ["results", "show", "first", "tiny"])
    assert shown.exit_code == 0, shown.output
    keys = [line.split(":", 1)[0].strip() for line in shown.stdout.splitlines()]
    assert len(keys) == len(set(keys)) and "device" in keys
    fields = fields_of(shown.stdout)
    for metric in ("em", "f1"):
        interval = cell[metric]
        assert fields[metric] == (f"{interval['value']} [{interval['lo']:.3f}, "
                                  f"{interval['hi']:.3f}] (95% interval)")
    for key in ("started_at", "finished_at", "stored_at"):
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", fields[key]), key
    listed = CliRunner().invoke(main, ["results", "list", "-b", "first", "-t", "tiny"])
    assert listed.exit_code == 0, listed.output
    [header, row] = listed.stdout.splitlines()
    assert header.startswith("bundle ") and row.startswith("first ")
    whole = json.loads(CliRunner().invoke(main, ["results", "show", "first", "tiny",
                                                 "--json"]).stdout)
    assert whole["em"] == cell["em"]["value"] and whole["key"] == fields["key"]
    assert whole["run_record"]["runner"] == "local"
    assert whole["run_record"]["details"]["provenance"]["commit"] == fields["commit"]


def test_a_failed_sample_is_never_its_cells_state_and_is_listed_as_a_sample(
        tmp_path, monkeypatch, workspace, small_dev):
    """A failed `--limit` run no more stands in for its cell than a finished one: `status`
    leaves the cell pending, and `results list --failures` labels the failure a sample; the
    failure of a full run is the cell's state."""
    tiny_registry(tmp_path, monkeypatch, {"tiny": small_dev}, {"crasher": CRASH})
    argv = ["-b", "crasher", "-t", "tiny", "--runner", "local"]
    assert CliRunner().invoke(evaluate_cmd, [*argv, "--limit", "5"]).exit_code == 1
    status = CliRunner().invoke(main, ["status", "-b", "crasher", "-t", "tiny"])
    assert status.stdout.splitlines()[-1].startswith("pending 1  ")
    [sample] = CliRunner().invoke(main, ["results", "list", "--failures", "-b", "crasher",
                                         "-t", "tiny"]).stdout.splitlines()
    assert "nonzero-exit" in sample and "(sample of 5) " in sample
    assert CliRunner().invoke(evaluate_cmd, argv).exit_code == 1
    status = CliRunner().invoke(main, ["status", "-b", "crasher", "-t", "tiny"])
    assert "nonzero-exit" in status.stdout
    assert status.stdout.splitlines()[-1].startswith("failed 1  ")
    failures = CliRunner().invoke(main, ["results", "list", "--failures"]).stdout.splitlines()
    assert ["sample of 5" in line for line in failures] == [True, False]


OLD_FAILURES = """CREATE TABLE failures (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL, bundle TEXT NOT NULL, testset TEXT NOT NULL,
    failure_class TEXT NOT NULL, message TEXT NOT NULL, log_sha256 TEXT,
    runner TEXT, created_at REAL NOT NULL
)"""  # the table as stores made before failures kept their job's options have it


def test_a_store_made_before_failures_kept_options_reads_its_failures_as_full_runs(
        tmp_path, monkeypatch, workspace, small_dev):
    tiny_registry(tmp_path, monkeypatch, {"tiny": small_dev}, {"crasher": CRASH})
    workspace.mkdir(parents=True)
    with sqlite3.connect(workspace / "results.sqlite") as conn:
        conn.execute(OLD_FAILURES)
        conn.execute("INSERT INTO failures (key, bundle, testset, failure_class, message, "
                     "created_at) VALUES ('k', 'crasher', 'tiny', 'timeout', 'old', 1.0)")
    conn.close()
    status = CliRunner().invoke(main, ["status", "-b", "crasher", "-t", "tiny"])
    assert status.exit_code == 0, status.output
    assert "timeout" in status.stdout  # an older failure: a full run's, as it was
    assert CliRunner().invoke(evaluate_cmd, ["-b", "crasher", "-t", "tiny", "--runner",
                                             "local", "--limit", "5"]).exit_code == 1
    failures = CliRunner().invoke(main, ["results", "list", "--failures"]).stdout.splitlines()
    assert ["sample of 5" in line for line in failures] == [False, True]
    assert "timeout" in CliRunner().invoke(main, ["status", "-b", "crasher", "-t",
                                                  "tiny"]).stdout


def test_the_show_commands_and_evaluates_device_say_what_they_do():
    for argv in (["testsets", "show", "--help"], ["bundles", "show", "--help"]):
        shown = CliRunner().invoke(main, argv)
        assert shown.exit_code == 0
        description = shown.stdout.split("\n\n")[1]
        assert not description.startswith("Options:") and len(description.split()) > 5, argv
    options = {p.name: p for p in evaluate_cmd.params}
    assert options["device"].help and "GPU" in options["device"].help
    assert options["runner"].help.startswith("how command and hf-qa bundles run")


def test_outside_a_checkout_a_missing_folder_root_is_named_with_how_to_point_there(
        workspace, tmp_path, monkeypatch):
    """An installed package run where no checkout is: not `choices:` with nothing after it,
    but where it looked and the variable that points it elsewhere."""
    empty = tmp_path / "nowhere"
    empty.mkdir()
    monkeypatch.setenv("QASHIFT_ROOT", str(empty))
    monkeypatch.delenv("QASHIFT_SUBMISSIONS", raising=False)
    monkeypatch.delenv("QASHIFT_TESTSETS", raising=False)
    run = CliRunner().invoke(evaluate_cmd, ["-b", "bert-ensemble", "-t", "squad-dev"])
    assert run.exit_code != 0
    [line] = run.output.strip().splitlines()
    assert f"no bundle folders in {empty / 'submissions'}" in line
    assert "QASHIFT_ROOT" in line and "QASHIFT_SUBMISSIONS" in line
    listed = CliRunner().invoke(main, ["testsets", "list"])
    assert listed.exit_code == 0
    assert f"no test set folders in {empty / 'testsets'}" in listed.stderr


def test_a_run_that_lasts_says_which_cells_it_started_and_a_quick_or_found_one_says_nothing(
        workspace, tmp_path, monkeypatch, small_dev):
    """A cell of an hour is not an hour of silence: once cells have run QUIET_SECONDS with
    none ended, `evaluate` names them (on stderr, before any result); a cell that ends sooner,
    or is found stored, adds no line (an error stays one line)."""
    from evaluator.pipeline import matrix

    monkeypatch.setattr(matrix, "QUIET_SECONDS", 0.5)
    one = {"version": "1.1", "data": small_dev["data"][:1]}
    tiny_registry(tmp_path, monkeypatch, {"one": one, "two": one, "three": one},
                  {"slow": "import time\ntime.sleep(2)\n" + FIRST_WORD,
                   "quick": FIRST_WORD})

    def said(*args: str) -> list[str]:  # local: no warning line where no Docker daemon is
        done = CliRunner().invoke(evaluate_cmd, [*args, "--runner", "local"])
        assert done.exit_code == 0, done.output
        return done.stderr.splitlines()

    assert said("-b", "slow", "-t", "one") == ["running slow x one"]
    assert said("-b", "slow", "-t", "one") == []  # found stored
    lines = said("-b", "slow", "-t", "all", "-j", "2")
    assert lines[1] == "running 2 cells (1 found stored), 2 at a time"
    assert lines[0].startswith("[1/3] slow x one: ok (stored)") and lines[2].startswith("[2/3]")
    monkeypatch.setattr(matrix, "QUIET_SECONDS", 30.0)
    assert said("-b", "quick", "-t", "one") == []  # ended well within its quiet time
