"""Command line: `evaluate` (the main job) and `qashift` (everything else).

This module holds the entry points and the table of commands, nothing else: every command
lives in a module of its own (evaluate, status, testsets, bundles, results, ...), imported
only when that command runs, so that start-up stays fast; a cached `evaluate` touches no
other command's module, nor scipy, pandas, matplotlib or docker.
"""

from __future__ import annotations

import sys

import click

from evaluator import __version__
from evaluator.cli.base import Group, configure, console_options, load

COMMANDS = {  # every command of `qashift`, "module:attribute", imported when asked for
    "evaluate": "evaluator.cli.evaluate:evaluate_cmd",
    "run": "evaluator.cli.evaluate:run_command",
    "check": "evaluator.cli.evaluate:check_command",
    "status": "evaluator.cli.status:status_cmd",
    "testsets": "evaluator.cli.testsets:testsets_group",
    "bundles": "evaluator.cli.bundles:bundles_group",
    "results": "evaluator.cli.results:results_group",
    "store": "evaluator.cli.store:store_group",
    "train": "evaluator.cli.train:train_command",
    "systems": "evaluator.cli.train:systems_command",
    "study": "evaluator.cli.study:study_group",
    "validate": "evaluator.cli.validate:validate_command",
    "figures": "evaluator.cli.figures:figures_command",
    "fit": "evaluator.cli.figures:fit_command",
    "concurrence": "evaluator.cli.papers:concurrence_command",
    "population": "evaluator.cli.population:population_command",
    "reproduce": "evaluator.cli.papers:reproduce_command",
    "strata": "evaluator.cli.strata:strata_command",
    "extra-data": "evaluator.cli.robustness:extra_data_command",
    "families": "evaluator.cli.robustness:families_command",
    "report": "evaluator.cli.figures:report_command",
    "challenge": "evaluator.cli.derive:challenge",
    "compare": "evaluator.cli.compare:compare_command",
    "trend": "evaluator.cli.trend:trend_command",
    "images": "evaluator.cli.images:images_group",
    "serve": "evaluator.cli.service:serve_command",
    "worker": "evaluator.cli.service:worker_command",
    "admin": "evaluator.cli.service:admin_group",
    "remote": "evaluator.cli.service:remote_group",
}
SECTIONS = {  # `qashift --help`, by what a user does
    "Evaluate": ("evaluate", "run", "check", "status", "results", "compare"),
    "Test sets and submissions": ("testsets", "bundles", "validate", "images"),
    "Train and study": ("train", "systems", "study"),
    "Analyse": ("trend", "figures", "fit", "population", "concurrence", "strata", "extra-data",
                "families", "challenge", "reproduce", "report"),
    "Store": ("store",),
    "Service": ("serve", "worker", "admin", "remote"),
}


@click.group(cls=Group, lazy=COMMANDS, sections=SECTIONS)
@click.version_option(__version__, prog_name="qashift")
@console_options
@click.option("--data-dir", multiple=True, type=click.Path(file_okay=False),
              help="local mirror of the public data files")
@click.option("--workspace", type=click.Path(file_okay=False), help="results store location")
def main(data_dir, workspace) -> None:
    """qashift: evaluate frozen QA submissions under distribution shift."""
    configure(data_dir, workspace)


def evaluate_command() -> None:
    """Console-script entry point for `evaluate`."""
    sys.exit(load(COMMANDS["evaluate"]).main(args=sys.argv[1:], prog_name="evaluate"))


EXPORTS = {ref.partition(":")[2]: ref for ref in COMMANDS.values()}


def __getattr__(name: str):
    """The commands by their names in their modules (`from evaluator.cli.main import
    evaluate_cmd`), imported on first use."""
    if name in EXPORTS:
        return load(EXPORTS[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    main()
