"""Approach-level concurrence (Liu, Lee, Jia & Liang): do two benchmarks rank *modeling
approaches* alike, each approach trained on a benchmark's training split and tested on its test
split?

A score matrix is approaches x benchmarks (EM, percent) with each approach's group
(non-pretrained or pre-trained) and the matrix's mode: "approach-level" (the paper's
question) or "system-level" (frozen systems tested across sets,
`analysis.stats.concurrence`). The two answer different questions, so a report names its
mode and combining matrices of both modes is refused.

Concurrence of benchmarks b1, b2 over a set of approaches is Pearson r and Kendall tau of
their score vectors: tau-b by default (scipy's; the paper does not say which), tau-a and tau-c
on request; undefined (None) when either vector is constant. The bootstrap interval over
approaches is an addition to the paper, labelled as such wherever it is printed.

The paper's own tables (Liu et al.'s Tables 1 and 5-19, every approach on every benchmark)
are data in `analysis/data/liu-et-al/`; `published()` reads them and `render()` writes them
back in the paper's layout.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from analysis import figures
from analysis.sources import cache
from analysis.stats.concurrence import _pearson, _tau
from evaluator.core.files import write_atomic
from evaluator.core.folders import read_yaml

DATA = Path(__file__).parents[1] / "data" / "liu-et-al"
MODES = ("approach-level", "system-level")
GROUPS = ("non-pretrained", "pre-trained")
SQUAD = "SQuAD 1.1 — All"  # Table 18's full-data column: the paper's reference
BOOTSTRAP_LABEL = "bootstrap over approaches (an addition; the paper reports no interval)"


class ModeError(ValueError):
    """Scores of different modes (approach-level, system-level) in one computation."""


@dataclass(frozen=True)
class ScoreMatrix:
    scores: pd.DataFrame  # approaches x benchmarks, NaN where there is no score
    groups: pd.Series  # approach -> group
    mode: str

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")

    def subset(self, which: str | Callable[[pd.DataFrame], pd.Series]) -> list[str]:
        """Approach names: 'all', a group name, or a predicate over the score frame (e.g.
        `lambda s: s[SQUAD] > 76.24`)."""
        if callable(which):
            return list(self.scores.index[which(self.scores)])
        if which == "all":
            return list(self.scores.index)
        if which in GROUPS:
            return list(self.groups.index[self.groups == which])
        raise ValueError(f"subset must be 'all', {' or '.join(GROUPS)}, or a predicate")


def combine(*matrices: ScoreMatrix) -> ScoreMatrix:
    """One matrix with every benchmark of the given ones (same approaches, same mode)."""
    modes = {m.mode for m in matrices}
    if len(modes) > 1:
        raise ModeError(f"cannot mix {' and '.join(sorted(modes))} scores in one "
                        f"concurrence: they answer different questions")
    scores = pd.concat([m.scores for m in matrices], axis=1)
    return ScoreMatrix(scores, matrices[0].groups, matrices[0].mode)


def require_benchmarks(m: ScoreMatrix, names: Sequence[str]) -> None:
    """ValueError naming the first of `names` that is no benchmark of `m`, and the known ones."""
    for name in names:
        if name not in m.scores.columns:
            raise ValueError(f"unknown benchmark {name!r}; known: "
                             f"{', '.join(m.scores.columns)}")


def subsets(m: ScoreMatrix, texts: Sequence[str]) -> list[tuple[str, object]]:
    """The subsets of approaches named by `texts`: 'all', a group, or 'BENCHMARK>VALUE', each
    as (label, what `ScoreMatrix.subset` takes); none named: all, then each group. A bad one
    is a ValueError that starts with the text as given."""
    return [_subset(m, text) for text in texts] or [("all", "all"), *((g, g) for g in GROUPS)]


def _subset(m: ScoreMatrix, text: str) -> tuple[str, object]:
    if ">" in text:
        column, _, value = text.rpartition(">")
        column = column.strip()
        if column not in m.scores.columns:
            raise ValueError(f"{text!r}: unknown benchmark {column!r}")
        try:
            bound = float(value)
        except ValueError:
            raise ValueError(f"{text!r}: {value!r} is not a number") from None
        return text, lambda s: s[column] > bound
    if text not in ("all", *GROUPS):
        raise ValueError(f"{text!r}: use all, non-pretrained, pre-trained or "
                         f"'BENCHMARK>VALUE'")
    return text, text


# ----------------------------------------------------------------------- the paper's tables

def tables() -> list[dict]:
    """The index of the paper's tables: number, file and caption."""
    with open(DATA / "tables.csv", newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def read_table(row: dict) -> list[list[str]]:
    """A table's cells as printed (strings; "-" for no result), header row first."""
    with open(DATA / row["file"], newline="", encoding="utf-8") as handle:
        return list(csv.reader(handle))


def published() -> ScoreMatrix:
    """Every approach on every benchmark column of Tables 1 and 5-19 (46 columns: 44
    benchmarks and Table 1's two SQuAD columns). Rows 1-10 are non-pretrained."""
    frames = []
    for row in tables():
        header, *rows = read_table(row)
        frame = pd.DataFrame([[_number(c) for c in r[1:]] for r in rows],
                             index=[r[0] for r in rows], columns=header[1:])
        frames.append(frame)
    scores = pd.concat(frames, axis=1)
    scores.index.name = "approach"
    groups = pd.Series([GROUPS[0]] * 10 + [GROUPS[1]] * (len(scores) - 10),
                       index=scores.index, name="group")
    return ScoreMatrix(scores, groups, "approach-level")


def _number(cell: str) -> float:
    return math.nan if cell.strip() == "-" else float(cell)


def render() -> str:
    """The tables in the paper's appendix layout (caption, header, rows), as printed."""
    parts = []
    for row in tables():
        header, *rows = read_table(row)
        lines = [f"**Table {row['table']}: {row['caption']}**", "",
                 "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


def read_scores(path: Path) -> ScoreMatrix:
    """A score table in the paper's wide layout: `approach`, optional `group`
    (non-pretrained | pre-trained) and `mode` (one of MODES, the same on every row), then one
    column per benchmark with a number per approach; a bad table is one line naming file,
    line and column."""
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    if not rows or "approach" not in rows[0]:
        raise ValueError(f"{path}: needs a header with an 'approach' column and rows")
    meta = [c for c in ("approach", "group", "mode") if c in rows[0]]
    benchmarks = [c for c in rows[0] if c not in meta]
    if len(benchmarks) < 2:
        raise ValueError(f"{path}: concurrence compares benchmarks, and this table has "
                         f"{len(benchmarks)} benchmark column{'s' * (len(benchmarks) != 1)} "
                         f"besides {', '.join(meta)}: give at least two")
    modes = {r.get("mode") or "approach-level" for r in rows}
    if len(modes) > 1:
        raise ModeError(f"{path}: mode column mixes {' and '.join(sorted(modes))} scores")
    [mode] = modes
    if mode not in MODES:
        raise ValueError(f"{path}: mode {mode!r} is not one of {', '.join(MODES)}")
    scores, groups, seen = {}, {}, set()
    for line, r in enumerate(rows, 2):
        name = (r["approach"] or "").strip()
        if not name or name in seen:
            raise ValueError(f"{path}: line {line}, column approach: "
                             f"{'empty' if not name else f'{name!r} twice'}")
        seen.add(name)
        group = (r.get("group") or GROUPS[0]).strip()
        if group not in GROUPS:
            raise ValueError(f"{path}: line {line}, column group: {group!r} is not one of "
                             f"{', '.join(GROUPS)}")
        groups[name] = group
        for b in benchmarks:
            cell = (r[b] or "").strip()
            if not cell:
                raise ValueError(f"{path}: line {line}, column {b}: no score for approach "
                                 f"{name!r} (every approach needs every benchmark)")
            try:
                value = float(cell)
            except ValueError:
                raise ValueError(f"{path}: line {line}, column {b}: {cell!r} is not a "
                                 f"number") from None
            if not 0 <= value <= 100:
                raise ValueError(f"{path}: line {line}, column {b}: {value:g} is outside "
                                 f"[0, 100] (scores are percentages)")
            scores.setdefault(name, {})[b] = value
    frame = pd.DataFrame.from_dict(scores, orient="index")[benchmarks]
    frame.index.name = "approach"
    return ScoreMatrix(frame, pd.Series(groups, name="group"), mode)


def paper_columns(plan: Path) -> dict[str, str]:
    """{benchmark: the column of the paper's tables of the same kind} from an approach-level
    study plan (its benchmarks' `paper` entries)."""
    return {e["name"]: e["paper"] for e in read_yaml(plan).get("benchmarks") or []
            if isinstance(e, dict) and e.get("paper")}


# ---------------------------------------------------------------------------- concurrence

def kendall(x: Sequence[float], y: Sequence[float], variant: str = "b") -> float | None:
    """Kendall tau-a, -b or -c; None when either vector is constant (undefined)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    if variant == "a":
        sx = np.sign(x[:, None] - x[None, :])
        sy = np.sign(y[:, None] - y[None, :])
        n = len(x)
        return float((sx * sy).sum() / 2 / (n * (n - 1) / 2))
    if variant in ("b", "c"):
        return float(stats.kendalltau(x, y, variant=variant).statistic)
    raise ValueError(f"Kendall variant must be a, b or c, got {variant!r}")


def pearson(x: Sequence[float], y: Sequence[float]) -> float | None:
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    return float(stats.pearsonr(x, y).statistic)


def concur(m: ScoreMatrix, b1: str, b2: str, which="all", variant: str = "b",
           n_boot: int = 0, seed: int = 0, level: float = 0.95) -> dict:
    """r and tau of two benchmarks over a subset of approaches (those scored on both),
    with a seeded percentile bootstrap over approaches when n_boot > 0."""
    names = [a for a in m.subset(which) if not (np.isnan(m.scores.at[a, b1])
                                                 or np.isnan(m.scores.at[a, b2]))]
    x, y = m.scores.loc[names, b1].to_numpy(), m.scores.loc[names, b2].to_numpy()
    out = {"mode": m.mode, "b1": b1, "b2": b2, "n": len(names), "r": pearson(x, y),
           "tau": kendall(x, y, variant), "variant": f"tau-{variant}"}
    if n_boot > 0 and len(names) >= 2:
        rng = np.random.default_rng(seed)
        idx = rng.integers(0, len(names), size=(n_boot, len(names)))
        q = 100 * np.array([(1 - level) / 2, (1 + level) / 2])
        with np.errstate(invalid="ignore", divide="ignore"):
            rs, taus = _pearson(x[idx], y[idx]), _tau(x[idx], y[idx], variant)
        for key, values in (("r", rs), ("tau", taus)):
            defined = values[~np.isnan(values)]
            lo, hi = np.percentile(defined, q) if len(defined) else (np.nan, np.nan)
            out[f"{key}_lo"], out[f"{key}_hi"] = float(lo), float(hi)
        out["interval"] = f"{BOOTSTRAP_LABEL}, tau-{variant}, {n_boot} resamples, seed {seed}"
    return out


def versus_reference(m: ScoreMatrix, reference: str = SQUAD, which=("all", *GROUPS),
                     variant: str = "b") -> pd.DataFrame:
    """Every other benchmark against the reference column, r and tau per subset."""
    rows = []
    for b in m.scores.columns:
        if b == reference:
            continue
        row = {"benchmark": b}
        for w in which:
            c = concur(m, reference, b, w, variant)
            row[f"r ({w})"], row[f"tau ({w})"] = c["r"], c["tau"]
        rows.append(row)
    return pd.DataFrame(rows)


def side_by_side(m: ScoreMatrix, paper_of: dict[str, str], reference: str,
                 variant: str = "b") -> pd.DataFrame:
    """Each benchmark of `m` that names a column of the paper's tables of the same kind
    (`paper_of`), its concurrence with `reference` beside the paper's with SQuAD: r and tau
    over all approaches, tau per group."""
    pub = published()
    unknown = sorted(set(paper_of.values()) - set(pub.scores.columns))
    if unknown:
        raise ValueError(f"unknown column of Liu et al.'s tables: {unknown[0]!r}")
    rows = []
    for ours, theirs in paper_of.items():
        if ours == reference or ours not in m.scores.columns:
            continue
        row = {"benchmark": ours, "paper's benchmark": theirs}
        for w in ("all", *GROUPS):
            here, there = concur(m, reference, ours, w, variant), concur(pub, SQUAD, theirs, w,
                                                                         variant)
            if w == "all":
                row["r here"], row["r paper"] = here["r"], there["r"]
            row[f"tau here ({w})"], row[f"tau paper ({w})"] = here["tau"], there["tau"]
            row[f"n here ({w})"] = here["n"]
        rows.append(row)
    return pd.DataFrame(rows)


def all_pairs(m: ScoreMatrix, columns: Sequence[str], rows: Sequence[str] | None = None,
              statistic: str = "tau", which="all", variant: str = "b") -> pd.DataFrame:
    """rows x columns matrix of r or tau (the paper's views: vs SQuAD, vs each human set)."""
    rows = list(rows or columns)
    return pd.DataFrame([[concur(m, r, c, which, variant)[statistic] for c in columns]
                         for r in rows], index=rows, columns=list(columns))


MIN_APPROACHES = 3  # two points always lie on a line: their tau is +-1 whatever they are


def concurs(value: float | None, threshold: float = 0.8, n: int = MIN_APPROACHES
            ) -> bool | None:
    """The paper's reading: concurrence when tau exceeds the threshold (0.8 in [B]);
    undecided (None) where tau is undefined or rests on fewer than three approaches."""
    return None if value is None or n < MIN_APPROACHES else value > threshold


def knee(m: ScoreMatrix, b1: str, b2: str, top: int = 2) -> dict:
    """Least-squares lines of b2 on b1, overall and per group, and the approaches furthest
    from the overall line (the paper's "knee" reading of DROP, ReCoRD, CNN)."""
    s = m.scores[[b1, b2]].dropna()
    lines = {}
    for name, part in [("all", s), *((g, s[m.groups.reindex(s.index) == g]) for g in GROUPS)]:
        if len(part) >= 2:
            slope, intercept = np.polyfit(part[b1], part[b2], 1)
            lines[name] = {"slope": float(slope), "intercept": float(intercept),
                           "n": len(part)}
    overall = lines["all"]
    residual = s[b2] - (overall["intercept"] + overall["slope"] * s[b1])
    order = residual.abs().sort_values(ascending=False).index[:top]
    return {"lines": lines, "largest_residuals": [(a, float(residual[a])) for a in order]}


# ------------------------------------------------------------------------------- report

REPORT_KEY = "approach-concurrence.key"
REPORT_CODE = [Path(__file__), Path(figures.__file__), Path(cache.__file__)]


def versus_table(m: ScoreMatrix, reference: str, chosen: Sequence[tuple[str, object]],
                 variant: str = "b", n_boot: int = 0, seed: int = 0,
                 threshold: float = 0.8) -> pd.DataFrame:
    """Every other benchmark against `reference`, one row per benchmark and subset
    (`chosen`: (label, what `ScoreMatrix.subset` takes)): n, r and tau (with the bootstrap
    interval when n_boot > 0) and whether they concur (tau above the threshold)."""
    rows = []
    for b in m.scores.columns:
        if b == reference:
            continue
        for label, which in chosen:
            c = concur(m, reference, b, which, variant, n_boot, seed)
            rows.append({"benchmark": b, "subset": label, "n": c["n"], "r": c["r"],
                         "r_lo": c.get("r_lo"), "r_hi": c.get("r_hi"), "tau": c["tau"],
                         "tau_lo": c.get("tau_lo"), "tau_hi": c.get("tau_hi"),
                         "concurs": concurs(c["tau"], threshold, c["n"])})
    return pd.DataFrame(rows)


def versus_display(versus: pd.DataFrame) -> pd.DataFrame:
    """`versus_table` as the command prints it: a row per benchmark, per subset its n, r and
    tau to two decimals (with the bootstrap interval where there is one) and whether they
    concur (yes, no, n/a)."""
    rows = []
    for b, part in versus.groupby("benchmark", sort=False):
        row = {"benchmark": b}
        for c in part.itertuples(index=False):
            row[f"n ({c.subset})"] = c.n
            row[f"r ({c.subset})"] = _shown(c.r, _known(c.r_lo), _known(c.r_hi))
            row[f"tau ({c.subset})"] = _shown(c.tau, _known(c.tau_lo), _known(c.tau_hi))
            row[f"concurs ({c.subset})"] = {True: "yes", False: "no", None: "n/a"}[c.concurs]
        rows.append(row)
    return pd.DataFrame(rows)


def _known(value):
    """A bootstrap bound, or None where there is none (no bootstrap, or a NaN bound)."""
    return None if value is None or value != value else value


def _shown(value, lo=None, hi=None) -> str:
    if value is None or value != value:  # undefined (None, or NaN in a frame)
        return "n/a"
    return f"{value:.2f}" + (f" [{lo:.2f}, {hi:.2f}]" if lo is not None else "")


def knee_table(m: ScoreMatrix, reference: str, top: int = 2) -> tuple[pd.DataFrame, dict]:
    """`knee` of every benchmark on the reference: one row per benchmark and line (overall,
    per group) with the largest residuals of the overall line, and the knees themselves."""
    knees, rows = {}, []
    for b in m.scores.columns:
        if b == reference or m.scores[[reference, b]].dropna().shape[0] < 2:
            continue
        knees[b] = found = knee(m, reference, b, top)
        named = "; ".join(f"{a} {r:+.2f}" for a, r in found["largest_residuals"])
        for line, fit in found["lines"].items():
            rows.append({"benchmark": b, "line": line, **fit, "largest_residuals": named})
    return pd.DataFrame(rows), knees


def site_page(m: ScoreMatrix, reference: str | None, n_boot: int, seed: int,
              variant: str = "b", threshold: float = 0.8) -> dict:
    """What the site's concurrence page shows: every benchmark against the reference over all
    approaches and per group (tau-b and r with bootstrap intervals, whether they concur),
    the score matrix itself, and the tau figure's data."""
    reference = reference or m.scores.columns[0]
    require_benchmarks(m, (reference,))
    chosen = [("all", "all"), *((g, g) for g in sorted(set(m.groups)))]
    versus = versus_table(m, reference, chosen, variant, n_boot, seed, threshold)
    dots = versus.pivot(index="benchmark", columns="subset", values="tau").reindex(
        [b for b in m.scores.columns if b != reference]).reset_index()
    return {"mode": m.mode, "reference": reference, "variant": variant,
            "threshold": threshold, "n_boot": n_boot, "seed": seed,
            "subsets": [label for label, _ in chosen], "versus": versus,
            "scores": m.scores, "groups": m.groups,
            "tau_figure": figures.tau_dots(dots, {label: f"tau ({label})"
                                                  for label, _ in chosen}, threshold,
                                           f"{m.mode} concurrence with {reference}"),
            "matrix_figure": figures.score_heatmap(m.scores, "Approaches x benchmarks")}


def report_key(scores_path: Path | None, plan: Path | None, settings: dict) -> str:
    """The digest of what a report depends on: the score table (else the paper's tables), the
    study plan, the settings and this code (`analysis.sources.cache`)."""
    inputs = [scores_path] if scores_path else sorted(DATA.glob("*"))
    return cache.inputs_key([*inputs, *([plan] if plan else [])], settings, REPORT_CODE)


def report_current(out: Path, key: str) -> bool:
    """Whether `out` holds the report of exactly these inputs."""
    return cache.is_current(out, REPORT_KEY, key)


def write_report(m: ScoreMatrix, out: Path, key: str, reference: str,
                 chosen: Sequence[tuple[str, object]], variant: str = "b",
                 threshold: float = 0.8, n_boot: int = 0, seed: int = 0,
                 paper_of: dict[str, str] | None = None) -> list[Path]:
    """The concurrence report of a score matrix as files: the vs-reference table, the knee
    lines with a panel per benchmark, a tau figure, and beside the paper's values when
    `paper_of` names the paper's column of each benchmark; the key last (analysis.sources.cache)."""
    cache.unseal(out, REPORT_KEY)
    written = []

    def table(frame: pd.DataFrame, name: str) -> None:
        write_atomic(out / name, frame.to_csv(index=False, float_format="%.4f").encode())
        written.append(out / name)

    versus = versus_table(m, reference, chosen, variant, n_boot, seed, threshold)
    versus.insert(0, "mode", m.mode)
    table(versus, "versus-reference.csv")
    lines, knees = knee_table(m, reference)
    table(lines, "knee.csv")
    written += figures.save(figures.knee_grid(m.scores, m.groups, reference, list(knees),
                                              knees), out / "knee", ("png",))
    if paper_of:
        dots = side_by_side(m, paper_of, reference, variant)
        table(dots, "side-by-side.csv")
        series = {"tau here (all)": "here (all approaches)",
                  "tau paper (all)": "Liu et al. (20 approaches)"}
    else:  # a column of taus per subset, the benchmarks in the matrix's order
        dots = versus.pivot(index="benchmark", columns="subset", values="tau").reindex(
            [b for b in m.scores.columns if b != reference]).reset_index()
        series = {label: f"tau ({label})" for label, _ in chosen}
    written += figures.save(figures.tau_dots(dots, series, threshold,
                                             f"{m.mode} concurrence with {reference}"),
                            out / "tau", ("png",))
    cache.seal(out, REPORT_KEY, key)
    return written
