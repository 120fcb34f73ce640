"""The latest valid result of a cell: the one rule every report uses.

A cell is (bundle id, test-set id). Of its stored rows, the valid ones are those made from
the bundle's current digest and the test set's current sha256, when the caller knows them
(a result of an edited bundle or a changed data file describes something else); the latest
is the newest of those by creation time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

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


def latest_result(store: Store, bundle: str, testset: str, *, bundle_digest: str | None = None,
                  testset_sha256: str | None = None) -> dict | None:
    """The newest valid stored row of one cell, or None."""
    rows = store.results(bundle, testset) if store.exists() else []
    found = latest_by_cell(rows, bundle_digests={bundle: bundle_digest} if bundle_digest else None,
                           testset_shas={testset: testset_sha256} if testset_sha256 else None)
    return found.get((bundle, testset))
