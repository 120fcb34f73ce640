"""Every command that README and docs/ show is one the tools have: its program, its
subcommands and each of its --options exist (a synopsis line's `a | b` alternatives and
[optional] parts included). The concrete ones that finish in seconds are run as a user would
run them, on an empty workspace, and must end with status 0 and no traceback."""

from __future__ import annotations

import itertools
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

from evaluator.cli.base import load
from evaluator.cli.main import COMMANDS, main
from evaluator.runners.limits import kill_group
from tests.conftest import (
    FIRST_WORD,
    REPO,
    SHARED_DATA,
    SLURM,
    hears_ctrl_c,
    write_command_bundle,
    write_testset,
)
from tests.tiny_bert import make_tiny_bert, make_tiny_causal_lm, squad_texts

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
OURS = ("qashift ", "evaluate ", "python ", "python3 ")  # in a block of no stated language
OUR_SCRIPTS = ("benchmarks/",)  # python scripts of this repository, checked by their --help
OTHER_PROGRAMS = {"bash", "mkdir", "cp", "printf", "docker", "apt-get", "for", "do", "done",
                  "run", "run()", "}"}


def blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block of a markdown text."""
    out, language, body = [], None, []
    for line in text.splitlines():
        if line.startswith("```"):
            if language is None:
                language, body = line[3:].strip(), []
            else:
                out.append((language, "\n".join(body) + "\n"))
                language = None
        elif language is not None:
            body.append(line)
    return out


def command_lines() -> list[tuple[str, str]]:
    """(where, line) for every command line in a bash block (or one of ours in a block of no
    stated language): continuations joined, comments and the shell's own lines left out."""
    out = []
    for doc in DOCS:
        for language, block in blocks(doc.read_text()):
            if language not in ("bash", "sh", ""):
                continue
            joined = re.sub(r"\\\n\s*", " ", block)
            for line in joined.splitlines():
                line = line.split("  #")[0].strip()
                if line and not line.startswith("#") and (language or line.startswith(OURS)):
                    out.append((doc.name, line))
    return out


def _words(line: str) -> list[str]:
    """The words of a line, brackets of optional parts dropped ([--x N] -> --x N)."""
    try:
        words = shlex.split(line)
    except ValueError:
        words = line.split()
    return [w.strip("[]") for w in words if w.strip("[]")]


def _segments(line: str) -> list[list[str]]:
    """Each command of a line (split at && and ;), as words."""
    return [_words(part) for part in re.split(r"&&|;", line) if part.strip()]


def _options(command: click.Command) -> set[str]:
    return {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)}


def _check_click(where: str, words: list[str], top: click.Command) -> None:
    """Walk the words through click: subcommands must exist (each of `a | b` and `a|b` too)
    and every --option must belong to a command on the way."""
    group = top if isinstance(top, click.Group) else None
    command, allowed, alternative = top, _options(top), False

    def names() -> list[str]:
        return group.list_commands(click.Context(group)) if group is not None else []

    for word in words:
        if word == "|":  # a synopsis: another command of the same group follows
            alternative = True
            continue
        parts = word.split("|")
        wanted = isinstance(command, click.Group) or alternative
        if (wanted or len(parts) > 1) and parts[0] in names():
            for part in parts:
                assert part in names(), f"{where}: {' '.join(words)}: {part} names no command"
                command = group.get_command(click.Context(group), part)
                allowed |= _options(command)
            group = command if isinstance(command, click.Group) else group
            alternative = False
            continue
        assert not alternative, f"{where}: {' '.join(words)}: {word} names no command"
        if word.startswith("--"):
            option = word.split("=")[0]
            assert option in allowed, f"{where}: {' '.join(words)}: {option} is not an option"
    assert not isinstance(command, click.Group), f"{where}: {' '.join(words)} names no command"


