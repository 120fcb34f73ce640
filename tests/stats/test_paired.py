"""Paired comparison of two systems on the same questions: McNemar's exact test agrees with
statsmodels', the paired t-test with its textbook formula, the bootstrap interval with the
normal one on many questions, and the drop difference with its definition."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
from click.testing import CliRunner
from scipy import stats
from statsmodels.stats.contingency_tables import mcnemar

from evaluator.cli.main import evaluate_cmd, main
from evaluator.scoring.squad_v1 import score_question
from evaluator.stats.paired import drop_difference, mcnemar_exact, paired
from tests.conftest import FIRST_WORD, tiny_registry, write_testset


@pytest.mark.parametrize("a_only, b_only", [(0, 0), (3, 0), (12, 5), (40, 61)])
def test_mcnemar_matches_statsmodels_exact(a_only, b_only):
    table = [[100, a_only], [b_only, 50]]
    assert mcnemar_exact(a_only, b_only) == pytest.approx(
        mcnemar(table, exact=True).pvalue, rel=1e-12)


def test_the_paired_difference_its_t_test_and_its_bootstrap_interval():
    rng = np.random.default_rng(7)
    b = rng.random(4000)
    a = np.clip(b + rng.normal(0.02, 0.1, 4000), 0, 1)
    found = paired("f1", a, b, n_boot=4000, seed=1)
    d = a - b
    t = d.mean() / (d.std(ddof=1) / math.sqrt(len(d)))
    assert found.t_p == pytest.approx(2 * stats.t.sf(abs(t), len(d) - 1), rel=1e-9)
    assert found.diff == pytest.approx(100 * d.mean())
    half = 1.959964 * d.std(ddof=1) / math.sqrt(len(d)) * 100
    assert found.lo == pytest.approx(found.diff - half, abs=0.1 * half)
    assert found.hi == pytest.approx(found.diff + half, abs=0.1 * half)
    same = paired("em", b.round(), b.round(), n_boot=200)
    assert (same.diff, same.lo, same.hi, same.mcnemar_p, same.t_p) == (0, 0, 0, 1.0, 1.0)


def test_a_difference_the_same_on_every_question_is_certain_and_none_is_no_difference():
    right, wrong = np.ones(50), np.zeros(50)
    assert paired("em", right, wrong, n_boot=100).t_p == 0.0  # t is infinite
    assert paired("f1", np.full(20, 0.8), np.full(20, 0.3), n_boot=100).t_p == 0.0
    assert paired("f1", np.full(20, 0.8), np.full(20, 0.8), n_boot=100).t_p == 1.0
    nearly = np.full(50, 0.5)
    nearly[0] = 0.5 + 1e-9  # a spread, however small, is tested as scipy tests it
    assert paired("f1", nearly, np.zeros(50), n_boot=100).t_p == pytest.approx(
        stats.ttest_rel(nearly, np.zeros(50)).pvalue)


def test_one_question_gives_no_t_test_as_it_leaves_no_degrees_of_freedom():
    one = paired("em", np.ones(1), np.zeros(1), n_boot=100)
    assert one.t_p is None and one.mcnemar_p == 1.0 and one.diff == 100.0
    assert np.isnan(stats.ttest_rel([1.0], [0.0]).pvalue)  # scipy: no test either


def test_the_drop_difference_is_the_difference_of_the_drops():
    orig = (np.array([1, 1, 1, 0.0]), np.array([1, 0, 1, 0.0]))
    new = (np.array([0, 1, 0, 0.0]), np.array([1, 0, 0, 0.0]))
    found = drop_difference("em", orig, new, n_boot=500)
    assert (found.drop_a, found.drop_b) == (50.0, 25.0)
    assert found.diff == 25.0 and found.lo <= 25.0 <= found.hi


SECOND_WORD = FIRST_WORD.replace('p["context"].split()[0]', 'p["context"].split()[1]')


def test_compare_reads_both_stored_cells_and_writes_their_differences(
        tmp_path, small_dev, dev_raw, monkeypatch, workspace):
    other = {"version": "1.1", "data": dev_raw["data"][3:4]}
    tiny_registry(tmp_path, monkeypatch, {"toy": small_dev, "other": other},
                  {"first": FIRST_WORD, "second": SECOND_WORD})
    for bundle in ("first", "second"):
        for testset in ("toy", "other"):
            assert CliRunner().invoke(evaluate_cmd, ["-b", bundle, "-t", testset, "--runner",
                                                     "local"]).exit_code == 0
    diff = tmp_path / "diff.csv"
    done = CliRunner().invoke(main, ["compare", "-b", "first", "-b", "second", "-t", "other",
                                     "--against",
                                     "toy", "--diff", str(diff), "--json",
                                     "--bootstrap", "500"])
    assert done.exit_code == 0, done.output
    out = json.loads(done.stdout)
    em = next(p for p in out["paired"] if p["metric"] == "em")
    lines = diff.read_text().splitlines()
    assert out["differing"] == len(lines) - 1 > 0
    rows = [line.split(",") for line in lines[1:]]
    assert em["a_only"] + em["b_only"] <= len(rows)
    assert {d["metric"] for d in out["drop"]} == {"em", "f1"}
    listed = CliRunner().invoke(main, ["results", "diff", "first", "second", "-t", "other"])
    assert listed.exit_code == 0, listed.output
    assert listed.output.splitlines()[-1].startswith(f"{len(rows)} of ")
    assert [line.split()[0] for line in listed.output.splitlines()[:-1:3]] == \
        [r[0] for r in rows]
    again = tmp_path / "again.csv"
    CliRunner().invoke(main, ["results", "diff", "first", "second", "-t", "other", "--out",
                              str(again)])
    assert again.read_text() == diff.read_text()
    text = CliRunner().invoke(main, ["compare", "-b", "first", "-b", "second", "-t", "other",
                                     "--bootstrap", "500"])
    assert "McNemar exact p" in text.output and "paired bootstrap" in text.output
    missing = CliRunner().invoke(main, ["compare", "-b", "first", "-b", "nobody", "-t",
                                        "other"])
    assert missing.exit_code != 0 and "no stored result for nobody x other" in missing.output


def adversarial(raw: dict) -> dict:
    """Every question twice, as asked and again as ID-high-conf: one group of two each, as
    AddSent's ids make them for the adversarial-min scorer."""
    out = json.loads(json.dumps(raw))
    for article in out["data"]:
        for paragraph in article["paragraphs"]:
            paragraph["qas"] += [{**q, "id": f"{q['id']}-high-conf"} for q in paragraph["qas"]]
    return out


