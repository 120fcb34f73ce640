"""`qashift results`: list, show, export and log stored results; per-question samples; the
questions where two systems differ."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import click

from evaluator import scoring
from evaluator.api.results import Results
from evaluator.cli import compare
from evaluator.cli.base import cut
from evaluator.core import console
from evaluator.core.errors import UserError
from evaluator.core.files import READABLE, check_output_path, write_atomic, write_csv_atomic
from evaluator.data import testsets
from evaluator.pipeline.samples import file_stem, write_samples
from evaluator.stats.intervals import level_text
from evaluator.store.queries import is_recorded, is_sample, sample_size
from evaluator.store.store import Store
from evaluator.store.units import load_units


@click.group("results")
def results_group() -> None:
    """Inspect and export stored results."""


@results_group.command("list")
@click.option("--bundle", "-b", default=None, help="only this bundle or trained system")
@click.option("--testset", "-t", default=None, help="only this test set")
@click.option("--failures", is_flag=True,
              help="list failed runs instead (a sample's labelled with its n)")
@click.option("--include-samples", is_flag=True,
              help="also the runs on a sample of questions (--limit, check), labelled")
def results_list(bundle, testset, failures, include_samples) -> None:
    """The result of every stored cell (its newest full run of the bundle as it is today),
    with the test set's digest; samples only when asked, and labelled."""
    store = Store.open_default()
    if not store.exists():
        raise UserError(f"no results store at {store.db_path}; run evaluate first")
    if failures:
        rows = [f for f in store.failures() if (not bundle or f["bundle"] == bundle)
                and (not testset or f["testset"] == testset)]
        wb = max([len("bundle"), *(len(r["bundle"]) for r in rows)])
        wt = max([len("testset"), *(len(r["testset"]) for r in rows)])
        for f in rows:
            kind = f"(sample of {sample_size(f)}) " if is_sample(f) else ""
            click.echo(f"{f['bundle']:<{wb}} {f['testset']:<{wt}} {f['failure_class']:<22} "
                       f"{kind}{f['message']}")
        return
    rows = Results(store).rows(bundle, testset)
    samples = [r for r in store.results(bundle, testset) if is_sample(r)]
    if include_samples:
        rows += sorted(samples,
                       key=lambda r: (r["bundle"], r["testset"], r["created_at"]))
    wb = max([len("bundle"), *(len(r["bundle"]) for r in rows)])
    wt = max([len("testset"), *(len(r["testset"]) for r in rows)])
    click.echo(f"{'bundle':<{wb}} {'testset':<{wt}} {'n':>6} {'miss':>5} {'EM':>8} {'F1':>8}  "
               f"{'runner':<7} {'set sha256':<12} {'key':<12} run")
    present = set(testsets.available())
    for r in rows:
        kind = f"sample of {r['n']}" if is_sample(r) else \
            f"recorded from {r['source']}" if is_recorded(r) else "full"
        kind += "" if r["testset"] in present else ", its test-set folder is gone"
        missing = "-" if is_recorded(r) else r["missing"]
        click.echo(f"{r['bundle']:<{wb}} {r['testset']:<{wt}} {r['n']:>6} {missing:>5} "
                   f"{r['em']:8.3f} {r['f1']:8.3f}  {r['runner']:<7} "
                   f"{r['testset_sha256'][:12]} {r['key'][:12]} {kind}")
    hidden = len(samples)
    if hidden and not include_samples:
        console.say(f"{hidden} runs on samples of questions not shown (--include-samples)")


@results_group.command("export")
@click.argument("bundle")
@click.argument("testset")
@click.option("--out", type=click.Path(file_okay=False), default=".", show_default=True,
              help="the folder to write into (outside the workspace; not a link)")