def _check_script(where: str, words: list[str]) -> None:
    """`python benchmarks/X.py --opt` or `python -m evaluator.qa --opt`: the script exists
    and its --help names every option used."""
    target = words[1:3] if words[1] == "-m" else words[1:2]
    if target[0] != "-m":
        assert (REPO / target[0]).is_file(), f"{where}: {target[0]} does not exist"
    helped = subprocess.run([sys.executable, *target, "--help"], capture_output=True,
                            text=True, cwd=REPO, timeout=120)
    assert helped.returncode == 0, f"{where}: {' '.join(target)} --help: {helped.stderr}"
    for word in words:
        if word.startswith("--"):
            assert word.split("=")[0] in helped.stdout, f"{where}: {word} is not an option " \
                f"of {' '.join(target)}"


LINES = command_lines()


@pytest.mark.parametrize("where, line", LINES, ids=[f"{w}:{line[:50]}" for w, line in LINES])
def test_every_documented_command_exists_with_its_options(where, line):
    for words in _segments(line):
        program = words[0]
        if program == "qashift":
            _check_click(where, words[1:], main)
        elif program == "evaluate":
            _check_click(where, words[1:], load(COMMANDS["evaluate"]))
        elif program in ("python", "python3") and len(words) > 1 and (
                words[1].startswith(OUR_SCRIPTS) or words[1:3] == ["-m", "evaluator.qa"]):
            _check_script(where, words)
        elif program in ("python", "python3"):
            assert words[1:3] == ["-m", "pytest"], f"{where}: unknown python command {line}"
        else:
            assert program in OTHER_PROGRAMS or "=" in program, \
                f"{where}: {program} is neither one of ours nor a known system program"


@pytest.mark.parametrize("line, problem", [
    ("qashift figures --sauce published", "--sauce is not an option"),
    ("qashift study walk PLAN.yaml", "names no command"),
    ("qashift results list | shout", "names no command"),
    ("evaluate -b x -t y --levle 0.9", "--levle is not an option"),
])
def test_the_check_refuses_an_option_or_command_the_tools_lack(line, problem):
    with pytest.raises(AssertionError, match=problem):
        test_every_documented_command_exists_with_its_options("here", line)


# Every documented command line is run, in its chapter's order, as a user would type it, in a
# copy of the checkout's layout with an empty workspace. A line with placeholders (ID, BUNDLE,
# PLAN.yaml, a `a | b` synopsis) is run as the concrete lines that stand for it (`covers`).
# What a line must do there:
#   ok       end with status 0 and no traceback;
#   refused  stop at once with one line saying what is missing first (a trained system, the
#            cluster's `gpu` partition, the approach-level study's remaining cells);
#   started  a job of hours (a study, a training, a benchmark, an image download): it must be
#            running or done well, with no traceback, when it first reports (or after
#            STARTED_WAIT_S), and stop on Ctrl-C (pressed twice at most, 30 s apart).
# The two lines CI itself runs (`.ci/run`) are checked to be the ones it runs.

@dataclass(frozen=True)
class Step:
    line: str
    expect: str = "ok"
    covers: tuple[str, ...] = ()
    same: tuple[str, ...] = ()  # documented lines that are this one by the command's defaults


def invocation(line: str) -> tuple[list[str], dict]:
    """The command a `qashift ...` line names and the values of all its parameters, defaults
    filled in, as click parses them (nothing is run)."""
    command, args, path = main, shlex.split(line)[1:], []
    while isinstance(command, click.Group):  # the documented lines give groups no options
        name, args = args[0], args[1:]
        command = command.get_command(click.Context(command), name)
        path.append(name)
    return path, command.make_context(name, list(args)).params


RUN_BY_CI = ("bash install.sh", "python3 -m pytest -q")
POPULATION_RUN = ("qashift study run studies/population.yaml --runner local "
                  "--table results/population.csv --only \"$only\"")
APPROACH_RUN = ("qashift study run studies/approach-level.yaml --runner local "
                "--table results/approach-level.csv --ledger results/population.csv")
APPROACH_RUN_FUNCTION = f'run() {{ {APPROACH_RUN} "$@"; }}'

# The steps fall in chapters, each run from its own copy of the checkout on an empty
# workspace, so that test workers share them: a chapter holds steps that stand on each other's
# work, and repeats first the quick steps of another that it needs (`SETUP`: a pair of small
# sets scored, and the population's committed results recorded in the store, which `trend`
# also does after scoring its bundle on two large sets: the main-job chapter runs that).
SETUP = [Step("evaluate -b sliding-window -t my-new-set -t my-reference"),
         Step("qashift store record")]

