"""Webhooks: a submission's URL and secret, and an outbox of deliveries, one per terminal
state of each of its jobs; a running job's live log."""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("live_log_bytes", sa.Integer))
        batch.add_column(sa.Column("live_log", sa.LargeBinary))
    op.create_table(
        "webhooks",
        sa.Column("submission", sa.String(32), primary_key=True),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("secret", sa.Text, nullable=False),
    )
    op.create_table(
        "deliveries",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("job_id", sa.Integer, sa.ForeignKey("jobs.id"), nullable=False, index=True),
        sa.Column("state", sa.String(12), nullable=False),
        sa.Column("body", sa.Text),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("next_at", sa.Float, nullable=False, index=True),
        sa.Column("delivered_at", sa.Float),
        sa.Column("last_error", sa.Text),
    )
