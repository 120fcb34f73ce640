"""The service database's schema, one Alembic revision at a time (`versions/`). Every server,
worker and `qashift admin` brings the database to the newest revision when it connects
(`upgrade`), one at a time (SQLite: the write lock; PostgreSQL: an advisory lock), so a
database made by an older version is moved forward in place and never rebuilt."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, inspect

HERE = Path(__file__).parent
LOCK = 0x71A5_4F7  # the advisory lock PostgreSQL upgraders take in turn
FIRST = "0001"  # the revision of the tables made before revisions were kept


def config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(HERE))
    return cfg


def head() -> str:
    return ScriptDirectory.from_config(config()).get_current_head()


def upgrade(engine: Engine) -> None:
    """Bring the database to the newest revision, in one transaction. A database whose tables
    were made before revisions were kept (no version row, the first revision's tables) is
    taken to be at that first revision."""
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({LOCK})")
        current = MigrationContext.configure(conn).get_current_revision()
        if current == head():
            return
        cfg = config()
        cfg.attributes["connection"] = conn
        if current is None and "jobs" in inspect(conn).get_table_names():
            command.stamp(cfg, FIRST)
        command.upgrade(cfg, "head")