CHAPTERS: dict[str, list[Step]] = {
    "first-look": [
        # README: a first look, then the main job's pieces
        Step("qashift testsets list", covers=("qashift testsets list | show ID | fetch ID...",)),
        Step("qashift testsets show reddit"),
        Step("qashift testsets fetch reddit"),
        Step("qashift validate"),
        Step("qashift validate --pin testsets/my-new-set",
             covers=("qashift validate --pin FOLDER",)),
        Step("qashift validate --schema bundle > bundle.schema.json"),
        Step("qashift bundles list", covers=("qashift bundles list | show ID|SYSTEM",)),
        Step("qashift bundles show sliding-window"),
        Step("qashift bundles list --awaiting"),
        Step("qashift families"),
        Step("qashift systems"),
        Step("qashift check -b sliding-window", covers=("qashift check -b BUNDLE",)),
    ],
    "main-job": [
        # a pair of small sets first, so that `strata` has one thing to analyse
        Step("evaluate -b sliding-window -t my-new-set -t my-reference"),
        Step("qashift strata"),
        Step("qashift strata --out figures/strata"),
        Step("qashift strata --table results/strata.csv", "started"),  # six sets' spaCy features
        Step("qashift strata --score studies/population.yaml --score studies/extra-data.yaml "
             "-t new-wiki-test -t reddit-test -t amazon-test -t addsent-heldout "
             "-t addonesent-heldout --table results/strata.csv --out figures/strata", "started"),
        Step("evaluate --bundle bert-ensemble --testset squad-dev --data-dir ../shared/data"),
        Step("evaluate -b r-net-plus-ensemble -t squad-dev --level 0.99 --cluster paragraph"),
        Step("evaluate -b sliding-window -t reddit"),
        Step("evaluate -b sliding-window -t new-wiki -t amazon --json"),
        Step("qashift trend -b sliding-window -t reddit-test -t new-wiki-test",
             covers=("qashift trend -b BUNDLE",)),
        Step("qashift store record", covers=("qashift store record [TABLE]",)),
        Step("qashift run configs/squadshifts-sliding-window.yaml"),
        Step("qashift compare -b bert-ensemble -b r-net-plus-ensemble -t squad-dev",
             covers=("qashift compare -b A -b B -t SET",)),
        Step("qashift results list",
             covers=("qashift results list | show | export BUNDLE TESTSET | log BUNDLE TESTSET",)),
        Step("qashift results show sliding-window reddit"),
        Step("qashift results export sliding-window reddit"),
        Step("qashift results log sliding-window reddit"),
        Step("qashift results samples --out samples",
             covers=("qashift results samples --out DIR",)),
        Step("qashift store check", covers=("qashift store check | repair",)),
        Step("qashift store repair"),
        Step("QASHIFT_WORKSPACE=other-ws evaluate -b sliding-window -t my-new-set "
             "&& qashift store import other-ws", covers=("qashift store import OTHER_WORKSPACE",)),
        Step("evaluate -b all -t all", "started"),
        Step("qashift status"),
        # before anything is trained here (a system retrained on another CPU scores otherwise)
        Step("qashift extra-data --table results/population.csv --table results/extra-data.csv"),
    ],
    "training": [
        # training and studies (training.md, README)
        Step("qashift train -a logreg-rajpurkar -t squad-dev-train",
             covers=("qashift train -a APPROACH -t SPLIT",)),
        Step("evaluate -b logreg-rajpurkar@squad-dev-train/s0 -t squad-dev-heldout -t reddit-test"),
        Step("qashift study run PLAN.yaml", covers=("qashift study run|status PLAN.yaml",)),
        Step("qashift study status PLAN.yaml"),
        Step("qashift study table PLAN.yaml --out PLAN.csv"),
        Step("qashift study freeze PLAN.yaml"),
        Step("qashift study run studies/PLAN.yaml"),
        Step("qashift study status studies/PLAN.yaml"),
        Step("qashift study table studies/PLAN.yaml --out results/PLAN.csv"),
        Step("qashift train -a drqa-reader -t squad-dev-train --runner local "
             "--data-dir ../shared/data", "started"),
        Step("evaluate -b drqa-reader@squad-dev-train/s0 -t squad-dev-heldout -t new-wiki-test "
             "-t reddit-test -t amazon-test --runner local --data-dir ../shared/data", "refused"),
        Step("qashift systems --table my-approaches.csv"),
    ],
    "population": [
        *SETUP,
        # the own population (population.md)
        Step("qashift population"),
        Step("qashift population --markdown"),
        Step("qashift population --score my-new-set --per-approach 1 --limit 100"),
        Step("qashift population --score my-new-set",
             covers=("qashift population --score NEW-SET",)),
        Step("qashift population --score my-new-set --write-table --out figures/population"),
        Step("qashift study status studies/population.yaml --table results/population.csv "
             "--by-approach"),
        Step(f"for only in '*~250/*' '*~500/*' '*~1000/*' '*~2500/*' '*'; do {POPULATION_RUN}; "
             "done", "started", covers=(
                 "for only in '*~250/*' '*~500/*' '*~1000/*' '*~2500/*' '*'; do", POPULATION_RUN,
                 "done")),
        Step("qashift study freeze studies/population.yaml --table results/population.csv"),
        Step("qashift study run studies/extra-data.yaml --runner local --table "
             "results/extra-data.csv --ledger results/population.csv", "started"),
        Step("qashift study freeze studies/extra-data.yaml --table results/extra-data.csv"),
        Step("qashift study run studies/population.yaml --runner local "
             "--table results/population.csv", "started"),
        Step("qashift extra-data", "refused"),  # the recorded population has no
        # system trained with extra data beside it
    ],
    "approach-level": [
        # the approach-level study (approach-level.md), under way: the matrix holds the approaches
        # scored on every benchmark (two at least), or with `--keep benchmarks` the
        # benchmarks that every approach is scored on (the SQuAD and fuzzy ones at least)
        Step("qashift study status studies/approach-level.yaml --table results/approach-level.csv "
             "--ledger results/population.csv"),
        Step(APPROACH_RUN, "started"),
        *[Step(f"{APPROACH_RUN_FUNCTION}\nrun {only}", "started",
               covers=(APPROACH_RUN_FUNCTION, f"run {only}")) for only in (
            "--only '*@babi-*'", "--only '*@cloze-*' --only '*@squad-dev-train~*'",
            "--only '*@kg-*' --only '*@fuzzy-*'")],
        Step(f"{APPROACH_RUN_FUNCTION}\nrun", "started", covers=("run",)),
        Step("qashift study matrix studies/approach-level.yaml --out results/approach-matrix.csv "
             "--runs results/approach-runs.csv --table results/approach-level.csv "
             "--ledger results/population.csv"),
        Step("qashift study matrix studies/approach-level.yaml --out results/approach-matrix.csv "
             "--table results/approach-level.csv --ledger results/population.csv "
             "--keep benchmarks"),
    ],
    "analysis": [
        *SETUP,
        # analysis (analysis.md, README)
        Step("qashift figures --source squadshifts-published --out figures --data-dir "
             "../shared/data", covers=("qashift figures --source squadshifts-published "
                                       "--out figures/",)),
        Step("qashift figures --source store --out figures",
             covers=("qashift figures --source store --out figures/",)),
        Step("qashift figures --source my-table.csv --out figures/"),
        Step("qashift fit"),
        Step("qashift fit --source results/population.csv",
             covers=("qashift fit --source TABLE.csv",)),
        Step("qashift reproduce"),
        Step("qashift reproduce --data-dir ../shared/data"),
        Step("qashift concurrence"),
        Step("qashift concurrence --out figures/concurrence"),
        Step("qashift concurrence --bootstrap 1000 --seed 0"),
        Step('qashift concurrence --subset "SQuAD 1.1 — All>76.24"'),
        Step('qashift concurrence --versus "MRQA NewsQA"'),
        Step('qashift concurrence --knee "SQuAD 1.1 — All" "CNN (100K Examples)"'),
        *[Step(f"qashift concurrence --kendall {k} --threshold 0.8",
               covers=("qashift concurrence --kendall a|b|c --threshold 0.8",)) for k in "abc"],
        Step("qashift concurrence --scores my-scores.csv"),
        Step("qashift concurrence --scores M.csv --paper studies/approach-level.yaml",
             covers=("qashift concurrence --scores M.csv --paper PLAN.yaml",)),
        Step("qashift concurrence --scores results/approach-matrix.csv --reference squad "
             "--paper studies/approach-level.yaml --out figures/approach-level"),
    ],
    "derived": [  # the first-word program's own results are all its steps read
        # derived sets and ablations (derived.md)
        # <bundle>: a program answering each question with its passage's first word (the
        # sets hold 76,000 questions, a minute of the sliding window's time)
        Step("evaluate -b first-word -t squad-dev -t squad-dev-context-words-shuffled "
             "-t sam-baseline -t sam-intervention -t sam-control", covers=(
                 "evaluate -b <bundle> -t squad-dev -t squad-dev-context-words-shuffled ... "
                 "-t sam-baseline -t sam-intervention -t sam-control",)),
        Step("qashift challenge report -b first-word",
             covers=("qashift challenge report -b <bundle>",)),
    ],
    "site": [
        *SETUP,
        # the site (site.md)
        Step("qashift report --source store --out site", same=("qashift report",)),
        Step("qashift report --source my-table.csv --out site-csv/"),
        Step("qashift report --source squadshifts-published --out site-published/"),
        Step("qashift report --source results/population.csv --concurrence "
             "results/approach-matrix.csv --concurrence-reference squad --out site-population/"),
    ],
    "submissions": [
        # submissions: a checkpoint, a CodaLab program, the leaderboard (README, hf-qa.md);
        # the checkpoint's 18,508 questions are a job of an hour for a model of BERT's size
        Step("mkdir -p submissions/my-model && cp -r ckpt submissions/my-model/model && printf "
             "'id: my-model\\nname: My model\\nkind: hf-qa\\nmodel: {path: model}\\n' > "
             "submissions/my-model/bundle.yaml && evaluate -b my-model -t squad-dev -t new-wiki "
             "--runner local --data-dir ../shared/data", "started", covers=(
                 "mkdir -p submissions/my-model && cp -r /path/to/checkpoint submissions/my-model/"
                 "model && printf 'id: my-model\\nname: My model\\nkind: hf-qa\\nmodel: {path: "
                 "model}\\n' > submissions/my-model/bundle.yaml && evaluate -b my-model "
                 "-t squad-dev -t new-wiki --runner local --data-dir ../shared/data",)),
        Step("python -m evaluator.qa --model ckpt --input dev-v1.1.json --output predictions.json",
             covers=("python -m evaluator.qa --model DIR --input dev-v1.1.json --output "
                     "predictions.json",)),
        Step("qashift bundles export-onnx my-model"),
        Step("qashift bundles import-leaderboard --export out-v1.1.json"),
        Step("qashift bundles complete lb-anna-single-model-601dd7 ./downloaded-codalab-bundle "
             "--command \"python predict.py {input} {output}\" --image codalab/ubuntu@sha256:"
             + "0" * 64, covers=(
                 "qashift bundles complete lb-anna-single-model-601dd7 ./downloaded-codalab-bundle "
                 "--command \"python predict.py {input} {output}\" --image "
                 "codalab/ubuntu@sha256:...",)),
    ],
    "generative": [
        # generative submissions (generative.md): a tiny language model
        Step("evaluate -b my-lm -t reddit-test --runner local --limit 50"),
        Step("evaluate -b my-lm -t reddit-test --runner local", "started"),  # 4,910 questions
        Step('evaluate -b my-lm -t reddit-test --template "Context: {context}\\nQuestion: '
             '{question}\\nAnswer:" --template "{question}\\n{context}\\nThe answer is"',
             "started"),
        Step("qashift train -a generative-reader -t squad-dev-train", "started"),
        Step("evaluate -b generative-reader@squad-dev-train/s0 -t squad-dev-heldout --runner local",
             "refused"),
    ],
    "cluster-images-service": [
        # Slurm: this cluster has no `gpu` partition
        Step("evaluate -b all -t all --runner slurm -j 32 --partition gpu --account qa-lab",
             "refused"),
        # images (docker.md): built already by install.sh, so each finds its tag
        Step("apt-get install -y docker.io debootstrap"),
        Step("qashift images base"),
        Step("qashift images python"),
        Step("qashift images wheelhouse wheels/", "started"),
        Step("qashift images runner wheels/"),
        Step("qashift images wheelhouse --gpu wheels-gpu/ && qashift images runner --gpu "
             "wheels-gpu/", "started"),
        Step("docker build --network host -f Dockerfile -t qashift/runner:cpu wheels/", "started"),
        # the submission service (service.md): no server answers once its step has stopped
        Step("qashift admin user add alice"),
        Step("qashift admin token create alice"),
        Step("qashift admin testset rules squad-dev --visibility admins"),
        # an organiser's folder of her own (tests/service/test_hidden.py adds one)
        Step("qashift admin testset add organiser/secret-set --hidden", "refused"),
        Step("qashift admin testset rules secret-set --visibility after --after 2027-03-01 "
             "--daily-limit 2", "refused"),
        Step("qashift serve --port 8000", "started"),
        Step("qashift worker --runner docker", "started"),
        Step("qashift remote submit bert-ensemble -t squad-dev --wait --server "
             "http://127.0.0.1:8000 --token qs_none", "refused", covers=(
                 "qashift remote submit bert-ensemble -t squad-dev --wait --server "
                 "http://127.0.0.1:8000 --token TOKEN",)),
        Step("qashift remote submit bert-ensemble -t squad-dev --wait --json", "refused"),
        Step("qashift remote status 0123abcd", "refused",
             covers=("qashift remote status SUBMISSION",)),
        Step("qashift remote results 0123abcd", "refused",
             covers=("qashift remote results SUBMISSION",)),
        Step("qashift remote logs 1 --follow", "refused",
             covers=("qashift remote logs JOB --follow",)),
        Step("qashift remote cancel 1", "refused", covers=("qashift remote cancel JOB",)),
    ],
    "benchmarks": [
        # benchmarks: the quick ones to the end, the others started
        Step("python benchmarks/scoring_speed.py"),
        Step("python benchmarks/docker_overhead.py"),
        Step("python benchmarks/reproduce_time.py"),
        Step("python benchmarks/hfqa_throughput.py --model ckpt --questions 500", "started",
             covers=("python benchmarks/hfqa_throughput.py --model DIR --questions 500",)),
        Step("python benchmarks/hfqa_throughput.py", "started"),  # a seeded MiniLM, 500 questions
        *[Step(f"python benchmarks/{name}.py", "started") for name in (
            "slurm_overhead", "training_throughput", "parallel_cells",
            "thread_oversubscription",
            "population_scoring", "study_resume")],
        Step("python benchmarks/population_scoring.py --groups --jobs 2 --testset "
             "squad-dev-heldout-sentence-order-shuffled", "started"),
        Step("python benchmarks/scoring_speed.py --only-all", "started"),
        Step("python benchmarks/service_overhead.py", "started"),
        Step("python benchmarks/population_scoring.py --whole --testset "
             "squad-dev-heldout-sentence-order-shuffled", "started"),
    ],
}
STEPS = [step for steps in CHAPTERS.values() for step in steps]


