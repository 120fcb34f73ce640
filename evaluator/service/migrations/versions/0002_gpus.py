"""Jobs say how many GPUs their bundle asks for, so that only a worker with them claims one."""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:  # SQLite alters a table by copying it
        batch.add_column(sa.Column("gpus", sa.Integer, nullable=False, server_default="0"))
