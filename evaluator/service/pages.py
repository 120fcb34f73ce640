"""The pages the server shows: the results store's site (`analysis.site`, the templates of
`qashift report`, handed in by `qashift serve`: the library never imports the analysis),
kept current. A request that finds the store changed since the pages were
built starts one rebuild in a thread and is answered from the pages as they are; the new ones
replace them whole when done (`site.build` swaps folders), so a reader never sees half a
site. Before the first build ends there is nothing to show: 503 with Retry-After."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from evaluator.core import console
from evaluator.core.errors import UserError
from evaluator.service import cells, logs
from evaluator.service.queue import ENDED
from evaluator.store.store import Store


class Pages:
    """`build(folder)` writes the store's site into `folder` (raising UserError when there is
    nothing to show)."""

    def __init__(self, store: Store, folder: Path, build: Callable[[Path], object],
                 also: Callable[[], tuple] = tuple):
        self.store, self.folder, self.build, self.also = store, folder, build, also
        self.built_for: tuple | None = None  # the store's state the pages show
        self.problem: str | None = None  # why the last build failed, if it did
        self._lock = threading.Lock()
        self._building: threading.Thread | None = None

    def state(self) -> tuple:
        """What the pages depend on: the store's results, recorded rows and failures, and
        what `also` says (the test sets whose results are withheld now)."""
        if not self.store.exists():
            return (0, self.also())
        conn = self.store.conn
        return (*(conn.execute(f"SELECT count(*), max({when}) FROM {table}").fetchone()
                  for table, when in (("results", "created_at"), ("recorded", "created_at"),
                                      ("failures", "id"))), self.also())

    def ready(self) -> bool:
        """Whether there are pages to show; starts a rebuild when the store has changed."""
        now = self.state()
        with self._lock:
            if now != self.built_for and (self._building is None or
                                          not self._building.is_alive()):
                self._building = threading.Thread(target=self._build, args=(now,), daemon=True)
                self._building.start()
        return (self.folder / "index.html").is_file()

    def _build(self, state: tuple) -> None:
        try:
            self.build(self.folder)
            self.problem = None
        except UserError as error:
            self.problem = str(error)
        except Exception as error:  # noqa: BLE001 - a page bug never takes the server down
            self.problem = f"{type(error).__name__}: {error}"
            console.warn(f"the pages could not be built: {self.problem}")
        self.built_for = state


TEMPLATES = Path(__file__).parent / "templates"


def submission_page(submission: str, jobs: list[dict], store: Store,
                    withheld: dict[str, str] | None = None, placed: dict | None = None,
                    stale: set[int] = frozenset()) -> str:
    """A submission's page: each job's state and result with its intervals, and where each
    result came from (the bundle's digest, the test set's bytes, the scorer's and qashift's
    versions, the runner, the worker, the times); `withheld`: the test sets whose results are
    not shown now, and why; `placed`: where its results land on the population's trend;
    `stale`: the jobs whose results are stale (their test set's bytes or scorer changed)."""
    shown, withheld = [], withheld or {}
    for job in jobs:
        row, result = (None, None) if job["testset"] in withheld else \
            cells.job_result(job, store)
        record = json.loads(row["run_record"]) if row else {}
        software = (record.get("details") or {}).get("provenance") or {}
        shown.append({**job, "result": result,
                      "bundle_digest": row and row["bundle_digest"],
                      "testset_sha256": row and row["testset_sha256"],
                      "scorer": row and row["scorer_version"], "runner": row and row["runner"],
                      "qashift": software.get("qashift"), "queued": _utc(job["created_at"]),
                      "withheld": withheld.get(job["testset"]), "stale": job["id"] in stale,
                      "log": logs.text(kept) if job["state"] in ENDED and
                      (kept := logs.kept_log(job, store)) else None,
                      "ended": _utc(job["updated_at"]) if job["state"] in ENDED else None})
    return render("submission.html.j2", submission=submission, jobs=shown,
                  done=all(j["state"] in ENDED for j in jobs), ended=ENDED, placed=placed)


def submit_page(testsets: list[dict]) -> str:
    """The upload page: a token, a bundle archive or id, the test sets (`{id, questions}`);
    it follows the submission in place and shows its results, trend and provenance."""
    return render("submit.html.j2", testsets=testsets)


def render(template: str, **values) -> str:
    import jinja2  # lazy: only the pages need templates

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES),
                             autoescape=True, undefined=jinja2.StrictUndefined)
    return env.get_template(template).render(**values)


def _utc(when: float) -> str:
    return datetime.fromtimestamp(when, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
