"""Quotas: a user's tier (the operator's policy, `tiers:`) limits the submissions a day, the
jobs running at once and the CPU- and GPU-hours a week; the submission over a limit gets 429,
Retry-After and one line saying which limit; what the platform failed is not charged, what
failed through the submission is."""

from __future__ import annotations

import signal
import time

import httpx
import pytest
from click.testing import CliRunner

from evaluator.bundles import policy
from evaluator.cli.main import main
from evaluator.core.errors import ConfigError
from evaluator.service import accounts, db, queue, quotas
from tests.service.test_service import start_server


@pytest.fixture
def student(database, tmp_path, monkeypatch) -> tuple[str, str]:
    """A user of a tier of 3 submissions a day, and her token; (database URL, token)."""
    path = tmp_path / "policy.yaml"
    path.write_text("tiers:\n  student: {submissions_per_day: 3, upload_bytes: 1k}\n")
    monkeypatch.setenv("QASHIFT_POLICY", str(path))
    made = CliRunner().invoke(main, ["admin", "user", "add", "bob", "--tier", "student"])
    assert made.exit_code == 0, made.output
    token = CliRunner().invoke(main, ["admin", "token", "create", "bob"]).output.strip()
    return database[0], token


@pytest.mark.slow  # it starts a server or a worker process
def test_the_submission_past_the_tiers_limit_is_a_429_and_the_platforms_failures_are_free(
        student, workspace):
    url, token = student
    proc, base = start_server(url)
    try:
        def submit() -> httpx.Response:
            return httpx.post(f"{base}/v1/submissions", trust_env=False, timeout=60,
                              json={"bundle": "bert-ensemble", "testsets": ["squad-dev"]},
                              headers={"Authorization": f"Bearer {token}"})

        assert [submit().status_code for _ in range(3)] == [201] * 3
        over = submit()
        assert over.status_code == 429
        assert over.json()["detail"].startswith("3 of 3 submissions today (tier student); "
                                                "the next is possible in ")
        assert 0 < int(over.headers["retry-after"]) <= 86400
        engine = db.connect(url)
        job = queue.claim(engine, "w1")  # the node running it is lost: the platform's doing
        assert queue.finish(engine, job.id, "w1", failure_class="cancelled", message="node lost")
        assert submit().status_code == 201  # not charged for it
        job = queue.claim(engine, "w1")  # this one exits 1: the submission's doing
        assert queue.finish(engine, job.id, "w1", failure_class="nonzero-exit", message="exit 1")
        assert submit().status_code == 429
        big = httpx.post(f"{base}/v1/bundles", content=b"x" * 4096, trust_env=False,
                         headers={"Authorization": f"Bearer {token}"})
        assert big.status_code == 413 and "1,024 bytes of tier student" in big.json()["detail"]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


@pytest.mark.parametrize("tiers, problem", [
    ("[1, 2]", "tiers must map tier names to their limits"),
    ("{Big: {}}", "tier name 'Big'"),
    ("{a: {per_hour: 3}}", "tiers.a must map some of submissions_per_day, upload_bytes, "
                           "running_jobs, cpu_hours_per_week, gpu_hours_per_week"),
    ("{a: {submissions_per_day: -1}}", "tiers.a.submissions_per_day must be a whole number"),
    ("{a: {submissions_per_day: true}}", "tiers.a.submissions_per_day must be a whole number"),
])
def test_a_bad_tier_in_the_policy_is_one_line(tmp_path, tiers, problem):
    path = tmp_path / "policy.yaml"
    path.write_text(f"tiers: {tiers}\n")
    with pytest.raises(ConfigError, match=problem.replace("(", r"\(")):
        policy.Policy.from_file(path)


def test_a_user_of_a_tier_the_policy_does_not_name_is_refused(database):
    refused = CliRunner().invoke(main, ["admin", "user", "add", "carol", "--tier", "gold"])
    assert refused.exit_code != 0 and "tier 'gold': the operator's policy names default" \
        in refused.output


def limited(tmp_path, monkeypatch, tiers: str) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(f"tiers:\n{tiers}")
    monkeypatch.setenv("QASHIFT_POLICY", str(path))


def test_a_tiers_running_jobs_are_capped_while_other_users_jobs_run(database, tmp_path,
                                                                     monkeypatch):
    url, _ = database
    limited(tmp_path, monkeypatch, "  student: {running_jobs: 1}\n")
    CliRunner().invoke(main, ["admin", "user", "add", "bob", "--tier", "student"])
    engine = db.connect(url)
    alice, bob = (accounts.account_of(engine, t).user_id for t in (
        database[1], CliRunner().invoke(main, ["admin", "token", "create", "bob"])
        .output.strip()))
    queue.submit(engine, bob, [("b", "t", {}), ("b", "u", {}), ("b", "v", {})])
    queue.submit(engine, alice, [("a", "t", {})])
    caps = quotas.running_caps()
    assert caps == {"student": 1}
    first = queue.claim(engine, "w1", per_user=None, tier_caps=caps)
    second = queue.claim(engine, "w2", per_user=None, tier_caps=caps)
    assert (first.bundle, second.bundle) == ("b", "a")  # bob's oldest, then alice's
    assert queue.claim(engine, "w3", tier_caps=caps) is None  # bob has his one running
    queue.finish(engine, first.id, "w1", result_key="k")
    assert queue.claim(engine, "w3", tier_caps=caps).bundle == "b"
    assert queue.claim(engine, "w4") is not None  # a worker told of no caps runs it


def test_a_weeks_cpu_hours_are_charged_and_the_platforms_failures_are_free(database, tmp_path,
                                                                          monkeypatch):
    url, token = database
    limited(tmp_path, monkeypatch, "  default: {cpu_hours_per_week: 2}\n")
    engine = db.connect(url)
    user = accounts.account_of(engine, token).user_id
    _, [lost, ran] = queue.submit(engine, user, [("a", "t", {}), ("a", "u", {})])
    for job_id, worker in ((lost, "w1"), (ran, "w2")):
        assert queue.claim(engine, worker).id == job_id
    queue.finish(engine, lost, "w1", failure_class="runner-error", message="node lost",
                 usage=(3 * 3600.0, 0.0))
    assert quotas.hours_over(engine, user, "default") is None  # the platform's: free
    queue.finish(engine, ran, "w2", failure_class="timeout", message="ran past its limit",
                 usage=(2.5 * 3600.0, 0.0))
    over = quotas.hours_over(engine, user, "default")
    assert over.line == ("2.5 of 2 CPU-hours this week (tier default); the next submission "
                         "is possible in 168 h")
    assert 6 * 86400 < over.retry_after_s <= 7 * 86400 + 1
    assert quotas.hours_over(engine, user, "default", now=time.time() + 7 * 86400) is None