def _documented(line: str) -> str:
    """A documented line as the steps name it: optional [parts] left out, spaces collapsed."""
    return " ".join(re.sub(r"\[[^]]*\]", "", line).split())


def test_every_documented_command_has_a_step():
    documented = {_documented(line) for _, line in LINES}
    stood_for = {_documented(s.line) for s in STEPS} | {
        _documented(c) for s in STEPS for c in (*s.covers, *s.same)}
    ci = [re.sub(r"^phase \w+ ", "", line)  # `phase NAME COMMAND` runs COMMAND, timed
          for line in (REPO / ".ci" / "run").read_text().splitlines()]
    assert set(RUN_BY_CI) <= set(ci), "CI no longer runs README's install and test commands"
    assert documented - set(RUN_BY_CI) <= stood_for, documented - set(RUN_BY_CI) - stood_for
    for step in STEPS:
        assert step.expect in ("ok", "refused", "started"), step
        for line in (*step.covers, *step.same):
            assert _documented(line) in documented, f"{line!r} is not documented (any more)"
        for line in step.same:  # run once: the same command with the same values
            assert invocation(line) == invocation(step.line), (line, step.line)


def test_a_line_is_the_same_as_another_only_with_the_same_command_and_values():
    assert invocation("qashift report") == invocation("qashift report --source store "
                                                      "--out site")
    assert invocation("qashift report") != invocation("qashift report --out site-csv")
    assert invocation("qashift figures") != invocation("qashift report")
    assert invocation("qashift results list")[0] == ["results", "list"]


