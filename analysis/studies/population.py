"""The own population's trends beside the study's (`qashift population`).

For each shift the SQuADShifts study fits (New-Wiki, Reddit, Amazon, AddOneSent), each metric
and each scale: the fit over the systems trained here (the shift's held-out or test half on
squad-dev-heldout, their original test distribution), the fit over the leaderboard population
(the study's own per-model data, SQuAD test on the x axis) and the slope and R² the study
prints. Both fits come with their slope's 95% t interval (statsmodels OLS).

The result depends only on the inputs' bytes, the settings and this code, so it is kept in
the output folder with the digest of all of them and served from there until one changes.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis import figures
from analysis.sources import cache, facts, paper
from analysis.sources.load import PUBLISHED
from analysis.stats import fits
from evaluator.core.files import write_atomic
from evaluator.stats.intervals import t_interval

# the study's name of a shift -> the set the own population is scored on
SHIFTS = {"new-wiki": "new-wiki-test", "reddit": "reddit-test", "amazon": "amazon-test",
          "addonesent": "addonesent-heldout"}
COLUMNS = ["shift", "metric", "scale", "own_n", "own_slope", "own_slope_lo", "own_slope_hi",
           "own_r2", "leaderboard_n", "leaderboard_slope", "leaderboard_slope_lo",
           "leaderboard_slope_hi", "leaderboard_r2", "published_slope", "published_r2",
           "own_in_published_interval"]
# the sets every system of the population is scored on: the original-set axis and the shifts
SHIFT_SETS = ("squad-dev-heldout", *SHIFTS.values(), "addsent-heldout")
TABLE, KEY = "population-fits.csv", "population-fits.key"
MIN_SYSTEMS = 5  # fewer systems of an approach give no interval of its mean change
CODE = [Path(__file__), Path(fits.__file__), Path(figures.__file__), Path(paper.__file__)]


def _read(table_path: Path) -> pd.DataFrame:
    """A study's results table, with the approach taken from the system's name where a table
    has no column for it."""
    df = pd.read_csv(table_path)
    if "approach" not in df:
        df["approach"] = df["model"].str.split("@").str[0]
    return df


def census(table_path: Path, reference: str = "squad-dev-heldout", above: float = 50.0
           ) -> dict:
    """What the table holds: its systems, those scored in EM and F1 on every one of its
    shift sets (`SHIFT_SETS`, or every set of a table with none of them: "complete"), their
    approaches, the spread of the complete systems' EM on the reference set, each approach's
    best reference F1, the approaches above `above`, and how many complete systems are also
    scored on every other set of the table (e.g. the ablation folders)."""
    df = _read(table_path)
    sets = sorted(df["testset"].unique())
    core = [t for t in sets if t in SHIFT_SETS] or sets
    others = [t for t in sets if t not in core]
    held = df.groupby("model")[["testset", "metric"]].apply(
        lambda g: set(zip(g["testset"], g["metric"], strict=True)))

    def scored_on(names: list[str]) -> set[str]:
        needed = {(t, m) for t in names for m in ("em", "f1")}
        return {m for m, pairs in held.items() if needed <= pairs}

    complete = sorted(scored_on(core))
    ref = df[(df["testset"] == reference) & df["model"].isin(complete)]
    em = ref[ref["metric"] == "em"]["value"]
    best = ref[ref["metric"] == "f1"].groupby("approach")["value"].max().sort_values(
        ascending=False)
    return {"systems": int(df["model"].nunique()), "complete": len(complete),
            "testsets": core, "other_testsets": others,
            "complete_on_others": len(scored_on(core + others)) if others else 0,
            "approaches": int(df[df["model"].isin(complete)]["approach"].nunique()),
            "em_low": float(em.min()) if len(em) else None,
            "em_high": float(em.max()) if len(em) else None,
            "reference": reference, "best_f1": {a: round(float(v), 2) for a, v in best.items()},
            "above": [a for a, v in best.items() if v > above], "threshold": above}


def census_line(facts: dict) -> str:
    """`census` in a few lines of prose."""
    spread = ("" if facts["em_low"] is None else
              f"; {facts['reference']} EM {facts['em_low']:.1f} to {facts['em_high']:.1f} (spread "
              f"{facts['em_high'] - facts['em_low']:.1f})")
    best = ", ".join(f"{a} {v:.1f}" for a, v in facts["best_f1"].items())
    others = facts.get("other_testsets") or []
    also = (f"\n{facts['complete_on_others']} of them also on all {len(others)} other test sets "
            f"({', '.join(others)})" if others else "")
    return (f"{facts['systems']} systems, {facts['complete']} of them scored on all "
            f"{len(facts['testsets'])} test sets, from {facts['approaches']} approach"
            f"{'' if facts['approaches'] == 1 else 'es'}"
            f"{spread}\nbest {facts['reference']} F1 per approach: {best or 'none'}; above "
            f"{facts['threshold']:g}: {len(facts['above'])} ({', '.join(facts['above']) or '-'})"
            + also)


ABLATION_COLUMNS = ["approach", "testset", "parent", "systems", "parent_f1", "rel_f1",
                    "rel_f1_lo", "rel_f1_hi"]


def ablations(table_path: Path, confidence: float = 0.95) -> pd.DataFrame:
    """Sugawara et al.'s reading over the population: for each approach and each ablation in
    the table (a set outside `SHIFT_SETS` whose reference set is in the table), the mean over
    the approach's systems scored on both of the relative change in F1 (percent of the
    reference F1), with a Student-t interval over those systems (none from fewer than
    MIN_SYSTEMS: two or three systems give an interval wider than the change itself). Only
    sets that are ablations (`facts.is_ablation`) are listed, never a new natural shift."""
    f1 = _read(table_path).query("metric == 'f1'")
    value = f1.set_index(["model", "testset"])["value"]
    pairs = f1[["testset", "reference"]].drop_duplicates()
    pairs = pairs[~pairs["testset"].isin(SHIFT_SETS)
                  & pairs["reference"].isin(set(f1["testset"]))
                  & pairs["testset"].map(facts.is_ablation)]
    rows = []
    for ablation, parent in sorted(pairs.itertuples(index=False, name=None)):
        on = f1[f1["testset"] == ablation]
        on = on[[(m, parent) in value.index for m in on["model"]]]
        parent_f1 = [float(value[(m, parent)]) for m in on["model"]]
        on = on.assign(parent_f1=parent_f1,
                       rel=[100.0 * (v - p) / p if p else float("nan")
                            for v, p in zip(on["value"], parent_f1, strict=True)])
        for approach, group in on.groupby("approach"):
            rel = group["rel"].dropna()
            n = len(rel)
            interval = t_interval(list(rel), confidence) if n >= MIN_SYSTEMS else None
            rows.append({"approach": approach, "testset": ablation, "parent": parent,
                         "systems": n, "parent_f1": group["parent_f1"].mean(),
                         "rel_f1": rel.mean() if n else float("nan"),
                         "rel_f1_lo": interval.lo if interval else float("nan"),
                         "rel_f1_hi": interval.hi if interval else float("nan")})
    out = pd.DataFrame(rows, columns=ABLATION_COLUMNS)
    strength = out.groupby("approach")["parent_f1"].mean().sort_values(ascending=False)
    order = {a: i for i, a in enumerate(strength.index)}
    return out.sort_values(["approach", "testset"], key=lambda c: c.map(order)
                           if c.name == "approach" else c).reset_index(drop=True)


def ablations_markdown(table: pd.DataFrame) -> str:
    """`ablations` as the docs print it: an approach per row, an ablation per column, each
    cell the mean relative change in F1 with its interval and the number of systems."""
    sets = sorted(table["testset"].unique())
    short = {t: t.removeprefix(table[table["testset"] == t]["parent"].iloc[0] + "-")
             for t in sets}
    lines = ["| approach (mean reference F1) | " + " | ".join(short[t] for t in sets) + " |",
             "|---" * (len(sets) + 1) + "|"]
    for approach, group in table.groupby("approach", sort=False):
        cells = {r.testset: (f"{r.rel_f1:+.1f}%" + (
            "" if pd.isna(r.rel_f1_lo) else f" [{r.rel_f1_lo:+.1f}, {r.rel_f1_hi:+.1f}]")
            + f" ({r.systems})") for r in group.itertuples()}
        lines.append(f"| {approach} ({group['parent_f1'].mean():.1f}) | "
                     + " | ".join(cells.get(t, "") for t in sets) + " |")
    return "\n".join(lines) + "\n"


def _fit(df: pd.DataFrame, testset: str, metric: str, scale: str) -> fits.Fit | None:
    try:
        return fits.fit_panel(df, testset, metric, scale, n_boot=0)
    except ValueError:  # fewer than 3 systems with both scores
        return None


def comparison(own: pd.DataFrame, published: pd.DataFrame) -> pd.DataFrame:
    """One row per shift x metric x scale: own fit, leaderboard fit, printed values."""
    printed = {(p["testset"], p["metric"], p["scale"]): p
               for p in paper.published_fits().to_dict("records")}
    rows = []
    for shift, own_set in SHIFTS.items():
        for metric in ("em", "f1"):
            for scale in fits.SCALES:
                mine, theirs = _fit(own, own_set, metric, scale), \
                    _fit(published, shift, metric, scale)
                p = printed.get((shift, metric, scale), {})
                row = {"shift": shift, "metric": metric, "scale": scale,
                       "published_slope": p.get("slope"), "published_r2": p.get("r2")}
                for name, f in (("own", mine), ("leaderboard", theirs)):
                    row |= {f"{name}_n": f.n_models if f else 0,
                            f"{name}_slope": f.slope if f else None,
                            f"{name}_slope_lo": f.slope_lo if f else None,
                            f"{name}_slope_hi": f.slope_hi if f else None,
                            f"{name}_r2": f.r2 if f else None}
                slope = p.get("slope")
                row["own_in_published_interval"] = (
                    None if mine is None or slope is None
                    else bool(mine.slope_lo <= slope <= mine.slope_hi))
                rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)


def published_inputs(data_dir: Path) -> list[Path]:
    """The published data the comparison reads from a data mirror: the study's results.json,
    the leaderboard export and the paper's tables."""
    return [*(data_dir / name for name in PUBLISHED), *sorted(paper.DATA.glob("*"))]


