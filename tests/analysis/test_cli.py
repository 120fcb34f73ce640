"""The analysis commands, as the qashift group will run them."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from analysis.sources import load_source
from evaluator.cli.figures import figures_command, fit_command
from evaluator.cli.main import main
from evaluator.cli.population import population_command
from evaluator.cli.robustness import families_command
from evaluator.cli.strata import strata_command
from tests.conftest import REPO

NEW_SETS = ("new-wiki", "nyt", "reddit", "amazon")


@pytest.mark.slow
def test_figures_regenerates_everything_from_published_data(shared_data, tmp_path):
    out = tmp_path / "figs"
    result = CliRunner().invoke(figures_command, ["--source", "squadshifts-published",
                                                  "--data-dir", str(shared_data),
                                                  "--out", str(out)])
    assert result.exit_code == 0, result.output
    for t in NEW_SETS:
        for m in ("f1", "em"):
            for fmt in ("png", "pdf", "svg"):
                assert (out / f"{t}-{m}.{fmt}").stat().st_size > 1000
    for name in ("fits.csv", "gaps.csv", "coverage.txt", "concurrence-f1.png",
                 "grid-f1-probit.svg"):
        assert (out / name).exists(), name
    fits = (out / "fits.csv").read_text().splitlines()
    assert len(fits) == 1 + 18 and fits[0].startswith("testset,metric,scale,slope")
    assert "matched:" in result.output


def test_fit_prints_the_table(shared_data):
    result = CliRunner().invoke(fit_command, ["--data-dir", str(shared_data)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split()[:4] == ["testset", "metric", "scale", "slope"]
    assert len(lines) == 19
    # the low outlier of the published population drives the Reddit and Amazon F1 lines
    assert "amazon f1 (linear): UnsupervisedQA V1 alone moves the fit" in result.stderr


def test_csv_source_and_bad_source(tmp_path):
    path = tmp_path / "t.csv"
    rows = ["model,testset,metric,value"] + [
        f"m{i},{t},f1,{v}" for i in range(5) for t, v in (("squad-test", 70 + i),
                                                           ("reddit", 60 + 2 * i))]
    path.write_text("\n".join(rows) + "\n")
    result = CliRunner().invoke(fit_command, ["--source", str(path)])
    assert result.exit_code == 0 and "2.0000" in result.output
    bad = CliRunner().invoke(fit_command, ["--source", "nope"])
    assert bad.exit_code != 0 and "neither" in bad.output


def test_store_records_can_be_passed_in():
    recs = [{"bundle": f"b{i}", "name": f"m{i}", "family": None, "kind": "model",
             "testset": t, "n": 100, "em": v, "f1": v, "em_lo": None, "em_hi": None,
             "f1_lo": None, "f1_hi": None, "reference_scores": {}, "metadata": {}}
            for i in range(4) for t, v in (("squad-dev", 70 + i), ("reddit", 50 + i))]
    df = load_source("store", None, store_records=lambda: recs)
    assert set(df["testset"]) == {"squad-dev", "reddit"}


def test_the_analysis_commands_import_only_click():
    """The analysis commands load pandas, matplotlib and jinja2 inside the commands."""
    code = ("import sys, evaluator.cli.figures, evaluator.cli.papers, evaluator.cli.strata, "
            "evaluator.cli.robustness; print(sorted(m for m in "
            "('pandas','matplotlib','numpy','scipy','jinja2') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def trend_table(path, testset: str, points: list[tuple[int, int]]):
    """A results CSV of four models: (held-out score, `testset` score), EM and F1 alike."""
    rows = ["model,testset,metric,value,reference"]
    for i, (x, y) in enumerate(points):
        for metric in ("f1", "em"):
            rows.append(f"m{i},squad-dev-heldout,{metric},{x},")
            rows.append(f"m{i},{testset},{metric},{y},squad-dev-heldout")
    path.write_text("\n".join(rows) + "\n")
    return path


def test_figures_compare_puts_two_trends_side_by_side(tmp_path, shared_data):
    from click.testing import CliRunner

    from evaluator.cli.figures import figures_command

    table = trend_table(tmp_path / "ours.csv", "new-wiki", [(60, 50), (70, 62), (80, 71), (90, 83)])
    out = tmp_path / "figs"
    result = CliRunner().invoke(figures_command, [
        "--source", str(table), "--compare", "squadshifts-published", "--data-dir",
        str(shared_data), "--out", str(out), "--bootstrap", "20"])
    assert result.exit_code == 0, result.output
    for metric in ("f1", "em"):
        assert (out / f"compare-new-wiki-{metric}.png").stat().st_size > 10_000
    assert not list(out.glob("compare-reddit-*"))  # only sets both sources have


def test_figures_compare_skips_a_set_one_source_cannot_fit_with_a_warning(tmp_path, shared_data):
    """AddOneSent has EM only in the published data: no F1 comparison, a warning, no
    traceback (a table of our own beside the published one)."""
    from click.testing import CliRunner

    from evaluator.cli.figures import figures_command

    table = trend_table(tmp_path / "ours.csv", "addonesent",
                        [(60, 40), (70, 47), (80, 55), (90, 61)])
    result = CliRunner().invoke(figures_command, [
        "--source", str(table), "--compare", "squadshifts-published", "--data-dir",
        str(shared_data), "--out", str(tmp_path / "figs"), "--bootstrap", "20"])
    assert result.exit_code == 0, result.output
    assert "no comparison drawn for addonesent f1" in result.output
    assert (tmp_path / "figs" / "compare-addonesent-em.png").is_file()


def test_fit_on_a_store_without_pairs_says_what_figures_says(workspace, tmp_path):
    """A store with scores on an original set only: no trend to fit, one line, exit 1, as
    `figures` (not an empty pandas table)."""
    ran = CliRunner().invoke(main, ["evaluate", "-b", "bert-ensemble", "-t", "squad-dev"])
    assert ran.exit_code == 0, ran.output
    fit = CliRunner().invoke(main, ["fit", "--source", "store"])
    drawn = CliRunner().invoke(main, ["figures", "--source", "store", "--out",
                                      str(tmp_path / "figs")])
    assert fit.exit_code == drawn.exit_code == 1
    assert fit.stdout == ""
    [line] = fit.stderr.splitlines()
    assert line == drawn.stderr.splitlines()[0].replace("nothing to plot", "nothing to fit")
    assert line.startswith("error: nothing to fit: no test set in these results has scores")


def test_fit_with_too_few_models_everywhere_says_why_instead_of_an_empty_table(tmp_path):
    table = trend_table(tmp_path / "two.csv", "reddit", [(60, 50), (70, 62)])
    result = CliRunner().invoke(fit_command, ["--source", str(table)])
    assert result.exit_code == 1 and result.stdout == ""
    assert "2 models on reddit (f1): at least 3 are needed for a fit" in result.stderr
    assert result.stderr.splitlines()[-1].startswith("error: nothing to fit: ")


@pytest.mark.parametrize("command, defaults", [
    (families_command, {"table": "results/awadalla-2022.csv",
                        "population": "results/population.csv", "out": "figures/families"}),
    (population_command, {"table_path": "results/population.csv",
                          "plan": "studies/population.yaml", "out": "figures/population"}),
    (strata_command, {"out": "figures/strata"}),
    (figures_command, {"out": "figures"}),
])
def test_default_paths_are_in_the_project_root_wherever_a_command_runs(
        command, defaults, tmp_path, monkeypatch):
    """The tables and plans that ship with the repository are found from any directory, and
    the figures go to the checkout's figures/ (as the docs have them); QASHIFT_ROOT names
    another checkout."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("QASHIFT_ROOT", raising=False)
    params = command.make_context(command.name, []).params
    assert {k: params[k] for k in defaults} == {k: REPO / v for k, v in defaults.items()}
    other = tmp_path / "checkout"
    for relative in defaults.values():
        if relative.endswith((".csv", ".yaml")):
            (other / relative).parent.mkdir(parents=True, exist_ok=True)
            (other / relative).write_bytes((REPO / relative).read_bytes())
    monkeypatch.setenv("QASHIFT_ROOT", str(other))
    params = command.make_context(command.name, []).params
    assert {k: params[k] for k in defaults} == {k: other / v for k, v in defaults.items()}