PLAN = """id: plan
name: A small plan
description: one approach on 250 training questions, scored on one small set
split: squad-dev-train
testsets: [my-new-set]
approaches:
  logreg-rajpurkar:
    - {settings: [{}], sizes: [250]}
"""
LM_BUNDLE = "id: my-lm\\nname: My prompted model\\nkind: generative\\nmodel: {path: model}\\n" \
    "generation: {max_new_tokens: 8}\\n"
STARTED_WAIT_S = 20  # how long a silent started job is watched


def _checkout(home: Path, dev_raw: dict) -> None:
    """The checkout's layout, copied (commands write into it), with what the placeholders name:
    two small test sets (the second the first's reference), a tiny QA checkpoint and language
    model, a small study plan, a CodaLab program (also a bundle, `first-word`), copies of
    tables under the names the docs use, and one frozen approach (logreg-rajpurkar's systems)
    in `frozen/`."""
    for name in ("testsets", "submissions", "configs", "studies", "results"):
        shutil.copytree(REPO / name, home / name, symlinks=True)
    shutil.copytree(REPO / "frozen" / "logreg-rajpurkar", home / "frozen" / "logreg-rajpurkar")
    (home / "benchmarks").symlink_to(REPO / "benchmarks")
    shutil.copy(REPO / "Dockerfile", home / "Dockerfile")
    write_testset(home / "testsets", "my-reference", {"version": "1.1",
                                                      "data": dev_raw["data"][41:42]})
    new = write_testset(home / "testsets", "my-new-set",
                        {"version": "1.1", "data": dev_raw["data"][40:41]},
                        reference="my-reference")
    shutil.copy(new / "data.json", home / "dev-v1.1.json")
    texts = squad_texts({"data": dev_raw["data"][:2]})
    make_tiny_bert(home / "ckpt", texts)
    make_tiny_causal_lm(home / "submissions" / "my-lm" / "model", texts)
    (home / "submissions" / "my-lm" / "bundle.yaml").write_text(
        LM_BUNDLE.encode().decode("unicode_escape"))
    (home / "PLAN.yaml").write_text(PLAN)
    (home / "studies" / "PLAN.yaml").write_text(PLAN)
    (home / "downloaded-codalab-bundle").mkdir()
    (home / "downloaded-codalab-bundle" / "predict.py").write_text(FIRST_WORD)
    write_command_bundle(home / "submissions", "first-word", FIRST_WORD)
    shutil.copy(SHARED_DATA / "squad-leaderboard" / "out-v1.1.json", home / "out-v1.1.json")
    shutil.copy(REPO / "results" / "population.csv", home / "my-table.csv")
    for name in ("my-scores.csv", "M.csv"):
        shutil.copy(REPO / "results" / "approach-matrix.csv", home / name)


