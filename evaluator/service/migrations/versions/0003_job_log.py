"""A failed job names the log of its run (a finished one's is its result's)."""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("log_sha256", sa.String(64)))