@pytest.mark.slow
def test_families_runs_from_outside_the_checkout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("QASHIFT_ROOT", raising=False)
    result = CliRunner().invoke(main, ["families", "--out", "out", "--bootstrap", "0"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "families.csv").is_file()


def test_analysis_errors_are_one_line_in_the_style_of_every_command(workspace):
    """`error: ...` on stderr and exit status 1, as a UserError anywhere (not click's
    `Error: ...`)."""
    for args in (["extra-data", "--table", str(REPO / "results" / "population.csv"),
                  "--base", "no-such-split"],
                 ["strata", "--out", str(workspace.parent / "strata")]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 1, args
        [line] = result.stderr.splitlines()
        assert line.startswith("error: no "), line


def test_the_published_data_comes_from_the_data_mirrors_as_for_every_command(
        shared_data, tmp_path, monkeypatch):
    """`qashift --data-dir DIR fit` reads DIR, as `evaluate` does; of several mirrors the
    first that holds the published results; none holding them is one line naming the files."""
    monkeypatch.delenv("QASHIFT_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)  # no ../shared/data to fall back on
    empty = tmp_path / "empty"
    (empty / "squadshifts").mkdir(parents=True)
    found = CliRunner().invoke(main, ["--data-dir", str(empty), "--data-dir",
                                      str(shared_data), "fit"])
    assert found.exit_code == 0, found.output
    assert len(found.stdout.splitlines()) == 19
    for argv in (["--data-dir", str(empty), "fit"], ["fit", "--data-dir", str(empty)],
                 ["reproduce", "--data-dir", str(empty)]):
        missing = CliRunner().invoke(main, argv)
        assert missing.exit_code == 1, argv
        [line] = missing.stderr.splitlines()
        assert line.startswith(f"error: missing published data: "
                               f"{empty / 'squadshifts' / 'results.json'}, "
                               f"{empty / 'squad-leaderboard' / 'out-v1.1.json'}"), line


@pytest.mark.parametrize("command", ["fit", "figures", "report", "population", "concurrence",
                                     "families"])
def test_a_negative_bootstrap_count_is_refused_by_every_analysis_command(command):
    result = CliRunner().invoke(main, [command, "--bootstrap", "-5"])
    assert result.exit_code == 2 and "-5 is not in the range x>=0" in result.stderr