STEP_NUMBERS = itertools.count()


def _end_stragglers(group: int, wait_s: float = 10.0) -> None:
    """Let the children of a stopped step (which heard the Ctrl-C too) end, then kill any left,
    so that none runs on beside the next step."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    kill_group(group)


def _run(step: Step, home: Path, env: dict) -> str:
    """Run one step; return what went wrong ('' if it did as it must)."""
    log = home.parent / f"step-{next(STEP_NUMBERS)}.log"  # a straggler writes only its own
    with log.open("w") as out:
        proc = subprocess.Popen(["bash", "-c", step.line], cwd=home, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=hears_ctrl_c)
        if step.expect != "started":
            try:
                proc.wait(timeout=600)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return "did not finish in 600 s"
            text = log.read_text()
            last = ([line for line in text.splitlines() if line.strip()] or [""])[-1]
            if "Traceback" in text:
                return f"a traceback:\n{text[-3000:]}"
            if step.expect == "ok" and proc.returncode != 0:
                return f"status {proc.returncode}:\n{text[-3000:]}"
            if step.expect == "refused" and (proc.returncode == 0 or not re.match(
                    r"(error|Error): \S", last)):
                return f"status {proc.returncode}, not a one-line refusal:\n{text[-3000:]}"
            return ""
        deadline = time.monotonic() + STARTED_WAIT_S
        while proc.poll() is None and not log.read_text().strip() and \
                time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1)  # a first line, then a moment in which it could fail
        said, ended = log.read_text(), proc.poll()
        for _ in range(2 if ended is None else 0):  # Ctrl-C, and once more if need be (a
            os.killpg(proc.pid, signal.SIGINT)     # loop's command may have just ended)
            try:
                proc.wait(timeout=30)
                break
            except subprocess.TimeoutExpired:
                pass
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return "did not stop within a minute of Ctrl-C pressed twice"
        _end_stragglers(proc.pid)
        if "Traceback" in said or ended not in (None, 0):
            return f"status {ended} before Ctrl-C:\n{said[-3000:]}"
        return ""


# The analysis and the site chapters draw the same figures (the store's, the population's
# and the published results'), which a cache keeps by what they show and the code that
# draws them: the two run one after the other on one worker, the second reading the
# figures the first drew, as a user's second command reads the first's.
SHARED_FIGURES = ("analysis", "site")


def _marks(chapter: str) -> tuple:
    if chapter == "cluster-images-service":
        return (SLURM,)  # one of its steps submits to the cluster
    if chapter in SHARED_FIGURES:
        return (pytest.mark.xdist_group("docs-figures"),)
    return ()


@pytest.fixture(scope="module")
def chapters_figures(tmp_path_factory) -> Path:
    """The figure cache of the chapters in SHARED_FIGURES (on one worker: one module)."""
    return tmp_path_factory.mktemp("chapters-figures")


@pytest.mark.slow
@pytest.mark.parametrize("chapter", [pytest.param(name, marks=_marks(name))
                                     for name in CHAPTERS])
def test_every_documented_command_runs_on_an_empty_workspace(chapter, tmp_path, shared_data,
                                                              dev_raw, chapters_figures):
    home = tmp_path / "checkout"
    home.mkdir()
    _checkout(home, dev_raw)
    (tmp_path / "shared").symlink_to(shared_data.parent)
    if chapter in SHARED_FIGURES:
        (tmp_path / "cache").mkdir()
        (tmp_path / "cache" / "figures").symlink_to(chapters_figures, target_is_directory=True)
    env = {**os.environ, "QASHIFT_WORKSPACE": str(tmp_path / "ws"),
           "QASHIFT_CACHE": str(tmp_path / "cache"), "QASHIFT_ROOT": str(home),
           "QASHIFT_DATA_DIR": str(shared_data), "MPLBACKEND": "Agg"}
    env.pop("QASHIFT_TESTSETS", None)
    env.pop("QASHIFT_SUBMISSIONS", None)
    wrong, took = [], []
    for step in CHAPTERS[chapter]:
        started = time.monotonic()
        problem = _run(step, home, env)
        took.append(f"{time.monotonic() - started:6.1f} s  {step.line[:90]}")
        if problem:
            wrong.append(f"{step.line} ({step.expect}): {problem}")
    times = "the steps' times:\n" + "\n".join(took)
    print(f"{chapter}: {times}")  # shown by `pytest -s`
    assert not wrong, "\n\n".join(wrong) + "\n\n" + times
