"""What a job used: CPU- and GPU-seconds, charged to its user's weekly hours."""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("cpu_s", sa.Float))
        batch.add_column(sa.Column("gpu_s", sa.Float))
