"""What every command shares: a UserError becomes one line on stderr and exit status 1, the
run folders that killed runs left in /tmp are removed at start, and --data-dir/--workspace
apply for as long as the command runs."""

from __future__ import annotations

import click

from evaluator.core import settings
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


def configure(data_dir: tuple[str, ...], workspace: str | None) -> None:
    """Apply --data-dir/--workspace to the settings for as long as this command runs."""
    click.get_current_context().with_resource(
        settings.override(data_dir=tuple(data_dir), workspace=workspace))


def settings_options(fn):
    """--data-dir and --workspace on a subcommand, as on `qashift` itself."""
    fn = click.option("--workspace", type=click.Path(file_okay=False),
                      help="results store location (default $QASHIFT_WORKSPACE or ./.qashift)")(fn)
    return click.option("--data-dir", multiple=True, type=click.Path(file_okay=False),
                        help="local mirror of the public data files, tried before any URL")(fn)
