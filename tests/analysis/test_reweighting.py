"""Reweighting per-stratum F1 by a new set's mix of strata (Miller et al. 2020, App. C)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from analysis.sources import SystemScores, per_question_scores, strata
from analysis.stats import reweighting
from evaluator.cli.main import main
from evaluator.core import settings
from evaluator.store.store import Store
from tests.conftest import outdate_strata_rows, write_command_bundle, write_testset


def test_the_studys_worked_example_gives_825():
    # original: 50% NP at 100 F1, 50% places at 75; new set: 30% NP, 70% places
    f1 = reweighting.stratum_f1({"a": 100.0, "b": 75.0}, {"a": "np", "b": "place"})
    assert reweighting.reweighted(f1, {"np": 0.3, "place": 0.7}, 87.5) == pytest.approx(82.5)
    assert reweighting.reweighted(f1, {"np": 0.5, "place": 0.5}, 87.5) == pytest.approx(87.5)


def test_a_stratum_missing_from_the_original_takes_the_overall_f1():
    assert reweighting.reweighted({"np": 90.0}, {"np": 0.5, "date": 0.5}, 70.0) == 80.0


def features(strata_by_id):
    return {qid: {"answer_type": s, "divergence": None, "agreement": 1, "question_words": 5,
                  "answer_words": 1, "overlap": 0.0} for qid, s in strata_by_id.items()}


def test_drop_table_predicted_and_observed():
    orig = features({"o1": "date", "o2": "date", "o3": "person", "o4": "person"})
    new = features({"n1": "date", "n2": "person", "n3": "person", "n4": "person"})
    system = SystemScores("s", {"orig": {"o1": 100.0, "o2": 80.0, "o3": 40.0, "o4": 60.0},
                                "new": {"n1": 50.0, "n2": 0.0, "n3": 10.0, "n4": 20.0}})
    kept = reweighting.stratum_table([system], {"orig": orig, "new": new},
                                     ["answer_type", "divergence"])
    assert kept[kept["testset"] == "orig"].set_index("stratum")[["n", "f1"]].to_dict(
        "index") == {"all": {"n": 4, "f1": 70.0}, "date": {"n": 2, "f1": 90.0},
                     "person": {"n": 2, "f1": 50.0}}  # no divergence: no such stratum
    table = reweighting.drop_table(kept, {"orig": orig, "new": new}, {"new": "orig"},
                                   ["answer_type", "divergence"])
    row = table.set_index("stratification").loc["answer_type"]
    assert row["original_f1"] == 70.0 and row["observed_f1"] == 20.0
    assert row["predicted_f1"] == pytest.approx(0.25 * 90 + 0.75 * 50)
    assert row["observed_drop"] == 50.0 and row["predicted_drop"] == pytest.approx(10.0)
    assert math.isnan(table.set_index("stratification").at["divergence", "predicted_f1"])
    summary = reweighting.drop_summary(table).set_index("stratification")
    assert summary.at["answer_type", "explained"] == pytest.approx(0.2)
    shares = reweighting.share_table({"new": new}, "answer_type")
    assert shares.set_index("stratum")["share"].to_dict() == {"date": 0.25, "person": 0.75}


ANSWER_START = """
import json, sys
doc = json.load(open(sys.argv[1]))
json.dump({{q["id"]: " ".join(p["context"].split()[{start}:{start} + {width}])
           for a in doc["data"] for p in a["paragraphs"] for q in p["qas"]}},
          open(sys.argv[2], "w"))
