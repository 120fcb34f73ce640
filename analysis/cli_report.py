"""`qashift report`: the static leaderboard site, from the store or from published results.

Only click is imported at module level (``qashift --help`` stays fast); pandas, matplotlib
and jinja2 load inside the command.
"""

from __future__ import annotations

from pathlib import Path

import click


@click.command("report")
@click.option("--source", default="store", show_default=True,
              help="store | squadshifts-published | PATH.csv")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("site"),
              show_default=True, help="Output folder (created; an earlier site there is "
              "replaced).")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Local data mirror for --source squadshifts-published (default: "
              "$QASHIFT_DATA_DIR, else ../shared/data).")
@click.option("--bootstrap", type=int, default=1000, show_default=True,
              help="Bootstrap resamples for fit bands and concurrence intervals.")
@click.option("--seed", type=int, default=0, show_default=True)
def report_command(source, out, data_dir, bootstrap, seed):
    """Write the static site: overview, one leaderboard per test set, one page per
    submission, fits and gaps, and every table as CSV and JSON. Open OUT/index.html."""
    from analysis import site
    from analysis.cli import load_source

    runs, labels = None, {}
    if source == "store":
        records, runs, labels = _store_inputs()
        df = load_source("store", data_dir, store_records=records)
        label = "our results store (official SQuAD v1.1 scoring of our own runs)"
    else:
        df = load_source(source, data_dir)
        label = ("SQuADShifts published results (Miller et al. 2020) joined to the SQuAD "
                 "v1.1 leaderboard" if source == "squadshifts-published" else f"{source}")
    if df.empty and not (runs and runs.failures):
        raise click.ClickException(f"no results in source {source!r}: run `evaluate` first, "
                                   "or use --source squadshifts-published")
    try:
        index = site.build(df, out, source=label, runs=runs, labels=labels, n_boot=bootstrap,
                           seed=seed)
    except site.SiteError as exc:
        raise click.ClickException(str(exc)) from None
    models = sum(1 for _ in (out / "models").glob("*.html"))
    click.echo(f"wrote the site to {out}: {models} submission pages; open {index}")


def _store_inputs():
    """Records (each with its test set's reference), run info and test-set names."""
    from analysis.site import RunInfo
    from evaluator.bundles import spec as bundles
    from evaluator.data import testsets
    from evaluator.store.store import Store

    store = Store.open_default()
    if not store.exists():
        raise click.ClickException(f"no results store at {store.db_path}: run `evaluate` "
                                   "first, or use --source squadshifts-published")
    records = store.records()
    failures = store.failures()
    labels, refs = {}, {}
    for t in sorted({r["testset"] for r in (*records, *failures)}):
        try:
            ts = testsets.get(t)
        except Exception:  # a result outlives its test-set folder: keep the numbers
            continue
        labels[t], refs[t] = ts.name, ts.reference or ""
    for r in records:
        if refs.get(r["testset"]) and r["testset"] != refs[r["testset"]]:
            r.setdefault("reference", refs[r["testset"]])
    names = {}
    for b in sorted({f["bundle"] for f in failures}):
        try:
            names[b] = bundles.get(b).name
        except Exception:  # the folder is gone; the id still names it
            names[b] = b
    runs = RunInfo(runs=records, failures=failures, read_log=store.get_object, names=names)
    return records, runs, labels
