"""Training as a stored, resumable job: an approach trained on a small real split becomes a
frozen system that `evaluate` scores like any submission, locally and in Docker; the same
seed gives the same weights; a killed training resumes to the same weights; a finished cell
is never trained again; bad input is a one-line error or a recorded failure."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from evaluator.api.results import Results
from evaluator.bundles import spec as bundles
from evaluator.cli.main import evaluate_cmd, main
from evaluator.core.errors import ConfigError, DataError, RunFailure
from evaluator.data import testsets
from evaluator.runners import local
from evaluator.runners.dispatch import Dispatcher
from evaluator.runners.slurm.controller import cluster_available
from evaluator.store.store import Store
from evaluator.training import table
from evaluator.training.job import TrainJob
from evaluator.training.run import cell_dir, train
from evaluator.training.systems import resolve
from tests.conftest import SLURM, raced_store
from tests.docker_kit import needs_docker
from tests.support.training import FAST, f1_of, qashift

SYSTEM = "logreg-rajpurkar@tiny-train/s0/he2826b04"  # epochs=2 differs from the default


def table_rows() -> list[dict]:
    """The results table's rows of the workspace's store as it is today."""
    store = Store.open_default()
    return table.rows(store, Results(store).rows(), {}, {})


def test_an_approach_trains_and_its_frozen_system_is_evaluated(registry):
    trained = qashift("train", "-a", "logreg-rajpurkar", "-t", "tiny-train", *FAST,
                      "--runner", "local")
    assert trained.returncode == 0, trained.stderr
    assert SYSTEM in trained.stdout and "trained in" in trained.stdout
    assert "loss " in trained.stderr  # progress is shown while it trains (polled: a busy
    # machine may show only the last epoch), and the stored log has every epoch's loss
    [system] = Store(registry["workspace"]).systems()
    log = Store(registry["workspace"]).get_object(system["log_sha256"]).decode()
    losses = [float(line.split("loss ")[1].split()[0]) for line in log.splitlines()
              if line.startswith("epoch ") and "loss " in line]
    assert len(losses) == 2 and losses[1] < losses[0]  # the loss falls
    # it beats the sliding-window baseline on its own training questions
    own = f1_of(SYSTEM, "tiny-train")
    baseline = f1_of("sliding-window", "tiny-train")
    assert own["f1"]["value"] > baseline["f1"]["value"] + 10
    held_out = f1_of(SYSTEM, "tiny-test")
    assert held_out["n"] == 112 and held_out["f1"]["value"] > 0
    # a finished cell trains nothing; its system evaluates once
    again = qashift("train", "-a", "logreg-rajpurkar", "-t", "tiny-train", *FAST)
    assert again.returncode == 0 and "stored earlier" in again.stdout
    assert f1_of(SYSTEM, "tiny-test")["cached"] is True
    store = Store(registry["workspace"])
    [system] = store.systems()
    assert system["system"] == SYSTEM and json.loads(system["hyperparameters"])["epochs"] == 2
    assert store.model_path(system["weights_digest"]).is_dir()
    assert not cell_dir(store, system["key"]).exists()  # the working folder is gone


def test_the_same_seed_gives_the_same_weights_and_another_seed_does_not(registry):
    approach, split = bundles.get("logreg-rajpurkar"), testsets.get("tiny-train")
    store, runner = Store(registry["workspace"]), Dispatcher("local")
    first = train(TrainJob(approach, split, 0, None, {"epochs": 1}), runner, store)
    again = train(TrainJob(approach, split, 0, None, {"epochs": 1}), runner, store, rerun=True)
    other = train(TrainJob(approach, split, 1, None, {"epochs": 1}), runner, store)
    assert not again.cached
    assert first.row["weights_digest"] == again.row["weights_digest"]
    assert other.row["weights_digest"] != first.row["weights_digest"]
    downsampled = train(TrainJob(approach, split, 0, 60, {"epochs": 1}), runner, store)
    assert downsampled.bundle.id == "logreg-rajpurkar@tiny-train~60/s0/h" + \
        first.bundle.id.rsplit("/h", 1)[1]
    assert downsampled.row["weights_digest"] != first.row["weights_digest"]


def test_a_system_frozen_elsewhere_after_the_first_look_is_not_trained_again(registry):
    job = TrainJob(bundles.get("logreg-rajpurkar"), testsets.get("tiny-train"), 0, None,
                   {"epochs": 1})
    runner, elsewhere = Dispatcher("local"), []
    assert Store(registry["workspace"]).systems() == []  # the store exists, still empty
    store = raced_store(registry["workspace"], "get_system", lambda: elsewhere.append(
        train(job, runner, Store(registry["workspace"]))))
    system = train(job, runner, store)
    assert system.cached and not elsewhere[0].cached
    assert system.row == elsewhere[0].row


def test_a_killed_training_resumes_from_its_checkpoint_to_the_same_weights(registry):
    args = ["train", "-a", "logreg-rajpurkar", "-t", "tiny-train", "--set", "epochs=20",
            "--runner", "local"]
    uninterrupted = qashift(*args)
    assert uninterrupted.returncode == 0, uninterrupted.stderr
    store = Store(registry["workspace"])
    [done] = store.systems()
    (registry["workspace"] / "results.sqlite").unlink()  # forget it: train again, then kill
    for extra in ("results.sqlite-wal", "results.sqlite-shm"):
        (registry["workspace"] / extra).unlink(missing_ok=True)
    proc = subprocess.Popen(["qashift", *args], env=os.environ.copy(), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    progress = cell_dir(store, done["key"]) / "checkpoints" / "progress.json"
    deadline = time.monotonic() + 300
    while not (progress.is_file() and json.loads(progress.read_text())["epoch"] >= 2):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)  # the controller; its training keeps running, orphaned
    proc.wait()
    resumed = qashift(*args)
    assert resumed.returncode == 0, resumed.stderr
    log = store.get_object(Store(registry["workspace"]).systems()[0]["log_sha256"]).decode()
    assert "resuming after epoch" in log
    [again] = Store(registry["workspace"]).systems()
    assert again["weights_digest"] == done["weights_digest"]


def test_bad_approach_folders_are_one_line_errors(tmp_path):
    folder = tmp_path / "lazy"
    folder.mkdir()
    (folder / "bundle.yaml").write_text(
        "id: lazy\nname: lazy\nkind: approach\n"
        "command: python3 a.py predict --model {model} {input} {output}\n")
    with pytest.raises(ConfigError, match=r"an approach needs train: .*missing \{train\}"):
        bundles.from_folder(folder)
    (folder / "bundle.yaml").write_text(
        "id: lazy\nname: lazy\nkind: approach\ntrain: python3 a.py {train} {model} "
        "{checkpoints}\ncommand: python3 a.py {input} {output}\n")
    with pytest.raises(ConfigError, match=r"command \(predict\) needs the \{model\}"):
        bundles.from_folder(folder)


GENERATIVE_APPROACH = ("id: gen\nname: gen\nkind: approach\n"
                       "train: python3 a.py {train} {config} {model} {checkpoints}\n")


def test_an_approach_with_a_prompt_makes_generative_systems(tmp_path):
    folder = tmp_path / "gen"
    folder.mkdir()
    (folder / "bundle.yaml").write_text(
        GENERATIVE_APPROACH + "prompt: {template: 'Q: {question} C: {context} A:'}\n")
    approach = bundles.from_folder(folder)
    assert approach.kind == "approach" and approach.command is None
    assert approach.generative["prompt"]["template"] == "Q: {question} C: {context} A:"
    assert approach.generative["generation"]["max_new_tokens"] == 32  # the defaults filled in


COPIES_A_MODEL = r'''
import json, shutil, sys
train, config, model, checkpoints = sys.argv[1:5]
config = json.load(open(config))
shutil.copytree(config["hyperparameters"]["source"], model, dirs_exist_ok=True)
json.dump(config["prompt"], open(model + "/prompt-seen.json", "w"))
'''


def test_a_system_of_an_approach_with_a_prompt_runs_as_a_generative_bundle(registry, tiny_lm):
    """Training is told the prompt; the system is the weights folder run by the generative
    runner under that prompt, its generations stored with the run."""
    folder = registry["subs"] / "gen"
    folder.mkdir()
    (folder / "a.py").write_text(COPIES_A_MODEL)
    (folder / "bundle.yaml").write_text(
        GENERATIVE_APPROACH + "prompt: {template: 'C: {context} Q: {question} A:'}\n"
        "generation: {max_new_tokens: 4, stop: []}\n"
        f"hyperparameters: {{defaults: {{source: '{tiny_lm}'}}}}\n")
    result = CliRunner().invoke(main, ["train", "-a", "gen", "-t", "tiny-train", "--runner",
                                       "local"])
    assert result.exit_code == 0, result.output
    system = resolve("gen@tiny-train/s0", Store(registry["workspace"]))
    assert system.kind == "generative" and system.command is None
    assert system.generative["prompt"]["template"] == "C: {context} Q: {question} A:"
    weights = Path(system.model["path"])
    assert json.loads((weights / "prompt-seen.json").read_text())["template"] == \
        "C: {context} Q: {question} A:"
    cell = f1_of("gen@tiny-train/s0", "tiny-test")
    assert cell["n"] > 0 and cell["missing"] == 0
    [row] = Store(registry["workspace"]).results(bundle="gen@tiny-train/s0")
    record = json.loads(row["run_record"])
    generations = json.loads(Store(registry["workspace"]).get_object(
        record["details"]["generations_sha256"]))
    assert len(generations) == cell["n"]


@pytest.mark.parametrize("extra, problem", [
    ("prompt: {template: 'A:'}\n", r"must contain \{question\}"),
    ("prompt: {shots: 2, shots_from: squad-dev-train}\n", "takes no shots"),
    ("generation: {max_new_tokens: 8}\ncommand: python3 a.py {model} {input} {output}\n",
     "has no command:"),
    ("generation: {max_new_tokens: 8}\nendpoint: {url: 'http://127.0.0.1:1/v1', model: m}\n",
     "has no command:, prepare: or endpoint:"),
])
def test_a_generative_approach_misdeclared_is_one_line(tmp_path, extra, problem):
    folder = tmp_path / "gen"
    folder.mkdir()
    (folder / "bundle.yaml").write_text(GENERATIVE_APPROACH + extra)
    with pytest.raises(ConfigError, match=problem):
        bundles.from_folder(folder)


def test_a_split_that_is_not_squad_format_is_one_line_and_a_recorded_failure(registry):
    bad = registry["sets"] / "tiny-train" / "data.json"
    bad.write_text(json.dumps({"data": [{"title": "x", "paragraphs": [{"qas": []}]}]}))
    result = CliRunner().invoke(main, ["train", "-a", "logreg-rajpurkar", "-t", "tiny-train"])
    assert result.exit_code == 1
    assert "not a SQuAD-format file" in result.stderr or "not valid" in result.stderr
    store = Store(registry["workspace"])
    assert store.systems() == []
    [failure] = store.failures()  # so a study's status counts the system as failed
    assert (failure["bundle"], failure["failure_class"]) == ("logreg-rajpurkar@tiny-train/s0",
                                                             "data-unavailable")
    with pytest.raises(DataError):
        testsets.get("tiny-train").load()


@pytest.mark.parametrize("program, failure_class", [
    ("import sys; print('diverged'); sys.exit(4)", "nonzero-exit"),
    ("import time; time.sleep(60)", "timeout"),
])
def test_a_crashing_or_slow_training_is_a_recorded_failure(registry, program, failure_class):
    folder = registry["subs"] / "broken"
    folder.mkdir()
    (folder / "train.py").write_text(program)
    (folder / "bundle.yaml").write_text(
        "id: broken\nname: broken\nkind: approach\n"
        "train: python3 train.py {train} {config} {model} {checkpoints}\n"
        "command: python3 train.py {model} {input} {output}\nresources: {timeout: 3}\n")
    store = Store(registry["workspace"])
    with pytest.raises(RunFailure) as caught:
        train(TrainJob(bundles.get("broken"), testsets.get("tiny-train")), Dispatcher("local"),
              store)
    assert caught.value.failure_class == failure_class
    assert store.systems() == []
    [failure] = store.failures()
    assert failure["failure_class"] == failure_class and failure["bundle"] == "broken@tiny-train/s0"
    result = CliRunner().invoke(evaluate_cmd, ["-b", "broken@tiny-train/s0", "-t", "tiny-test"])
    assert result.exit_code == 1 and "is not trained yet" in result.stderr


def test_an_untrained_system_or_a_bad_id_is_one_line(registry):
    store = Store(registry["workspace"])
    for name, words in (("logreg-rajpurkar@tiny-train/s3", "is not trained yet: qashift train"),
                        ("logreg-rajpurkar@tiny-train", "is not a system id"),
                        ("sliding-window@tiny-train/s0", "not an approach")):
        with pytest.raises(Exception, match=words):
            resolve(name, store)


def retrain_on(runner: str, workspace: Path) -> tuple[subprocess.CompletedProcess, dict]:
    """Train the system locally, then again on `runner`; (that run, its stored row), after
    checking both trainings produced the same weights."""
    local = qashift("train", "-a", "logreg-rajpurkar", "-t", "tiny-train", *FAST, "--runner",
                    "local")
    assert local.returncode == 0, local.stderr
    [first] = Store(workspace).systems()
    again = qashift("train", "-a", "logreg-rajpurkar", "-t", "tiny-train", *FAST, "--runner",
                    runner, "--rerun")
    assert again.returncode == 0, again.stderr
    row = Store(workspace).systems()[-1]
    assert row["runner"] == runner and row["weights_digest"] == first["weights_digest"]
    return again, row


@pytest.mark.usefixtures("no_container_left_behind")
@needs_docker[0]
def test_training_and_its_system_run_in_docker_with_the_same_weights_and_answers(
        registry, client, tmp_path):
    retrain_on("docker", registry["workspace"])
    in_docker = f1_of(SYSTEM, "tiny-test", "docker")
    in_docker_predictions = Path(in_docker["predictions"]).read_bytes()
    here = f1_of(SYSTEM, "tiny-test", "local", "--rerun")
    assert in_docker["runner"] == "docker"
    assert in_docker_predictions == Path(here["predictions"]).read_bytes()
    assert in_docker["f1"] == here["f1"]


@SLURM
def test_training_runs_as_a_slurm_job_to_the_same_weights(registry, monkeypatch):
    reason = cluster_available()
    if reason:
        pytest.skip(f"no Slurm cluster: {reason} (run `bash .ci/slurm.sh` as root)")
    monkeypatch.setenv("QASHIFT_SLURM_INNER", "local")
    slurm, row = retrain_on("slurm", registry["workspace"])
    assert "epoch 2/2" in slurm.stderr  # progress reaches the controller from the job
    details = json.loads(row["run_record"])["details"]
    assert details["inner_runner"] == "local" and details["slurm"]["job_id"]
    assert not list((registry["workspace"] / "training").glob("*"))  # working folder removed
    assert f1_of(SYSTEM, "tiny-test", "slurm", "--rerun")["runner"] == "slurm"


def test_a_rebuilt_index_keeps_the_trained_systems(registry):
    trained = qashift("train", "-a", "logreg-rajpurkar", "-t", "tiny-train", *FAST,
                      "--runner", "local")
    assert trained.returncode == 0, trained.stderr
    scored = f1_of(SYSTEM, "tiny-test")
    ws = registry["workspace"]
    [before] = Store(ws).systems()
    (ws / "results.sqlite").write_bytes(b"not a database" * 100)
    for extra in ("results.sqlite-wal", "results.sqlite-shm"):
        (ws / extra).unlink(missing_ok=True)
    repaired = CliRunner().invoke(main, ["store", "repair"])
    assert repaired.exit_code == 0, repaired.output
    assert "1 stored result rows and 1 trained systems" in repaired.output
    assert Store(ws).systems() == [before]
    again = qashift("train", "-a", "logreg-rajpurkar", "-t", "tiny-train", *FAST)
    assert "stored earlier" in again.stdout  # nothing is retrained
    assert f1_of(SYSTEM, "tiny-test")["f1"] == scored["f1"]


def test_the_table_never_gives_a_retrained_system_its_predecessors_runs(registry):
    def rows():
        return {(r["model"], r["testset"], r["metric"]): r
                for r in table_rows()}

    name = "logreg-rajpurkar@tiny-train/s0"
    approach, split = bundles.get("logreg-rajpurkar"), testsets.get("tiny-train")
    runner, store = Dispatcher("local"), Store.open_default()
    old = train(TrainJob(approach, split), runner, store)
    f1_of(name, "tiny-test")
    before = rows()[(name, "tiny-test", "f1")]
    assert before["bundle_digest"] == old.bundle.digest
    # new defaults: the same name now means another system, not trained yet: the old one
    # and its runs still stand
    yaml_path = registry["subs"] / "logreg-rajpurkar" / "bundle.yaml"
    yaml_path.write_text(yaml_path.read_text().replace("epochs: 4", "epochs: 3"))
    assert rows()[(name, "tiny-test", "f1")] == before
    new = train(TrainJob(bundles.get("logreg-rajpurkar"), split), runner, store)
    assert new.bundle.digest != old.bundle.digest
    assert (name, "tiny-test", "f1") not in rows()  # trained, not yet evaluated
    f1_of(name, "tiny-test")
    assert rows()[(name, "tiny-test", "f1")]["bundle_digest"] == new.bundle.digest


def test_a_sample_of_a_few_questions_never_stands_in_the_table_for_the_full_score(registry):
    name = "logreg-rajpurkar@tiny-train/s0"
    train(TrainJob(bundles.get("logreg-rajpurkar"), testsets.get("tiny-train")),
          Dispatcher("local"), Store.open_default())
    full = f1_of(name, "tiny-test")
    sample = f1_of(name, "tiny-test", "local", "--limit", "5")  # stored after the full run
    assert sample["n"] == 5 < full["n"]
    [row] = [r for r in table_rows()
             if (r["model"], r["testset"], r["metric"]) == (name, "tiny-test", "f1")]
    assert row["n"] == full["n"] and row["value"] == round(full["f1"]["value"], 4)


def test_the_systems_table_keeps_what_another_store_wrote(registry, tmp_path):
    """`systems --table FILE` on a machine whose store lacks some systems keeps their rows
    (a committed table is never cut down to one store's systems); a file that is not such
    a table is refused in one line and left as it was."""
    train(TrainJob(bundles.get("logreg-rajpurkar"), testsets.get("tiny-train")),
          Dispatcher("local"), Store.open_default())
    f1_of("logreg-rajpurkar@tiny-train/s0", "tiny-test")
    path = tmp_path / "t.csv"
    assert qashift("systems", "--table", str(path)).returncode == 0
    written = table.read(path)
    other = [dict(r, model="bidaf@elsewhere/s0") for r in written]
    table.write(written + other, path)
    again = qashift("systems", "--table", str(path))
    assert again.returncode == 0 and "2 kept from the file" in again.stdout
    assert sorted(r["model"] for r in table.read(path)) == sorted(
        r["model"] for r in written + other)
    old = tmp_path / "old.csv"
    old.write_text("model,testset\nx,y\n")
    refused = qashift("systems", "--table", str(old))
    assert refused.returncode == 1 and "not a results table" in refused.stderr
    assert old.read_text() == "model,testset\nx,y\n"


def test_the_challenge_report_takes_a_trained_system_by_its_id(registry):
    train(TrainJob(bundles.get("logreg-rajpurkar"), testsets.get("tiny-train")),
          Dispatcher("local"), Store.open_default())
    report = qashift("challenge", "report", "-b", "logreg-rajpurkar@tiny-train/s0")
    assert report.returncode == 1 and "unknown bundle" not in report.stderr
    assert "no stored results for derived or SAM sets" in report.stderr
    untrained = qashift("challenge", "report", "-b", "logreg-rajpurkar@tiny-train/s7")
    assert untrained.returncode == 1 and "is not trained yet" in untrained.stderr


def test_a_training_given_the_gpu_is_recorded_so_and_one_on_the_cpu_too(registry, tmp_path,
                                                                       monkeypatch):
    """The local runner records the device the training was given (the config names it to
    the approach), as the Docker runner does; on a host that shows no GPU, one asked for is a
    no-gpu failure. Logistic regression runs on the CPU either way, so the GPU host is the
    NVIDIA driver's file written here."""
    runner, store = Dispatcher("local"), Store.open_default()
    on_cpu = train(TrainJob(bundles.get("logreg-rajpurkar"), testsets.get("tiny-train")),
                   runner, store)
    monkeypatch.setattr(local, "NVIDIA_DRIVER", tmp_path / "no-driver")
    monkeypatch.setattr(local, "NVIDIA_SMI", None)
    with pytest.raises(RunFailure) as none:
        train(TrainJob(bundles.get("logreg-rajpurkar"), testsets.get("tiny-train"), seed=1),
              runner, store, device="gpu")
    assert none.value.failure_class == "no-gpu"
    (tmp_path / "version").write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module\n")
    monkeypatch.setattr(local, "NVIDIA_DRIVER", tmp_path / "version")
    on_gpu = train(TrainJob(bundles.get("logreg-rajpurkar"), testsets.get("tiny-train"),
                            seed=1), runner, store, device="gpu")
    assert (on_cpu.row["device"], on_gpu.row["device"]) == ("cpu", "gpu")
