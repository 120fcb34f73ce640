"""Challenge-set reports from stored results: the relative change of every input ablation
against its parent set (Sugawara et al.), and rEM_k / DICE on the SAM sets (Schlegel et al.)."""

from __future__ import annotations

import json

from evaluator.api.results import Results
from evaluator.data import testsets
from evaluator.data.derive import base_question_id
from evaluator.scoring import challenge as cm
from evaluator.store.store import Store
from evaluator.store.units import load_units


def _latest(store: Store, bundle: str, ts) -> dict | None:
    """The cell's run on the set's bytes as generated now (its per-question scores read)."""
    return Results(store, shas={ts.id: ts.sha256}).cell(bundle, ts.id, recorded=False)


def ablation_table(store, bundle_ids: list[str], only: set[str] | None = None) -> list[dict]:
    """One row per (bundle, derived set with a parent) with stored results for both; only
    sets of kind `derived` (ablations), not subsets that keep their parent's kind.

    `only` restricts both sides to these parent question ids (e.g. a model's held-out
    questions, when it was trained on part of the parent set); the parent score is then
    recomputed on the same questions."""

    def unseeded(_qid: str) -> None:
        return None

    parent_scores: dict[tuple[str, str], tuple[float, float] | None] = {}

    def subset_parent(bundle: str, parent_id: str, prow: dict) -> tuple[float, float] | None:
        """The parent's (EM, F1) on `only`, computed once per bundle and parent."""
        key = (bundle, parent_id)
        if key not in parent_scores:
            kept = [u for u in load_units(store, prow) if u.id in only]
            summary = cm.per_seed_scores(kept, unseeded) if kept else None
            parent_scores[key] = (summary["em"].mean, summary["f1"].mean) if summary else None
        return parent_scores[key]

    rows = []
    derived = [testsets.get(n) for n in testsets.available()]
    derived = [ts for ts in derived if ts.derive is not None and ts.derive.parent is not None
               and ts.kind == "derived"]
    for bundle in bundle_ids:
        for ts in derived:
            parent = testsets.get(ts.derive.parent)
            prow, drow = _latest(store, bundle, parent), _latest(store, bundle, ts)
            if prow is None or drow is None:
                continue
            units = load_units(store, drow)
            parent_em, parent_f1 = prow["em"], prow["f1"]
            if only is not None:
                units = [u for u in units if base_question_id(u.id)[0] in only]
                subset = subset_parent(bundle, parent.id, prow)
                if not units or subset is None:
                    continue
                parent_em, parent_f1 = subset
            summary = cm.per_seed_scores(units, lambda qid: base_question_id(qid)[1])
            rows.append({
                "bundle": bundle, "testset": ts.id, "parent": parent.id,
                "transform": ts.derive.transform, "seeds": len(summary["f1"].per_seed),
                "questions": len(units) // max(1, len(summary["f1"].per_seed)),
                "parent_em": parent_em, "parent_f1": parent_f1,
                "em": summary["em"].mean, "em_sd": summary["em"].sd,
                "f1": summary["f1"].mean, "f1_sd": summary["f1"].sd,
                "rel_em": cm.relative_change(summary["em"].mean, parent_em),
                "rel_f1": cm.relative_change(summary["f1"].mean, parent_f1),
            })
    return rows


def sam_groups() -> dict[str, dict[str, object]]:
    """SAM folders grouped by their generation (same params but part, same seed)."""

    groups: dict[str, dict[str, object]] = {}
    for name in testsets.available():
        ts = testsets.get(name)
        if ts.derive is None or ts.derive.transform != "sam-football":
            continue
        params = {k: v for k, v in ts.derive.params.items() if k != "part"}
        key = json.dumps({"params": params, "seed": list(ts.derive.seeds)}, sort_keys=True)
        groups.setdefault(key, {})[str(ts.derive.params.get("part", "baseline"))] = ts
    return {k: v for k, v in groups.items() if len(v) == 3}


