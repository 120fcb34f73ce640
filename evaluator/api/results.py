"""The store's results as they are today: the one object every view reads them through.

README's promise, kept here once: the result of a cell (bundle id, test-set id) is its newest
full run of the bundle *as it is today* on the test set's *current bytes*; a recorded result
(a committed table's cell) stands only where no such run exists (`store.queries.latest`, the
one rule). "Today" is what the registries say now: the digest of the bundle's folder, or of
a trained system under its approach's current folder (`training.systems.digest_today`), and
the sha256 the test set's folder names (its source's, its pin, or its file's). Where a
registry names nothing (a folder gone or broken, a derived set not pinned, which is not
generated just to be named), the newest run's stands. `evaluate`, `status`, `results`,
`compare`, `trend`, `population`, the study tables, the analysis, the site and the Python API
all read results through `Results(store)`.
"""

from __future__ import annotations

from collections.abc import Callable

from evaluator.core.errors import UserError
from evaluator.data import testsets
from evaluator.store.queries import Cell, latest
from evaluator.store.store import Store
from evaluator.training import systems


class Results:
    """`Results(store)`: every cell's result, today's rule applied inside."""

    def __init__(self, store: Store, *, bundle_folders: dict | None = None,
                 digests: dict[str, str] | None = None, shas: dict[str, str] | None = None):
        """`bundle_folders`: the registry's folders when the caller has scanned them;
        `digests` and `shas`: bundles and test sets the caller has resolved or generated
        already (their digests and bytes, by id)."""
        self.store = store
        self._digest_of = systems.digest_today(store, bundle_folders)
        self._digests: dict[str, str | None] = dict(digests or {})
        self._shas: dict[str, str | None] = dict(shas or {})

    def digest_today(self, bundle_id: str) -> str | None:
        if bundle_id not in self._digests:
            self._digests[bundle_id] = self._digest_of(bundle_id)
        return self._digests[bundle_id]

    def sha_today(self, testset_id: str) -> str | None:
        """The bytes a test set's folder names today; None where it names none cheaply."""
        if testset_id not in self._shas:
            self._shas[testset_id] = _sha_today(testset_id)
        return self._shas[testset_id]

    def cells(self, bundle: str | None = None, testset: str | None = None, *,
              recorded: bool = True, samples: bool = False,
              keep: Callable[[dict], bool] | None = None) -> dict[Cell, dict]:
        """{(bundle, testset): its result} (of one bundle or test set where named);
        `recorded`: a committed table's cells count where no run stands; `samples`: a
        --limit run counts too (each labelled by its n); `keep`: only these rows."""
        rows = self.store.results(bundle, testset, recorded=recorded) \
            if self.store.exists() else []
        if keep is not None:
            rows = [r for r in rows if keep(r)]
        return latest(rows, digest_today=self.digest_today, sha_today=self.sha_today,
                      samples=samples)

    def cell(self, bundle: str, testset: str, **options) -> dict | None:
        """One cell's result, or None."""
        return self.cells(bundle, testset, **options).get((bundle, testset))

    def rows(self, bundle: str | None = None, testset: str | None = None,
             **options) -> list[dict]:
        """Every cell's result, sorted by bundle and test set."""
        found = self.cells(bundle, testset, **options)
        return [found[cell] for cell in sorted(found)]


def _sha_today(testset_id: str) -> str | None:
    if testset_id not in testsets.available():
        return None
    try:
        found = testsets.get(testset_id)
        if found.derive is not None and not found.pinned:
            return None  # generated on first use: not worth generating to name it
        return found.sha256
    except (UserError, OSError):
        return None  # a folder broken or a file gone: its newest runs stand
