"""`qashift testsets`: list, show, stats and fetch test sets (`derive` lives in cli.derive)."""

from __future__ import annotations

import fnmatch
import json
import sys
from pathlib import Path
from typing import get_args

import click

from evaluator.cli.base import COLUMNS, NAME_WIDTH, Group, cut
from evaluator.core import console, settings
from evaluator.core.errors import UserError
from evaluator.core.files import check_output_path, write_csv_atomic
from evaluator.core.folders import unknown_name
from evaluator.data import stats, testsets
from evaluator.data.fetch import cached_path
from evaluator.data.schema import TestSetFile

KINDS = get_args(TestSetFile.model_fields["kind"].annotation)  # what testset.yaml allows


@click.group("testsets", cls=Group, lazy={"derive": "evaluator.cli.derive:testsets_derive"})
def testsets_group() -> None:
    """List, inspect and fetch test sets."""


@testsets_group.command("list")
@click.option("--kind", "kinds", multiple=True, metavar="KIND",
              help=f"only sets of this kind (repeatable): {', '.join(KINDS)}")
@click.option("--match", "pattern", default=None, metavar="GLOB", help="only ids matching this")
@click.option("--json", "as_json", is_flag=True,
              help="print the listed sets as one JSON array (an object per set)")
def testsets_list(kinds, pattern, as_json) -> None:
    """Every test set; a broken folder is listed with its problem, the others still are."""
    for kind in kinds:
        if kind not in KINDS:
            raise unknown_name("kind", kind, KINDS)
    good, broken = testsets.scan()
    if not good and not broken:
        console.warn(testsets.none_here())
    names = sorted(n for n in [*good, *broken] if not pattern or fnmatch.fnmatch(n, pattern))
    if kinds:
        names = [n for n in names if n in good and good[n].kind in kinds]
    rows = []
    for name in names:
        if name in broken:
            rows.append({"id": name, "broken": broken[name]})
            continue
        ts = good[name]
        if ts.derive is not None:
            local = f"derived ({ts.derive.transform})"
        elif ts.source is not None:
            local = "cached" if cached_path(ts.sha256).exists() else "fetched on first use"
        else:
            local = f"in folder ({ts.data_file})" + (", pinned" if ts.pinned else "")
        rows.append({"id": ts.id, "kind": ts.kind, "questions": ts.questions,
                     "scorer": ts.scorer, "reference": ts.reference, "data": local})
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    width = min(max([len(n) for n in names] + [2]), NAME_WIDTH)
    ref = min(max([len(r.get("reference") or "-") for r in rows] + [9]), 20)
    click.echo(f"{'id':<{width}} {'kind':<13} {'questions':>9} {'scorer':<15} "
               f"{'reference':<{ref}} data")
    for r in rows:
        if "broken" in r:
            click.echo(cut(f"{cut(r['id'], width):<{width}} BROKEN: {r['broken']}", COLUMNS))
            continue
        line = (f"{cut(r['id'], width):<{width}} {r['kind']:<13} {r['questions']:>9} "
                f"{r['scorer']:<15} {cut(r['reference'] or '-', ref):<{ref}} {r['data']}")
        click.echo(cut(line, COLUMNS))
    if kinds or pattern:
        console.say(f"{len(rows)} of {len(good) + len(broken)} test sets")


@testsets_group.command("show")
@click.argument("name")
def testsets_show(name: str) -> None:
    """A test set's facts (kind, reference, questions, scorer, license, sha256) and where its
    data file is: cached, in a mirror, or still to fetch."""
    ts = testsets.get(name)
    for key in ("id", "name", "version", "kind", "reference", "questions", "scorer",
                "cluster", "license", "citation", "sha256"):
        click.echo(f"{key:>10}: {getattr(ts, key)}")
    if ts.source is not None:
        click.echo(f"{'url':>10}: {ts.source.url}")
        mirrored = [m / ts.source.file for m in settings.mirror_dirs()
                    if (m / ts.source.file).is_file()]
        where = ("cached" if cached_path(ts.sha256).exists() else
                 f"in the mirror {mirrored[0]}" if mirrored else
                 f"not here yet: `qashift testsets fetch {ts.id}` downloads it, or put "
                 f"{ts.source.file} in a mirror directory (--data-dir DIR)")
        click.echo(f"{'data':>10}: {where}")


@testsets_group.command("stats")
@click.argument("names", nargs=-1)
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the table as CSV (outside the workspace, not a link).")
def testsets_stats(names, csv_path) -> None:
    """Articles, paragraphs, questions, mean paragraph/question/answer length (words) and
    answers per question of each test set (default: every folder, training splits
    included); a set whose data cannot be had here is listed with the reason."""
    columns = ["testset", *stats.COLUMNS]
    if csv_path:
        check_output_path(csv_path, what="--csv", columns=columns)
    rows, width = [], max((len(n) for n in testsets.available()), default=10)
    click.echo(f"{'id':<{width}} {'articles':>8} {'paragraphs':>10} {'questions':>9} "
               f"{'para_w':>7} {'quest_w':>7} {'answ_w':>6} {'answ/q':>6}")
    chosen = testsets.resolve(list(names) or sorted(testsets.available()))
    derived = sum(ts.derive is not None for ts in chosen)
    if not names and derived:
        console.say(f"{len(chosen)} sets, {derived} of them derived: a derived set is made "
                    f"from its parent the first time it is read, which can take minutes in "
                    f"all; name sets to read fewer")
    for ts in chosen:
        try:
            s = stats.of(ts.load().raw)
        except UserError as exc:
            click.echo(f"{ts.id:<{width}} unavailable: {exc}")
            continue
        rows.append({"testset": ts.id, **s.row()})
        click.echo(f"{ts.id:<{width}} {s.articles:>8} {s.paragraphs:>10} {s.questions:>9} "
                   f"{s.paragraph_words:>7.1f} {s.question_words:>7.1f} {s.answer_words:>6.2f} "
                   f"{s.answers_per_question:>6.2f}")
    if csv_path:
        write_csv_atomic(csv_path, columns, rows)
        click.echo(f"wrote {csv_path}")


@testsets_group.command("fetch")
@click.argument("names", nargs=-1, required=True)
def testsets_fetch(names) -> None:
    """Download (or copy from a mirror), verify and cache test-set files."""
    failed = False
    for ts in testsets.resolve(list(names)):
        try:
            dataset = ts.load()
            click.echo(f"{ts.id}: ok ({len(dataset.questions)} questions, sha256 verified)")
        except UserError as exc:
            failed = True
            console.error(str(exc))
    sys.exit(1 if failed else 0)
