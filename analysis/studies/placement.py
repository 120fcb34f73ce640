"""A submission placed on the robustness trend: its F1 on the population's reference set
(the x axis) and on each shifted set, against the linear trend of the frozen population
(`trend.land`: the prediction band, its effective robustness with an interval, its rank),
drawn with the population, the band and the published SQuADShifts models (whose x is their
F1 on the SQuAD test set, as the SQuADShifts paper plots them), and compared, question by
question, with the nearest population system whose per-question scores the store holds.
`qashift trend` and the server's submission page both read it from here."""

from __future__ import annotations

import base64
import io
import math
from pathlib import Path

import pandas as pd

from analysis.sources.load import load_source, store_records_of
from analysis.sources.tidy import frame
from analysis.studies import trend
from evaluator.api.results import Results
from evaluator.core.errors import UserError
from evaluator.stats import paired as paired_stats
from evaluator.store.store import Store
from evaluator.store.units import load_units
from evaluator.training import recorded
from evaluator.training.recorded import BASE, REFERENCE

PUBLISHED_X = "squad-test"  # the published models' original set


def own_frame(bundle: str, results: list[dict]) -> pd.DataFrame:
    """A model's results (as `evaluate --json` prints them) as tidy rows of `bundle`."""
    rows = []
    for result in results:
        for metric in ("em", "f1"):
            score = result[metric]
            rows.append({"model": bundle, "testset": result["testset"], "metric": metric,
                         "value": score["value"], "lo": _number(score["lo"]),
                         "hi": _number(score["hi"]), "n": result["n"],
                         "reference": "" if result["testset"] == REFERENCE else REFERENCE,
                         "source": "store"})
    return frame(rows)


def _number(value) -> float:
    return math.nan if value is None else float(value)


def population(store: Store, table: Path | str | None = None) -> pd.DataFrame:
    """The frozen population's tidy rows (its committed table recorded in the store first)."""
    recorded.record(store, table)
    return trend.population_of(
        load_source("store", store_records=lambda: store_records_of(store)), BASE)


def place(store: Store, bundle: str, results: list[dict], *, level: float = 0.95,
          table: Path | str | None = None, n_boot: int = 200) -> dict:
    """Where a submission's results land: `{"reference", "rows": [one per shifted set],
    "figures": {set: PNG as base64}, "missing": why nothing was placed, or None}`."""
    named = {r["testset"] for r in results}
    if REFERENCE not in named:
        return {"reference": REFERENCE, "rows": [], "figures": {},
                "missing": f"to place it on the trend, submit it on {REFERENCE} too (the "
                           f"population's x axis)"}
    pop = population(store, table)
    pop = pop[pop["model"] != bundle]
    sets = sorted(named & set(pop["testset"]) - {REFERENCE})
    if not sets:
        return {"reference": REFERENCE, "rows": [], "figures": {},
                "missing": f"the population is scored on "
                           f"{', '.join(sorted(set(pop['testset']) - {REFERENCE}))}; submit "
                           f"it on one of them"}
    rows = trend.land(pop, own_frame(bundle, results), sets, "f1", level)
    published = _published()
    figures = {row["testset"]: _png(pop, row, published, n_boot)
               for row in rows.to_dict("records")}
    keys = {r["testset"]: r["key"] for r in results}
    return {"reference": REFERENCE, "level": level,
            "rows": [_plain(r) for r in rows.to_dict("records")], "figures": figures,
            "paired": {row["testset"]: nearest_paired(store, pop, row, keys[row["testset"]],
                                                      level)
                       for row in rows.to_dict("records")},
            "missing": None}


def nearest_paired(store: Store, pop: pd.DataFrame, row: dict, key: str,
                   level: float = 0.95, n_boot: int = 2000) -> dict:
    """The submission against the population system nearest to it on the x axis, on the
    same questions of `row`'s set (a paired bootstrap of the F1 difference): `{"nearest",
    "against", "paired"}`, or, when no close system's per-question scores are in the store
    (the committed table carries none; `qashift population --score SET` makes them),
    `{"nearest", "against": None, "why"}`."""
    testset = row["testset"]
    xs = pop[(pop["testset"] == REFERENCE) & (pop["metric"] == "f1")] \
        .groupby("model")["value"].first()
    ranked = list((xs - row["x"]).abs().sort_values().index)
    own = store.get(key)
    runs = Results(store).cells(testset=testset, recorded=False)
    for model in ranked[:NEAREST]:
        other = runs.get((model, testset))
        if other is None or own is None or other["testset_sha256"] != own["testset_sha256"]:
            continue
        mine = {u.id: u.f1 for u in load_units(store, own)}
        theirs = {u.id: u.f1 for u in load_units(store, other)}
        ids = [i for i in mine if i in theirs]
        diff = paired_stats.paired("f1", [mine[i] for i in ids], [theirs[i] for i in ids],
                                   n_boot=n_boot, level=level)
        return {"nearest": ranked[0], "against": model, "paired": _plain(diff.to_dict())}
    return {"nearest": ranked[0], "against": None,
            "why": f"none of the {NEAREST} population systems nearest to it has per-question "
                   f"scores on {testset} in this store (`qashift population --score "
                   f"{testset}` makes them)"}


NEAREST = 10  # population systems tried, nearest first, for a paired comparison


def _published() -> pd.DataFrame | None:
    """The published SQuADShifts models' F1 (None where the data is not here)."""
    try:
        df = load_source("squadshifts-published")
    except UserError:
        return None
    return df[(df["metric"] == "f1") & (df["kind"] == "model")]


def _png(pop: pd.DataFrame, row: dict, published: pd.DataFrame | None, n_boot: int) -> str:
    import matplotlib.pyplot as plt  # lazy: the figures only

    fig = trend.figure(pop, row, n_boot=n_boot)
    if published is not None:
        target = row["testset"].removesuffix("-test")
        x = published[published["testset"] == PUBLISHED_X].set_index("model")["value"]
        y = published[published["testset"] == target].set_index("model")["value"]
        both = x.to_frame("x").join(y.to_frame("y"), how="inner")
        if not both.empty:
            ax = fig.axes[0]
            ax.scatter(both["x"], both["y"], marker="x", color="dimgray", s=18, zorder=3,
                       label=f"published SQuADShifts models (x: {PUBLISHED_X})")
            ax.legend(loc="upper left", fontsize=7, frameon=False)
            ax.autoscale(True)  # the panel's limits widened to hold them
            ax.relim()
            ax.autoscale_view()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode()


def _plain(row: dict) -> dict:
    """A row with plain numbers, `None` for what has no value."""
    out = {}
    for key, value in row.items():
        value = value.item() if hasattr(value, "item") else value
        out[key] = None if isinstance(value, float) and not math.isfinite(value) else value
    return out
