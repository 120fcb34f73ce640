"""`qashift validate [PATH...]`: check test-set and bundle folders and say every problem at
once, one line each (exit 1 if there is any), without running anything."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from evaluator.bundles import spec as bundles
from evaluator.bundles.schema import BundleFile
from evaluator.core.errors import ConfigError
from evaluator.data import testsets
from evaluator.data.schema import TestSetFile
from evaluator.data.testsets import TestSet
from evaluator.training.study import StudyFile


def _data_problem(testset: TestSet) -> str | None:
    """A folder's own data file that is missing (fetched and derived sets are checked when
    they are used: fetching needs a mirror or the network)."""
    if testset.source is None and testset.derive is None:
        path = testset.folder / testset.data_file
        if not path.is_file():
            return f"{testset.folder / 'testset.yaml'}: data file {testset.data_file} is missing"
    return None


def _check_folder(folder: Path) -> tuple[str, str | None]:
    """(what the folder is, its problem or None)."""
    try:
        if (folder / "testset.yaml").is_file():
            return f"test set {folder.name}", _data_problem(testsets.from_folder(folder))
        if (folder / "bundle.yaml").is_file():
            bundles.from_folder(folder)
            return f"bundle {folder.name}", None
    except ConfigError as error:
        return folder.name, str(error)
    return folder.name, f"{folder}: neither a test-set folder (testset.yaml) nor a bundle " \
                        f"folder (bundle.yaml)"


SCHEMAS = {"bundle": BundleFile, "testset": TestSetFile, "study": StudyFile}


@click.command("validate")
@click.argument("paths", nargs=-1, type=click.Path(exists=True, file_okay=False,
                                                   path_type=Path))
@click.option("--schema", type=click.Choice(sorted(SCHEMAS)), default=None,
              help="Print the JSON Schema of bundle.yaml, testset.yaml or a study plan (for "
                   "editors: YAML language servers read it) and exit.")
def validate_command(paths, schema) -> None:
    """Check folders (default: every test set and bundle) and list every problem."""
    if schema:
        doc = {"$schema": "https://json-schema.org/draft/2020-12/schema",
               **SCHEMAS[schema].model_json_schema()}
        click.echo(json.dumps(doc, indent=2, sort_keys=True))
        return
    problems: list[str] = []
    if paths:
        for folder in paths:
            what, problem = _check_folder(folder)
            if problem:
                problems.append(f"{what}: {problem}")
        checked = len(paths)
    else:
        good_sets, broken_sets = testsets.scan()
        good_bundles, broken_bundles = bundles.scan()
        problems += [f"test set {n}: {p}" for n, p in sorted(broken_sets.items())]
        problems += [f"test set {t.id}: {p}" for t in good_sets.values()
                     if (p := _data_problem(t))]
        problems += [f"bundle {n}: {p}" for n, p in sorted(broken_bundles.items())]
        checked = len(good_sets) + len(broken_sets) + len(good_bundles) + len(broken_bundles)
    for line in problems:
        click.echo(line)
    click.echo(f"{checked} folders checked, {len(problems)} with a problem",
               err=bool(problems))
    sys.exit(1 if problems else 0)
