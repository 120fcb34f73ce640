"""`qashift population`: the own population's trend fits (OLS, statsmodels' slope interval)
beside the leaderboard population's fits and the study's printed slopes, with figures; served
from the output folder while no input changed; a missing table is one line."""

from __future__ import annotations

import csv
import os

import numpy as np
import pytest
import statsmodels.api as sm
from click.testing import CliRunner
from scipy.stats import norm

from analysis.sources import paper
from analysis.studies import population
from evaluator.cli.main import main

X = [25.0, 31.0, 38.5, 47.0, 55.0, 61.5]  # held-out F1 of six made-up systems
SHIFT = {"new-wiki-test": (1.0, 0.9), "reddit-test": (-5.0, 0.85), "amazon-test": (-9.0, 0.9),
         "addonesent-heldout": (-4.0, 0.7)}
WOBBLE = [0.4, -0.3, 0.8, -0.6, 0.1, -0.2]


def population_table(path) -> None:
    """The study table's columns; EM = F1 - 10 on every set."""
    with open(path, "w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(["model", "testset", "metric", "value", "n", "reference", "family"])
        for i, x in enumerate(X):
            model = f"toy@squad-dev-train/s{i}"
            for metric, shift in (("f1", 0.0), ("em", -10.0)):
                out.writerow([model, "squad-dev-heldout", metric, x + shift, 5453, "squad-dev",
                              "non-pretrained"])
                for testset, (a, b) in SHIFT.items():
                    out.writerow([model, testset, metric, a + b * (x + shift) + WOBBLE[i],
                                  1000, "squad-dev-heldout", "non-pretrained"])


def ols(x, y):
    res = sm.OLS(np.asarray(y), sm.add_constant(np.asarray(x))).fit()
    return res.params[1], *res.conf_int(0.05)[1], res.rsquared


@pytest.fixture
def table(tmp_path):
    path = tmp_path / "population.csv"
    population_table(path)
    return path


def run(*args):
    result = CliRunner().invoke(main, ["population", *args])
    return result


def test_the_fits_are_statsmodels_and_sit_beside_the_printed_ones(table, tmp_path,
                                                                  shared_data):
    out = tmp_path / "out"
    result = run("--table", str(table), "--data-dir", str(shared_data), "--out", str(out),
                 "--bootstrap", "20")
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(open(out / "population-fits.csv")))
    assert len(rows) == 4 * 2 * 2
    printed = {(p["testset"], p["metric"], p["scale"]): p
               for p in paper.published_fits().to_dict("records")}
    for row in rows:
        testset = {"new-wiki": "new-wiki-test", "reddit": "reddit-test",
                   "amazon": "amazon-test", "addonesent": "addonesent-heldout"}[row["shift"]]
        a, b = SHIFT[testset]
        shift = -10.0 if row["metric"] == "em" else 0.0
        x = [v + shift for v in X]
        y = [a + b * v + w for v, w in zip(x, WOBBLE)]
        if row["scale"] == "probit":
            x, y = norm.ppf(np.asarray(x) / 100), norm.ppf(np.asarray(y) / 100)
        slope, lo, hi, r2 = ols(x, y)
        assert float(row["own_slope"]) == pytest.approx(slope, abs=1e-9)
        assert float(row["own_slope_lo"]) == pytest.approx(lo, abs=1e-9)
        assert float(row["own_slope_hi"]) == pytest.approx(hi, abs=1e-9)
        assert float(row["own_r2"]) == pytest.approx(r2, abs=1e-9)
        assert int(row["own_n"]) == 6
        p = printed.get((row["shift"], row["metric"], row["scale"]))
        if p:
            assert float(row["published_slope"]) == p["slope"]
    new_wiki = next(r for r in rows if (r["shift"], r["metric"], r["scale"])
                    == ("new-wiki", "f1", "linear"))
    # the leaderboard population reproduces the study's printed New-Wiki F1 slope (0.92)
    assert float(new_wiki["leaderboard_slope"]) == pytest.approx(0.92, abs=0.03)
    assert int(new_wiki["leaderboard_n"]) > 100
    assert (out / "population-reddit-f1-linear.png").stat().st_size > 10_000


@pytest.mark.slow
def test_a_second_run_serves_the_stored_fits_until_an_input_changes(table, tmp_path,
                                                                    shared_data):
    out = tmp_path / "out"
    args = ["--table", str(table), "--data-dir", str(shared_data), "--out", str(out),
            "--bootstrap", "0"]
    assert run(*args).exit_code == 0
    stamp = os.stat(out / "population-fits.csv").st_mtime_ns
    again = run(*args)
    assert again.exit_code == 0 and "inputs unchanged" in again.stderr
    assert os.stat(out / "population-fits.csv").st_mtime_ns == stamp
    assert again.stdout.count("new-wiki") == 4
    with open(table, "a") as handle:
        handle.write("toy@squad-dev-train/s9,squad-dev-heldout,f1,70.0,5453,squad-dev,x\n")
    changed = run(*args)
    assert changed.exit_code == 0 and "inputs unchanged" not in changed.stderr
    assert os.stat(out / "population-fits.csv").st_mtime_ns != stamp


def test_a_missing_table_is_one_line(tmp_path):
    result = run("--table", str(tmp_path / "nope.csv"), "--out", str(tmp_path / "out"))
    assert result.exit_code == 1
    [line] = result.stderr.strip().splitlines()
    assert "no such table" in line and "qashift study run" in line
    assert not (tmp_path / "out").exists()


