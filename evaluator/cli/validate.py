"""`qashift validate [PATH...]`: check test-set and bundle folders and say every problem at
once, one line each (exit 1 if there is any), without running anything."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import click

from evaluator import scoring
from evaluator.bundles import spec as bundles
from evaluator.bundles.schema import BundleFile
from evaluator.core.errors import ConfigError, DataError, UserError
from evaluator.core.files import write_atomic
from evaluator.core.folders import unknown_name
from evaluator.data import checks, testsets
from evaluator.data.fetch import cached_path
from evaluator.data.schema import TestSetFile
from evaluator.data.testsets import TestSet
from evaluator.study import StudyFile


def _data_problems(testset: TestSet, generate: bool = False) -> list[str]:
    """What is wrong with a test set's data: a folder's own file is opened and checked
    question by question, and against its pinned sha256; a fetched set is checked where a
    copy is already here (fetching needs a mirror or the network); a derived set is checked
    by its transform when it is generated, which `generate` (a folder named on the command
    line) does now: its count, its pin, and whether its parents' data is here at all."""
    if testset.derive is not None:
        if not generate:
            return []
        try:
            testset.load()
        except UserError as error:  # a parent unknown or not here, a count, a pin
            return [str(error).splitlines()[0]]
        return []
    if testset.source is not None:
        path = cached_path(testset.source.sha256)
        if not path.is_file():
            return []
    else:
        path = testset.folder / testset.data_file
        if not path.is_file():
            return [f"{testset.folder / 'testset.yaml'}: data file {testset.data_file} is "
                    f"missing"]
    try:
        raw = testsets.read_document(path, testset.id)
        if testset.source is None:
            testset.sha256  # noqa: B018  (the pin is checked on reading it)
    except DataError as error:
        return [str(error)]
    return checks.problems(raw, path, expected=testset.questions,
                           aligned=testset.answers_aligned, content=True)


def _pin(folder: Path, version: str | None) -> str:
    """Write the data's sha256 (and `version`) into the folder's testset.yaml, once it passes
    every check: a folder's own data file, or a derived set's generated data (generated here
    first); what was done, one line. A testset.yaml or data file that is a link is refused."""
    _own_file(folder, "testset.yaml")
    testset = testsets.from_folder(folder)
    if testset.data_file:
        _own_file(folder, testset.data_file)
    if testset.source is not None:
        raise UserError(f"{folder}: a fetched set is pinned by its source.sha256; only a "
                        f"folder's own data file or generated data is pinned here")
    unpinned = dataclasses.replace(testset, pinned=None)
    problems = _data_problems(unpinned)
    if problems:
        raise UserError(f"{folder} is not pinned: {problems[0]}")
    what = testset.data_file or "its generated data"
    sha = unpinned.sha256  # a derived set is generated (and checked by its transform) here
    if testset.pinned and testset.pinned.lower() != sha and version in (None, testset.version):
        raise UserError(f"{folder}: {what} changed since it was pinned (version "
                        f"{testset.version}); pin it under a new version: "
                        f"{testset.repin_command()}")
    where = folder / "testset.yaml"
    lines = [line for line in where.read_text().splitlines()
             if not line.startswith("sha256:") and not (version and line.startswith("version:"))]
    lines += [f"version: '{version}'"] if version else []
    lines.append(f"sha256: {sha}")
    write_atomic(where, ("\n".join(lines) + "\n").encode(), where.stat().st_mode & 0o777)
    testsets.from_folder(folder)  # still a valid folder
    return f"pinned {folder.name}: sha256 {sha[:12]}" + (f", version {version}" if version else "")


def _own_file(folder: Path, name: str) -> None:
    """A UserError if the folder's file `name` is a link or leads outside the folder: --pin
    would pin, or rewrite, a file elsewhere."""
    path = folder / name
    if path.is_symlink() or not path.resolve().is_relative_to(folder.resolve()):
        raise UserError(f"{folder}: {name} is a link or leads outside the folder; --pin "
                        f"pins a folder's own files only")