"""


def toy_runs(tmp_path, monkeypatch, dev_raw, answers: list[tuple[int, int]],
             paragraphs: int) -> tuple[CliRunner, Path]:
    """Two small sets (tiny-new's reference is tiny-orig), a toy system per (start, width)
    of the passage's words it answers with, each evaluated on both."""
    sets, subs = tmp_path / "sets", tmp_path / "subs"
    write_testset(sets, "tiny-orig", {"version": "1.1", "data": [
        {**dev_raw["data"][0], "paragraphs": dev_raw["data"][0]["paragraphs"][:paragraphs]}]})
    write_testset(sets, "tiny-new", {"version": "1.1", "data": [
        {**dev_raw["data"][1], "paragraphs": dev_raw["data"][1]["paragraphs"][:paragraphs]}]},
        reference="tiny-orig")
    for i, (start, width) in enumerate(answers):
        write_command_bundle(subs, f"toy-{i}", ANSWER_START.format(start=start, width=width))
    monkeypatch.setenv("QASHIFT_TESTSETS", str(sets))
    monkeypatch.setenv("QASHIFT_SUBMISSIONS", str(subs))
    runner = CliRunner()
    result = runner.invoke(main, ["evaluate", "-b", "all", "-t", "tiny-orig", "-t", "tiny-new",
                                  "--runner", "local"])
    assert result.exit_code == 0, result.output
    return runner, subs


def test_strata_command_on_our_own_runs(tmp_path, monkeypatch, workspace, dev_raw):
    runner, subs = toy_runs(tmp_path, monkeypatch, dev_raw, [(0, 2), (3, 5), (1, 12)], 6)
    # toy-2 changed after its runs: they are superseded, and the new digest has no pair
    write_command_bundle(subs, "toy-2", ANSWER_START.format(start=2, width=12))
    result = runner.invoke(main, ["evaluate", "-b", "toy-2", "-t", "tiny-new", "--runner",
                                  "local"])
    assert result.exit_code == 0, result.output
    out = tmp_path / "strata"
    result = runner.invoke(main, ["strata", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "Mean drop over systems" in result.stdout
    for stem in ("answer-types", "divergence", "agreement", "reweighted-answer-types",
                 "reweighted-divergence"):
        assert (out / f"{stem}.png").stat().st_size > 1000, stem
    drops = (out / "drops.csv").read_text().splitlines()
    assert len(drops) == 1 + 2 * len(strata.STRATIFICATIONS)
    assert not any(line.startswith("toy-2") for line in drops)
    # the prediction, recomputed by hand from the stored scores and the cached features
    cached = {p.name: json.loads(p.read_text())
              for p in (settings.cache_dir() / "strata").glob("*.json")}
    assert len(cached) == 2
    toy = next(s for s in per_question_scores(Store.open_default()) if s.system == "toy-1")
    feats = {t: next(f for f in cached.values() if set(f) == set(toy.scores[t]))
             for t in ("tiny-orig", "tiny-new")}
    by_type: dict[str, list[float]] = {}
    for qid, f1 in toy.scores["tiny-orig"].items():
        by_type.setdefault(feats["tiny-orig"][qid]["answer_type"], []).append(f1)
    overall = sum(toy.scores["tiny-orig"].values()) / len(toy.scores["tiny-orig"])
    new_types = [row["answer_type"] for row in feats["tiny-new"].values()]
    expected = sum((sum(by_type[t]) / len(by_type[t])) if t in by_type else overall
                   for t in new_types) / len(new_types)
    row = next(line for line in drops if line.startswith("toy-1,tiny-new,tiny-orig,answer_type"))
    assert float(row.split(",")[6]) == pytest.approx(expected, abs=1e-4)


def test_a_stratum_table_keeps_the_analysis_when_the_store_is_gone(tmp_path, monkeypatch,
                                                                   workspace, dev_raw):
    """`strata --table` writes what the drops and figures need, per stratum; on an empty
    workspace the table alone gives the same drops, and rows whose features changed since
    are left out, named, and kept in the file."""
    runner, _ = toy_runs(tmp_path, monkeypatch, dev_raw, [(0, 2), (3, 5)], 4)
    table, first, second = tmp_path / "strata.csv", tmp_path / "one", tmp_path / "two"
    result = runner.invoke(main, ["strata", "--out", str(first), "--table", str(table)])
    assert result.exit_code == 0, result.output
    rows = strata.read_table(table)
    assert {(r["system"], r["testset"]) for r in rows} == {
        (f"toy-{i}", t) for i in range(2) for t in ("tiny-orig", "tiny-new")}
    overall = {(r["system"], r["testset"]): r for r in rows if r["stratum"] == "all"}
    stored = {s.system: s.scores for s in per_question_scores(Store.open_default())}
    for (system, testset), row in overall.items():
        scores = stored[system][testset]
        assert row["n"] == len(scores)
        assert row["f1"] == pytest.approx(sum(scores.values()) / len(scores), abs=1e-8)

    monkeypatch.setenv("QASHIFT_WORKSPACE", str(tmp_path / "empty"))
    result = runner.invoke(main, ["strata", "--out", str(second), "--table", str(table)])
    assert result.exit_code == 0, result.output
    for name in ("drops.csv", "drops_mean.csv", "strata_f1.csv", "shares.csv"):
        assert (second / name).read_text() == (first / name).read_text(), name

    outdate_strata_rows(table, "toy-1,")
    older = table.read_text()
    result = runner.invoke(main, ["strata", "--out", str(second), "--table", str(table)])
    assert result.exit_code == 0, result.output
    assert f"2 (system, set) pairs of {table} were left out" in result.output
    drops = (second / "drops.csv").read_text()
    assert "toy-0,tiny-new" in drops and "toy-1," not in drops
    assert table.read_text() == older  # nothing scored here: the file is as it was
    result = runner.invoke(main, ["strata", "--out", str(second), "--table",
                                  str(tmp_path / "results.csv.bak")])
    assert result.exit_code != 0 and "no per-question results in the store" in result.output
