"""The 262 SQuAD v1.1 leaderboard entries become registered bundle folders that wait for
their program files; `bundles complete` makes one runnable like any other command bundle."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from evaluator.bundles import spec as bundles
from evaluator.bundles.leaderboard import folder_spec
from evaluator.cli.main import evaluate_cmd, main
from tests.conftest import write_testset

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def export(shared_data: Path) -> Path:
    return shared_data / "squad-leaderboard" / "out-v1.1.json"


def test_every_entry_gets_a_unique_folder_with_its_codalab_ids(export, tmp_path, monkeypatch):
    monkeypatch.setenv("QASHIFT_SUBMISSIONS", str(tmp_path))
    result = CliRunner().invoke(main, ["bundles", "import-leaderboard", "--export",
                                       str(export)])
    assert result.exit_code == 0, result.output
    assert "262 bundle folders written" in result.output
    loaded = [bundles.get(name, tmp_path) for name in bundles.available(tmp_path)]
    assert len(loaded) == 262
    assert all(b.status == "awaiting-program" for b in loaded)
    anna = bundles.get("lb-anna-single-model-601dd7", tmp_path)
    assert anna.name == "{ANNA} (single model)"
    assert anna.metadata["institution"] == "LG AI Research"
    assert anna.reference_scores["f1"] == pytest.approx(95.71930408568393)
    import yaml

    codalab = yaml.safe_load((anna.folder / "bundle.yaml").read_text())["codalab"]
    assert codalab["predict_id"] == "0xfb01cd94a60a46f89bab8b0d952e6d5f"
    assert codalab["eval_image"].startswith("codalab/default-cpu@sha256:")
    # entries without published scores carry no reference scores rather than made-up ones
    raw = json.loads(export.read_text())["leaderboard"]
    unscored = [folder_spec(e)["id"] for e in raw if e["scores"]["f1"] is None]
    assert unscored and all(not bundles.get(i, tmp_path).reference_scores for i in unscored)


def test_the_committed_folders_match_the_export(export):
    raw = json.loads(export.read_text())["leaderboard"]
    expected = {folder_spec(e)["id"] for e in raw}
    assert expected <= set(bundles.available())


def test_waiting_bundles_are_listed_with_what_they_lack_and_cannot_run(workspace):
    listed = CliRunner().invoke(main, ["bundles", "list", "--awaiting"]).output
    assert "lb-anna-single-model-601dd7" in listed and "lacks program files" in listed
    result = CliRunner().invoke(main, ["evaluate", "-b", "lb-anna-single-model-601dd7",
                                       "-t", "squad-dev"])
    assert result.exit_code == 1
    assert "cannot run on squad-dev: bundle is awaiting-program" in result.output


def test_complete_makes_a_folder_runnable(tmp_path, monkeypatch, workspace, small_dev):
    subs = tmp_path / "subs"
    shutil.copytree(REPO / "submissions" / "lb-anna-single-model-601dd7",
                    subs / "lb-anna-single-model-601dd7")
    monkeypatch.setenv("QASHIFT_SUBMISSIONS", str(subs))
    monkeypatch.setenv("QASHIFT_TESTSETS", str(tmp_path / "sets"))
    write_testset(tmp_path / "sets", "small", small_dev)
    program = tmp_path / "downloaded"
    program.mkdir()
    shutil.copy(REPO / "submissions" / "sliding-window" / "sliding_window.py", program)
    runner = CliRunner()
    bad = runner.invoke(main, ["bundles", "complete", "lb-anna-single-model-601dd7",
                               str(program), "--command", "python3 sliding_window.py x y"])
    assert bad.exit_code == 1 and "{input} and {output}" in bad.output
    done = runner.invoke(main, ["bundles", "complete", "lb-anna-single-model-601dd7",
                                str(program), "--command",
                                "python3 sliding_window.py {input} {output}"])
    assert done.exit_code == 0, done.output
    bundle = bundles.get("lb-anna-single-model-601dd7")
    assert bundle.status == "ready" and bundle.kind == "command"
    assert bundle.reference_scores["em"] == pytest.approx(90.62204972201825)
    result = runner.invoke(evaluate_cmd, ["-b", "lb-anna-single-model-601dd7", "-t", "small",
                                          "--runner", "local", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["results"][0]["n"] == sum(
        len(p["qas"]) for a in small_dev["data"] for p in a["paragraphs"])
