"""The Python API is the one evaluation entry: `evaluate` returns the Evaluation, whose frame
holds the same cells as the `evaluate` command; a wheel installed into a fresh virtual
environment runs README's example from outside the source tree."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner

import evaluator
from evaluator.cli.main import evaluate_cmd
from evaluator.core.errors import UserError
from tests.conftest import REPO, SLIDING_WINDOW, few_of, tiny_registry, use_workspace
from tests.tiny_bert import write_hfqa_bundle


def test_evaluate_gives_rows_failures_and_stored_results(tmp_path, monkeypatch, workspace,
                                                         small_dev):
    sets, subs = tiny_registry(tmp_path, monkeypatch, {"tiny": small_dev}, {
        "sliding-window": SLIDING_WINDOW, "crasher": "import sys\nsys.exit('no')\n"})
    done = evaluator.evaluate(bundles=["sliding-window", "crasher"], testsets=["tiny"],
                              runner="local")
    assert done.config.bundles == ("sliding-window", "crasher")
    cells = done.frame()
    assert list(cells["bundle"]) == ["sliding-window", "crasher"]
    ok, bad = cells.iloc[0], cells.iloc[1]
    assert ok["n"] == sum(len(p["qas"]) for a in small_dev["data"] for p in a["paragraphs"])
    assert ok["em_lo"] <= ok["em"] <= ok["em_hi"] and ok["f1_lo"] <= ok["f1"] <= ok["f1_hi"]
    assert not ok["cached"] and bad["failure_class"] == "nonzero-exit"
    again = evaluator.evaluate(bundles=["sliding-window"], testsets=["tiny"],
                               runner="local").frame()
    assert bool(again.at[0, "cached"]) and again.at[0, "f1"] == ok["f1"]
    stored = evaluator.results(testset="tiny")
    assert list(stored["bundle"]) == ["sliding-window"] and stored.at[0, "f1"] == ok["f1"]
    # an edited bundle is another system: its earlier runs are superseded, as in the analysis
    code = next((subs / "sliding-window").glob("*.py"))
    code.write_text(code.read_text() + "\n# edited\n")
    assert evaluator.results(testset="tiny").empty
    evaluator.evaluate(evaluator.EvaluationConfig(bundles=("sliding-window",),
                                                  testsets=("tiny",), runner="local"))
    assert list(evaluator.results(testset="tiny")["bundle"]) == ["sliding-window"]


def readme_example() -> str:
    text = (REPO / "README.md").read_text()
    section = text.split("## Python API", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_a_wheel_in_a_fresh_venv_runs_the_readme_example_from_elsewhere(tmp_path, shared_data):
    venv = tmp_path / "venv"
    # --without-pip: the venv then uses the interpreter's own pip and setuptools (its bundled
    # ones are too old to build a wheel without the `wheel` package)
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                    str(venv)],
                   check=True)
    python = venv / "bin" / "python"
    install = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps",
                              "--no-build-isolation", str(REPO)], capture_output=True,
                             text=True, timeout=600)
    assert install.returncode == 0, install.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "QASHIFT_ROOT": str(REPO), "QASHIFT_DATA_DIR": str(shared_data),
           "QASHIFT_WORKSPACE": str(elsewhere / "ws"), "QASHIFT_CACHE": str(elsewhere / "c"),
           "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    env.pop("QASHIFT_TESTSETS", None)
    env.pop("QASHIFT_SUBMISSIONS", None)
    where = subprocess.run([str(python), "-c", "import evaluator; print(evaluator.__file__)"],
                           cwd=elsewhere, env=env, capture_output=True, text=True)
    assert where.stdout.startswith(str(venv)), where.stdout  # the wheel, not the checkout
    run = subprocess.run([str(python), "-c", readme_example()], cwd=elsewhere, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert "sliding-window" in run.stdout and "10570" in run.stdout


API_OPTIONS = [  # (the API's keyword arguments, the same as `evaluate` flags)
    ({"level": 0.9}, ["--level", "0.9"]),
    ({"cluster": "paragraph"}, ["--cluster", "paragraph"]),
    ({"limit": 7, "seed": 3}, ["--limit", "7", "--seed", "3"]),
    ({"device": "cpu"}, ["--device", "cpu"]),
    ({"parallel": 2}, ["-j", "2"]),
    ({"model_args": {"batch_size": 16, "max_seq_len": 128}},
     ["--model-args", "batch_size=16,max_seq_len=128"]),
]


@pytest.fixture(scope="module")
def option_registry(tmp_path_factory, dev_raw, tiny_model, shared_data):
    """The option tests' registry (the sliding window and a tiny checkpoint; 95 questions),
    and the plain run (no option) of each list of bundles they run, in a store of its own:
    (sets, subs, {bundles: the plain run's frame})."""
    home = tmp_path_factory.mktemp("api-options")
    with pytest.MonkeyPatch.context() as patch:
        use_workspace(patch, home, shared_data)
        sets, subs = tiny_registry(home, patch, {"tiny": few_of(dev_raw)},
                                   {"sliding-window": SLIDING_WINDOW})
        write_hfqa_bundle(subs, "tiny-hf", tiny_model)
        plain = {names: evaluator.evaluate(bundles=list(names), testsets=["tiny"],
                                           runner="local").frame()
                 for names in (("tiny-hf",), ("sliding-window", "tiny-hf"))}
    return sets, subs, plain


@pytest.mark.slow
@pytest.mark.parametrize("kwargs, flags", API_OPTIONS, ids=lambda v: str(v)[:30])
def test_the_api_forwards_each_option_as_the_command_reads_it(monkeypatch, workspace,
                                                              option_registry, kwargs, flags):
    sets, subs, plain_runs = option_registry
    monkeypatch.setenv("QASHIFT_TESTSETS", str(sets))
    monkeypatch.setenv("QASHIFT_SUBMISSIONS", str(subs))
    bundles_ = ("tiny-hf",) if "model_args" in kwargs else ("sliding-window", "tiny-hf")
    rows = evaluator.evaluate(bundles=list(bundles_), testsets=["tiny"], runner="local",
                              **kwargs).frame()
    done = CliRunner().invoke(evaluate_cmd, [*sum((["-b", b] for b in bundles_), []), "-t",
                                             "tiny", "--runner", "local", "--json", *flags])
    assert done.exit_code == 0, done.output
    cli = json.loads(done.stdout)["results"]
    assert [r["key"] for r in cli] == list(rows["key"])  # the same cells: the same options
    for row, cell in zip(rows.to_dict("records"), cli, strict=True):
        # a bound that does not exist is NaN in the frame and null in JSON, on every path
        bounds = [None if math.isnan(row[b]) else row[b] for b in ("f1_lo", "f1_hi")]
        assert (row["n"], *bounds, row["level"], row["device"]) == (
            cell["n"], cell["f1"]["lo"], cell["f1"]["hi"], cell["f1"]["level"], cell["device"])
    plain = plain_runs[bundles_]
    changed = {"level": "level", "cluster": "f1_lo", "limit": "n", "model_args": "key"}
    for option, column in changed.items():
        if option in kwargs:
            assert list(plain[column]) != list(rows[column]), option  # the option took effect


def test_slurm_options_are_refused_for_another_runner(workspace):
    with pytest.raises(UserError, match="apply only to the slurm runner"):
        evaluator.evaluate(bundles=["sliding-window"], testsets=["squad-dev"], runner="local",
                           partition="debug")