def inputs_key(paths: list[Path], settings: dict) -> str:
    """The digest of everything the result depends on: input files, settings, code."""
    return cache.inputs_key(paths, settings, CODE)


def cached(out: Path, key: str) -> pd.DataFrame | None:
    """The table kept in `out` for these inputs, if it is there."""
    return pd.read_csv(out / TABLE) if cache.is_current(out, KEY, key) else None


def write(own: pd.DataFrame, published: pd.DataFrame, out: Path, key: str, n_boot: int,
          seed: int) -> tuple[pd.DataFrame, list[Path]]:
    """The comparison table and one figure per shift and metric (own systems beside the
    leaderboard's, linear and probit); the key last, so a killed run is recomputed."""
    cache.unseal(out, KEY)
    table = comparison(own, published)
    written = []
    for shift, own_set in SHIFTS.items():
        for metric in ("em", "f1"):
            for scale in fits.SCALES:
                try:
                    fig = figures.comparison_row(
                        [("own population", own, own_set), ("leaderboard", published, shift)],
                        None, metric, scale, n_boot, seed)
                except ValueError:
                    continue
                written += figures.save(fig, out / f"population-{shift}-{metric}-{scale}",
                                        ("png",))
    write_atomic(out / TABLE, table.to_csv(index=False).encode())
    written.append(out / TABLE)
    cache.seal(out, KEY, key)
    return table, written


