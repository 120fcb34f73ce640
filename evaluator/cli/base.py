"""What every command shares: a UserError becomes one line on stderr and exit status 1, Ctrl-C
one line and an end by the signal itself (so a shell loop around a command stops too), the
run folders that killed runs left in /tmp are removed at start, --data-dir/--workspace
apply for as long as the command runs, and -v/-q/--log-file set up the console (the log
file once the workspace it may not be in is known)."""

from __future__ import annotations

import atexit
import importlib
import logging
import os
import re
import signal
import sys
from pathlib import Path

import click

from evaluator.core import console, settings
from evaluator.core.errors import Terminated, UserError
from evaluator.core.files import check_output_path, remove_stale_tempdirs

COLUMNS, NAME_WIDTH = 120, 44  # listings fit this many columns unless --wide


def in_root(relative: str) -> dict:
    """A path option's default: `relative` inside the project root, read when the command
    runs (so that QASHIFT_ROOT applies), not in the current directory."""
    return {"default": lambda: settings.project_root() / relative,
            "show_default": f"{relative} in the project root"}


def load(ref: str):
    """The object a "module:attribute" reference names, its module imported now."""
    module, _, attribute = ref.partition(":")
    return getattr(importlib.import_module(module), attribute)


def cut(text: str, width: int, middle: bool = False) -> str:
    """`text` in at most `width` characters, an ellipsis marking a cut (in the middle: ids
    of derived sets differ at their ends)."""
    if len(text) <= width:
        return text
    if middle:
        head = (width - 1) // 2
        return text[:head] + "…" + text[len(text) - (width - 1 - head):]
    return text[:max(0, width - 1)] + "…"


class RunnerChoice(click.Choice):
    """--runner's choices: `auto` and the dispatch table's backends, read when click reads
    them, so that a backend registered after the commands were built is offered too."""

    def __init__(self):
        super().__init__(())

    @property
    def choices(self) -> tuple[str, ...]:
        from evaluator.runners.dispatch import choices  # lazy: the bundle schema

        return choices()

    @choices.setter
    def choices(self, _value) -> None:
        pass  # always the table's


class OneLineErrors:
    """Turn UserError into a one-line message and exit status 1, everywhere (also while the
    arguments are read, e.g. a bad --config file)."""

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except UserError as exc:
            console.error(str(exc))
            raise click.exceptions.Exit(1) from None

    def invoke(self, ctx: click.Context):
        remove_stale_tempdirs()  # what killed runs left behind
        try:
            return super().invoke(ctx)
        except UserError as exc:
            console.error(str(exc))
            ctx.exit(1)
        except KeyboardInterrupt as exc:  # the runners have stopped what they started
            signum = signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT
            console.error("interrupted" if signum == signal.SIGINT else "terminated")
            _ENDED_BY.append(signum)
            ctx.exit(128 + signum)


_ENDED_BY: list[int] = []  # the signal that ended this command, if one did


@atexit.register  # at import, so it runs after the exit handlers registered later
def _end_by_the_signal() -> None:
    """A command that Ctrl-C (or SIGTERM) ended exits killed by that signal, as a program
    that does not catch it would, once its threads have ended and its exit handlers run: a
    shell running it in a loop, or a script, then stops too (one that sees a plain exit
    status takes the interrupt as handled and goes on with its next command)."""
    if _ENDED_BY:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        signal.signal(_ENDED_BY[0], signal.SIG_DFL)
        os.kill(os.getpid(), _ENDED_BY[0])


