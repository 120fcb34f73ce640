"""The first tables: users, their tokens (hashed), jobs and every change of a job's state."""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None


def upgrade() -> None:
    op.create_table(
        "users",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(64), unique=True, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False))
    op.create_table(
        "tokens",
        sa.Column("sha256", sa.String(64), primary_key=True),
        sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id"), nullable=False),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False))
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("submission", sa.String(32), nullable=False, index=True),
        sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id"), nullable=False),
        sa.Column("bundle", sa.String(200), nullable=False),
        sa.Column("folder", sa.Text),
        sa.Column("testset", sa.String(200), nullable=False),
        sa.Column("options", sa.Text, nullable=False),
        sa.Column("state", sa.String(12), nullable=False, index=True),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("worker", sa.String(200)),
        sa.Column("lease_until", sa.Float),
        sa.Column("result_key", sa.String(64)),
        sa.Column("failure_class", sa.String(40)),
        sa.Column("message", sa.Text),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False))
    op.create_table(
        "job_events",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("job_id", sa.Integer, sa.ForeignKey("jobs.id"), nullable=False, index=True),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("state", sa.String(12), nullable=False),
        sa.Column("worker", sa.String(200)),
        sa.Column("note", sa.Text))
