"""The service's tests run on both databases it supports: a SQLite file, and a database of
its own on the PostgreSQL server CI starts (`.ci/postgres.sh`)."""

from __future__ import annotations

import os
import time
import uuid

import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine
from sqlalchemy.exc import OperationalError, ProgrammingError

from evaluator.cli.main import main

PG = os.environ.get("QASHIFT_TEST_PG",
                    "postgresql+psycopg://qashift:qashift@127.0.0.1/qashift_test")


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request, workspace, tmp_path, monkeypatch) -> tuple[str, str]:
    """An empty database named by $QASHIFT_DB (a SQLite file, or a database of its own on the
    PostgreSQL server CI starts), with a user and her token."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'service.sqlite'}"
    else:
        url = request.getfixturevalue("postgres_database")
    monkeypatch.setenv("QASHIFT_DB", url)
    made = CliRunner().invoke(main, ["admin", "user", "add", "alice"])
    assert made.exit_code == 0, made.output
    token = CliRunner().invoke(main, ["admin", "token", "create", "alice"]).output.strip()
    return url, token


@pytest.fixture
def postgres_database():
    """A fresh database on the PostgreSQL server, dropped afterwards."""
    admin = create_engine(PG, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
    except OperationalError:
        pytest.skip(f"no PostgreSQL answers at {PG.split('@')[-1]} (CI starts one: bash "
                    f".ci/postgres.sh)")
    name = f"qashift_t_{uuid.uuid4().hex[:12]}"
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    yield PG.rsplit("/", 1)[0] + "/" + name
    # PostgreSQL's autovacuum worker may be on it; a role without pg_signal_backend (a server
    # set up before .ci/postgres.sh granted it) cannot end that, but it ends in a moment
    for attempt in range(20):
        try:
            with admin.connect() as conn:
                conn.exec_driver_sql(f"DROP DATABASE {name} WITH (FORCE)")
            break
        except ProgrammingError:
            if attempt == 19:
                raise
            time.sleep(0.5)
    admin.dispose()