def results_export(bundle, testset, out) -> None:
    """Write a cell's predictions and per-question scores to --out, as
    BUNDLE.TESTSET.predictions.json and BUNDLE.TESTSET.scores.csv (a trained system's `/`
    written `_`, as `results samples` names its logs)."""
    out_dir = check_output_path(Path(out), what="--out", folder=True)
    store = Store.open_default()
    row = _cell(store, bundle, testset)
    if is_recorded(row):
        raise UserError(f"{bundle} x {testset} is recorded from {row['source']}, without "
                        f"predictions or per-question scores; `evaluate -b {bundle} -t "
                        f"{testset}` runs it")
    out_dir.mkdir(parents=True, exist_ok=True)
    predictions = store.get_object(row["predictions_sha256"])
    if predictions is None:
        raise UserError("stored predictions are missing or corrupt; re-run with --rerun")
    prefix = file_stem(bundle, testset)  # a trained system's `/` as `_`, as the logs name it
    write_atomic(out_dir / f"{prefix}.predictions.json", predictions, READABLE)
    write_csv_atomic(out_dir / f"{prefix}.scores.csv",
                     ["id", "em", "f1", "paragraph", "article", "missing"],
                     ({"id": u.id, "em": u.em, "f1": u.f1, "paragraph": u.paragraph,
                       "article": u.article, "missing": u.missing}
                      for u in load_units(store, row)), for_people=True)
    click.echo(f"wrote {out_dir / (prefix + '.predictions.json')} and "
               f"{out_dir / (prefix + '.scores.csv')}")


@results_group.command("samples")
@click.option("--bundle", "-b", "bundle_names", multiple=True, help="only these (repeatable)")
@click.option("--testset", "-t", "testset_names", multiple=True, help="only these (repeatable)")
@click.option("--out", type=click.Path(file_okay=False), required=True,
              help="the folder to write into (outside the workspace; not a link)")
def results_samples(bundle_names, testset_names, out) -> None:
    """Per-question logs (JSONL, and Parquet with pyarrow) of every stored cell selected, as
    `evaluate --log-samples` writes them: the newest full result of each cell."""
    from analysis.sources import strata  # lazy: pandas; the strata cache

    check_output_path(Path(out), what="--out", folder=True)
    store = Store.open_default()
    if not store.exists():
        raise UserError(f"no results store at {store.db_path}; run evaluate first")
    rows = [r for r in Results(store).rows()
            if (not bundle_names or r["bundle"] in bundle_names)
            and (not testset_names or r["testset"] in testset_names)]
    if not rows:
        raise UserError("no stored full result matches that selection")
    written = 0
    for r in sorted(rows, key=lambda r: (r["bundle"], r["testset"])):
        if is_recorded(r):
            console.warn(f"skipped {r['bundle']} x {r['testset']}: recorded from {r['source']}, "
                         f"without per-question scores (evaluate runs it)")
            continue
        try:
            dataset = testsets.get(r["testset"]).load()
        except UserError as exc:
            console.warn(f"skipped {r['bundle']} x {r['testset']}: {exc}")
            continue
        if dataset.sha256 != r["testset_sha256"]:
            console.warn(f"skipped {r['bundle']} x {r['testset']}: the test set's file changed "
                         f"since that run")
            continue
        predictions = json.loads(store.get_object(r["predictions_sha256"]) or b"null")
        if not isinstance(predictions, dict):
            console.warn(f"skipped {r['bundle']} x {r['testset']}: stored predictions missing")
            continue
        for path in write_samples(dataset, predictions, Path(out), r["bundle"], r["testset"],
                                  strata.cached(dataset.sha256)):
            console.say(f"wrote {path}")
        written += 1
    click.echo(f"{written} cells written to {out}")


def _cell(store: Store, bundle: str, testset: str) -> dict:
    """The result of a cell (the one rule of store.queries); a one-line error without one,
    saying when only a sample of it is stored."""
    results = Results(store)
    row = results.cell(bundle, testset)
    if row is None:
        sample = results.cell(bundle, testset, samples=True, recorded=False)
        if sample is not None:
            raise UserError(f"only a sample of {sample['n']} questions of {bundle} x {testset} "
                            f"is stored (results list --include-samples); run evaluate for "
                            f"its result")
        raise UserError(f"no stored result for {bundle} x {testset}; run evaluate first")
    return row


@results_group.command("show")
@click.argument("bundle")
@click.argument("testset")
@click.option("--json", "as_json", is_flag=True,
              help="the stored row as JSON, its run record (runner details, provenance) whole")
