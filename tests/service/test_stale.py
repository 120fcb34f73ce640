"""Stale results re-run, never duplicated: when a test set's bytes change, exactly its cells'
finished jobs are stale; `qashift admin rerun --stale` queues exactly those as new jobs of
the same submissions, once; the old results stay in the store."""

from __future__ import annotations

import copy
import json

from click.testing import CliRunner
from sqlalchemy import func, select

from evaluator.cli.main import main
from evaluator.service import accounts, db, queue
from evaluator.service.worker import work
from evaluator.store.store import Store
from tests.conftest import FIRST_WORD, tiny_registry


def test_changed_bytes_mark_exactly_their_cells_stale_and_a_rerun_asks_for_them_once(
        database, tmp_path, monkeypatch, small_dev, workspace):
    url, token = database
    sets, _ = tiny_registry(tmp_path, monkeypatch, {"tiny": small_dev, "other": small_dev},
                            {"first-word": FIRST_WORD})
    engine = db.connect(url)
    user = accounts.account_of(engine, token).user_id
    submission, _ = queue.submit(engine, user, [("first-word", "tiny", {}),
                                                ("first-word", "other", {})])
    store = Store(workspace)
    assert work(engine, store, runner="local", exit_when_idle=True) == 2

    def rerun() -> str:
        done = CliRunner().invoke(main, ["admin", "rerun", "--stale"])
        assert done.exit_code == 0, done.output
        return done.output

    assert "0 stale jobs queued again" in rerun()  # nothing changed: nothing stale
    changed = copy.deepcopy(small_dev)
    changed["data"][0]["paragraphs"][0]["qas"][0]["question"] += " (asked again)"
    (sets / "tiny" / "data.json").write_text(json.dumps(changed))
    assert "1 stale jobs queued again" in rerun()
    assert "0 stale jobs queued again" in rerun()  # asked for once, not again while queued
    assert work(engine, store, runner="local", exit_when_idle=True) == 1
    assert "0 stale jobs queued again" in rerun()  # the re-run's result is today's
    jobs = queue.submission_jobs(engine, submission)
    assert jobs[-1]["state"] == "finished", jobs[-1]
    assert [(j["testset"], j["state"]) for j in jobs] == \
        [("tiny", "finished"), ("other", "finished"), ("tiny", "finished")]
    assert jobs[0]["result_key"] != jobs[2]["result_key"]
    with engine.connect() as conn:  # no submission made
        assert conn.execute(select(func.count(db.jobs.c.submission.distinct()))).scalar() == 1
    assert len(store.results()) == 3  # the old result stays, under its own key
    history = queue.history(engine, jobs[2]["id"])
    assert history[0]["note"] == f"re-run: its result is stale (job {jobs[0]['id']})"
