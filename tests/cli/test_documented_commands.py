"""Every `qashift ...` and `evaluate ...` command quoted in a code block of README.md or docs/
exists: its subcommands and every option it uses are ones the command line accepts, and it
gives every option its command requires."""

from __future__ import annotations

import shlex

import click
import pytest

from evaluator.cli.main import evaluate_cmd, main
from tests.conftest import REPO

PROGRAMS = {"qashift": main, "evaluate": evaluate_cmd}


def quoted_commands() -> list[tuple[str, str]]:
    """(where, command line) for each command in a fenced code block, continuations joined."""
    found = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        in_code, pending = False, ""
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.lstrip().startswith("```"):
                in_code, pending = not in_code, ""
                continue
            if not in_code:
                continue
            text = pending + line.strip()
            if text.endswith("\\"):
                pending = text[:-1] + " "
                continue
            pending = ""
            if text.split(" ", 1)[0] in PROGRAMS:
                found.append((f"{path.relative_to(REPO)}:{number}", text))
    return found


def option_names(command: click.Command) -> dict[str, click.Option]:
    return {name: p for p in command.params if isinstance(p, click.Option)
            for name in (*p.opts, *p.secondary_opts)}


def required(command: click.Command, given: set[str]) -> None:
    """Every required option of `command` is among the option names `given`."""
    for p in command.params:
        if isinstance(p, click.Option) and p.required:
            assert given & set(p.opts + p.secondary_opts), \
                f"{command.name} needs {p.opts[-1]}, which the line does not give"


def check(line: str) -> None:
    tokens = [t.strip("[]") for t in shlex.split(line, comments=True)]
    segments, current = [[]], None
    for token in tokens:  # "list | show ID | fetch ID": alternatives for the last subcommand
        if token == "|":
            segments.append([])
        elif token:
            segments[-1].append(token)
    first, alternatives = segments[0], segments[1:]
    command, path, index, chosen = PROGRAMS[first[0]], [], 1, []
    given = {t.split("=", 1)[0] for t in tokens if t.startswith("-")}
    while index < len(first):
        token = first[index]
        if token.startswith("-") and not token.lstrip("-").isdigit():
            name = token.split("=", 1)[0]
            options = option_names(command)
            assert name in options, f"{' '.join(path) or first[0]} has no option {name}"
            if not options[name].is_flag and "=" not in token:
                index += 1  # its value
        elif isinstance(command, click.Group):  # a group takes a subcommand, nothing else
            for name in token.split("|"):
                assert subcommand(command, name), f"no command {name} under {command.name}"
            current, command = command, subcommand(command, token.split("|")[0])
            chosen = [subcommand(current, name) for name in token.split("|")]
            path.append(token)
        index += 1
    for segment in alternatives:
        assert current is not None and subcommand(current, segment[0]), \
            f"no command {segment[0]} under {current and current.name}"
        chosen.append(subcommand(current, segment[0]))
    for command in chosen or [PROGRAMS[first[0]]]:
        required(command, given)


def subcommand(group: click.Group, name: str) -> click.Command | None:
    """A group's subcommand by name, a lazily imported one included."""
    return group.get_command(click.Context(group), name)


@pytest.mark.parametrize("where, line", quoted_commands(), ids=lambda v: str(v)[:60])
def test_a_quoted_command_exists_with_its_options(where, line):
    check(line)


def test_the_docs_quote_commands_at_all():
    lines = [line for _, line in quoted_commands()]
    assert len(lines) > 40
    assert any(line.startswith("qashift study run") for line in lines)
    with pytest.raises(AssertionError, match="has no option --no-such-flag"):
        check("qashift train -a x -t y --no-such-flag")
    with pytest.raises(AssertionError, match="no command lst"):
        check("qashift testsets lst")
    with pytest.raises(AssertionError, match="table needs --out"):
        check("qashift study run|table PLAN.yaml")
