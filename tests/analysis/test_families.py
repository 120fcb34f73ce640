"""Families against one trend (Awadalla et al. 2022): their public table converts to the
long form row by row; a family's effective robustness is its systems' mean distance from the
baseline family's trend with a t-interval over systems; the command prints both sources'
tables and draws each published panel beside the own population's."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from scipy import stats

from analysis.sources import awadalla, load_source, tidy
from analysis.studies import families
from evaluator.cli.robustness import families_command
from evaluator.store.store import Store
from evaluator.training import recorded
from tests.conftest import REPO

THEIRS = """model_name,model_family,dataset,f1,f1_lower,f1_upper,type
a/m1,roberta,squad,90.5,0.5,0.25,finetuned
a/m1,roberta,squadshifts_reddit,80.0,1.0,2.0,finetuned
a/m1,roberta,DROP,50.0,1.0,1.0,finetuned
g/t5,t5,squadshifts_amazon,30.0,0.5,0.5,zeroshot
"""


def test_their_rows_on_squad_and_squadshifts_become_the_long_form():
    rows = awadalla.convert(THEIRS)
    assert [(r["model"], r["testset"], r["family"]) for r in rows] == [
        ("a/m1", "squad-dev", "fine-tuned"), ("a/m1", "reddit", "fine-tuned"),
        ("g/t5", "amazon", "zero-shot")]  # DROP is not a SQuAD set
    assert (rows[1]["value"], rows[1]["lo"], rows[1]["hi"]) == ("80.0000", "79.0000", "82.0000")
    assert rows[0]["reference"] == "" and rows[1]["reference"] == "squad-dev"


def test_the_committed_table_is_their_four_families_on_five_sets():
    df = tidy.from_csv(REPO / "results" / "awadalla-2022.csv", reference="squad-dev")
    systems = df.groupby("family")["model"].nunique().to_dict()
    assert systems == {"fine-tuned": 37, "few-shot fine-tuned": 89, "in-context learning": 9,
                       "zero-shot": 6}
    assert set(df["testset"]) == {"squad-dev", "new-wiki", "nyt", "reddit", "amazon"}


def _frame(points: dict[str, list[tuple[float, float]]]) -> pd.DataFrame:
    rows = []
    for family, pairs in points.items():
        for i, (x, y) in enumerate(pairs):
            model = f"{family}-{i}"
            rows += [{"model": model, "family": family, "testset": "squad-dev", "metric": "f1",
                      "value": x, "reference": ""},
                     {"model": model, "family": family, "testset": "reddit", "metric": "f1",
                      "value": y, "reference": "squad-dev"}]
    return pd.DataFrame(rows)


def test_a_familys_robustness_is_its_mean_distance_from_the_baseline_trend(tmp_path):
    base = [(20.0, 10.0), (40.0, 30.0), (60.0, 50.0), (80.0, 70.0)]  # y = x - 10 exactly
    above = [(30.0, 25.0), (50.0, 43.0), (70.0, 66.0)]  # +5, +3, +6 above it
    path = tmp_path / "points.csv"
    _frame({"base": base, "prompted": above}).to_csv(path, index=False)
    df = tidy.from_csv(path, reference="squad-dev")
    table = families.family_robustness(df, ["reddit"], baseline="base", scale="linear")
    rows = table.set_index("family")
    assert rows.at["base", "mean_er"] == pytest.approx(0.0, abs=1e-9)
    values = np.array([5.0, 3.0, 6.0])
    half = stats.t.ppf(0.975, 2) * values.std(ddof=1) / np.sqrt(3)
    assert rows.at["prompted", "mean_er"] == pytest.approx(values.mean())
    assert rows.at["prompted", "er_lo"] == pytest.approx(values.mean() - half)
    assert rows.at["prompted", "above"] == 1.0 and rows.at["prompted", "systems"] == 3
    with pytest.raises(ValueError, match="at least 3"):
        families.family_robustness(df, ["reddit"], baseline="prompted-and-missing")


@pytest.mark.slow
def test_the_command_prints_both_sources_and_draws_the_panels_beside(tmp_path, workspace):
    """The own population is the store's: its committed table recorded there, and read back
    as the same numbers the table gives."""
    result = CliRunner().invoke(families_command, [
        "--table", str(REPO / "results" / "awadalla-2022.csv"),
        "--population", str(REPO / "results" / "population.csv"), "--out", str(tmp_path),
        "--bootstrap", "20"])
    assert result.exit_code == 0, result.output
    assert "in-context learning" in result.stdout and "pretrained" in result.stdout
    table = pd.read_csv(tmp_path / "families.csv")
    assert set(table["testset"]) == {"new-wiki", "reddit", "amazon", "new-wiki-test",
                                     "reddit-test", "amazon-test"}
    for shift in ("new-wiki", "reddit", "amazon"):
        assert (tmp_path / f"beside-{shift}.png").stat().st_size > 10_000
    assert Store(workspace).recorded_version(
        recorded.table_path(REPO / "results" / "population.csv")[1])
    direct = families.family_robustness(
        load_source(str(REPO / "results" / "population.csv"), None),
        [own for _, own in families.SHIFTS], "non-pretrained")
    ours = table[table["testset"].isin(direct["testset"])].sort_values(["testset", "family"])
    direct = direct.sort_values(["testset", "family"])
    assert list(ours["family"]) == list(direct["family"])
    assert np.allclose(ours["mean_er"], direct["mean_er"], atol=1e-4)
