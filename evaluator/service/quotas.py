"""What a user may still submit: the limits of the user's tier (the operator's policy,
`tiers:`), counted from the jobs table. A submission counts against the day's limit unless
the platform failed it: when every job of it ended failed for a cause of the platform's (a
node lost, the runner or the evaluator failing, the data unobtainable), the submitter is not
charged; a job that failed through the submission (a non-zero exit, a timeout, malformed
predictions) and a job the submitter cancelled count."""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import Engine, select

from evaluator.bundles import policy
from evaluator.service.db import jobs

DAY_S = 86400.0
PLATFORM_FAILURES = frozenset({"cancelled", "runner-error", "internal-error",
                               "data-unavailable", "no-gpu"})


@dataclass(frozen=True)
class Over:
    """A limit reached: the line that says which, and the seconds until it frees."""
    line: str
    retry_after_s: int


def counted_submissions(engine: Engine, user_id: int, since: float,
                        testset: str | None = None) -> list[float]:
    """When each of the user's submissions (to `testset`, where given) made since `since` was
    made, oldest first, leaving out those the platform failed."""
    with engine.connect() as conn:
        rows = conn.execute(select(jobs.c.submission, jobs.c.created_at, jobs.c.state,
                                   jobs.c.failure_class)
                            .where(jobs.c.user_id == user_id, jobs.c.created_at >= since,
                                   *([jobs.c.testset == testset] if testset else [])))
        by_submission: dict[str, list] = {}
        for row in rows:
            by_submission.setdefault(row.submission, []).append(row)
    return sorted(min(r.created_at for r in found) for found in by_submission.values()
                  if not all(r.state == "failed" and r.failure_class in PLATFORM_FAILURES
                             for r in found))


def submission_over(engine: Engine, user_id: int, tier: str,
                    now: float | None = None) -> Over | None:
    """Whether one more submission would pass the tier's daily limit: None, or what is over."""
    limit = policy.current().tier(tier).get("submissions_per_day")
    if limit is None:
        return None
    now = time.time() if now is None else now
    return _over(counted_submissions(engine, user_id, now - DAY_S), limit, now,
                 f"submissions today (tier {tier})")


def testset_over(engine: Engine, user_id: int, testset: str, limit: int | None,
                 now: float | None = None) -> Over | None:
    """Whether one more submission to `testset` would pass the set's own daily limit (a
    hidden set's is smaller than a tier's: each score read is one more look at it)."""
    if limit is None:
        return None
    now = time.time() if now is None else now
    return _over(counted_submissions(engine, user_id, now - DAY_S, testset), limit, now,
                 f"submissions today to test set {testset}")


def _over(made: list[float], limit: int, now: float, what: str) -> Over | None:
    """The limit reached by `made` (submission times, oldest first), or None."""
    if len(made) < limit:
        return None
    frees = made[len(made) - limit] + DAY_S - now if limit else DAY_S
    return Over(f"{len(made)} of {limit} {what}; the next is possible in "
                f"{max(1, round(frees / 60))} min", max(1, int(frees) + 1))


WEEK_S = 7 * DAY_S
HOURS = {"cpu_hours_per_week": ("cpu_s", "CPU"), "gpu_hours_per_week": ("gpu_s", "GPU")}


def hours_over(engine: Engine, user_id: int, tier: str,
               now: float | None = None) -> Over | None:
    """Whether the user has used the CPU- or GPU-hours of the tier's week (the last seven
    days, leaving out jobs the platform failed): None, or which."""
    limits = policy.current().tier(tier)
    now = time.time() if now is None else now
    for key, (column, what) in HOURS.items():
        limit = limits.get(key)
        if limit is None:
            continue
        with engine.connect() as conn:
            used = [(r.updated_at, r.used or 0.0) for r in conn.execute(
                select(jobs.c.updated_at, jobs.c[column].label("used"), jobs.c.failure_class)
                .where(jobs.c.user_id == user_id, jobs.c.updated_at >= now - WEEK_S,
                       jobs.c[column].is_not(None)).order_by(jobs.c.updated_at))
                if r.failure_class not in PLATFORM_FAILURES]
        total = sum(u for _, u in used)
        if total < limit * 3600:
            continue
        left, frees = total, WEEK_S
        for when, amount in used:  # the oldest use leaves the week first
            left -= amount
            if left < limit * 3600:
                frees = when + WEEK_S - now
                break
        return Over(f"{total / 3600:.1f} of {limit} {what}-hours this week (tier {tier}); "
                    f"the next submission is possible in {max(1, round(frees / 3600))} h",
                    max(1, int(frees) + 1))
    return None


def running_caps() -> dict[str, int]:
    """The jobs a user of each tier may have running at once (the policy's `running_jobs`;
    a tier the policy does not name is held to the default's)."""
    return {name: limits["running_jobs"] for name, limits in policy.current().tiers.items()
            if "running_jobs" in limits}


def upload_over(tier: str, size: int) -> Over | None:
    """Whether an upload of `size` bytes is over the tier's limit."""
    limit = policy.current().tier(tier).get("upload_bytes")
    if limit is None or size <= limit:
        return None
    return Over(f"the upload is over the {limit:,} bytes of tier {tier}", 0)
