"""-q keeps errors only, -v adds debug detail, --log-file keeps everything with times;
results stay on stdout whatever the console says."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from evaluator.cli.main import evaluate_cmd, main
from evaluator.core.console import duration
from tests.conftest import FIRST_WORD, tiny_registry


@pytest.fixture
def two_cells(tmp_path, monkeypatch, workspace, small_dev):
    tiny_registry(tmp_path, monkeypatch, {"tiny": small_dev},
                  {"first-word": FIRST_WORD, "first-word-too": FIRST_WORD})
    return ["-b", "first-word", "-b", "first-word-too", "-t", "tiny", "--runner", "local"]


def test_progress_by_default_none_with_quiet_and_results_always(two_cells):
    loud = CliRunner().invoke(main, ["evaluate", *two_cells])
    assert loud.exit_code == 0, loud.output
    assert "first-word x tiny" in loud.stderr  # a progress line per cell
    quiet = CliRunner().invoke(main, ["-q", "evaluate", *two_cells])
    assert quiet.exit_code == 0 and quiet.stderr == ""
    assert "first-word-too" in quiet.stdout and "EM [lo, hi]" in quiet.stdout


def test_verbose_and_log_file_on_the_evaluate_entry_point(two_cells, tmp_path):
    log = tmp_path / "logs" / "run.log"
    result = CliRunner().invoke(evaluate_cmd, [*two_cells, "-v", "--log-file", str(log)])
    assert result.exit_code == 0, result.output
    assert "2 cells planned" in result.stderr
    text = log.read_text()
    assert re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} DEBUG 2 cells planned", text, re.M)
    assert re.search(r"INFO .*first-word x tiny", text)


def test_the_group_options_hold_for_a_study_file_run_too(two_cells, tmp_path):
    """`qashift -q/-v/--log-file run STUDY` as `qashift ... evaluate`: the options work on
    `qashift` before any subcommand."""
    study = tmp_path / "study.yaml"
    study.write_text("bundles: [first-word, first-word-too]\ntestsets: [tiny]\nrunner: local\n")
    quiet = CliRunner().invoke(main, ["-q", "run", str(study)])
    assert quiet.exit_code == 0, quiet.output
    assert quiet.stderr == "" and "first-word-too" in quiet.stdout
    log = tmp_path / "logs" / "run.log"
    loud = CliRunner().invoke(main, ["-v", "--log-file", str(log), "run", str(study), "--rerun"])
    assert loud.exit_code == 0, loud.output
    assert "2 cells planned" in loud.stderr
    text = log.read_text()
    assert "DEBUG 2 cells planned" in text
    assert re.search(r"INFO .*first-word x tiny", text)


def test_errors_still_show_with_quiet(workspace):
    result = CliRunner().invoke(main, ["-q", "evaluate", "-b", "no-such-bundle", "-t",
                                       "squad-dev"])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: ") and len(result.stderr.splitlines()) == 1


class Terminal:
    """A stand-in stderr that says it is a terminal."""

    def __init__(self):
        self.text = ""

    def write(self, text):
        self.text += text
        return len(text)

    def flush(self):
        pass

    def isatty(self):
        return True


def test_progress_rewrites_one_line_on_a_terminal_and_stays_plain_elsewhere(monkeypatch,
                                                                             capsys):
    from evaluator.core import console

    console.setup()
    for epoch in (1, 2):
        console.progress(f"epoch {epoch}/2")
    console.say("done")
    assert capsys.readouterr().err == "epoch 1/2\nepoch 2/2\ndone\n"  # a pipe: plain lines
    screen = Terminal()
    monkeypatch.setattr("sys.stderr", screen)
    for epoch in (1, 2):
        console.progress(f"epoch {epoch}/2")
    console.say("done")
    assert screen.text == "\r\x1b[Kepoch 1/2\r\x1b[Kepoch 2/2\ndone\n"


@pytest.mark.parametrize("seconds, said", [
    (0.4, "0 s"), (42, "42 s"), (89.4, "89 s"), (90, "2 min"), (1_020, "17 min"),
    (5_369, "89 min"), (5_400, "1 h 30 min"), (48_979, "13 h 36 min"),
])
def test_an_eta_reads_in_the_unit_a_person_would_use(seconds, said):
    assert duration(seconds) == said


@pytest.mark.parametrize("seconds", [float("nan"), float("inf"), -1.0, -1e308])
def test_what_is_no_time_reads_as_unknown_never_as_a_hundred_digits(seconds):
    assert duration(seconds) == "?"
