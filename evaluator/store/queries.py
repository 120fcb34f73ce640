"""The latest valid result of a cell: the one rule every report uses.

A cell is (bundle id, test-set id). Of its stored rows, the valid ones are those made from
the bundle's current digest and the test set's current sha256, when the caller knows them
(a result of an edited bundle or a changed data file describes something else); the latest
is the newest of those by creation time.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping

from evaluator.store.store import Store

Cell = tuple[str, str]


def latest_by_cell(rows: Iterable[dict], *, bundle_digests: Mapping[str, str] | None = None,
                   testset_shas: Mapping[str, str] | None = None) -> dict[Cell, dict]:
    """{(bundle, testset): newest valid row} over `rows`.

    `bundle_digests` / `testset_shas` map ids to their current digest; a row of an id they
    name must match it, and ids they do not name are not filtered."""
    bundle_digests, testset_shas = bundle_digests or {}, testset_shas or {}
    latest: dict[Cell, dict] = {}
    for row in rows:
        if bundle_digests.get(row["bundle"], row["bundle_digest"]) != row["bundle_digest"]:
            continue
        if testset_shas.get(row["testset"], row["testset_sha256"]) != row["testset_sha256"]:
            continue
        cell = (row["bundle"], row["testset"])
        if cell not in latest or row["created_at"] > latest[cell]["created_at"]:
            latest[cell] = row
    return latest


def latest_full(rows: Iterable[dict],
                digest_today: Callable[[str], str | None] = lambda _: None) -> list[dict]:
    """The newest full result of every cell (a `--limit` sample is never mixed in), of the
    digest each bundle id names today: `digest_today(id)`, or where that names none (a
    folder gone or broken) the digest of the id's newest row. Runs of any other digest are
    superseded. What every reader of the store's results (analysis, API) means by them."""
    full = sorted((r for r in rows if "limit" not in json.loads(r["options"])),
                  key=lambda r: r["created_at"])
    digests = {row["bundle"]: row["bundle_digest"] for row in full}  # the newest of each id
    for bundle_id in sorted(digests):
        digests[bundle_id] = digest_today(bundle_id) or digests[bundle_id]
    return list(latest_by_cell(full, bundle_digests=digests).values())


def latest_result(store: Store, bundle: str, testset: str, *, bundle_digest: str | None = None,
                  testset_sha256: str | None = None) -> dict | None:
    """The newest valid stored row of one cell, or None."""
    rows = store.results(bundle, testset) if store.exists() else []
    found = latest_by_cell(rows, bundle_digests={bundle: bundle_digest} if bundle_digest else None,
                           testset_shas={testset: testset_sha256} if testset_sha256 else None)
    return found.get((bundle, testset))