class Group(OneLineErrors, click.Group):
    """A command group with one-line errors. `lazy` names commands as "module:attribute",
    imported only when one of them is asked for, so a command starts without importing
    every other; `sections` groups the help's command list by what a user does."""

    def __init__(self, *args, lazy: dict[str, str] | None = None,
                 sections: dict[str, tuple[str, ...]] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy, self.sections = dict(lazy or {}), dict(sections or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.lazy and name not in self.commands:
            self.add_command(load(self.lazy[name]), name)
        return super().get_command(ctx, name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        if not self.sections:
            return super().format_commands(ctx, formatter)
        listed = {n for names in self.sections.values() for n in names}
        rest = tuple(n for n in self.list_commands(ctx) if n not in listed)
        for title, names in [*self.sections.items(), *([("Other", rest)] if rest else [])]:
            rows = [(n, cmd.get_short_help_str(formatter.width - 20)) for n in names
                    if (cmd := self.get_command(ctx, n)) is not None and not cmd.hidden]
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


class Command(OneLineErrors, click.Command):
    """A command with one-line errors."""


def configure(data_dir: tuple[str, ...], workspace: str | None) -> None:
    """Apply --data-dir/--workspace to the settings for as long as this command runs; then
    open --log-file, now that the workspace it may not be in is known."""
    ctx = click.get_current_context()
    ctx.with_resource(settings.override(data_dir=tuple(data_dir), workspace=workspace))
    _open_log(ctx.meta)


def _open_log(meta: dict) -> None:
    """Open --log-file (appended to: an empty file or an earlier log of qashift's is fine,
    another file is not) if it passes the output rule: never inside the workspace, never a
    link. A log refused once a subcommand's --workspace is known is closed, and removed if
    this run began it."""
    if meta.get("console.log_file") is None:
        return
    path = Path(meta["console.log_file"])
    try:
        earlier = path.is_file() and not path.is_symlink() and _a_log(path)
        check_output_path(path, what="--log-file", columns=() if earlier else None)
    except UserError:
        if meta.pop("console.log_open", None) is not None:
            _setup_console(meta)
            if path in meta.get("console.logs_begun", ()):
                path.unlink(missing_ok=True)
        raise
    if not os.path.lexists(path):
        meta.setdefault("console.logs_begun", set()).add(path)
    meta["console.log_open"] = path
    _setup_console(meta)


LOG_LINE = re.compile(rb"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) ")


def _a_log(path: Path) -> bool:
    """Whether the file at `path` is empty or starts as the logs `console.setup` writes: a
    typo (`--log-file ~/.bashrc`) must not append lines a submission chose to another file."""
    try:
        with path.open("rb") as handle:
            head = handle.read(64)
    except OSError:
        return False
    return not head or LOG_LINE.match(head) is not None


def _setup_console(meta: dict) -> None:
    """The console as -v/-q say, logging to the --log-file already checked, if any."""
    console.setup(meta.get("console.verbose", 0), meta.get("console.quiet", False),
                  meta.get("console.log_open"))


def settings_options(fn):
    """--data-dir and --workspace on a subcommand, as on `qashift` itself."""
    fn = click.option("--workspace", type=click.Path(file_okay=False),
                      help="results store location (default $QASHIFT_WORKSPACE or ./.qashift)")(fn)
    return click.option("--data-dir", multiple=True, type=click.Path(file_okay=False),
                        help="local mirror of the public data files, tried before any URL")(fn)


def console_options(fn):
    """-v/--verbose, -q/--quiet and --log-file, applied before the command runs."""
    def apply(ctx: click.Context, param: click.Parameter, value):
        if value:  # a default never undoes what the group's options said
            ctx.meta[f"console.{param.name}"] = value
        _setup_console(ctx.meta)  # the log file is opened by `configure`
        return value

    fn = click.option("--log-file", type=click.Path(dir_okay=False), expose_value=False,
                      callback=apply, is_eager=True,
                      help="also write progress, warnings, errors and debug detail, with "
                           "times, to this file (appended to; outside the workspace, not a "
                           "link)")(fn)
    fn = click.option("-q", "--quiet", is_flag=True, expose_value=False, callback=apply,
                      is_eager=True, help="print errors only (results still go to stdout)")(fn)
    return click.option("-v", "--verbose", count=True, expose_value=False, callback=apply,
                        is_eager=True, help="print debug detail too")(fn)
