"""Every command that README and docs/ show is one the tools have: its program, its
subcommands and each of its --options exist (a synopsis line's `a | b` alternatives and
[optional] parts included). The concrete ones that finish in seconds are run as a user would
run them, on an empty workspace, and must end with status 0 and no traceback."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys

import click
import pytest

from evaluator.cli.base import load
from evaluator.cli.main import COMMANDS, main
from tests.conftest import REPO

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


# The concrete commands that finish in seconds on an empty workspace (their text as the docs
# print it; `../shared/data` is the data folder beside the checkout).
RUN = [
    "evaluate --bundle bert-ensemble --testset squad-dev --data-dir ../shared/data",
    "qashift figures --source squadshifts-published --out figures --data-dir ../shared/data",
    "qashift reproduce --data-dir ../shared/data",
    "qashift figures --source zoo/scores.csv --compare squadshifts-published --out zoo-figures",
    "qashift extra-data --table results/population.csv --table results/extra-data.csv",
    "qashift population --markdown",
    "qashift systems",
    "qashift zoo list",
    "qashift bundles list --awaiting",
    "qashift validate --schema bundle > bundle.schema.json",
    "qashift study status studies/population.yaml --table results/population.csv "
    "--by-approach",
    "qashift concurrence --scores results/approach-matrix.csv --reference squad "
    "--paper studies/approach-level.yaml --out figures/approach-level",
    "qashift concurrence --out figures/concurrence",
    "qashift families",
    "qashift status",
    "qashift study status studies/approach-level.yaml --table results/approach-level.csv "
    "--ledger results/population.csv",
    "qashift report --source squadshifts-published --out site-published/",
    "evaluate -b sliding-window -t reddit",
    "evaluate -b r-net-plus-ensemble -t squad-dev --level 0.99 --cluster paragraph",
    "qashift validate",
    "qashift concurrence",
    "qashift fit",
    "qashift reproduce",
    'qashift concurrence --subset "SQuAD 1.1 — All>76.24"',
    'qashift concurrence --versus "MRQA NewsQA"',
    'qashift concurrence --knee "SQuAD 1.1 — All" "CNN (100K Examples)"',
    "qashift concurrence --bootstrap 1000 --seed 0",
]


def test_the_commands_to_run_are_documented_as_written():
    """Each is a documented line, optional [parts] left out."""
    documented = {" ".join(re.sub(r"\[[^]]*\]", "", line).split()) for _, line in LINES}
    assert set(RUN) <= documented, set(RUN) - documented


@pytest.mark.slow
@pytest.mark.parametrize("line", RUN)
def test_a_documented_command_runs_on_an_empty_workspace(line, tmp_path, shared_data):
    """Run from a copy of the checkout's layout (results, studies, zoo read from the
    checkout; everything written goes to a temporary folder). Commands that read the
    results store (`strata`, `extra-data` without a table) are left out: on an empty
    workspace they stop with one line saying to run `evaluate` first."""
    home = tmp_path / "checkout"
    home.mkdir()
    for name in ("results", "studies", "zoo"):
        (home / name).symlink_to(REPO / name)
    shutil.copytree(REPO / "configs", home / "configs")  # a run config writes beside itself
    (tmp_path / "shared").symlink_to(shared_data.parent)
    env = {**os.environ, "QASHIFT_WORKSPACE": str(tmp_path / "ws"),
           "QASHIFT_CACHE": str(tmp_path / "cache"), "QASHIFT_ROOT": str(REPO),
           "QASHIFT_DATA_DIR": str(shared_data), "MPLBACKEND": "Agg"}
    command, _, into = line.partition(" > ")
    done = subprocess.run(shlex.split(command), cwd=home, env=env, capture_output=True,
                          text=True, timeout=600)
    if into:
        (home / into).write_text(done.stdout)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