def trends(own: pd.DataFrame, testsets: list[str], out: Path | None, n_boot: int, seed: int
           ) -> tuple[pd.DataFrame, list[Path]]:
    """The population's linear and probit fits of each of `testsets` against its reference
    axis, and (`out` given) one figure per set (F1 and EM, linear and probit panels): how a
    new test set places every frozen system."""
    found = fits.fit_all(own, testsets=testsets, n_boot=n_boot, seed=seed)
    by_key = {(f.testset, f.metric, f.scale): f for f in found}
    written = []
    for testset in testsets if out is not None else ():
        panels = [key for key in ((testset, m, s) for m in ("f1", "em") for s in fits.SCALES)
                  if key in by_key]
        if panels:
            fig = figures.panel_grid(own, panels, by_key)
            written += figures.save(fig, out / f"population-trend-{testset}", ("png",))
    return fits.fit_table(found), written


def markdown(table: pd.DataFrame) -> str:
    """The table as the docs print it: slopes with intervals, R², the printed values."""
    def slope(row, name):
        if pd.isna(row[f"{name}_slope"]):
            return "n/a"
        return (f"{row[f'{name}_slope']:.2f} [{row[f'{name}_slope_lo']:.2f}, "
                f"{row[f'{name}_slope_hi']:.2f}] (R² {row[f'{name}_r2']:.2f}, "
                f"n={int(row[f'{name}_n'])})")

    lines = ["| shift | metric | scale | own population | leaderboard population | "
             "published |", "|---|---|---|---|---|---|"]
    for _, row in table.iterrows():
        printed = ("" if pd.isna(row["published_slope"])
                   else f"{row['published_slope']:.2f} (R² {row['published_r2']:.2f})")
        lines.append(f"| {row['shift']} | {row['metric'].upper()} | {row['scale']} | "
                     f"{slope(row, 'own')} | {slope(row, 'leaderboard')} | {printed} |")
    return "\n".join(lines) + "\n"



