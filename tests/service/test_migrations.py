"""The service's schema is made and moved forward by its revisions (`service.migrations`):
a new database ends at the newest revision with exactly the tables the queries use; a
database made before revisions were kept is moved forward in place, its rows kept; several
processes connecting at once upgrade it once."""

from __future__ import annotations

import threading

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Column, Float, Integer, MetaData, String, Table, Text, create_engine, text

from evaluator.service import accounts, db, migrations, queue


def revision_and_differences(engine) -> tuple[str | None, list]:
    with engine.connect() as conn:
        context = MigrationContext.configure(conn)
        return context.get_current_revision(), compare_metadata(context, db.metadata)


def test_a_new_database_is_at_the_newest_revision_with_the_tables_the_queries_use(database):
    revision, differences = revision_and_differences(db.connect(database[0]))
    assert revision == migrations.head() and differences == []


def test_a_database_made_before_revisions_is_moved_forward_with_its_jobs(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    old = MetaData()  # the tables as the first release made them, without revisions
    Table("users", old, Column("id", Integer, primary_key=True),
          Column("name", String(64), unique=True, nullable=False),
          Column("created_at", Float, nullable=False))
    Table("tokens", old, Column("sha256", String(64), primary_key=True),
          Column("user_id", Integer), Column("scope", String(16)), Column("created_at", Float))
    Table("jobs", old, *[Column(name, kind) for name, kind in (
        ("submission", String(32)), ("user_id", Integer), ("bundle", String(200)),
        ("folder", Text), ("testset", String(200)), ("options", Text), ("state", String(12)),
        ("attempts", Integer), ("worker", String(200)), ("lease_until", Float),
        ("result_key", String(64)), ("failure_class", String(40)), ("message", Text),
        ("created_at", Float), ("updated_at", Float))], Column("id", Integer, primary_key=True))
    Table("job_events", old, Column("id", Integer, primary_key=True), Column("job_id", Integer),
          Column("at", Float), Column("state", String(12)), Column("worker", String(200)),
          Column("note", Text))
    made = create_engine(url)
    old.create_all(made)
    with made.begin() as conn:
        conn.execute(text("INSERT INTO users VALUES (1, 'ann', 0)"))
        conn.execute(text("INSERT INTO jobs (id, submission, user_id, bundle, testset, "
                          "options, state, attempts, created_at, updated_at) VALUES "
                          "(7, 's', 1, 'b', 't', '{}', 'queued', 0, 0, 0)"))
    made.dispose()
    engine = db.connect(url)
    revision, _ = revision_and_differences(engine)
    assert revision == migrations.head()
    claimed = queue.claim(engine, "w1")  # the old job, now asking for no GPU
    assert claimed.id == 7 and queue.job(engine, 7)["gpus"] == 0


def test_several_processes_connecting_at_once_upgrade_the_database_once(database):
    url = database[0]
    engine = db.connect(url)
    with engine.begin() as conn:  # back to an empty database
        for table in [*reversed(db.metadata.sorted_tables), "alembic_version"]:
            conn.execute(text(f"DROP TABLE {table}"))
    engine.dispose()
    errors: list[BaseException] = []

    def connect() -> None:
        try:
            accounts.account_of(db.connect(url), "qs_none")
        except BaseException as exc:  # noqa: BLE001 - the assertion below names it
            errors.append(exc)

    threads = [threading.Thread(target=connect) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    revision, differences = revision_and_differences(create_engine(url))
    assert revision == migrations.head() and differences == []
