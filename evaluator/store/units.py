"""The stored per-question scores of a cell ("units"): one object per result row, written by
the pipeline and read by every report that rescores or splits a cell."""

from __future__ import annotations

import json
from collections.abc import Sequence

from evaluator.core.errors import RunFailure
from evaluator.core.hashing import canonical_json
from evaluator.scoring.squad_v1 import Scores, Unit
from evaluator.store.store import Store


def units_bytes(scorer_version: str, units: Sequence[Unit]) -> bytes:
    """`{"scorer": version, "units": [[id, em, f1, paragraph, article, missing], ...]}`."""
    rows = [[u.id, u.em, u.f1, u.paragraph, u.article, u.missing] for u in units]
    return canonical_json({"scorer": scorer_version, "units": rows})


def load_units(store: Store, row: dict) -> list[Unit]:
    """The per-question scores of a stored result row, verified by their sha256."""
    data = store.get_object(row["scores_sha256"])
    if data is None:
        raise RunFailure("malformed-predictions", f"stored per-question scores of "
                         f"{row['bundle']} x {row['testset']} are missing or corrupt; "
                         f"re-run with --rerun")
    return [Unit(*u) for u in json.loads(data)["units"]]


def scores_problem(row: dict, data: bytes | None) -> str:
    """Why a result row's EM, F1 and n are not what its per-question scores object gives;
    "" when they are."""
    if data is None:
        return "its per-question scores are missing or corrupt"
    try:
        doc = json.loads(data)
        units = [Unit(*u) for u in doc["units"]]
        scores = Scores(str(doc["scorer"]), tuple(units), len(units), 0, 0)
        em, f1 = scores.em, scores.f1
    except (ValueError, TypeError, KeyError, RecursionError):
        return "its per-question scores cannot be read"
    if len(units) != row["n"]:
        return f"n is {row['n']} but its per-question scores hold {len(units)}"
    if abs(em - row["em"]) > 1e-9 or abs(f1 - row["f1"]) > 1e-9:
        return (f"its EM/F1 {row['em']:.3f}/{row['f1']:.3f} are not the {em:.3f}/{f1:.3f} "
                f"its per-question scores give")
    return ""
