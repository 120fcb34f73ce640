"""The jobs table as the queue, on SQLite and PostgreSQL: users take turns, a per-user cap
holds, a job is claimed by one worker at a time, its state only moves forward, and a worker
that lost its lease can neither renew nor end the job."""

from __future__ import annotations

import time

from evaluator.service import accounts, db, queue


def users(engine, *names: str) -> list[int]:
    return [accounts.add_user(engine, name) for name in names]


def test_users_take_turns_however_many_jobs_one_of_them_queued(database):
    engine = db.connect(database[0])
    a, b = users(engine, "ann", "bob")
    queue.submit(engine, a, [("x", f"a{k}", {}) for k in range(3)])
    queue.submit(engine, b, [("x", f"b{k}", {}) for k in range(2)])  # queued after all of a's
    order = []
    while (job := queue.claim(engine, "w1")) is not None:
        order.append(job.testset)
        assert queue.finish(engine, job.id, "w1", result_key="k" * 64)
    assert order == ["a0", "b0", "a1", "b1", "a2"]


def test_a_per_user_cap_leaves_the_others_jobs_to_run(database):
    engine = db.connect(database[0])
    a, b = users(engine, "ann", "bob")
    queue.submit(engine, a, [("x", f"a{k}", {}) for k in range(3)])
    first = queue.claim(engine, "w1", per_user=1)
    assert first.testset == "a0"
    assert queue.claim(engine, "w2", per_user=1) is None  # ann has one running: the cap
    queue.submit(engine, b, [("x", "b0", {})])
    assert queue.claim(engine, "w2", per_user=1).testset == "b0"
    assert queue.claim(engine, "w3").testset == "a1"  # no cap: the next of ann's


def test_a_state_only_moves_forward_and_a_lost_lease_ends_nothing(database):
    engine = db.connect(database[0])
    [a] = users(engine, "ann")
    _, [job_id] = queue.submit(engine, a, [("x", "s", {})])
    first = queue.claim(engine, "w1", lease_s=0.5)
    assert queue.claim(engine, "w2", lease_s=0.5) is None  # held
    time.sleep(0.7)  # w1's lease lapses
    second = queue.claim(engine, "w2", lease_s=30)
    assert second.id == first.id == job_id and second.attempt == 2
    assert not queue.renew(engine, job_id, "w1")  # w1 holds it no more
    assert not queue.finish(engine, job_id, "w1", result_key="k" * 64)
    assert queue.finish(engine, job_id, "w2", failure_class="timeout", message="too slow")
    assert not queue.finish(engine, job_id, "w2", result_key="k" * 64)  # ended once
    assert not queue.cancel(engine, job_id)  # nor cancelled after it ended
    assert [e["state"] for e in queue.history(engine, job_id)] == \
        ["queued", "running", "running", "failed"]
    assert queue.job(engine, job_id)["state"] == "failed"


def test_a_stored_cell_is_finished_when_submitted(database):
    engine = db.connect(database[0])
    [a] = users(engine, "ann")
    _, [done, queued] = queue.submit(engine, a, [("x", "s", {}), ("x", "t", {})],
                                     stored={0: "k" * 64})
    assert queue.job(engine, done)["state"] == "finished"
    assert queue.claim(engine, "w1").id == queued


def test_a_job_asking_for_gpus_goes_only_to_a_worker_that_has_them(database):
    engine = db.connect(database[0])
    [a] = users(engine, "ann")
    _, [gpu_job] = queue.submit(engine, a, [("x", "s", {})], gpus=2)
    _, [cpu_job] = queue.submit(engine, a, [("y", "s", {})])
    assert queue.claim(engine, "cpu-only").id == cpu_job  # the GPU job is passed over
    assert queue.claim(engine, "cpu-only") is None
    assert queue.claim(engine, "one-gpu", gpus=1) is None
    assert queue.claim(engine, "two-gpus", gpus=2).id == gpu_job
