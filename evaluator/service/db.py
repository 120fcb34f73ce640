"""The service's tables and its engine.

The service's database holds who may submit (users, tokens), what was asked (jobs: a bundle
on a test set, grouped by submission) and every change of a job's state (job events); the
results stay in the results store, named by their cell key; the rules of a test set (hidden,
its visibility, its own daily limit) are the service's too. SQLite is the default (a file in
the workspace, WAL, a busy timeout, and every write transaction taking the lock when it
begins, so that two writers never meet half-way: no "database is locked" under load); a
`postgresql+psycopg://` URL names a server shared by several hosts. The tables here are what
the queries use; the schema itself is made and moved forward by `migrations` (a test holds
the two alike).
"""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy import (
    Column,
    Engine,
    Float,
    ForeignKey,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    event,
)

from evaluator.core import settings
from evaluator.core.errors import UserError

ENV = "QASHIFT_DB"
metadata = MetaData()

users = Table(
    "users", metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(64), unique=True, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("tier", String(32), nullable=False, server_default="default"),  # policy's `tiers`
)

tokens = Table(
    "tokens", metadata,
    Column("sha256", String(64), primary_key=True),  # the token itself is never kept
    Column("user_id", ForeignKey("users.id"), nullable=False),
    Column("scope", String(16), nullable=False),  # submit | admin
    Column("created_at", Float, nullable=False),
)

jobs = Table(
    "jobs", metadata,
    Column("id", Integer, primary_key=True),
    Column("submission", String(32), nullable=False, index=True),
    Column("user_id", ForeignKey("users.id"), nullable=False),
    Column("bundle", String(200), nullable=False),
    Column("folder", Text),  # an uploaded bundle's folder (uploads/<digest>/<id>), else None
    Column("testset", String(200), nullable=False),
    Column("options", Text, nullable=False),  # JSON: a --limit sample's limit and seed
    Column("state", String(12), nullable=False, index=True),
    Column("attempts", Integer, nullable=False, default=0),
    Column("worker", String(200)),
    Column("lease_until", Float),
    Column("result_key", String(64)),  # the store's cell key, once finished
    Column("failure_class", String(40)),
    Column("message", Text),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("gpus", Integer, nullable=False, server_default="0"),  # what its bundle asks for
    Column("log_sha256", String(64)),  # a failed job's log in the store (a result has its own)
    # a hidden test set's job: the answer-free input (a store object) the worker runs the
    # bundle on, the cell's key as planned, and the run the worker hands back for scoring
    Column("input_sha256", String(64)),
    Column("cell_key", String(64)),
    Column("output_sha256", String(64)),
    # a running job's log as its worker last sent it: the bytes written, and their tail
    Column("live_log_bytes", Integer),
    Column("live_log", LargeBinary),
    # what the job used, charged to its user's weekly hours: its run's wall seconds times
    # the CPUs (GPUs) its bundle was given
    Column("cpu_s", Float),
    Column("gpu_s", Float),
)

testset_rules = Table(
    "testset_rules", metadata,
    Column("testset", String(200), primary_key=True),
    Column("hidden", Integer, nullable=False, server_default="0"),  # gold kept by the service
    Column("folder", Text),  # a hidden set's folder, which only the scoring process reads
    Column("inputs_may_leave", Integer, nullable=False, server_default="0"),  # to endpoints
    Column("visibility", String(12), nullable=False, server_default="public"),
    Column("visible_after", Float),  # visibility "after": the time its results are shown
    Column("daily_limit", Integer),  # submissions a user may make to it a day (None: tier's)
    Column("updated_at", Float, nullable=False),
)

events = Table(
    "job_events", metadata,
    Column("id", Integer, primary_key=True),
    Column("job_id", ForeignKey("jobs.id"), nullable=False, index=True),
    Column("at", Float, nullable=False),
    Column("state", String(12), nullable=False),
    Column("worker", String(200)),
    Column("note", Text),
)


webhooks = Table(
    "webhooks", metadata,
    Column("submission", String(32), primary_key=True),
    Column("url", Text, nullable=False),  # an origin the operator's policy lists
    Column("secret", Text, nullable=False),  # the submitter's HMAC-SHA256 key
)

deliveries = Table(  # the outbox: a row per terminal state of a job with a webhook
    "deliveries", metadata,
    Column("id", Integer, primary_key=True),
    Column("job_id", ForeignKey("jobs.id"), nullable=False, index=True),
    Column("state", String(12), nullable=False),
    Column("body", Text),  # made at the first attempt; every retry sends the same bytes
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("next_at", Float, nullable=False, index=True),
    Column("delivered_at", Float),
    Column("last_error", Text),
)


def url_of(given: str | None = None) -> str:
    """The database URL: `--db`, else $QASHIFT_DB, else a SQLite file in the workspace."""
    url = given or os.environ.get(ENV)
    if url:
        return url
    return f"sqlite:///{settings.current().workspace / 'service.sqlite'}"


def connect(url: str | None = None) -> Engine:
    """The engine of the service's database, brought to the newest schema
    (`migrations.upgrade`)."""
    url = url_of(url)
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 30, "isolation_level": None})

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_connection, _record) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _begin(connection) -> None:  # the write lock taken up front, never half-way
            connection.exec_driver_sql("BEGIN IMMEDIATE")
    elif url.startswith(("postgresql", "sqlite")):
        engine = create_engine(url, pool_pre_ping=True)
    else:
        raise UserError(f"database URL {url!r}: give sqlite:///PATH or "
                        f"postgresql+psycopg://USER@HOST/NAME")
    from evaluator.service import migrations  # lazy: its revisions import this module

    migrations.upgrade(engine)
    return engine
