"""The result of a cell: the one rule every view of the store uses.

A cell is (bundle id, test-set id). Its result is its newest *full* run (a `--limit` or
`check` sample is never taken for it, unless samples are asked for, and then each is
labelled by its n) made from the bundle's current digest and the test set's current sha256;
a recorded result (a committed table's cell, `Store.record`) stands only where no such run
exists.
"Current" is what the caller's registry says today (`digest_today`, `sha_today`); where it
names nothing (a folder gone or broken, a set not worth deriving for a listing), the digest
of the id's newest run stands. Runs of any other digest are superseded: they describe
something else.

`latest` is the one function that picks the newest row; `api.Results` is the one place that
hands it today's digests and bytes, and what every view reads results through.
Failures follow the same rule: a failed sample is never its cell's state (`latest_failures`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable

Cell = tuple[str, str]
Today = Callable[[str], str | None]


def _none(_: str) -> None:
    return None


def _options(row: dict) -> dict:
    """A result's or a failure's job options (a failure recorded before failures kept them,
    or a train cell's: none, a full run)."""
    return json.loads(row.get("options") or "{}")


def is_sample(row: dict) -> bool:
    """A run, finished or failed, on a seeded sample of the test set (`--limit`, `qashift
    check`)."""
    return "limit" in _options(row)


def is_recorded(row: dict) -> bool:
    """A recorded result (a committed table's numbers, `Store.results(recorded=True)`): it is
    its cell's result only while the cell has no run of today's digest and bytes."""
    return row.get("source") is not None and row.get("predictions_sha256") is None


def sample_size(row: dict) -> int | None:
    """The questions a sample's run was asked for (its `--limit`); None for a full run."""
    limit = _options(row).get("limit")
    return None if limit is None else int(limit)


def latest(rows: Iterable[dict], *, digest_today: Today = _none, sha_today: Today = _none,
           samples: bool = False) -> dict[Cell, dict]:
    """{(bundle, testset): its result} over `rows`: the newest full run of the bundle's
    digest today and the test set's bytes today (`samples`: sampled runs count too)."""
    kept = sorted((r for r in rows if samples or not is_sample(r)),
                  key=lambda r: (not is_recorded(r), r["created_at"]))  # runs win
    digests = {r["bundle"]: r["bundle_digest"] for r in kept}  # the newest of each id
    shas = {r["testset"]: r["testset_sha256"] for r in kept}
    for bundle_id in sorted(digests):
        digests[bundle_id] = digest_today(bundle_id) or digests[bundle_id]
    for testset_id in sorted(shas):
        shas[testset_id] = sha_today(testset_id) or shas[testset_id]
    out: dict[Cell, dict] = {}
    for row in kept:  # oldest first: a newer row of the same cell replaces an older one
        if row["bundle_digest"] == digests[row["bundle"]] and \
                row["testset_sha256"] == shas[row["testset"]]:
            out[(row["bundle"], row["testset"])] = row
    return out


def latest_failures(rows: Iterable[dict]) -> dict[Cell, dict]:
    """{(bundle, testset): its newest failure} over failure rows (oldest first, as
    `Store.failures` gives them); a sample's failure is never its cell's, as a sample's
    result is never its result."""
    return {(f["bundle"], f["testset"]): f for f in rows if not is_sample(f)}