def test_compare_counts_groups_on_a_grouped_set_and_takes_the_levels_evaluate_takes(
        tmp_path, small_dev, monkeypatch, workspace):
    sets, _ = tiny_registry(tmp_path, monkeypatch, {}, {"first": FIRST_WORD,
                                                         "second": SECOND_WORD})
    write_testset(sets, "adv", adversarial(small_dev), scorer="adversarial-min")
    for bundle in ("first", "second"):
        assert CliRunner().invoke(evaluate_cmd, ["-b", bundle, "-t", "adv", "--runner",
                                                 "local"]).exit_code == 0
    groups = sum(len(p["qas"]) for a in small_dev["data"] for p in a["paragraphs"])
    compare = ["compare", "-b", "first", "-b", "second", "-t", "adv", "--bootstrap", "200"]
    done = CliRunner().invoke(main, [*compare, "--level", "0.3"])
    assert done.exit_code == 0, done.output
    assert f"first vs second on adv: {groups} question groups scored for both" in done.stdout
    assert "(30% paired bootstrap; unpaired it would be ±" in done.stdout
    diff = tmp_path / "adv-diff.csv"
    written = CliRunner().invoke(main, [*compare, "--diff", str(diff)])
    assert written.exit_code == 0, written.output
    rows = list(csv.DictReader(diff.open()))
    gold = {q["id"]: q for a in adversarial(small_dev)["data"] for p in a["paragraphs"]
            for q in p["qas"]}
    assert sorted(r["id"] for r in rows) == sorted(gold)  # the two answer every one apart
    assert [r["id"] for r in rows[:2]] == [rows[0]["group"], f"{rows[0]['group']}-high-conf"]
    assert {r["group"] for r in rows} == {i for i in gold if "-" not in i}
    assert all(r["id"].split("-")[0] == r["group"] for r in rows)
    for r in rows:  # each question's own scores, on its own gold
        for side in ("a", "b"):
            em, f1 = score_question(r[f"answer_{side}"], [x["text"] for x in
                                                          gold[r["id"]]["answers"]])
            assert (int(r[f"em_{side}"]), float(r[f"f1_{side}"])) == (em, round(f1, 4))
    listed = CliRunner().invoke(main, ["results", "diff", "first", "second", "-t", "adv"])
    assert listed.output.splitlines()[-1].startswith(
        f"{len(rows)} questions of the {groups} question groups answered differently")
    for level in ("0", "1", "1.5"):  # strictly between 0 and 1, in the same words
        evaluated = CliRunner().invoke(main, ["evaluate", "-b", "first", "-t", "adv",
                                              "--level", level])
        compared = CliRunner().invoke(main, [*compare, "--level", level])
        assert compared.exit_code == evaluated.exit_code == 1, compared.output
        assert compared.stderr == evaluated.stderr
        assert compared.stderr.startswith("error: confidence level must be strictly between")


def test_pairing_narrows_the_interval_on_real_stored_predictions(workspace, shared_data):
    """Two leaderboard entries' stored predictions on SQuAD dev: the same 10,570 questions,
    so the paired interval of their difference is narrower than the unpaired one."""
    for bundle in ("bert-ensemble", "r-net-plus-ensemble"):
        assert CliRunner().invoke(evaluate_cmd, ["-b", bundle, "-t", "squad-dev"]).exit_code == 0
    done = CliRunner().invoke(main, ["compare", "-b", "bert-ensemble", "-b",
                                     "r-net-plus-ensemble", "-t", "squad-dev", "--json",
                                     "--bootstrap", "2000"])
    assert done.exit_code == 0, done.output
    for p in json.loads(done.stdout)["paired"]:
        assert p["n"] == 10570
        assert (p["hi"] - p["lo"]) / 2 < p["unpaired_half_width"], p
        assert p["lo"] > 0  # BERT's ensemble is better on the same questions
