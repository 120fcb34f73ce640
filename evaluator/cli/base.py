"""What every command shares: a UserError becomes one line on stderr and exit status 1, and
the run folders that killed runs left in /tmp are removed at start."""

from __future__ import annotations

import click

from evaluator.core.errors import UserError
from evaluator.core.files import remove_stale_tempdirs


class OneLineErrors:
    """Turn UserError into a one-line message and exit status 1, everywhere."""

    def invoke(self, ctx: click.Context):
        remove_stale_tempdirs()  # what killed runs left behind
        try:
            return super().invoke(ctx)
        except UserError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(1)


class Group(OneLineErrors, click.Group):
    """A command group with one-line errors."""


class Command(OneLineErrors, click.Command):
    """A command with one-line errors."""