def test_the_census_counts_complete_systems_the_em_spread_and_strong_approaches(table):
    rows = table.read_text().splitlines()
    partial = "other@squad-dev-train/s0"  # scored on the held-out half only
    rows += [f"{partial},squad-dev-heldout,f1,70.0,5453,squad-dev,non-pretrained",
             f"{partial},squad-dev-heldout,em,60.0,5453,squad-dev,non-pretrained"]
    table.write_text("\n".join(rows) + "\n")
    facts = population.census(table)
    assert facts["systems"] == 7 and facts["complete"] == 6 and facts["approaches"] == 1
    assert (facts["em_low"], facts["em_high"]) == (min(X) - 10, max(X) - 10)
    assert facts["best_f1"] == {"toy": max(X)} and facts["above"] == ["toy"]
    result = run("--table", str(table), "--out", str(table.parent / "out"), "--bootstrap", "0")
    assert "7 systems, 6 of them scored on all 5 test sets, from 1 approach;" in result.stdout
    assert "squad-dev-heldout EM 15.0 to 51.5 (spread 36.5)" in result.stdout
    assert "above 50: 1 (toy)" in result.stdout
    assert "other test sets" not in result.stdout
    assert max(map(len, result.stdout.splitlines())) <= 120


def test_the_census_counts_systems_complete_on_the_shift_sets_and_on_the_others(table):
    """A table that also holds other sets (the ablation folders): "complete" still means the
    shift sets, and a further line says how many systems the other sets cover."""
    rows = table.read_text().splitlines()
    rows += [f"toy@squad-dev-train/s0,squad-dev-heldout-empty-question,{m},1.0,5453,"
             f"squad-dev-heldout,non-pretrained" for m in ("em", "f1")]
    rows += ["toy@squad-dev-train/s1,squad-dev-heldout-empty-question,em,1.0,5453,"
             "squad-dev-heldout,non-pretrained"]  # F1 missing: not scored on it
    table.write_text("\n".join(rows) + "\n")
    facts = population.census(table)
    assert facts["complete"] == 6 and facts["complete_on_others"] == 1
    assert facts["other_testsets"] == ["squad-dev-heldout-empty-question"]
    assert population.census_line(facts).endswith(
        "\n1 of them also on all 1 other test sets (squad-dev-heldout-empty-question)")


def test_ablations_are_each_approachs_mean_relative_f1_change_with_a_t_interval(table):
    """Relative change in F1 of each system under an ablation against its reference set,
    averaged over the approach's systems scored on both, with a Student-t interval over them;
    fewer than five systems give no interval; a system without its reference score is left
    out; a set that is no ablation (a natural shift with the same reference) is not listed."""
    ablated = {0: 20.0, 1: 15.5, 2: 30.0, 3: 33.0, 4: 41.0}  # toy systems s0-s4's ablation F1
    rows = table.read_text().splitlines()
    rows += [f"toy@squad-dev-train/s{i},squad-dev-heldout-empty-question,f1,{v},5453,"
             f"squad-dev-heldout,non-pretrained" for i, v in ablated.items()]
    rows += [f"toy@squad-dev-train/s{i},nyt,f1,{v},10065,squad-dev-heldout,non-pretrained"
             for i, v in ablated.items()]
    rows += ["solo@squad-dev-train/s0,squad-dev-heldout,f1,40.0,5453,squad-dev,pretrained",
             "solo@squad-dev-train/s0,squad-dev-heldout-empty-question,f1,10.0,5453,"
             "squad-dev-heldout,pretrained",
             "orphan@squad-dev-train/s0,squad-dev-heldout-empty-question,f1,10.0,5453,"
             "squad-dev-heldout,pretrained"]
    table.write_text("\n".join(rows) + "\n")
    found = population.ablations(table)
    assert set(found["testset"]) == {"squad-dev-heldout-empty-question"}  # shifts are not
    assert list(found["approach"]) == ["solo", "toy"]  # stronger reference F1 (40, 39.3) first
    toy = found.iloc[1]
    rel = np.array([100 * (v - X[i]) / X[i] for i, v in ablated.items()])
    half = 2.7764451051977987 * rel.std(ddof=1) / np.sqrt(5)  # t(0.975, 4 df)
    assert toy["systems"] == 5 and toy["parent_f1"] == pytest.approx(np.mean(X[:5]))
    assert toy["rel_f1"] == pytest.approx(rel.mean())
    assert (toy["rel_f1_lo"], toy["rel_f1_hi"]) == pytest.approx(
        (rel.mean() - half, rel.mean() + half))
    solo = found.iloc[0]
    assert solo["systems"] == 1 and solo["rel_f1"] == pytest.approx(-75.0)
    assert np.isnan(solo["rel_f1_lo"])
    doc = population.ablations_markdown(found)
    assert doc.splitlines()[0] == "| approach (mean reference F1) | empty-question |"
    assert "| solo (40.0) | -75.0% (1) |" in doc
    assert f"| toy ({np.mean(X[:5]):.1f}) | {rel.mean():+.1f}% [" in doc
    result = run("--table", str(table), "--out", str(table.parent / "out"), "--bootstrap",
                 "0", "--markdown")
    assert result.exit_code == 0 and doc in result.stdout
