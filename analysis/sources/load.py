"""Where the analysis gets its rows: the results store (joined with the registries' names,
metadata and references), the SQuADShifts published results, or any CSV in the long form.
Errors are UserErrors: the command prints them in one line."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from pathlib import Path

import pandas as pd

from analysis.sources import tidy
from analysis.sources.records import RunInfo, SystemScores
from evaluator.api.results import Results
from evaluator.bundles import spec as bundles
from evaluator.core import settings
from evaluator.core.errors import UserError
from evaluator.data import testsets
from evaluator.store.queries import is_recorded, is_sample
from evaluator.store.store import Store
from evaluator.store.units import load_units
from evaluator.training import systems

SOURCES = ("store", "squadshifts-published")


PUBLISHED = ("squadshifts/results.json", "squad-leaderboard/out-v1.1.json")  # in a mirror


def published_data_dir(data_dir: Path | str | None = None) -> Path:
    """The data mirror holding the study's published results (`PUBLISHED`): `data_dir` when
    given, else the first of the mirrors (--data-dir, $QASHIFT_DATA_DIR) that holds them,
    else ../shared/data from the current directory; one line naming what is missing."""
    candidates = [Path(data_dir)] if data_dir else [
        *settings.mirror_dirs(), Path.cwd().parent / "shared" / "data"]
    for folder in candidates:
        if all((folder / name).is_file() for name in PUBLISHED):
            return folder
    where = candidates[0]
    missing = [str(where / name) for name in PUBLISHED if not (where / name).is_file()]
    also = "" if data_dir else " (nor in any other data mirror: pass --data-dir or set " \
                               "QASHIFT_DATA_DIR)"
    raise UserError(f"missing published data: {', '.join(missing)}{also}")


def load_source(source: str, data_dir: Path | str | None = None,
                store_records: Iterable[dict] | Callable[[], Iterable[dict]] | None = None,
                reference: str = "squad-test", metrics: Iterable[str] = ()) -> pd.DataFrame:
    """Tidy frame for a source: 'store', 'squadshifts-published' or a path to a CSV file.

    For 'store', `store_records` (records, or a callable returning them) is used when given;
    otherwise the default results store is read. `reference` and `metrics` apply to a CSV
    table: its original-set test set and the metrics that must have data.
    """
    if source == "squadshifts-published":
        return tidy.from_squadshifts_published(published_data_dir(data_dir))
    if source == "store":
        if store_records is None:
            store_records = lambda: store_records_of(Store.open_default())  # noqa: E731
        records = store_records() if callable(store_records) else store_records
        return tidy.from_records(records)
    path = Path(source)
    if path.suffix.lower() == ".csv" and path.is_file():
        return tidy.from_csv(path, reference, metrics)
    raise UserError(f"--source {source!r} is neither one of {', '.join(SOURCES)} nor an "
                    f"existing .csv file")


def load_tables(paths: Iterable[Path], reference: str) -> pd.DataFrame:
    """One tidy frame from several study tables (`qashift study run --table`), e.g. the
    population's and the extra-data study's: a system in two tables is kept once, and two
    tables that give it different scores are an error (they were made from different runs)."""
    frames = [load_source(str(path), reference=reference) for path in paths]
    df = pd.concat(frames, ignore_index=True)
    key = ["model", "testset", "metric"]
    values = df.groupby(key, sort=False)["value"].agg(["min", "max"])
    clash = values[values["min"] != values["max"]]
    if not clash.empty:
        (model, testset, metric), row = next(iter(clash.iterrows()))
        raise UserError(f"{model} on {testset}: the tables disagree on {metric} "
                        f"({row['min']:g} vs {row['max']:g}); give tables of the same runs")
    return df.drop_duplicates(key).reset_index(drop=True)


def store_records_of(store: Store) -> list[dict]:
    """Result rows joined with their bundles' names and metadata and their test sets'
    reference: what the analysis reads from a store."""
    references: dict[str, str | None] = {}
    for name, folder in testsets.available().items():
        try:
            references[name] = testsets.from_folder(folder).reference
        except Exception:  # an invalid folder must not hide the other results
            references[name] = None
    bundle_folders = bundles.available()  # discovered once, each bundle read once
    latest = Results(store, bundle_folders=bundle_folders).rows()
    others = {row["bundle"] for row in latest if row["bundle"] not in bundle_folders}
    trained = systems.system_metadata(store, bundle_folders, others) if others else {}
    extras: dict[str, dict] = {}
    out = []
    for row in latest:
        if row["bundle"] in trained:  # a trained system: named by its id, its approach's family
            meta = trained[row["bundle"]]
            extras.setdefault(row["bundle"], {
                "name": row["bundle"], "family": meta["family"], "reference_scores": {},
                "metadata": {k: v for k, v in meta.items() if k != "family"}})
        if row["bundle"] not in extras:
            try:
                bundle = bundles.from_folder(bundle_folders[row["bundle"]])
                extras[row["bundle"]] = {
                    "name": bundle.name, "family": bundle.metadata.get("family"),
                    "reference_scores": bundle.reference_scores,
                    "metadata": bundle.metadata}
            except Exception:  # a result outlives its bundle folder: keep the numbers
                extras[row["bundle"]] = {"name": row["bundle"], "family": None,
                                         "reference_scores": {}, "metadata": {}}
        out.append({**row, **extras[row["bundle"]], "kind": "model",
                    "reference": references.get(row["testset"])})
    return out


def per_question_scores(store: Store) -> list[SystemScores]:
    """Every system's per-question F1 (percent) on every test set, from
    `api.Results`: what the stratified analyses (Appendix C) read."""
    by_system: dict[str, dict[str, dict[str, float]]] = {}
    runs = [r for r in Results(store).rows() if not is_recorded(r)]  # no scores kept
    for row in sorted(runs, key=lambda r: (r["bundle"], r["testset"])):
        by_system.setdefault(row["bundle"], {})[row["testset"]] = {
            u.id: 100.0 * u.f1 for u in load_units(store, row)}
    return [SystemScores(b, scores) for b, scores in by_system.items()]


def store_inputs(exclude: Collection[str] = ()) -> tuple[list[dict], RunInfo, dict[str, str]]:
    """Records (each with its test set's reference), run info and test-set names, less those
    of the test sets in `exclude` (a hosted benchmark's sets whose results are not shown)."""
    store = Store.open_default()
    if not store.exists():
        raise UserError(f"no results store at {store.db_path}: run `evaluate` first, or use "
                        f"--source squadshifts-published")
    records = [r for r in store_records_of(store) if r["testset"] not in exclude]
    failures = [f for f in store.failures()  # a sample is no cell's
                if not is_sample(f) and f["testset"] not in exclude]
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
