"""Alembic's entry: the revisions run on the connection `migrations.upgrade` holds."""

from alembic import context

from evaluator.service.db import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata)
with context.begin_transaction():
    context.run_migrations()