def dice_table(store, bundle_ids: list[str], k: int) -> dict:
    """rEM_k on B/I/C, DICE with breakdowns, echo and consistency per bundle; micro average."""

    out = {"k": k, "bundles": {}, "missing": []}
    for sets in sam_groups().values():
        for bundle in bundle_ids:
            rows = {part: _latest(store, bundle, ts) for part, ts in sets.items()}
            if any(r is None for r in rows.values()):
                out["missing"].append({"bundle": bundle,
                                       "testsets": sorted(ts.id for ts in sets.values())})
                continue
            parts = {part: ts.load().raw for part, ts in sets.items()}
            preds = {part: json.loads(store.get_object(r["predictions_sha256"]) or b"{}")
                     for part, r in rows.items()}
            outcomes = cm.score_triples(parts, preds, k)
            out["bundles"][bundle] = {
                "b": cm.part_accuracy(outcomes, "b"), "i": cm.part_accuracy(outcomes, "i"),
                "c": cm.part_accuracy(outcomes, "c"), "dice": cm.dice(outcomes),
                "by_category": cm.breakdown(outcomes, "category"),
                "by_count": cm.breakdown(outcomes, "count"),
                "echo": cm.baseline_echo(outcomes), "consistency": cm.consistency(outcomes),
            }
    cells = [v["dice"] for v in out["bundles"].values()]
    out["micro_average"] = cm.micro_average(cells) if cells else None
    names = list(out["bundles"])
    out["fisher"] = [{"a": a, "b": b, "p": cm.fisher_test(out["bundles"][a]["dice"],
                                                          out["bundles"][b]["dice"])}
                     for x, a in enumerate(names) for b in names[x + 1:]]
    return out


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render_markdown(ablations: list[dict], sam: dict) -> str:
    lines = ["| bundle | test set | questions | seeds | parent EM / F1 | EM (sd) | F1 (sd) "
             "| rel. EM % | rel. F1 % |", "|---|---|---|---|---|---|---|---|---|"]
    for r in ablations:
        lines.append(
            f"| {r['bundle']} | {r['testset']} | {r['questions']:,} | {r['seeds']} | "
            f"{r['parent_em']:.1f} / "
            f"{r['parent_f1']:.1f} | {r['em']:.1f}"
            + (f" ({r['em_sd']:.2f})" if r["em_sd"] is not None else "")
            + f" | {r['f1']:.1f}" + (f" ({r['f1_sd']:.2f})" if r["f1_sd"] is not None else "")
            + f" | {_fmt(r['rel_em'])} | {_fmt(r['rel_f1'])} |")
    lines += ["", f"rEM_{sam['k']} on the aligned SAM parts, DICE (95% normal-approximation "
              "interval, successes/n):", "",
              "| bundle | rEM B | rEM I | rEM C | DICE | baseline-answer echo | consistency |",
              "|---|---|---|---|---|---|---|"]
    for bundle, v in sam["bundles"].items():
        lines.append(f"| {bundle} | {v['b'].percent()} | {v['i'].percent()} | "
                     f"{v['c'].percent()} | {v['dice'].percent()} | {v['echo'].percent()} | "
                     f"{v['consistency'].percent()} |")
    if sam.get("micro_average") is not None:
        lines.append(f"| micro average | | | | {sam['micro_average'].percent()} | | |")
    for bundle, v in sam["bundles"].items():
        lines += ["", f"DICE of {bundle} by SAM category and by number of modifications:", "",
                  "| breakdown | DICE |", "|---|---|"]
        lines += [f"| {key} | {p.percent()} |" for key, p in v["by_category"].items()]
        lines += [f"| {key} modification(s) | {p.percent()} |"
                  for key, p in v["by_count"].items()]
    for f in sam.get("fisher", []):
        lines.append(f"\nFisher's exact test, DICE of {f['a']} vs {f['b']}: p = {f['p']:.3g}")
    return "\n".join(lines) + "\n"