def results_show(bundle, testset, as_json) -> None:
    """A cell's latest stored result with its provenance (tool, commit, software, host): each
    field once, EM and F1 with their interval, times in ISO-8601 UTC."""
    store = Store.open_default()
    row = _cell(store, bundle, testset)
    record = json.loads(row["run_record"])
    if as_json:
        click.echo(json.dumps({**row, "run_record": record}, indent=1, sort_keys=True))
        return
    cpu = record.get("cpu_s", "not recorded (stored by an older version)")
    fields = {**{k: row[k] for k in ("bundle", "testset", "n", "missing")},
              "em": _with_interval(row, "em"), "f1": _with_interval(row, "f1"),
              **{k: row[k] for k in ("scorer_version", "runner", "device", "wall_s")},
              "cpu_s": "not counted by its runner" if cpu is None else cpu,
              **{k: row[k] for k in ("key", "bundle_digest", "testset_sha256")},
              "stored_at": row["created_at"]}
    prov = record.get("details", {}).get("provenance")
    if is_recorded(row):
        fields["provenance"] = (f"recorded from {row['source']} (sha256 "
                                f"{row['source_sha256'][:12]}): its numbers only; "
                                f"`evaluate -b {bundle} -t {testset}` runs it")
        fields.pop("cpu_s")
        fields["missing"] = "not recorded"
    elif not prov:
        fields["provenance"] = "not recorded (stored by an older version)"
    for key, value in (prov or {}).items():
        if key == "packages":
            value = ", ".join(f"{k} {v}" for k, v in value.items() if v)
        fields.setdefault(key, value)  # the run's device is the row's: said once
    for key, value in fields.items():
        if key.endswith("_at") and isinstance(value, int | float):
            value = datetime.fromtimestamp(value, UTC).isoformat(timespec="seconds")
        click.echo(f"{key:>16}: {value}")


def _with_interval(row: dict, metric: str) -> str:
    """`71.2345 [70.345, 72.123] (95% interval)`: a stored score, exactly as stored, with its
    interval's bounds (`-` for a bound there is none of: one question, one cluster)."""
    bounds = [row[f"{metric}_{end}"] for end in ("lo", "hi")]
    shown = ", ".join("-" if b is None else f"{b:.3f}" for b in bounds)
    return f"{row[metric]} [{shown}] ({level_text(row['level'])} interval)"


@results_group.command("log")
@click.argument("bundle")
@click.argument("testset")
def results_log(bundle, testset) -> None:
    """Print the captured log of a cell's last run (finished or failed)."""
    store = Store.open_default()
    candidates = [(r["created_at"], r["log_sha256"]) for r in store.results(bundle, testset)]
    candidates += [(f["created_at"], f["log_sha256"]) for f in store.failures()
                   if f["bundle"] == bundle and f["testset"] == testset]
    if not candidates:
        raise UserError(f"no run of {bundle} x {testset} in {store.db_path}")
    _, sha = max(candidates, key=lambda c: c[0])
    data = store.get_object(sha) if sha else b""
    click.echo((data or b"(no output captured)").decode("utf-8", errors="replace"))


@results_group.command("diff")
@click.argument("bundle_a")
@click.argument("bundle_b")
@click.option("--testset", "-t", required=True, help="the set both were scored on")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="write them as CSV here instead of listing them (a new file outside the "
                   "workspace, or one this command or compare --diff wrote)")
def results_diff(bundle_a, bundle_b, testset, out) -> None:
    """The questions of TESTSET where BUNDLE_A and BUNDLE_B answer differently (the stored
    results that `qashift compare` pairs), with the gold answers and both scores."""
    if out is not None:
        check_output_path(out, what="--out", columns=compare.DIFF_COLUMNS)
    store = Store.open_default()
    rows, units, ids = compare.paired_units(store, bundle_a, bundle_b, testset)
    found = compare.differing(store, rows, units, ids, bundle_a, bundle_b, testset)
    unit = scoring.get(rows[bundle_a]["scorer"]).units
    of = f"{len(found)} of {len(ids)} questions" if unit == "questions" else \
        f"{len(found)} questions of the {len(ids)} {unit}"
    if out is not None:
        write_csv_atomic(check_output_path(out, what="--out", columns=compare.DIFF_COLUMNS),
                         compare.DIFF_COLUMNS, found, for_people=True)
        click.echo(f"{of} answered differently: {out}")
        return
    for d in found:
        click.echo(f"{d['id']}  gold: {cut(d['gold'], 40)}")
        for side in ("a", "b"):
            f1 = d[f"f1_{side}"]
            click.echo(f"  {side.upper()} {'-' if f1 == '' else f'{f1:.3f}':>6}  "
                       f"{cut(d[f'answer_{side}'], 60)}")
    click.echo(f"{of} answered differently "
               f"(A = {bundle_a}, B = {bundle_b}; F1 per question)")
