"""The stored per-question scores of a cell ("units"): one object per result row, written by
the pipeline and read by every report that rescores or splits a cell."""

from __future__ import annotations

import json
from collections.abc import Sequence

from evaluator.core.errors import RunFailure
from evaluator.core.hashing import canonical_json
from evaluator.scoring.squad_v1 import Unit
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