def _slope(row, prefix: str) -> str:
    """`0.991 [0.980, 1.003] R² 0.996 (106)`: a fit's slope, interval, R² and systems (the
    columns named `prefix_slope`, ..., or a `fits.fit_table` row's own with no prefix); the
    interval left out where fewer than MIN_SYSTEMS systems make the fit."""
    slope, lo, hi, r2 = (row[f"{prefix}_{k}" if prefix else k]
                         for k in ("slope", "slope_lo", "slope_hi", "r2"))
    n = row[f"{prefix}_n"] if prefix else row["n_models"]
    if slope is None or pd.isna(slope):
        return "-"
    interval = f" [{lo:.3f}, {hi:.3f}]" if n is not None and not pd.isna(n) and \
        int(n) >= MIN_SYSTEMS and not pd.isna(lo) else ""
    return f"{slope:.3f}{interval} R² {r2:.3f} ({int(n)})"


def text(table: pd.DataFrame) -> str:
    """The comparison table in at most 120 columns: per shift, metric and scale, the own
    population's slope, the leaderboard population's and the study's printed one."""
    lines = [f"{'shift':<10} {'metric':<6} {'scale':<6}  {'own population':<34} "
             f"{'leaderboard population':<34} printed"]
    for row in table.to_dict("records"):
        printed = "-" if pd.isna(row["published_slope"]) else \
            f"{row['published_slope']:.2f} R² {row['published_r2']:.2f}"
        lines.append(f"{row['shift']:<10} {row['metric']:<6} {row['scale']:<6}  "
                     f"{_slope(row, 'own'):<34} {_slope(row, 'leaderboard'):<34} {printed}")
    return "\n".join(lines)


def trend_text(fitted: pd.DataFrame) -> str:
    """A new set's fits (`trends`) in at most 120 columns: slope with its interval (from
    MIN_SYSTEMS systems up), intercept and R², per metric and scale."""
    head = "slope, 95% interval, R², systems"
    lines = [f"{'test set':<32} {'metric':<6} {'scale':<6}  {head:<40} intercept"]
    for row in fitted.to_dict("records"):
        lines.append(f"{row['testset'][:32]:<32} {row['metric']:<6} {row['scale']:<6}  "
                     f"{_slope(row, ''):<40} {row['intercept']:+.3f}")
    return "\n".join(lines)


def ablations_text(table: pd.DataFrame) -> str:
    """The ablation table in at most 120 columns: each approach's mean relative change in F1
    per ablation (named without its parent's prefix), its interval where there is one."""
    lines = [f"{'approach':<18} {'ablation (of its parent)':<44} {'systems':>7} "
             f"{'parent F1':>9} {'change':>8}  95% interval"]
    for row in table.to_dict("records"):
        name = row["testset"].removeprefix(f"{row['parent']}-")
        interval = "-" if pd.isna(row["rel_f1_lo"]) else \
            f"[{row['rel_f1_lo']:+.1f}%, {row['rel_f1_hi']:+.1f}%]"
        change = "-" if pd.isna(row["rel_f1"]) else f"{row['rel_f1']:+.1f}%"
        lines.append(f"{row['approach'][:18]:<18} {name[:44]:<44} {row['systems']:>7} "
                     f"{row['parent_f1']:>9.1f} {change:>8}  {interval}")
    return "\n".join(lines)