def _reference_problem(testset: TestSet, known: set[str]) -> str | None:
    """A reference that names no test set here: the set's trend would have nothing to be
    plotted against, silently."""
    if testset.reference is None or testset.reference in known:
        return None
    hint = str(unknown_name("test set", testset.reference, known)).split(": ", 1)[1]
    return (f"{testset.folder / 'testset.yaml'}: reference {testset.reference!r} is not a "
            f"test set here ({hint})")


def _scorer_problem(testset: TestSet) -> str | None:
    """A scorer no module of evaluator/scoring registers: no cell of the set can be scored."""
    if testset.scorer in scoring.scorers():
        return None
    return (f"{testset.folder / 'testset.yaml'}: scorer {testset.scorer!r} is not registered "
            f"(choices: {', '.join(sorted(scoring.scorers()))})")


def _check_folder(folder: Path) -> tuple[str, list[str]]:
    """(what the folder is, its problems: one line each)."""
    try:
        if (folder / "testset.yaml").is_file():
            testset = testsets.from_folder(folder)
            found = _data_problems(testset, generate=True)
            reference = _reference_problem(testset, {*testsets.available(), folder.name})
            return f"test set {folder.name}", found + [
                p for p in (reference, _scorer_problem(testset)) if p]
        if (folder / "bundle.yaml").is_file():
            bundles.from_folder(folder)
            return f"bundle {folder.name}", []
    except ConfigError as error:
        return folder.name, [str(error)]
    return folder.name, [f"{folder}: neither a test-set folder (testset.yaml) nor a bundle "
                         f"folder (bundle.yaml)"]


SCHEMAS = {"bundle": BundleFile, "testset": TestSetFile, "study": StudyFile}


@click.command("validate")
@click.argument("paths", nargs=-1, type=click.Path(exists=True, file_okay=False,
                                                   path_type=Path))
@click.option("--schema", type=click.Choice(sorted(SCHEMAS)), default=None,
              help="Print the JSON Schema of bundle.yaml, testset.yaml or a study plan (for "
                   "editors: YAML language servers read it) and exit.")
@click.option("--pin", is_flag=True,
              help="For each test-set FOLDER given, once its data passes every check, write "
                   "the sha256 of its data file (or of its generated data, for a derived "
                   "set) into testset.yaml: an edit, or other generated bytes, is then "
                   "refused.")
@click.option("--version", default=None,
              help="With --pin: the new version to write (needed to pin a changed file).")
def validate_command(paths, schema, pin, version) -> None:
    """Check folders (default: every test set and bundle) and list every problem: a test
    set's data is opened and checked question by question."""
    if pin:
        if not paths:
            raise UserError("--pin needs the test-set folders to pin")
        for folder in paths:
            click.echo(_pin(folder, version))
        return
    if schema:
        doc = {"$schema": "https://json-schema.org/draft/2020-12/schema",
               **SCHEMAS[schema].model_json_schema()}
        click.echo(json.dumps(doc, indent=2, sort_keys=True))
        return
    problems: list[str] = []
    failing = 0
    if paths:
        for folder in paths:
            what, found = _check_folder(folder)
            problems += [f"{what}: {problem}" for problem in found]
            failing += bool(found)
        checked = len(paths)
    else:
        good_sets, broken_sets = testsets.scan()
        good_bundles, broken_bundles = bundles.scan()
        problems += [f"test set {n}: {p}" for n, p in sorted(broken_sets.items())]
        problems += [f"test set {t.id}: {p}" for t in good_sets.values()
                     for p in _data_problems(t)]
        known = {*good_sets, *broken_sets}
        problems += [f"test set {t.id}: {p}" for t in good_sets.values()
                     for p in (_reference_problem(t, known), _scorer_problem(t)) if p]
        problems += [f"bundle {n}: {p}" for n, p in sorted(broken_bundles.items())]
        checked = len(good_sets) + len(broken_sets) + len(good_bundles) + len(broken_bundles)
        failing = len({line.split(": ", 1)[0] for line in problems})
    for line in problems:
        click.echo(line)
    click.echo(f"{checked} folders checked, {failing} with a problem",
               err=bool(problems))
    sys.exit(1 if problems else 0)
